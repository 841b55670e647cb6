"""BENCHMARKS.md is written block by block: each benchmark owns the text between its
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` markers (appended when absent)."""

from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "BENCHMARKS.md"


def write_block(name: str, text: str, path: Path = BENCHMARKS) -> None:
    """Replace (or append) the block ``name`` of ``path`` with ``text``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text.rstrip()}\n{end}"
    body = path.read_text()
    if start in body and end in body:
        body = body[: body.index(start)] + block + body[body.index(end) + len(end) :]
    else:
        body = body.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(body)
