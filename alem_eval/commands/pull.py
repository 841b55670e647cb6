"""``alem-eval pull``: download the selected cells from the Hub into the local cache."""

from __future__ import annotations


import typer

from ..cli import app
from ..console import err_console
from ..options import CacheDirOpt, RepoOpt, RevisionOpt, SourceOpt


@app.command("pull")
def pull(
    selectors: list[str] = typer.Argument(
        ..., help="Cells, e.g. 1B/ippo-rnn/hard or '*/*/hard/seed0,seed3'."
    ),
    source: SourceOpt = "hub",
    repo: RepoOpt = None,
    revision: RevisionOpt = None,
    cache_dir: CacheDirOpt = None,
    workers: int = typer.Option(8, "--workers", min=1, max=64, help="Parallel file downloads."),
) -> None:
    """Download only the selected cells (resumable, idempotent; works offline from the cache).

    Every file is checked against the repo listing (size and sha256 / git blob id); a short,
    empty or corrupted file is fetched again.
    Prints each cell's local directory on stdout and a summary on stderr.

    Examples:

      alem-eval pull 1B/ippo-rnn/hard
      HF_HUB_OFFLINE=1 alem-eval pull 1B/ippo-rnn/hard/seed0
    """
    from ..sources import open_source

    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir)
    cells = src.select(selectors)
    report = src.pull(cells, workers=workers)
    for w in src.warnings:
        err_console.print(f"[yellow]warning[/yellow] {w}", highlight=False)
    for cell in report.cells:
        print(f"{cell.id}\t{report.root / cell.id}")
    err_console.print(f"pulled {report.summary()}", highlight=False)
