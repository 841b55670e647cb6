"""Cross-play teams: which cell drives each agent slot, and the schemes that draw them.

A team is a tuple of cell ids, one per agent slot (:class:`Team`). :func:`compositions`
draws the teams of a scheme from the selected cells, always with each cell's self-play
team (all slots the same cell):

* ``pairs``: every ordered pair (A, B), A != B, as "A in all slots but one, B in the
  remaining one", for every position of B: ``n (n - 1) S`` teams for n cells and S slots;
* ``distinct``: ordered teams of S different cells, a seeded sample of ``max_teams``
  (all of them when there are no more than that);
* ``mixed``: the ``distinct`` teams that span more than one algorithm (sampled alike);
* ``all``: the three together (each team once).

Teams play on :data:`PROTOCOL` (``fast``, the only protocol that takes mixed teams). Numpy
only: the dry-run plan (:mod:`alem_eval.scoring.plan`) draws the same teams as
:func:`alem_eval.scoring.crossplay.run_crossplay` without loading JAX.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from alem_eval.core.errors import UsageError

SCHEMES: tuple[str, ...] = ("pairs", "distinct", "mixed", "all")
PROTOCOL = "fast"  # the only protocol that takes mixed teams
DEFAULT_MAX_TEAMS = 64
_GRID_LIMIT = 20_000_000  # n ** slots candidate rows enumerated for distinct / mixed


# ----------------------------------------------------------------------------------------
# Compositions
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True, order=True)
class Team:
    """Which cell drives each agent slot: ``slots[s]`` is a cell id."""

    slots: tuple[str, ...]

    @property
    def members(self) -> tuple[str, ...]:
        """The distinct cells, in slot order."""
        return tuple(dict.fromkeys(self.slots))

    @property
    def is_self_play(self) -> bool:
        return len(self.members) == 1

    @property
    def anchor(self) -> str:
        """The cell in most slots (A for AAB); on ties the first in slot order."""
        return max(self.members, key=self.slots.count)  # max keeps the first of equals

    @property
    def pair(self) -> tuple[str, str, int] | None:
        """``(A, B, position of B)`` for a team "A in all slots but one, B in one"; else None."""
        if len(self.members) != 2 or len(self.slots) < 3:
            return None
        a = self.anchor
        (b,) = [m for m in self.members if m != a]
        if self.slots.count(b) != 1:
            return None
        return a, b, self.slots.index(b)

    @property
    def shape(self) -> str:
        """``self`` | ``pair`` | ``distinct`` | ``other``."""
        if self.is_self_play:
            return "self"
        if self.pair is not None:
            return "pair"
        return "distinct" if len(self.members) == len(self.slots) else "other"

    def label(self) -> str:
        return " | ".join(self.slots)


def compositions(
    cells: Sequence[Any],
    scheme: str = "pairs",
    max_teams: int = DEFAULT_MAX_TEAMS,
    seed: int = 0,
    *,
    num_slots: int = 3,
) -> list[Team]:
    """The teams of ``scheme`` over ``cells`` (objects with ``.id`` and ``.algorithm``,
    e.g. manifest cells): each cell's self-play team first (in the given order), then the
    scheme's teams, each team once. ``max_teams`` caps the sampled schemes (``distinct``,
    ``mixed``; ``pairs`` is always complete); the same ``seed`` gives the same sample.
    Raises :class:`UsageError` when the cells cannot form a cross-play team of the scheme."""
    check_scheme(scheme)
    check_int("--max-teams", max_teams, 1)
    check_int("--seed", seed, 0)
    check_int("number of slots", num_slots, 2)
    cells = list({c.id: c for c in cells}.values())
    ids = [c.id for c in cells]
    if len(ids) < 2:
        raise UsageError(f"cross-play needs at least two cells, the selection has {len(ids)}")
    teams = [Team((c,) * num_slots) for c in ids]
    if scheme in ("pairs", "all"):
        teams += _pairs(ids, num_slots)
    for kind in ("distinct", "mixed"):
        if scheme in (kind, "all"):
            algorithms = [c.algorithm for c in cells]
            teams += _sample_distinct(
                ids,
                algorithms,
                num_slots,
                max_teams,
                _rng(seed, "compositions", kind),
                mixed=kind == "mixed",
                required=scheme == kind,
            )
    return list(dict.fromkeys(teams))


def _pairs(ids: Sequence[str], num_slots: int) -> list[Team]:
    teams = []
    for a, b in itertools.permutations(ids, 2):
        for pos in range(num_slots):
            slots = [a] * num_slots
            slots[pos] = b
            teams.append(Team(tuple(slots)))
    return teams


def _sample_distinct(
    ids: Sequence[str],
    algorithms: Sequence[str],
    num_slots: int,
    max_teams: int,
    rng: np.random.Generator,
    *,
    mixed: bool,
    required: bool,
) -> list[Team]:
    """Ordered teams of ``num_slots`` different cells (spanning more than one algorithm when
    ``mixed``): all of them when at most ``max_teams``, else a uniform sample without
    replacement, kept in lexicographic order of the cells' positions."""
    n = len(ids)
    name = "mixed" if mixed else "distinct"
    if n < num_slots:
        if not required:
            return []
        raise UsageError(
            f"scheme {name} needs at least {num_slots} cells (one per slot), the selection has {n}"
        )
    if n**num_slots > _GRID_LIMIT:
        raise UsageError(
            f"scheme {name}: {n} cells are too many to draw {num_slots}-slot "
            "teams from; select fewer cells"
        )
    grid = np.indices((n,) * num_slots, dtype=np.int32).reshape(num_slots, -1).T
    keep = np.ones(len(grid), bool)
    for i, j in itertools.combinations(range(num_slots), 2):
        keep &= grid[:, i] != grid[:, j]
    if mixed:
        codes = np.unique(np.asarray(algorithms), return_inverse=True)[1].reshape(-1)[grid]
        keep &= (codes != codes[:, :1]).any(axis=1)
    candidates = grid[keep]
    if len(candidates) == 0:
        if not required:
            return []
        raise UsageError(
            f"scheme {name} needs cells of at least two algorithms; the "
            f"selection has only {algorithms[0]}"
        )
    if len(candidates) > max_teams:
        candidates = candidates[np.sort(rng.choice(len(candidates), max_teams, replace=False))]
    return [Team(tuple(ids[k] for k in row)) for row in candidates]


# ----------------------------------------------------------------------------------------
# Validation and seeding
# ----------------------------------------------------------------------------------------
def check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise UsageError(f"unknown scheme {scheme!r}: --scheme must be one of {', '.join(SCHEMES)}")


def check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise UsageError(f"{name} must be an integer of at least {minimum}, got {value!r}")


def _rng(seed: int, *stream: Any) -> np.random.Generator:
    """A generator for ``(seed, stream)``: independent streams from one user seed."""
    from alem_eval.analysis.bootstrap import stream_rng

    return stream_rng(seed, stream)
