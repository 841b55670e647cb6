"""A scenario's split table: the focal with the partners it trained with and held-out ones.

When a scenario's background cells span more than one frozen partner split
(:mod:`alem_eval.hub.splits`: train | val | test), its result also reports, per mode and
metric, the focal's ``focal - self`` over the background cells of each split, and the
generalisation gap between them, in one table:

* a row per split (in the order train, val, test), over the focal's teams with the cells of
  that split: the mean over those teams of ``focal - self-play`` (the cell's own self-play
  on the same worlds), as the main table's ``focal - self`` is over one population's teams;
* where the focal is a cell whose ``config.json`` records its frozen partners
  (:func:`~alem_eval.scoring.focal_cell.recorded_partners`), a split's cells are divided
  into those it ``trained with`` and those ``held out`` (one row each, the split beside);
* ``gap (test - train)``: the test row minus the train row; with recorded partners
  ``gap (held out test - trained with)``: the held-out test cells minus the cells it
  trained with (of any split; the train cells when none of them is in the background).

Units: points of the metric (percentage points in the tables, fractions in JSON), as the
main table's ``focal - self``. Intervals: the world bootstrap of the main table
(:func:`~alem_eval.analysis.crossplay_stats.gap_intervals`); the gap's is paired
(:func:`~alem_eval.analysis.crossplay_stats.gap_difference`): every team played the same
worlds, so a replicate resamples the worlds once for both sides. Cells without a split in
the splits used are in no row. A selection within one split has no split table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from alem_eval.analysis.bootstrap import Interval
from alem_eval.analysis.crossplay_stats import gap_difference, gap_intervals
from alem_eval.analysis.metrics import metric_info
from alem_eval.core.tables import Estimate, PaperTable, fmt_marked
from alem_eval.hub.splits import SPLITS

if TYPE_CHECKING:
    from alem_eval.scoring.play import TeamScore
    from alem_eval.scoring.scenario import ScenarioTeam
    from alem_eval.scoring.teams import Team

TRAINED_WITH = "trained with"
HELD_OUT = "held out"

# The footnote of a table whose intervals may be missing or of zero width (the scenario's
# main table and its split table).
ZERO_WIDTH_NOTE = (
    "† no interval, or a zero-width one: fewer than 2 worlds, or every world scoring the "
    "same, gives no measure of uncertainty."
)


def team_interval(ref: np.ndarray, sub: np.ndarray | None, *, stream, **boot) -> Interval:
    """The world-bootstrap interval of mean(ref - sub) over teams ``(K, E)``."""
    sub = np.zeros_like(ref) if sub is None else sub
    est = gap_intervals(ref[None], sub[None], stream=stream, **boot)
    return est.interval()


def background_splits(cells: Sequence[Any], splits: Any = None) -> dict[str, str]:
    """``{cell id: split}`` of the background ``cells`` (manifest cells) in ``splits`` (a
    :class:`~alem_eval.hub.splits.Splits`, a split file; None: the release's); a cell
    without a split there is left out, and so is one that names no population (a cell of
    a source without the released layout: no budget, algorithm, difficulty and seed)."""
    from alem_eval.hub.splits import as_splits

    chosen = as_splits(splits)
    fields = ("budget", "algorithm", "difficulty", "seed")
    placed = [c for c in cells if all(getattr(c, f, None) is not None for f in fields)]
    return {c.id: s for c in placed if (s := chosen.get(c)) is not None}


@dataclass(frozen=True)
class SplitGroup:
    """The background cells of one split (and, with recorded partners, one role)."""

    split: str
    role: str | None  # TRAINED_WITH | HELD_OUT; None: the focal records no partners
    cells: tuple[str, ...]

    @property
    def label(self) -> str:
        return self.split if self.role is None else f"{self.role} ({self.split})"


def split_groups(
    cell_splits: Mapping[str, str], trained_with: Sequence[str] | None = None
) -> list[SplitGroup]:
    """``{cell id: split}`` -> the groups of the split table, in the order of
    :data:`~alem_eval.hub.splits.SPLITS` (trained with before held out); none when the
    cells span fewer than 2 splits. ``trained_with``: the focal's recorded partners."""
    if len(set(cell_splits.values())) < 2:
        return []
    partners = set(trained_with or ())
    roles = (None,) if trained_with is None else (TRAINED_WITH, HELD_OUT)
    out = []
    for split in SPLITS:
        for role in roles:
            cells = tuple(
                c
                for c, s in cell_splits.items()
                if s == split and (role is None or (c in partners) == (role == TRAINED_WITH))
            )
            if cells:
                out.append(SplitGroup(split, role, cells))
    return out


def gap_sides(
    cell_splits: Mapping[str, str], trained_with: Sequence[str] | None = None
) -> tuple[str, tuple[str, ...], tuple[str, ...]] | None:
    """The gap row's (label, test-side cells, train-side cells); None when a side is
    empty or the cells span fewer than 2 splits (see the module docstring)."""
    if len(set(cell_splits.values())) < 2:
        return None
    train = tuple(c for c, s in cell_splits.items() if s == "train")
    if trained_with is None:
        test = tuple(c for c, s in cell_splits.items() if s == "test")
        label = "gap (test - train)"
    else:
        partners = set(trained_with)
        test = tuple(c for c, s in cell_splits.items() if s == "test" and c not in partners)
        mine = tuple(c for c in cell_splits if c in partners)
        train = mine or train
        label = f"gap (held out test - {TRAINED_WITH if mine else 'train'})"
    return (label, test, train) if test and train else None


@dataclass(frozen=True)
class SplitRow:
    """One row of the split table: ``diff`` is the focal's ``focal - self`` over the
    ``cells`` of a split (``split``, ``role``), or for the gap row (``split`` None) that
    of the test side (``cells``) minus that of the train side (``versus``); raw
    fractions, intervals over the worlds."""

    mode: str
    metric: str
    label: str
    split: str | None  # None: the gap row
    role: str | None
    diff: Interval
    cells: tuple[str, ...]  # the gap row: its test side
    n_teams: int
    n_worlds: int
    versus: tuple[str, ...] = ()  # the gap row: its train side

    @property
    def cells_text(self) -> str:
        """How many cells: ``3``, or for the gap row ``1 vs 3``."""
        return f"{len(self.cells)} vs {len(self.versus)}" if self.is_gap else str(len(self.cells))

    @property
    def is_gap(self) -> bool:
        return self.split is None

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "metric": self.metric,
            "label": metric_info(self.metric).name,
            "row": self.label,
            "split": self.split,
            "role": self.role,
            "focal_minus_self": {
                k: (v if math.isfinite(v) else None)
                for k, v in zip(("point", "lo", "hi"), self.diff.as_list())
            },
            "cells": list(self.cells),
            "versus": list(self.versus),
            "n_teams": self.n_teams,
            "n_worlds": self.n_worlds,
        }

    def flat(self) -> dict[str, Any]:
        """One flat row (fractions): mode, metric (its name), row, split, role, cells and
        versus (counts), ``focal_minus_self`` with ``_lo`` / ``_hi``, n_teams, n_worlds."""
        pt, lo, hi = self.diff.as_list()
        return {
            "mode": self.mode,
            "metric": metric_info(self.metric).name,
            "row": self.label,
            "split": self.split,
            "role": self.role,
            "cells": len(self.cells),
            "versus": len(self.versus),
            "focal_minus_self": pt,
            "focal_minus_self_lo": lo,
            "focal_minus_self_hi": hi,
            "n_teams": self.n_teams,
            "n_worlds": self.n_worlds,
        }


