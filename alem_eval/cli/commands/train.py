"""``alem-eval train``: (re)generate cells in the released format with the trainers.

Parses the options and calls :func:`alem_eval.api.training.train` (what ``alem_eval.train``
is), which runs :func:`alem_eval.trainers.planning.train` and draws with
:class:`~alem_eval.api.training.TrainDisplay`: the plan, progress (a bar on a terminal;
dated lines in batch logs), and each cell's result.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alem_eval.api.training import TrainDisplay, describe, train_reporter
from alem_eval.cli.app import app
from alem_eval.cli.console import err_console
from alem_eval.cli.options import (
    DryRunOpt,
    FreshOpt,
    OutDirOpt,
    QuietOpt,
    ShardOpt,
    SourceOpt,
    Split,
    SplitOpt,
    SplitsFileOpt,
    override,
    quiet_option,
)

Render = TrainDisplay  # the command's display (its name before it moved to the API)
__all__ = ["Render", "describe", "train", "train_reporter"]


# ----------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------
@app.command("train")
@quiet_option
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
    quiet: QuietOpt = False,
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
    from alem_eval.api.training import train as train_cells
    from alem_eval.trainers.contract import TrainingStopped
    from alem_eval.trainers.planning import parse_sets

    try:
        with train_reporter(log_every) as reporter:
            train_cells(
                cells,
                out=out,
                total_timesteps=total_timesteps,
                num_envs=num_envs,
                num_steps=num_steps,
                overrides=parse_sets(sets),
                from_config=from_config,
                source=source,
                shard=shard,
                group_size=group_size,
                checkpoint_every=checkpoint_every,
                max_updates=max_updates,
                fresh=fresh,
                force=force,
                dry_run=dry_run,
                partners=list(partners) if partners else None,
                split=None if split is None else split.value,
                splits=splits_file,
                focal_slots=focal_slots,
                display=TrainDisplay(reporter),
            )
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
