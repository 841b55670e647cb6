"""Benchmark: `alem-eval report` before and after drawing figures in worker processes.

Not a test. On a synthetic full release (2 budgets x 4 algorithms x 3 difficulties x 5
seeds x 20 episodes; runs = seeds; 50,000 bootstrap replicates: the settings of
``bench/bootstrap_speed.py``), in one run of this script, it times

  before: ``build_report`` as it was: 8 figure files (4 figures x PNG + PDF), drawn one
          after the other in the calling process (``formats=("png", "pdf"), jobs=1``);
  after:  ``build_report``'s defaults: 4 PNG figures drawn by one forked worker per core;
  also:   the PDF copies with workers (``--pdf``), the statistics alone, and the command
          ``alem-eval report`` end to end in a fresh process (interpreter start and imports
          included), default and ``--pdf``;

and prints the ratio before / after. Every timing is the best of ``--repeat`` runs (the
machine is shared: the minimum is the least disturbed one).

    .venv/bin/python bench/report_speed.py [--repeat 3] [--write]

``--write`` replaces the ``report-speed`` block of BENCHMARKS.md with the results.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks_md import write_block  # noqa: E402  (a sibling: bench/ is sys.path[0])


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reps", type=int, default=50_000)
    ap.add_argument("--write", action="store_true", help="record the results in BENCHMARKS.md")
    args = ap.parse_args()

    from alem_eval.analysis.aggregate import analyze, prepare, summarize
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.analysis.metrics import DEFAULT_METRIC, HEADLINE_METRICS
    from alem_eval.reporting.figures import FIGURE_FORMATS, default_jobs
    from alem_eval.reporting.report import build_report
    from alem_eval.analysis.results import ResultsStore
    from tests.synthetic import fill_store

    settings = BootstrapSettings(reps=args.reps)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultsStore(Path(tmp) / "results")
        fill_store(store)
        out = Path(tmp) / "report"

        def stats_only() -> None:
            p = prepare(
                store,
                None,
                metrics=(DEFAULT_METRIC,),
                optional_metrics=[m.key for m in HEADLINE_METRICS],
            )
            analyze(p.frame, p.metrics[0], settings)
            summarize(p.frame, [m.key for m in HEADLINE_METRICS], settings)

        runs: dict[str, float] = {}
        # Warm-up: imports, matplotlib's font cache, the store's first read.
        build_report(store, out, settings=BootstrapSettings(reps=100), jobs=1)
        runs["stats"] = best_of(args.repeat, stats_only)
        runs["before"] = best_of(
            args.repeat,
            lambda: build_report(store, out, settings=settings, formats=FIGURE_FORMATS, jobs=1),
        )
        runs["after"] = best_of(args.repeat, lambda: build_report(store, out, settings=settings))
        runs["after_pdf"] = best_of(
            args.repeat,
            lambda: build_report(store, out, settings=settings, formats=FIGURE_FORMATS),
        )
        runs["png_serial"] = best_of(
            args.repeat, lambda: build_report(store, out, settings=settings, jobs=1)
        )
        cli = [sys.executable, "-m", "alem_eval", "report", "--results", str(store.root)]
        cli += ["--out", str(out), "--reps", str(args.reps)]
        for name, extra in (("cli", []), ("cli_pdf", ["--pdf"])):
            runs[name] = best_of(
                args.repeat,
                lambda extra=extra: subprocess.run(
                    cli + extra, cwd=REPO, check=True, capture_output=True
                ),
            )
    jobs = default_jobs(4)
    ratio = runs["before"] / runs["after"]
    rows = [
        ("statistics only (prepare + analyze + headline)", runs["stats"]),
        ("**before**: 8 figure files (PNG + PDF), drawn in-process one by one", runs["before"]),
        (f"**after**: 4 PNG figures, {jobs} forked workers (the default)", runs["after"]),
        ("4 PNG figures, in-process (`--jobs 1`)", runs["png_serial"]),
        (f"8 figure files (`--pdf`), {jobs} forked workers", runs["after_pdf"]),
        ("`alem-eval report` end to end, fresh process (default)", runs["cli"]),
        ("`alem-eval report --pdf` end to end, fresh process", runs["cli_pdf"]),
    ]
    for label, t in rows:
        print(f"{t:7.2f} s  {label}")
    print(f"ratio before / after: {ratio:.2f}x (load average before the run {load_before:.2f})")
    if not args.write:
        return
    import matplotlib

    table = "\n".join(f"| {label} | {t:.2f} s |" for label, t in rows)
    text = f"""## Report speed

Measured by `bench/report_speed.py --write` on {date.today().isoformat()}: `alem-eval report`
on a synthetic full release (2 budgets x 4 algorithms x 3 difficulties x 5 seeds x 20
episodes, runs = seeds, {args.reps:,} bootstrap replicates, one metric + the headline
table), best of {args.repeat} runs each. Machine: {platform.machine()}, {os.cpu_count()} cores,
Python {platform.python_version()}, matplotlib {matplotlib.__version__}; load average before
the run {load_before:.2f} (the machine is shared, so absolute numbers are noisy).

| what | time |
| --- | ---: |
{table}

Ratio before / after: **{ratio:.2f}x** (target: the whole report in ≤ 5 s). Drawing the
figures dominates (about a second per figure file, against {runs["stats"]:.2f} s for all the
statistics): PDF copies are now written only with `--pdf`, and each figure is drawn and saved
in a worker process forked from the command (one per core; `--jobs 1` draws in-process).
A process that has loaded JAX (`alem-eval demo`) draws in-process: forking it is not safe.
"""
    write_block("report-speed", text)
    print("wrote the report-speed block of BENCHMARKS.md")


if __name__ == "__main__":
    main()
