"""``alem-eval leaderboard``: Base% / Coord% / Total% per difficulty as csv, md, LaTeX or JSON."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import err_console
from alem_eval.cli.options import (
    CiMethod,
    CiOpt,
    LeaderboardFormat,
    LeaderboardFormatOpt,
    OutFileOpt,
    RepsOpt,
    ResultsOpt,
    ResultsProtocolOpt,
    Runs,
    RunsOpt,
    SeedOpt,
)


@app.command("leaderboard")
def leaderboard(
    selectors: Annotated[
        list[str] | None, typer.Argument(help="Scored cells to include (default: all).")
    ] = None,
    results: ResultsOpt = None,
    fmt: LeaderboardFormatOpt = LeaderboardFormat.md,
    out: OutFileOpt = None,
    reps: RepsOpt = 50_000,
    seed: SeedOpt = 0,
    protocol: ResultsProtocolOpt = None,
    ci: CiOpt = CiMethod.expanded,
    runs: RunsOpt = Runs.seeds,
) -> None:
    """Rows = (budget, algorithm); per difficulty the mean over seeds [95% CI] of Base%,
    Coord% and Total% (--runs episodes: every episode a run, for cells scored with one
    seed). Missing cells are shown as missing, never as zero. The CI is over the training
    seeds (the protocol's worlds are fixed); --ci percentile gives rliable's. md and latex
    are in percent (a strict best per column in bold, a † on zero-width intervals), csv in
    fractions, json in the upstream leaderboard schema (percent).

    Examples:

      alem-eval leaderboard --format md
      alem-eval leaderboard '1B' --format latex --out table.tex
    """
    from alem_eval.api.stored import leaderboard as build_leaderboard
    from alem_eval.core.fsutil import write_text_atomic
    from alem_eval.reporting.leaderboard import render

    lb = build_leaderboard(
        selectors,
        store=results,
        reps=reps,
        seed=seed,
        protocol=protocol and protocol.value,
        ci=ci.value,
        runs=runs.value,
    )
    text = render(lb, fmt.value)
    for note in lb.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if lb.digests is not None:
        from alem_eval.analysis.digests import footer_digest_line

        err_console.print(footer_digest_line(lb.digests), highlight=False, soft_wrap=True)
    if out is None:
        sys.stdout.write(text)
    else:
        write_text_atomic(out, text)
        err_console.print(f"wrote {len(lb.rows)} rows to {out}", highlight=False)
