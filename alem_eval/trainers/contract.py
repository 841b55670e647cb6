"""The contract between the training library (:mod:`alem_eval.trainers.planning`), the driver
(:mod:`alem_eval.trainers.driver`) and the trainers (:mod:`alem_eval.trainers.common`): what the
driver reports (:class:`Progress`, :class:`CellResult`, :class:`TrainingStopped`), the episode
totals a trainer's update reports (:data:`EPISODE_KEYS`), the per-cell metrics log's name, and
a run's settings and their identity (:func:`training_settings`, :func:`config_identity`,
:func:`settings_diff`). It imports no other trainer module.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import TrainConfig

METRICS_LOG = "train_log.jsonl"  # per cell: one JSON line per compiled call (see the driver)
# The episode totals a trainer's update reports (``alem_eval.trainers.common.log_episodes``), summed
# over the episodes that ended; the driver turns them into per-episode means.
EPISODE_KEYS = (
    "episodes",
    "return",
    "length",
    "achievement_pct",
    "normal_achievement_pct",
    "coordination_achievement_pct",
)


@dataclass
class Progress:
    """What the driver reports after every compiled call (and once while compiling)."""

    phase: str  # "compiling" | "training" | "saving" | "stopping" | "done"
    cells: tuple[str, ...]
    updates: int
    num_updates: int
    steps: int  # env steps per cell so far
    total_steps: int  # per cell
    steps_per_s: float  # env steps per second, all cells together
    mean_return: float | None
    achievement_pct: float | None
    eta_s: float | None


@dataclass
class CellResult:
    cell_dir: Path
    summary: dict


class TrainingStopped(KeyboardInterrupt):
    """Training stopped on SIGTERM or Ctrl-C; its state at ``updates`` is saved in each
    cell's ``_resume/`` (``updates == 0``: stopped before the first update, nothing to
    save), and a rerun of the same command continues. A KeyboardInterrupt, so that nothing
    catches it by accident."""

    def __init__(self, signum: int, updates: int, cell_dirs: Sequence[Path]):
        super().__init__(signum, updates)
        self.signum, self.updates, self.cell_dirs = signum, updates, list(cell_dirs)

    @property
    def signal_name(self) -> str:
        import signal

        return signal.Signals(self.signum).name


def training_settings(
    run: RunConfig, tcfg: TrainConfig, partners: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Every setting a run's trained state depends on, the seed aside, flat and JSON-ready
    (saved with resume state, so a mismatch can say what differs). ``partners``: the frozen
    partners' identity (``PartnerRecord.identity()``; None: self-play)."""
    out: dict[str, Any] = {"algorithm": run.algorithm}
    out.update({f"network.{k}": v for k, v in dataclasses.asdict(run.network).items()})
    out.update({f"env.{k}": v for k, v in dataclasses.asdict(run.env).items()})
    out.update(dataclasses.asdict(dataclasses.replace(tcfg, seed=0)))
    if partners is not None:
        out.update({f"partners.{k}": v for k, v in partners.items()})
    return json.loads(json.dumps(out, default=list))


def config_identity(
    run: RunConfig, tcfg: TrainConfig, partners: Mapping[str, Any] | None = None
) -> str:
    """A short hash of :func:`training_settings`' content (the seed does not enter)."""
    parts: list[Any] = [
        run.algorithm,
        run.network_key,
        dataclasses.asdict(run.env),
        dataclasses.asdict(dataclasses.replace(tcfg, seed=0)),
    ]
    if partners is not None:  # self-play keeps the identity it always had
        parts.append(dict(partners))
    payload = json.dumps(parts, sort_keys=True, default=list)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def partner_identity(trainer: Any) -> dict[str, Any] | None:
    """The identity of a trainer's frozen partners (None: self-play)."""
    partners = getattr(trainer, "partners", None)
    return None if partners is None else partners.record.identity()


def settings_diff(saved: Mapping[str, Any] | None, now: Mapping[str, Any], limit: int = 4) -> str:
    """``"total_timesteps 512 -> 768, lr 0.001 -> 0.0002"`` (or "" when unknown)."""
    if not saved:
        return ""
    keys = [k for k in now if saved.get(k) != now[k]] + [k for k in saved if k not in now]
    parts = [f"{k} {saved.get(k)!r} -> {now.get(k)!r}" for k in keys[:limit]]
    return ", ".join(parts) + (f" (+{len(keys) - limit} more)" if len(keys) > limit else "")
