"""``alem-eval list``: the cells of a source with their local state."""

from __future__ import annotations


import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_records, err_console
from alem_eval.cli.options import (
    AlgorithmFilterOpt,
    BudgetFilterOpt,
    CacheDirOpt,
    DifficultyFilterOpt,
    FormatOpt,
    RepoOpt,
    RevisionOpt,
    SourceOpt,
    SplitOpt,
    SplitsFileOpt,
    split_cells,
)

COLUMNS = [
    "cell",
    "budget",
    "algorithm",
    "difficulty",
    "seed",
    "state",
    "expected_params",
    "size_mb",
    "commit",
]


@app.command("list")
def list_cells(
    selectors: list[str] | None = typer.Argument(
        None, help="Cells (default: all), e.g. '1B/*/hard'."
    ),
    budget: BudgetFilterOpt = None,
    algorithm: AlgorithmFilterOpt = None,
    difficulty: DifficultyFilterOpt = None,
    split: SplitOpt = None,
    splits: SplitsFileOpt = None,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """List cells: state is remote (not fully cached), cached or verified.

    expected_params is the parameter count at the released network sizes (manifest);
    commit is the Hub commit the cell's local copy was pulled at.

    Examples:

      alem-eval list '1B/*/hard'
      alem-eval list --source demo --format json
      alem-eval list '1B/*/hard' --split test
    """
    from alem_eval.hub.sources import open_source

    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir)
    cells = src.select(
        list(selectors or []), budgets=budget, algorithms=algorithm, difficulties=difficulty
    )
    cells = split_cells(cells, split, splits)
    records = src.records(cells)
    for w in src.warnings:
        err_console.print(f"[yellow]warning[/yellow] {w}", highlight=False)
    emit_records(
        records, fmt, columns=COLUMNS, title=f"{len(records)} cell(s) in {src.description}"
    )
