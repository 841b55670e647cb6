"""Benchmark: every algorithm in one compiled rollout, and the warm start (not a test).

Measures, each in a fresh process with its own empty compilation cache (so the numbers are
comparable within one run of this script):

1. **per-algorithm programs** (how scoring worked before mixed teams): the four demo cells
   scored one algorithm at a time -> four traces of the Alem step, four XLA compiles;
2. **one program**: the same four cells scored by one ``run_stack`` call;
3. **warm start**: a new process scoring the same shapes again, with the cache of (2):
   the time from process start to the first records, and whether anything was traced;
4. **mixed batch throughput**: steady-state env-steps/s of a batch of mixed teams (every
   slot a different algorithm) vs the same batch size in self-play, after compilation.

    .venv/bin/python bench/mixed_teams.py [--episodes 4] [--steps 256] [--write]

``--write`` replaces the ``mixed-teams`` block of BENCHMARKS.md with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    sys.path.insert(0, {repo!r})
    from alem_eval.core.runtime import enable_compilation_cache
    enable_compilation_cache({cache!r})
    from alem_eval.evaluate.machine import TRACE_COUNTS
    from alem_eval.evaluate.programs import COMPILE_STATS
    from alem_eval.evaluate.rollout import run_stack, run_teams
    from alem_eval.hub.demo_cells import ensure_demo_source
    from alem_eval.model.loader import load_cell
    root = ensure_demo_source()
    cells = sorted(root.glob("*/*/*/seed0"))
    loaded = [load_cell(c, policy_only=True) for c in cells]
    t_ready = time.perf_counter()
    mode, e, steps = {mode!r}, {episodes}, {steps}
    kw = dict(protocol="fast", eval_difficulty="easy", num_episodes=e, max_steps=steps)
    if mode == "separate":
        for l in loaded:
            run_stack([l.cfg], [l.weights], **kw)
    elif mode == "mixed-throughput":
        n = len(loaded)
        teams = [tuple((i + s) % n for s in range(3)) for i in range(n)]
        cfgs, ws = [l.cfg for l in loaded], [l.weights for l in loaded]
        out = {{}}
        for name, tm in (("self", [(i, i, i) for i in range(n)]), ("mixed", teams)):
            run_teams(cfgs, ws, tm, **kw)  # compile
            t = time.perf_counter()
            res = run_teams(cfgs, ws, tm, **kw)
            wall = time.perf_counter() - t
            live = sum(r["episode_length"] for recs in res.records for r in recs)
            out[name] = {{"wall_s": wall, "live_steps": live}}
        print("RESULT" + json.dumps(out))
        sys.exit(0)
    else:
        run_stack([l.cfg for l in loaded], [l.weights for l in loaded], **kw)
    t_end = time.perf_counter()
    stats = [dict(program=c.program, trace_s=c.trace_s, compile_s=c.compile_s)
             for c in COMPILE_STATS]
    print("RESULT" + json.dumps({{"wall_s": t_end - t0, "score_s": t_end - t_ready,
                                  "counts": dict(TRACE_COUNTS), "stats": stats}}))
""")


def child(mode: str, cache: str, episodes: int, steps: int) -> dict:
    code = _CHILD.format(repo=str(REPO), cache=cache, mode=mode, episodes=episodes, steps=steps)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode:
        raise SystemExit(proc.stderr[-4000:])
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def _sum(stats, key, prefix="rollout"):
    return sum(s[key] for s in stats if s["program"].startswith(prefix))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=4)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        sep = child("separate", a, args.episodes, args.steps)
        one = child("one", b, args.episodes, args.steps)
        warm = child("one", b, args.episodes, args.steps)
        thr = child("mixed-throughput", b, args.episodes, args.steps)
    rows = [
        ("per-algorithm programs (before)", sep),
        ("one program (after)", one),
        ("warm start: new process, same shapes", warm),
    ]
    lines = [
        "| scoring the 4 demo cells | rollout traces | trace s | XLA compile s | "
        "process start -> records s |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        lines.append(
            f"| {name} | {r['counts'].get('rollout', 0)} "
            f"(+{r['counts'].get('rollout:loaded', 0)} loaded) | "
            f"{_sum(r['stats'], 'trace_s'):.1f} | {_sum(r['stats'], 'compile_s'):.1f} | "
            f"{r['wall_s']:.1f} |"
        )
    s_sps = thr["self"]["live_steps"] / thr["self"]["wall_s"]
    m_sps = thr["mixed"]["live_steps"] / thr["mixed"]["wall_s"]
    text = (
        textwrap.dedent(f"""\
        ## Mixed teams: one compiled rollout

        Measured by `bench/mixed_teams.py{" --write" if args.write else ""}` on {date.today()}:
        the four demo cells (one per algorithm, reduced sizes), fast protocol,
        {args.episodes} episodes x <= {args.steps} steps, each row a fresh process with its
        own empty compilation cache (the warm start reuses the cache of the row above it).
        Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python
        {platform.python_version()}; load average before the run {load:.2f}.

        """)
        + "\n".join(lines)
        + textwrap.dedent(f"""

        Trace ratio before/after: {sep["counts"].get("rollout", 0)} : {one["counts"].get("rollout", 0)};
        trace + compile of the rollout {_sum(sep["stats"], "trace_s") + _sum(sep["stats"], "compile_s"):.1f} s
        -> {_sum(one["stats"], "trace_s") + _sum(one["stats"], "compile_s"):.1f} s.

        Steady state (after compilation), the same 4 teams x {args.episodes} episodes: self-play
        {s_sps:.0f} env-steps/s, mixed teams (each slot a different algorithm, so each team
        runs three policies) {m_sps:.0f} env-steps/s: ratio {m_sps / s_sps:.2f}.
        """)
    )
    print(text)
    if args.write:
        from benchmarks_md import write_block

        write_block("mixed-teams", text)


if __name__ == "__main__":
    main()
