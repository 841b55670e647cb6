"""``alem-eval report``: Markdown report with figures (PNG + PDF) from the results store."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..cli import app
from ..console import err_console


@app.command("report")
def report(
    selectors: Optional[List[str]] = typer.Argument(None, help="Scored cells to include (default: all), e.g. '1B/*/hard'."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results store directory (default: user cache)."),
    metric: Optional[List[str]] = typer.Option(None, "--metric", help="Metric(s) to analyse: a column such as Team/achievement_pct, or total | base | coord | achievement (default: total = Team/reward_pct_of_max). Repeatable."),
    out: Path = typer.Option(Path("alem-eval-report"), "--out", help="Output directory (report.md, stats.json, figures/)."),
    reps: int = typer.Option(50_000, "--reps", help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed: the same seed reproduces every interval exactly."),
    runs: str = typer.Option("seeds", "--runs", help="seeds (each seed's mean over episodes is a run) | episodes (every episode is a run)."),
    protocol: Optional[str] = typer.Option(None, "--protocol", help="Scoring protocol to report when the results hold several (fast | reference)."),
) -> None:
    """Interval estimates (IQM, mean, median, optimality gap), probability of improvement,
    performance profiles and the budget comparison, one panel per difficulty.

    Prints the path of report.md on stdout.
    """
    from ..report import build_report
    from ..results import open_store
    from ..stats import DEFAULT_METRIC, BootstrapSettings

    settings = BootstrapSettings(reps=reps, seed=seed, runs=runs)
    store = open_store(results)
    res = build_report(store, out, selectors=selectors or None,
                       metrics=tuple(metric or (DEFAULT_METRIC,)), settings=settings,
                       protocol=protocol)
    for note in res.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    err_console.print(f"report for {', '.join(res.metrics)} (protocol {res.protocol}, "
                      f"{settings.runs} as runs, {settings.reps:,} bootstrap reps): "
                      f"{len(res.figures)} figure files in {res.out_dir / 'figures'}",
                      highlight=False)
    print(res.markdown)
