"""Benchmark: a cold mixed-difficulty ``alem-eval score`` against one cell's (not a test).

A local release of demo cells stands in for ``score '1B/*/*'``: ``--seeds`` cells of each of
the 4 algorithms on each of the 3 difficulties (the bundled demo checkpoints, hard-linked
under ``1B/<algorithm>/<difficulty>/seed<N>``, their ``config.json`` saying the cell's
difficulty and seed), every cell played on its own (training) difficulty. Each run is a
fresh process with empty caches, as ``bench/cold_call.py`` runs one: a new
``ALEM_EVAL_JAX_CACHE`` (compilation cache and warm-start store), ``ALEM_EVAL_CACHE`` and
results directory. The process runs ``alem-eval score`` in-process and reports its
evaluator programs (``programs.COMPILE_STATS``, ``machine.TRACE_COUNTS``) and every XLA
compile (JAX's monitoring events). Printed: per run wall and process CPU time, programs
compiled, and the ratio of the whole selection to the one cell (wall and CPU), each
measured ``--runs`` times, alternating (the machine may be shared: CPU time is the steadier).

With ``--fixtures``, the release is instead the five tiny test fixture cells (4 algorithms
trained on easy, medium and hard: ``tiny/<algorithm>/<difficulty>/seed<N>``, hard-linked from
``ALEM_EVAL_FIXTURES``, default ``../shared/fixtures/hub``) against ``tiny/ippo-rnn/easy/seed0``.

    .venv/bin/python bench/mixed_difficulty.py [--seeds 5] [--episodes 8] [--max-steps 300]
        [--runs 1] [--warm] [--json FILE] [--fixtures]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DIFFICULTIES = ("easy", "medium", "hard")
ONE_CELL = "1B/ippo-rnn/easy/seed0"


def build_release(root: Path, seeds: int) -> int:
    """Demo cells as ``1B/<algorithm>/<difficulty>/seed<N>`` under ``root`` -> cell count."""
    demo = REPO / "alem_eval" / "data" / "demo-cells" / "demo"
    n = 0
    for algo_dir in sorted(p for p in demo.iterdir() if p.is_dir()):
        src = algo_dir / "easy" / "seed0"
        for difficulty in DIFFICULTIES:
            for seed in range(seeds):
                dst = root / "1B" / algo_dir.name / difficulty / f"seed{seed}"
                shutil.copytree(src / "checkpoint", dst / "checkpoint", copy_function=os.link)
                data = json.loads((src / "config.json").read_text())
                data["env_config"]["coordination_difficulty"] = difficulty
                full = data.get("config") or {}
                full.update(
                    TRAINING_COORDINATION_DIFFICULTY=difficulty,
                    EVAL_DIFFICULTIES=[difficulty],
                    SEED=seed,
                )
                (dst / "config.json").write_text(json.dumps(data, indent=1))
                n += 1
    return n


def fixture_release(root: Path) -> int:
    """The tiny fixture cells under ``root`` (hard links) -> cell count."""
    hub = Path(os.environ.get("ALEM_EVAL_FIXTURES", REPO.parent / "shared" / "fixtures" / "hub"))
    cells = sorted(p.parent for p in (hub / "tiny").glob("*/*/*/config.json"))
    for src in cells:
        shutil.copytree(src, root / src.relative_to(hub), copy_function=os.link)
    return len(cells)


def child(args) -> int:
    t_start = time.perf_counter()
    sys.path.insert(0, str(Path(__file__).parent))
    from cold_call import cli_exit_code

    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()  # as cli.main does first
    import jax

    compiles = {"n": 0, "s": 0.0}

    def listen(event: str, seconds: float, **_) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            compiles["n"] += 1
            compiles["s"] += seconds

    jax.monitoring.register_event_duration_secs_listener(listen)
    from alem_eval.cli.app import main as cli_main
    from alem_eval.evaluate import group, rollout
    from alem_eval.evaluate.machine import TRACE_COUNTS

    split = collections.Counter()  # the evaluator's own split, summed over its groups
    run_group = group.run_group

    def timed_group(*a, **kw):
        out = run_group(*a, **kw)
        split.update(group.LAST_TIMINGS, groups=1, live_steps=out[3], slot_steps=out[2])
        return out

    rollout.run_group = timed_group  # type: ignore[assignment]
    from alem_eval.evaluate.programs import COMPILE_STATS

    argv = ["score", *args.select, "--source", args.release, "--results", args.results]
    argv += ["--episodes", str(args.episodes), "--max-steps", str(args.max_steps)]
    argv += ["--format", "json", *(["--batch", str(args.batch)] if args.batch else [])]
    t_call = time.perf_counter()
    code = cli_exit_code(cli_main, argv)
    t_end = time.perf_counter()
    programs: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for st in COMPILE_STATS:
        p = programs[st.program.split(":")[0]]
        p[0] += 1
        p[1] += st.trace_s
        p[2] += st.compile_s
    out = dict(
        exit_code=code,
        imports_s=t_call - t_start,
        call_s=t_end - t_call,
        programs={k: dict(builds=v[0], trace_s=v[1], compile_s=v[2]) for k, v in programs.items()},
        trace_counts=dict(TRACE_COUNTS),
        xla_compiles=compiles["n"],
        xla_compile_s=compiles["s"],
        groups=dict(split),
    )
    Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


def run_one(args, release: Path, select: list[str], cache: Path | None) -> dict:
    """One fresh process scoring ``select`` (an empty cache unless ``cache``)."""
    from cold_call import isolated_env, run_child

    with tempfile.TemporaryDirectory(prefix="alem-mixed-") as tmp:
        work = Path(tmp)
        for name in ("jax-cache", "alem-eval-cache", "results"):
            (work / name).mkdir()
        env = isolated_env(cache or work / "jax-cache", work / "alem-eval-cache")
        out = work / "call.json"
        cmd = [sys.executable, __file__, "--child", "--out", str(out), "--release", str(release)]
        cmd += ["--results", str(work / "results"), "--episodes", str(args.episodes)]
        cmd += ["--max-steps", str(args.max_steps)]
        cmd += [*(["--batch", str(args.batch)] if args.batch else []), "--select", *select]
        res, _, wall, cpu = run_child(cmd, env, out)
    res["wall_s"], res["cpu_s"] = wall, cpu
    return res


def describe(res: dict) -> str:
    """One run in a line: times, XLA compiles, each program's builds, trace and compile."""
    progs = ", ".join(
        f"{k} {v['builds']}x ({v['trace_s']:.1f}+{v['compile_s']:.1f} s)"
        for k, v in res["programs"].items()
    )
    return (
        f"{res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s CPU; {res['xla_compiles']} XLA "
        f"compiles ({res['xla_compile_s']:.1f} s); programs (trace+compile): {progs}; "
        f"traces: {res['trace_counts']}; groups: {res['groups']}"
    )


