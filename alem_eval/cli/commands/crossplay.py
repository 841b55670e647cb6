"""``alem-eval crossplay``: mixed teams of the selected cells against their self-play.

Parses, makes one call to :func:`alem_eval.api.crossplay.crossplay` (``alem_eval.crossplay``:
it plays, or plans with ``--dry-run``, and writes the figure and files) and prints what it
returns.
"""

from __future__ import annotations

import functools
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import (
    OutputFormat,
    emit_json,
    play_or_plan,
    emit_records,
    err_console,
)
from alem_eval.scoring.crossplay import DEFAULT_REPS
from alem_eval.scoring.teams import DEFAULT_MAX_TEAMS
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
    BatchOpt,
    DevicesOpt,
    RecordOpt,
    CacheDirOpt,
    DryRunOpt,
    DifficultyFilterOpt,
    EnvMismatch,
    EnvMismatchOpt,
    EpisodesOpt,
    EvalDifficultyOpt,
    MaxStepsOpt,
    OutDirOpt,
    PaperFormat,
    PaperFormatOpt,
    RepoOpt,
    RepsOpt,
    ResultsOpt,
    RevisionOpt,
    RunsTeamsOpt,
    SeedOpt,
    SourceOpt,
    SplitOpt,
    SplitsFileOpt,
    TeamRuns,
    choice,
    override,
    source_keywords,
    team_keywords,
    Difficulty,
    EVAL_DIFFICULTY_SHARED_HELP,
)

if TYPE_CHECKING:
    from alem_eval.api.crossplay import CrossPlay


class Scheme(StrEnum):
    """``alem_eval.scoring.teams.SCHEMES``."""

    pairs = "pairs"
    distinct = "distinct"
    mixed = "mixed"
    all = "all"


@app.command("crossplay")
@quiet_option
def crossplay(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            help="Cells to put in teams together, e.g. '1B/*/hard' (default: all of a local "
            "--source; the Hub needs a selection)."
        ),
    ] = None,
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
    scheme: Annotated[
        Scheme,
        typer.Option(
            "--scheme",
            help="pairs: every 'two agents of A + one of B' in every slot position; "
            "distinct: each slot a different cell (sampled); mixed: distinct teams spanning "
            "more than one algorithm (sampled); all: the three. Each cell's self-play is always "
            "included.",
            **choice(Scheme, "--scheme", "scheme", metavar="SCHEME"),
        ),
    ] = Scheme.pairs,
    max_teams: Annotated[
        int,
        typer.Option("--max-teams", help="Teams sampled for distinct / mixed (pairs is complete)."),
    ] = DEFAULT_MAX_TEAMS,
    seed: SeedOpt = 0,
    reps: RepsOpt = DEFAULT_REPS,
    runs: RunsTeamsOpt = TeamRuns.teams,
    results: ResultsOpt = None,
    out: Annotated[
        Path,
        override(
            OutDirOpt, help="Output directory (pair_matrix.png/.pdf, teams.csv, crossplay.json)."
        ),
    ] = Path("alem-eval-crossplay"),
    on_env_mismatch: EnvMismatchOpt = EnvMismatch.error,
    batch: BatchOpt = None,
    devices: DevicesOpt = None,
    record: RecordOpt = None,
    dry_run: DryRunOpt = False,
    fmt: PaperFormatOpt = PaperFormat.table,
    quiet: QuietOpt = False,
) -> None:
    """Cross-play vs self-play: how much do teams lose when their agents come from
    different checkpoints?

    All teams are scored in one compiled rollout on the same worlds; the pair matrix
    (row: partner A in two slots, column: newcomer B in one, diagonal: self-play) and the
    cross-play gap (self - cross) of Total%, Base% and Coord% are printed, with bootstrap
    CIs over the worlds (they need 2 episodes or more): how sure the gap of these
    checkpoints is, not of their algorithms. Scored teams are kept in the results store
    as team rows (never mixed into report or leaderboard), so a rerun scores only the
    teams it has not seen. --seed seeds both the team sample (distinct, mixed) and the
    bootstrap. The cells play on their shared training difficulty's worlds unless
    --eval-difficulty names others. --format md / latex print the gap and pair-matrix
    tables for a paper (percent, a † where an interval has zero width); json and csv
    hold fractions.

    Examples:

      alem-eval crossplay '1B/*/hard' --scheme pairs
      alem-eval crossplay 'demo/*' --source demo --episodes 2 --max-steps 100 \\
          --out xplay/
    """
    from alem_eval.api.crossplay import crossplay as play_crossplay

    played = play_or_plan(
        functools.partial(
            play_crossplay,
            list(selectors or []),
            scheme=scheme.value,
            eval_difficulty=eval_difficulty.value if eval_difficulty else None,
            episodes=episodes,
            max_steps=max_steps,
            max_teams=max_teams,
            seed=seed,
            reps=reps,
            runs=runs.value,
            store=results,
            out=out,
            **source_keywords(source, repo, revision, cache_dir, difficulty),
            **team_keywords(split, splits, on_env_mismatch, batch, devices, record),
        ),
        dry_run,
        fmt.records,
    )
    if played is None:
        return
    _print_result(played, fmt, out)


def _print_result(played: CrossPlay, fmt: PaperFormat, out: Path) -> None:
    """The gap and pair-matrix tables on stdout in ``fmt`` (json: the result with its
    ``outputs``; csv: a row per team), then on stderr what was played and where it went."""
    from alem_eval.analysis.metrics import metric_info

    result, paths = played.result, played.outputs
    if fmt in (PaperFormat.md, PaperFormat.latex):
        render = result.to_markdown if fmt == PaperFormat.md else result.to_latex
        sys.stdout.write(render("gap") + "\n" + render("matrix"))
    elif fmt == PaperFormat.json:
        emit_json({**result.as_json(), "outputs": [str(p) for p in paths]})
    elif fmt == PaperFormat.csv:
        rows = result.team_rows()
        emit_records(
            rows, OutputFormat.csv, columns=list(dict.fromkeys(k for r in rows for k in r))
        )
    else:
        fmt_table = OutputFormat.table
        emit_records(
            result.gap_rows(),
            fmt_table,
            title=(
                f"cross-play gap on {result.eval_difficulty} ({result.scheme}; runs = "
                f"{result.bootstrap['runs']}; {result.bootstrap['confidence']:.0%} CI)"
            ),
        )
        emit_records(
            result.matrix_rows(),
            fmt_table,
            title=(
                f"{metric_info(result.matrix.metric).label}: A in two slots + B in one (diagonal: "
                "self-play)"
            ),
        )
    if fmt == PaperFormat.table and (table := result.paper_table(decimals=2)).flagged():
        err_console.print(f"[yellow]note[/yellow] {table.zero_width_note}", highlight=False)
    err_console.print(
        f"{len(result.teams)} teams ({result.teams_scored} scored, "
        f"{result.teams_reused} read back); figure and tables in {out}",
        highlight=False,
    )
    if result.digests is not None:
        from alem_eval.analysis.digests import footer_digest_line

        err_console.print(footer_digest_line(result.digests), highlight=False, soft_wrap=True)
