"""Training throughput of the four trainers: env steps per second after compilation.

    .venv/bin/python bench/train_throughput.py [--algorithms ippo-rnn,...] [--num-envs N]
        [--updates 2] [--seeds 1] [--markdown BENCHMARKS.md]

Runs each trainer at upstream's NUM_ENVS (IPPO/HyperMARL 1024, MAPPO/PQN 512) with the
upstream network sizes and NUM_STEPS unless overridden, compiles, then times ``--updates``
further updates in one compiled call (rollout + GAE/Q(lambda) + all epochs of minibatch
updates). Prints one JSON line per algorithm and, with ``--markdown``, appends a
"Training throughput" table to that file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def measure(
    algo: str,
    *,
    num_envs: int | None,
    num_steps: int | None,
    updates: int,
    seeds: int,
    overrides: dict,
    partners: tuple[str, ...] = (),
    partners_source: str = "demo",
    split: str | None = None,
    focal_slots: int = 1,
) -> dict:
    """One trainer's throughput; with ``partners`` (selectors of ``partners_source``) the
    trainer trains with those frozen partners (``alem_eval.trainers.partners``)."""
    import jax
    import numpy as np

    from alem_eval.algorithms.train_config import build_train_config, training_run_config
    from alem_eval.trainers.common import trainer_for
    from alem_eval.trainers.devices import seed_key

    ov = dict(overrides)
    if num_envs:
        ov["NUM_ENVS"] = num_envs
    if num_steps:
        ov["NUM_STEPS"] = num_steps
    runs = [
        training_run_config(algo, difficulty="easy", seed=s, overrides=ov) for s in range(seeds)
    ]
    tcfg = build_train_config(runs[0])
    team = None
    if partners:
        from alem_eval.trainers.partners import load_partners

        team = load_partners(
            partners, runs[0], source=partners_source, split=split, focal_slots=focal_slots
        )
    trainer = trainer_for(runs[0], tcfg, team)
    init, update_n = trainer.compiled()
    keys = jax.numpy.stack([seed_key(s) for s in range(seeds)])
    plan = {k: np.full((seeds,), v) for k, v in trainer.plan(tcfg).items()}
    t0 = time.perf_counter()
    state = jax.block_until_ready(init(keys, plan))
    t_init = time.perf_counter() - t0
    t0 = time.perf_counter()
    if trainer.warmup:  # PQN's random-action warm-up call (the same program)
        state, _ = update_n(state, np.int32(1), np.bool_(True))
    state, _ = jax.block_until_ready(update_n(state, np.int32(1), np.bool_(False)))
    t_first = time.perf_counter() - t0  # compile + (warm-up +) first update
    t0 = time.perf_counter()
    state, _ = jax.block_until_ready(update_n(state, np.int32(updates), np.bool_(False)))
    dt = time.perf_counter() - t0
    steps = seeds * updates * tcfg.steps_per_update
    return {
        "algorithm": algo,
        "num_envs": tcfg.num_envs,
        "num_steps": tcfg.num_steps,
        "seeds": seeds,
        "timed_updates": updates,
        "env_steps": steps,
        "seconds": round(dt, 2),
        "env_steps_per_s": round(steps / dt, 1),
        "update_s": round(dt / updates, 2),
        "compile_plus_first_update_s": round(t_first, 1),
        "init_s": round(t_init, 1),
        "num_params": trainer.spec.num_params(),
        "partners": list(team.members) if team is not None else [],
        "device": jax.devices()[0].device_kind,
        "platform": jax.devices()[0].platform,
        "cpus": os.cpu_count(),
        "jax": jax.__version__,
    }


def to_markdown(rows: list[dict], note: str) -> str:
    lines = [
        "",
        "## Training throughput",
        "",
        "Env steps per second of `alem-eval train` (rollout + GAE / Q(lambda) + all "
        "minibatch epochs), measured by `bench/train_throughput.py` after compilation, "
        "upstream hyperparameters and network sizes, one seed, easy; one env step = all 3 "
        "agents acting once. " + note,
        "",
        "| algorithm | NUM_ENVS x NUM_STEPS | params | env steps/s | s / update | "
        "compile + 1st update (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['algorithm']} | {r['num_envs']} x {r['num_steps']} | "
            f"{r['num_params']:,} | {r['env_steps_per_s']:,.0f} | {r['update_s']} | "
            f"{r['compile_plus_first_update_s']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    from alem_eval.algorithms.registry import ALGORITHMS

    ap.add_argument(
        "--algorithms",
        default=",".join(ALGORITHMS),
        help="comma-separated (default: every registered algorithm)",
    )
    ap.add_argument("--num-envs", type=int, default=None, help="default: upstream's")
    ap.add_argument("--num-steps", type=int, default=None, help="default: upstream's")
    ap.add_argument("--updates", type=int, default=2, help="timed updates after compilation")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE trainer override")
    ap.add_argument("--markdown", type=Path, default=None, help="append a table to this file")
    ap.add_argument("--note", default="")
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="measure here (default: one subprocess per algorithm, so each "
        "starts with free memory)",
    )
    args = ap.parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.set)
    rows = []
    for algo in [a.strip() for a in args.algorithms.split(",")]:
        if args.in_process:
            row = measure(
                algo,
                num_envs=args.num_envs,
                num_steps=args.num_steps,
                updates=args.updates,
                seeds=args.seeds,
                overrides=overrides,
            )
        else:
            cmd = [
                sys.executable,
                __file__,
                "--in-process",
                "--algorithms",
                algo,
                "--updates",
                str(args.updates),
                "--seeds",
                str(args.seeds),
            ]
            cmd += [f"--num-envs={args.num_envs}"] if args.num_envs else []
            cmd += [f"--num-steps={args.num_steps}"] if args.num_steps else []
            for kv in args.set:
                cmd += ["--set", kv]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.markdown is not None:
        note = args.note or (
            f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores "
            f"(shared with other jobs), jax {rows[0]['jax']}, "
            f"{rows[0]['timed_updates']} timed update(s) after compilation."
        )
        with open(args.markdown, "a", encoding="utf-8") as fh:
            fh.write(to_markdown(rows, note))


if __name__ == "__main__":
    main()
