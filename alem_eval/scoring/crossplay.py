"""Cross-play: checkpoints trained apart, put in one team, against their own self-play.

The teams (:class:`~alem_eval.scoring.teams.Team`) and the schemes that draw them
(:func:`~alem_eval.scoring.teams.compositions`) are :mod:`alem_eval.scoring.teams`'.

:func:`run_crossplay` scores every team in ONE :func:`alem_eval.evaluate.rollout.run_teams` call
(protocol ``fast``: episode i is world ``PRNGKey(9999 + i)`` for every team, so teams
are compared on the same worlds) through :func:`alem_eval.scoring.play.play_teams`: the
teams are rows of the results store under their composition's key, which a rerun reads
back instead of recomputing and which ``report`` / ``leaderboard`` never read.

The statistics (no JAX):

* the pair matrix (:func:`pair_matrix`): ``[A, B]`` = mean of a metric over the teams
  "A in S - 1 slots + B in one" (every position) and their episodes; the diagonal is
  self-play;
* the cross-play gap (:func:`~alem_eval.analysis.crossplay_stats.crossplay_gap`) = self - cross.
  A cross-play team T's self reference is the slot-weighted mean of its members' self-play
  (AAB: (2 SP_A + SP_B) / 3, episode by episode), so the gap is what the team loses by
  mixing beyond what its members score on their own; the estimate weighs every cross-play
  team the same (runs = ``teams``) or every (team, episode) (runs = ``episodes``). Its CI
  is a seeded bootstrap over the worlds: a replicate draws one multiset of episode indices
  and applies it to every team and to the self-play references alike
  (:mod:`alem_eval.analysis.crossplay_stats`).

The outputs (``crossplay.json``, ``teams.csv``, the heatmap) are
:mod:`alem_eval.scoring.crossplay_outputs`'.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from alem_eval.analysis.crossplay_stats import (
    DEFAULT_CONFIDENCE,
    DEFAULT_REPS,
    METHOD,
    RUNS_MODES as RUNS_MODES,  # re-exported: the command's --runs choices
    GapEstimate,
    check_runs,
    crossplay_gap,
)
from alem_eval.analysis.digests import Digests, teams_digests
from alem_eval.analysis.metrics import TOTAL, metric_info, units_fields
from alem_eval.core.tables import PaperTable, PaperTables, fmt_marked, fmt_number
from alem_eval.scoring.play import TEAM_METRICS, TeamScore, play_teams, resolve_worlds
from alem_eval.scoring.teams import (
    DEFAULT_MAX_TEAMS,
    PROTOCOL,
    Team,
    check_int,
    check_scheme,
    compositions,
)

if TYPE_CHECKING:
    from alem_eval.analysis.results import ResultsStore

GAP_METRICS: tuple[str, ...] = TEAM_METRICS  # Total%, Base%, Coord%
MATRIX_METRIC = TOTAL


# ----------------------------------------------------------------------------------------
# Statistics (numpy only)
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PairMatrix:
    """``values[i, j]``: mean ``metric`` of the teams "cells[i] in all slots but one,
    cells[j] in the other" over every position and episode; the diagonal is self-play;
    NaN where no such team was scored. Rows: the partner A, columns: the newcomer B."""

    metric: str
    cells: tuple[str, ...]
    values: np.ndarray  # (n, n)

    def as_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "label": metric_info(self.metric).name,
            "rows": list(self.cells),
            "cols": list(self.cells),
            "values": [
                [None if not math.isfinite(v) else float(v) for v in row] for row in self.values
            ],
        }


def pair_matrix(
    cells: Sequence[str],
    scores: Mapping[Team, Sequence[float] | np.ndarray],
    metric: str = MATRIX_METRIC,
) -> PairMatrix:
    """The pair matrix of ``metric`` from ``{team: per-episode values}``."""
    index = {c: i for i, c in enumerate(cells)}
    pooled: dict[tuple[int, int], list[float]] = defaultdict(list)
    for team, v in scores.items():
        if team.is_self_play:
            a = b = team.slots[0]
        elif team.pair is not None:
            a, b, _ = team.pair
        else:
            continue
        if a in index and b in index:
            pooled[(index[a], index[b])].extend(float(x) for x in v)
    values = np.full((len(cells), len(cells)), np.nan)
    for (i, j), v in pooled.items():
        finite = [x for x in v if math.isfinite(x)]
        if finite:
            values[i, j] = float(np.mean(finite))
    return PairMatrix(metric, tuple(cells), values)


# ----------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CrossplayResult(PaperTables):
    """Everything ``alem-eval crossplay`` reports (values are raw fractions)."""

    cells: tuple[str, ...]
    eval_difficulty: str
    scheme: str
    num_episodes: int
    max_steps: int
    teams: tuple[TeamScore, ...]
    matrix: PairMatrix
    gaps: tuple[GapEstimate, ...]
    bootstrap: Mapping[str, Any]  # reps, seed, confidence, runs, method
    store: Path | None
    digests: Digests | None = None  # of the teams' records in the store (None: no store)

    @property
    def teams_scored(self) -> int:
        """Teams computed by this run (the rest were read back from the store)."""
        return sum(not t.reused for t in self.teams)

    @property
    def teams_reused(self) -> int:
        return sum(t.reused for t in self.teams)

    def as_json(self) -> dict[str, Any]:
        return {
            **units_fields(),
            "eval_difficulty": self.eval_difficulty,
            "protocol": PROTOCOL,
            "scheme": self.scheme,
            "num_episodes": self.num_episodes,
            "max_steps": self.max_steps,
            "cells": list(self.cells),
            "teams_total": len(self.teams),
            "teams_scored": self.teams_scored,
            "teams_reused": self.teams_reused,
            "pair_matrix": self.matrix.as_json(),
            "gaps": [g.as_json() for g in self.gaps],
            "bootstrap": dict(self.bootstrap),
            "teams": [t.row() for t in self.teams],
            "store": str(self.store) if self.store is not None else None,
            "digests": self.digests.as_json() if self.digests is not None else None,
        }

    def team_rows(self) -> list[dict[str, Any]]:
        return [t.row() for t in self.teams]

    def gap_rows(self) -> list[dict[str, Any]]:
        """The human table: self, cross and gap [CI] in percent."""
        rows = []
        for g in self.gaps:
            info = metric_info(g.metric)
            k = info.scale
            gap = g.gap.scaled(k)
            rows.append(
                {
                    "metric": info.label,
                    "self-play": fmt_number(g.self_score * k, 2),
                    "cross-play": fmt_number(g.cross * k, 2),
                    "gap (self - cross)": fmt_marked(gap, 2),
                    "teams": g.n_teams,
                    "runs": g.n_runs,
                    "worlds": g.n_worlds,
                }
            )
        return rows

    def paper_table(self, table: str = "gap", **options: Any) -> PaperTable:
        """The gap (``table="gap"``) or pair-matrix (``"matrix"``) table for a paper, in
        percent (:func:`~alem_eval.scoring.crossplay_outputs.paper_table`: ``options``)."""
        from alem_eval.scoring.crossplay_outputs import paper_table

        return paper_table(self, table, **options)

    def matrix_rows(self) -> list[dict[str, Any]]:
        """The pair matrix for a human table (percent), row = partner A."""
        k = metric_info(self.matrix.metric).scale
        return [
            {
                "A (partner) \\ B (newcomer)": a,
                **{
                    b: (None if not math.isfinite(v) else round(v * k, 2))
                    for b, v in zip(self.cells, row, strict=True)
                },
            }
            for a, row in zip(self.cells, self.matrix.values, strict=True)
        ]


def run_crossplay(
    source,
    cells: Sequence[Any],
    *,
    scheme: str = "pairs",
    eval_difficulty: str | None = None,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    max_teams: int = DEFAULT_MAX_TEAMS,
    seed: int = 0,
    reps: int = DEFAULT_REPS,
    runs: str = "teams",
    confidence: float = DEFAULT_CONFIDENCE,
    store: ResultsStore | None = None,
    on_env_mismatch: str = "error",
    batch: int | None = None,
    record_dir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    on_episodes: Callable[[Any], None] | None = None,
) -> CrossplayResult:
    """Score the ``scheme``'s teams over ``cells`` (from ``source``) in one compiled rollout
    and compare cross-play with self-play.

    ``eval_difficulty`` defaults to the cells' training difficulty (they must share it).
    Teams already in ``store`` under the same provenance are read back, the others are
    scored in one :func:`~alem_eval.evaluate.rollout.run_teams` call, each written to the store as
    soon as its last episode ends (a run killed part-way keeps every team that finished),
    before any statistic is computed. Raises :class:`~alem_eval.core.errors.AlemEvalError` s,
    one line each, naming the cell: cells that cannot be resolved or loaded, cells that
    need different env configurations, bad options. ``batch``: the evaluator's batch
    slots (None: its default layout); ``record_dir``: every played step is recorded there
    (a dataset of the teams' episodes, as ``score --record`` makes one).

    Progress: ``on_progress(message)`` a line per step (the teams to score, the teams
    played: :func:`~alem_eval.scoring.play.play_teams`); ``on_episodes(RolloutProgress)``
    as the rollout's episodes finish.
    """
    check_scheme(scheme)
    check_runs(runs)
    check_int("--reps", reps, 1)
    cells = list({c.id: c for c in cells}.values())
    w = resolve_worlds(source, cells, eval_difficulty, num_episodes, max_steps, on_env_mismatch)
    teams = compositions(cells, scheme, max_teams, seed, num_slots=w.num_slots)
    played = play_teams(
        source,
        cells,
        teams,
        w,
        store=store,
        batch=batch,
        record_dir=record_dir,
        on_progress=on_progress,
        on_episodes=on_episodes,
    )
    scores = tuple(played.scores.values())
    per_metric = {m: {s.team: s.values(m) for s in scores} for m in GAP_METRICS}
    gaps = tuple(
        crossplay_gap(
            per_metric[m], metric=m, runs=runs, reps=reps, seed=seed, confidence=confidence
        )
        for m in GAP_METRICS
    )
    ids = tuple(c.id for c in cells)
    bootstrap = {
        "reps": reps,
        "seed": seed,
        "confidence": confidence,
        "runs": runs,
        "method": METHOD,
    }
    return CrossplayResult(
        cells=ids,
        eval_difficulty=w.eval_difficulty,
        scheme=scheme,
        num_episodes=w.num_episodes,
        max_steps=w.max_steps,
        teams=scores,
        matrix=pair_matrix(ids, per_metric[MATRIX_METRIC]),
        gaps=gaps,
        bootstrap=bootstrap,
        store=store.root if store is not None else None,
        digests=teams_digests(
            store,
            scores,
            {"command": "crossplay", "scheme": scheme, "cells": ids, "bootstrap": bootstrap},
        ),
    )
