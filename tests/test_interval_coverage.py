"""The leaderboard's intervals hold their 95% label: simulated experiments with a known
mean, through :meth:`StratifiedBootstrap.aggregates` (what ``summarize`` calls per group for
the leaderboard, report and score tables)."""

from __future__ import annotations

import numpy as np
import pytest

from alem_eval.analysis.bootstrap import BootstrapSettings, StratifiedBootstrap

EXPERIMENTS = 2000
# Seed scores with a known mean: normal, and right-skewed (lognormal, skewness 0.78).
SCORES = {
    "normal": (lambda rng, size: rng.normal(0.3, 0.1, size), 0.3),
    "skewed": (lambda rng, size: rng.lognormal(0.0, 0.25, size), float(np.exp(0.25**2 / 2))),
}


def coverage(method: str, dist: str, seeds: int) -> float:
    """The fraction of EXPERIMENTS experiments of ``seeds`` seed scores whose interval of
    the mean covers the true mean (one bootstrap stream: the same replicates for each)."""
    draw, truth = SCORES[dist]
    scores = draw(np.random.default_rng([seeds, len(dist)]), (EXPERIMENTS, seeds, 1))
    bs = StratifiedBootstrap(BootstrapSettings(reps=1000, seed=1, method=method))
    hits = 0
    for x in scores:
        iv = bs.aggregates(x, ("experiment",), names=("mean",))["mean"]
        hits += iv.lo <= truth <= iv.hi
    return hits / EXPERIMENTS


@pytest.mark.parametrize("dist", sorted(SCORES))
@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_the_default_interval_covers_its_label_where_the_plain_percentile_does_not(seeds, dist):
    assert BootstrapSettings().method == "expanded"
    assert coverage("expanded", dist, seeds) >= 0.93
    # rliable's plain percentile interval (``--ci percentile``) falls short with few seeds.
    assert coverage("percentile", dist, seeds) < 0.92
