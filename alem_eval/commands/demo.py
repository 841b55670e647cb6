"""``alem-eval demo``: the whole pipeline offline, on the embedded UNTRAINED demo cells."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console
from ..options import FormatOpt, ResultsOpt


@app.command("demo")
def demo(
    episodes: Annotated[int, typer.Option("--episodes", help="Episodes per cell.")] = 8,
    max_steps: Annotated[int, typer.Option("--max-steps", help="Step cap per episode.")] = 300,
    results: ResultsOpt = None,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Make the demo cells (random, untrained weights in the released layout; one per
    algorithm), verify them, and score them with the fast protocol. No network needed.
    The scores only show the pipeline works: the weights are untrained."""
    from ..demo import DEMO_NOTE
    from ..evaluate import enable_compilation_cache
    from ..results import open_store
    from ..scoring import ScoreOptions, score_cells
    from ..sources import open_source
    from ..verify import verify_cells

    err_console.print(f"[bold yellow]{DEMO_NOTE}[/bold yellow]", highlight=False)
    src = open_source("demo")
    cells = src.select([])
    checks = verify_cells(src, cells)
    for r in checks:
        err_console.print(
            ("OK    " if r.ok else "FAIL  ") + f"{r.cell}  {r.message}", highlight=False
        )
    if not all(r.ok for r in checks):
        sys.exit(1)
    enable_compilation_cache()
    scores = score_cells(
        src,
        cells,
        options=ScoreOptions(num_episodes=episodes, max_steps=max_steps),
        store=open_store(results),
        on_progress=lambda m, d, t: err_console.print(f"[{d}/{t}] {m}", highlight=False),
    )
    if fmt == OutputFormat.json:
        emit_records([s.as_record() for s in scores], fmt)
    else:
        emit_records(
            [s.summary_row() for s in scores],
            fmt,
            title=f"UNTRAINED demo cells, fast protocol, {episodes} episodes ≤ {max_steps} steps",
        )
