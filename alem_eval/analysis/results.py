"""The results store: scored episodes as Parquet, one file per provenance key.

Layout under the store root::

    <budget>/<algorithm>/<difficulty>/seed<N>/<eval_difficulty>/<protocol>-<digest>.parquet

One file holds the rows of one :class:`ResultKey` (a cell scored on one eval difficulty
under one provenance), one row per episode. Columns (CONTRACTS.md): ``cell, budget,
algorithm, difficulty, seed, eval_difficulty, episode, protocol, checkpoint_hash,
env_version, jax_version, alem_eval_version, config_hash``, then the metric columns named
verbatim (``Team/achievement_pct`` ...). The key itself, the write time and optional extras
(e.g. ``num_params``) are kept in the Parquet file metadata.

Writes are atomic (:func:`alem_eval.core.fsutil.atomic_write`: temp file in the same directory,
fsync, ``os.replace``), so a ``score`` that is interrupted leaves complete files and, at
worst, an ignored ``.tmp-*`` file; a rerun finds the finished keys with
:meth:`ResultsStore.has` and scores only the rest. Files that cannot be read (truncated,
foreign, corrupt) are skipped with a :class:`ResultsWarning`, never a crash.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import json
import math
import os
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from alem_eval.core.errors import AlemEvalError, brief
from alem_eval.core.fsutil import TMP_PREFIX, atomic_write

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
_INT_COLUMNS = frozenset({"seed", "episode"})

STORE_FORMAT = "1"
_META_KEY = b"alem_eval.result_key"
_META_FORMAT = b"alem_eval.store_format"
_META_WRITTEN = b"alem_eval.written_at"
_META_EXTRA = b"alem_eval.extra"
_TMP_PREFIX = TMP_PREFIX  # a writer's temp file: never read, swept once stale
_SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")


class ResultsError(AlemEvalError):
    """The results store or its content cannot serve the request."""


class ResultsWarning(UserWarning):
    """A store file that was skipped or a choice the loader made (shown to the user)."""


@contextlib.contextmanager
def collect_warnings() -> Iterator[list[str]]:
    """Collect the :class:`ResultsWarning` messages raised inside the block (one line each)
    instead of printing them, so commands can show them their own way."""
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResultsWarning)
        try:
            yield notes
        finally:
            notes += [
                " ".join(str(w.message).split())
                for w in caught
                if issubclass(w.category, ResultsWarning)
            ]
            for w in caught:
                if not issubclass(w.category, ResultsWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def default_results_dir() -> Path:
    """``<user cache>/results``: ``$ALEM_EVAL_CACHE``, else ``$XDG_CACHE_HOME/alem-eval``,
    else ``~/.cache/alem-eval`` (see :mod:`alem_eval.core.paths`)."""
    from alem_eval.core.paths import results_dir

    return results_dir()


def open_store(results: str | os.PathLike | None = None) -> ResultsStore:
    """The store at ``results`` (the ``--results`` option), else the default location."""
    return ResultsStore(Path(results).expanduser() if results else default_results_dir())


# ----------------------------------------------------------------------------------------
# Keys and rows
# ----------------------------------------------------------------------------------------
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
    """Everything that decides whether a scored cell can be reused instead of recomputed."""

    cell: str  # "1B/ippo-rnn/hard/seed0"
    eval_difficulty: str
    protocol: str
    checkpoint_hash: str
    config_hash: str
    env_version: str | None
    num_episodes: int
    max_steps: int

    def __post_init__(self) -> None:
        cell = getattr(self.cell, "id", self.cell)  # accept a manifest Cell too
        object.__setattr__(self, "cell", str(cell))
        parse_cell_id(self.cell)
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
        return Path(self.cell) / self.eval_difficulty / f"{self.protocol}-{self.digest}.parquet"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> ResultKey:
        data = json.loads(text)
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            raise ResultsError("result key metadata has the wrong fields")
        return cls(**data)

    @property
    def slot(self) -> tuple[str, str, str]:
        """(cell, eval_difficulty, protocol): keys sharing a slot score the same thing."""
        return (self.cell, self.eval_difficulty, self.protocol)


@dataclass(frozen=True)
class StoreEntry:
    """One readable file of the store, known from its footer (no row data read)."""

    key: ResultKey
    path: Path
    written_at: str  # ISO 8601, UTC
    num_rows: int
    columns: tuple[str, ...]
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def metric_columns(self) -> tuple[str, ...]:
        return tuple(c for c in self.columns if c not in NON_METRIC_COLUMNS)


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
    metric_cols = [c for c in frame.columns if c not in NON_METRIC_COLUMNS]
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

    ``episodes[i]`` is episode ``i``'s record as ``evaluate.rollout.score_stack`` returns it
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
    }
    rows = []
    for i, rec in enumerate(episodes):
        clash = set(rec) & set(NON_METRIC_COLUMNS)
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


def _rows_to_table(rows: Sequence[Mapping[str, Any]], key: ResultKey) -> pa.Table:
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
            if k not in NON_METRIC_COLUMNS and k not in seen:
                seen.add(k)
                metric_names.append(k)
    arrays, fields = [], []
    for col in NON_METRIC_COLUMNS:
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


# ----------------------------------------------------------------------------------------
# Selectors over scored cells
# ----------------------------------------------------------------------------------------
def select_cells(cell_ids: Iterable[str], selectors: Sequence[str] | None) -> set[str]:
    """The scored cell ids matched by any selector (all of them when there is none).

    Same grammar and errors as for checkpoint sources (:mod:`alem_eval.hub.selectors`), with the
    store's cells as the universe: a selector that matches none of them raises
    :class:`SelectorError` naming the closest scored names.
    """
    from alem_eval.hub.manifest import Cell
    from alem_eval.hub.selectors import select_cells as _select

    ids = set(cell_ids)
    if not selectors:
        return ids
    cells = [Cell(*parse_cell_id(c)) for c in ids]
    return {c.id for c in _select(cells, list(selectors))}


# ----------------------------------------------------------------------------------------
# The store
# ----------------------------------------------------------------------------------------
class ResultsStore:
    """Parquet files of scored episodes under ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.root)!r})"

    # -- single keys ---------------------------------------------------------------------
    def path_for(self, key: ResultKey) -> Path:
        return self.root / key.relpath

    def _read_entry(self, path: Path) -> StoreEntry:
        """Footer-only read; raises on anything that is not a complete store file."""
        meta = pq.read_metadata(path)
        kv = meta.metadata or {}
        if kv.get(_META_FORMAT) != STORE_FORMAT.encode() or _META_KEY not in kv:
            raise ResultsError("not an alem-eval results file")
        key = ResultKey.from_json(kv[_META_KEY])
        if meta.num_rows != key.num_episodes:
            raise ResultsError(f"{meta.num_rows} rows for {key.num_episodes} episodes")
        extra = json.loads(kv.get(_META_EXTRA, b"{}"))
        return StoreEntry(
            key=key,
            path=path,
            written_at=kv.get(_META_WRITTEN, b"").decode(),
            num_rows=meta.num_rows,
            columns=tuple(meta.schema.to_arrow_schema().names),
            extra=extra if isinstance(extra, dict) else {},
        )

    def _entry_or_warn(self, path: Path) -> StoreEntry | None:
        try:
            return self._read_entry(path)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException, AlemEvalError) as exc:
            warnings.warn(
                f"skipping unreadable results file {path}: {brief(exc, 400)}",
                ResultsWarning,
                stacklevel=3,
            )
            return None

    def has(self, key: ResultKey) -> bool:
        """True when a complete, readable file for exactly this key exists."""
        path = self.path_for(key)
        if not path.is_file():
            return False
        entry = self._entry_or_warn(path)
        return entry is not None and entry.key == key

    def get(self, key: ResultKey) -> pd.DataFrame | None:
        """The rows stored for ``key`` (sorted by episode), or None if absent/unreadable."""
        path = self.path_for(key)
        if not path.is_file():
            return None
        entry = self._entry_or_warn(path)
        if entry is None or entry.key != key:
            return None
        return self.read([entry])

    def write(
        self,
        rows: Sequence[Mapping[str, Any]],
        key: ResultKey,
        *,
        extra: Mapping[str, Any] | None = None,
    ) -> Path:
        """Store ``rows`` (one per episode, see :func:`build_rows`) as the file of ``key``.

        Atomic: the file appears complete or not at all. Replaces an earlier file of the
        same key. ``extra`` (JSON-able, e.g. ``{"num_params": 2589885}``) goes to metadata.
        """
        table = _rows_to_table(rows, key)
        meta = {
            _META_FORMAT: STORE_FORMAT.encode(),
            _META_KEY: key.to_json().encode(),
            _META_WRITTEN: _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds").encode(),
            _META_EXTRA: json.dumps(dict(extra or {}), sort_keys=True).encode(),
        }
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **meta})
        return self._atomic_write(table, self.path_for(key))

    def _atomic_write(self, table: pa.Table, dest: Path) -> Path:
        return self._atomic_replace(dest, lambda fh: pq.write_table(table, fh, compression="zstd"))

    def import_entry(self, entry: StoreEntry) -> Path:
        """Copy another store's file (bytes and metadata unchanged) to this store, atomically,
        replacing this store's file of the same key."""
        src = entry.path

        def copy(fh) -> None:
            with open(src, "rb") as fin:
                while chunk := fin.read(1 << 20):
                    fh.write(chunk)

        return self._atomic_replace(self.path_for(entry.key), copy)

    def _atomic_replace(self, dest: Path, write: Any) -> Path:
        """Write ``dest`` atomically (:func:`~alem_eval.core.fsutil.atomic_write`), first sweeping
        temp files that killed writers left in its directory."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale_temps(dest.parent)
        return atomic_write(dest, write, prefix=_TMP_PREFIX, suffix=".parquet")

    @staticmethod
    def _remove_stale_temps(directory: Path, max_age_s: float = 24 * 3600) -> None:
        now = time.time()
        for p in directory.glob(_TMP_PREFIX + "*"):
            try:
                if now - p.stat().st_mtime > max_age_s:
                    p.unlink()
            except OSError:
                pass

    # -- many keys -----------------------------------------------------------------------
    def entries(self, selectors: Sequence[str] | None = None) -> list[StoreEntry]:
        """Every readable file (unreadable ones warn), optionally filtered by selectors."""
        if not self.root.is_dir():
            return []
        found = []
        for path in sorted(self.root.rglob("*.parquet")):
            if path.name.startswith(_TMP_PREFIX) or not path.is_file():
                continue
            entry = self._entry_or_warn(path)
            if entry is None:
                continue
            if entry.path.relative_to(self.root) != entry.key.relpath:
                warnings.warn(
                    f"skipping results file {path}: its key belongs at {entry.key.relpath}",
                    ResultsWarning,
                    stacklevel=2,
                )
                continue
            found.append(entry)
        if selectors:
            keep = select_cells([e.key.cell for e in found], selectors)
            found = [e for e in found if e.key.cell in keep]
        return found

    def load(
        self,
        selectors: Sequence[str] | None = None,
        *,
        eval_difficulties: Sequence[str] | None = None,
        protocols: Sequence[str] | None = None,
        metrics: Sequence[str] | None = None,
        all_versions: bool = False,
    ) -> pd.DataFrame:
        """Per-episode rows of the selected cells as one DataFrame.

        ``metrics`` limits the metric columns read (ids and provenance always come).
        Unless ``all_versions``, a (cell, eval difficulty, protocol) scored under several
        keys contributes only its most recently written file (a :class:`ResultsWarning`
        names what was left out). Raises :class:`ResultsError` when nothing matches.
        """
        entries = self.entries(selectors)
        if not entries:
            raise ResultsError(
                f"no scored results in {self.root}; run `alem-eval score` "
                f"first or point --results at a results directory"
            )
        if eval_difficulties:
            wanted = {d.lower() for d in eval_difficulties}
            entries = [e for e in entries if e.key.eval_difficulty.lower() in wanted]
        if protocols:
            entries = [e for e in entries if e.key.protocol in set(protocols)]
        if not entries:
            raise ResultsError("no scored results match the requested eval difficulties/protocol")
        if not all_versions:
            entries = latest_entries(entries)
        return self.read(entries, metrics)

    def read(
        self, entries: Sequence[StoreEntry], metrics: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """The rows of the given entries (unreadable files warn and are skipped);
        ``metrics`` limits the metric columns read."""
        frames = []
        for e in entries:
            cols = None
            if metrics is not None:
                cols = [c for c in e.columns if c in NON_METRIC_COLUMNS or c in set(metrics)]
            try:
                frames.append(pq.read_table(e.path, columns=cols).to_pandas())
            except (OSError, ValueError, pa.ArrowException) as exc:
                warnings.warn(
                    f"skipping unreadable results file {e.path}: {brief(exc, 400)}",
                    ResultsWarning,
                    stacklevel=3,
                )
        if not frames:
            return pd.DataFrame(columns=list(NON_METRIC_COLUMNS))
        df = pd.concat(frames, ignore_index=True, sort=False)
        ordered = list(NON_METRIC_COLUMNS) + [c for c in df.columns if c not in NON_METRIC_COLUMNS]
        return (
            df[ordered]
            .sort_values(["cell", "eval_difficulty", "protocol", "episode"], kind="stable")
            .reset_index(drop=True)
        )


def latest_entries(entries: Sequence[StoreEntry]) -> list[StoreEntry]:
    """One entry per (cell, eval difficulty, protocol): the most recently written."""
    by_slot: dict[tuple[str, str, str], list[StoreEntry]] = {}
    for e in entries:
        by_slot.setdefault(e.key.slot, []).append(e)
    out = []
    for slot, group in by_slot.items():
        group = sorted(group, key=lambda e: (e.written_at, str(e.path)))
        out.append(group[-1])
        if len(group) > 1:
            dropped = ", ".join(_describe_difference(group[-1].key, g.key) for g in group[:-1])
            warnings.warn(
                f"{slot[0]} [{slot[1]}, {slot[2]}] was scored under "
                f"{len(group)} provenances; using the latest and ignoring {dropped}",
                ResultsWarning,
                stacklevel=2,
            )
    return sorted(out, key=lambda e: str(e.path))


def _describe_difference(kept: ResultKey, other: ResultKey) -> str:
    diffs = [
        f"{f.name}={getattr(other, f.name)!r}"
        for f in dataclasses.fields(ResultKey)
        if getattr(other, f.name) != getattr(kept, f.name)
    ]
    return "(" + ", ".join(diffs) + ")"


def metric_columns(df: pd.DataFrame) -> list[str]:
    """The metric columns of a results frame (everything but ids and provenance)."""
    return [c for c in df.columns if c not in NON_METRIC_COLUMNS]
