"""The small JSON state files a source keeps beside the checkpoints it reads.

Per-cell "verified" markers (``verify`` sets them through
:meth:`~alem_eval.hub.source_base.Source.mark_verified`; void as soon as a file of the cell
changes: :func:`files_fingerprint`), the commit each cell was pulled at, and which cached files
were hashed and found good (:class:`~alem_eval.hub.transfer.CheckedFiles`). Each lives in a
:class:`JsonStore`: one JSON file shared by threads and processes, written atomically under a
file lock. :data:`STATE_DIRNAME` is the folder they live in inside a Hub cache's repo folder,
next to ``blobs/`` and ``snapshots/``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alem_eval.core.fsutil import atomic_write

STATE_DIRNAME = "alem-eval"  # inside the repo's cache folder, next to blobs/ and snapshots/


def files_fingerprint(paths: Sequence[Path], base: Path) -> str | None:
    """Hash of (relative path, size, mtime) of every file; None if one is missing."""
    h = hashlib.sha256()
    for p in sorted(paths):
        try:
            st = p.stat()  # follows the cache's symlinks to the blobs
        except OSError:
            return None
        h.update(f"{p.relative_to(base).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


class JsonStore:
    """``{section: {key: value}}`` in one JSON file, shared by threads and processes."""

    def __init__(self, path: Path, section: str):
        self.path = path
        self.section = section
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def all(self) -> dict[str, Any]:
        recs = self._read().get(self.section)
        return recs if isinstance(recs, dict) else {}

    def get(self, key: str) -> Any:
        return self.all().get(key)

    def put(self, key: str, value: Any) -> None:
        self.update({key: value})

    def update(self, values: Mapping[str, Any]) -> None:
        """Raises OSError when the file cannot be written."""
        from filelock import FileLock

        current = self.all()
        values = {k: v for k, v in values.items() if current.get(k) != v}
        if not values:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, FileLock(str(self.path) + ".lock"):
            data = self._read()
            recs = data.get(self.section)
            data[self.section] = {**(recs if isinstance(recs, dict) else {}), **values}
            write_text(self.path, json.dumps(data, indent=1, sort_keys=True))


def write_text(path: Path, text: str, tmp_dir: Path | None = None) -> None:
    """The one atomic writer (:mod:`alem_eval.core.fsutil`), temp files named ``.NAME.*.tmp``
    (beside ``path``, or in ``tmp_dir``)."""
    atomic_write(
        path,
        lambda fh: fh.write(text),
        binary=False,
        prefix=f".{path.name}.",
        suffix=".tmp",
        tmp_dir=tmp_dir,
    )


def os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__
