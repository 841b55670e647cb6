"""Coverage of the leaderboard's 95% intervals over seeds, before and after (not a test).

Simulates many experiments of 3, 5 and 10 seed scores drawn from a known distribution
(normal; skewed: lognormal sigma 0.25, beta(2, 8), lognormal sigma 0.5) and counts how often
the nominal 95% interval of the mean and of the IQM covers the distribution's mean / IQM
(its 25% trimmed mean), through :meth:`StratifiedBootstrap.aggregates`, the function
``summarize`` calls per group for the leaderboard, report and score tables:

* **percentile** (before; ``--ci percentile``): rliable's plain percentile interval;
* **expanded** (after; the default): the same replicates, widened about the estimate by
  ``sqrt(n/(n-1)) t_{n-1} / z`` for n seeds.

A second table does the same for ``compare`` on one cell per side with 20 shared worlds
whose difficulty moves both sides together: the sides resampled independently (before) and
the worlds resampled jointly (after, :func:`alem_eval.scoring.compare.compare_paired`).

    .venv/bin/python bench/interval_coverage.py [--experiments 2000] [--reps 2000] [--write]

``--write`` replaces the ``interval-coverage`` block of BENCHMARKS.md with the results.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import textwrap
import time
from datetime import date
from pathlib import Path

import numpy as np
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alem_eval.analysis.bootstrap import BootstrapSettings, StratifiedBootstrap
from alem_eval.scoring.compare import compare_paired, compare_scores

SEEDS = (3, 5, 10)
METHODS = ("percentile", "expanded")
DISTRIBUTIONS = {
    "normal(0.3, 0.1)": scipy.stats.norm(0.3, 0.1),
    "lognormal(0, 0.25)": scipy.stats.lognorm(0.25),
    "beta(2, 8)": scipy.stats.beta(2, 8),
    "lognormal(0, 0.5)": scipy.stats.lognorm(0.5),
}


def iqm(dist) -> float:
    """The distribution's interquartile mean: E[X | Q1 < X < Q3]."""
    q1, q3 = dist.ppf([0.25, 0.75])
    return float(dist.expect(lambda v: v, lb=q1, ub=q3, conditional=True))


def coverage(dist, seeds: int, method: str, experiments: int, reps: int, seed: int):
    """{aggregate: (coverage, median width)} over ``experiments`` draws of ``seeds`` scores."""
    x = dist.rvs(size=(experiments, seeds, 1), random_state=np.random.default_rng(seeds))
    truth = {"mean": float(dist.mean()), "iqm": iqm(dist)}
    bs = StratifiedBootstrap(BootstrapSettings(reps=reps, seed=seed, method=method))
    hits = {k: 0 for k in truth}
    widths: dict[str, list[float]] = {k: [] for k in truth}
    for scores in x:
        est = bs.aggregates(scores, ("coverage", seeds), names=tuple(truth))
        for k, iv in est.items():
            hits[k] += iv.lo <= truth[k] <= iv.hi
            widths[k].append(iv.hi - iv.lo)
    return {k: (hits[k] / experiments, float(np.median(widths[k]))) for k in truth}


def t_coverage(dist, seeds: int, experiments: int) -> float:
    """Coverage of the textbook Student t interval of the mean on the same draws as
    :func:`coverage` (a reference, not a bootstrap: exact for normal scores)."""
    x = dist.rvs(size=(experiments, seeds, 1), random_state=np.random.default_rng(seeds))[..., 0]
    half = scipy.stats.t.ppf(0.975, seeds - 1) * x.std(axis=1, ddof=1) / np.sqrt(seeds)
    return float(np.mean(np.abs(x.mean(axis=1) - dist.mean()) <= half))


def two_sample_coverage(seeds: int, method: str, experiments: int, reps: int, seed: int):
    """{statistic: coverage} of P(X > Y) and mean(X) - mean(Y) (report's budget comparison:
    two groups of ``seeds`` independent seeds each), X ~ N(0.35, 0.1), Y ~ N(0.3, 0.1)."""
    rng = np.random.default_rng(100 + seeds)
    truth = {"p": float(scipy.stats.norm.cdf(0.05 / (0.1 * np.sqrt(2)))), "diff": 0.05}
    bs = StratifiedBootstrap(BootstrapSettings(reps=reps, seed=seed, method=method))
    hits = {k: 0 for k in truth}
    for _ in range(experiments):
        x, y = rng.normal(0.35, 0.1, (seeds, 1)), rng.normal(0.3, 0.1, (seeds, 1))
        for k, iv in [
            ("p", bs.improvement(x, y, ("x",), ("y",))),
            ("diff", bs.difference(x, y, ("x",), ("y",))),
        ]:
            hits[k] += iv.lo <= truth[k] <= iv.hi
    return {k: hits[k] / experiments for k in truth}


