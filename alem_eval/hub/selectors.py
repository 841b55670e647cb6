"""Cell selectors: ``BUDGET/ALGORITHM/DIFFICULTY/seedN`` patterns over a set of cells.

- Any level may be ``*`` (or a glob such as ``seed[0-2]``) or a comma list:
  ``1B,100M/ippo-rnn,mappo-rnn/hard/seed0,seed3``.
- Trailing levels may be omitted: ``1B/ippo-rnn/hard`` (its seeds), ``*/*/hard``, ``100M``.
- Every level matches case-insensitively (a budget keeps the source's spelling); a seed
  level accepts ``seed3`` and ``3``; an algorithm level accepts the short names
  (``ippo``, ``pqn``, ...).
- Selectors are names, never paths: ``..``, absolute paths, backslashes and empty levels
  (``1B//hard``) are rejected.

A selector that matches nothing raises :class:`SelectorError` naming the closest valid
names per level. Selectors combine (as a union) and can be narrowed by per-level filters
(the ``--budget/--algorithm/--difficulty/--seed`` options) with :func:`select_cells`.
"""

from __future__ import annotations

import difflib
import fnmatch
import re
from dataclasses import dataclass
from collections.abc import Iterable, Sequence

from alem_eval.algorithms.registry import canonical_algorithm
from alem_eval.core.errors import SelectorError, UsageError
from alem_eval.hub.manifest import Cell, sort_cells

LEVELS: tuple[str, ...] = ("budget", "algorithm", "difficulty", "seed")
_TOKEN = re.compile(r"^[A-Za-z0-9*?\[][A-Za-z0-9_.*?\[\]!-]*$")
_WILDCARD = re.compile(r"[*?\[]")
_SEED = re.compile(r"^(?:seed)?(\d+)$", re.IGNORECASE)


def _level_value(cell: Cell, level: int) -> str:
    return (cell.budget, cell.algorithm, cell.difficulty, f"seed{cell.seed}")[level]


def _normalise(item: str, level: int) -> str:
    """``3`` -> ``seed3``, ``ippo`` -> ``ippo-rnn``; other items as typed (compared case-insensitively)."""
    if level == 3:
        m = _SEED.match(item)
        return f"seed{int(m.group(1))}" if m else item
    if level == 1 and not _WILDCARD.search(item):
        return canonical_algorithm(item) or item
    return item


@dataclass(frozen=True)
class Selector:
    """One parsed selector: per level, the alternatives (``None`` = any)."""

    text: str
    levels: tuple[tuple[str, ...] | None, ...]  # always 4 entries

    @classmethod
    def parse(cls, text: str) -> Selector:
        raw = str(text)
        s = raw.strip()
        where = f"selector {raw!r}"
        if not s:
            raise SelectorError(f"{where}: empty selector")
        if "\\" in s or "\x00" in s:
            raise SelectorError(
                f"{where}: backslashes are not allowed (use BUDGET/ALGORITHM/DIFFICULTY/seedN)"
            )
        if s.startswith("/") or re.match(r"^[A-Za-z]:", s):
            raise SelectorError(
                f"{where}: absolute paths are not selectors (use BUDGET/ALGORITHM/DIFFICULTY/seedN)"
            )
        if s.endswith("/"):  # tolerate one trailing slash (shell completion)
            s = s[:-1]
        parts = s.split("/")
        if len(parts) > len(LEVELS):
            raise SelectorError(
                f"{where}: too many levels ({len(parts)}); expected at most "
                "BUDGET/ALGORITHM/DIFFICULTY/seedN"
            )
        levels: list[tuple[str, ...] | None] = []
        for i, part in enumerate(parts):
            if part == "":
                raise SelectorError(f"{where}: empty {LEVELS[i]} level (use '*' to match any)")
            levels.append(_parse_level(part, i, where))
        levels += [None] * (len(LEVELS) - len(levels))
        return cls(raw, tuple(levels))

    @classmethod
    def from_filters(
        cls,
        budgets: Sequence[str] | None = None,
        algorithms: Sequence[str] | None = None,
        difficulties: Sequence[str] | None = None,
        seeds: Sequence[str | int] | None = None,
    ) -> Selector | None:
        """The selector equivalent to per-level filter options; None when no filter is set."""
        given = [_split_items(v) for v in (budgets, algorithms, difficulties, seeds)]
        if not any(given):
            return None
        text = " ".join(
            f"--{LEVELS[i]} {','.join(items)}" for i, items in enumerate(given) if items
        )
        levels = tuple(
            _parse_level(",".join(items), i, f"filter {text!r}") if items else None
            for i, items in enumerate(given)
        )
        return cls(text, levels)

    def matches(self, cell: Cell) -> bool:
        return all(self._level_matches(cell, i) for i in range(len(LEVELS)))

    def _level_matches(self, cell: Cell, level: int) -> bool:
        items = self.levels[level]
        return items is None or any(_item_matches(it, cell, level) for it in items)


def _split_items(values: Sequence[str | int] | None) -> list[str]:
    out: list[str] = []
    for v in values or ():
        out += [x.strip() for x in str(v).split(",")]
    return out


