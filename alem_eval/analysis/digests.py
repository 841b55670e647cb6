"""Digests that let a reader check a published number: the records it used and what made them.

Two digests name every ``score``, ``crossplay``, ``scenario``, ``leaderboard`` and
``report`` output (the exact recipe, to recompute them without alem-eval, is in
``docs/results-digests.md``):

* the **results digest**: a Merkle root (RFC 6962's tree hash, SHA-256) over the per-episode
  records the output used. A leaf is one episode's stored row as canonical JSON (every
  column; a float as the 16 hex digits of its IEEE 754 binary64 bytes, NaN as ``null``).
  A results file's episodes, by episode index, make the file's **records root**; the files,
  each as the leaf ``{"key": <its ResultKey>, "records": <records root>}``, sorted by their
  key's canonical JSON, make the results digest;
* the **config digest**: SHA-256 of the canonical JSON of :func:`config_document`: per
  file, its key (cell or team, checkpoint and config hashes, the team's members' digest,
  which covers a focal agent's identity, protocol, eval difficulty, episodes, step cap,
  alem-env version) and the alem-eval / JAX versions its rows name; and the output's own
  settings (the bootstrap, the scheme, the focal agent).

Every results file is sealed when written (:func:`seal_table`, kept in the Parquet
metadata): its key, its records root, each episode's leaf hash, a hash per column and the
versions its rows name, so ``alem-eval verify-results`` can name the episode and column of
a file edited afterwards (:mod:`alem_eval.analysis.verify_results`). An output takes a
sealed file's part of its digests from the seal (:func:`file_digest`: the file's metadata
only); an unsealed file's is computed from its rows.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

ALGORITHM = "sha256-merkle-v1"
CONFIG_FORMAT = "alem-eval-config-v1"
META_SEAL = b"alem_eval.seal"
VERSION_COLUMNS: tuple[str, ...] = ("alem_eval_version", "jax_version")


# ----------------------------------------------------------------------------------------
# Canonical bytes and the tree
# ----------------------------------------------------------------------------------------
def canonical_json(value: Any) -> bytes:
    """Sorted keys, no spaces, UTF-8, no NaN: the bytes every digest is taken over."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 leaf: SHA-256(0x00 || data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """RFC 6962 Merkle tree hash of leaf hashes: SHA-256 of nothing when empty, the leaf
    itself when one, else SHA-256(0x01 || MTH(first k) || MTH(rest)) with k the largest
    power of two below n."""
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaves[0]
    k = 1 << ((n - 1).bit_length() - 1)
    return hashlib.sha256(b"\x01" + merkle_root(leaves[:k]) + merkle_root(leaves[k:])).digest()


def _encode_column(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """One column's values as they appear in a leaf: a float as 16 lower-case hex digits
    of its big-endian binary64 bytes (NaN and missing: None), other values as JSON."""
    typ = column.type
    if pa.types.is_floating(typ):
        values = column.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls: NaN
        hexes = values.astype(">f8").tobytes().hex()
        return [
            None if math.isnan(v) else hexes[16 * i : 16 * i + 16]
            for i, v in enumerate(values.tolist())
        ]
    values = column.to_pylist()
    if pa.types.is_integer(typ) or pa.types.is_boolean(typ) or pa.types.is_string(typ):
        return values
    return [None if v is None else str(v) for v in values]


@dataclass(frozen=True)
class FileDigest:
    """What one results file contributes to an output's digests: its key, its records
    root and the versions its rows name."""

    key: Mapping[str, Any]  # the ResultKey's fields (ResultKey.to_json's document)
    records_root: str
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def key_bytes(self) -> bytes:
        return canonical_json(self.key)

    def file_leaf(self) -> bytes:
        """This file's leaf in the results tree."""
        return leaf_hash(canonical_json({"key": dict(self.key), "records": self.records_root}))


