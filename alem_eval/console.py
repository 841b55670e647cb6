"""Output helpers shared by the commands: data to stdout, humans to stderr."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from rich.console import Console
from rich.table import Table

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
    """Print records as a rich table (stderr-free, to stdout), JSON or CSV."""
    columns = list(columns or (records[0].keys() if records else []))
    if fmt == OutputFormat.json:
        sys.stdout.write(json.dumps(list(records), indent=1, default=_json_default) + "\n")
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


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")