def compare_coverage(experiments: int, reps: int, seed: int, worlds: int = 20, gap: float = 0.02):
    """(independent, paired): (coverage of the true difference, median width) of compare's
    difference interval, one cell per side on ``worlds`` shared worlds."""
    rng = np.random.default_rng(worlds)
    out: dict[str, list] = {"independent": [], "paired": []}
    for i in range(experiments):
        w = rng.normal(0.0, 0.2, worlds)  # a world's difficulty, shared by both sides
        a = 0.5 + gap + w + rng.normal(0, 0.02, worlds)
        b = 0.5 + w + rng.normal(0, 0.02, worlds)
        for name, r in [
            ("independent", compare_scores(a, b, reps=reps, seed=seed, stream=(i,))),
            ("paired", compare_paired(a[None], b[None], reps=reps, seed=seed, stream=(i,))),
        ]:
            out[name].append((r["diff_lo"] <= gap <= r["diff_hi"], r["diff_hi"] - r["diff_lo"]))
    return {
        k: (np.mean([h for h, _ in v]), float(np.median([w for _, w in v]))) for k, v in out.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiments", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()
    start = time.perf_counter()
    rows = []
    for name, dist in DISTRIBUTIONS.items():
        skew = float(dist.stats(moments="s"))
        for n in SEEDS:
            res = {m: coverage(dist, n, m, args.experiments, args.reps, args.seed) for m in METHODS}
            cells = [
                f"{res[m][k][0]:.1%}"
                + (f" ({res[m][k][1] / res['percentile'][k][1]:.2f}x)" if m == "expanded" else "")
                for k in ("mean", "iqm")
                for m in METHODS
            ]
            cells.insert(2, f"{t_coverage(dist, n, args.experiments):.1%}")
            rows.append(f"| {name} | {skew:.2f} | {n} | {' | '.join(cells)} |")
            print(rows[-1], flush=True)
    two_rows = []
    for n in SEEDS:
        res = {
            m: two_sample_coverage(n, m, args.experiments, args.reps, args.seed) for m in METHODS
        }
        cells = [f"{res[m][k]:.1%}" for k in ("p", "diff") for m in METHODS]
        two_rows.append(f"| {n} | {' | '.join(cells)} |")
        print(two_rows[-1], flush=True)
    cmp = compare_coverage(args.experiments, args.reps, args.seed)
    cmp_rows = [f"| {k} | {c:.1%} | {w:.4f} |" for k, (c, w) in cmp.items()]
    print(*cmp_rows, sep="\n")
    load = os.getloadavg()[0]
    half = 1.96 * np.sqrt(0.95 * 0.05 / args.experiments)
    text = "\n".join(
        line
        if line.startswith(("#", "|", "    "))
        else textwrap.fill(line, 90, break_on_hyphens=False)
        for line in [
            "## Leaderboard intervals: coverage of the 95% CI over seeds",
            "",
            "`bench/interval_coverage.py` (not a test) draws experiments of 3, 5 and 10 seed "
            "scores from a known distribution and counts how often the nominal 95% interval "
            "of the mean and of the IQM covers the distribution's mean / interquartile mean, "
            "through `StratifiedBootstrap.aggregates` (what the leaderboard, report and score "
            "tables call per group). *Percentile*: rliable's plain percentile interval (before; "
            "`--ci percentile`). *Expanded*: the same replicates widened about the estimate by "
            "sqrt(n/(n-1)) t_{n-1}/z (after; the default), with its median width relative to "
            "the percentile interval's.",
            "",
            f"    .venv/bin/python bench/interval_coverage.py --experiments {args.experiments} "
            f"--reps {args.reps} --write",
            "",
            f"Measured {date.today().isoformat()} in one run: {args.experiments:,} experiments "
            f"per row, {args.reps:,} bootstrap replicates, seed {args.seed}; "
            f"{time.perf_counter() - start:.0f} s on {os.cpu_count()} CPUs (load average "
            f"{load:.1f}), Python {platform.python_version()}, NumPy {np.__version__}. "
            f"Monte-Carlo error of a coverage near 95%: ±{half:.1%} (95%).",
            "",
            "| scores | skewness | seeds | mean: percentile | mean: expanded (width) "
            "| mean: Student t (reference) | IQM: percentile | IQM: expanded (width) |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            *rows,
            "",
            "The plain percentile interval of a mean of n seeds misses the n − 1 of the "
            "variance and the t quantile; with 3 seeds no resample of the mean falls outside "
            "[min, max] of the seeds, so no percentile-type interval (Hesterberg's expanded "
            "levels, BCa) covers more than 75% of a symmetric truth there; widening the "
            "distances does. On skewed scores the expanded interval's misses are on the upper "
            "side: it holds 93% on lognormal sigma 0.25 but stays just under it on beta(2, 8) "
            "and lognormal sigma 0.5, where the textbook Student t interval on the same draws (its "
            "own column, not a bootstrap) misses as often: with 3 to 10 strongly skewed seeds "
            "no interval of this width holds 95% (a studentised interval would correct that from 5 seeds "
            "on, but has no finite bound at 3: a resample of one seed repeated has no spread). "
            "The IQM of 3 seeds is their mean (nothing to trim), so on skewed scores it "
            "estimates the mean, not the IQM. `tests/test_interval_coverage.py` checks the "
            "mean (>= 93% for 3, 5 and 10 seeds, normal and lognormal sigma 0.25; the "
            "percentile interval below 92%) on 2,000 experiments at 1,000 replicates.",
            "",
            "Two groups of n seeds each (the report's P(X > Y) and budget comparison; X ~ "
            "N(0.35, 0.1), Y ~ N(0.3, 0.1), independent seeds): the expansion uses the "
            "smaller n and n_X + n_Y − 2 degrees of freedom. With 3 seeds per side P(X > Y) "
            "takes few values and neither interval holds 95%.",
            "",
            "| seeds per group | P(X > Y): percentile | P(X > Y): expanded "
            "| difference: percentile | difference: expanded |",
            "| ---: | ---: | ---: | ---: | ---: |",
            *two_rows,
            "",
            "`compare`, one cell per side, 20 worlds shared by both sides (a world's "
            "difficulty, sd 0.2, moves both; each side's own noise sd 0.02; true difference "
            "0.02): coverage of the 95% interval of the difference and its median width, "
            "expanded intervals.",
            "",
            "| resampled | coverage | median width |",
            "| --- | ---: | ---: |",
            *cmp_rows,
        ]
    )
    if args.write:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchmarks_md import write_block

        write_block("interval-coverage", text)
    print(text)


if __name__ == "__main__":
    main()
