"""Cross-play: checkpoints trained apart, put in one team, against their own self-play.

The teams (:class:`~alem_eval.scoring.teams.Team`) and the schemes that draw them
(:func:`~alem_eval.scoring.teams.compositions`) are :mod:`alem_eval.scoring.teams`'.

:func:`run_crossplay` scores every team in ONE :func:`alem_eval.evaluate.rollout.run_teams` call
(protocol ``fast``: episode i is world ``PRNGKey(9999 + i)`` for every team, so teams
are compared on the same worlds) and keeps the rows in a cross-play store of its own
(:class:`~alem_eval.scoring.crossplay_store.CrossplayStore`, ``<results>/crossplay/``),
which a rerun reads back instead of recomputing and which ``report`` / ``leaderboard``
never read.

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
from typing import Any

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
from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.analysis.metrics import BASE, COORD, TOTAL, metric_info
from alem_eval.scoring.crossplay_store import CellKey, CrossplayStore, store_rows, team_key
from alem_eval.scoring.teams import (
    DEFAULT_MAX_TEAMS,
    PROTOCOL,
    Team,
    _check_int,
    _check_scheme,
    compositions,
)

GAP_METRICS: tuple[str, ...] = (TOTAL, BASE, COORD)  # Total%, Base%, Coord%
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
            "label": metric_info(self.metric).label,
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
class TeamScore:
    """One team's per-episode records (every ``run_teams`` key verbatim)."""

    team: Team
    key: str
    episodes: tuple[Mapping[str, float], ...]
    reused: bool

    def values(self, metric: str) -> np.ndarray:
        """``(episodes,)``; NaN where an episode lacks the metric."""
        return np.array([ep.get(metric, np.nan) for ep in self.episodes], dtype=float)

    def mean(self, metric: str) -> float | None:
        v = self.values(metric)
        v = v[np.isfinite(v)]
        return float(v.mean()) if len(v) else None

    def row(self) -> dict[str, Any]:
        """Flat per-team row: slots, shape, anchor, reused, episodes, metric means."""
        return {
            "team_key": self.key,
            **{f"slot{s}": c for s, c in enumerate(self.team.slots)},
            "shape": self.team.shape,
            "anchor": self.team.anchor,
            "reused": self.reused,
            "episodes": len(self.episodes),
            **{k: self.mean(k) for k in (*GAP_METRICS, "episode_return", "episode_length")},
        }


