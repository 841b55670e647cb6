"""Evaluation episodes as offline-MARL datasets (``score --record``, ``alem-eval dataset``).

Three pieces, host-only numpy (JAX and flashbax, the ``datasets`` extra, are imported only
by the vaults' export and description):

* **the recording** (:class:`Recorder` writes it, :func:`open_recording` reads it): every
  step of every evaluated episode, in compressed ``.npz`` parts, an episode's
  ``episode.json`` written last as its commit marker;
* **Flashbax Vaults** (:func:`export_vault`) in the experience structure OG-MARL's loaders
  read, each with a dataset card (``card.json`` / ``card.md``, :func:`dataset_card`);
* **a description** of a recording or a vault (:func:`dataset_info`).

Recording format, version 1::

    DIR/recording.json                    {"format": "alem-eval-recording", "version": 1}
    DIR/<protocol>/<eval_difficulty>/<team>/episode-<EEEEEE>/
        part-<KKKKK>.npz                  steps [t0, t0 + T) of the episode
        episode.json                      written last, atomically: the commit marker

``<team>`` is :func:`team_path`. ``episode.json`` also names what produced the episode
(protocol, eval difficulty, env version and, from ``score --record``, checkpoint hash,
config hash and step cap): a recorder reuses an episode only when all of them match
(:mod:`alem_eval.core.producers`). A part holds, for its ``T`` steps (step ``t``: what the
agents saw, what they did, what came back): ``observations [T, P, D]`` (see below),
``legal_actions [T, P, A]`` bool, ``actions [T, P]`` (the smallest unsigned int holding
``A - 1``), ``rewards [T, P]`` float32, ``dones [T, P]`` bool and ``team_achievements [T]``
int16 (distinct achievements the team holds after the step).

Observations are float32 in the env and are stored losslessly in the narrowest dtype
(uint8, int8, float16, else float32) that gives every value back bit for bit, chosen per
part. Columns (observation features) with a value the narrow dtype does not hold exactly
are stored beside it in float32: ``observations_wide_columns [K]`` int32 and
``observations_wide [T, P, K]`` float32 (the narrow array holds 0 there). The choice
minimises the raw bytes per step (``itemsize * D + 4 * K``). Alem's observations are
one-hot and count features in {0, 1, 2, ...} plus about 70 of 9,730 columns of fractions
(light levels, normalised stats), so they are stored as uint8 + those columns in float32.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.core.errors import DatasetError
from alem_eval.core.extras import require
from alem_eval.core.fsutil import write_bytes_atomic, write_text_atomic
from alem_eval.core.producers import producer_changes

FORMAT = "alem-eval-recording"
VERSION = 1
RECORDING_FILE = "recording.json"
EPISODE_FILE = "episode.json"
PART_STEPS = 256  # steps per part: with Alem's obs about 0.5 MB compressed, 30 MB in RAM
FIELDS = ("observations", "legal_actions", "actions", "rewards", "dones", "team_achievements")
OBS_NARROW: tuple[str, ...] = ("uint8", "int8", "float16")  # tried in this order; then float32
EPISODE_META = (
    "length",
    "terminated",
    "episode_return",
    "final_achievements",
    "world_key",
    "step_key",
)
_EPISODE_DIR = re.compile(r"episode-(\d{6,})$")
CARD_FORMAT = "alem-eval-dataset-card"
VAULT_PER: tuple[str, ...] = ("cell", "group")
VAULT_FORMATS: tuple[str, ...] = ("vault",)
STAGING_DIR = ".staging"  # out/<protocol>/.staging: vaults being written or replaced

Team = tuple[str, ...]


# ----------------------------------------------------------------------------------------
# Layout
# ----------------------------------------------------------------------------------------
def team_path(cells: Sequence[str]) -> str:
    """The directory of a team's episodes under ``<protocol>/<eval_difficulty>/``: the cell
    id's path for a self-play team (``tiny/ippo-rnn/easy/seed0``), else
    ``mixed/<first 12 hex of sha1(json.dumps(list(cells)))>``."""
    cells = tuple(cells)
    if not cells:
        raise DatasetError("a team needs at least one cell")
    for c in cells:
        parts = c.split("/")
        if not c or "\\" in c or any(p in ("", ".", "..") for p in parts) or c == "mixed":
            raise DatasetError(f"cell id {c!r} cannot name a recording directory")
    if len(set(cells)) == 1:
        return cells[0]
    return "mixed/" + hashlib.sha1(json.dumps(list(cells)).encode()).hexdigest()[:12]


def episode_dir(
    root: Path, protocol: str, eval_difficulty: str, team: Sequence[str], episode: int
) -> Path:
    """``root/<protocol>/<eval_difficulty>/<team_path>/episode-<EEEEEE>``."""
    for name, value in (("protocol", protocol), ("eval_difficulty", eval_difficulty)):
        if not value or "/" in value or value in (".", ".."):
            raise DatasetError(f"{name} {value!r} cannot name a recording directory")
    return root / protocol / eval_difficulty / team_path(team) / f"episode-{int(episode):06d}"


def _check_root_marker(root: Path) -> None:
    try:
        doc = json.loads((root / RECORDING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{root / RECORDING_FILE} cannot be read: {_why(exc)}") from None
    if not isinstance(doc, dict) or (doc.get("format"), doc.get("version")) != (FORMAT, VERSION):
        got = (
            f"{doc.get('format')!r} version {doc.get('version')!r}"
            if isinstance(doc, dict)
            else "no format"
        )
        raise DatasetError(
            f"{root} holds a recording of format {got}; this alem-eval reads and writes "
            f"{FORMAT!r} version {VERSION}: use another directory"
        )


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


# ----------------------------------------------------------------------------------------
# Observations: the narrowest exact dtype, per part
# ----------------------------------------------------------------------------------------
def inexact_columns(obs: np.ndarray) -> dict[str, np.ndarray]:
    """``obs [..., D]`` float32 -> for each of :data:`OBS_NARROW`, ``[D]`` bool: the columns
    holding a value that float32 -> that dtype -> float32 does not give back bit for bit
    (NaN, -0.0, fractions, out of range: all count as inexact)."""
    flat = np.ascontiguousarray(obs, np.float32).reshape(-1, obs.shape[-1])
    if flat.shape[0] == 0:
        return {name: np.zeros(flat.shape[1], bool) for name in OBS_NARROW}
    bits = flat.view(np.uint32)
    with np.errstate(invalid="ignore", over="ignore"):
        # One integer round trip (int16 holds uint8 and int8) and the column ranges decide
        # both integer dtypes; float16 (slow to convert) is tried only on the columns
        # neither holds, as it holds every value they do (integers up to 2048).
        integral = ~np.any(flat.astype(np.int16).astype(np.float32).view(np.uint32) != bits, 0)
        lo, hi = flat.min(axis=0), flat.max(axis=0)
        out = {
            "uint8": ~(integral & (lo >= 0) & (hi <= 255)),
            "int8": ~(integral & (lo >= -128) & (hi <= 127)),
        }
        half = out["uint8"] & out["int8"]
        sub = flat[:, half]
        out["float16"] = np.zeros_like(half)
        out["float16"][half] = np.any(
            sub.astype(np.float16).astype(np.float32).view(np.uint32) != sub.view(np.uint32), 0
        )
    return out


def choose_obs_dtype(bad: Mapping[str, np.ndarray], dim: int) -> tuple[str, np.ndarray]:
    """The encoding with the fewest raw bytes per step, given :func:`inexact_columns`:
    ``(dtype, wide columns)``; ties go to the narrower dtype, float32 has no wide columns."""
    best: tuple[str, np.ndarray] = ("float32", np.zeros(0, np.int32))
    best_cost = 4 * dim
    for name in OBS_NARROW:
        wide = np.flatnonzero(bad[name]).astype(np.int32)
        cost = np.dtype(name).itemsize * dim + 4 * wide.size
        if cost < best_cost:
            best, best_cost = (name, wide), cost
    return best


def encode_observations(obs: np.ndarray, dtype: str, wide: np.ndarray) -> dict[str, np.ndarray]:
    """The stored arrays of ``obs [T, P, D]`` float32 (see the module docstring)."""
    if dtype == "float32":
        return {"observations": np.asarray(obs, np.float32)}
    with np.errstate(invalid="ignore", over="ignore"):
        narrow = obs.astype(dtype)
    out = {"observations": narrow}
    if wide.size:
        narrow[..., wide] = 0
        out["observations_wide_columns"] = np.asarray(wide, np.int32)
        out["observations_wide"] = np.ascontiguousarray(obs[..., wide], np.float32)
    return out


def decode_observations(arrays: Mapping[str, np.ndarray]) -> np.ndarray:
    """Inverse of :func:`encode_observations`: ``[T, P, D]`` float32, bit for bit."""
    obs = np.asarray(arrays["observations"]).astype(np.float32)
    if "observations_wide_columns" in arrays:
        obs[..., np.asarray(arrays["observations_wide_columns"])] = arrays["observations_wide"]
    return obs


def obs_dtype_join(dtypes: Iterable[str]) -> str:
    """One dtype holding the values of parts stored in ``dtypes`` exactly ("float32" for a
    part with wide columns): uint8 and int8 values are integers in [-128, 255], which
    float16 holds exactly."""
    found = set(dtypes)
    if len(found) <= 1:
        return found.pop() if found else "float32"
    return "float32" if "float32" in found else "float16"


def action_dtype(num_actions: int) -> np.dtype:
    """The smallest unsigned int holding ``0 .. num_actions - 1``."""
    for dt in (np.uint8, np.uint16, np.uint32):
        if num_actions - 1 <= np.iinfo(dt).max:
            return np.dtype(dt)
    raise DatasetError(f"{num_actions} actions do not fit uint32")


# ----------------------------------------------------------------------------------------
# Writer
# ----------------------------------------------------------------------------------------
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
        meta = _episode_json(path)
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
        found = (_EPISODE_DIR.fullmatch(p.name) for p in _listdir(base))
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
        _write(path, lambda: write_text_atomic(path, json.dumps(doc, indent=1, default=_jsonable)))
        self._complete.add(key)

    # ------------------------------------------------------------------ internals
    def _start(self, key: tuple[Team, int], checked) -> _OpenEpisode:
        path = self._dir(*key)
        if path.exists():  # a stale, incomplete episode (is_complete said no)
            _write(path, lambda: shutil.rmtree(path))
        _write(path, lambda: path.mkdir(parents=True, exist_ok=True))
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
        _write(path, lambda: write_bytes_atomic(path, data))
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
    _write(root, lambda: root.mkdir(parents=True, exist_ok=True))
    marker = root / RECORDING_FILE
    if marker.exists():
        _check_root_marker(root)
        probe = root / f".probe-{secrets.token_hex(6)}"
        _write(root, lambda: _probe(probe))
        return
    if any(p.name != RECORDING_FILE and not p.name.startswith(".") for p in root.iterdir()):
        raise DatasetError(
            f"{root} is not empty and holds no {RECORDING_FILE}: record into a new or an "
            "existing recording directory"
        )
    text = json.dumps({"format": FORMAT, "version": VERSION}) + "\n"
    _write(root, lambda: write_text_atomic(marker, text))


def _listdir(path: Path) -> list[Path]:
    """The entries of ``path`` (none when it does not exist)."""
    try:
        return list(path.iterdir())
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise DatasetError(f"cannot list {path}: {_why(exc)}") from None


def _probe(path: Path) -> None:
    path.write_bytes(b"")
    path.unlink()


def _write(path: Path, action) -> Any:
    """Run a filesystem action; an OSError becomes a one-line DatasetError naming ``path``."""
    try:
        return action()
    except OSError as exc:
        raise DatasetError(f"cannot write {path}: {_why(exc)}") from None


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


# ----------------------------------------------------------------------------------------
# Reader
# ----------------------------------------------------------------------------------------
def check_episode(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """``(meta, None)`` when the episode at ``path`` is complete: ``episode.json`` is
    there and of this format, its parts exist with their sha256, and their steps are
    contiguous and add up to its length; else ``(None, reason)``."""
    try:
        text = (path / EPISODE_FILE).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "no episode.json (interrupted before the episode finished)"
    except OSError as exc:
        return None, f"episode.json unreadable: {_why(exc)}"
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


def _episode_json(path: Path) -> dict[str, Any] | None:
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
                raise DatasetError(f"cannot read {file}: {_why(exc)}") from None
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
    _check_root_marker(root)
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
            if _EPISODE_DIR.fullmatch(name):
                found.append(Path(dirpath) / name)
            elif not name.startswith("."):
                keep.append(name)
        dirnames[:] = keep
    return sorted(found)


# ----------------------------------------------------------------------------------------
# Dataset cards
# ----------------------------------------------------------------------------------------
def distribution(values: Sequence[float]) -> dict[str, float] | None:
    """mean, std (population), min, quartiles, max of ``values`` (None when empty)."""
    if len(values) == 0:
        return None
    x = np.asarray(values, np.float64)
    q25, q50, q75 = np.percentile(x, [25, 50, 75])
    return {
        "mean": float(x.mean()),
        "std": float(x.std()),
        "min": float(x.min()),
        "q25": float(q25),
        "median": float(q50),
        "q75": float(q75),
        "max": float(x.max()),
    }


def dataset_card(
    episodes: Sequence[EpisodeRecord],
    *,
    name: str,
    observation_dtype: str | None = None,
    vault: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The dataset card of ``episodes`` (what ``card.json`` holds), computed from their
    ``episode.json``: source cells, teams, protocol, env version, eval difficulty, episodes
    and steps, return / length / achievement distributions, observation dtypes."""
    from alem_eval.core.version import __version__

    if not episodes:
        raise DatasetError(f"{name}: no complete episodes")
    metas = [e.meta for e in episodes]

    def one(key: str) -> Any:
        values = sorted({str(m[key]) for m in metas})
        return values[0] if len(values) == 1 else values

    first = metas[0]
    for k in ("num_agents", "obs_dim", "num_actions"):
        if any(m[k] != first[k] for m in metas):
            raise DatasetError(f"{name}: episodes differ in {k}; they cannot share a dataset")
    teams = list(dict.fromkeys(e.team for e in episodes))
    part_dtypes = Counter(
        "float32" if p.get("observations_wide_columns") else p["observations_dtype"]
        for m in metas
        for p in m["parts"]
    )
    stored = Counter(p["observations_dtype"] for m in metas for p in m["parts"])
    card: dict[str, Any] = {
        "format": CARD_FORMAT,
        "version": 1,
        "name": name,
        "source_cells": sorted({c for t in teams for c in t}),
        "teams": [
            {"slots": list(t), "episodes": sum(e.team == t for e in episodes)} for t in teams
        ],
        "protocol": one("protocol"),
        "eval_difficulty": one("eval_difficulty"),
        "env_version": one("env_version"),
        "alem_eval_version": __version__,
        "recorded_with_alem_eval": one("alem_eval_version"),
        "num_agents": int(first["num_agents"]),
        "obs_dim": int(first["obs_dim"]),
        "num_actions": int(first["num_actions"]),
        "episodes": len(metas),
        "steps": int(sum(m["length"] for m in metas)),
        "terminated_episodes": int(sum(bool(m["terminated"]) for m in metas)),
        "episode_return": distribution([float(m["episode_return"]) for m in metas]),
        "episode_length": distribution([float(m["length"]) for m in metas]),
        "final_achievements": distribution([float(m["final_achievements"]) for m in metas]),
        "observation_dtype": observation_dtype or obs_dtype_join(part_dtypes),
        "recorded_observation_dtypes": dict(sorted(stored.items())),
        "episode_list": [
            {
                "team": list(e.team),
                "episode": e.episode,
                "world_key": list(e.meta["world_key"]),
                "step_key": list(e.meta["step_key"]),
                "length": e.length,
                "terminated": bool(e.meta["terminated"]),
                "episode_return": float(e.meta["episode_return"]),
                "final_achievements": int(e.meta["final_achievements"]),
            }
            for e in episodes
        ],
    }
    if vault is not None:
        card["vault"] = dict(vault)
    return card


def card_markdown(card: Mapping[str, Any]) -> str:
    """``card.md``: the card for people."""

    def dist(d: Mapping[str, float] | None) -> str:
        if not d:
            return "-"
        return (
            f"mean {d['mean']:.4g}, std {d['std']:.4g}, min {d['min']:.4g}, "
            f"quartiles {d['q25']:.4g} / {d['median']:.4g} / {d['q75']:.4g}, max {d['max']:.4g}"
        )

    lines = [
        f"# Alem offline-MARL dataset: {card['name']}",
        "",
        "Greedy evaluation episodes of trained Alem policies, recorded by alem-eval "
        "(`alem-eval score --record`) and exported with `alem-eval dataset export`.",
        "",
        "| | |",
        "| --- | --- |",
        f"| source cells | {', '.join(f'`{c}`' for c in card['source_cells'])} |",
        f"| teams | {len(card['teams'])} |",
        f"| protocol | {card['protocol']} |",
        f"| eval difficulty | {card['eval_difficulty']} |",
        f"| env version | {card['env_version']} |",
        f"| alem-eval version | {card['alem_eval_version']} |",
        f"| agents / obs dim / actions | {card['num_agents']} / {card['obs_dim']} / "
        f"{card['num_actions']} |",
        f"| episodes (terminated) | {card['episodes']} ({card['terminated_episodes']}) |",
        f"| steps | {card['steps']} |",
        f"| episode return | {dist(card['episode_return'])} |",
        f"| episode length | {dist(card['episode_length'])} |",
        f"| final team achievements | {dist(card['final_achievements'])} |",
        f"| observation dtype | {card['observation_dtype']} (exact; cast to float32 to use) |",
    ]
    vault = card.get("vault")
    if vault:
        # older cards have no rel_dir: the directory holding the .vlt directory
        rel_dir = vault.get("rel_dir") or f"<the directory holding {vault['vault_name']}>"
        where_from = (
            "the directory holding this vault's `.vlt` directory, as `dataset export` was "
            "given it (relative to where it ran, unless absolute)"
        )
        lines += [
            "",
            "## Loading",
            "",
            "```python",
            "from flashbax.vault import Vault",
            f'vault = Vault(vault_name="{vault["vault_name"]}", vault_uid="{vault["vault_uid"]}",',
            f'              rel_dir="{rel_dir}")',
            "experience = vault.read().experience  # OG-MARL's structure: [1, T, ...]",
            "```",
            "",
            f"`rel_dir` is {where_from}.",
            "",
            "| key | shape | dtype |",
            "| --- | --- | --- |",
        ]
        for key, spec in vault["structure"].items():
            lines.append(f"| `{key}` | {spec['shape']} | {spec['dtype']} |")
        lines += [
            "",
            "Episodes follow each other on the time axis in the order of `episode_list` in "
            "card.json; the last step of each has `terminals` (the env ended it) or "
            "`truncations` (the step cap) set for every agent. Evaluation episodes often "
            "end at the cap, so split episodes on both: OG-MARL's `og_marl.vault_utils` "
            'take `done_flags=("terminals", "truncations")` (their default, '
            "`terminals` alone, merges a capped episode into the next).",
            "",
            "`rewards` are each agent's own reward. The episode return above is the sum "
            "over steps of the mean over agents (the team's reward); OG-MARL's return "
            "utilities (`calculate_returns`, `describe_episode_returns`) read agent 0's "
            "reward, which differs unless the env shares its reward.",
        ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------
# Flashbax Vault export (OG-MARL's experience structure)
# ----------------------------------------------------------------------------------------
def vault_groups(
    recording: Recording, per: str = "cell"
) -> dict[tuple[str, str, str], list[EpisodeRecord]]:
    """``(protocol, eval_difficulty, vault uid) -> episodes``: ``per="cell"`` one vault per
    self-play cell; ``per="group"`` one per (budget, algorithm, difficulty), pooling the
    seeds (the cell id without its last level); a mixed team is its own vault either way."""
    if per not in VAULT_PER:
        raise DatasetError(f"unknown grouping {per!r}: per must be one of {', '.join(VAULT_PER)}")
    groups: dict[tuple[str, str, str], list[EpisodeRecord]] = {}
    for ep in recording.complete:
        path = team_path(ep.team)
        if len(set(ep.team)) == 1 and per == "group" and "/" in path:
            path = path.rsplit("/", 1)[0]
        uid = path.replace("/", "_")
        groups.setdefault((ep.protocol, ep.eval_difficulty, uid), []).append(ep)
    return groups


def vault_location(out: Path, protocol: str, eval_difficulty: str, uid: str) -> Path:
    """``out/<protocol>/<eval_difficulty>.vlt/<uid>``: open it with flashbax as
    ``Vault(vault_name="<eval_difficulty>.vlt", vault_uid=uid, rel_dir="out/<protocol>")``."""
    return out / protocol / f"{eval_difficulty}.vlt" / uid


@dataclass(frozen=True)
class VaultExport:
    vaults: tuple[Path, ...]  # the vault directories written
    incomplete: tuple[IncompleteEpisode, ...]  # left out: not finished on disk


def export_vault(
    recording_dir: str | os.PathLike,
    out: str | os.PathLike,
    *,
    per: str = "cell",
    state: bool = True,
    obs_dtype: str | None = "float32",
) -> VaultExport:
    """Write the complete episodes of a recording as Flashbax Vaults (flashbax's own
    writer) under ``out`` (:func:`vault_location`), each with ``card.json`` and
    ``card.md`` inside its directory. Returns the vault directories and the recording's
    incomplete episodes, which no vault holds.

    The experience structure is OG-MARL's (``og_marl/replay_buffers.py``
    ``FlashbaxReplayBuffer.add``: per-agent values stacked on axis 0; read by
    ``og_marl/baselines/tf2_systems/offline/*.py``): ``observations [1, T, P, D]``,
    ``actions [1, T, P]`` int32, ``rewards [1, T, P]``, ``terminals [1, T, P]``,
    ``truncations [1, T, P]`` float32, ``infos.legals [1, T, P, A]`` float32 and, with
    ``state``, ``infos.state [1, T, P * D]`` (the agents' observations concatenated: what
    Alem's MAPPO critic sees). Observations and state are float32, as OG-MARL's offline
    systems read them without a cast; ``obs_dtype=None`` keeps the narrowest dtype exact
    for every part instead (smaller, for readers that cast). A vault is written in a
    staging directory beside the ``.vlt`` directories (``out/<protocol>/.staging``, so a
    killed export never leaves a half-written vault where OG-MARL's ``get_available_uids``
    or :func:`dataset_info` look) and renamed into place, replacing an older export of
    the same name.
    """
    require("flashbax", "writing Flashbax vaults")  # the datasets extra, before any work
    if obs_dtype not in (None, "float32"):
        raise DatasetError(f"obs_dtype must be float32 or None, not {obs_dtype!r}")
    recording = open_recording(recording_dir)
    groups = vault_groups(recording, per)
    if not groups:
        raise DatasetError(
            f"{recording.root} holds no complete episode "
            f"({len(recording.incomplete)} incomplete): nothing to export"
        )
    out = Path(out)
    written = []
    for (protocol, difficulty, uid), episodes in groups.items():
        written.append(
            _write_vault(
                episodes,
                vault_location(out, protocol, difficulty, uid),
                rel_dir=str(out / protocol),
                state=state,
                obs_dtype=obs_dtype,
            )
        )
    return VaultExport(tuple(written), recording.incomplete)


def _write_vault(
    episodes: Sequence[EpisodeRecord],
    where: Path,
    *,
    rel_dir: str,
    state: bool,
    obs_dtype: str | None,
) -> Path:
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from flashbax.vault import Vault

    card = dataset_card(episodes, name=where.name)
    dtype = card["observation_dtype"] = obs_dtype or card["observation_dtype"]  # as stored
    p, d, a = card["num_agents"], card["obs_dim"], card["num_actions"]
    structure = _vault_structure(p, d, a, dtype, state)
    parent = where.parent
    staging = parent.parent / STAGING_DIR  # same file system, outside every .vlt
    tmp_uid = f"{where.name}-{secrets.token_hex(4)}"
    tmp = staging / tmp_uid
    _write(parent, lambda: parent.mkdir(parents=True, exist_ok=True))
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # flashbax prints as it goes
            vault = Vault(
                vault_name=STAGING_DIR,
                experience_structure=_zeros(structure),
                rel_dir=str(parent.parent.resolve()),
                vault_uid=tmp_uid,
                metadata={"source": "alem-eval", "card": "card.json"},
            )
            for ep in episodes:
                for t0, arrays in ep.parts():
                    exp = _vault_steps(ep, t0, arrays, dtype, state)
                    steps = len(arrays["actions"])
                    vault.write(
                        TrajectoryBufferState(
                            experience=exp,
                            current_index=np.asarray(steps),
                            is_full=np.asarray(False),
                        ),
                        source_interval=(0, steps),
                    )
        total = card["steps"]
        if vault.vault_index != total:
            raise DatasetError(f"{where}: vault holds {vault.vault_index} steps, wrote {total}")
        card["vault"] = {
            "vault_name": parent.name,
            "vault_uid": where.name,
            "rel_dir": rel_dir,
            "structure": {
                key: {"shape": [1, total, *shape], "dtype": t}
                for key, (shape, t) in _flat(structure)
            },
        }
        _write(tmp, lambda: write_text_atomic(tmp / "card.json", json.dumps(card, indent=1)))
        _write(tmp, lambda: write_text_atomic(tmp / "card.md", card_markdown(card)))
        _replace_dir(tmp, where, staging)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        with contextlib.suppress(OSError):
            staging.rmdir()  # only once empty: a concurrent export may still use it
    return where


def _vault_structure(p: int, d: int, a: int, obs_dtype: str, state: bool) -> dict[str, Any]:
    """key -> (per-step shape, dtype); ``infos`` nested as OG-MARL has it."""
    infos: dict[str, Any] = {"legals": ((p, a), "float32")}
    if state:
        infos["state"] = ((p * d,), obs_dtype)
    return {
        "observations": ((p, d), obs_dtype),
        "actions": ((p,), "int32"),
        "rewards": ((p,), "float32"),
        "terminals": ((p,), "float32"),
        "truncations": ((p,), "float32"),
        "infos": infos,
    }


def _flat(structure: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for k, v in structure.items():
        if isinstance(v, Mapping):
            out += _flat(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


def _zeros(structure: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: _zeros(v) if isinstance(v, Mapping) else np.zeros((1, 1, *v[0]), v[1])
        for k, v in structure.items()
    }


def _vault_steps(
    ep: EpisodeRecord, t0: int, arrays: Mapping[str, np.ndarray], dtype: str, state: bool
) -> dict[str, Any]:
    """One part of an episode in the vault's structure, with a leading batch axis of 1."""
    obs = arrays["observations"].astype(dtype)
    steps = len(arrays["actions"])
    terminals = arrays["dones"].astype(np.float32)
    truncations = np.zeros_like(terminals)
    if t0 + steps == ep.length:
        (terminals if ep.meta["terminated"] else truncations)[-1, :] = 1.0
    infos: dict[str, Any] = {"legals": arrays["legal_actions"].astype(np.float32)[None]}
    if state:
        infos["state"] = obs.reshape(steps, -1)[None]
    return {
        "observations": obs[None],
        "actions": arrays["actions"].astype(np.int32)[None],
        "rewards": arrays["rewards"].astype(np.float32)[None],
        "terminals": terminals[None],
        "truncations": truncations[None],
        "infos": infos,
    }


def _replace_dir(tmp: Path, where: Path, staging: Path) -> None:
    """Move ``tmp`` to ``where``; an older ``where`` is moved to ``staging`` first and
    removed once the new one is there."""
    old = None
    if where.exists():
        old = staging / f"old-{where.name}-{secrets.token_hex(4)}"
        _write(where, lambda: where.rename(old))
    _write(where, lambda: tmp.rename(where))
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------------------------------
# dataset info
# ----------------------------------------------------------------------------------------
def dataset_info(path: str | os.PathLike) -> dict[str, Any]:
    """What ``alem-eval dataset info`` shows (plain JSON types): for a recording
    directory (``kind: "recording"``) its episodes per team, complete and incomplete,
    steps, shapes, dtypes and bytes on disk; for a vault (``kind: "vault"``) its card,
    structure and size; for a directory holding vaults (``kind: "vaults"``) each of them."""
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"no such directory: {root}")
    if not root.is_dir():
        raise DatasetError(f"{root} is not a directory")
    if (root / RECORDING_FILE).is_file():
        return _recording_info(open_recording(root))
    if _is_vault(root):
        return _vault_info(root)
    vaults = sorted(
        m.parent
        for m in root.rglob("metadata.json")
        if _is_vault(m.parent) and not _hidden(m.parent.relative_to(root))
    )
    if vaults:
        return {"kind": "vaults", "path": str(root), "vaults": [_vault_info(v) for v in vaults]}
    raise DatasetError(
        f"{root} is neither an alem-eval recording (no {RECORDING_FILE}) nor a Flashbax "
        "vault (no metadata.json)"
    )


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _recording_info(rec: Recording) -> dict[str, Any]:
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}

    def group(ep_path: Path) -> dict[str, Any]:
        rel = ep_path.relative_to(rec.root).parts
        key = (rel[0], rel[1] if len(rel) > 2 else "", "/".join(rel[2:-1]))
        return groups.setdefault(
            key,
            {
                "protocol": key[0],
                "eval_difficulty": key[1],
                "team": key[2],
                "slots": None,
                "episodes": 0,
                "incomplete": 0,
                "steps": 0,
                "bytes": 0,
                "observation_dtypes": {},
                "episode_return": None,
                "_returns": [],
            },
        )

    shapes: dict[str, Any] = {}
    for ep in rec.complete:
        g = group(ep.path)
        g["slots"] = list(ep.team)
        g["episodes"] += 1
        g["steps"] += ep.length
        g["bytes"] += _dir_bytes(ep.path)
        g["_returns"].append(float(ep.meta["episode_return"]))
        for part in ep.meta["parts"]:
            dt = part["observations_dtype"]
            if part.get("observations_wide_columns"):
                dt += "+float32 columns"
            g["observation_dtypes"][dt] = g["observation_dtypes"].get(dt, 0) + 1
        if not shapes:
            shapes = {
                k: {"shape": ["T", *ep.meta["shapes"][k][1:]], "dtype": ep.meta["dtypes"][k]}
                for k in FIELDS
            }
    for inc in rec.incomplete:
        g = group(inc.path)
        g["incomplete"] += 1
        g["bytes"] += _dir_bytes(inc.path)
    for g in groups.values():
        g["episode_return"] = distribution(g.pop("_returns"))
    rows = [groups[k] for k in sorted(groups)]
    return {
        "kind": "recording",
        "path": str(rec.root),
        "format": FORMAT,
        "version": VERSION,
        "complete_episodes": len(rec.complete),
        "incomplete_episodes": len(rec.incomplete),
        "steps": sum(e.length for e in rec.complete),
        "bytes": _dir_bytes(rec.root),
        "arrays": shapes,
        "teams": rows,
        "incomplete": [
            {"path": str(i.path.relative_to(rec.root)), "reason": i.reason} for i in rec.incomplete
        ],
    }


def _hidden(rel: Path) -> bool:
    """A path below a dot-directory (a staging area, a killed export's leftovers)."""
    return any(part.startswith(".") for part in rel.parts)


def _is_vault(path: Path) -> bool:
    try:
        meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "structure_shape" in meta and "structure_dtype" in meta


def _vault_info(path: Path) -> dict[str, Any]:
    require("flashbax", f"reading the vault {path}")
    from flashbax.vault import Vault

    meta = json.loads((path / "metadata.json").read_text(encoding="utf-8"))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            vault = Vault(
                vault_name=path.parent.name,
                rel_dir=str(path.parent.parent.resolve()),
                vault_uid=path.name,
            )
    except Exception as exc:  # tensorstore raises its own errors for a damaged vault
        raise DatasetError(f"{path}: cannot open the vault ({_why(exc)})") from None
    steps = int(vault.vault_index)
    structure = {}
    for (key, shape), (_, dtype) in zip(
        _flat(meta["structure_shape"]), _flat(meta["structure_dtype"])
    ):
        dims = [int(x) for x in shape.strip("()").split(",") if x.strip()]
        structure[key] = {"shape": [dims[0], steps, *dims[2:]], "dtype": dtype}
    card = None
    if (path / "card.json").is_file():
        card = json.loads((path / "card.json").read_text(encoding="utf-8"))
    return {
        "kind": "vault",
        "path": str(path),
        "vault_name": path.parent.name,
        "vault_uid": path.name,
        "steps": steps,
        "bytes": _dir_bytes(path),
        "structure": structure,
        "card": card,
        # False when steps were appended after the export (flashbax's Vault.write): the
        # card then describes only the exported ones
        "card_matches": card is not None and card.get("steps") == steps,
    }
