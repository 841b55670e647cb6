"""``alem-eval export`` (marl-eval JSON) and ``alem-eval merge`` (import another results dir)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console


@app.command("export")
def export(
    selectors: Optional[List[str]] = typer.Argument(None, help="Scored cells to export (default: all)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results store directory (default: user cache)."),
    fmt: str = typer.Option("marl-eval", "--format", help="marl-eval (instadeepai/marl-eval raw-data JSON)."),
    metric: Optional[List[str]] = typer.Option(None, "--metric", help="Metric(s) to export (default: the headline metrics). Repeatable."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="Scoring protocol when the results hold several."),
) -> None:
    """Per-episode scores in marl-eval's layout: alem -> difficulty -> <algorithm>_<budget>
    -> seed<N> -> step_0 / absolute_metrics (metric names lower-cased, '/' -> '_')."""
    from ..errors import UsageError
    from ..interop import export_marl_eval
    from ..results import open_store

    if fmt != "marl-eval":
        raise UsageError(f"--format must be marl-eval, got {fmt!r}")
    text, prepared = export_marl_eval(open_store(results), out, selectors=selectors or None,
                                      metrics=metric or (), protocol=protocol)
    for note in prepared.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if out is None:
        sys.stdout.write(text)
    else:
        err_console.print(f"wrote marl-eval JSON to {out}", highlight=False)


@app.command("merge")
def merge(
    source: Path = typer.Argument(..., help="Another alem-eval results directory to import."),
    selectors: Optional[List[str]] = typer.Argument(None, help="Cells to import (default: all)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results store to merge into (default: user cache)."),
    prefer: str = typer.Option("ours", "--prefer", help="On a same-key content conflict keep ours | theirs."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what would happen; write nothing."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv (the conflicts)."),
) -> None:
    """Import scored cells from another results directory; provenance conflicts are reported."""
    from ..interop import merge_results
    from ..results import ResultsStore, open_store

    rep = merge_results(open_store(results), ResultsStore(source), selectors=selectors or None,
                        prefer=prefer, dry_run=dry_run)
    for note in rep.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if rep.conflicts or fmt != OutputFormat.table:
        emit_records([c.as_record() for c in rep.conflicts], fmt,
                     columns=["cell", "eval_difficulty", "protocol", "kind", "detail", "resolution"],
                     title=f"{len(rep.conflicts)} conflict(s)")
    err_console.print(f"merge {rep.source} -> {rep.dest}: {rep.summary()}", highlight=False)
