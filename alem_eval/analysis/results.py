"""The results store: scored episodes as Parquet, one file per provenance key.

Layout under the store root::

    <budget>/<algorithm>/<difficulty>/seed<N>/<eval_difficulty>/<protocol>-<digest>.parquet

One file holds the rows of one :class:`~alem_eval.analysis.result_keys.ResultKey` (a cell
scored on one eval difficulty under one provenance; the keys, columns and rows are
:mod:`alem_eval.analysis.result_keys`'), one row per episode. Columns (CONTRACTS.md):
``cell, budget, algorithm, difficulty, seed, eval_difficulty, episode, protocol,
checkpoint_hash, env_version, jax_version, alem_eval_version, config_hash``, then the
metric columns named verbatim (``Team/achievement_pct`` ...). The key itself, the write time, optional extras
(e.g. ``num_params``) and the file's seal (its records digest, per episode and column:
:func:`alem_eval.analysis.digests.seal_table`) are kept in the Parquet file metadata.

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
import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Iterator, Mapping, Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from alem_eval.analysis.result_keys import (
    NON_METRIC_COLUMNS,
    RESERVED_COLUMNS,
    TEAM_COLUMNS,
    ResultKey,
    ResultsError,
    rows_to_table,
    parse_cell_id,
)
from alem_eval.analysis.digests import META_SEAL, seal_table
from alem_eval.core.errors import AlemEvalError, brief
from alem_eval.core.fsutil import TMP_PREFIX, atomic_write

STORE_FORMAT = "1"
_META_KEY = b"alem_eval.result_key"
_META_FORMAT = b"alem_eval.store_format"
_META_WRITTEN = b"alem_eval.written_at"
_META_EXTRA = b"alem_eval.extra"
_TMP_PREFIX = TMP_PREFIX  # a writer's temp file: never read, swept once stale


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
        return tuple(c for c in self.columns if c not in RESERVED_COLUMNS)


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
        table = rows_to_table(rows, key)
        meta = {
            _META_FORMAT: STORE_FORMAT.encode(),
            _META_KEY: key.to_json().encode(),
            _META_WRITTEN: _dt.datetime.now(_dt.UTC).isoformat(timespec="microseconds").encode(),
            _META_EXTRA: json.dumps(dict(extra or {}), sort_keys=True).encode(),
            META_SEAL: seal_table(table, key.to_json()),
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
    def entries(
        self, selectors: Sequence[str] | None = None, *, teams: bool = False
    ) -> list[StoreEntry]:
        """Every readable file (unreadable ones warn), optionally filtered by selectors
        (a team's entry by its anchor cell). The cells' own scores only, unless ``teams``:
        then the teams' entries (cross-play, scenarios: keys with ``team``) only."""
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
            if bool(entry.key.team) == teams:
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
        teams: bool = False,
    ) -> pd.DataFrame:
        """Per-episode rows of the selected cells as one DataFrame (with ``teams``: of the
        teams stored by cross-play and scenarios instead, a ``team`` column naming each).

        ``metrics`` limits the metric columns read (ids and provenance always come).
        Unless ``all_versions``, a (cell, eval difficulty, protocol) scored under several
        keys contributes only its most recently written file (a :class:`ResultsWarning`
        names what was left out). Raises :class:`ResultsError` when nothing matches.
        """
        entries = self.entries(selectors, teams=teams)
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
                cols = [c for c in e.columns if c in RESERVED_COLUMNS or c in set(metrics)]
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
        ids = [c for c in RESERVED_COLUMNS if c in df.columns]
        ordered = ids + [c for c in df.columns if c not in ids]
        team = [c for c in TEAM_COLUMNS if c in df.columns]  # teams' rows: one team after another
        return (
            df[ordered]
            .sort_values(["cell", "eval_difficulty", "protocol", *team, "episode"], kind="stable")
            .reset_index(drop=True)
        )


def latest_entries(entries: Sequence[StoreEntry]) -> list[StoreEntry]:
    """One entry per (cell, eval difficulty, protocol): the most recently written."""
    by_slot: dict[tuple[str, ...], list[StoreEntry]] = {}
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
