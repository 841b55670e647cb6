"""``alem-eval pull``: download the selected cells from the Hub into the local cache."""

from __future__ import annotations

from typing import Annotated

import typer

from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_json, emit_plan, emit_records, err_console
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
    CacheDirOpt,
    DryRunOpt,
    FormatOpt,
    RepoOpt,
    RevisionOpt,
    SourceOpt,
    open_cli_source,
)


@app.command("pull")
@quiet_option
def pull(
    selectors: Annotated[
        list[str] | None,
        typer.Argument(
            help="Cells, e.g. 1B/ippo-rnn/hard or '*/*/hard/seed0,seed3' ('*': every cell)."
        ),
    ] = None,
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    workers: int = typer.Option(8, "--workers", min=1, max=64, help="Parallel file downloads."),
    dry_run: DryRunOpt = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
) -> None:
    """Download only the selected cells (resumable, idempotent; works offline from the cache).

    Every file is checked against the repo listing (size and sha256 / git blob id); a short,
    empty or corrupted file is fetched again.
    Prints each cell's local directory on stdout (table: 'cell<TAB>directory' lines; json:
    the whole report) and a summary on stderr.

    Examples:

      alem-eval pull 1B/ippo-rnn/hard
      alem-eval pull '*' --dry-run
      HF_HUB_OFFLINE=1 alem-eval pull 1B/ippo-rnn/hard/seed0
    """
    from alem_eval.scoring.plan import plan_pull
    from alem_eval.hub.selectors import require_selection

    src = open_cli_source(source, repo, revision, cache_dir, read_only=dry_run)
    require_selection(src, selectors, command="pull")
    cells = src.select(list(selectors or []))
    if dry_run:
        emit_plan(plan_pull(src, cells), fmt)
        return
    report = src.pull(cells, workers=workers)
    for w in src.warnings:
        err_console.print(f"[yellow]warning[/yellow] {w}", highlight=False)
    if fmt == OutputFormat.json:
        emit_json(report.as_json())
    elif fmt == OutputFormat.csv:
        emit_records(report.rows(), fmt)
    else:
        for row in report.rows():
            print(f"{row['cell']}\t{row['path']}")
    err_console.print(f"pulled {report.summary()}", highlight=False)
