"""Benchmark: ``alem-eval scenario`` cold, then again in a new process (not a test).

Run 1 starts with an empty JAX compilation cache and warm-start store
(``ALEM_EVAL_JAX_CACHE``), an empty alem-eval cache and results store; run 2 is a new
process with the same caches and a fresh results store (so every team is played again:
what reuses is only the compiled and exported programs). Each run is
``alem_eval.cli.app.main`` in a fresh interpreter; it reports its wall and CPU time, the
evaluator's program traces and exported-program loads (``machine.TRACE_COUNTS``), its
program compiles (``programs.COMPILE_STATS``: count and XLA seconds) and the persistent
compilation cache's hits and misses (JAX's monitoring events).

    .venv/bin/python bench/scenario_rerun.py [--focal scripted]
        [--cell demo/ippo-rnn/easy/seed0] [--episodes N] [--max-steps N] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_RUN = """
import atexit, collections, json, os, resource, sys, time
t0 = time.perf_counter()
import jax.monitoring
events = collections.Counter()
jax.monitoring.register_event_listener(lambda name, **kw: events.update([name]))

def report():
    from alem_eval.evaluate.machine import TRACE_COUNTS
    from alem_eval.evaluate.programs import COMPILE_STATS
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cache = {k.rsplit("/", 1)[-1]: v for k, v in events.items() if "compilation_cache" in k}
    print("BENCH" + json.dumps({
        "wall_s": time.perf_counter() - t0,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "traces": dict(TRACE_COUNTS),
        "program_compiles": len(COMPILE_STATS),
        "program_compile_s": sum(s.compile_s for s in COMPILE_STATS),
        "program_trace_s": sum(s.trace_s for s in COMPILE_STATS),
        "cache": cache,
    }), flush=True)

atexit.register(report)
sys.argv = ["alem-eval"] + json.loads(os.environ["BENCH_ARGS"])
from alem_eval.cli.app import main
main()
"""


def run_once(args: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _RUN],
        env=dict(env, BENCH_ARGS=json.dumps(args)),
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("BENCH")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[len("BENCH") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--focal", default="scripted")
    ap.add_argument("--cell", default="demo/ippo-rnn/easy/seed0")
    ap.add_argument("--episodes", type=int)
    ap.add_argument("--max-steps", type=int)
    ap.add_argument("--json", type=Path)
    opts = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="scenario-rerun-") as tmp:
        root = Path(tmp)
        env = dict(
            os.environ,
            ALEM_EVAL_JAX_CACHE=str(root / "jax"),
            ALEM_EVAL_CACHE=str(root / "cache"),
            PYTHONPATH=str(REPO),
        )
        runs = []
        for i in (1, 2):
            args = ["scenario", "--focal", opts.focal, opts.cell, "--source", "demo"]
            args += ["--results", str(root / f"results{i}"), "--out", str(root / f"out{i}")]
            if opts.episodes:
                args += ["--episodes", str(opts.episodes)]
            if opts.max_steps:
                args += ["--max-steps", str(opts.max_steps)]
            runs.append(run_once(args, env))
            print(f"run {i}: {json.dumps(runs[-1])}", flush=True)
        load = os.getloadavg()
        out = {
            "focal": opts.focal,
            "cell": opts.cell,
            "cold": runs[0],
            "rerun": runs[1],
            "rerun_over_cold_wall": runs[1]["wall_s"] / runs[0]["wall_s"],
            "rerun_over_cold_cpu": runs[1]["cpu_s"] / runs[0]["cpu_s"],
            "load_average": load,
        }
        print(json.dumps(out, indent=1))
        if opts.json:
            opts.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
