"""The writer of a recording: :class:`Recorder`, which the evaluator hands steps to.

A recorder owns one protocol and eval difficulty under a recording root: it creates or
validates the root (``recording.json``), checks each batch of steps (:data:`FIELDS`, their
shapes and ranges), buffers at most one part per open episode with its observations
already in their compact exact form (:mod:`alem_eval.datasets.format`), writes each full
part atomically and ``episode.json`` last. It reuses an episode complete on disk
(:func:`~alem_eval.datasets.reader.check_episode`) when it names the same producer
(:mod:`alem_eval.core.producers`), and records it again otherwise.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.core.errors import DatasetError
from alem_eval.core.fsutil import write_bytes_atomic, write_text_atomic
from alem_eval.core.producers import producer_changes
from alem_eval.datasets.format import (
    EPISODE_DIR_PATTERN,
    EPISODE_FILE,
    EPISODE_META,
    FIELDS,
    FORMAT,
    OBS_NARROW,
    PART_STEPS,
    RECORDING_FILE,
    VERSION,
    Team,
    action_dtype,
    check_root_marker,
    choose_obs_dtype,
    decode_observations,
    encode_observations,
    episode_dir,
    guard_write,
    inexact_columns,
    team_path,
    why,
)
from alem_eval.datasets.reader import check_episode, episode_json


@dataclass
class _Piece:
    """Buffered steps of an open part: observations already in a compact exact form."""

    obs: dict[str, np.ndarray]
    bad: dict[str, np.ndarray]
    rest: dict[str, np.ndarray]
    steps: int


@dataclass
class _OpenEpisode:
    dir: Path
    team: Team
    episode: int
    shape: tuple[int, int, int]  # P, D, A
    next_t: int = 0
    part_t0: int = 0
    pieces: list[_Piece] = field(default_factory=list)
    parts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def buffered(self) -> int:
        return sum(p.steps for p in self.pieces)


class Recorder:
    """Writes the recording of one protocol and eval difficulty under ``root`` as the
    evaluator hands over steps (:class:`alem_eval.evaluate.records.RecordTo`).

    ``add_steps`` buffers at most one part (``part_steps`` steps, observations held in
    their compact exact form) per open episode and writes each full part atomically;
    ``finish_episode`` writes the rest and then ``episode.json``. An episode already
    complete on disk is skipped; an incomplete one (a run killed before its
    ``episode.json``) is cleared when it starts again at ``t0 == 0``. Every failure to
    write (unwritable or full disk) is a one-line :class:`DatasetError`.
    """

    def __init__(
        self,
        root: Path,
        *,
        protocol: str,
        eval_difficulty: str,
        env_version: str,
        part_steps: int = PART_STEPS,
    ):
        if part_steps < 1:
            raise DatasetError(f"part_steps must be at least 1, not {part_steps}")
        self.root = Path(root)
        self.protocol, self.eval_difficulty = protocol, eval_difficulty
        self.env_version = env_version
        self.part_steps = part_steps
        episode_dir(self.root, protocol, eval_difficulty, ("x",), 0)  # validates the names
        _prepare_root(self.root)
        self._open: dict[tuple[Team, int], _OpenEpisode] = {}
        self._skip: set[tuple[Team, int]] = set()
        self._complete: set[tuple[Team, int]] = set()
        self._producers: dict[Team, dict[str, Any]] = {}

    def _dir(self, team: Team, episode: int) -> Path:
        return episode_dir(self.root, self.protocol, self.eval_difficulty, team, episode)

    def set_producer(self, team: Sequence[str], producer: Mapping[str, Any]) -> None:
        """Declare what produces ``team``'s episodes from now on (JSON values, e.g.
        :func:`alem_eval.core.producers.cell_producer`): written into each of its
        ``episode.json``, and a recorded episode is reused only when it names the same
        (:mod:`alem_eval.core.producers`)."""
        team = tuple(team)
        self._producers[team] = json.loads(json.dumps(dict(producer)))  # as read back
        self._complete = {k for k in self._complete if k[0] != team}

    def producer(self, team: Sequence[str]) -> dict[str, Any]:
        """What an episode of ``team`` recorded now names: the protocol, eval difficulty
        and env version, then what :meth:`set_producer` declared."""
        own = {"protocol": self.protocol, "eval_difficulty": self.eval_difficulty}
        return {**own, "env_version": self.env_version, **self._producers.get(tuple(team), {})}

    def changes(self, team: Sequence[str], episode: int) -> list[str] | None:
        """How what produced a recorded episode differs from :meth:`producer`
        (:func:`~alem_eval.core.producers.producer_changes`): empty when it is complete and is
        reused; None when it is not complete on disk. An episode that names another
        producer is recorded again whatever its parts hold, so they are not read."""
        key = (tuple(team), int(episode))
        if key in self._complete:
            return []
        path = self._dir(*key)
        meta = episode_json(path)
        if meta is None:
            return None
        changes = producer_changes(meta, self.producer(team))
        if changes:
            return changes
        if check_episode(path)[0] is None:
            return None
        self._complete.add(key)
        return []

    def recorded_episodes(self, team: Sequence[str]) -> list[int]:
        """The episode numbers with a directory under ``team``'s (complete or not)."""
        base = self._dir(tuple(team), 0).parent
        found = (EPISODE_DIR_PATTERN.fullmatch(p.name) for p in _listdir(base))
        return sorted(int(m.group(1)) for m in found if m)

    def is_complete(self, team: Sequence[str], episode: int) -> bool:
        """``episode.json`` is there, every part it lists checks out (sha256, steps), and
        it names the team's :meth:`producer`: the episode is reused as recorded."""
        return self.changes(team, episode) == []

    def add_steps(
        self, team: Sequence[str], episode: int, t0: int, arrays: Mapping[str, np.ndarray]
    ) -> None:
        """Steps ``[t0, t0 + T)`` of an episode (``arrays``: :data:`FIELDS`, leading axis T)."""
        key = (tuple(team), int(episode))
        if t0 == 0:
            self._open.pop(key, None)
            self._skip.discard(key)
            if self.is_complete(*key):
                self._skip.add(key)
                return
        elif key in self._skip:
            return
        checked = _check_steps(arrays)
        if checked is None:  # no steps
            return
        ep = self._open.get(key)
        if ep is None:
            if t0 != 0:
                raise DatasetError(
                    f"{team_path(key[0])} episode {episode}: steps start at t={t0}, but the "
                    "episode was not started at t=0 by this recorder"
                )
            ep = self._start(key, checked)
        if t0 != ep.next_t:
            raise DatasetError(
                f"{team_path(key[0])} episode {episode}: steps not contiguous (got t={t0}, "
                f"expected t={ep.next_t})"
            )
        arrays_t, shape = checked
        if shape != ep.shape:
            raise DatasetError(
                f"{team_path(key[0])} episode {episode}: step shapes changed from "
                f"(P, D, A) = {ep.shape} to {shape}"
            )
        steps = len(arrays_t["actions"])
        start = 0
        while start < steps:
            take = min(steps - start, self.part_steps - ep.buffered)
            piece = {k: v[start : start + take] for k, v in arrays_t.items()}
            ep.pieces.append(_make_piece(piece, ep.shape))
            start += take
            ep.next_t += take
            if ep.buffered >= self.part_steps:
                self._flush(ep)

    def finish_episode(self, team: Sequence[str], episode: int, meta: Mapping[str, Any]) -> None:
        """Writes the buffered steps, then ``episode.json`` (``meta``: :data:`EPISODE_META`,
        plus any JSON-able extras, kept verbatim)."""
        key = (tuple(team), int(episode))
        if key in self._skip:
            return
        ep = self._open.pop(key, None)
        if ep is None:
            raise DatasetError(f"{team_path(key[0])} episode {episode}: finished but never started")
        missing = [k for k in EPISODE_META if k not in meta]
        if missing:
            raise DatasetError(f"episode meta lacks {', '.join(missing)}")
        self._flush(ep)
        length = int(meta["length"])
        if length != ep.next_t:
            raise DatasetError(
                f"{team_path(key[0])} episode {episode}: {ep.next_t} steps recorded, but the "
                f"episode has length {length}"
            )
        from alem_eval.core.version import __version__

        p, d, a = ep.shape
        doc: dict[str, Any] = {
            "format": FORMAT,
            "version": VERSION,
            "team": list(ep.team),
            "episode": ep.episode,
            **self.producer(ep.team),
            "alem_eval_version": __version__,
            "world_key": [int(x) for x in meta["world_key"]],
            "step_key": [int(x) for x in meta["step_key"]],
            "length": length,
            "terminated": bool(meta["terminated"]),
            "episode_return": float(meta["episode_return"]),
            "final_achievements": int(meta["final_achievements"]),
            "num_agents": p,
            "obs_dim": d,
            "num_actions": a,
            "shapes": _shapes(length, p, d, a),
            "dtypes": _dtypes(a),
            "parts": ep.parts,
        }
        for k, v in meta.items():
            doc.setdefault(k, v)
        path = ep.dir / EPISODE_FILE
        guard_write(
            path, lambda: write_text_atomic(path, json.dumps(doc, indent=1, default=_jsonable))
        )
        self._complete.add(key)

    # ------------------------------------------------------------------ internals
    def _start(self, key: tuple[Team, int], checked) -> _OpenEpisode:
        path = self._dir(*key)
        if path.exists():  # a stale, incomplete episode (is_complete said no)
            guard_write(path, lambda: shutil.rmtree(path))
        guard_write(path, lambda: path.mkdir(parents=True, exist_ok=True))
        ep = _OpenEpisode(path, key[0], key[1], checked[1])
        self._open[key] = ep
        return ep

    def _flush(self, ep: _OpenEpisode) -> None:
        if not ep.pieces:
            return
        pieces, ep.pieces = ep.pieces, []
        bad = {n: np.logical_or.reduce([p.bad[n] for p in pieces]) for n in OBS_NARROW}
        dtype, wide = choose_obs_dtype(bad, ep.shape[1])
        if len(pieces) == 1 and _same_encoding(pieces[0].obs, dtype, wide):
            obs = pieces[0].obs
        else:
            full = np.concatenate([decode_observations(p.obs) for p in pieces])
            obs = encode_observations(full, dtype, wide)
            del full
        arrays: dict[str, Any] = dict(obs)
        for k in FIELDS[1:]:
            arrays[k] = np.concatenate([p.rest[k] for p in pieces])
        steps = sum(p.steps for p in pieces)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        data = buf.getvalue()
        name = f"part-{len(ep.parts):05d}.npz"
        path = ep.dir / name
        guard_write(path, lambda: write_bytes_atomic(path, data))
        ep.parts.append(
            {
                "file": name,
                "t0": ep.part_t0,
                "steps": steps,
                "sha256": hashlib.sha256(data).hexdigest(),
                "bytes": len(data),
                "observations_dtype": dtype,
                "observations_wide_columns": int(wide.size),
            }
        )
        ep.part_t0 += steps