@dataclass(frozen=True)
class CrossplayResult:
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

    @property
    def teams_scored(self) -> int:
        """Teams computed by this run (the rest were read back from the store)."""
        return sum(not t.reused for t in self.teams)

    @property
    def teams_reused(self) -> int:
        return sum(t.reused for t in self.teams)

    def as_json(self) -> dict[str, Any]:
        return {
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
                    "self-play": f"{g.self_score * k:.2f}",
                    "cross-play": f"{g.cross * k:.2f}",
                    "gap (self - cross)": gap.fmt(2)
                    if math.isfinite(gap.lo)
                    else f"{gap.point:.2f} [no CI]",
                    "teams": g.n_teams,
                    "runs": g.n_runs,
                    "worlds": g.n_worlds,
                }
            )
        return rows

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
    store: CrossplayStore | None = None,
    on_env_mismatch: str = "error",
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
    need different env configurations, bad options.

    Progress: ``on_progress(message)`` a line per step (the teams to score, each team
    stored); ``on_episodes(RolloutProgress)`` as the rollout's episodes finish.
    """
    from alem_eval.evaluate.rollout import run_teams

    note = on_progress or (lambda _m: None)
    _check_scheme(scheme)
    check_runs(runs)
    _check_int("--reps", reps, 1)
    cells = list({c.id: c for c in cells}.values())
    w = resolve_worlds(source, cells, eval_difficulty, num_episodes, max_steps, on_env_mismatch)
    resolved, statics, eval_difficulty = w.resolved, w.statics, w.eval_difficulty
    num_episodes, max_steps = w.num_episodes, w.max_steps
    teams = compositions(cells, scheme, max_teams, seed, num_slots=statics[cells[0].id].num_agents)

    cell_keys = {c.id: _cell_key(c, *resolved[c.id][:2]) for c in cells}
    keys = {
        t: team_key(
            t,
            cell_keys,
            eval_difficulty=eval_difficulty,
            num_episodes=num_episodes,
            max_steps=max_steps,
        )
        for t in teams
    }
    stored = store.load(eval_difficulty) if store is not None else {}
    todo = [t for t in teams if keys[t] not in stored]
    note(
        f"{len(teams)} teams on {eval_difficulty}: {len(teams) - len(todo)} read back from "
        f"the cross-play store, {len(todo)} to score"
    )

    def keep(team: Team, episodes: Sequence[Mapping[str, float]]) -> None:
        """A team whose episodes all ended: into the store at once, on its own."""
        if store is None:
            return
        rows = store_rows(
            team,
            keys[team],
            episodes,
            eval_difficulty=eval_difficulty,
            num_episodes=num_episodes,
            max_steps=max_steps,
            env_version=cell_keys[team.slots[0]].env_version,
        )
        note(f"scored {team.label()}; stored in {store.write(rows, eval_difficulty)}")

    fresh = (
        _score(
            source,
            cells,
            todo,
            run_teams,
            keep,
            eval_difficulty=eval_difficulty,
            num_episodes=num_episodes,
            max_steps=max_steps,
            on_episodes=on_episodes,
        )
        if todo
        else {}
    )
    scores = tuple(
        TeamScore(
            t, keys[t], tuple(fresh[t] if t in fresh else stored[keys[t]]), reused=t not in fresh
        )
        for t in teams
    )
    per_metric = {m: {s.team: s.values(m) for s in scores} for m in GAP_METRICS}
    gaps = tuple(
        crossplay_gap(
            per_metric[m], metric=m, runs=runs, reps=reps, seed=seed, confidence=confidence
        )
        for m in GAP_METRICS
    )
    ids = tuple(c.id for c in cells)
    return CrossplayResult(
        cells=ids,
        eval_difficulty=eval_difficulty,
        scheme=scheme,
        num_episodes=num_episodes,
        max_steps=max_steps,
        teams=scores,
        matrix=pair_matrix(ids, per_metric[MATRIX_METRIC]),
        gaps=gaps,
        bootstrap={
            "reps": reps,
            "seed": seed,
            "confidence": confidence,
            "runs": runs,
            "method": METHOD,
        },
        store=store.root if store is not None else None,
    )


@dataclass(frozen=True)
class Worlds:
    """Where a way of playing over ``cells`` plays: each cell resolved (its directory,
    config, manifest entry), its eval env, the eval difficulty and the episode settings."""

    resolved: dict[str, Any]
    statics: dict[str, Any]
    eval_difficulty: str
    num_episodes: int
    max_steps: int


def resolve_worlds(
    source,
    cells: Sequence[Any],
    eval_difficulty: str | None,
    num_episodes: int | None,
    max_steps: int | None,
    on_env_mismatch: str,
) -> Worlds:
    """Resolve ``cells`` (distinct) and check that they play in one world with these
    settings (the cells' shared difficulty unless ``eval_difficulty``; the fast protocol's
    episodes and cap unless given): one-line errors naming the cell otherwise."""
    from alem_eval.evaluate.settings import (
        FAST_MAX_STEPS,
        FAST_NUM_EPISODES,
        check_env_version,
        eval_statics,
        validate_request,
    )
    from alem_eval.model.loader import resolve_cell

    resolved = {c.id: _resolve(source, c, resolve_cell) for c in cells}
    eval_difficulty = eval_difficulty or _shared_difficulty(cells, resolved)
    validate_request(PROTOCOL, eval_difficulty, num_episodes, max_steps)
    for c in cells:
        check_env_version(resolved[c.id][1], on_mismatch=on_env_mismatch, where=c.id)
    statics = {c.id: eval_statics(resolved[c.id][1]) for c in cells}
    _check_same_world(cells, statics)
    return Worlds(
        resolved,
        statics,
        eval_difficulty,
        num_episodes or FAST_NUM_EPISODES,
        max_steps or FAST_MAX_STEPS,
    )


def _resolve(source, cell, resolve_cell) -> tuple[Path, Any, Any]:
    """``(cell_dir, cfg, spec)`` of a cell; errors name the cell."""
    from alem_eval.core.errors import AlemEvalError, ConfigError

    cell_dir = source.local_dir(cell)
    try:
        cfg, spec = resolve_cell(
            cell_dir, algorithm=cell.algorithm, difficulty=cell.difficulty, seed=cell.seed
        )
    except AlemEvalError as exc:
        if cell.id in str(exc):
            raise
        raise ConfigError(f"{cell.id}: {exc}") from exc
    return cell_dir, cfg, spec


def _shared_difficulty(cells, resolved) -> str:
    found = {c.id: resolved[c.id][1].env.training_difficulty for c in cells}
    names = sorted(set(found.values()))
    if len(names) > 1:
        raise UsageError(
            f"the selected cells were trained on different difficulties "
            f"({', '.join(names)}); pass --eval-difficulty to play them together on one "
            "difficulty's worlds, or --difficulty to keep the cells of one"
        )
    return names[0]


def _check_same_world(cells, statics) -> None:
    first = cells[0]
    for c in cells[1:]:
        a, b = statics[first.id].world, statics[c.id].world
        if a != b:
            fields = [
                f
                for f in (
                    "env_name",
                    "num_agents",
                    "num_comm_channels",
                    "shared_reward",
                    "scale_base_difficulty",
                )
                if getattr(a, f) != getattr(b, f)
            ]
            detail = ", ".join(f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in fields)
            raise EvaluationError(
                f"{first.id} and {c.id} need different env configurations "
                f"({detail}); they cannot play in one team"
            )


def _cell_key(cell, cell_dir: Path, cfg) -> CellKey:
    from alem_eval.model.checkpoint import checkpoint_hash
    from alem_eval.model.loader import cell_checkpoint_dir

    return CellKey(
        cell.id, checkpoint_hash(cell_checkpoint_dir(cell_dir)), cfg.config_hash, cfg.env_version
    )


def load_team_cells(source, cells, teams) -> tuple[list[Any], dict[str, int]]:
    """The policies of the ``cells`` some team uses (:func:`alem_eval.model.loader.load_cell`,
    in ``cells``' order) and each one's index among them, by cell id."""
    from alem_eval.model.loader import load_cell

    used = [c for c in cells if any(c.id in t.slots for t in teams)]
    loaded = [
        load_cell(
            source.local_dir(c),
            algorithm=c.algorithm,
            difficulty=c.difficulty,
            seed=c.seed,
            policy_only=True,
            where=c.id,
        )
        for c in used
    ]
    index = {c.id: i for i, c in enumerate(used)}
    return loaded, index


def _score(
    source,
    cells,
    teams: Sequence[Team],
    run_teams,
    on_team: Callable[[Team, list[dict[str, float]]], None],
    *,
    eval_difficulty: str,
    num_episodes: int,
    max_steps: int,
    on_episodes: Callable[[Any], None] | None = None,
) -> dict[Team, list[dict[str, float]]]:
    """Load the cells the teams use and score every team in one ``run_teams`` call;
    ``on_team(team, records)`` as each team's last episode ends."""
    loaded, index = load_team_cells(source, cells, teams)
    result = run_teams(
        [lc.cfg for lc in loaded],
        [lc.weights for lc in loaded],
        [tuple(index[c] for c in t.slots) for t in teams],
        protocol=PROTOCOL,
        eval_difficulty=eval_difficulty,
        num_episodes=num_episodes,
        max_steps=max_steps,
        on_env_mismatch="ignore",  # checked per cell
        on_team=lambda i, records: on_team(teams[i], records),
        on_progress=on_episodes,
    )
    return {t: list(recs) for t, recs in zip(teams, result.records, strict=True)}
