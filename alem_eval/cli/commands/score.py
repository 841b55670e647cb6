"""``alem-eval score``: vectorised greedy evaluation of cells, with a results store.

Parses, calls :func:`alem_eval.scoring.score.score_cells` and prints its scores.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import (
    EpisodeBar,
    OutputFormat,
    emit_records,
    err_console,
    split_over_devices,
    warning_lines,
)
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
    AlgorithmFilterOpt,
    BatchOpt,
    BudgetFilterOpt,
    CacheDirOpt,
    DevicesOpt,
    DifficultyFilterOpt,
    DryRunOpt,
    EnvMismatch,
    EnvMismatchOpt,
    EpisodesOpt,
    EvalDifficultyOpt,
    FormatOpt,
    MaxStepsOpt,
    Protocol,
    ProtocolOpt,
    RecordOpt,
    RepoOpt,
    ResultsOpt,
    RevisionOpt,
    ShardOpt,
    SourceOpt,
    SplitOpt,
    SplitsFileOpt,
    override,
    split_commas,
    open_cli_source,
    split_cells,
)


@app.command("score")
@quiet_option
def score(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(help="Cells (default: all of a local --source; the Hub needs a selection)."),
    ] = None,
    budget: BudgetFilterOpt = None,
    algorithm: AlgorithmFilterOpt = None,
    difficulty: DifficultyFilterOpt = None,
    split: SplitOpt = None,
    splits: SplitsFileOpt = None,
    eval_difficulty: EvalDifficultyOpt = None,
    episodes: Annotated[
        int | None,
        override(EpisodesOpt, help="Episodes per cell (fast: 20; reference: TEST_NUM_EPISODES)."),
    ] = None,
    max_steps: Annotated[
        int | None,
        override(
            MaxStepsOpt, help="Step cap per episode (fast: 10000; reference: TEST_MAX_STEPS)."
        ),
    ] = None,
    protocol: ProtocolOpt = Protocol.fast,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    results: ResultsOpt = None,
    stack: Annotated[
        int,
        typer.Option(
            "--stack",
            help="Checkpoints evaluated together in one call (results are stored "
            "call by call, so a killed run keeps every finished stack). Every stack of a "
            "selection has the same mix of network shapes: one compiled program serves all.",
        ),
    ] = 5,
    shard: Annotated[
        str | None,
        override(
            ShardOpt,
            help="i/N: score only the i-th (0-based) of N contiguous shares of the "
            "selected cells (a SLURM array task each; combine the stores with 'alem-eval merge').",
        ),
    ] = None,
    batch: Annotated[
        int | None,
        override(
            BatchOpt,
            help="Batch slots of the compiled rollout, shared out over the stack's cells "
            "(default: 64 per core on a CPU, 4096 on a GPU, and at least 8 per cell or all "
            "its episodes). A slot whose episode ended takes "
            "its cell's next episode at the next step, inside the compiled loop; fewer slots "
            "bound memory and shorten the idle tail, more vectorise further.",
        ),
    ] = None,
    on_env_mismatch: EnvMismatchOpt = EnvMismatch.error,
    record: RecordOpt = None,
    devices: DevicesOpt = None,
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
) -> None:
    """Score cells the way the paper did, as one compiled batched computation per stack.

    The table shows mean ± s.e. over episodes of Total%, Base%, Coord% and Ach% (the
    Team/*_pct metrics ×100). Episode lengths are true lengths (upstream logs length − 1).

    --difficulty selects cells by the difficulty they were trained on; --eval-difficulty
    plays them on another difficulty's worlds, stored apart from their own-difficulty
    scores (report and leaderboard read own-difficulty scores only).

    Examples:

      alem-eval score '1B/*/hard'
      alem-eval score '*' --dry-run
      alem-eval score '1B/*/hard' --eval-difficulty easy
      alem-eval score --source runs --protocol reference --format json
    """
    from alem_eval.core.runtime import enable_compilation_cache
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring.score import (
        RecordingWarning,
        ScoreOptions,
        env_steps,
        episode_rows,
        records_with_digests,
        score_cells,
        score_digests,
    )
    from alem_eval.analysis.digests import footer_digest_line
    from alem_eval.hub.selectors import parse_shard, require_selection, shard_cells

    split_over_devices(devices)  # before JAX starts its backends
    options = ScoreOptions(
        protocol=protocol.value,
        num_episodes=episodes,
        max_steps=max_steps,
        eval_difficulty=eval_difficulty.value if eval_difficulty else None,
        max_stack=stack,
        batch=batch,
        on_env_mismatch=on_env_mismatch.value,
    )
    src = open_cli_source(source, repo, revision, cache_dir, read_only=dry_run)
    require_selection(src, selectors, command="score", filters=(budget, algorithm, difficulty))
    selected = src.select(
        list(selectors or []),
        budgets=split_commas(budget),
        algorithms=split_commas(algorithm),
        difficulties=split_commas(difficulty),
    )
    selected = split_cells(selected, split, splits)
    cells = shard_cells(selected, parse_shard(shard))
    if not cells:
        err_console.print(
            f"shard {shard}: no cells in this share of {len(selected)}", highlight=False
        )
        return
    if dry_run:
        from alem_eval.cli.console import emit_plan
        from alem_eval.scoring.plan import plan_score

        emit_plan(plan_score(src, cells, options), fmt)
        return
    store = open_store(results)
    enable_compilation_cache()
    t0 = time.perf_counter()

    with EpisodeBar("score") as bar, warning_lines(RecordingWarning):
        scores = score_cells(
            src,
            cells,
            options=options,
            store=store,
            on_progress=bar.cell_done,
            on_episodes=bar.update,
            record_dir=record,
        )
    if fmt == OutputFormat.json:
        emit_records(records_with_digests(scores, store), fmt)
    elif fmt == OutputFormat.csv:
        rows = episode_rows(scores)
        emit_records(rows, fmt, columns=list(dict.fromkeys(k for r in rows for k in r)))
    else:
        emit_records(
            [s.summary_row() for s in scores],
            fmt,
            title=f"protocol={options.protocol}; mean ± s.e. over episodes",
        )
    steps = env_steps(scores)
    elapsed = time.perf_counter() - t0
    err_console.print(
        f"{len(scores)} cell-difficulties, {steps:,.0f} env steps in {elapsed:.1f}s"
        f" ({steps / max(elapsed, 1e-9):,.0f} env-steps/s); results in {store.root}",
        highlight=False,
    )
    digest = footer_digest_line(score_digests(scores, store))
    if digest:
        err_console.print(digest, highlight=False, soft_wrap=True)