@dataclass(frozen=True)
class FileRecords:
    """One results file's episodes as digest leaves (ordered by episode index)."""

    key: Mapping[str, Any]  # the ResultKey's fields (ResultKey.to_json's document)
    columns: tuple[str, ...]
    episodes: tuple[int, ...]
    leaves: tuple[bytes, ...] = field(repr=False)
    column_hashes: Mapping[str, str] = field(repr=False)
    versions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def records_root(self) -> str:
        return merkle_root(list(self.leaves)).hex()

    @property
    def digest(self) -> FileDigest:
        return FileDigest(self.key, self.records_root, self.versions)


def table_records(table: pa.Table, key: Mapping[str, Any]) -> FileRecords:
    """The digest leaves of a results table (the rows of ``key``), whatever its row order."""
    names = tuple(table.column_names)
    encoded = {name: _encode_column(table.column(name)) for name in names}
    if "episode" in encoded:
        episodes = [int(e) for e in encoded["episode"]]
    else:
        episodes = list(range(table.num_rows))
    order = sorted(range(table.num_rows), key=lambda i: episodes[i])
    leaves = tuple(leaf_hash(canonical_json({n: encoded[n][i] for n in names})) for i in order)
    column_hashes = {
        n: sha256_hex(canonical_json([encoded[n][i] for i in order]))[:16] for n in names
    }
    versions = {
        c: tuple(sorted({str(v) for v in encoded[c] if v is not None}))
        for c in VERSION_COLUMNS
        if c in encoded
    }
    return FileRecords(
        dict(key), names, tuple(episodes[i] for i in order), leaves, column_hashes, versions
    )


def seal_table(table: pa.Table, key_json: str) -> bytes:
    """The seal a results file is written with (Parquet metadata :data:`META_SEAL`)."""
    recs = table_records(table, json.loads(key_json))
    return canonical_json(
        {
            "algorithm": ALGORITHM,
            "key": dict(recs.key),
            "records": recs.records_root,
            "episodes": [h.hex() for h in recs.leaves],
            "columns": dict(recs.column_hashes),
            "versions": {c: list(v) for c, v in recs.versions.items()},
        }
    )


def read_file_records(path: Path) -> tuple[FileRecords, dict[str, Any] | None]:
    """A results file's digest leaves and its seal (None: written before seals existed).
    Raises what pyarrow raises for a file that is not Parquet, ``ValueError`` for one
    without a result key."""
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    raw_key = meta.get(b"alem_eval.result_key")
    if raw_key is None:
        raise ValueError("not an alem-eval results file (no result key in its metadata)")
    records = table_records(table.replace_schema_metadata(None), json.loads(raw_key))
    seal = json.loads(meta[META_SEAL]) if META_SEAL in meta else None
    return records, seal if isinstance(seal, dict) else None


def file_digest(path: Path) -> FileDigest:
    """A results file's part of an output's digests, from its seal when it has one (its
    metadata only: cheap; ``verify-results`` checks the seal against the rows), else
    computed from its rows."""
    meta = pq.read_metadata(path).metadata or {}
    raw_key, raw_seal = meta.get(b"alem_eval.result_key"), meta.get(META_SEAL)
    if raw_key is not None and raw_seal is not None:
        seal = json.loads(raw_seal)
        if isinstance(seal, dict) and seal.get("algorithm") == ALGORITHM and "versions" in seal:
            versions = {c: tuple(v) for c, v in seal["versions"].items()}
            return FileDigest(json.loads(raw_key), str(seal["records"]), versions)
    return read_file_records(path)[0].digest


# ----------------------------------------------------------------------------------------
# An output's digests
# ----------------------------------------------------------------------------------------
def results_digest(files: Iterable[FileDigest]) -> str:
    """The Merkle root over the files' leaves, sorted by their keys' canonical JSON."""
    ordered = sorted(files, key=lambda f: f.key_bytes)
    return merkle_root([f.file_leaf() for f in ordered]).hex()


