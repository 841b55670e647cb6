"""``alem-eval verify-results``: check results against their digests (one line either way)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_json, emit_records
from alem_eval.cli.options import FormatOpt, override, ResultsOpt


@app.command("verify-results")
def verify_results(
    path: Annotated[
        Path,
        typer.Argument(
            help="A results store (directory), one results file (.parquet) or an output "
            "JSON naming digests (crossplay.json, scenario.json, stats.json, score --format json)."
        ),
    ],
    results: Annotated[
        Path | None,
        override(
            ResultsOpt,
            help="For an output JSON: the store its files are in (default: the store it names).",
        ),
    ] = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Recompute the digests of published results and say whether they still match.

    A store or a results file: every file against the seal it was written with (its key
    and each episode's record). An output JSON: its files read again from the store, the
    results digest and the config document recomputed. Exit 0 with one summary line when
    everything matches; 1 with one line naming the first difference (the file, cell or
    team, episode and column; or the setting) otherwise. Files written before seals
    existed are reported as unsealed, not failed.

    Examples:

      alem-eval verify-results ~/.cache/alem-eval/results
      alem-eval verify-results xplay/crossplay.json
      alem-eval verify-results report/stats.json --results runs/results
    """
    from alem_eval.analysis.verify_results import DigestMismatchError
    from alem_eval.analysis.verify_results import verify_results as check

    report = check(path, store=results)
    if fmt == OutputFormat.json:
        emit_json(report.to_json())
    elif fmt == OutputFormat.csv:
        frame = report.to_frame()
        emit_records(frame.to_dict("records"), fmt, columns=list(frame.columns))
    elif report.ok:
        print(report.summary())
    if not report.ok:
        raise DigestMismatchError(report.summary())
