"""Benchmark: every episode of a synthetic full release, at the real cap (not a test).

A synthetic release stands in for the 120 released cells: 2 budgets x 4 algorithms x 3
difficulties x 5 seeds, each cell the algorithm's released network size (its upstream
yaml, 4 comm channels) with freshly initialised weights of its own seed (random policies:
their episodes end when the game ends them, so lengths are whatever the worlds give).
The release is scored as ``alem-eval score`` scores it: one ``run_stack`` call per
difficulty (the 40 cells of that difficulty in one compiled rollout, every algorithm in
it), fast protocol, ``--episodes`` each, cap ``--max-steps``.

Each layout (``--batches``: ``default`` is what ``score`` picks on this device, a number
is ``--batch``) scores the whole release twice: the first pass includes tracing and
compiling, the second is the steady-state cost. Reported per layout: wall time of each
pass, slot utilisation (live env-steps / slot-steps), live env-steps/s, slots, and the
device's peak memory where JAX reports it.

    python bench/synthetic_release.py [--seeds 5] [--budgets 2] [--episodes 20]
        [--max-steps 10000] [--batches default,1200] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DIFFICULTIES = ("easy", "medium", "hard")
RELEASED_ENV = {"NUM_COMM_CHANNELS": 4}


def synthetic_weights(budgets: int, seeds: int) -> dict:
    """Fresh weights of each synthetic (budget, algorithm, seed), its own key each; every
    difficulty's cell of that triple reuses them (the network does not depend on it)."""
    import jax

    from alem_eval.algorithms import all_algorithms
    from alem_eval.config import training_run_config
    from alem_eval.networks import build_network

    out = {}
    for b in range(budgets):
        for a, algo in enumerate(all_algorithms()):
            for s in range(seeds):
                cfg = training_run_config(
                    algo.name, difficulty="easy", seed=s, overrides=RELEASED_ENV
                )
                key = jax.random.PRNGKey(1000 * b + 100 * a + s)
                out[b, algo.name, s] = jax.device_get(build_network(cfg).init_variables(key))
    return out


def synthetic_stack(difficulty: str, weights: dict):
    """Configs and weights of one difficulty's synthetic cells (budget, algorithm, seed)."""
    from alem_eval.config import training_run_config

    cfgs = [
        training_run_config(algo, difficulty=difficulty, seed=s, overrides=RELEASED_ENV)
        for _, algo, s in weights
    ]
    return cfgs, list(weights.values())


def score_release(stacks, *, episodes: int, max_steps: int, batch: int | None) -> dict:
    """One pass over the release: a ``run_stack`` call per difficulty."""
    from alem_eval import evaluate as ev

    t = time.perf_counter()
    live = slot_steps = 0
    lengths: list[int] = []
    slots = 0
    for difficulty, (cfgs, weights) in stacks.items():
        res = ev.run_stack(
            cfgs,
            weights,
            protocol="fast",
            eval_difficulty=difficulty,
            num_episodes=episodes,
            max_steps=max_steps,
            batch=batch,
        )
        live += res.live_steps
        slot_steps += res.slot_steps
        lengths += [int(r["episode_length"]) for recs in res.records for r in recs]
        slots = max(slots, ev.slots_per_team(len(cfgs), episodes, batch) * len(cfgs))
    wall = time.perf_counter() - t
    return dict(
        wall_s=wall,
        live=live,
        slot_steps=slot_steps,
        episodes=len(lengths),
        min_len=min(lengths),
        max_len=max(lengths),
        mean_len=sum(lengths) / len(lengths),
        at_cap=sum(n >= max_steps for n in lengths),
        slots=slots,
    )


def peak_bytes() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=10_000)
    ap.add_argument("--batches", default="default,1200")
    ap.add_argument("--difficulties", default=",".join(DIFFICULTIES))
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()

    import jax

    # The PRNG mode the release was made with (jax 0.4.38's default; newer jax, as on a
    # device image that cannot take the pinned wheels, defaults to the other one).
    jax.config.update("jax_threefry_partitionable", False)
    from alem_eval import evaluate as ev

    dev = jax.devices()[0]
    info = dict(
        jax=jax.__version__,
        backend=jax.default_backend(),
        device=getattr(dev, "device_kind", str(dev)),
        python=platform.python_version(),
        cpu=platform.processor() or platform.machine(),
        cores=os.cpu_count(),
        default_batch=ev.default_batch(),
    )
    print(json.dumps(info), flush=True)
    t = time.perf_counter()
    weights = synthetic_weights(args.budgets, args.seeds)
    stacks = {d: synthetic_stack(d, weights) for d in args.difficulties.split(",")}
    cells = sum(len(c) for c, _ in stacks.values())
    info.update(cells=cells, build_s=time.perf_counter() - t, episodes=args.episodes)
    info.update(max_steps=args.max_steps)
    print(json.dumps(info), flush=True)
    rows = []
    for spec in args.batches.split(","):
        batch = None if spec == "default" else int(spec)
        n_stats = len(ev.COMPILE_STATS)
        cold = score_release(stacks, episodes=args.episodes, max_steps=args.max_steps, batch=batch)
        stats = ev.COMPILE_STATS[n_stats:]
        warm = score_release(stacks, episodes=args.episodes, max_steps=args.max_steps, batch=batch)
        row = dict(
            layout=spec,
            cold_s=cold["wall_s"],
            compile_s=sum(s.trace_s + s.compile_s for s in stats),
            programs=len(stats),
            **warm,
            utilisation=warm["live"] / warm["slot_steps"],
            live_sps=warm["live"] / warm["wall_s"],
            slot_sps=warm["slot_steps"] / warm["wall_s"],
            peak_bytes=peak_bytes(),
            same_lengths=cold["live"] == warm["live"],
        )
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:  # after every layout: a run stopped at its time limit keeps the rest
            args.json.write_text(json.dumps(dict(info=info, rows=rows), indent=1))


if __name__ == "__main__":
    main()
