"""Aggregation: rliable definitions, the seeded stratified bootstrap, analyses, the metric
registry."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
from rliable import library as rly
from rliable import metrics as rlm

from alem_eval.analysis import aggregate as A
from alem_eval.analysis import bootstrap as B
from alem_eval.analysis import metrics as M
from alem_eval.analysis.aggregate import Group, analyze, run_scores, summarize
from alem_eval.analysis.bootstrap import AGGREGATES, BootstrapSettings, StratifiedBootstrap
from alem_eval.core.errors import UsageError

from .synthetic import synthetic_frame, true_mean

TOTAL = "Team/reward_pct_of_max"


def _bs(reps=2000, seed=0, **kw) -> StratifiedBootstrap:
    return StratifiedBootstrap(BootstrapSettings(reps=reps, seed=seed, **kw))


# -- exact aggregates ---------------------------------------------------------------------
def test_iqm_of_a_known_array():
    x = np.arange(1.0, 9.0)[:, None]  # 8 runs: trim 2 each side -> mean(3, 4, 5, 6)
    assert B.aggregate_iqm(x) == 4.5
    x5 = np.array([[10.0], [0.0], [3.0], [1.0], [2.0]])  # 5 runs: trim 1 -> mean(1, 2, 3)
    assert B.aggregate_iqm(x5) == 2.0
    assert B.aggregate_median(x5) == 2.0 and B.aggregate_mean(x5) == 3.2
    assert B.aggregate_optimality_gap(np.array([[0.5], [1.5]])) == pytest.approx(0.25)


@pytest.mark.parametrize("shape", [(5, 1), (10, 3), (7, 4)])
def test_aggregates_equal_rliable_definitions(shape):
    x = np.random.default_rng(1).uniform(0, 1.2, size=shape)
    assert B.aggregate_iqm(x) == pytest.approx(rlm.aggregate_iqm(x), abs=1e-12)
    assert B.aggregate_mean(x) == pytest.approx(rlm.aggregate_mean(x), abs=1e-12)
    assert B.aggregate_median_of_task_means(x) == pytest.approx(rlm.aggregate_median(x), abs=1e-12)
    assert B.aggregate_optimality_gap(x) == pytest.approx(
        rlm.aggregate_optimality_gap(x, 1), abs=1e-12
    )
    y = np.random.default_rng(2).uniform(0, 1.2, size=(shape[0] + 2, shape[1]))
    assert B.probability_of_improvement(x, y) == pytest.approx(
        rlm.probability_of_improvement(x, y), abs=1e-12
    )
    taus = np.linspace(0, 1.2, 13)
    np.testing.assert_allclose(B.score_distribution(x, taus), rly.score_distributions(x, taus))


def test_probability_of_improvement_of_separated_distributions():
    rng = np.random.default_rng(0)
    x, y = rng.uniform(0.6, 0.7, (5, 1)), rng.uniform(0.1, 0.2, (5, 1))
    p = _bs().improvement(x, y, ("x",), ("y",))
    assert p.point == 1.0 and p.lo == 1.0 and p.hi == 1.0
    q = _bs().improvement(y, x, ("y",), ("x",))
    assert q.point == 0.0 and q.hi == 0.0
    same = _bs().improvement(x, x, ("x",), ("x2",))
    assert same.point == 0.5 and same.lo < 0.5 < same.hi


# -- the bootstrap itself -------------------------------------------------------------------
def test_counts_are_index_resamples_and_statistics_match_direct_computation():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(7, 3))
    bs = _bs(reps=50, method="percentile")
    c = bs.counts(7, 3, ("s",))
    assert c.shape == (50, 3, 7) and (c.sum(axis=2) == 7).all()
    full = bs.aggregates(
        x, ("s",), names=("iqm", "mean", "median", "median_of_task_means", "optimality_gap")
    )
    # Recompute every replicate the slow way and compare the percentile intervals.
    direct = {k: [] for k in full}
    for b in range(50):
        res = np.stack([np.repeat(x[:, t], c[b, t]) for t in range(3)], axis=1)
        direct["iqm"].append(rlm.aggregate_iqm(res))
        direct["mean"].append(rlm.aggregate_mean(res))
        direct["median"].append(np.median(res))
        direct["median_of_task_means"].append(rlm.aggregate_median(res))
        direct["optimality_gap"].append(rlm.aggregate_optimality_gap(res, 1.0))
    for k, vals in direct.items():
        lo, hi = np.percentile(vals, [2.5, 97.5])
        assert full[k].lo == pytest.approx(lo, abs=1e-12) and full[k].hi == pytest.approx(
            hi, abs=1e-12
        )


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_expanded_interval_widens_the_percentile_one_about_the_estimate(n):
    """expanded = point + k (percentile - point), k = sqrt(n/(n-1)) t_{n-1} / z for n runs
    (two samples: the smaller n, n_x + n_y - 2 degrees of freedom); profiles and P(X > Y)
    are clipped to [0, 1], as are fractions given bounds."""
    rng = np.random.default_rng(n)
    x, y = rng.beta(2, 8, (n, 1)), rng.beta(2, 6, (n + 2, 1))
    k = B.expansion(n, 0.95)
    assert k == pytest.approx(
        np.sqrt(n / (n - 1)) * scipy.stats.t.ppf(0.975, n - 1) / scipy.stats.norm.ppf(0.975)
    )
    assert B.expansion(1, 0.95) == 1.0  # one run: a zero-width interval stays one
    ex, pc = _bs(reps=3000), _bs(reps=3000, method="percentile")
    for name in AGGREGATES:
        e, p = ex.aggregates(x, ("g",))[name], pc.aggregates(x, ("g",))[name]
        assert e.point == p.point
        assert e.lo == pytest.approx(e.point - k * (p.point - p.lo), abs=1e-12)
        assert e.hi == pytest.approx(e.point + k * (p.hi - p.point), abs=1e-12)
    clipped = ex.aggregates(x, ("g",), bounds=(0.0, 1.0))["mean"]
    assert clipped.lo == max(0.0, ex.aggregates(x, ("g",))["mean"].lo)
    k2 = B.expansion(n, 0.95, 2 * n)
    e, p = ex.difference(x, y, ("x",), ("y",)), pc.difference(x, y, ("x",), ("y",))
    assert e.lo == pytest.approx(e.point - k2 * (p.point - p.lo), abs=1e-12)
    assert e.hi == pytest.approx(e.point + k2 * (p.hi - p.point), abs=1e-12)
    e, p = ex.improvement(x, y, ("x",), ("y",)), pc.improvement(x, y, ("x",), ("y",))
    assert e.lo == pytest.approx(max(0.0, e.point - k2 * (p.point - p.lo)), abs=1e-12)
    assert e.hi == pytest.approx(min(1.0, e.point + k2 * (p.hi - p.point)), abs=1e-12)
    assert "expanded percentile" in BootstrapSettings().describe()
    assert "fixed worlds" in BootstrapSettings().describe()
    assert "rliable" in BootstrapSettings(method="percentile").describe()
    with pytest.raises(UsageError, match="--ci must be one of expanded, percentile"):
        BootstrapSettings(method="bca")


def test_integer_percentiles_equal_numpy():
    rng = np.random.default_rng(0)
    for reps, n in [(50_000, 5), (1001, 7), (10, 3), (2, 4)]:
        k = rng.integers(0, n + 1, size=(reps, 6))
        qs = [2.5, 97.5, 50, 0, 100]
        np.testing.assert_allclose(B._integer_percentiles(k, n, qs), np.percentile(k, qs, axis=0))


def test_seeded_bootstrap_reproduces_its_intervals_exactly():
    df = synthetic_frame(
        budgets=["1B"], algorithms=["ippo-rnn", "mappo-rnn"], seeds=range(5), num_episodes=4
    )
    a1 = analyze(df, TOTAL, BootstrapSettings(reps=3000, seed=7))
    a2 = analyze(df, TOTAL, BootstrapSettings(reps=3000, seed=7))
    a3 = analyze(df, TOTAL, BootstrapSettings(reps=3000, seed=8))
    assert a1.aggregates == a2.aggregates and a1.improvements == a2.improvements
    for g in a1.profiles:
        np.testing.assert_array_equal(a1.profiles[g].lo, a2.profiles[g].lo)
    assert a1.aggregates != a3.aggregates
    # A group's intervals do not depend on which other groups are in the analysis.
    sub = df[df["algorithm"] == "ippo-rnn"]
    a4 = analyze(sub, TOTAL, BootstrapSettings(reps=3000, seed=7))
    for g, row in a4.aggregates.items():
        assert row == a1.aggregates[g]


def test_interval_estimates_agree_with_rliable_within_monte_carlo_error():
    x = np.random.default_rng(5).beta(2, 5, size=(10, 3))
    reps = 5000
    ours = _bs(reps=reps, seed=1, method="percentile").aggregates(
        x, ("g",), names=("iqm", "mean", "median_of_task_means", "optimality_gap")
    )

    def agg(s):
        return np.array(
            [
                rlm.aggregate_iqm(s),
                rlm.aggregate_mean(s),
                rlm.aggregate_median(s),
                rlm.aggregate_optimality_gap(s, 1.0),
            ]
        )

    np.random.seed(0)  # rliable 1.2.0 samples from NumPy's global state
    points, cis = rly.get_interval_estimates({"g": x}, agg, reps=reps)
    for i, name in enumerate(("iqm", "mean", "median_of_task_means", "optimality_gap")):
        iv = ours[name]
        width = iv.hi - iv.lo
        assert iv.point == pytest.approx(points["g"][i], abs=1e-12)
        # Monte-Carlo s.e. of a 2.5% quantile at 5000 reps is about 1% of the CI width.
        assert abs(iv.lo - cis["g"][0][i]) < 0.08 * width, name
        assert abs(iv.hi - cis["g"][1][i]) < 0.08 * width, name


def test_improvement_and_profile_intervals_agree_with_rliable():
    rng = np.random.default_rng(11)
    x, y = rng.normal(0.55, 0.1, size=(12, 2)), rng.normal(0.5, 0.1, size=(10, 2))
    reps = 1000
    ours = _bs(reps=reps, seed=2, method="percentile").improvement(x, y, ("x",), ("y",))
    np.random.seed(1)
    point, ci = rly.get_interval_estimates({"p": [x, y]}, rlm.probability_of_improvement, reps=reps)
    assert ours.point == pytest.approx(float(point["p"]), abs=1e-12)
    width = ours.hi - ours.lo
    assert abs(ours.lo - float(np.ravel(ci["p"])[0])) < 0.12 * width
    assert abs(ours.hi - float(np.ravel(ci["p"])[1])) < 0.12 * width

    taus = np.linspace(0.2, 0.9, 8)
    p, lo, hi = _bs(reps=reps, seed=3, method="percentile").profile(x, taus, ("x",))
    np.random.seed(2)
    prof, prof_ci = rly.create_performance_profile({"x": x}, taus, reps=reps)
    np.testing.assert_allclose(p, prof["x"])
    # Score distributions are multiples of 1/24 here: allow one step of Monte-Carlo noise.
    assert np.all(np.abs(lo - prof_ci["x"][0]) <= 1 / 24 + 1e-9)
    assert np.all(np.abs(hi - prof_ci["x"][1]) <= 1 / 24 + 1e-9)


def test_ci_covers_the_true_mean_at_the_advertised_rate():
    rng = np.random.default_rng(2024)
    trials, n, hits = 400, 30, 0
    bs = _bs(reps=1000, seed=0)
    for t in range(trials):
        x = rng.normal(0.3, 0.1, size=(n, 1))
        iv = bs.aggregates(x, ("trial", t), names=("mean",))["mean"]
        hits += iv.lo <= 0.3 <= iv.hi
    # Percentile bootstrap slightly under-covers at n=30 (~0.93-0.94); 400 trials -> s.e. 0.012.
    assert 0.90 <= hits / trials <= 0.98


# -- analyses over a results frame ------------------------------------------------------------
def test_run_scores_seeds_vs_episodes_and_nan_episodes():
    df = synthetic_frame(
        budgets=["1B"],
        algorithms=["ippo-rnn"],
        difficulties=["hard"],
        seeds=range(3),
        num_episodes=4,
    )
    df.loc[0, TOTAL] = np.nan  # an episode that did not report the key
    seeds = run_scores(df, TOTAL, runs="seeds")[Group("1B", "ippo-rnn", "hard")]
    eps = run_scores(df, TOTAL, runs="episodes")[Group("1B", "ippo-rnn", "hard")]
    assert seeds.scores.shape == (3, 1) and eps.scores.shape == (11, 1)
    expected = df.groupby("seed")[TOTAL].mean().to_numpy()
    np.testing.assert_allclose(seeds.scores[:, 0], expected)
    assert seeds.seeds == (0, 1, 2) and seeds.num_episodes == 11


def test_analysis_keeps_difficulties_apart_and_marks_missing():
    df = synthetic_frame(algorithms=["ippo-rnn", "mappo-rnn"], seeds=range(4), num_episodes=3)
    df = df[~df["cell"].str.startswith("100M/mappo-rnn/hard")]
    a = analyze(df, TOTAL, BootstrapSettings(reps=500))
    assert {g.difficulty for g in a.aggregates} == {"easy", "medium", "hard"}
    assert a.missing() == [Group("100M", "mappo-rnn", "hard")]
    assert len(a.aggregates) == 11 and set(
        a.aggregates[Group("1B", "ippo-rnn", "easy")].estimates
    ) == set(AGGREGATES)
    # Pairs: one algorithm pair per budget and difficulty (minus the missing one), one
    # budget pair per algorithm and difficulty (minus the missing one).
    kinds = [r.kind for r in a.improvements]
    assert kinds.count("algorithm") == 5 and kinds.count("budget") == 5
    assert len(a.budget_comparisons) == 5
    for r in a.budget_comparisons:  # the synthetic 1B is 6 points better than 100M
        assert r.low == "100M" and r.high == "1B"
        assert r.delta.point == pytest.approx(r.high_mean.point - r.low_mean.point)
        assert r.delta.lo < 0.06 < r.delta.hi or r.delta.lo > 0


def test_summarize_mean_is_close_to_the_truth_and_not_averaged_over_difficulties():
    df = synthetic_frame(seeds=range(5), num_episodes=20)
    rows = summarize(df, [TOTAL, "Team/normal_reward_pct_of_max"], BootstrapSettings(reps=2000))
    base = rows["Team/normal_reward_pct_of_max"]
    for g, row in base.items():
        assert row.n_seeds == 5 and row.n_runs == 5
        assert (
            abs(row.estimates["mean"].point - true_mean(g.budget, g.algorithm, g.difficulty)) < 0.05
        )
    assert len(base) == 2 * 4 * 3


def test_non_fraction_metrics_have_no_optimality_gap():
    df = synthetic_frame(budgets=["1B"], algorithms=["ippo-rnn"], seeds=range(3), num_episodes=2)
    a = analyze(df, "episode_return", BootstrapSettings(reps=200))
    assert all("optimality_gap" not in r.estimates for r in a.aggregates.values())
    assert M.metric_info("Team/soft_coordination_achievement_pct").fraction
    assert not M.metric_info("Achievements/collect_wood").fraction


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"reps": 0}, "--reps"),
        ({"reps": 2.5}, "--reps"),
        ({"seed": -1}, "--seed"),
        ({"runs": "cells"}, "--runs"),
        ({"confidence": 1.0}, "confidence"),
    ],
)
def test_bad_settings_are_usage_errors(kw, msg):
    with pytest.raises(UsageError, match=msg):
        BootstrapSettings(**kw)


def test_metric_names_resolve_from_aliases_and_unknown_ones_suggest():
    avail = ["Team/reward_pct_of_max", "Team/achievement_pct", "Team/coord_reward_pct_of_max"]
    assert M.resolve_metric("total", avail) == "Team/reward_pct_of_max"
    assert M.resolve_metric("Total%", avail) == "Team/reward_pct_of_max"
    assert M.resolve_metric("coord", avail) == "Team/coord_reward_pct_of_max"
    assert M.resolve_metric("team/achievement_pct", avail) == "Team/achievement_pct"
    with pytest.raises(UsageError, match="did you mean Team/achievement_pct"):
        M.resolve_metric("Team/achievment_pct", avail)
    with pytest.raises(UsageError, match="not in the selected results"):
        M.resolve_metric("base", avail)


def test_pair_improvement_compares_any_two_groups_of_one_difficulty():
    df = synthetic_frame(
        algorithms=["ippo-rnn", "pqn-vdn-rnn"],
        difficulties=["hard"],
        seeds=range(5),
        num_episodes=5,
    )
    settings = BootstrapSettings(reps=1000)
    p = A.pair_improvement(
        df, TOTAL, Group("1B", "pqn-vdn-rnn", "hard"), Group("100M", "ippo-rnn", "hard"), settings
    )
    assert p.point > 0.9
    with pytest.raises(UsageError, match="never pooled"):
        A.pair_improvement(
            df,
            TOTAL,
            Group("1B", "pqn-vdn-rnn", "hard"),
            Group("100M", "ippo-rnn", "easy"),
            settings,
        )


def test_budget_order_is_numeric():
    assert sorted(["1B", "tiny", "100M", "10k"], key=A.budget_order) == [
        "10k",
        "100M",
        "1B",
        "tiny",
    ]
    assert A.budget_steps("100M") == 100_000_000 and A.budget_steps("tiny") is None


def test_scipy_trim_mean_matches_window_mean_for_many_sizes():
    rng = np.random.default_rng(9)
    for n in range(1, 23):
        x = rng.normal(size=(n, 1))
        bs = _bs(reps=1)
        c = np.ones((1, 1, n), dtype=np.uint8)
        pool = B._SortedPool(c, x.T)
        cut = int(0.25 * n)
        assert pool.window_mean(cut, n - cut)[0] == pytest.approx(
            scipy.stats.trim_mean(x, 0.25, axis=None)
        )
        lo, hi = ((n - 1) // 2, (n - 1) // 2 + 1) if n % 2 else (n // 2 - 1, n // 2 + 1)
        assert pool.window_mean(lo, hi)[0] == pytest.approx(np.median(x))
        assert bs.reps == 1


def test_weighted_percentiles_equal_numpy_on_the_expanded_sample():
    rng = np.random.default_rng(0)
    for u in (1, 2, 5, 126):
        v, w = rng.normal(size=(u, 7)), rng.integers(1, 50, size=u)
        np.testing.assert_array_equal(
            B.weighted_percentiles(v, w, [2.5, 97.5, 50]),
            np.percentile(np.repeat(v, w, axis=0), [2.5, 97.5, 50], axis=0),
        )


def test_collapsed_resamples_give_the_replicate_by_replicate_intervals():
    """With 5 runs the 20000 replicates collapse to <= 126 distinct resamples; every interval
    must equal the percentile over the individual replicates."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(5, 1)), rng.normal(size=(5, 1))
    bs = _bs(reps=20000, seed=1, method="percentile")
    res = bs.resamples(5, 1, ("x",))
    assert res.compressed and res.counts.shape[0] <= 126 and res.weights.sum() == 20000
    cx, cy = (
        bs.counts(5, 1, ("x",))[:, 0].astype(float),
        bs.counts(5, 1, ("y",))[:, 0].astype(float),
    )
    np.testing.assert_array_equal(res.counts[res.index][:, 0], cx)

    def check(iv, samples):
        lo, hi = np.percentile(samples, [2.5, 97.5])
        assert iv.lo == pytest.approx(lo, abs=1e-12) and iv.hi == pytest.approx(hi, abs=1e-12)

    s = B.pairwise(x[:, 0], y[:, 0])
    check(bs.improvement(x, y, ("x",), ("y",)), np.einsum("bi,ij,bj->b", cx, s, cy) / 25)
    check(bs.difference(x, y, ("x",), ("y",)), cx @ x[:, 0] / 5 - cy @ y[:, 0] / 5)
    check(bs.aggregates(x, ("x",), names=("mean",))["mean"], cx @ x[:, 0] / 5)
    taus = np.array([-0.5, 0.0, 0.5])
    _, lo, hi = bs.profile(x, taus, ("x",))
    np.testing.assert_allclose(
        [lo, hi], np.percentile(cx @ (x > taus).astype(float) / 5, [2.5, 97.5], axis=0)
    )
