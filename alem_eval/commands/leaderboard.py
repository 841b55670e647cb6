"""``alem-eval leaderboard``: Base% / Coord% / Total% per difficulty as csv, md, LaTeX or JSON."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..cli import app
from ..console import err_console


@app.command("leaderboard")
def leaderboard(
    selectors: Optional[List[str]] = typer.Argument(None, help="Scored cells to include (default: all)."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results store directory (default: user cache)."),
    fmt: str = typer.Option("md", "--format", help="md | csv | latex | json (json: the upstream leaderboard entry schema)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Write to this file instead of stdout."),
    reps: int = typer.Option(50_000, "--reps", help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="Scoring protocol when the results hold several."),
) -> None:
    """Rows = (budget, algorithm); per difficulty the mean over seeds [95% CI] of Base%,
    Coord% and Total%. Missing cells are shown as missing, never as zero."""
    from ..leaderboard import build_leaderboard, render
    from ..results import open_store
    from ..stats import BootstrapSettings

    settings = BootstrapSettings(reps=reps, seed=seed)
    lb = build_leaderboard(open_store(results), selectors or None, settings=settings,
                           protocol=protocol)
    text = render(lb, fmt)
    for note in lb.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        err_console.print(f"wrote {len(lb.rows)} rows to {out}", highlight=False)
