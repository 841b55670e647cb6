"""``alem-eval verify``: resolve config, validate shapes, restore — one line per cell."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console


@app.command("verify")
def verify(
    selectors: List[str] = typer.Argument(..., help="Cells, e.g. 1B/ippo-rnn/hard or 'tiny/*/*/*'."),
    source: str = typer.Option("hub", "--source", help="'hub' or a local directory in the released layout."),
    repo: Optional[str] = typer.Option(None, "--repo", help="Hub repo id (default alem-world/alem-rl-baselines)."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub revision (default main)."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Download cache (default: the HF cache)."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv"),
) -> None:
    """Check that each cell's config matches its weights and that the weights restore.

    Exit 0 if every cell is valid, 1 if any is not, 2 for usage errors.
    """
    from ..sources import open_source
    from ..verify import verify_cells

    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir)
    results = verify_cells(src, src.select(selectors))
    if fmt == OutputFormat.table:
        for r in results:
            line = f"OK    {r.cell}  {r.num_params:,} params" if r.ok else f"FAIL  {r.cell}  {r.message}"
            print(line)
            for w in r.warnings:
                err_console.print(f"[yellow]warning[/yellow] {r.cell}: {w}", highlight=False)
    else:
        emit_records([r.as_record() for r in results], fmt,
                     columns=["cell", "status", "num_params", "message"])
    bad = sum(not r.ok for r in results)
    err_console.print(f"{len(results) - bad}/{len(results)} cells verified", highlight=False)
    if bad:
        sys.exit(1)
