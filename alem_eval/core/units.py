"""Quantities as people read them: byte counts in decimal units (``pull`` summaries, tables,
``--dry-run`` plans)."""

from __future__ import annotations


def format_bytes(count: int) -> str:
    n = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover
