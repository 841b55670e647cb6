"""The recording format: its names and layout, and how observations are stored.

What the writer (:mod:`alem_eval.datasets.recorder`) and the reader
(:mod:`alem_eval.datasets.reader`) share: the format's name, version, file names and step
arrays (:data:`FIELDS`), where an episode lives (:func:`team_path`, :func:`episode_dir`),
the observation codec (the narrowest exact dtype per part) and the one-line
:class:`DatasetError` a filesystem failure becomes.

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

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.core.errors import DatasetError

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
EPISODE_DIR_PATTERN = re.compile(r"episode-(\d{6,})$")

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


def check_root_marker(root: Path) -> None:
    """A one-line DatasetError unless ``root``'s ``recording.json`` names this format."""
    try:
        doc = json.loads((root / RECORDING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{root / RECORDING_FILE} cannot be read: {why(exc)}") from None
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


# ----------------------------------------------------------------------------------------
# Filesystem errors: one line each
# ----------------------------------------------------------------------------------------
def why(exc: BaseException) -> str:
    """What went wrong, for a one-line error: an OSError's strerror, else the message."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def guard_write(path: Path, action) -> Any:
    """Run a filesystem action; an OSError becomes a one-line DatasetError naming ``path``."""
    try:
        return action()
    except OSError as exc:
        raise DatasetError(f"cannot write {path}: {why(exc)}") from None


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
