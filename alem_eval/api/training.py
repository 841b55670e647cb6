"""``alem_eval.train``: (re)generate cells in the released format with the trainers
(``alem-eval train`` and :func:`train` both call
:func:`alem_eval.trainers.planning.train` and draw with :class:`TrainDisplay`).

Importing this module imports no JAX (the trainers load on the first call).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import frame, jsonable
from alem_eval.api.cells import Cells, selector_strings
from alem_eval.core.progress import Reporter
from alem_eval.trainers.planning import GroupOutcome, TrainEvents, TrainGroup, TrainPlan

if TYPE_CHECKING:
    import pandas as pd

    from alem_eval.trainers.contract import Progress


# ----------------------------------------------------------------------------------------
# What a person sees
# ----------------------------------------------------------------------------------------
def _fmt_steps(n: float) -> str:
    for unit, k in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= k:
            return f"{n / k:.2f}{unit}"
    return f"{n:.0f}"


def _fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def describe(p: Progress) -> str:
    steps = f"{_fmt_steps(p.steps)}/{_fmt_steps(p.total_steps)} steps"
    if p.phase == "compiling":
        return "compiling (the Alem step takes minutes to compile on CPU)..."
    if p.phase == "saving":
        return f"{steps}  saving..."
    if p.phase == "done":
        return f"{steps}  done"
    ret = "-" if p.mean_return is None else f"{p.mean_return:.2f}"
    ach = "-" if p.achievement_pct is None else f"{100 * p.achievement_pct:.1f}%"
    return (
        f"update {p.updates:,}/{p.num_updates:,}  {steps}  {p.steps_per_s:,.0f} steps/s  "
        f"return {ret}  ach {ach}  ETA {_fmt_time(p.eta_s)}"
    )


def train_reporter(log_every: float, *, live: bool | None = None) -> Reporter:
    """Training progress: a bar per group when live; in a batch log one dated line per
    report, while training at most one per ``log_every`` seconds per group (0: every
    compiled call), the other phases and the last update always."""
    return Reporter(every_s=log_every, live=live, dated=True, last_line=False)


class TrainDisplay(TrainEvents):
    """Training as a person follows it on stderr: the plan, progress (a bar per group when
    live, dated lines in a batch log) and a line per trained cell (``alem-eval train``
    and :func:`train` draw with it)."""

    def __init__(self, reporter: Reporter):
        self.reporter = reporter

    def planned(self, plan: TrainPlan) -> None:
        if not plan.chosen:
            self.reporter.note(f"no cells in this share of {plan.selected}")
        for cell, where in plan.skipped:
            self.reporter.note(f"{cell.id}: already trained in {where} (--force retrains)")
        for g in plan.groups:
            self.reporter.note(g.describe(), soft_wrap=True)

    def progress(self, group: TrainGroup, p: Progress) -> None:
        self.reporter.update(
            group.label,
            description=group.label,
            completed=p.steps,
            total=p.total_steps,
            info=describe(p),
            line=f"{group.label}: {describe(p)}",
            force=p.phase != "training" or p.updates >= p.num_updates,
        )

    def finished(self, outcome: GroupOutcome) -> None:
        if outcome.results is None:
            self.reporter.note(
                f"{outcome.group.label}: stopped after --max-updates; rerun to continue"
            )
            return
        for c, r in zip(outcome.group.cells, outcome.results, strict=True):
            s = r.summary
            ret = (s.get("final_metrics") or {}).get("mean_episode_return")
            # wall_time_s counts every second, the first (compiling, untimed) call's
            # included; steps_per_second is None when every update ran in that call
            sps = s.get("steps_per_second")
            self.reporter.note(
                f"{c.id}: {s['total_timesteps']:,} steps in {_fmt_time(s['wall_time_s'])} "
                f"({s['compile_time_s']:.0f}s of it compiling), "
                f"{'-' if sps is None else f'{sps:,.0f}'} "
                f"steps/s; final return {'-' if ret is None else f'{ret:.2f}'} -> {r.cell_dir}",
                soft_wrap=True,
            )


# ----------------------------------------------------------------------------------------
# The function
# ----------------------------------------------------------------------------------------
class _Recorder(TrainEvents):
    """The plan and outcomes of a run, forwarded to ``display`` (None: shown to nobody)."""

    def __init__(self, display: TrainEvents | None):
        self.display = display or TrainEvents()
        self.plan: TrainPlan | None = None
        self.outcomes: list[GroupOutcome] = []

    def planned(self, plan: TrainPlan) -> None:
        self.plan = plan
        self.display.planned(plan)

    def progress(self, group: TrainGroup, p: Progress) -> None:
        self.display.progress(group, p)

    def finished(self, outcome: GroupOutcome) -> None:
        self.outcomes.append(outcome)
        self.display.finished(outcome)


@dataclass(frozen=True)
class Training:
    """What :func:`train` did, one row per cell (``.rows``): ``cell``, ``status``
    (``trained`` | ``already trained`` | ``stopped`` (``max_updates``, resumable) |
    ``planned`` (``dry_run``)), ``path`` and, once trained, ``total_timesteps``,
    ``wall_time_s``, ``compile_time_s``, ``steps_per_second``, ``final_return``."""

    rows: tuple[dict[str, Any], ...]

    def to_frame(self) -> pd.DataFrame:
        return frame(self.rows, fractions=False)

    def to_json(self) -> dict[str, Any]:
        return {"cells": jsonable(list(self.rows))}


def _rows(plan: TrainPlan | None, outcomes: list[GroupOutcome], out: Path) -> list[dict]:
    if plan is None:
        return []
    rows = [{"cell": c.id, "status": "already trained", "path": str(w)} for c, w in plan.skipped]
    done = {o.group.label: o for o in outcomes}
    for g in plan.groups:
        outcome = done.get(g.label)
        for k, c in enumerate(g.cells):
            row: dict[str, Any] = {"cell": c.id, "path": str(out / c.id)}
            if outcome is None:
                row["status"] = "planned"
            elif outcome.results is None:
                row["status"] = "stopped"
            else:
                s = outcome.results[k].summary
                row.update(
                    status="trained",
                    path=str(outcome.results[k].cell_dir),
                    total_timesteps=s.get("total_timesteps"),
                    wall_time_s=s.get("wall_time_s"),
                    compile_time_s=s.get("compile_time_s"),
                    steps_per_second=s.get("steps_per_second"),
                    final_return=(s.get("final_metrics") or {}).get("mean_episode_return"),
                )
            rows.append(row)
    return rows


def train(
    cells: Cells,
    *,
    out: str | Path = "runs",
    total_timesteps: int | None = None,
    num_envs: int | None = None,
    num_steps: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    from_config: str | Path | None = None,
    source: str | None = None,
    shard: str | None = None,
    group_size: int | None = None,
    checkpoint_every: float = 600.0,
    log_every: float = 60.0,
    max_updates: int | None = None,
    fresh: bool = False,
    force: bool = False,
    dry_run: bool = False,
    partners: Cells | None = None,
    split: str | None = None,
    splits: str | Path | None = None,
    focal_slots: int | None = None,
    progress: bool | None = None,
    display: TrainEvents | None = None,
) -> Training:
    """Train ``cells`` (selectors such as ``"1B/ippo-rnn/hard/seed3"``, or ``Cell`` s:
    their ids) with the alem-eval trainers into ``out/<cell id>`` in the released
    checkpoint format, as ``alem-eval train`` (the same options, by the same names;
    ``overrides`` is ``--set``: ``{"LR": 1e-4}``). Hyperparameters: each cell's released
    ``config.json`` when ``source`` holds it (or ``from_config``), else the upstream yaml;
    ``overrides`` and ``total_timesteps`` win over both. A rerun resumes
    (``<cell>/_resume/``); ``force`` retrains complete cells; ``dry_run`` only plans.
    ``partners``: train with frozen partners (selectors or ``Cell`` s of ``source``, the
    Hub without one) playing the other slots with their greedy policies, one drawn per env
    and episode; ``split`` / ``splits`` keep the partners of that split
    (:mod:`alem_eval.hub.splits`); ``focal_slots``: 1 or 2 of the 3 slots the trained
    policy takes (default 1). ippo-rnn and mappo-rnn (``docs/splits.md``).
    ``progress``: the plan, a bar per group and a line per cell on stderr (None: on a
    terminal or in Jupyter; False: none); ``display`` draws instead (``alem-eval train``'s
    :class:`TrainDisplay`). A signal raises
    :class:`~alem_eval.trainers.contract.TrainingStopped` (its state saved).
    Returns :class:`Training` (``.to_frame()``: one row per cell)."""
    from alem_eval.core.progress import live_display
    from alem_eval.hub.selectors import parse_shard
    from alem_eval.trainers.planning import TrainOptions, parse_sets
    from alem_eval.trainers.planning import train as train_cells

    sets = parse_sets([f"{k}={v}" for k, v in (overrides or {}).items()])
    for key, value in (("NUM_ENVS", num_envs), ("NUM_STEPS", num_steps)):
        if value is not None:
            sets[key] = str(value)
    options = TrainOptions(
        out=Path(out),
        total_timesteps=total_timesteps,
        overrides=sets,
        shard=parse_shard(shard),
        group_size=group_size,
        from_config=None if from_config is None else Path(from_config),
        source=source,
        checkpoint_every=checkpoint_every,
        max_updates=max_updates,
        fresh=fresh,
        force=force,
        dry_run=dry_run,
        partners=tuple(selector_strings(partners)) if partners is not None else (),
        split=split,
        splits_file=None if splits is None else Path(splits),
        focal_slots=focal_slots,
    )
    if not dry_run:
        from alem_eval.api.calls import before_compiling

        before_compiling()
    selectors = selector_strings(cells)
    if display is not None or not (live_display() if progress is None else progress):
        recorder = _Recorder(display)
        train_cells(selectors, options, recorder)
    else:
        with train_reporter(log_every) as reporter:
            recorder = _Recorder(TrainDisplay(reporter))
            train_cells(selectors, options, recorder)
    return Training(tuple(_rows(recorder.plan, recorder.outcomes, options.out)))
