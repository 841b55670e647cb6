"""The state of a group of cells trained together, apart from the driver that runs it:
:class:`Group` (what the cells share, and the compiled functions), :class:`RunState` (the
training state between compiled calls, with its :class:`Clock` and the trailing
:class:`Window` of per-seed totals for the "final" metrics) and :func:`summarise` (per-seed
sums -> means). :mod:`alem_eval.trainers.driver` builds and advances them;
:mod:`alem_eval.trainers.train_metrics` reports and logs them.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import TrainConfig
from alem_eval.trainers.contract import EPISODE_KEYS
from alem_eval.trainers.resume import ResumeStore

if TYPE_CHECKING:
    from alem_eval.trainers.common import Trainer


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


@dataclass
class Group:
    """What the cells trained together share, and the compiled functions."""

    trainer: Trainer
    runs: list[RunConfig]
    tcfgs: list[TrainConfig]
    cell_dirs: list[Path]
    ids: tuple[str, ...]
    store: ResumeStore
    keys: Any  # [S, 2] the seeds' training keys
    plan: dict  # per-seed arrays of Trainer.plan
    shape: Any  # the stacked state's ShapeDtypeStructs
    shardings: Any
    device_note: str
    init: Callable
    update_n: Callable

    @property
    def num_seeds(self) -> int:
        return len(self.runs)

    @property
    def num_updates(self) -> int:
        return self.tcfgs[0].num_updates

    @property
    def steps_per_update(self) -> int:
        return self.tcfgs[0].steps_per_update


@dataclass
class Clock:
    """Seconds and updates over all the calls that trained a group (resumes included).
    The first, compiling call of each process is not timed."""

    started: float  # time.perf_counter() when this process began the group
    prior_wall: float = 0.0  # timed training seconds of earlier processes
    prior_timed: int = 0  # their timed updates
    prior_elapsed: float = 0.0  # their seconds in all
    train_wall: float = 0.0
    timed_updates: int = 0
    compile_s: float | None = None

    @property
    def wall(self) -> float:
        return self.prior_wall + self.train_wall

    @property
    def timed(self) -> int:
        return self.prior_timed + self.timed_updates

    @property
    def elapsed(self) -> float:
        return self.prior_elapsed + time.perf_counter() - self.started

    def meta(self) -> dict:
        return {"wall_s": self.wall, "timed_updates": self.timed, "elapsed_s": self.elapsed}


@dataclass
class RunState:
    """The group's training state between compiled calls."""

    state: Any  # the stacked RunnerState (device arrays)
    updates: int  # updates ``state`` holds
    resumed_from: int
    saved_at: int  # updates of the last resume save (or of the state resumed from)
    clock: Clock
    window: Window
