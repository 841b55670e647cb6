"""The released checkpoint cells and the manifest that describes them.

A *cell* is one released checkpoint: ``<budget>/<algorithm>/<difficulty>/seed<N>``, which
is also its path in the Hub repository or in a local directory. The manifest holds one typed
record per released cell: where it lives on the Hub and what it should contain (network
family, parameter count at the released sizes, environment version). It ships as package
data (``alem_eval/data/alem-rl-baselines.json``), so any install can read it;
``manifests/generate.py`` writes it and the human-facing copy in ``manifests/``.

Only JSON is read here; nothing imports JAX.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Mapping

from alem_eval.algorithms.registry import algorithm_names
from alem_eval.algorithms.config import DIFFICULTIES
from alem_eval.hub.layout import budget_sort_key, parse_seed_dir
from alem_eval.core.errors import ConfigError, SelectorError

HUB_REPO = "alem-world/alem-rl-baselines"
DEFAULT_REVISION = "main"
MANIFEST_NAME = "alem-rl-baselines.json"
# Package data: present in a checkout, an editable install and a wheel alike.
MANIFEST_PATH = Path(__file__).resolve().parents[1] / "data" / MANIFEST_NAME
MANIFEST_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Cell:
    """One checkpoint cell; ``id`` is also its path in a repo or local directory."""

    budget: str
    algorithm: str
    difficulty: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.budget}/{self.algorithm}/{self.difficulty}/seed{self.seed}"

    def __str__(self) -> str:
        return self.id

    @classmethod
    def from_id(cls, cell_id: str) -> Cell:
        """``"1B/ippo-rnn/hard/seed0"`` -> Cell (exact form only; see selectors for patterns)."""
        parts = str(cell_id).strip("/").split("/")
        seed = parse_seed_dir(parts[-1]) if len(parts) == 4 else None
        if seed is None or not all(parts[:3]):
            raise SelectorError(
                f"not a cell id: {cell_id!r} (expected BUDGET/ALGORITHM/DIFFICULTY/seedN)"
            )
        return cls(parts[0], parts[1], parts[2], seed)

    @property
    def sort_key(self) -> tuple:
        return (
            budget_sort_key(self.budget),
            _rank(algorithm_names(), self.algorithm),
            _rank(DIFFICULTIES, self.difficulty),
            self.seed,
        )


def _rank(order: tuple[str, ...], value: str) -> tuple[int, str]:
    return (order.index(value), "") if value in order else (len(order), value)


def sort_cells(cells: Iterable[Cell]) -> list[Cell]:
    """Unique cells in canonical order (budget size, algorithm, difficulty, seed)."""
    return sorted(set(cells), key=lambda c: c.sort_key)


@dataclass(frozen=True)
class ManifestEntry:
    """What the release says about one cell."""

    cell: Cell
    repo: str  # Hub repo id
    path: str  # folder in the repo (the cell id, with the release's budget spelling)
    revision: str  # git revision on the Hub ("main" until a commit is pinned)
    family: str  # ppo | ppo-ctde | hypermarl | pqn
    expected_params: int  # parameter count at the released sizes (NUM_COMM_CHANNELS=4)
    num_comm_channels: int
    env_version: str  # StaticEnvParams.version the checkpoints were trained with
    approx_size_mb: int | None = None  # measured size of a cell with optimiser state

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str) -> ManifestEntry:
        try:
            cell = Cell(str(d["budget"]), str(d["algorithm"]), str(d["difficulty"]), int(d["seed"]))
            size = d.get("approx_size_mb")
            return cls(
                cell=cell,
                repo=str(d["repo"]),
                path=str(d["path"]),
                revision=str(d["revision"]),
                family=str(d["family"]),
                expected_params=int(d["expected_params"]),
                num_comm_channels=int(d["num_comm_channels"]),
                env_version=str(d["env_version"]),
                approx_size_mb=None if size is None else int(size),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: malformed cell record {dict(d)!r} ({exc!r})") from None


@dataclass(frozen=True)
class Manifest:
    """All released cells, in canonical order."""

    repo: str
    revision: str
    env_version: str
    entries: tuple[ManifestEntry, ...]
    path: Path | None = None
    # The digest of the release's partner splits shipped beside it (hub.splits checks it).
    splits_digest: str | None = None

    def cells(self) -> list[Cell]:
        return [e.cell for e in self.entries]

    def entry(self, cell: Cell) -> ManifestEntry | None:
        """The record for a cell; the budget label is matched case-insensitively."""
        return self._index.get(_key(cell))

    def expected_params(self, cell: Cell) -> int | None:
        e = self.entry(cell)
        return e.expected_params if e else None

    @cached_property
    def _index(self) -> dict[tuple, ManifestEntry]:
        return {_key(e.cell): e for e in self.entries}


def _key(cell: Cell) -> tuple[str, str, str, int]:
    return (cell.budget.lower(), cell.algorithm, cell.difficulty, cell.seed)


def parse_manifest(data: Any, where: str = "manifest") -> Manifest:
    """Typed manifest from its parsed JSON."""
    if not isinstance(data, Mapping) or not isinstance(data.get("cells"), list):
        raise ConfigError(f"{where}: expected an object with a 'cells' list")
    if data.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise ConfigError(f"{where}: unsupported schema_version {data.get('schema_version')!r}")
    entries = tuple(ManifestEntry.from_json(d, where) for d in data["cells"])
    entries = tuple(sorted(entries, key=lambda e: e.cell.sort_key))
    return Manifest(
        repo=str(data.get("repo", HUB_REPO)),
        revision=str(data.get("revision", DEFAULT_REVISION)),
        env_version=str(data.get("env_version", "")),
        entries=entries,
        splits_digest=None if data.get("splits_digest") is None else str(data["splits_digest"]),
    )


def load_manifest(path: str | Path | None = None) -> Manifest:
    """The released manifest (or the one at ``path``)."""
    if path is None:
        if not MANIFEST_PATH.is_file():
            raise ConfigError(
                f"manifest {MANIFEST_PATH} not found: this alem-eval install is "
                "incomplete (reinstall it)"
            )
        return _load_cached(MANIFEST_PATH)
    return _load_cached(Path(path).resolve())


@lru_cache(maxsize=4)
def _load_cached(path: Path) -> Manifest:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read manifest ({exc})") from None
    m = parse_manifest(data, where=str(path))
    return Manifest(
        m.repo, m.revision, m.env_version, m.entries, path=path, splits_digest=m.splits_digest
    )