def split_rows(
    teams: Sequence[ScenarioTeam],
    scores: Mapping[Team, TeamScore],
    cell_splits: Mapping[str, str],
    trained_with: Sequence[str] | None = None,
    *,
    metrics: Sequence[str],
    **boot: Any,
) -> list[SplitRow]:
    """The split table (see the module docstring): per mode and metric, a row per
    :func:`split_groups` group and the :func:`gap_sides` row; empty when the background
    spans fewer than 2 splits. ``boot``: reps, seed, confidence."""
    groups = split_groups(cell_splits, trained_with)
    if not groups:
        return []
    gap = gap_sides(cell_splits, trained_with)
    selfs = {t.background: t.team for t in teams if t.kind == "self"}
    modes = list(dict.fromkeys(t.mode for t in teams if t.mode is not None))
    out = []
    for mode in modes:
        for metric in metrics:

            def arrays(cells: Sequence[str], mode=mode, metric=metric):
                """(focal, self-play) ``(1, K, E)`` of the focal's teams with ``cells``."""
                mine = [
                    t
                    for t in teams
                    if t.kind == "focal" and t.mode == mode and t.background in cells
                ]
                f = np.stack([scores[t.team].values(metric) for t in mine])
                ref = np.stack([scores[selfs[t.background]].values(metric) for t in mine])
                return f[None], ref[None]

            for g in groups:
                est = gap_intervals(
                    *arrays(g.cells), stream=("split", mode, metric, g.label), **boot
                )
                out.append(_row(mode, metric, g.label, g.split, g.role, est, g.cells))
            if gap is not None:
                label, test, train = gap
                sides = (arrays(test), arrays(train))
                est = gap_difference(*sides, stream=("split-gap", mode, metric), **boot)
                out.append(_row(mode, metric, label, None, None, est, test, train))
    return out


