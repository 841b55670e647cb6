"""``alem-eval export`` (marl-eval JSON) and ``alem-eval merge`` (import another results dir):
parse, call :func:`alem_eval.api.stored.export` / :func:`~alem_eval.api.stored.merge` (what
``alem_eval.export`` / ``alem_eval.merge`` are) and print."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_records, err_console
from alem_eval.core.errors import UsageError
from alem_eval.cli.options import (
    DifficultyFilterOpt,
    DryRunOpt,
    ExportFormat,
    ExportFormatOpt,
    FormatOpt,
    MetricsOpt,
    OutFileOpt,
    Prefer,
    PreferOpt,
    ResultsOpt,
    ResultsProtocolOpt,
    override,
    split_commas,
)


@app.command("export")
def export(
    selectors: Annotated[
        list[str] | None, typer.Argument(help="Scored cells to export (default: all).")
    ] = None,
    results: ResultsOpt = None,
    fmt: ExportFormatOpt = ExportFormat.marl_eval,
    metric: Annotated[
        list[str] | None,
        override(
            MetricsOpt, help="Metric(s) to export (default: the headline metrics). Repeatable."
        ),
    ] = None,
    out: OutFileOpt = None,
    protocol: ResultsProtocolOpt = None,
    complete_subgrid: Annotated[
        bool,
        typer.Option(
            "--complete-subgrid",
            help="When runs are missing, export the largest complete grid of difficulties x "
            "algorithms x seeds instead of failing (marl-eval needs a complete grid).",
        ),
    ] = False,
    difficulty: DifficultyFilterOpt = None,
) -> None:
    """Per-episode scores in marl-eval's layout: alem -> difficulty -> <algorithm>_<budget>
    -> seed_<N> -> step_0 / absolute_metrics (metric names lower-cased, '/' -> '_'). Each
    difficulty is a separate task, to be reported on its own: exporting several warns.

    Examples:

      alem-eval export '1B/*/*' --difficulty hard --out hard.json
      alem-eval export --complete-subgrid --out subgrid.json
    """
    from alem_eval.api.stored import export as export_marl_eval

    difficulties = split_commas(difficulty) or []
    if len(difficulties) > 1:  # one marl-eval task per file: difficulties are never pooled
        raise UsageError("export: --difficulty takes one difficulty (one marl-eval task)")
    exported = export_marl_eval(
        selectors,
        store=results,
        metrics=metric or (),
        out=out,
        protocol=protocol and protocol.value,
        complete_subgrid=complete_subgrid,
        difficulty=difficulties[0] if difficulties else None,
    )
    text = exported.text
    for note in exported.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if exported.warning:
        err_console.print(
            f"[yellow]warning[/yellow] {exported.warning}", soft_wrap=True, highlight=False
        )
    if out is None:
        sys.stdout.write(text)
    else:
        err_console.print(f"wrote marl-eval JSON to {out}", highlight=False)


@app.command("merge")
def merge(
    source: Annotated[Path, typer.Argument(help="Another alem-eval results directory to import.")],
    selectors: Annotated[
        list[str] | None, typer.Argument(help="Cells to import (default: all).")
    ] = None,
    results: ResultsOpt = None,
    prefer: PreferOpt = Prefer.ours,
    dry_run: Annotated[
        bool, override(DryRunOpt, help="Report what would happen; write nothing.")
    ] = False,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Import scored cells from another results directory into --results; provenance
    conflicts are reported (the table lists them).

    Example (after a SLURM array that scored into runs/score-0 ... runs/score-7):

      for i in $(seq 0 7); do alem-eval merge runs/score-$i; done
    """
    from alem_eval.api.stored import merge as merge_results

    merged = merge_results(
        selectors, other=source, store=results, prefer=prefer.value, dry_run=dry_run
    )
    rep = merged.report
    for note in rep.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if rep.conflicts or fmt != OutputFormat.table:
        emit_records(
            [c.as_record() for c in rep.conflicts],
            fmt,
            columns=["cell", "eval_difficulty", "protocol", "kind", "detail", "resolution"],
            title=f"{len(rep.conflicts)} conflict(s)",
        )
    err_console.print(merged.summary(), highlight=False)
