"""``alem-eval compare``: the same cell(s) from two sources, scored on the same worlds.

``alem-eval compare 1B/ippo-rnn/hard --source hub --source runs``: parses, calls
:func:`alem_eval.scoring.compare.compare_sources` and prints its rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.scoring.compare import (
    DEFAULT_COMPARE_EPISODES,
    DEFAULT_COMPARE_METRIC,
    DEFAULT_COMPARE_REPS,
)
from alem_eval.cli.console import EpisodeBar, OutputFormat, download_bar, emit_records, err_console
from alem_eval.cli.options import (
    CiMethod,
    CiOpt,
    DifficultyFilterOpt,
    EpisodesOpt,
    EvalDifficultyOpt,
    FormatOpt,
    MaxStepsOpt,
    MetricsOpt,
    Protocol,
    ProtocolOpt,
    RepsOpt,
    SeedOpt,
    SourcePairOpt,
    override,
    split_commas,
)

__all__ = ["compare"]


@app.command("compare")
def compare(
    selectors: Annotated[
        list[str], typer.Argument(help="Cell(s) or selector(s) present in both sources.")
    ],
    sources: SourcePairOpt,
    metric: Annotated[
        str,
        override(MetricsOpt, help="Per-episode metric (a compute_score key, episode_return, ...)."),
    ] = DEFAULT_COMPARE_METRIC,
    difficulty: DifficultyFilterOpt = None,
    eval_difficulty: EvalDifficultyOpt = None,
    episodes: EpisodesOpt = DEFAULT_COMPARE_EPISODES,
    max_steps: MaxStepsOpt = None,
    protocol: ProtocolOpt = Protocol.fast,
    reps: RepsOpt = DEFAULT_COMPARE_REPS,
    seed: SeedOpt = 0,
    ci: CiOpt = CiMethod.expanded,
    fmt: FormatOpt = OutputFormat.table,
    store: Annotated[
        Path | None,
        typer.Option(
            "--store",
            help="Where both sources' scores are kept: a rerun (or one after an "
            "interruption) reads back what is there. Default: <user cache>/compare, apart "
            "from the results store, so leaderboards never mix the other source in.",
        ),
    ] = None,
) -> None:
    """Is source A's checkpoint better than source B's? P(A > B) with a bootstrap CI.

    Runs are seeds when both sides have at least two cells, else episodes: both sides play
    the same worlds, so the CI then resamples the worlds jointly for both (a paired
    comparison). Difficulties are compared separately, never pooled. Scores are kept
    (--store) and read back.

    Examples:

      alem-eval compare 1B/ippo-rnn/hard/seed0 --source hub --source runs
      alem-eval compare 'demo/*/easy' --source demo --source runs --metric total
      alem-eval compare '1B/ippo' --difficulty hard --eval-difficulty easy \\
          --source hub --source runs
    """
    from alem_eval.scoring.compare import compare_sources
    from alem_eval.core.paths import compare_dir
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()
    with EpisodeBar("compare") as bar:
        rows = compare_sources(
            sources,
            selectors,
            metric=metric,
            eval_difficulty=eval_difficulty.value if eval_difficulty else None,
            difficulties=split_commas(difficulty),
            protocol=protocol.value,
            episodes=episodes,
            max_steps=max_steps,
            reps=reps,
            seed=seed,
            ci=ci.value,
            store=ResultsStore(store.expanduser() if store else compare_dir()),
            on_progress=bar.cell_done,
            on_episodes=bar.update,
            on_download=download_bar(),
        )
    if fmt == OutputFormat.table:
        for r in rows:
            err_console.print(
                f"{r['eval_difficulty']}: P(A > B) = {r['p_improvement']:.2f} "
                f"[{r['p_lo']:.2f}, {r['p_hi']:.2f}] on {metric} (A = {r['A']}, B = {r['B']}; "
                f"runs = {r['runs']}, {r['n_A']} vs {r['n_B']}; 95% {ci.value} bootstrap CI "
                f"resampling {r['resampled']}) "
                f"-> {r['verdict']}",
                highlight=False,
            )
    emit_records(rows, fmt, title="compare: probability of improvement P(A > B)")