def layouts(args, batches: list[int]) -> int:
    """One cell at each ``--batch`` in turn, fresh processes sharing one cache."""
    with tempfile.TemporaryDirectory(prefix="alem-release-") as tmp:
        release = Path(tmp) / "release"
        build_release(release, 1)
        cache = Path(tmp) / "jax-cache"
        cache.mkdir()
        for batch in batches:
            args.batch = batch
            res = run_one(args, release, [ONE_CELL], cache)
            print(f"--batch {batch}: {describe(res)}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--runs", type=int, default=1, help="cold pairs, one after the other")
    ap.add_argument("--warm", action="store_true", help="also a warm run of the selection")
    ap.add_argument("--json", type=Path, help="write the runs here")
    ap.add_argument(
        "--fixtures",
        action="store_true",
        help="the five tiny fixture cells (4 algorithms, 3 difficulties) instead of demo copies",
    )
    ap.add_argument(
        "--layouts",
        help="instead: one cell at these --batch values (e.g. 8,4), fresh processes sharing "
        "one cache, cold first: which programs a new layout traces and compiles again",
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--release", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--select", nargs="*", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_release import commit

    load_before = os.getloadavg()[0]
    rows = []
    if args.layouts:
        return layouts(args, [int(b) for b in args.layouts.split(",")])
    with tempfile.TemporaryDirectory(prefix="alem-release-") as tmp:
        release = Path(tmp) / "release"
        cells = fixture_release(release) if args.fixtures else build_release(release, args.seeds)
        one_cell = "tiny/ippo-rnn/easy/seed0" if args.fixtures else ONE_CELL
        for i in range(args.runs):
            for name, select in (("one cell", [one_cell]), (f"{cells} cells", [])):
                res = run_one(args, release, select, None)
                res["run"], res["name"] = i, name
                rows.append(res)
                print(f"run {i + 1} {name}: {describe(res)}", flush=True)
        if args.warm:
            with tempfile.TemporaryDirectory(prefix="alem-warm-") as cache:
                run_one(args, release, [], Path(cache))
                res = run_one(args, release, [], Path(cache))
            res["run"], res["name"] = 0, f"{cells} cells, warm"
            rows.append(res)
            print(f"warm {cells} cells: {res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s CPU")
    one = [r for r in rows if r["name"] == "one cell"]
    many = [r for r in rows if r["name"] == f"{cells} cells"]
    for key in ("wall_s", "cpu_s"):
        ratios = [m[key] / o[key] for o, m in zip(one, many, strict=True)]
        print(f"ratio {key}: " + ", ".join(f"{r:.2f}x" for r in ratios))
    info = dict(
        date=time.strftime("%Y-%m-%d"),
        commit=commit(),
        seeds=args.seeds,
        fixtures=args.fixtures,
        episodes=args.episodes,
        max_steps=args.max_steps,
        batch=args.batch,
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )
    if args.json:
        args.json.write_text(json.dumps(dict(info=info, rows=rows), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
