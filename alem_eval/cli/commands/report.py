"""``alem-eval report``: Markdown report with figures (PNG; PDF with --pdf) from the results store."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import err_console
from alem_eval.cli.options import (
    CacheDirOpt,
    CiMethod,
    CiOpt,
    ClipsOpt,
    MetricsOpt,
    OutDirOpt,
    RepoOpt,
    ResultsOpt,
    ResultsProtocolOpt,
    RepsOpt,
    RevisionOpt,
    Runs,
    RunsOpt,
    SeedOpt,
    SourceOpt,
    open_cli_source,
    override,
)


@app.command("report")
def report(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(help="Scored cells to include (default: all), e.g. '1B/*/hard'."),
    ] = None,
    results: ResultsOpt = None,
    metric: Annotated[
        list[str] | None,
        override(
            MetricsOpt,
            help="Metric(s) to analyse: a column such as Team/achievement_pct, or "
            "total | base | coord | achievement (default: total = Team/reward_pct_of_max). "
            "Repeatable.",
        ),
    ] = None,
    out: Annotated[
        Path, override(OutDirOpt, help="Output directory (report.md, stats.json, figures/).")
    ] = Path("alem-eval-report"),
    reps: RepsOpt = 50_000,
    seed: SeedOpt = 0,
    runs: RunsOpt = Runs.seeds,
    ci: CiOpt = CiMethod.expanded,
    protocol: ResultsProtocolOpt = None,
    pdf: Annotated[
        bool, typer.Option("--pdf", help="Also save every figure as PDF (vector; slower).")
    ] = False,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            min=1,
            help="Processes drawing the figures (default: one per CPU core; 1: none).",
        ),
    ] = None,
    clips: Annotated[
        bool,
        override(
            ClipsOpt,
            help="Also draw a short self-play GIF per algorithm (its first cell, episode 0) "
            "into clips/ and embed it; the cells are read from --source.",
        ),
    ] = False,
    clip_steps: Annotated[
        int, typer.Option("--clip-steps", min=1, help="Step cap of each clip.")
    ] = 200,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
) -> None:
    """Interval estimates (IQM, mean, median, optimality gap), probability of improvement,
    performance profiles and the budget comparison, one panel per difficulty.

    Writes report.md, stats.json and figures/*.png (and *.pdf with --pdf) into --out and
    prints the path of report.md on stdout.

    Examples:

      alem-eval report '1B/*/hard' --results runs/results --out report/ --pdf

      alem-eval report 'demo' --source demo --clips --out demo-report/
    """
    from alem_eval.api.stored import report as build_report
    from alem_eval.analysis.metrics import DEFAULT_METRIC

    src = None
    if clips:
        from alem_eval.core.runtime import enable_compilation_cache

        src = open_cli_source(source, repo, revision, cache_dir)
        enable_compilation_cache()
    res = build_report(
        selectors,
        out=out,
        store=results,
        metrics=tuple(metric or (DEFAULT_METRIC,)),
        reps=reps,
        seed=seed,
        runs=runs.value,
        ci=ci.value,
        protocol=protocol and protocol.value,
        pdf=pdf,
        jobs=jobs,
        clips=src,
        clip_steps=clip_steps,
    )
    for note in res.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    if res.digests is not None:
        from alem_eval.analysis.digests import footer_digest_line

        err_console.print(footer_digest_line(res.digests), highlight=False, soft_wrap=True)
    err_console.print(
        f"report for {', '.join(res.metrics)} (protocol {res.protocol}, "
        f"{runs.value} as runs, {reps:,} bootstrap reps, {ci.value} CIs): "
        f"{len(res.figures)} figure files in {res.out_dir / 'figures'}"
        + (f", {len(res.clips)} clips in {res.out_dir / 'clips'}" if res.clips else ""),
        highlight=False,
    )
    print(res.markdown)
