"""Synthetic scored runs with known structure, for the statistics/report tests and benches.

Nothing here pretends to be a real evaluation: rows carry protocol "synthetic" unless told
otherwise, and checkpoint hashes derived from the cell id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from alem_eval.analysis.results import ResultsStore
from alem_eval.analysis.result_keys import ResultKey, build_rows
from alem_eval.analysis.metrics import HEADLINE_METRICS

BUDGETS = ("100M", "1B")
ALGORITHMS = ("ippo-rnn", "mappo-rnn", "hypermarl-rnn", "pqn-vdn-rnn")
DIFFICULTIES = ("easy", "medium", "hard")
_LEVEL = {"easy": 0.45, "medium": 0.30, "hard": 0.15}
_ALGO = {"ippo-rnn": 0.00, "mappo-rnn": 0.03, "hypermarl-rnn": -0.02, "pqn-vdn-rnn": 0.05}
_BUDGET = {"100M": 0.0, "1B": 0.06}


def true_mean(budget: str, algorithm: str, difficulty: str) -> float:
    return _LEVEL[difficulty] + _ALGO.get(algorithm, 0.0) + _BUDGET.get(budget, 0.0)


def synthetic_records(
    budget: str,
    algorithm: str,
    difficulty: str,
    seed: int,
    *,
    num_episodes: int = 20,
    rng_seed: int = 0,
) -> list[dict[str, float]]:
    """Per-episode records of one cell: seed effect + episode noise, clipped to [0, 1]."""
    h = int(
        hashlib.sha256(f"{rng_seed}/{budget}/{algorithm}/{difficulty}/{seed}".encode()).hexdigest()[
            :8
        ],
        16,
    )
    rng = np.random.default_rng(h)
    seed_mean = true_mean(budget, algorithm, difficulty) + rng.normal(0, 0.03)
    out = []
    for _ in range(num_episodes):
        base = float(np.clip(seed_mean + rng.normal(0, 0.05), 0, 1))
        coord = float(np.clip(0.6 * base + rng.normal(0, 0.03), 0, 1))
        rec = {
            "Team/normal_reward_pct_of_max": base,
            "Team/coord_reward_pct_of_max": coord,
            "Team/reward_pct_of_max": (217 * base + 159 * coord) / 376,
            "Team/achievement_pct": float(np.clip(base * 0.9, 0, 1)),
            "Team/normal_achievement_pct": float(np.clip(base * 0.95, 0, 1)),
            "Team/coordination_achievement_pct": float(np.clip(coord * 0.9, 0, 1)),
            "Achievements/collect_wood": float(rng.choice([0.0, 33.3, 66.7, 100.0])),
            "episode_return": float(rng.normal(10, 2)),
            "episode_length": float(rng.integers(100, 10000)),
            "terminated": 1.0,
        }
        out.append(rec)
    return out


def key_for(
    budget,
    algorithm,
    difficulty,
    seed,
    *,
    num_episodes=20,
    protocol="synthetic",
    eval_difficulty=None,
) -> ResultKey:
    cell = f"{budget}/{algorithm}/{difficulty}/seed{seed}"
    return ResultKey(
        cell=cell,
        eval_difficulty=eval_difficulty or difficulty,
        protocol=protocol,
        checkpoint_hash=hashlib.sha256(cell.encode()).hexdigest()[:16],
        config_hash="cfg0",
        env_version="v0.13741-fix-construction-more-metrics",
        num_episodes=num_episodes,
        max_steps=10000,
    )


def fill_store(
    store: ResultsStore,
    *,
    budgets: Sequence[str] = BUDGETS,
    algorithms: Sequence[str] = ALGORITHMS,
    difficulties: Sequence[str] = DIFFICULTIES,
    seeds: Sequence[int] = range(5),
    num_episodes: int = 20,
    skip: Sequence[str] = (),
    protocol: str = "synthetic",
    rng_seed: int = 0,
) -> list[ResultKey]:
    keys = []
    for b in budgets:
        for a in algorithms:
            for d in difficulties:
                for s in seeds:
                    key = key_for(b, a, d, s, num_episodes=num_episodes, protocol=protocol)
                    if any(key.cell.startswith(p) for p in skip):
                        continue
                    recs = synthetic_records(
                        b, a, d, s, num_episodes=num_episodes, rng_seed=rng_seed
                    )
                    store.write(
                        build_rows(key, recs, jax_version="0.4.38"), key, extra={"num_params": 1234}
                    )
                    keys.append(key)
    return keys


def synthetic_frame(**kw) -> pd.DataFrame:
    """The same rows as :func:`fill_store` writes, built in memory."""
    rows = []
    budgets = kw.pop("budgets", BUDGETS)
    algorithms = kw.pop("algorithms", ALGORITHMS)
    difficulties = kw.pop("difficulties", DIFFICULTIES)
    seeds = kw.pop("seeds", range(5))
    num_episodes = kw.pop("num_episodes", 20)
    protocol = kw.pop("protocol", "synthetic")
    for b in budgets:
        for a in algorithms:
            for d in difficulties:
                for s in seeds:
                    key = key_for(b, a, d, s, num_episodes=num_episodes, protocol=protocol)
                    rows += build_rows(
                        key,
                        synthetic_records(b, a, d, s, num_episodes=num_episodes, **kw),
                        jax_version="0.4.38",
                    )
    return pd.DataFrame(rows)


HEADLINE_KEYS = tuple(m.key for m in HEADLINE_METRICS)


# ----------------------------------------------------------------------------------------
# Cross-play: many simulated runs of the pairs scheme with a known gap
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CrossplaySim:
    """X simulated cross-play runs on shared worlds: ``self_play (X, n, E)``, ``cross
    (X, K, E)`` (NaN = a missing value), ``slots (K, S)`` cell indices of the cross-play
    teams, ``truth[runs]``: the gap each ``--runs`` weighting estimates."""

    self_play: np.ndarray
    cross: np.ndarray
    slots: np.ndarray
    truth: dict[str, float]


def crossplay_sim(
    experiments: int,
    *,
    gap: float,
    num_cells: int = 4,
    num_worlds: int = 20,
    missing: float = 0.0,
    seed: int = 0,
) -> CrossplaySim:
    """Fixed per generator (``seed``): each cell's self-play mean and world sensitivity,
    each cross-play team's true gap (``gap`` on average over teams, team to team ±0.03),
    world sensitivity and missing rate (uniform in [0, 2 missing]; self-play misses
    ``missing / 2``). Drawn per experiment: the worlds. World i has a difficulty shared by
    every team (each team weighs it differently) and a per-cell luck that enters the cell's
    self-play fully and every mixed team through its slots at half strength; every
    (team, world) value adds its own episode noise; values go missing independently of
    everything. So worlds are the one source of variance the teams share, and the truth is
    known: ``truth["teams"]`` = the mean of the teams' true gaps; ``truth["episodes"]`` =
    their mean weighted by each team's chance of a finite (team, world) value."""
    from types import SimpleNamespace

    from alem_eval.scoring.teams import compositions

    rng = np.random.default_rng(seed)
    cells = [SimpleNamespace(id=str(c), algorithm="sim") for c in range(num_cells)]
    slots = np.array([[int(c) for c in t.slots] for t in compositions(cells, "pairs")[num_cells:]])
    k = len(slots)
    mu = rng.uniform(0.2, 0.6, num_cells)
    sens = rng.uniform(0.5, 1.5, num_cells)
    team_gap = gap + rng.normal(0.0, 0.03, k)
    team_gap += gap - team_gap.mean()  # the teams' mean gap is exactly `gap`
    team_mu = mu[slots].mean(axis=1) - team_gap
    team_sens = sens[slots].mean(axis=1) + rng.uniform(-0.3, 0.6, k)
    team_missing = rng.uniform(0.0, 2 * missing, k)
    finite = (1 - team_missing) * np.prod(
        [np.where((slots == c).any(axis=1), 1 - missing / 2, 1.0) for c in range(num_cells)],
        axis=0,
    )  # P(a team's value and every member's self-play are finite on a world)

    x, e = experiments, num_worlds
    world = rng.normal(0.0, 0.08, (x, 1, e))
    luck = rng.normal(0.0, 0.04, (x, num_cells, e))
    self_play = mu[:, None] + sens[:, None] * world + luck + rng.normal(0, 0.05, luck.shape)
    cross = (
        team_mu[:, None]
        + team_sens[:, None] * world
        + 0.5 * luck[:, slots].mean(axis=2)
        + rng.normal(0.0, 0.05, (x, k, e))
    )
    self_play[rng.random(self_play.shape) < missing / 2] = np.nan
    cross[rng.random(cross.shape) < team_missing[:, None]] = np.nan
    truth = {
        "teams": float(team_gap.mean()),
        "episodes": float((finite * team_gap).sum() / finite.sum()),
    }
    return CrossplaySim(self_play, cross, slots, truth)


