"""The reader of a recording: :func:`open_recording` and what it lists.

:func:`check_episode` decides whether an episode directory is complete (``episode.json``
of this format, every part it lists there with its sha256, steps contiguous and adding up
to its length); :func:`open_recording` scans a recording root into a :class:`Recording`
of complete episodes (:class:`EpisodeRecord`, whose arrays are read and checked again only
when asked for) and incomplete ones (:class:`IncompleteEpisode`, never read as data).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.core.errors import DatasetError
from alem_eval.datasets.format import (
    EPISODE_DIR_PATTERN,
    EPISODE_FILE,
    FIELDS,
    FORMAT,
    RECORDING_FILE,
    VERSION,
    Team,
    check_root_marker,
    decode_observations,
    episode_dir,
    why,
)


def check_episode(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(meta, None)`` when the episode at ``path`` is complete: ``episode.json`` is
    there and of this format, its parts exist with their sha256, and their steps are
    contiguous and add up to its length; else ``(None, reason)``."""
    try:
        text = (path / EPISODE_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "no episode.json (interrupted before the episode finished)"
    except OSError as exc:
        return None, f"episode.json unreadable: {why(exc)}"
    try:
        meta = json.loads(text)
        if (meta.get("format"), meta.get("version")) != (FORMAT, VERSION):
            return None, f"episode.json of another format ({meta.get('format')!r})"
        parts = meta["parts"]
        length = int(meta["length"])
        t = 0
        for part in parts:
            name = str(part["file"])
            if "/" in name or not name.endswith(".npz"):
                return None, f"episode.json names a bad part {name!r}"
            if int(part["t0"]) != t:
                return None, f"{name}: steps not contiguous"
            digest = _sha256_file(path / name)
            if digest is None:
                return None, f"{name} missing"
            if digest != part["sha256"]:
                return None, f"{name} damaged (sha256 mismatch)"
            t += int(part["steps"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return None, f"episode.json malformed ({type(exc).__name__}: {exc})"
    if t != length or length < 1:
        return None, f"parts hold {t} steps, the episode has {length}"
    return meta, None


def episode_json(path: Path) -> dict[str, Any] | None:
    """The episode's ``episode.json`` if it is there, readable and of this format (its
    parts unchecked: :func:`check_episode` checks them)."""
    try:
        meta = json.loads((path / EPISODE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(meta, dict) and (meta.get("format"), meta.get("version")) == (FORMAT, VERSION)
    return meta if ok else None


def _sha256_file(path: Path) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


@dataclass(frozen=True)
class EpisodeRecord:
    """One complete recorded episode: ``meta`` is its ``episode.json``; the arrays are read
    (and their sha256 checked again) only when asked for."""

    path: Path
    meta: Mapping[str, Any]

    @property
    def team(self) -> Team:
        return tuple(self.meta["team"])

    @property
    def episode(self) -> int:
        return int(self.meta["episode"])

    @property
    def length(self) -> int:
        return int(self.meta["length"])

    @property
    def protocol(self) -> str:
        return str(self.meta["protocol"])

    @property
    def eval_difficulty(self) -> str:
        return str(self.meta["eval_difficulty"])

    def parts(self) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        """``(t0, arrays)`` per part, in order: :data:`FIELDS`, observations float32."""
        for part in self.meta["parts"]:
            file = self.path / part["file"]
            try:
                data = file.read_bytes()
            except OSError as exc:
                raise DatasetError(f"cannot read {file}: {why(exc)}") from None
            if hashlib.sha256(data).hexdigest() != part["sha256"]:
                raise DatasetError(f"{file} changed since the recording was opened")
            with np.load(io.BytesIO(data)) as z:
                stored = {k: z[k] for k in z.files}
            arrays = {"observations": decode_observations(stored)}
            arrays.update({k: stored[k] for k in FIELDS[1:]})
            yield int(part["t0"]), arrays

    def arrays(self) -> dict[str, np.ndarray]:
        """The whole episode: :data:`FIELDS` with leading axis ``length``."""
        parts = [a for _, a in self.parts()]
        return {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}


@dataclass(frozen=True)
class IncompleteEpisode:
    path: Path
    reason: str


@dataclass(frozen=True)
class Recording:
    """A recording directory: its complete episodes (sorted by protocol, eval difficulty,
    team directory, episode) and the incomplete ones, never read as data."""

    root: Path
    complete: tuple[EpisodeRecord, ...]
    incomplete: tuple[IncompleteEpisode, ...]

    def episodes(
        self, *, protocol: str | None = None, eval_difficulty: str | None = None
    ) -> Iterator[EpisodeRecord]:
        for ep in self.complete:
            if protocol is not None and ep.protocol != protocol:
                continue
            if eval_difficulty is not None and ep.eval_difficulty != eval_difficulty:
                continue
            yield ep


def open_recording(path: str | os.PathLike) -> Recording:
    """Scan a recording directory; every listed episode has been checked (sha256 of every
    part), so reading it back gives what was recorded."""
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"no recording directory {root}")
    if not (root / RECORDING_FILE).is_file():
        raise DatasetError(f"{root} is not an alem-eval recording (no {RECORDING_FILE})")
    check_root_marker(root)
    complete: list[EpisodeRecord] = []
    incomplete: list[IncompleteEpisode] = []
    for ep_dir in _episode_dirs(root):
        rel = ep_dir.relative_to(root).parts
        meta, reason = check_episode(ep_dir)
        if meta is not None:
            where = episode_dir(
                root,
                str(meta.get("protocol")),
                str(meta.get("eval_difficulty")),
                tuple(meta.get("team") or ()),
                int(meta.get("episode", -1)),
            )
            if where != ep_dir:
                meta, reason = None, f"episode.json belongs at {where.relative_to(root)}"
        if meta is None:
            incomplete.append(IncompleteEpisode(ep_dir, reason or "incomplete"))
        elif len(rel) < 4:
            incomplete.append(IncompleteEpisode(ep_dir, "outside <protocol>/<difficulty>/"))
        else:
            complete.append(EpisodeRecord(ep_dir, meta))
    return Recording(root, tuple(complete), tuple(incomplete))


def _episode_dirs(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        keep = []
        for name in sorted(dirnames):
            if EPISODE_DIR_PATTERN.fullmatch(name):
                found.append(Path(dirpath) / name)
            elif not name.startswith("."):
                keep.append(name)
        dirnames[:] = keep
    return sorted(found)