def _prepare_root(root: Path) -> None:
    """Create or validate a recording root, and check that it can be written."""
    if root.exists() and not root.is_dir():
        raise DatasetError(f"recording directory {root} is a file")
    guard_write(root, lambda: root.mkdir(parents=True, exist_ok=True))
    marker = root / RECORDING_FILE
    if marker.exists():
        check_root_marker(root)
        probe = root / f".probe-{secrets.token_hex(6)}"
        guard_write(root, lambda: _probe(probe))
        return
    if any(p.name != RECORDING_FILE and not p.name.startswith(".") for p in root.iterdir()):
        raise DatasetError(
            f"{root} is not empty and holds no {RECORDING_FILE}: record into a new or an "
            "existing recording directory"
        )
    text = json.dumps({"format": FORMAT, "version": VERSION}) + "\n"
    guard_write(root, lambda: write_text_atomic(marker, text))


def _listdir(path: Path) -> list[Path]:
    """The entries of ``path`` (none when it does not exist)."""
    try:
        return list(path.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DatasetError(f"cannot list {path}: {why(exc)}") from None


def _probe(path: Path) -> None:
    path.write_bytes(b"")
    path.unlink()


def _check_steps(
    arrays: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], tuple[int, int, int]] | None:
    """Validate and normalise one ``add_steps`` batch; None when it holds no steps."""
    missing = [k for k in FIELDS if k not in arrays]
    extra = [k for k in arrays if k not in FIELDS]
    if missing or extra:
        raise DatasetError(
            f"step arrays: missing {missing or 'none'}, unknown {extra or 'none'} "
            f"(expected {', '.join(FIELDS)})"
        )
    obs = np.asarray(arrays["observations"], np.float32)
    legal = np.asarray(arrays["legal_actions"])
    if obs.ndim != 3 or legal.ndim != 3:
        raise DatasetError(
            f"observations must be [T, P, D] and legal_actions [T, P, A], got "
            f"{list(obs.shape)} and {list(legal.shape)}"
        )
    t, p, d = obs.shape
    a = legal.shape[2]
    if t == 0:
        return None
    want = {
        "legal_actions": (t, p, a),
        "actions": (t, p),
        "rewards": (t, p),
        "dones": (t, p),
        "team_achievements": (t,),
    }
    for k, shape in want.items():
        if np.shape(arrays[k]) != shape:
            raise DatasetError(f"{k} has shape {list(np.shape(arrays[k]))}, expected {list(shape)}")
    actions = np.asarray(arrays["actions"])
    if not np.issubdtype(actions.dtype, np.integer) or (
        actions.size and (actions.min() < 0 or actions.max() >= a)
    ):
        raise DatasetError(f"actions must be integers in [0, {a})")
    ach = np.asarray(arrays["team_achievements"])
    if ach.size and (ach.min() < np.iinfo(np.int16).min or ach.max() > np.iinfo(np.int16).max):
        raise DatasetError("team_achievements do not fit int16")
    out = {
        "observations": obs,
        "legal_actions": legal.astype(bool),
        "actions": actions.astype(action_dtype(a)),
        "rewards": np.asarray(arrays["rewards"], np.float32),
        "dones": np.asarray(arrays["dones"]).astype(bool),
        "team_achievements": ach.astype(np.int16),
    }
    return out, (p, d, a)


