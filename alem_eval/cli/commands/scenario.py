"""``alem-eval scenario``: your agent with the baselines (ad-hoc teamwork scenarios).

Parses, calls :func:`alem_eval.scoring.scenario.run_scenario`, writes its figure
(:func:`alem_eval.scoring.scenario.plot_scenario`) and prints the result.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import (
    OutputFormat,
    emit_json,
    emit_records,
    err_console,
    split_over_devices,
)
from alem_eval.cli.options import (
    BatchOpt,
    DevicesOpt,
    RecordOpt,
    CacheDirOpt,
    DifficultyFilterOpt,
    DryRunOpt,
    EnvMismatch,
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
    choice,
    override,
    split_commas,
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
def scenario(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            help="The background cells, e.g. '1B/ippo-rnn/hard' (its seeds: one population); "
            "default: all of a local --source."
        ),
    ] = None,
    focal: Annotated[
        str,
        typer.Option(
            "--focal",
            help="Your agent: package.module:factory, path/to/file.py:factory, or a "
            "reference agent (random-legal, noop, scripted, scripted-host).",
            metavar="SPEC",
        ),
    ] = "random-legal",
    focal_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--focal-arg",
            help="KEY=VALUE keyword argument of the factory (repeatable; JSON values).",
            metavar="KEY=VALUE",
        ),
    ] = None,
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
) -> None:
    """Your agent with the baselines: how does it do with partners it never trained with?

    The focal agent joins teams of the selected background cells (grouped into
    populations: the seeds of one budget, algorithm and difficulty) as a visitor (1 focal
    + 2 background agents) or a resident (2 focal + 1 background), in every slot
    position, in one compiled rollout. Per population and mode: the focal team's Total% /
    Base% / Coord%, beside the background's own self-play on the same worlds (what the
    focal must match) and its cross-play (a trained stranger in the focal's slots: the
    population's other seeds, or the other selected cells), and focal - self-play, with
    bootstrap CIs over the worlds. Teams are kept in the results store, keyed by the
    focal's identity (its name and a digest of its class's source, its state and the
    factory's arguments), so a rerun scores only what it has not seen (--fresh: all).
    --format md / latex print the table for a paper (percent, intervals over the worlds, a
    † where an interval has zero width); json and csv hold fractions.

    Examples:

      alem-eval scenario --focal examples/agents.py:explorer 'demo/*' \\
          --source demo --mode both
      alem-eval scenario --focal mypkg.agents:make --focal-arg temperature=0.5 \\
          '1B/ippo-rnn/hard' --mode visitor
    """
    from alem_eval.analysis.results import collect_warnings
    from alem_eval.core.fsutil import write_text_atomic
    from alem_eval.core.jsonout import json_text
    from alem_eval.core.runtime import enable_compilation_cache
    from alem_eval.evaluate.agent_spec import parse_focal_args
    from alem_eval.hub.selectors import require_selection
    from alem_eval.hub.sources import open_source
    from alem_eval.scoring.crossplay_outputs import save_figure
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring.scenario import plot_scenario, run_scenario

    split_over_devices(devices)  # before JAX starts its backends
    args = parse_focal_args(focal_arg or [])
    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir, read_only=dry_run)
    require_selection(src, selectors, command="scenario", filters=(difficulty,))
    cells = src.select(list(selectors or []), difficulties=split_commas(difficulty))
    if dry_run:
        from alem_eval.cli.console import emit_plan
        from alem_eval.scoring.plan import plan_scenario

        plan = plan_scenario(
            src,
            cells,
            focal=focal,
            mode=mode.value,
            eval_difficulty=eval_difficulty.value if eval_difficulty else None,
            num_episodes=episodes,
            max_steps=max_steps,
        )
        emit_plan(plan, fmt.records)
        return
    enable_compilation_cache()

    def progress(message: str) -> None:
        err_console.print(message, highlight=False)

    with collect_warnings() as notes:
        result = run_scenario(
            src,
            cells,
            focal,
            focal_args=args,
            mode=mode.value,
            eval_difficulty=eval_difficulty.value if eval_difficulty else None,
            num_episodes=episodes,
            max_steps=max_steps,
            reps=reps,
            seed=seed,
            store=open_store(results),
            on_env_mismatch=on_env_mismatch.value,
            fresh=fresh,
            batch=batch,
            record_dir=record,
            on_progress=progress,
        )
    for note in notes:
        err_console.print(f"[yellow]warning[/yellow] {note}", highlight=False)
    out.mkdir(parents=True, exist_ok=True)
    paths = save_figure(plot_scenario(result), out / "scenario", formats=("png",))
    doc = {**result.as_json(), "outputs": [str(p) for p in paths]}
    paths.append(write_text_atomic(out / "scenario.json", json_text(doc) + "\n"))
    if fmt in (PaperFormat.md, PaperFormat.latex):
        sys.stdout.write(result.to_markdown() if fmt == PaperFormat.md else result.to_latex())
    elif fmt == PaperFormat.json:
        emit_json({**doc, "outputs": [str(p) for p in paths]})
    elif fmt == PaperFormat.csv:
        rows = [r.flat() for r in result.rows]
        emit_records(rows, OutputFormat.csv, columns=list(rows[0]))
    else:
        emit_records(
            result.table_rows(),
            OutputFormat.table,
            title=(
                f"{result.focal} with the baselines on {result.eval_difficulty} "
                f"({result.bootstrap['confidence']:.0%} CI over the worlds; percent)"
            ),
        )
    if fmt == PaperFormat.table and (table := result.paper_table(decimals=2)).flagged():
        err_console.print(f"[yellow]note[/yellow] {table.zero_width_note}", highlight=False)
    err_console.print(
        f"{len(result.scores)} teams ({result.teams_scored} scored, "
        f"{len(result.scores) - result.teams_scored} read back); figure in {out}",
        highlight=False,
    )
    if result.digests is not None:
        from alem_eval.analysis.digests import footer_digest_line

        err_console.print(footer_digest_line(result.digests), highlight=False, soft_wrap=True)