# ----------------------------------------------------------------------------------------
# Scenario and cross-play results without playing (the tables' and units' tests)
# ----------------------------------------------------------------------------------------
SIM_CELLS = ("1B/ippo-rnn/hard/seed0", "1B/ippo-rnn/hard/seed1", "1B/mappo-rnn/hard/seed0")


def synthetic_team_scores(teams, num_worlds: int, *, seed: int = 0, constant: float | None = None):
    """``{team: TeamScore}`` of made-up episodes: Base / Coord / Total fractions around
    0.01-0.05 (the released agents' level), or all ``constant``."""
    from alem_eval.analysis.metrics import BASE, COORD, TOTAL
    from alem_eval.scoring.play import TeamScore

    rng = np.random.default_rng(seed)
    out = {}
    for t in dict.fromkeys(teams):
        eps = []
        for _ in range(num_worlds):
            base = float(rng.uniform(0.01, 0.05)) if constant is None else constant
            coord = float(rng.uniform(0.0, 0.02)) if constant is None else constant
            eps.append(
                {
                    BASE: base,
                    COORD: coord,
                    TOTAL: (217 * base + 159 * coord) / 376,
                    "episode_return": float(rng.normal(3, 1)),
                    "episode_length": float(rng.integers(50, 100)),
                }
            )
        key = hashlib.sha256("/".join(t.slots).encode()).hexdigest()[:16]
        out[t] = TeamScore(t, key, tuple(eps), False)
    return out


