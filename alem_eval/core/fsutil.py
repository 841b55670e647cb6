"""Atomic file writes: the file at ``path`` is complete or not there at all.

:func:`atomic_write` is the one implementation (results Parquet files, the report, JSON
written by :func:`alem_eval.hub.released.write_json_atomic`): write a temp file in the same
directory, flush and fsync it, ``os.replace`` it over ``path``, fsync the directory. An
exception (or Ctrl-C) mid-write removes the temp file and leaves ``path`` as it was; a
process killed outright leaves at most the temp file (named ``<prefix>...``), never a
partial ``path``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

TMP_PREFIX = ".tmp-"


def atomic_write(
    path: str | os.PathLike,
    write: Callable[[IO[Any]], Any],
    *,
    binary: bool = True,
    prefix: str = TMP_PREFIX,
    suffix: str = "",
    tmp_dir: str | os.PathLike | None = None,
) -> Path:
    """Write ``path`` atomically: ``write(fh)`` fills a temp file opened in ``"wb"`` (or
    ``"w"``, UTF-8, with ``binary=False``) beside it, or in ``tmp_dir`` (on the same file
    system: for a directory whose readers must never see a temp file). Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.parent if tmp_dir is None else Path(tmp_dir)
    staging.mkdir(parents=True, exist_ok=True)
    fd, tmp = _create_temp(staging, prefix, suffix)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)
    return path


def _create_temp(directory: Path, prefix: str, suffix: str) -> tuple[int, Path]:
    """A new file in ``directory`` with the permissions a plain ``open`` would give
    (0o666 minus the umask; ``tempfile.mkstemp`` would make it private, 0o600)."""
    while True:
        tmp = directory / f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:  # pragma: no cover - 48 random bits
            continue


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """``path.write_text(text, encoding="utf-8")``, atomically."""
    return atomic_write(path, lambda fh: fh.write(text), binary=False)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """``path.write_bytes(data)``, atomically."""
    return atomic_write(path, lambda fh: fh.write(data))


def fsync_dir(path: str | os.PathLike) -> None:
    """Persist a directory's entries (a rename into it); best effort where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