def config_document(files: Iterable[FileDigest], settings: Mapping[str, Any]) -> dict[str, Any]:
    """What produced the records: per file (in the results digest's order) its key and
    the versions its rows name; the output's own settings."""
    ordered = sorted(files, key=lambda f: f.key_bytes)
    return {
        "format": CONFIG_FORMAT,
        "runs": [{**dict(f.key), **{c: list(v) for c, v in f.versions.items()}} for f in ordered],
        "settings": _plain(settings),
    }


def config_digest(document: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the config document's canonical JSON."""
    return sha256_hex(canonical_json(document))


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True, default=str))


@dataclass(frozen=True)
class Digests:
    """The two digests of an output and what a verifier needs to recompute them: the
    store and each file's path and records root (``as_json`` is the ``digests`` object
    of every JSON output)."""

    results: str
    config: str
    store: str | None
    files: tuple[tuple[str, str], ...]  # (path relative to the store, records root)
    document: Mapping[str, Any] = field(hash=False)  # config_document
    algorithm: str = ALGORITHM

    def as_json(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm,
            "results": self.results,
            "config": self.config,
            "store": self.store,
            "files": [{"path": p, "records": r} for p, r in self.files],
            "config_document": _plain(self.document),
        }

    def footer(self) -> str:
        """The tables' footer line (:func:`footer_digest_line`)."""
        return footer_digest_line(self)


def digests_of(
    records: Sequence[tuple[str, FileDigest]],
    *,
    store: str | Path | None,
    settings: Mapping[str, Any],
) -> Digests:
    """The digests of ``records`` (``(path relative to the store, its records)``)."""
    ordered = sorted(records, key=lambda pr: pr[1].key_bytes)
    document = config_document([r for _, r in ordered], settings)
    return Digests(
        results=results_digest([r for _, r in ordered]),
        config=config_digest(document),
        store=None if store is None else str(store),
        files=tuple((p, r.records_root) for p, r in ordered),
        document=document,
    )


def store_digests(store, keys: Iterable[Any], settings: Mapping[str, Any]) -> Digests:
    """The digests of the files of ``keys`` (:class:`ResultKey` s) in ``store``, read back
    as stored (a key's file that is missing raises ``FileNotFoundError``)."""
    paths = sorted({store.path_for(k) for k in keys})
    return path_digests(store.root, paths, settings)


def teams_digests(store, scores: Iterable[Any], settings: Mapping[str, Any]) -> Digests | None:
    """The digests of played teams (``TeamScore`` s with their ``result_key``) as ``store``
    keeps them; None without a store."""
    if store is None:
        return None
    return store_digests(store, [s.result_key for s in scores], settings)


def path_digests(root: str | Path, paths: Iterable[Path], settings: Mapping[str, Any]) -> Digests:
    root = Path(root)
    records = [(Path(p).relative_to(root).as_posix(), file_digest(Path(p))) for p in paths]
    return digests_of(records, store=root.resolve(), settings=settings)


def prepared_digests(root: str | Path, entries: Sequence[Any], frame: Any, settings) -> Digests:
    """The digests of an analysis over the store at ``root``: of the ``entries`` (store
    entries read) whose rows are in ``frame`` (a results DataFrame: the rows the numbers
    used, e.g. the standard-protocol rows of :func:`alem_eval.analysis.aggregate.prepare`)."""
    used = (
        set()
        if frame is None or len(frame) == 0
        else set(zip(frame["cell"].astype(str), frame["eval_difficulty"].astype(str), strict=True))
    )
    paths = [e.path for e in entries if (e.key.cell, e.key.eval_difficulty) in used]
    return path_digests(root, sorted(set(paths)), settings)


def footer_digest_line(digests: Digests | None, *, short: int = 0) -> str:
    """One line for a table's footer: the results digest (first ``short`` hex digits, the
    whole with ``short=0``) and the config digest; empty when there is none."""
    if digests is None:
        return ""

    def cut(h: str) -> str:
        return h if short <= 0 else h[:short]

    return (
        f"Results digest {cut(digests.results)} ({digests.algorithm}), config digest "
        f"{cut(digests.config)}; check with alem-eval verify-results."
    )
