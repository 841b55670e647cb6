"""Output helpers shared by the commands: data to stdout, humans to stderr."""

from __future__ import annotations

import contextlib
import csv
import io
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table

from alem_eval.core.jsonout import json_text
from alem_eval.core.progress import EpisodeBar as EpisodeBar
from alem_eval.core.progress import download_bar as download_bar
from alem_eval.core.progress import err_console as err_console


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
    """A ``--dry-run`` plan (:class:`alem_eval.scoring.plan.RunPlan`): the whole plan as JSON, or a
    row per cell (sizes readable in the table); its notes and totals on stderr."""
    if fmt == OutputFormat.json:
        emit_json(plan.as_json())
    else:
        rows = plan.records()
        if fmt == OutputFormat.table:
            from alem_eval.core.units import format_bytes

            sized = ("bytes", "bytes_to_download")
            rows = [{k: format_bytes(v) if k in sized else v for k, v in r.items()} for r in rows]
        emit_records(rows, fmt, title=f"{plan.command} --dry-run: {plan.source}")
    for note in plan.notes:
        err_console.print(f"[yellow]note[/yellow] {note}", highlight=False)
    err_console.print(plan.summary(), highlight=False)


def _cell(v: Any) -> str:
    """A value as a table cell: data, never rich markup (``[no CI]`` stays printed)."""
    from rich.markup import escape

    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def emit_json(doc: Any) -> None:
    """One strict JSON document on stdout: non-finite floats (numpy's too) are ``null``,
    never the ``NaN`` that JSON parsers refuse (:mod:`alem_eval.core.jsonout`)."""
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


def split_over_devices(devices: str | None) -> None:
    """``--devices``: expose that many CPU devices to JAX (before it starts its backends;
    ``auto``: one per core) and say so on stderr; unset leaves JAX's devices as they are
    (:func:`alem_eval.api.teams.use_devices`, what ``crossplay`` and ``scenario`` call)."""
    from alem_eval.api.teams import use_devices

    use_devices(devices)


def play_or_plan(call: Callable[..., Any], dry_run: bool, fmt: OutputFormat) -> Any:
    """``alem-eval crossplay`` / ``scenario``: ``call`` is the API function with the
    command's options. With ``--dry-run`` the plan ``call(dry_run=True)`` returns is
    printed in ``fmt`` (:func:`emit_plan`) and None returned; else ``call()`` plays inside
    :func:`alem_eval.api.calls.a_command` (the compilation cache on before it compiles),
    and the results store's warnings its run raised print one line each after it.
    Returns what it played."""
    if dry_run:
        emit_plan(call(dry_run=True), fmt)
        return None
    from alem_eval.api.calls import a_command

    with a_command() as notes:
        played = call()
    for note in notes:
        err_console.print(f"[yellow]warning[/yellow] {note}", highlight=False)
    return played
