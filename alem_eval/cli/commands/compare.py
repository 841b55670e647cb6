"""``alem-eval compare``: the same cell(s) from two sources, scored on the same worlds.

``alem-eval compare 1B/ippo-rnn/hard --source hub --source runs``: parses, calls
:func:`alem_eval.api.functions.compare` (what ``alem_eval.compare`` is, over
:func:`alem_eval.scoring.compare.compare_sources`) and prints its rows.
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
from alem_eval.cli.console import OutputFormat, emit_records, err_console
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
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
@quiet_option
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
    quiet: QuietOpt = False,
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
    from alem_eval.api.functions import compare as compare_sources

    result = compare_sources(
        selectors,
        sources,
        metric=metric,
        difficulty=split_commas(difficulty),
        eval_difficulty=eval_difficulty.value if eval_difficulty else None,
        episodes=episodes,
        max_steps=max_steps,
        protocol=protocol.value,
        reps=reps,
        seed=seed,
        ci=ci.value,
        store=store,
        progress=True,
    )
    rows = list(result.rows)
    if fmt == OutputFormat.table:
        for line in result.lines():
            err_console.print(line, highlight=False)
    emit_records(rows, fmt, title="compare: probability of improvement P(A > B)")