def _make_piece(arrays: Mapping[str, np.ndarray], shape: tuple[int, int, int]) -> _Piece:
    obs = arrays["observations"]
    bad = inexact_columns(obs)
    dtype, wide = choose_obs_dtype(bad, shape[1])
    return _Piece(
        obs=encode_observations(obs, dtype, wide),
        bad=bad,
        rest={k: np.array(arrays[k]) for k in FIELDS[1:]},
        steps=len(obs),
    )


def _same_encoding(obs: Mapping[str, np.ndarray], dtype: str, wide: np.ndarray) -> bool:
    if obs["observations"].dtype != np.dtype(dtype):
        return False
    have = obs.get("observations_wide_columns", np.zeros(0, np.int32))
    return np.array_equal(have, wide)


def _shapes(length: int, p: int, d: int, a: int) -> dict[str, list[int]]:
    return {
        "observations": [length, p, d],
        "legal_actions": [length, p, a],
        "actions": [length, p],
        "rewards": [length, p],
        "dones": [length, p],
        "team_achievements": [length],
    }


def _dtypes(a: int) -> dict[str, str]:
    """Dtypes as read back (observations decoded to float32; stored per part)."""
    return {
        "observations": "float32",
        "legal_actions": "bool",
        "actions": action_dtype(a).name,
        "rewards": "float32",
        "dones": "bool",
        "team_achievements": "int16",
    }


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"{type(o).__name__} is not JSON serialisable")
