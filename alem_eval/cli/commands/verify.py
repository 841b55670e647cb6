"""``alem-eval verify``: resolve config, validate shapes, restore — one line per cell."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_records, err_console
from alem_eval.cli.options import (
    CacheDirOpt,
    FormatOpt,
    RepoOpt,
    RevisionOpt,
    SourceOpt,
    open_cli_source,
)


@app.command("verify")
def verify(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            help="Cells, e.g. 1B/ippo-rnn/hard or 'tiny/*/*/*' (default: every cell of a "
            "local --source; the Hub needs a selection)."
        ),
    ] = None,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Check that each cell's config matches its weights and that the weights restore.

    A Hub cell's files are hashed again and compared with the Hub's listing: a file that
    does not match is fetched again and named on the cell's line ("re-fetched ...";
    field "repaired" of --format json/csv). A file with no hash to compare with (offline,
    from a cache whose snapshot holds plain files) is checked by its size only: the line
    says "sizes only" (field "checked": "size", else "hash"; empty for a local --source).

    Exit 0 if every cell is valid, 1 if any is not, 2 for usage errors.

    Examples:

      alem-eval verify 1B/ippo-rnn/hard
      alem-eval verify --source runs
    """
    from alem_eval.hub.selectors import require_selection
    from alem_eval.model.verify import verify_cells

    src = open_cli_source(source, repo, revision, cache_dir)
    require_selection(src, selectors, command="verify")
    results = verify_cells(src, src.select(list(selectors or [])))
    if fmt == OutputFormat.table:
        for r in results:
            print(
                f"OK    {r.cell}  {r.detail(f'{r.num_params:,} params')}"
                if r.ok
                else f"FAIL  {r.cell}  {r.detail(r.message)}"
            )
            for w in r.warnings:
                err_console.print(f"[yellow]warning[/yellow] {r.cell}: {w}", highlight=False)
    else:
        records = [r.as_record() for r in results]
        if fmt == OutputFormat.csv:
            records = [{**rec, "repaired": " ".join(rec["repaired"])} for rec in records]
        emit_records(
            records, fmt, columns=["cell", "status", "checked", "num_params", "repaired", "message"]
        )
    bad = sum(not r.ok for r in results)
    err_console.print(f"{len(results) - bad}/{len(results)} cells verified", highlight=False)
    if bad:
        sys.exit(1)