def _row(mode, metric, label, split, role, est, cells, versus=()) -> SplitRow:
    return SplitRow(
        mode=mode,
        metric=metric,
        label=label,
        split=split,
        role=role,
        diff=est.interval(),
        cells=tuple(cells),
        n_teams=int(est.n_teams[0]),
        n_worlds=int(est.n_worlds[0]),
        versus=tuple(versus),
    )


# ----------------------------------------------------------------------------------------
# Outputs: the paper table and the terminal's rows
# ----------------------------------------------------------------------------------------
def split_paper_table(
    rows: Sequence[SplitRow],
    *,
    focal: str,
    confidence: float,
    trained: bool,
    metrics: Sequence[str],
    decimals: int = 1,
    caption: str | None = None,
    label: str | None = None,
    ci: bool = True,
) -> PaperTable | None:
    """The split table for a paper (percentage points), None without split rows:
    per (mode, metric) a row per split and the gap row, ``focal - self`` with its
    interval over the worlds (``ci`` False: the means alone)."""
    if not rows:
        return None
    body = tuple(
        (r.mode, metric_info(r.metric).label, r.label, r.cells_text)
        + (Estimate.of(r.diff, metric_info(r.metric).scale),)
        for r in rows
        if r.metric in metrics
    )
    gap = next(r.label for r in rows if r.is_gap) if any(r.is_gap for r in rows) else None
    return PaperTable(
        columns=("Mode", "Metric", "Partners", "Cells", "Focal - self"),
        rows=body,
        stub=4,
        notes=(
            f"{focal}: focal - self-play per partner split, the mean over its teams with the "
            f"background cells of each split, in percentage points [{confidence:.0%} CI, "
            "bootstrap over the worlds]"
            + (f"; {gap}: a paired bootstrap (one world resample for both sides)." if gap else "."),
            *(
                [
                    "Trained with: the partners the focal's config.json records; held out: "
                    "the other background cells."
                ]
                if trained
                else []
            ),
        ),
        zero_width_note=ZERO_WIDTH_NOTE,
        caption=caption,
        label=label,
        decimals=decimals,
        ci=ci,
        title=f"alem-eval scenario: {focal} by partner split",
    )


def split_table_rows(rows: Sequence[SplitRow]) -> list[dict[str, Any]]:
    """The terminal's split table: percentage points, ``point [lo, hi]`` (``†``: zero
    width or none)."""
    return [
        {
            "mode": r.mode,
            "metric": metric_info(r.metric).label,
            "partners": r.label,
            "cells": r.cells_text,
            "focal - self": fmt_marked(r.diff.scaled(metric_info(r.metric).scale), 2),
            "teams": r.n_teams,
            "worlds": r.n_worlds,
        }
        for r in rows
    ]
