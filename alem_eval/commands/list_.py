"""``alem-eval list``: the cells of a source with their local state."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console

COLUMNS = ["cell", "budget", "algorithm", "difficulty", "seed", "state", "expected_params", "size_mb",
           "commit"]


@app.command("list")
def list_cells(
    selectors: Optional[List[str]] = typer.Argument(None, help="Cells (default: all), e.g. '1B/*/hard'."),
    budget: Optional[List[str]] = typer.Option(None, "--budget", help="Filter: budget(s), e.g. 1B."),
    algorithm: Optional[List[str]] = typer.Option(None, "--algorithm", help="Filter: algorithm(s)."),
    difficulty: Optional[List[str]] = typer.Option(None, "--difficulty", help="Filter: difficulty(ies)."),
    source: str = typer.Option("hub", "--source", help="'hub' or a local directory in the released layout."),
    repo: Optional[str] = typer.Option(None, "--repo", help="Hub repo id (default alem-world/alem-rl-baselines)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub revision (default main)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Download cache (default: the HF cache)."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv"),
) -> None:
    """List cells: state is remote (not fully cached), cached or verified.

    expected_params is the parameter count at the released network sizes (manifest);
    commit is the Hub commit the cell's local copy was pulled at.
    """
    from ..sources import open_source

    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir)
    cells = src.select(list(selectors or []), budgets=budget, algorithms=algorithm,
                       difficulties=difficulty)
    records = src.records(cells)
    for w in src.warnings:
        err_console.print(f"[yellow]warning[/yellow] {w}", highlight=False)
    emit_records(records, fmt, columns=COLUMNS, title=f"{len(records)} cell(s) in {src.description}")
