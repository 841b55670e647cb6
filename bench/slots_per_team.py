"""Benchmark: how many batch slots a team needs (not a test).

A stack of ``--teams`` copies of a checkpoint (each copy its own weights in the stacked
batch, as distinct checkpoints are), ``--episodes`` episodes each, is scored with the fast
protocol at several slots per team (``batch = teams x slots``), all in one process. A
team's policy step reads all of its weights once per step whatever the number of slots it
drives, so with few slots per team that read dominates the step; with more, the idle tail
of each team's queue grows. Reported per layout: utilisation, live env-steps/s, its ratio
to the fastest layout, and the layout ``slots_per_team`` picks without ``--batch``.

    .venv/bin/python bench/slots_per_team.py [--teams 20] [--episodes 8] [--slots 2,4,8]
"""

from __future__ import annotations

import argparse
import os
import resource
import time

from continuous_batching import DEFAULT_CELL


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--teams", type=int, default=20)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=1024)
    ap.add_argument("--slots", default="2,4,8", help="slots per team, comma-separated")
    args = ap.parse_args()

    from alem_eval.evaluate.rollout import run_stack
    from alem_eval.evaluate.settings import slots_per_team
    from alem_eval.model.loader import load_cell
    from alem_eval.core.runtime import enable_compilation_cache

    load_before = os.getloadavg()[0]
    enable_compilation_cache()
    cell = load_cell(DEFAULT_CELL, policy_only=True)
    k, e = args.teams, args.episodes
    stack = ([cell.cfg] * k, [cell.weights] * k)
    kw = dict(
        protocol="fast",
        eval_difficulty=cell.cfg.env.training_difficulty,
        num_episodes=e,
        max_steps=args.max_steps,
    )
    rows = []
    for s in (int(x) for x in args.slots.split(",")):
        run_stack(*stack, **kw, batch=k * s)  # compile
        t0 = time.perf_counter()
        res = run_stack(*stack, **kw, batch=k * s)
        wall = time.perf_counter() - t0
        rows.append((s, res.utilisation, res.live_steps / wall))
        print(f"  {s} slots per team: {rows[-1][2]:.0f} live env-steps/s", flush=True)
    best = max(r[2] for r in rows)
    print(f"{k} teams x {e} episodes, cap {args.max_steps}; load average before {load_before:.2f}")
    print("| slots per team | slots | utilisation | live env-steps/s | / fastest |")
    print("|---:|---:|---:|---:|---:|")
    for s, util, rate in rows:
        print(f"| {s} | {s * k} | {util:.3f} | {rate:.0f} | {rate / best:.2f} |")
    print(f"default without --batch: {slots_per_team(k, e, None)} slots per team")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak resident memory of the process: {peak:.2f} GiB")


if __name__ == "__main__":
    main()
