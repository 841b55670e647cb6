"""Bootstrap aggregation speed: alem-eval's seeded vectorised bootstrap vs rliable 1.2.0.

Not a test. In one run, on a synthetic full release (2 budgets x 4 algorithms x 3
difficulties x 5 seeds x 20 episodes; runs = seeds), it times

  (a) alem-eval: the four aggregates (IQM, mean, median, optimality gap) with CIs for all
      24 (budget, algorithm, difficulty) groups;
  (b) alem-eval: everything the report computes for one metric — (a) plus P(improvement)
      for every algorithm pair within a budget and every budget pair (48), performance
      profiles at 101 thresholds (24), 100M->1B comparisons (12) — plus the headline table
      (mean CIs of 6 metrics);
  (c) rliable's get_interval_estimates for the same four aggregates and groups;

at --reps replicates (default 50,000; rliable runs --rliable-reps and is scaled linearly
unless told to run in full), prints the times and the ratio c/a, and checks
that both give the same intervals within Monte-Carlo error. Optionally (--figures) it also
times the full report including the PNG/PDF figures.

    .venv/bin/python bench/bootstrap_speed.py [--reps 50000] [--rliable-reps 50000] [--figures]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alem_eval.analysis.aggregate import analyze, run_scores, summarize
from alem_eval.analysis.bootstrap import AGGREGATES, BootstrapSettings, StratifiedBootstrap
from alem_eval.analysis.metrics import DEFAULT_METRIC, HEADLINE_METRICS
from tests.synthetic import synthetic_frame

METRIC = DEFAULT_METRIC  # Team/reward_pct_of_max


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50_000)
    ap.add_argument(
        "--rliable-reps",
        type=int,
        default=5_000,
        help="replicates for rliable; its cost is linear in reps (a Python loop), "
        "so the time is scaled to --reps (default 5000; pass --reps' value "
        "to run it in full)",
    )
    ap.add_argument("--repeat", type=int, default=3, help="alem-eval timings: best of N")
    ap.add_argument("--figures", action="store_true", help="also time the full report")
    args = ap.parse_args()
    rl_reps = min(args.rliable_reps, args.reps)

    df = synthetic_frame()
    settings = BootstrapSettings(reps=args.reps, seed=0)
    groups = run_scores(df, METRIC, runs="seeds")
    print(
        f"machine: {_cpu()}, {os.cpu_count()} CPUs; python {platform.python_version()}, "
        f"numpy {np.__version__}; load average {os.getloadavg()[0]:.2f} at start"
    )
    print(
        f"data: {len(groups)} groups x {next(iter(groups.values())).n_runs} runs "
        f"(seeds; {len(df)} episodes), {args.reps:,} bootstrap replicates"
    )

    def four_aggregates():
        bs = StratifiedBootstrap(settings)
        return {
            g: bs.aggregates(
                rs.scores, ("runs", "seeds", g.budget, g.algorithm, g.difficulty), names=AGGREGATES
            )
            for g, rs in groups.items()
        }

    def full_report_stats():
        analyze(df, METRIC, settings)
        summarize(df, [m.key for m in HEADLINE_METRICS], settings)

    t_four = min(_timed(four_aggregates) for _ in range(args.repeat))
    t_full = min(_timed(full_report_stats) for _ in range(args.repeat))
    ours = four_aggregates()
    print(f"alem-eval  four aggregates, 24 groups:           {t_four:7.2f} s")
    print(f"alem-eval  full report statistics (one metric): {t_full:7.2f} s")

    try:
        from rliable import library as rly
        from rliable import metrics as rlm
    except ImportError:  # pragma: no cover
        print("rliable not installed: skipping the comparison")
        return

    def agg(x):  # rliable's four aggregates, in our order; rliable's median for reference
        return np.array(
            [
                rlm.aggregate_iqm(x),
                rlm.aggregate_mean(x),
                np.median(x),
                rlm.aggregate_optimality_gap(x, 1.0),
            ]
        )

    score_dict = {f"{g.budget}/{g.algorithm}/{g.difficulty}": rs.scores for g, rs in groups.items()}
    np.random.seed(0)  # rliable 1.2.0 draws from the global NumPy state
    t0 = time.perf_counter()
    points, cis = rly.get_interval_estimates(score_dict, agg, reps=rl_reps)
    t_rl = time.perf_counter() - t0
    t_rl_scaled = t_rl * args.reps / rl_reps
    note = "" if rl_reps == args.reps else f" (ran {rl_reps:,} reps, scaled to {args.reps:,})"
    print(f"rliable    four aggregates, 24 groups:           {t_rl_scaled:7.2f} s{note}")
    print(f"speed-up (rliable / alem-eval, four aggregates): {t_rl_scaled / t_four:7.1f}x")
    print(
        f"speed-up (rliable four aggregates / alem-eval full report stats): "
        f"{t_rl_scaled / t_full:5.1f}x"
    )

    # Agreement: point estimates exactly, CI ends within Monte-Carlo error.
    worst_point, worst_ci, scale = 0.0, 0.0, 0.0
    for g, est in ours.items():
        key = f"{g.budget}/{g.algorithm}/{g.difficulty}"
        for i, name in enumerate(AGGREGATES):
            worst_point = max(worst_point, abs(est[name].point - points[key][i]))
            worst_ci = max(
                worst_ci, abs(est[name].lo - cis[key][0][i]), abs(est[name].hi - cis[key][1][i])
            )
            scale = max(scale, est[name].hi - est[name].lo)
    print(
        f"agreement: max |point diff| {worst_point:.2e}; max |CI end diff| {worst_ci:.4f} "
        f"(widest CI {scale:.4f}; raw fraction scale; Monte-Carlo error of rliable's "
        f"{rl_reps:,}-rep ends dominates)"
    )

    if args.figures:
        from alem_eval.reporting.report import build_report
        from alem_eval.analysis.results import ResultsStore
        from tests.synthetic import fill_store

        with tempfile.TemporaryDirectory() as tmp:
            store = ResultsStore(Path(tmp) / "results")
            fill_store(store)
            t_rep = _timed(lambda: build_report(store, Path(tmp) / "report", settings=settings))
        print(f"alem-eval  full report incl. 8 figure files (PNG+PDF): {t_rep:7.2f} s")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
