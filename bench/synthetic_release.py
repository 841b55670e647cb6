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
        [--max-steps 10000] [--batches default,400] [--json FILE]
    .venv/bin/python bench/synthetic_release.py --render FILE [--write]
    .venv/bin/python bench/synthetic_release.py --at-cap [--difficulties easy,medium,hard]
        [--slice-chunks 2] [--json FILE]

``--at-cap``: episodes that run to the cap, as a policy that survives makes them (the
env's god mode keeps the agents alive; ``bench/at_cap.py`` says why that is an honest
stand-in for the cost): each difficulty's call is started at the release's layout and
stopped after ``--slice-chunks`` compiled calls past the first, and the whole release's
rollout time at the cap is projected from the steady rates (a projection, said so).

Meant for a GPU (the device tool's machines run their own image's jax, not the pin: the
script sets the release's PRNG mode itself). There, with alem-env 0.1.0's wheel in an
ignored ``.whl/`` carried along: ``pip install --no-deps --target /tmp/site .whl/*.whl``,
``PYTHONPATH=/tmp/site ALEM_EVAL_COMMIT=<hash> python3 bench/synthetic_release.py --json
$OUT/r.json``. On an H200 the first pass took 338 s and the weights 37 s (built on the host):
leave room for both in the time limit. ``--render`` turns a run's ``--json`` into the
BENCHMARKS.md block (``--write`` replaces it there), so the numbers there are the file's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DIFFICULTIES = ("easy", "medium", "hard")
RELEASED_ENV = {"NUM_COMM_CHANNELS": 4}


def synthetic_weights(budgets: int, seeds: int) -> dict:
    """Fresh weights of each synthetic (budget, algorithm, seed), its own key each; every
    difficulty's cell of that triple reuses them (the network does not depend on it)."""
    import jax

    from alem_eval.algorithms.registry import all_algorithms
    from alem_eval.algorithms.train_config import training_run_config
    from alem_eval.model.networks import build_network

    out = {}
    host = jax.devices("cpu")[0]  # built where they will be read from: the host
    for b in range(budgets):
        for a, algo in enumerate(all_algorithms()):
            for s in range(seeds):
                cfg = training_run_config(
                    algo.name, difficulty="easy", seed=s, overrides=RELEASED_ENV
                )
                with jax.default_device(host):
                    key = jax.random.PRNGKey(1000 * b + 100 * a + s)
                    out[b, algo.name, s] = jax.device_get(build_network(cfg).init_variables(key))
    return out


def synthetic_stack(difficulty: str, weights: dict):
    """Configs and weights of one difficulty's synthetic cells (budget, algorithm, seed)."""
    from alem_eval.algorithms.train_config import training_run_config

    cfgs = [
        training_run_config(algo, difficulty=difficulty, seed=s, overrides=RELEASED_ENV)
        for _, algo, s in weights
    ]
    return cfgs, list(weights.values())


COMPILES = {"n": 0, "s": 0.0}  # every XLA compile in this process (eager ones too)


def count_compiles() -> None:
    import jax

    def listen(event: str, seconds: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            COMPILES["n"] += 1
            COMPILES["s"] += seconds

    jax.monitoring.register_event_duration_secs_listener(listen)


def release_call(cfgs, weights, difficulty: str, episodes: int, max_steps: int, batch, **kw):
    """One difficulty's call, as ``score`` makes it: ``run_stack``, fast protocol."""
    from alem_eval.evaluate.rollout import run_stack

    return run_stack(
        cfgs,
        weights,
        protocol="fast",
        eval_difficulty=difficulty,
        num_episodes=episodes,
        max_steps=max_steps,
        batch=batch,
        **kw,
    )


def score_release(stacks, *, episodes: int, max_steps: int, batch: int | None) -> dict:
    """One pass over the release: a ``run_stack`` call per difficulty."""
    from alem_eval.evaluate.group import LAST_TIMINGS
    from alem_eval.evaluate.settings import slots_per_team

    t = time.perf_counter()
    live = slot_steps = 0
    lengths: list[int] = []
    slots = 0
    parts = dict.fromkeys(("resets_s", "rollout_s", "records_s"), 0.0)
    for difficulty, (cfgs, weights) in stacks.items():
        t_call, before = time.perf_counter(), dict(COMPILES)
        res = release_call(cfgs, weights, difficulty, episodes, max_steps, batch)
        for k in parts:  # the evaluator's own split of its last group
            parts[k] += LAST_TIMINGS[k]
        call = dict(
            difficulty=difficulty,
            wall_s=time.perf_counter() - t_call,
            xla_compiles=COMPILES["n"] - before["n"],
            xla_compile_s=COMPILES["s"] - before["s"],
        )
        print(json.dumps({**call, **LAST_TIMINGS}), flush=True)  # a cut run keeps these
        live += res.live_steps
        slot_steps += res.slot_steps
        lengths += [int(r["episode_length"]) for recs in res.records for r in recs]
        slots = max(slots, slots_per_team(len(cfgs), episodes, batch) * len(cfgs))
    wall = time.perf_counter() - t
    return dict(
        wall_s=wall,
        **parts,
        setup_s=wall - sum(parts.values()),  # checks, weights staged, program looked up
        live=live,
        slot_steps=slot_steps,
        episodes=len(lengths),
        min_len=min(lengths),
        max_len=max(lengths),
        mean_len=sum(lengths) / len(lengths),
        at_cap=sum(n >= max_steps for n in lengths),
        slots=slots,
    )


def commit() -> str:
    """The measured tree's commit (the device tool sends no .git: ALEM_EVAL_COMMIT then)."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("ALEM_EVAL_COMMIT", "commit not recorded")


def peak_bytes() -> int | None:
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def render(path: Path) -> str:
    """The BENCHMARKS.md block of a saved run."""
    run = json.loads(path.read_text())
    info = run["info"]
    table = [
        "| layout (slots) | first pass s (compile s) | second pass s | setup / resets / "
        "rollout / records s | utilisation | live env-steps/s | peak device memory |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for r in run["rows"]:
        parts = " / ".join(
            f"{r[k]:.1f}" if k in r else "-"
            for k in ("setup_s", "resets_s", "rollout_s", "records_s")
        )
        peak = f"{r['peak_bytes'] / 2**30:.1f} GiB" if r.get("peak_bytes") else "-"
        table.append(
            f"| {r['layout']} ({r['slots']} per difficulty) | {r['cold_s']:.0f} "
            f"({r['compile_s']:.0f}) | {r['wall_s']:.1f} | {parts} | "
            f"{r['utilisation']:.3f} ({r['live']:,}/{r['slot_steps']:,}) | "
            f"{r['live_sps']:,.0f} | {peak} |"
        )
    r0 = run["rows"][0]
    lines = [
        "## The whole release on a GPU",
        "",
        f"Measured by `bench/synthetic_release.py` on {run.get('date', 'the run date')} "
        f"({run.get('commit', 'commit not recorded')}): "
        f"{info['cells']} synthetic cells (2 budgets x 4 algorithms x 3 difficulties x 5 "
        "seeds, released network sizes, fresh weights), "
        f"{info['episodes']} episodes each ({r0['episodes']:,} episodes), fast protocol, "
        f"cap {info['max_steps']:,}, scored as `score` scores them (one call per "
        f"difficulty). Device: {info['device']} ({info['backend']}), jax {info['jax']} "
        f"(the machine's image, not the pin; release PRNG mode), Python {info['python']}, "
        f"{info['cores']} host cores. Episode lengths {r0['min_len']}-{r0['max_len']} (mean "
        f"{r0['mean_len']:.0f}, {r0['at_cap']} at the cap): random policies end their "
        "episodes early, so the cap never binds. The first pass includes tracing and "
        "compiling (compile s: the trace and compile of the evaluator's four programs: "
        "reset, score, start and advance of the rollout); the second is the steady state.",
        "",
        *table,
    ]
    return "\n".join(lines) + "\n" + run.get("note", "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budgets", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=10_000)
    ap.add_argument("--batches", default="default,400")
    ap.add_argument("--difficulties", default=",".join(DIFFICULTIES))
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--render", type=Path, help="print the BENCHMARKS.md block of a --json")
    ap.add_argument("--write", action="store_true", help="with --render: update BENCHMARKS.md")
    ap.add_argument(
        "--at-cap",
        action="store_true",
        help="episodes that run to the cap (god mode keeps the agents alive): a slice of "
        "each difficulty's call, then the whole release's time projected (bench/at_cap.py)",
    )
    ap.add_argument("--slice-chunks", type=int, default=2, help="--at-cap: calls timed")
    ap.add_argument("--check-batch", type=int, default=64, help="--at-cap: god-mode check")
    ap.add_argument("--check-steps", type=int, default=32, help="--at-cap: god-mode check")
    args = ap.parse_args()
    if args.render:
        run = json.loads(args.render.read_text())
        if run.get("mode") == "at-cap":
            from at_cap import render as render_at_cap

            backend = run["info"]["backend"]
            text = render_at_cap(run)
            block = "release-at-cap" + ("" if backend == "cpu" else f"-{backend}")
        else:
            text, block = render(args.render), "synthetic-release"
        print(text)
        if args.write:
            from benchmarks_md import write_block

            write_block(block, text)
        return

    import jax

    # The PRNG mode the release was made with (jax 0.4.38's default; newer jax, as on a
    # device image that cannot take the pinned wheels, defaults to the other one).
    jax.config.update("jax_threefry_partitionable", False)
    from alem_eval.evaluate.programs import COMPILE_STATS
    from alem_eval.evaluate.settings import default_batch

    dev = jax.devices()[0]
    info = dict(
        jax=jax.__version__,
        backend=jax.default_backend(),
        device=getattr(dev, "device_kind", str(dev)),
        python=platform.python_version(),
        cpu=platform.processor() or platform.machine(),
        cores=os.cpu_count(),
        default_batch=default_batch(),
    )
    when = dict(date=str(date.today()), commit=commit())
    print(json.dumps(info), flush=True)
    if args.at_cap:
        from at_cap import run as run_at_cap

        run_at_cap(args, info, when)
        return
    count_compiles()
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
        n_stats = len(COMPILE_STATS)
        cold = score_release(stacks, episodes=args.episodes, max_steps=args.max_steps, batch=batch)
        stats = COMPILE_STATS[n_stats:]
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
            args.json.write_text(json.dumps(dict(**when, info=info, rows=rows), indent=1))


if __name__ == "__main__":
    main()