def synthetic_scenario(
    num_worlds: int = 4,
    *,
    constant: float | None = None,
    reps: int = 200,
    cells: Sequence[str] = SIM_CELLS,
    cell_splits: dict[str, str] | None = None,
    trained_with: Sequence[str] | None = None,
    scores=None,
):
    """A :class:`~alem_eval.scoring.scenario.ScenarioResult` over ``cells`` (default
    :data:`SIM_CELLS`: two populations), both modes, with :func:`synthetic_team_scores`
    (or ``scores(teams) -> {team: TeamScore}``); ``cell_splits`` (cell id -> split) and
    ``trained_with`` (the focal's recorded partners) give it a split table."""
    from alem_eval.scoring.crossplay import GAP_METRICS
    from alem_eval.scoring.scenario import (
        FOCAL_PREFIX,
        MODES,
        ScenarioResult,
        scenario_rows,
        scenario_teams,
    )
    from alem_eval.scoring.scenario_splits import split_rows

    identity = "sim@0123abcd"
    teams = scenario_teams(list(cells), MODES, FOCAL_PREFIX + identity)
    if scores is None:
        scores = synthetic_team_scores([t.team for t in teams], num_worlds, constant=constant)
    else:
        scores = scores(teams)
    boot = {"reps": reps, "seed": 0, "confidence": 0.95}
    splits = dict(cell_splits or {})
    trained = None if trained_with is None else tuple(trained_with)
    return ScenarioResult(
        focal="sim",
        identity=identity,
        cells=tuple(cells),
        modes=MODES,
        eval_difficulty="hard",
        num_episodes=num_worlds,
        max_steps=100,
        teams=tuple(teams),
        scores=scores,
        rows=tuple(scenario_rows(teams, scores, **boot)),
        bootstrap={**boot, "method": "expanded percentile bootstrap over the worlds"},
        store=None,
        cell_splits=splits,
        trained_with=trained,
        split_rows=tuple(split_rows(teams, scores, splits, trained, metrics=GAP_METRICS, **boot)),
    )


def synthetic_crossplay(num_worlds: int = 4, *, constant: float | None = None, reps: int = 200):
    """A :class:`~alem_eval.scoring.crossplay.CrossplayResult` of the pairs scheme over
    :data:`SIM_CELLS` with :func:`synthetic_team_scores`."""
    from types import SimpleNamespace

    from alem_eval.analysis.crossplay_stats import METHOD, crossplay_gap
    from alem_eval.scoring.crossplay import (
        GAP_METRICS,
        MATRIX_METRIC,
        CrossplayResult,
        pair_matrix,
    )
    from alem_eval.scoring.teams import compositions

    cells = [SimpleNamespace(id=c, algorithm=c.split("/")[1]) for c in SIM_CELLS]
    teams = compositions(cells, "pairs")
    scores = synthetic_team_scores(teams, num_worlds, constant=constant)
    per = {m: {t: s.values(m) for t, s in scores.items()} for m in GAP_METRICS}
    boot = {"reps": reps, "seed": 0, "confidence": 0.95}
    return CrossplayResult(
        cells=SIM_CELLS,
        eval_difficulty="hard",
        scheme="pairs",
        num_episodes=num_worlds,
        max_steps=100,
        teams=tuple(scores.values()),
        matrix=pair_matrix(SIM_CELLS, per[MATRIX_METRIC]),
        gaps=tuple(crossplay_gap(per[m], metric=m, **boot) for m in GAP_METRICS),
        bootstrap={**boot, "runs": "teams", "method": METHOD},
        store=None,
    )
