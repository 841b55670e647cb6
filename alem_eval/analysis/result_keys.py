"""Result keys, columns and rows: what identifies a stored score and the rows stored under it.

A :class:`ResultKey` is everything that decides whether a scored cell can be reused
(the cell, its eval difficulty and protocol, the checkpoint and config hashes, the env
version, the episode count and length); its digest names the file in the results store
(:mod:`alem_eval.analysis.results`). A stored row has the id columns
(:data:`ID_COLUMNS`), the provenance columns (:data:`PROVENANCE_COLUMNS`), then the metric
columns named verbatim: :func:`build_rows` makes them from one checkpoint's per-episode
records, :func:`episode_records` reads them back, ``rows_to_table`` checks them against
their key and types them for Parquet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from alem_eval.core.errors import AlemEvalError

ID_COLUMNS: tuple[str, ...] = (
    "cell",
    "budget",
    "algorithm",
    "difficulty",
    "seed",
    "eval_difficulty",
    "episode",
)
PROVENANCE_COLUMNS: tuple[str, ...] = (
    "protocol",
    "checkpoint_hash",
    "env_version",
    "jax_version",
    "alem_eval_version",
    "config_hash",
)
NON_METRIC_COLUMNS: tuple[str, ...] = ID_COLUMNS + PROVENANCE_COLUMNS
# A team's rows (a key with ``team``) also carry its composition: the cell (or agent)
# driving each agent slot, comma-joined in slot order.
TEAM_COLUMNS: tuple[str, ...] = ("team",)
RESERVED_COLUMNS: tuple[str, ...] = NON_METRIC_COLUMNS + TEAM_COLUMNS
_INT_COLUMNS = frozenset({"seed", "episode"})
_SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")


class ResultsError(AlemEvalError):
    """The results store or its content cannot serve the request."""


def parse_cell_id(cell_id: str) -> tuple[str, str, str, int]:
    """``"1B/ippo-rnn/hard/seed0"`` -> ``("1B", "ippo-rnn", "hard", 0)``.

    Raises :class:`ResultsError` for anything that is not four safe path components with a
    ``seed<N>`` last (the id is also the file's directory in the store).
    """
    parts = str(cell_id).split("/")
    if len(parts) != 4 or not all(_SAFE_COMPONENT.match(p) for p in parts):
        raise ResultsError(f"bad cell id {cell_id!r}: expected BUDGET/ALGORITHM/DIFFICULTY/seedN")
    m = re.fullmatch(r"seed(\d+)", parts[3])
    if not m:
        raise ResultsError(f"bad cell id {cell_id!r}: the last part must be seed<N>")
    return parts[0], parts[1], parts[2], int(m.group(1))


@dataclass(frozen=True)
class ResultKey:
    """Everything that decides whether a scored cell can be reused instead of recomputed.

    A cell's self-play has ``team == ()``. A team of several members (cross-play, a focal
    agent with the baselines) names its composition in ``team`` (per agent slot, the cell
    id or the agent label driving it) and the provenance of every member in ``team_hash``
    (a digest); ``cell`` is then the team's anchor cell (where its file lives) and the
    hashes are the anchor's. Team keys are stored beside the cell's own scores but never
    mixed with them: :meth:`ResultsStore.entries` leaves them out unless asked.
    """

    cell: str  # "1B/ippo-rnn/hard/seed0"
    eval_difficulty: str
    protocol: str
    checkpoint_hash: str
    config_hash: str
    env_version: str | None
    num_episodes: int
    max_steps: int
    team: tuple[str, ...] = ()
    team_hash: str = ""

    def __post_init__(self) -> None:
        cell = getattr(self.cell, "id", self.cell)  # accept a manifest Cell too
        object.__setattr__(self, "cell", str(cell))
        parse_cell_id(self.cell)
        object.__setattr__(self, "team", tuple(str(m) for m in self.team))
        if bool(self.team) != bool(self.team_hash) or any(not m or "," in m for m in self.team):
            raise ResultsError(
                f"bad team {self.team!r} / team_hash {self.team_hash!r} in a result key "
                "(both or neither; members without commas)"
            )
        if self.team and self.cell not in self.team:
            raise ResultsError(f"a team key's cell {self.cell!r} must be one of its members")
        for name in ("eval_difficulty", "protocol"):
            if not _SAFE_COMPONENT.match(str(getattr(self, name))):
                raise ResultsError(f"bad {name} {getattr(self, name)!r} in a result key")
        for name in ("num_episodes", "max_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ResultsError(f"result key {name} must be a positive int, got {v!r}")

    @classmethod
    def for_run(
        cls,
        cell: Any,
        cfg: Any,
        *,
        checkpoint_hash: str,
        eval_difficulty: str,
        protocol: str,
        num_episodes: int,
        max_steps: int,
    ) -> ResultKey:
        """The key of a checkpoint (``cfg``: its :class:`~alem_eval.algorithms.config.RunConfig`)
        evaluated this way: what ``score`` and ``compare`` store and read back under."""
        return cls(
            cell=cell,
            eval_difficulty=eval_difficulty,
            protocol=protocol,
            checkpoint_hash=checkpoint_hash,
            config_hash=cfg.config_hash,
            env_version=cfg.env_version,
            num_episodes=num_episodes,
            max_steps=max_steps,
        )

    @property
    def digest(self) -> str:
        """Stable 16-hex-digit hash of the whole key (names the file)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    @property
    def relpath(self) -> Path:
        kind = "-team" if self.team else ""
        return (
            Path(self.cell) / self.eval_difficulty / f"{self.protocol}{kind}-{self.digest}.parquet"
        )

    def to_json(self) -> str:
        doc = dataclasses.asdict(self)
        if not self.team:  # a cell's own key: the fields (and digest) it always had
            del doc["team"], doc["team_hash"]
        return json.dumps(doc, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ResultKey:
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        if isinstance(data, dict) and "team" not in data and "team_hash" not in data:
            data = {**data, "team": (), "team_hash": ""}
        if not isinstance(data, dict) or set(data) != names:
            raise ResultsError("result key metadata has the wrong fields")
        return cls(**data)

    @property
    def slot(self) -> tuple[str, ...]:
        """(cell, eval_difficulty, protocol[, team members]): keys sharing a slot score the
        same thing."""
        return (self.cell, self.eval_difficulty, self.protocol, *self.team)


def _installed_version(dist: str) -> str | None:
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def episode_records(frame: pd.DataFrame) -> list[dict[str, float]]:
    """The per-episode records (metric -> float, as the evaluator returns them) of one
    key's stored rows, by episode: what :func:`build_rows` stored, read back."""
    metric_cols = [c for c in frame.columns if c not in RESERVED_COLUMNS]
    return [
        {c: float(r[c]) for c in metric_cols if r[c] == r[c]}
        for _, r in frame.sort_values("episode").iterrows()
    ]


def build_rows(
    key: ResultKey,
    episodes: Sequence[Mapping[str, float]],
    *,
    jax_version: str | None = None,
    alem_eval_version: str | None = None,
) -> list[dict[str, Any]]:
    """Rows for :meth:`ResultsStore.write` from one checkpoint's per-episode records.

    ``episodes[i]`` is episode ``i``'s record as ``evaluate.score_stack`` returns it
    (metric name -> float). The versions default to the installed jax / alem-eval.
    """
    from alem_eval.core.version import __version__

    budget, algorithm, difficulty, seed = parse_cell_id(key.cell)
    base = {
        "cell": key.cell,
        "budget": budget,
        "algorithm": algorithm,
        "difficulty": difficulty,
        "seed": seed,
        "eval_difficulty": key.eval_difficulty,
        "protocol": key.protocol,
        "checkpoint_hash": key.checkpoint_hash,
        "env_version": key.env_version,
        "jax_version": jax_version if jax_version is not None else _installed_version("jax"),
        "alem_eval_version": alem_eval_version or __version__,
        "config_hash": key.config_hash,
        **({"team": ",".join(key.team)} if key.team else {}),
    }
    rows = []
    for i, rec in enumerate(episodes):
        clash = set(rec) & set(RESERVED_COLUMNS)
        if clash:
            raise ResultsError(f"episode record uses reserved column names: {sorted(clash)}")
        rows.append({**base, "episode": i, **rec})
    return rows


def _to_float(name: str, v: Any) -> float:
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ResultsError(f"metric {name!r} has a non-numeric value {v!r}") from None


def rows_to_table(rows: Sequence[Mapping[str, Any]], key: ResultKey) -> pa.Table:
    if len(rows) != key.num_episodes:
        raise ResultsError(
            f"{key.cell} [{key.eval_difficulty}]: {len(rows)} rows for "
            f"{key.num_episodes} episodes; refusing to store a partial result"
        )
    expected = build_rows(key, [{}], jax_version="", alem_eval_version="x")[0]
    for r in rows:
        for col in (
            "cell",
            "eval_difficulty",
            "protocol",
            "checkpoint_hash",
            "config_hash",
            "env_version",
            "budget",
            "algorithm",
            "difficulty",
            "seed",
            *(TEAM_COLUMNS if key.team else ()),
        ):
            if col in r and r[col] != expected[col]:
                raise ResultsError(
                    f"row {col}={r[col]!r} does not match the key ({expected[col]!r})"
                )
    episodes = [r.get("episode", -1) for r in rows]
    if sorted(episodes) != list(range(key.num_episodes)):
        raise ResultsError(
            f"{key.cell} [{key.eval_difficulty}]: episodes must be "
            f"0..{key.num_episodes - 1} exactly once"
        )
    metric_names: list[str] = []
    seen: set[str] = set()
    for r in rows:
        for k in r:
            if k not in RESERVED_COLUMNS and k not in seen:
                seen.add(k)
                metric_names.append(k)
    arrays, fields = [], []
    for col in NON_METRIC_COLUMNS + (TEAM_COLUMNS if key.team else ()):
        if col in _INT_COLUMNS:
            vals: list[Any] = [int(r.get(col, expected.get(col))) for r in rows]
            typ = pa.int64()
        else:
            vals = [r.get(col, expected.get(col)) for r in rows]
            vals = [None if v is None else str(v) for v in vals]
            typ = pa.string()
        arrays.append(pa.array(vals, type=typ))
        fields.append(pa.field(col, typ))
    for name in metric_names:
        arrays.append(pa.array([_to_float(name, r.get(name)) for r in rows], type=pa.float64()))
        fields.append(pa.field(name, pa.float64()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The metric columns of a results frame (everything but ids and provenance)."""
    return [c for c in df.columns if c not in RESERVED_COLUMNS]
