"""Output helpers shared by the commands: data to stdout, humans to stderr."""

from __future__ import annotations

import contextlib
import csv
import io
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table

from .jsonout import json_text

err_console = Console(stderr=True)


class OutputFormat(StrEnum):
    """How :func:`emit_records` prints: a table for people, JSON or CSV for programs."""

    table = "table"
    json = "json"
    csv = "csv"


def emit_records(
    records: Sequence[dict[str, Any]],
    fmt: OutputFormat,
    *,
    columns: Sequence[str] | None = None,
    title: str | None = None,
) -> None:
    """Print records as a rich table (stderr-free, to stdout), strict JSON or CSV."""
    columns = list(columns or (records[0].keys() if records else []))
    if fmt == OutputFormat.json:
        emit_json(list(records))
    elif fmt == OutputFormat.csv:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore")
        w.writeheader()
        for r in records:
            w.writerow({k: r.get(k, "") for k in columns})
        sys.stdout.write(buf.getvalue())
    else:
        table = Table(title=title)
        for c in columns:
            table.add_column(c)
        for r in records:
            table.add_row(*(_cell(r.get(c)) for c in columns))
        # On a terminal rich fits the table to its width; into a pipe or file nothing may be
        # cut (rich would assume 80 columns and truncate cells to "algorit…").
        width = None if sys.stdout.isatty() else 100_000
        Console(soft_wrap=True, width=width).print(table)


def emit_plan(plan: Any, fmt: OutputFormat) -> None:
    """A ``--dry-run`` plan (:class:`alem_eval.plan.RunPlan`): the whole plan as JSON, or a
    row per cell (sizes readable in the table); its notes and totals on stderr."""
    if fmt == OutputFormat.json:
        emit_json(plan.as_json())
    else:
        rows = plan.records()
        if fmt == OutputFormat.table:
            from .sources import format_bytes

            sized = ("bytes", "bytes_to_download")
            rows = [{k: format_bytes(v) if k in sized else v for k, v in r.items()} for r in rows]
        emit_records(rows, fmt, title=f"{plan.command} --dry-run: {plan.source}")
    for note in plan.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    err_console.print(plan.summary(), highlight=False)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def emit_json(doc: Any) -> None:
    """One strict JSON document on stdout: non-finite floats (numpy's too) are ``null``,
    never the ``NaN`` that JSON parsers refuse (:mod:`alem_eval.jsonout`)."""
    sys.stdout.write(json_text(doc) + "\n")


@contextlib.contextmanager
def warning_lines(*categories: type[Warning]) -> Iterator[None]:
    """Inside the block, each warning of ``categories`` prints at once as one stderr line,
    ``warning <message>``, not Python's two-line form naming the source line."""
    from rich.markup import escape

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
        if issubclass(category, categories):
            text = escape(" ".join(str(message).split()))
            err_console.print(f"[yellow]warning[/yellow] {text}", highlight=False, soft_wrap=True)
        else:
            python_show(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        python_show = warnings.showwarning
        for category in categories:
            warnings.simplefilter("always", category)
        warnings.showwarning = show
        yield


class EpisodeBar:
    """A live progress bar of evaluated episodes on stderr: episodes done / total, live
    env-steps/s and ETA. ``update`` takes :class:`alem_eval.evaluate.RolloutProgress`
    (anything with ``episodes_done``, ``episodes_total``, ``live_steps``, ``elapsed_s``).

    Rates and the ETA count from the first report (the first call also compiles). On a
    terminal it redraws in place; otherwise (batch logs) it prints a line at most every
    ``every_s`` seconds, and the last state at the end. ``note`` prints a line.
    """

    def __init__(self, label: str = "score", *, every_s: float = 30.0, live: bool | None = None):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.live = err_console.is_terminal if live is None else live
        self.every_s = every_s
        self._t0 = time.perf_counter()
        self._base: Any = None  # the first report: rates count from there
        self._last: Any = None
        self._printed: Any = None
        self._progress = Progress(
            TextColumn(f"[bold]{label}[/] episodes"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=err_console,
            disable=not self.live,
            transient=False,
        )
        self._task = self._progress.add_task(label, total=None, rate="", eta="")

    def __enter__(self) -> EpisodeBar:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)
        if not self.live and self._last is not None and self._last is not self._printed:
            self._line(self._last)

    def note(self, message: str) -> None:
        err_console.print(message, highlight=False)

    def cell_done(self, message: str, done: int, total: int) -> None:
        """The scoring functions' ``on_progress(message, done, total)``: one line,
        ``[done/total] message (seconds since the bar started)``."""
        self.note(f"[{done}/{total}] {message} ({time.perf_counter() - self._t0:.0f}s)")

    def rates(self, p: Any) -> tuple[float, float | None]:
        """(live env-steps/s, seconds left or None) since the first report."""
        if self._base is None or p.elapsed_s <= self._base.elapsed_s:
            return 0.0, None
        dt = p.elapsed_s - self._base.elapsed_s
        steps_rate = (p.live_steps - self._base.live_steps) / dt
        episodes_rate = (p.episodes_done - self._base.episodes_done) / dt
        left = p.episodes_total - p.episodes_done
        return steps_rate, (left / episodes_rate if episodes_rate > 0 else None)

    def update(self, p: Any) -> None:
        if self._base is None or p.episodes_total != self._base.episodes_total:
            self._base = p
        self._last = p
        rate, eta = self.rates(p)
        self._progress.update(
            self._task,
            completed=p.episodes_done,
            total=p.episodes_total,
            rate=f"{rate:,.0f} env-steps/s" if rate else "",
            eta=f"ETA {eta:.0f}s" if eta is not None else "",
        )
        printed_at = self._printed.elapsed_s if self._printed is not None else float("-inf")
        if not self.live and p.elapsed_s - printed_at >= self.every_s:
            self._line(p)

    def _line(self, p: Any) -> None:
        self._printed = p
        rate, eta = self.rates(p)
        left = f", ETA {eta:.0f}s" if eta is not None and p.episodes_done < p.episodes_total else ""
        speed = f" ({rate:,.0f}/s)" if rate else ""  # none yet on the first report
        err_console.print(
            f"episodes {p.episodes_done}/{p.episodes_total}, {p.live_steps:,} env steps"
            f"{speed}, {p.elapsed_s:.0f}s{left}",
            highlight=False,
        )
