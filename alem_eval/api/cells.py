"""Cells and sources of the public API: :class:`Cell`, :func:`select` and how every
function turns its first argument (cells or selectors) into a source and cells.

Wherever the API takes cells, its first parameter takes ``Cell`` s from :func:`select`
(they remember their source) or selector strings, alone or in a list. Selector strings
are selected from ``source=`` (default the Hub; ``repo`` / ``revision`` / ``cache_dir``
for it). ``Cell`` s keep their own source: a ``source=`` / ``repo=`` / ``revision=`` /
``cache_dir=`` that names another one is a :class:`~alem_eval.core.errors.UsageError`
(never silently ignored). Importing this module imports no JAX and no pandas.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.core.errors import UsageError
from alem_eval.hub.manifest import Cell as _ManifestCell

if TYPE_CHECKING:
    from alem_eval.hub.source_base import Source

SourceSpec = str | Path  # "hub", "demo" or a directory in the released layout
Cells = Any  # a Cell, a selector string, or an iterable of either (see resolve_cells)
DEFAULT_SOURCE = "hub"


@dataclass(frozen=True)
class Cell(_ManifestCell):
    """One checkpoint cell and the source it was selected from.

    ``budget, algorithm, difficulty`` (training difficulty), ``seed``; ``.id`` is
    ``"1B/ippo-rnn/hard/seed0"``, its path in the release. Equal cells from two sources
    compare equal; the source travels with the cell, so ``score(cells)`` needs no
    ``source=``.
    """

    source: Any = field(default=None, compare=False, repr=False)  # a hub.source_base.Source
    origin: tuple = field(default=(), compare=False, repr=False)  # what opened it


def source_origin(source: SourceSpec, repo, revision, cache_dir) -> tuple:
    """What a source was opened from, comparable: (spec, repo, revision, cache_dir)."""
    spec = str(source).strip()
    if spec.lower() in ("hub", "demo"):
        spec = spec.lower()
    else:
        spec = str(Path(spec).expanduser().resolve())
    return (spec, repo, revision, None if cache_dir is None else str(cache_dir))


def selector_strings(items: Iterable[Any] | None) -> list[str]:
    """Selector strings from a string, a ``Cell`` (its id) or (nested) lists of either."""
    if items is None:
        return []
    if isinstance(items, (str, _ManifestCell)):
        items = [items]
    out: list[str] = []
    for item in items:
        if isinstance(item, _ManifestCell):
            out.append(item.id)
        elif isinstance(item, str):
            out.append(item)
        elif isinstance(item, Iterable):
            out += selector_strings(item)
        else:
            raise UsageError(f"not a cell or selector: {item!r}")
    return out


def select(
    *selectors: str | Sequence[str],
    source: SourceSpec = DEFAULT_SOURCE,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    split: str | None = None,
    splits: Any = None,
) -> list[Cell]:
    """The cells of ``source`` matched by the selectors (every cell when none is given).

    ``selectors``: ``BUDGET/ALGORITHM/DIFFICULTY/seedN`` patterns, any level a glob or a
    comma list, trailing levels optional (``"1B/*/hard"``, ``"1B/ippo,pqn"``); a list of
    them works as well. ``source``: ``"hub"`` (the Hugging Face release; ``repo`` /
    ``revision`` / ``cache_dir`` as in the CLI), ``"demo"`` (the cells bundled with the
    package) or a local directory in the released layout. ``split``: only the cells of that
    frozen partner split (``"train"``, ``"val"``, ``"test"``) of ``splits`` (None: the
    release's; a split file's path or an :class:`~alem_eval.hub.splits.Splits`). Nothing is
    downloaded here; what a later call downloads for these cells shows a bar on stderr when
    it is a terminal.
    Returns ``list[Cell]`` in manifest order; a selector that matches nothing raises
    :class:`~alem_eval.core.errors.SelectorError`.
    """
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.sources import open_source

    src = open_source(
        source, repo=repo, revision=revision, cache_dir=cache_dir, on_download=download_bar()
    )
    origin = source_origin(source, repo, revision, cache_dir)
    return [
        Cell(c.budget, c.algorithm, c.difficulty, c.seed, source=src, origin=origin)
        for c in cells_of_split(src.select(selector_strings(selectors)), split, splits)
    ]


def cells_of_split(cells: list, split: str | None, splits: Any) -> list:
    """The ``cells`` of ``split`` (None: all) in ``splits`` (:mod:`alem_eval.hub.splits`)."""
    if split is None and splits is None:
        return cells
    from alem_eval.hub.splits import as_splits, select_split

    return select_split(cells, split, as_splits(splits))


def _check_same_source(origin: tuple, source, repo, revision, cache_dir) -> None:
    """A ``source`` / ``repo`` / ``revision`` / ``cache_dir`` given with ``Cell`` s must
    name the source they were selected from: one line otherwise, never ignored."""
    if source is None and repo is None and revision is None and cache_dir is None:
        return
    spec = origin[0]
    given = source_origin(spec if source is None else source, repo, revision, cache_dir)
    names = ("source", "repo", "revision", "cache_dir")
    for name, value, mine, theirs in zip(names, (source, repo, revision, cache_dir), given, origin):
        if value is not None and mine != theirs:
            raise UsageError(
                f"{name}={value!r}: the Cells were selected from {spec}"
                + (f" ({name} {theirs!r})" if name != "source" else "")
                + "; a Cell keeps its source, so pass selector strings to play another one"
            )


def resolve_cells(
    cells: Cells,
    source: SourceSpec | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    split: str | None = None,
    splits: Any = None,
) -> tuple[Source, list[_ManifestCell]]:
    """(source, the library's cells): ``Cell`` s keep their own source (one per call; a
    ``source`` / ``repo`` / ``revision`` / ``cache_dir`` naming another is an error);
    selector strings are selected from ``source`` (None: the Hub); ``split`` / ``splits``
    keep those of a partner split (:func:`cells_of_split`)."""
    items: list[Any] = [cells] if isinstance(cells, (str, _ManifestCell)) else list(cells or [])
    if not items:
        raise UsageError("no cells given: pass Cells from alem_eval.select() or selectors")
    if all(isinstance(c, str) for c in items):
        items = select(
            *items,
            source=DEFAULT_SOURCE if source is None else source,
            repo=repo,
            revision=revision,
            cache_dir=cache_dir,
        )
    elif not all(isinstance(c, Cell) and c.source is not None for c in items):
        raise UsageError(
            "cells must be all Cells from alem_eval.select() or all selector strings (with source=)"
        )
    else:
        origins = list(dict.fromkeys(c.origin for c in items))
        if len(origins) > 1:
            names = ", ".join(str(o[0]) for o in origins)
            raise UsageError(f"the cells come from {len(origins)} sources ({names}); one per call")
        _check_same_source(origins[0], source, repo, revision, cache_dir)
    plain = [_ManifestCell(c.budget, c.algorithm, c.difficulty, c.seed) for c in items]
    return items[0].source, cells_of_split(list(dict.fromkeys(plain)), split, splits)


def source_of(value: Any) -> Source:
    """A source object, the source of a ``Cell``, or one opened from its spec."""
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.source_base import Source
    from alem_eval.hub.sources import open_source

    if isinstance(value, Source):
        return value
    if isinstance(value, Cell):
        return value.source
    return open_source(value, on_download=download_bar())
