"""``alem-eval scenario``: your agent with the baselines (ad-hoc teamwork scenarios).

Parses, makes one call to :func:`alem_eval.api.scenario.scenario` (``alem_eval.scenario``:
it plays, or plans with ``--dry-run``, and writes the figure) and prints what it returns.
"""

from __future__ import annotations

import functools
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import (
    OutputFormat,
    emit_json,
    play_or_plan,
    emit_records,
    err_console,
)
from alem_eval.cli.options import (
    BatchOpt,
    DevicesOpt,
    QuietOpt,
    RecordOpt,
    quiet_option,
    CacheDirOpt,
    DifficultyFilterOpt,
    DryRunOpt,
    EnvMismatch,
    FocalArgOpt,
    FocalOpt,
    EnvMismatchOpt,
    EpisodesOpt,
    EvalDifficultyOpt,
    FreshOpt,
    MaxStepsOpt,
    OutDirOpt,
    PaperFormat,
    PaperFormatOpt,
    RepoOpt,
    RepsOpt,
    ResultsOpt,
    RevisionOpt,
    SeedOpt,
    SourceOpt,
    SplitOpt,
    SplitsFileOpt,
    choice,
    override,
    source_keywords,
    team_keywords,
    Difficulty,
    EVAL_DIFFICULTY_SHARED_HELP,
)
from alem_eval.scoring.crossplay import DEFAULT_REPS


class Mode(StrEnum):
    """``alem_eval.scoring.scenario.MODE_CHOICES``."""

    visitor = "visitor"
    resident = "resident"
    both = "both"


