"""Frozen partner splits: which cells of a population are for training, which held out.

A *population* is the cells of one ``(budget, algorithm, difficulty)``; a split file assigns
each of its seeds to one of :data:`SPLITS`: ``train`` (partners a focal agent trains with),
``val`` (partners to choose settings on) and ``test`` (held-out partners, for the final
numbers only). The release's splits ship beside the manifest as package data
(``alem_eval/data/alem-rl-baselines-splits.json``, written by ``manifests/generate.py``):
seeds 0-2 ``train``, 3 ``val``, 4 ``test`` in every released population, and for the
bundled demo cells (one seed per algorithm) three algorithms ``train`` and one ``test``.
The file records its digest (:attr:`Splits.digest`, over the assignment only) and so does
the manifest (``splits_digest``); :func:`load_splits` checks both. ``docs/splits.md`` says
why those seeds.

A user's own file has the same form (only ``populations`` is required; a ``digest``, when
given, is checked)::

    {"schema_version": 1, "name": "mine",
     "populations": [{"population": "runs/ippo-rnn/easy", "train": [0, 1], "test": [2]}]}

Only JSON is read here; nothing imports JAX.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

from alem_eval.algorithms.registry import canonical_algorithm
from alem_eval.core.errors import ConfigError, SelectorError, UsageError
from alem_eval.hub.manifest import MANIFEST_PATH, Cell, load_manifest

SPLITS: tuple[str, ...] = ("train", "val", "test")
SPLITS_NAME = "alem-rl-baselines-splits.json"
# Package data beside the manifest: present in a checkout, an editable install and a wheel.
SPLITS_PATH = MANIFEST_PATH.parent / SPLITS_NAME
SPLITS_SCHEMA_VERSION = 1
_ENTRY_KEYS = frozenset(("population", *SPLITS))

Population = tuple[str, str, str]  # (budget, algorithm, difficulty)
C = TypeVar("C", bound=Cell)


def _key(population: Population) -> Population:
    """How populations are compared: the budget case-insensitively, as the manifest does."""
    budget, algorithm, difficulty = population
    return (budget.lower(), algorithm, difficulty)


@dataclass(frozen=True)
class Splits:
    """population ``(budget, algorithm, difficulty)`` -> seed -> split (one of
    :data:`SPLITS`). ``name`` says whose splits they are; ``where`` the file they came
    from (None: built in memory). :attr:`digest` identifies the assignment."""

    assignment: Mapping[Population, Mapping[int, str]]
    name: str = "splits"
    where: str | None = None

    def __post_init__(self) -> None:
        frozen = {
            tuple(pop): MappingProxyType({int(s): str(v) for s, v in seeds.items()})
            for pop, seeds in self.assignment.items()
        }
        object.__setattr__(self, "assignment", MappingProxyType(frozen))

    def __hash__(self) -> int:
        return hash(self.digest)

    @cached_property
    def _index(self) -> dict[Population, Mapping[int, str]]:
        return {_key(pop): seeds for pop, seeds in self.assignment.items()}

    @cached_property
    def digest(self) -> str:
        """``sha256:<hex>`` of the assignment in canonical form (budgets in lower case,
        populations and seeds sorted): the name, notes and file layout do not enter it."""
        rows = sorted(
            [*_key(pop), seed, split]
            for pop, seeds in self.assignment.items()
            for seed, split in seeds.items()
        )
        text = json.dumps(rows, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, cell: Cell) -> str | None:
        """The split of ``cell``, None when its population or seed is not assigned."""
        seeds = self._index.get(_key((cell.budget, cell.algorithm, cell.difficulty)))
        return None if seeds is None else seeds.get(cell.seed)

    def populations(self) -> list[Population]:
        return list(self.assignment)

    def cells(self, split: str | None = None) -> list[Cell]:
        """Every assigned cell (of ``split`` only, when given), in canonical order."""
        check_split(split)
        return sorted(
            (
                Cell(*pop, seed)
                for pop, seeds in self.assignment.items()
                for seed, s in seeds.items()
                if split is None or s == split
            ),
            key=lambda c: c.sort_key,
        )

    def to_json(self) -> dict[str, Any]:
        """The file form (:func:`load_splits` reads it back; ``digest`` included)."""
        populations = []
        for pop in sorted(self.assignment, key=lambda p: Cell(p[0], p[1], p[2], 0).sort_key):
            seeds = self.assignment[pop]
            entry: dict[str, Any] = {"population": "/".join(pop)}
            for split in SPLITS:
                chosen = sorted(s for s, v in seeds.items() if v == split)
                if chosen:
                    entry[split] = chosen
            populations.append(entry)
        return {
            "schema_version": SPLITS_SCHEMA_VERSION,
            "name": self.name,
            "digest": self.digest,
            "populations": populations,
        }


def check_split(split: str | None) -> str | None:
    """``split`` itself when it is None or one of :data:`SPLITS`; one-line
    :class:`UsageError` otherwise."""
    if split is not None and split not in SPLITS:
        raise UsageError(f"unknown split {split!r}: must be one of {', '.join(SPLITS)}")
    return split


# ----------------------------------------------------------------------------------------
# Reading a split file
# ----------------------------------------------------------------------------------------
def parse_splits(data: Any, where: str = "splits") -> Splits:
    """Typed splits from a split file's parsed JSON; every defect is a one-line
    :class:`ConfigError` naming ``where`` and the entry."""
    if not isinstance(data, Mapping) or not isinstance(data.get("populations"), list):
        raise ConfigError(f"{where}: expected a JSON object with a 'populations' list")
    version = data.get("schema_version", SPLITS_SCHEMA_VERSION)
    if version != SPLITS_SCHEMA_VERSION:
        raise ConfigError(f"{where}: unsupported schema_version {version!r}")
    assignment: dict[Population, dict[int, str]] = {}
    seen: dict[Population, str] = {}
    for i, entry in enumerate(data["populations"]):
        pop, seeds = _parse_entry(entry, f"{where}: populations[{i}]")
        text = "/".join(pop)
        if _key(pop) in seen:
            raise ConfigError(f"{where}: population {text} is listed twice")
        seen[_key(pop)] = text
        assignment[pop] = seeds
    if not assignment:
        raise ConfigError(f"{where}: no populations")
    splits = Splits(assignment, name=str(data.get("name") or Path(where).stem), where=where)
    recorded = data.get("digest")
    if recorded is not None and recorded != splits.digest:
        raise ConfigError(
            f"{where}: recorded digest {recorded} does not match the assignment "
            f"({splits.digest}): the file was edited; fix it or drop its 'digest'"
        )
    return splits


def _parse_entry(entry: Any, where: str) -> tuple[Population, dict[int, str]]:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("population"), str):
        raise ConfigError(f"{where}: expected an object with a 'population' string")
    unknown = sorted(set(entry) - _ENTRY_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: "
            f"population, {', '.join(SPLITS)})"
        )
    parts = entry["population"].strip("/").split("/")
    if len(parts) != 3 or not all(p.strip() for p in parts):
        raise ConfigError(
            f"{where}: population {entry['population']!r} is not BUDGET/ALGORITHM/DIFFICULTY"
        )
    budget, algorithm, difficulty = (p.strip() for p in parts)
    pop = (budget, canonical_algorithm(algorithm) or algorithm, difficulty)
    seeds: dict[int, str] = {}
    for split in SPLITS:
        values = entry.get(split, [])
        if not isinstance(values, list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in values
        ):
            raise ConfigError(f"{where}: {split!r} must be a list of seeds (integers >= 0)")
        for seed in values:
            if seed in seeds:
                raise ConfigError(
                    f"{where}: seed {seed} of {'/'.join(pop)} is in both "
                    f"{seeds[seed]!r} and {split!r}"
                )
            seeds[seed] = split
    if not seeds:
        raise ConfigError(f"{where}: population {'/'.join(pop)} assigns no seed")
    return pop, seeds


def load_splits(path: str | Path | None = None) -> Splits:
    """The release's splits (``path`` None: the package data, its digest checked against
    the manifest's ``splits_digest``) or a user's own split file (JSON)."""
    if path is None:
        return _release_splits()
    file = Path(path).expanduser()
    if not file.is_file():
        raise UsageError(f"split file {file} not found")
    return _read(file.resolve())


def _read(file: Path) -> Splits:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"{file}: cannot read the split file as JSON ({reason})") from None
    return parse_splits(data, where=str(file))


_RELEASE: list[Splits] = []


def _release_splits() -> Splits:
    if not _RELEASE:
        if not SPLITS_PATH.is_file():
            raise ConfigError(
                f"split file {SPLITS_PATH} not found: this alem-eval install is incomplete "
                "(reinstall it)"
            )
        splits = _read(SPLITS_PATH)
        expected = load_manifest().splits_digest
        if splits.digest != expected:
            raise ConfigError(
                f"{SPLITS_PATH}: digest {splits.digest} is not the manifest's splits_digest "
                f"{expected}: a broken install (reinstall alem-eval)"
            )
        _RELEASE.append(splits)
    return _RELEASE[0]


def as_splits(splits: Splits | str | Path | None) -> Splits:
    """A :class:`Splits` as given, else :func:`load_splits` of the path (None: the release's)."""
    return splits if isinstance(splits, Splits) else load_splits(splits)


# ----------------------------------------------------------------------------------------
# Cells and splits
# ----------------------------------------------------------------------------------------
def split_of(cell: Cell, splits: Splits | str | Path | None = None) -> str:
    """The split of ``cell`` in ``splits`` (None: the release's); a one-line
    :class:`SelectorError` when it has none."""
    chosen = as_splits(splits)
    split = chosen.get(cell)
    if split is None:
        raise SelectorError(f"cell {cell.id} has no split in {_describe(chosen)}")
    return split


def select_split(
    cells: Iterable[C], split: str | None, splits: Splits | str | Path | None = None
) -> list[C]:
    """The cells of ``split`` (their order and type kept); ``split`` None: every cell,
    unfiltered. An unknown split name is a one-line :class:`UsageError`; a selection of
    which no cell is in ``split`` a :class:`SelectorError` (cells without a split are
    never in one)."""
    items = list(cells)
    if check_split(split) is None:
        return items
    chosen = as_splits(splits)
    kept = [c for c in items if chosen.get(c) == split]
    if items and not kept:
        unassigned = [c for c in items if chosen.get(c) is None]
        hint = f"; {len(unassigned)} of them have no split there" if unassigned else ""
        raise SelectorError(
            f"none of the {len(items)} selected cell(s) is in split {split!r} of "
            f"{_describe(chosen)}{hint}"
        )
    return kept


def _describe(splits: Splits) -> str:
    return f"the splits {splits.name!r}" + (f" ({splits.where})" if splits.where else "")


def seed_assignment(
    populations: Sequence[Population], rule: Mapping[int, str]
) -> dict[Population, dict[int, str]]:
    """Every population assigned the same seed -> split ``rule`` (``manifests/generate.py``)."""
    return {pop: dict(rule) for pop in populations}