def _parse_level(part: str, level: int, where: str) -> tuple[str, ...] | None:
    items = [x.strip() for x in part.split(",")]
    for it in items:
        if it == "":
            raise SelectorError(f"{where}: empty item in the {LEVELS[level]} list {part!r}")
        if it in (".", "..") or it.startswith("."):
            raise SelectorError(f"{where}: path traversal ({it!r}) is not allowed in a selector")
        if not _TOKEN.match(it):
            raise SelectorError(
                f"{where}: invalid {LEVELS[level]} {it!r} (letters, digits, '-', '_', "
                "'.', ',' and '*' only)"
            )
    if "*" in items:
        return None
    return tuple(_normalise(it, level) for it in items)


def _item_matches(item: str, cell: Cell, level: int) -> bool:
    value = _level_value(cell, level).lower()
    if _WILDCARD.search(item):
        return fnmatch.fnmatchcase(value, item.lower())
    return value == item.lower()


def _closest(item: str, values: Iterable[str]) -> list[str]:
    by_low = {v.lower(): v for v in values}
    return [
        by_low[m] for m in difflib.get_close_matches(item.lower(), list(by_low), n=3, cutoff=0.6)
    ]


def _options(values: Iterable[str], limit: int = 8) -> str:
    vals = list(dict.fromkeys(values))
    shown = ", ".join(vals[:limit])
    return shown + (f", ... ({len(vals) - limit} more)" if len(vals) > limit else "")


def _explain_no_match(sel: Selector, universe: Sequence[Cell]) -> str:
    """One line: which level item is unknown (with the closest names), or which combination is empty."""
    problems = []
    for level, items in enumerate(sel.levels):
        if items is None:
            continue
        values = [_level_value(c, level) for c in universe]
        for it in items:
            if not any(_item_matches(it, c, level) for c in universe):
                close = _closest(it, values) if not _WILDCARD.search(it) else []
                hint = (
                    f"did you mean {', '.join(close)}?" if close else f"valid: {_options(values)}"
                )
                problems.append(f"no {LEVELS[level]} {it!r} ({hint})")
    if problems:
        return f"selector {sel.text!r} matches no cell: " + "; ".join(problems)
    # Every name exists somewhere, but not together: show what exists under the longest prefix.
    cells = list(universe)
    for level in range(len(LEVELS)):
        narrowed = [c for c in cells if sel._level_matches(c, level)]
        if not narrowed:
            prefix = (
                "/".join(",".join(sel.levels[i] or ("*",)) for i in range(level)) or "the source"
            )
            avail = _options(_level_value(c, level) for c in cells)
            return (
                f"selector {sel.text!r} matches no cell: no such {LEVELS[level]} under "
                f"{prefix} (available: {avail})"
            )
        cells = narrowed
    return f"selector {sel.text!r} matches no cell"  # pragma: no cover


def select_cells(
    universe: Sequence[Cell],
    selectors: Sequence[str] = (),
    *,
    budgets: Sequence[str] | None = None,
    algorithms: Sequence[str] | None = None,
    difficulties: Sequence[str] | None = None,
    seeds: Sequence[str | int] | None = None,
) -> list[Cell]:
    """Cells of ``universe`` matched by any selector (all if none) and by every filter.

    Raises :class:`SelectorError` when a selector (or the filters) matches nothing.
    """
    universe = sort_cells(universe)
    parsed = [Selector.parse(s) for s in selectors]
    filt = Selector.from_filters(budgets, algorithms, difficulties, seeds)
    if not universe:
        raise SelectorError("the source holds no cells")
    chosen: list[Cell] = []
    for sel in parsed:
        hit = [c for c in universe if sel.matches(c)]
        if not hit:
            raise SelectorError(_explain_no_match(sel, universe))
        chosen += hit
    if not parsed:
        chosen = list(universe)
    if filt is not None:
        if not any(filt.matches(c) for c in universe):
            raise SelectorError(_explain_no_match(filt, universe))
        narrowed = [c for c in chosen if filt.matches(c)]
        if not narrowed:
            raise SelectorError(
                f"no cell matches both {', '.join(repr(s) for s in selectors)} and {filt.text}"
            )
        chosen = narrowed
    return sort_cells(chosen)


def require_selection(
    source: object,
    selectors: Sequence[str] | None,
    *,
    command: str,
    filters: Sequence[Sequence[str] | None] = (),
) -> None:
    """Refuse to take every cell of a source that would download them all (the Hub:
    ``source.selection_required``) when neither a selector nor a filter names any: one
    line naming ``'*'`` as the explicit way to take everything. ``verify``, ``pull``,
    ``score`` and ``crossplay`` ask it before selecting."""
    if not getattr(source, "selection_required", False):
        return
    if any(str(s).strip() for s in selectors or ()) or any(filters):
        return
    raise SelectorError(
        f"{command}: name the Hub cells, e.g. 1B/ippo-rnn/hard, or '*' to take every cell "
        "(the whole release to download)"
    )


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``--shard i/N`` (0-based) -> ``(i, N)``; None when not given. :class:`UsageError`
    for anything else."""
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected i/N, e.g. 0/8") from None
    if n < 1 or not 0 <= i < n:
        raise UsageError(f"--shard {text!r}: need 0 <= i < N")
    return i, n


def shard_cells(cells: Sequence[Cell], shard: tuple[int, int] | None) -> list[Cell]:
    """The i-th of N contiguous shares of ``cells`` (every cell in exactly one share;
    contiguous keeps a group's seeds together). A SLURM array runs one share per task."""
    if shard is None:
        return list(cells)
    i, n = shard
    return list(cells[len(cells) * i // n : len(cells) * (i + 1) // n])