@app.command("scenario")
@quiet_option
def scenario(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            help="The background cells, e.g. '1B/ippo-rnn/hard' (its seeds: one population); "
            "default: all of a local --source."
        ),
    ] = None,
    focal: FocalOpt = "random-legal",
    focal_arg: FocalArgOpt = None,
    mode: Annotated[
        Mode,
        typer.Option(
            "--mode",
            help="visitor: 1 focal + 2 background agents; resident: 2 focal + 1 "
            "background; both. Every slot position is played.",
            **choice(Mode, "--mode", "mode", metavar="MODE"),
        ),
    ] = Mode.both,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    difficulty: DifficultyFilterOpt = None,
    split: SplitOpt = None,
    splits: SplitsFileOpt = None,
    eval_difficulty: Annotated[
        Difficulty | None, override(EvalDifficultyOpt, help=EVAL_DIFFICULTY_SHARED_HELP)
    ] = None,
    episodes: Annotated[
        int | None,
        override(EpisodesOpt, help="Episodes per team (default 20, the paper protocol)."),
    ] = None,
    max_steps: MaxStepsOpt = None,
    seed: SeedOpt = 0,
    reps: RepsOpt = DEFAULT_REPS,
    results: ResultsOpt = None,
    fresh: Annotated[
        bool,
        override(
            FreshOpt,
            help="Play every team again, whatever the results store holds (and store it anew).",
        ),
    ] = False,
    out: Annotated[
        Path, override(OutDirOpt, help="Output directory (scenario.png, scenario.json).")
    ] = Path("alem-eval-scenario"),
    on_env_mismatch: EnvMismatchOpt = EnvMismatch.error,
    batch: BatchOpt = None,
    devices: DevicesOpt = None,
    record: RecordOpt = None,
    dry_run: DryRunOpt = False,
    fmt: PaperFormatOpt = PaperFormat.table,
    quiet: QuietOpt = False,
) -> None:
    """Your agent with the baselines: how does it do with partners it never trained with?

    The focal agent joins teams of the selected background cells (grouped into
    populations: the seeds of one budget, algorithm and difficulty) as a visitor (1 focal
    + 2 background agents) or a resident (2 focal + 1 background), in every slot
    position, in one compiled rollout. Per population and mode: the focal team's Total% /
    Base% / Coord%, beside the background's own self-play on the same worlds (what the
    focal must match) and its cross-play (a trained stranger in the focal's slots: the
    population's other seeds, or the other selected cells), and focal - self-play, with
    bootstrap CIs over the worlds. The focal is code, or a cell directory in the released
    layout (a cell you trained): its greedy policy plays as it would in cross-play. Teams
    are kept in the results store, keyed by the focal's identity (its name and a digest of
    its class's source, its state and the factory's arguments; a cell: its algorithm,
    checkpoint hash and config hash), so a rerun scores only what it has not seen
    (--fresh: all).
    When the background cells span several frozen partner splits (no --split; the
    release's splits, or --splits), a second table follows: per mode and metric, focal -
    self over the cells of each split (a focal cell whose config.json records its
    partners: "trained with" and "held out" rows) and the generalisation gap test - train
    in percentage points, its interval a paired bootstrap over the same worlds.
    --format md / latex print the table for a paper (percent, intervals over the worlds, a
    † where an interval has zero width); json and csv hold fractions.

    Examples:

      alem-eval scenario --focal examples/agents.py:explorer 'demo/*' \\
          --source demo --mode both
      alem-eval scenario --focal mypkg.agents:make --focal-arg temperature=0.5 \\
          '1B/ippo-rnn/hard' --mode visitor
      alem-eval scenario --focal runs/my-cell '1B/ippo-rnn/hard' --mode visitor
      alem-eval scenario --focal runs/partners/demo/ippo-rnn/easy/seed0 'demo/*' \\
          --source demo --mode visitor    # trained with the train split: the gap
    """
    from alem_eval.api.scenario import scenario as play_scenario
    from alem_eval.evaluate.agent_spec import parse_focal_args

    played = play_or_plan(
        functools.partial(
            play_scenario,
            list(selectors or []),
            focal,
            focal_args=parse_focal_args(focal_arg or []),
            mode=mode.value,
            eval_difficulty=eval_difficulty.value if eval_difficulty else None,
            episodes=episodes,
            max_steps=max_steps,
            seed=seed,
            reps=reps,
            store=results,
            fresh=fresh,
            out=out,
            **source_keywords(source, repo, revision, cache_dir, difficulty),
            **team_keywords(split, splits, on_env_mismatch, batch, devices, record),
        ),
        dry_run,
        fmt.records,
    )
    if played is None:
        return
    result = played.result
    _print_result(result, fmt, list(played.outputs))
    main, by_split = result.paper_table(decimals=2), result.split_table(decimals=2)
    flagged = main.flagged() or (by_split is not None and by_split.flagged())
    if fmt == PaperFormat.table and flagged:
        err_console.print(f"[yellow]note[/yellow] {main.zero_width_note}", highlight=False)
    err_console.print(
        f"{len(result.scores)} teams ({result.teams_scored} scored, "
        f"{len(result.scores) - result.teams_scored} read back); figure in {out}",
        highlight=False,
    )
    if result.digests is not None:
        from alem_eval.analysis.digests import footer_digest_line

        err_console.print(footer_digest_line(result.digests), highlight=False, soft_wrap=True)


def _print_result(result, fmt: PaperFormat, paths: list[Path]) -> None:
    """The main table, then the split table when the background spans several partner
    splits, on stdout in ``fmt`` (json: one document holding both; csv: the main table)."""
    split = result.split_table()
    if fmt in (PaperFormat.md, PaperFormat.latex):
        for table in (result.paper_table(), split):
            if table is not None:
                text = table.to_markdown() if fmt == PaperFormat.md else table.to_latex()
                sys.stdout.write(("\n" if table is split else "") + text)
    elif fmt == PaperFormat.json:
        emit_json({**result.as_json(), "outputs": [str(p) for p in paths]})
    elif fmt == PaperFormat.csv:
        rows = [r.flat() for r in result.rows]
        emit_records(rows, OutputFormat.csv, columns=list(rows[0]))
    else:
        conf = f"{result.bootstrap['confidence']:.0%} CI over the worlds"
        emit_records(
            result.table_rows(),
            OutputFormat.table,
            title=f"{result.focal} with the baselines on {result.eval_difficulty} ({conf}; percent)",
        )
        if split is not None:
            emit_records(
                result.split_table_rows(),
                OutputFormat.table,
                title=f"{result.focal}: focal - self by partner split ({conf}; the gap's "
                "paired; percentage points)",
            )
