"""Training throughput with frozen partners against plain self-play, as a ratio from one run.

    .venv/bin/python bench/train_partners.py [--algorithm ippo-rnn] [--partners 'demo/*']
        [--source demo] [--split train] [--focal-slots 1] [--num-envs 64] [--num-steps 64] [--updates 2]
        [--set KEY=VALUE ...] [--markdown BENCHMARKS.md]

Measures the same cell's trainer twice in one process, on the same device, with the same
hyperparameters (by default the demo cells' sizes, ``alem_eval.hub.demo_cells``): once in
plain self-play and once with the partners in the other slots (every partner checkpoint's
greedy policy runs on every env each step; the drawn one's actions are kept), each timed
for ``--updates`` updates after its compilation (``bench/train_throughput.py``'s
``measure``). Prints one JSON line: both rows and ``partners_over_self_play`` (env steps/s
with partners / without).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def main(argv=None) -> None:
    from train_throughput import measure

    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()
    from alem_eval.algorithms.registry import get_algorithm

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--algorithm", default="ippo-rnn")
    ap.add_argument("--partners", action="append", default=None, help="default: 'demo/*'")
    ap.add_argument("--source", default="demo", help="the partners' source")
    ap.add_argument("--split", default="train", help="the partners' split ('' for all)")
    ap.add_argument("--focal-slots", type=int, default=1)
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--updates", type=int, default=2, help="timed updates after compilation")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE trainer override")
    ap.add_argument("--markdown", type=Path, default=None, help="append a table to this file")
    args = ap.parse_args(argv)
    algo = get_algorithm(args.algorithm)
    overrides = {**(algo.demo.overrides if algo.demo else {}), "NUM_MINIBATCHES": 8}
    overrides.update(dict(kv.split("=", 1) for kv in args.set))
    common = dict(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        updates=args.updates,
        seeds=1,
        overrides=overrides,
    )
    plain = measure(algo.name, **common)
    partners = measure(
        algo.name,
        **common,
        partners=tuple(args.partners or ["demo/*"]),
        partners_source=args.source,
        split=args.split or None,
        focal_slots=args.focal_slots,
    )
    ratio = partners["env_steps_per_s"] / plain["env_steps_per_s"]
    row = {
        "algorithm": algo.name,
        "self_play": plain,
        "with_partners": partners,
        "partners_over_self_play": round(ratio, 3),
    }
    print(json.dumps(row), flush=True)
    if args.markdown is not None:
        with open(args.markdown, "a", encoding="utf-8") as fh:
            fh.write(to_markdown(row))


def to_markdown(row: dict) -> str:
    p, s = row["with_partners"], row["self_play"]
    return (
        "\n## Training with frozen partners: throughput\n\n"
        f"`bench/train_partners.py`: {row['algorithm']} at the demo cells' sizes, "
        f"{s['num_envs']} envs x {s['num_steps']} steps, {s['timed_updates']} timed updates "
        f"after compilation, on {s['platform']} ({s['device']}; {os.cpu_count()} cores, "
        f"{platform.machine()}), one run. Partners: {', '.join(p['partners'])} (each runs "
        "its greedy policy on every env each step).\n\n"
        "| training | env steps/s | s / update |\n|---|---|---|\n"
        f"| self-play | {s['env_steps_per_s']:,.0f} | {s['update_s']} |\n"
        f"| with {len(p['partners'])} partners | {p['env_steps_per_s']:,.0f} | "
        f"{p['update_s']} |\n\n"
        f"Ratio (with partners / self-play): **{row['partners_over_self_play']:.2f}**.\n"
    )


if __name__ == "__main__":
    main()
