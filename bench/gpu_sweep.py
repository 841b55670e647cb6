"""Benchmark: live env-steps/s, utilisation and peak memory against the slot count (not a test).

One difficulty's synthetic cells (``--budgets`` x 4 algorithms x ``--seeds``, released
network sizes, fresh weights: see ``synthetic_release.py``) scored in one ``run_stack``
call per layout, fast protocol. For each slot count B of ``--slots`` every cell plays
B / cells episodes, so each slot plays one episode and nothing refills: utilisation is then
the batch's raggedness (mean / longest episode), and live env-steps/s shows how the
per-step cost scales with B. Each layout is called twice: the first call includes tracing
and compiling (each new B compiles its programs), the second is the steady state.

    python bench/gpu_sweep.py [--slots 800,2400,9600] [--difficulty hard] [--json FILE]

Meant for a GPU (see ``bench/gpu_checks.sh``); runs anywhere with small ``--slots``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic_release import (
    COMPILES,
    count_compiles,
    peak_bytes,
    release_call,
    synthetic_stack,
    synthetic_weights,
)


def one_call(stack, *, difficulty: str, episodes: int, max_steps: int, batch: int) -> dict:
    from alem_eval.evaluate.group import LAST_TIMINGS

    cfgs, weights = stack
    t, before = time.perf_counter(), dict(COMPILES)
    res = release_call(cfgs, weights, difficulty, episodes, max_steps, batch)
    wall = time.perf_counter() - t
    lengths = [int(r["episode_length"]) for recs in res.records for r in recs]
    return dict(
        wall_s=wall,
        xla_compiles=COMPILES["n"] - before["n"],
        xla_compile_s=COMPILES["s"] - before["s"],
        live=res.live_steps,
        slot_steps=res.slot_steps,
        utilisation=res.utilisation,
        live_sps=res.live_steps / wall,
        episodes=len(lengths),
        mean_len=sum(lengths) / len(lengths),
        max_len=max(lengths),
        **{k: LAST_TIMINGS[k] for k in ("resets_s", "rollout_s", "records_s")},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, default=1)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--slots", default="800,2400,9600")
    ap.add_argument("--difficulty", default="hard")
    ap.add_argument("--max-steps", type=int, default=10_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    import jax

    jax.config.update("jax_threefry_partitionable", False)  # the release's PRNG mode
    dev = jax.devices()[0]
    info = dict(jax=jax.__version__, device=getattr(dev, "device_kind", str(dev)))
    count_compiles()
    t = time.perf_counter()
    stack = synthetic_stack(args.difficulty, synthetic_weights(args.budgets, args.seeds))
    cells = len(stack[0])
    info.update(cells=cells, build_s=time.perf_counter() - t, difficulty=args.difficulty)
    print(json.dumps(info), flush=True)
    rows = []
    for b in (int(s) for s in args.slots.split(",")):
        episodes = max(1, b // cells)
        kw = dict(difficulty=args.difficulty, episodes=episodes, max_steps=args.max_steps)
        cold = one_call(stack, batch=b, **kw)
        warm = one_call(stack, batch=b, **kw)
        row = dict(slots=b, episodes_per_cell=episodes, cold_s=cold["wall_s"], **warm)
        row["peak_bytes"] = peak_bytes()
        row["cold_compiles"] = cold["xla_compiles"]
        row["cold_compile_s"] = cold["xla_compile_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:  # after every layout: a run cut at its limit keeps the rest
            args.json.write_text(json.dumps(dict(info=info, rows=rows), indent=1))


if __name__ == "__main__":
    main()
