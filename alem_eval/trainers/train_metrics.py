"""Training metrics: progress reports and the JSONL log of a group.

What :mod:`alem_eval.trainers.driver` records as a group trains (the trailing window and
:func:`~alem_eval.trainers.run_state.summarise` are :mod:`alem_eval.trainers.run_state`'):
:class:`Reporter` builds the :class:`~alem_eval.trainers.contract.Progress` reports for
``on_progress``, and
:class:`MetricsLog` appends one JSON line per event and cell to ``<cell>/train_log.jsonl``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from alem_eval.trainers.contract import METRICS_LOG, Progress
from alem_eval.trainers.run_state import Group, RunState, Window, summarise


class Reporter:
    """Builds :class:`Progress` reports for ``on_progress`` (nothing without one)."""

    def __init__(self, group: Group, on_progress: Callable[[Progress], None] | None):
        self.group, self.on_progress = group, on_progress

    def __call__(
        self, phase: str, updates: int, window: Window, sps: float = 0.0, eta: float | None = None
    ) -> None:
        if self.on_progress is None:
            return
        g = self.group
        spu = g.steps_per_update
        self.on_progress(
            Progress(
                phase,
                g.ids,
                updates,
                g.num_updates,
                updates * spu,
                g.num_updates * spu,
                sps,
                window.mean_over_seeds(g.num_seeds, "mean_episode_return"),
                window.mean_over_seeds(g.num_seeds, "achievement_pct"),
                eta,
            )
        )


class MetricsLog:
    """``<cell>/train_log.jsonl``, appended: a ``start`` line per process, one ``chunk``
    line per compiled call (that call's per-update means for this seed: one line per
    update whenever an update outlasts ``chunk_seconds``, as at the released sizes),
    ``saved`` / ``stopped`` / ``done`` lines. Every line is flushed as written."""

    def __init__(self, group: Group, run: RunState):
        self.group, self.run = group, run
        self.files: list = []

    def __enter__(self) -> MetricsLog:
        for d in self.group.cell_dirs:
            d.mkdir(parents=True, exist_ok=True)
            self.files.append((d / METRICS_LOG).open("a", encoding="utf-8"))
        self.start(self.run)
        return self

    def __exit__(self, *exc: Any) -> None:
        for f in self.files:
            f.close()

    def _write(self, lines: Sequence[dict]) -> None:
        for f, line in zip(self.files, lines, strict=True):
            f.write(json.dumps(line, default=_jsonable) + "\n")
            f.flush()

    def _common(self, event: str, run: RunState) -> dict:
        return {
            "event": event,
            "time": round(time.time(), 3),
            "update": run.updates,
            "num_updates": self.group.num_updates,
            "env_steps": run.updates * self.group.steps_per_update,
        }

    def start(self, run: RunState) -> None:
        line = {
            **self._common("start", run),
            "resumed_from": run.resumed_from,
            "cells": list(self.group.ids),
            "devices": self.group.device_note,
        }
        self._write([{**line, "seed": t.seed} for t in self.group.tcfgs])

    def chunk(self, run: RunState, n: int, dt: float, totals: dict, *, compiling: bool) -> None:
        """``compiling``: this call's time includes compilation."""
        base = {
            **self._common("chunk", run),
            "wall_s": round(dt, 4),
            "env_steps_per_s": round(n * self.group.steps_per_update / dt, 2),
            "updates_in_call": n,
            "compiling": compiling,
        }
        self._write(
            [
                {**base, **summarise(n, {k: float(v[i]) for k, v in totals.items()})}
                for i in range(self.group.num_seeds)
            ]
        )

    def event(self, event: str, run: RunState, **extra: Any) -> None:
        line = {**self._common(event, run), **extra}
        self._write([line] * self.group.num_seeds)


def _jsonable(o: Any) -> Any:
    if isinstance(o, (np.generic,)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
