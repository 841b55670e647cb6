"""``alem-eval train``: (re)generate cells in the released format with the trainers.

Parses the options, calls :func:`alem_eval.trainers.planning.train` and renders what it reports: the
plan, progress (a bar on a terminal; dated lines in batch logs), and each cell's result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import err_console
from alem_eval.core.progress import Reporter
from alem_eval.cli.options import (
    DryRunOpt,
    FreshOpt,
    OutDirOpt,
    ShardOpt,
    SourceOpt,
    Split,
    SplitOpt,
    SplitsFileOpt,
    override,
)
from alem_eval.trainers.contract import Progress
from alem_eval.trainers.planning import GroupOutcome, TrainEvents, TrainGroup, TrainPlan


# ----------------------------------------------------------------------------------------
# Rendering
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


class Render(TrainEvents):
    def __init__(self, reporter: Reporter):
        self.reporter = reporter

    def planned(self, plan: TrainPlan) -> None:
        if not plan.chosen:
            err_console.print(f"no cells in this share of {plan.selected}", highlight=False)
        for cell, where in plan.skipped:
            err_console.print(
                f"{cell.id}: already trained in {where} (--force retrains)", highlight=False
            )
        for g in plan.groups:
            err_console.print(g.describe(), highlight=False, soft_wrap=True)

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
            err_console.print(
                f"{outcome.group.label}: stopped after --max-updates; rerun to continue",
                highlight=False,
            )
            return
        for c, r in zip(outcome.group.cells, outcome.results, strict=True):
            s = r.summary
            ret = (s.get("final_metrics") or {}).get("mean_episode_return")
            # wall_time_s counts every second, the first (compiling, untimed) call's
            # included; steps_per_second is None when every update ran in that call
            sps = s.get("steps_per_second")
            err_console.print(
                f"{c.id}: {s['total_timesteps']:,} steps in {_fmt_time(s['wall_time_s'])} "
                f"({s['compile_time_s']:.0f}s of it compiling), "
                f"{'-' if sps is None else f'{sps:,.0f}'} "
                f"steps/s; final return {'-' if ret is None else f'{ret:.2f}'} -> {r.cell_dir}",
                highlight=False,
                soft_wrap=True,
            )


# ----------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------
@app.command("train")
def train(
    cells: list[str] = typer.Argument(
        ..., help="Cell(s) or selector(s), e.g. 1B/ippo-rnn/hard/seed3."
    ),
    total_timesteps: int | None = typer.Option(
        None,
        "--total-timesteps",
        help="Env steps per cell (default: the cell's config.json, else the budget label).",
    ),
    num_envs: int | None = typer.Option(
        None, "--num-envs", help="Parallel envs per cell (NUM_ENVS)."
    ),
    num_steps: int | None = typer.Option(None, "--num-steps", help="Rollout length (NUM_STEPS)."),
    sets: list[str] | None = typer.Option(
        None, "--set", help="Trainer key override KEY=VALUE (repeatable), e.g. --set LR=1e-4."
    ),
    from_config: Path | None = typer.Option(
        None,
        "--from-config",
        help="A released config.json (or its cell directory): every hyperparameter comes "
        "from it; seed, difficulty and budget come from the cell.",
    ),
    source: Annotated[str | None, override(SourceOpt)] = None,  # no source: the upstream yaml
    out: Annotated[
        Path,
        override(
            OutDirOpt,
            help="Output root: a cell is written to OUT/<its id>, e.g. "
            "runs/1B/ippo-rnn/hard/seed3.",
        ),
    ] = Path("runs"),
    shard: ShardOpt = None,
    group_size: int | None = typer.Option(
        None,
        "--group-size",
        help="At most N seeds per compiled program (memory grows with N; default: all the "
        "seeds of a cell).",
    ),
    checkpoint_every: float = typer.Option(
        600.0, "--checkpoint-every", help="Seconds between resume checkpoints."
    ),
    log_every: float = typer.Option(
        60.0,
        "--log-every",
        help="Off a terminal: seconds between progress lines (0: one per compiled call).",
    ),
    max_updates: int | None = typer.Option(
        None, "--max-updates", help="Stop (resumably) after this many updates in this call."
    ),
    fresh: Annotated[
        bool,
        override(FreshOpt, help="Start from scratch; resume state is replaced at the first save."),
    ] = False,
    force: bool = typer.Option(False, "--force", help="Retrain cells that are already complete."),
    partners: list[str] | None = typer.Option(
        None,
        "--partners",
        help="Train with frozen partners: cells of --source (the Hub without one) playing the "
        "other slots with their greedy policies, one drawn per env and episode, e.g. "
        "'demo/*' (repeatable; ippo-rnn and mappo-rnn).",
    ),
    split: Annotated[
        Split | None,
        override(
            SplitOpt,
            help="With --partners: only the partners of this split (train, val "
            "or test; test is for final numbers only).",
        ),
    ] = None,
    splits_file: SplitsFileOpt = None,
    focal_slots: int | None = typer.Option(
        None,
        "--focal-slots",
        help="With --partners: slots the trained policy takes, 1 or 2 of 3 (default 1), "
        "drawn per env and episode.",
    ),
    dry_run: Annotated[bool, override(DryRunOpt, help="Show the plan and exit.")] = False,
) -> None:
    """Train cells with the alem-eval trainers, in the released checkpoint format.

    Hyperparameters: each cell's released config.json when --source holds it (or --from-config),
    else the upstream yaml; --set and --total-timesteps win over both.

    SIGTERM, Ctrl-C and --checkpoint-every save <cell>/_resume/; rerun the same command to resume.

    Metrics of every compiled call go to <cell>/train_log.jsonl.

    Examples:

      alem-eval train 1B/ippo-rnn/hard/seed3
      alem-eval train 100M/pqn/easy --source hub --out runs

      alem-eval train demo/ippo-rnn/easy/seed0 --source demo --partners 'demo/*'
      --split train --total-timesteps 300000 --out runs/partners
    """
    from alem_eval.hub.selectors import parse_shard
    from alem_eval.trainers.contract import TrainingStopped
    from alem_eval.trainers.planning import TrainOptions, parse_sets
    from alem_eval.trainers.planning import train as train_cells

    overrides = parse_sets(sets)
    for key, value in (("NUM_ENVS", num_envs), ("NUM_STEPS", num_steps)):
        if value is not None:
            overrides[key] = str(value)
    options = TrainOptions(
        out=out,
        total_timesteps=total_timesteps,
        overrides=overrides,
        shard=parse_shard(shard),
        group_size=group_size,
        from_config=from_config,
        source=source,
        checkpoint_every=checkpoint_every,
        max_updates=max_updates,
        fresh=fresh,
        force=force,
        dry_run=dry_run,
        partners=tuple(partners or ()),
        split=None if split is None else split.value,
        splits_file=splits_file,
        focal_slots=focal_slots,
    )
    if not dry_run:
        from alem_eval.core.runtime import enable_compilation_cache

        enable_compilation_cache()
    try:
        with train_reporter(log_every) as reporter:
            train_cells(cells, options, Render(reporter))
    except TrainingStopped as stop:
        if stop.updates:
            more = f" (and {len(stop.cell_dirs) - 1} more)" if len(stop.cell_dirs) > 1 else ""
            saved = (
                f"resume state at update {stop.updates:,} is in {stop.cell_dirs[0]}/_resume"
                f"{more}; rerun the same command to continue"
            )
        else:
            saved = "stopped before the first update, nothing to resume"
        err_console.print(
            f"alem-eval: {stop.signal_name}: {saved}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(128 + stop.signum) from None
