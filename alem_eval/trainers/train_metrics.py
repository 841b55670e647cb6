"""Training metrics: the trailing window, progress reports and the JSONL log of a group.

What :mod:`alem_eval.trainers.driver` records as a group trains: :func:`summarise` turns
per-seed sums over updates into means (reward per env step, episode means over the
episodes that ended, per-update losses and schedules), :class:`Window` keeps the sums of
the trailing updates (the "final" metrics), :class:`Reporter` builds the
:class:`~alem_eval.trainers.planning.Progress` reports for ``on_progress``, and
:class:`MetricsLog` appends one JSON line per event and cell to ``<cell>/train_log.jsonl``.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from alem_eval.trainers.planning import EPISODE_KEYS, METRICS_LOG, Progress

if TYPE_CHECKING:  # the driver's types only: the driver imports this module
    from alem_eval.trainers.driver import Group, RunState


def summarise(n_updates: int, tot: dict[str, float]) -> dict[str, Any]:
    """Per-seed sums over ``n_updates`` updates -> means: reward per env step, episode
    means over the episodes that ended, per-update means of losses and schedules."""
    ep = tot.get("episodes", 0.0)
    out: dict[str, Any] = {
        "episodes": ep,
        "reward_per_step": tot["reward"] / tot["env_steps"] if tot.get("env_steps") else None,
    }
    for k in EPISODE_KEYS[1:]:
        out[f"mean_episode_{k}" if k in ("return", "length") else k] = (
            tot[k] / ep if ep > 0 else None
        )
    for k, v in tot.items():
        if k.startswith(("loss/", "sched/")):
            out[k] = v / max(1, n_updates)
    return out


class Window:
    """Per-seed totals over the trailing ``size`` updates (for "final" metrics)."""

    def __init__(self, size: int):
        self.size = max(1, size)
        self.chunks: deque = deque()

    def add(self, n: int, totals: dict[str, np.ndarray]) -> None:
        self.chunks.append((n, totals))
        # drop the oldest call while the others still cover the window
        while (
            len(self.chunks) > 1 and sum(c[0] for c in self.chunks) - self.chunks[0][0] >= self.size
        ):
            self.chunks.popleft()

    def means(self, i: int) -> dict[str, Any]:
        if not self.chunks:
            return {}
        tot = {k: sum(float(c[1][k][i]) for c in self.chunks) for k in self.chunks[0][1]}
        n_updates = sum(c[0] for c in self.chunks)
        return {"updates_in_window": n_updates, **summarise(n_updates, tot)}

    def mean_over_seeds(self, num_seeds: int, key: str) -> float | None:
        got = [self.means(i).get(key) for i in range(num_seeds)] if self.chunks else []
        vals = [float(v) for v in got if v is not None]
        return float(np.mean(vals)) if vals else None


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
