"""Benchmark: focal agents in the play core (not a test).

1. **JAX focal vs baselines only**: env-steps/s of the six scenario compositions of one
   background cell (visitor and resident, every slot position) with a JAX focal
   (``random-legal``), against the same compositions with a second baseline cell in the
   focal's slots (baselines only): the focal's cost per slot, target <= 1.2x.
2. **Host focal vs JAX focal**: the same compositions with ``scripted-host`` (a host
   agent: one ``io_callback`` per step) against ``scripted`` (the same script as a JAX
   agent) at batch B = 16, 64, 256 slots.

Steady state: each configuration runs once to compile, then once timed (env-steps that
belonged to an episode / wall seconds), in one process, one after the other.

    .venv/bin/python bench/focal_agents.py [--batches 16 64 256] [--steps 128]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKGROUND = "demo/ippo-rnn/easy/seed0"
STRANGER = "demo/pqn-vdn-rnn/easy/seed0"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--ratio-batch", type=int, default=None, help="batch of part 1")
    args = ap.parse_args()

    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()
    from alem_eval.evaluate.agent_runs import run_agent_teams
    from alem_eval.evaluate.rollout import run_teams
    from alem_eval.evaluate.reference_agents import RandomLegal, Scripted, ScriptedHost
    from alem_eval.hub.demo_cells import demo_root
    from alem_eval.model.loader import load_cell

    def load(cell_id: str):
        algorithm, difficulty, seed = cell_id.split("/")[1:]
        return load_cell(
            os.path.join(demo_root(), cell_id),
            algorithm=algorithm,
            difficulty=difficulty,
            seed=int(seed[4:]),
            policy_only=True,
            where=cell_id,
        )

    bg, other = load(BACKGROUND), load(STRANGER)
    # 0: background, 1: the focal's slots; visitor and resident in every position
    teams = [tuple(1 if s == p else 0 for s in range(3)) for p in range(3)]
    teams += [tuple(0 if s == p else 1 for s in range(3)) for p in range(3)]
    load0 = os.getloadavg()[0]

    def rate(batch: int, agent=None) -> dict:
        episodes = math.ceil(batch / len(teams))
        kw = dict(
            protocol="fast",
            eval_difficulty="easy",
            num_episodes=episodes,
            max_steps=args.steps,
            batch=batch,
        )
        if agent is None:
            go = lambda: run_teams([bg.cfg, other.cfg], [bg.weights, other.weights], teams, **kw)
        else:
            go = lambda: run_agent_teams(
                [bg.cfg, bg.cfg], [bg.weights, None], teams, {1: agent}, **kw
            )
        t0 = time.perf_counter()
        go()
        compile_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        res = go()
        wall = time.perf_counter() - t0
        out = {
            "batch": batch,
            "slots": len(teams) * episodes,
            "steps_per_s": res.live_steps / wall,
            "first_call_s": compile_s,
        }
        print(json.dumps(out), flush=True)
        return out

    ratio_b = args.ratio_batch or args.batches[0]
    print(f"# {platform.machine()}, {os.cpu_count()} cores, load {load0:.2f}", flush=True)
    base = rate(ratio_b)
    jax_focal = rate(ratio_b, RandomLegal())
    print(
        f"| JAX focal (random-legal) / baselines only, B={ratio_b} | "
        f"{jax_focal['steps_per_s']:.0f} / {base['steps_per_s']:.0f} = "
        f"{base['steps_per_s'] / jax_focal['steps_per_s']:.2f}x cost |",
        flush=True,
    )
    for b in args.batches:
        j = rate(b, Scripted())
        h = rate(b, ScriptedHost())
        print(
            f"| B={b} ({j['slots']} slots) | scripted (JAX) {j['steps_per_s']:.0f} | "
            f"scripted-host {h['steps_per_s']:.0f} | host/JAX "
            f"{h['steps_per_s'] / j['steps_per_s']:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
