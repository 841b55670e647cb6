"""``alem-eval verify``: resolve config, validate shapes, restore — one line per cell."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console
from ..options import CacheDirOpt, FormatOpt, RepoOpt, RevisionOpt, SourceOpt


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

    Exit 0 if every cell is valid, 1 if any is not, 2 for usage errors.

    Examples:

      alem-eval verify 1B/ippo-rnn/hard
      alem-eval verify --source runs
    """
    from ..selectors import require_selection
    from ..sources import open_source
    from ..verify import verify_cells

    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir)
    require_selection(src, selectors, command="verify")
    results = verify_cells(src, src.select(list(selectors or [])))
    if fmt == OutputFormat.table:
        for r in results:
            print(
                f"OK    {r.cell}  {r.num_params:,} params"
                if r.ok
                else f"FAIL  {r.cell}  {r.message}"
            )
            for w in r.warnings:
                err_console.print(f"[yellow]warning[/yellow] {r.cell}: {w}", highlight=False)
    else:
        emit_records(
            [r.as_record() for r in results],
            fmt,
            columns=["cell", "status", "num_params", "message"],
        )
    bad = sum(not r.ok for r in results)
    err_console.print(f"{len(results) - bad}/{len(results)} cells verified", highlight=False)
    if bad:
        sys.exit(1)
