"""BENCHMARKS.md is written block by block: each benchmark owns the text between its
``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` markers (appended when absent)."""

from __future__ import annotations

import os
import re
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


def cpu_model() -> str:
    """``<model name>, <N> cores`` of this machine (from /proc/cpuinfo where there is one)."""
    cpu = "unknown CPU"
    try:
        m = re.search(r"model name\s*:\s*(.*)", Path("/proc/cpuinfo").read_text())
        cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores"
