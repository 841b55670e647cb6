"""A memo of content hashes keyed by the files' stat stamps, so that a checkpoint whose files
have not changed is not read again to hash it (``score``, ``compare`` and ``crossplay`` hash
every cell they evaluate: ~13 GB for the release).

One small JSON file per directory under ``<user cache>/checkpoint-hashes/``, named by a hash
of the directory's real path, holding the hash and the stamp it was computed at: every
file's relative path, size, mtime, ctime, inode and device. Any change to a file (a write, a
touch, a replacement, even one that puts the mtime back: the ctime still moves) changes the
stamp and the hash is computed again. Files are written atomically; a memo that is missing,
unreadable, corrupt or of another format is ignored, and one that cannot be written means
no memo, never an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from alem_eval.core.fsutil import write_text_atomic
from alem_eval.core.paths import user_cache_dir

MEMO_DIRNAME = "checkpoint-hashes"
_FORMAT = 1  # bump when the hash computed for the same files changes


def memo_dir() -> Path:
    return user_cache_dir() / MEMO_DIRNAME


def stat_stamp(root: Path, files: Sequence[Path]) -> str | None:
    """A digest of every file's relative path and stat (following links); None if one
    cannot be stat'ed."""
    h = hashlib.sha256()
    for f in files:
        try:
            st = f.stat()
        except OSError:
            return None
        rel = f.relative_to(root).as_posix()
        h.update(
            f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}\0{st.st_dev}\n".encode()
        )
    return h.hexdigest()


def memoised_hash(
    root: Path, files: Sequence[Path], compute: Callable[[], str], *, kind: str
) -> str:
    """``compute()`` (a hash of ``files`` under ``root``), or the value memoised for the same
    files with the same stamps. ``kind`` names the hash (one memo per root and kind)."""
    key = f"{kind}\0{os.path.realpath(root)}"
    before = stat_stamp(root, files)
    if before is None:
        return compute()
    path = memo_dir() / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
    memo = _read(path)
    if memo.get("key") == key and memo.get("stamp") == before:
        value = memo.get("hash")
        if isinstance(value, str) and value:
            return value
    value = compute()
    if stat_stamp(root, files) == before:  # no file changed while it was read
        record = {"format": _FORMAT, "key": key, "stamp": before, "hash": value}
        with contextlib.suppress(OSError):
            write_text_atomic(path, json.dumps(record))
    return value


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) and data.get("format") == _FORMAT else {}
