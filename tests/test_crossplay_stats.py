"""The cross-play gap's world bootstrap (numpy only, no JAX env): its coverage on simulated
runs with a known gap, against a replicate-by-replicate loop, and its edge cases."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import scipy.stats

from alem_eval.scoring.teams import Team, compositions
from alem_eval.analysis.crossplay_stats import (
    RUNS_MODES,
    crossplay_gap,
    gap_intervals,
    slot_reference,
    world_counts,
)
from alem_eval.core.errors import EvaluationError
from alem_eval.hub.manifest import Cell
from alem_eval.analysis.results import ResultsWarning

from .synthetic import crossplay_sim

CELLS = [Cell.from_id(f"1B/ippo-rnn/hard/seed{s}") for s in range(3)]


def _scores(sim, x: int = 0) -> dict[tuple[str, ...], np.ndarray]:
    """Experiment ``x`` of a simulation as ``{slots: per-episode values}``."""
    n = sim.self_play.shape[1]
    scores = {(str(c),) * 3: sim.self_play[x, c] for c in range(n)}
    for k, slots in enumerate(sim.slots):
        scores[tuple(str(c) for c in slots)] = sim.cross[x, k]
    return scores


# ----------------------------------------------------------------------------------------
# Coverage
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("runs", RUNS_MODES)
def test_the_95_percent_interval_covers_the_true_gap_in_93_to_97_percent_of_runs(runs):
    """2,000 simulated cross-play runs per gap (4 cells, pairs, 20 shared worlds, values
    missing at random at rates that differ by team), one vectorised call each."""
    for gap, seed in ((0.0, 1), (0.05, 2)):
        sim = crossplay_sim(2000, gap=gap, missing=0.1, seed=seed)
        est = gap_intervals(
            slot_reference(sim.self_play, sim.slots), sim.cross, runs=runs, reps=1000, seed=0
        )
        truth = sim.truth[runs]
        covered = np.mean((est.lo <= truth) & (truth <= est.hi))
        assert 0.93 <= covered <= 0.97, (gap, covered)
    # The weightings estimate different things when values go missing unevenly.
    assert sim.truth["teams"] != pytest.approx(sim.truth["episodes"], abs=1e-6)


# ----------------------------------------------------------------------------------------
# What a replicate is
# ----------------------------------------------------------------------------------------
def _expanded_percentiles(samples, n: int, confidence: float = 0.95):
    z = np.sqrt(n / (n - 1)) * scipy.stats.t.ppf(0.5 + confidence / 2, n - 1)
    a = scipy.stats.norm.cdf(-z)
    return np.percentile(samples, [100 * a, 100 * (1 - a)])


@pytest.mark.parametrize("runs", RUNS_MODES)
def test_a_replicate_draws_one_multiset_of_worlds_for_every_team_and_the_self_play(runs):
    sim = crossplay_sim(1, gap=0.05, num_cells=3, num_worlds=9, missing=0.15, seed=3)
    scores = _scores(sim)
    reps = 300
    est = crossplay_gap(scores, runs=runs, reps=reps, seed=4)
    counts = world_counts(9, reps, 4, (est.metric,))
    assert counts.shape == (reps, 9) and (counts.sum(axis=1) == 9).all()

    # Each team's self reference and score on each world, in plain Python.
    pairs = [
        [(sum(scores[(c,) * 3][i] for c in slots) / 3, float(x[i])) for i in range(9)]
        for slots, x in scores.items()
        if len(set(slots)) > 1
    ]

    def gap(worlds) -> float:
        """The gap on a list of world indices, one team and one episode at a time."""
        per_team = [
            [ref - x for ref, x in (team[i] for i in worlds) if math.isfinite(ref - x)]
            for team in pairs
        ]
        if runs == "teams":
            return float(np.mean([np.mean(d) for d in per_team if d]))
        return float(np.mean([v for d in per_team for v in d]))

    samples = [gap(np.repeat(np.arange(9), c)) for c in counts]
    lo, hi = _expanded_percentiles(samples, 9)
    assert est.gap.point == pytest.approx(gap(range(9)), abs=1e-12)
    assert est.self_score - est.cross == pytest.approx(est.gap.point, abs=1e-12)
    assert (est.gap.lo, est.gap.hi) == pytest.approx((lo, hi), abs=1e-12)
    assert est.n_teams == 3 * 2 * 3 and est.n_worlds == 9
    finite = np.isfinite(slot_reference(sim.self_play, sim.slots)[0]) & np.isfinite(sim.cross[0])
    assert est.n_runs == (est.n_teams if runs == "teams" else finite.sum())


@pytest.mark.parametrize("runs", RUNS_MODES)
def test_differences_between_the_fixed_teams_are_not_noise(runs):
    """Noisy self-play on every world, each team exactly its own gap below its reference:
    every world resample gives the same gap (the old per-anchor resampling of teams gave
    an interval as wide as the teams' spread)."""
    rng = np.random.default_rng(5)
    teams = compositions(CELLS, "pairs")
    sp = {t.slots[0]: rng.uniform(0.2, 0.6, 12) for t in teams if t.is_self_play}
    scores = {t: sp[t.slots[0]] for t in teams if t.is_self_play}
    for k, t in enumerate(t for t in teams if not t.is_self_play):
        scores[t] = np.mean([sp[c] for c in t.slots], axis=0) - 0.01 * k
    est = crossplay_gap(scores, runs=runs, reps=500, seed=0)
    assert est.gap.point == pytest.approx(0.01 * np.mean(range(18)), abs=1e-12)
    assert est.gap.lo == pytest.approx(est.gap.point, abs=1e-12)
    assert est.gap.hi == pytest.approx(est.gap.point, abs=1e-12)


def test_the_interval_is_seeded_and_the_runs_modes_agree_without_missing_values():
    scores = _scores(crossplay_sim(1, gap=0.02, seed=6))
    est = crossplay_gap(scores, reps=2000, seed=0)
    assert crossplay_gap(scores, reps=2000, seed=0) == est
    assert crossplay_gap(scores, reps=2000, seed=1).gap != est.gap
    assert est.gap.lo < est.gap.point < est.gap.hi
    episodes = crossplay_gap(scores, runs="episodes", reps=2000, seed=0).gap
    assert episodes.as_list() == pytest.approx(est.gap.as_list(), abs=1e-12)


# ----------------------------------------------------------------------------------------
# Edge cases
# ----------------------------------------------------------------------------------------
def test_one_world_gives_a_gap_without_an_interval_and_a_warning():
    sim = crossplay_sim(1, gap=0.05, num_cells=2, num_worlds=1, seed=7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = crossplay_gap(_scores(sim), reps=100)
    assert np.isfinite(est.gap.point) and np.isnan(est.gap.lo) and np.isnan(est.gap.hi)
    doc = est.as_json()
    assert doc["lo"] is None and doc["hi"] is None and doc["n_worlds"] == 1
    assert any(
        issubclass(w.category, ResultsWarning) and "no interval" in str(w.message) for w in caught
    )


def test_gap_needs_every_members_self_play():
    scores = {Team(t.slots): np.full(4, 0.3) for t in compositions(CELLS, "pairs")}
    del scores[Team((CELLS[0].id,) * 3)]
    with pytest.raises(EvaluationError, match="has no self-play scores"):
        crossplay_gap(scores, reps=100)


def test_teams_need_the_same_worlds():
    scores = {Team(t.slots): np.full(4, 0.3) for t in compositions(CELLS[:2], "pairs")}
    scores[Team((CELLS[0].id,) * 2 + (CELLS[1].id,))] = np.full(5, 0.2)
    with pytest.raises(EvaluationError, match="4 or 5 episodes; episode i is world i"):
        crossplay_gap(scores, reps=100)
