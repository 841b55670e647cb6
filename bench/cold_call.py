"""Benchmark: the cold first ``alem-eval score`` of one small cell, accounted (not a test).

Each run is a fresh process with an empty JAX compilation cache and an empty warm-start
store (``ALEM_EVAL_JAX_CACHE`` at a new temporary directory: the traced programs saved by
``jax.export`` live beside the compiled ones) and an empty alem-eval cache
(``ALEM_EVAL_CACHE``: no memoised checkpoint hash) and results store, so nothing of an
earlier run is reused. The process runs ``alem-eval score`` in-process
(``alem_eval.cli.app.main``) on one cell and splits its wall time, exclusively (every second
counted once), into:

* interpreter start and Python imports (the modules the score command loads, imported
  first; compiles that happen while importing count as eager dispatch);
* per compiled program of the evaluator (reset, score, start, advance): its Python trace
  (with the lowering and the ``jax.export`` serialisation: everything before the XLA
  compile) and its XLA compile (``programs.COMPILE_STATS``);
* eager dispatch: every other XLA compile (eager operations and small jitted helpers
  compiled on first use), counted and timed through JAX's monitoring events
  (``/jax/core/compile/{jaxpr_trace,jaxpr_to_mlir_module,backend_compile}_duration``),
  named through JAX's compile log;
* weight staging (restoring the checkpoint, hashing it, stacking the weights), shape
  checks (the checkpoint's metadata against the network, the policy's variables, the
  env version and teams), running the compiled programs (resets, rollout, scores and
  records), the results store;
* host work: the remainder (CLI, source listing, config parsing, printing, process exit).

Process CPU time is recorded beside wall time (the machine may be shared: wall time
then stretches with the load, CPU time much less).

    .venv/bin/python bench/cold_call.py [--source demo] [--cell demo/ippo-rnn/easy/seed0]
        [--episodes 8] [--max-steps 300] [--runs 2] [--json FILE]
    .venv/bin/python bench/cold_call.py --render FILE [--before FILE] [--write]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)
# The modules `alem-eval score` loads on its way, imported before the call so that their
# import is timed as such (any still imported during the call are listed in the result).
PRE_IMPORTS = (
    "alem_eval.cli.app",
    "alem_eval.cli.commands.score",
    "alem_eval.scoring.score",
    "alem_eval.evaluate.rollout",
    "alem_eval.model.loader",
    "alem_eval.model.checkpoint",
    "alem_eval.core.hashmemo",
    "alem_eval.analysis.results",
    "alem_eval.hub.sources",
    "alem_eval.hub.hubsource",
    "alem_eval.hub.local",
    "alem_eval.hub.selectors",
    "alem_eval.api.demo",
    "alem_eval.envs.eval_env",
    "orbax.checkpoint",
    "jax.export",
    "pandas",
    "pyarrow",
)
PHASES = {  # (module, attribute) wrapped in the child -> the part its time goes to
    ("alem_eval.model.loader", "load_cell"): "weight staging",
    ("alem_eval.model.checkpoint", "checkpoint_hash"): "weight staging",
    ("alem_eval.evaluate.group", "stack_trees"): "weight staging",
    ("alem_eval.model.checkpoint", "validate"): "shape checks",
    ("alem_eval.evaluate.rollout", "policy_variables"): "shape checks",
    ("alem_eval.evaluate.rollout", "check_team"): "shape checks",
    # scoring imports check_env_version from settings at call time; run_teams its own name.
    ("alem_eval.evaluate.settings", "check_env_version"): "shape checks",
    ("alem_eval.evaluate.rollout", "check_env_version"): "shape checks",
    ("alem_eval.evaluate.group", "reset_worlds"): "run: resets",
    ("alem_eval.evaluate.group", "_drive"): "run: rollout",
    ("alem_eval.evaluate.group", "team_records"): "run: scores and records",
}
PRIORITY = {"program": 3, "eager": 2, "phase": 1}


# ----------------------------------------------------------------------------------------
# Child: one cold call
# ----------------------------------------------------------------------------------------
class Timeline:
    """Intervals of the call (wall and process CPU stamps) and the compile events."""

    def __init__(self) -> None:
        self.intervals: list[dict] = []  # kind, label, t0, t1 (perf_counter)
        self.stamps: list[tuple[float, float]] = []  # (perf_counter, process_time)
        self.compiles: list[dict] = []  # backend compiles: t1, s, in_program
        self.names: list[str] = []  # compiled function names, in order (JAX's log)
        self.depth = 0  # > 0 while a program of the evaluator is being built

    def stamp(self) -> float:
        t, c = time.perf_counter(), time.process_time()
        self.stamps.append((t, c))
        return t

    def on_event(self, event: str, seconds: float, **_) -> None:
        if event not in COMPILE_EVENTS:
            return
        t1 = self.stamp()
        kind = "program" if self.depth else "eager"
        if kind == "eager":
            self.intervals.append(dict(kind="eager", label=event, t0=t1 - seconds, t1=t1))
        if event.endswith("backend_compile_duration"):  # JAX logs its name just before
            name = self.names[-1] if self.names else "?"
            self.compiles.append(dict(t1=t1, s=seconds, in_program=bool(self.depth), name=name))

    def wrap(self, fn, kind: str, label: str):
        import functools

        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t0 = self.stamp()
            self.depth += kind == "program"
            try:
                return fn(*args, **kwargs)
            finally:
                self.depth -= kind == "program"
                self.intervals.append(dict(kind=kind, label=label, t0=t0, t1=self.stamp()))

        return timed


def exclusive_split(tl: Timeline, t0: float, t1: float) -> dict[str, list[float]]:
    """Wall and CPU seconds of [t0, t1] by part: at each instant the covering interval of
    the highest priority (program > eager compile > phase), the innermost phase among
    phases; nothing covering: host work. CPU at an unstamped instant is interpolated."""
    import bisect

    stamps = sorted(tl.stamps)
    ts = [s[0] for s in stamps]

    def cpu_at(t: float) -> float:
        i = bisect.bisect_left(ts, t)
        if i < len(ts) and ts[i] == t:
            return stamps[i][1]
        if i == 0:
            return stamps[0][1]
        if i == len(ts):
            return stamps[-1][1]
        (ta, ca), (tb, cb) = stamps[i - 1], stamps[i]
        return ca + (cb - ca) * (t - ta) / (tb - ta)

    ivs = [iv for iv in tl.intervals if iv["t1"] > t0 and iv["t0"] < t1]
    cuts = sorted({t0, t1, *(max(t0, min(t1, x)) for iv in ivs for x in (iv["t0"], iv["t1"]))})
    out: dict[str, list[float]] = {}
    for a, b in itertools.pairwise(cuts):
        mid = (a + b) / 2
        cover = [iv for iv in ivs if iv["t0"] <= mid < iv["t1"]]
        if cover:
            iv = max(cover, key=lambda v: (PRIORITY[v["kind"]], v["t0"], -v["t1"]))
            part = {"eager": "eager dispatch"}.get(iv["kind"], iv["label"])
        else:
            part = "host work"
        acc = out.setdefault(part, [0.0, 0.0])
        acc[0] += b - a
        acc[1] += cpu_at(b) - cpu_at(a)
    return out


def child(args) -> int:
    import time as _t

    started_wall = _t.time()
    tl = Timeline()
    t_start = tl.stamp()
    from alem_eval.core.runtime import enable_compilation_cache

    cache = enable_compilation_cache()  # as cli.main does first: before JAX is imported
    export_dir = cache / "alem-eval-exported"
    empty = not any(cache.iterdir())
    import importlib
    import logging

    import jax

    jax.monitoring.register_event_duration_secs_listener(tl.on_event)

    class Names(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            msg = record.getMessage()
            if msg.startswith("Finished XLA compilation of "):
                tl.names.append(msg[len("Finished XLA compilation of ") :].split(" in ")[0])

    log = logging.getLogger("jax._src.dispatch")
    log.setLevel(logging.DEBUG)
    log.addHandler(Names(logging.DEBUG))
    log.propagate = False
    for name in PRE_IMPORTS:
        importlib.import_module(name)
    importlib.import_module("alem_eval.cli.app")._register()  # every command, as main() does
    from alem_eval.envs.loader import import_alem

    import_alem()
    before = set(sys.modules)
    t_imports = tl.stamp()
    n_import_compiles = len(tl.compiles)

    from alem_eval.evaluate import programs
    from alem_eval.evaluate.programs import COMPILE_STATS

    for (mod, attr), part in PHASES.items():
        m = importlib.import_module(mod)
        setattr(m, attr, tl.wrap(getattr(m, attr), "phase", part))
    from alem_eval.analysis.results import ResultsStore

    ResultsStore.write = tl.wrap(ResultsStore.write, "phase", "results store")
    builds: list[dict] = []
    orig_build = programs._Compiled._build

    def build(self, *a):
        n = len(COMPILE_STATS)
        out = tl.wrap(orig_build, "program", f"program:{self.label}")(self, *a)
        for st in COMPILE_STATS[n:]:
            builds.append(dict(program=st.program, trace_s=st.trace_s, compile_s=st.compile_s))
        return out

    programs._Compiled._build = build  # type: ignore[method-assign]

    from alem_eval.cli.app import main as cli_main

    argv = ["score", args.cell, "--source", args.source, "--results", args.results]
    argv += ["--episodes", str(args.episodes), "--max-steps", str(args.max_steps)]
    argv += ["--format", "json"]
    t_call = tl.stamp()
    code = cli_exit_code(cli_main, argv)
    t_end = tl.stamp()
    split = exclusive_split(tl, t_call, t_end)
    # a program's build interval is split into its trace and its XLA compile
    per_program: dict[str, dict[str, float]] = {}
    for b in builds:
        p = per_program.setdefault(b["program"], dict(trace_s=0.0, compile_s=0.0, builds=0))
        p["trace_s"] += b["trace_s"]
        p["compile_s"] += b["compile_s"]
        p["builds"] += 1
    lazy = sorted({m.split(".")[0] for m in set(sys.modules) - before})
    eager = [c for c in tl.compiles if not c["in_program"]]
    import collections

    names = collections.Counter(c["name"] for c in eager[n_import_compiles:])
    import_names = collections.Counter(c["name"] for c in tl.compiles[:n_import_compiles])
    result = dict(
        exit_code=code,
        started_wall=started_wall,
        imports=[t_imports - t_start, _cpu_between(tl, t_start, t_imports)],
        import_split=exclusive_split(tl, t_start, t_imports),
        import_compiles=n_import_compiles,
        import_compile_s=sum(c["s"] for c in tl.compiles[:n_import_compiles]),
        call=[t_end - t_call, _cpu_between(tl, t_call, t_end)],
        between=[t_call - t_imports, _cpu_between(tl, t_imports, t_call)],
        split=split,
        programs=per_program,
        eager_compiles=len(eager) - n_import_compiles,
        eager_compile_s=sum(c["s"] for c in eager[n_import_compiles:]),
        program_compiles=len(tl.compiles) - len(eager),
        top_compiled=names.most_common(8),
        top_compiled_importing=import_names.most_common(4),
        program_compile_names=[c["name"] for c in tl.compiles if c["in_program"]],
        lazily_imported=lazy,
        cache_was_empty=empty,
        exported_programs=len(list(export_dir.glob("*"))) if export_dir.is_dir() else 0,
        jax=jax.__version__,
        backend=jax.default_backend(),
        devices=jax.local_device_count(),
        cpu_at_end=tl.stamps[-1][1],
        ended_wall=_t.time(),
    )
    Path(args.out).write_text(json.dumps(result, indent=1))
    from alem_eval.cli.app import end_process

    end_process(0)  # the process ends as the `alem-eval` program's does


def cli_exit_code(cli_main, argv: list[str]) -> int:
    """Run the CLI's ``main`` in this process -> its exit status."""
    try:
        cli_main(argv)
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


def _cpu_between(tl: Timeline, a: float, b: float) -> float:
    stamps = dict(tl.stamps)
    return stamps[b] - stamps[a]


# ----------------------------------------------------------------------------------------
# Parent: fresh processes, then the summary
# ----------------------------------------------------------------------------------------
def isolated_env(jax_cache: Path, alem_cache: Path) -> dict[str, str]:
    """This process's environment for a child that reuses nothing of an earlier run: its
    own compilation cache and warm-start store (``ALEM_EVAL_JAX_CACHE``) and alem-eval
    cache, and none of our JAX cache settings or XLA flags."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))
        and k not in ("ALEM_EVAL_NO_EXPORT", "XLA_FLAGS")
    }
    env.update(
        ALEM_EVAL_JAX_CACHE=str(jax_cache),
        ALEM_EVAL_CACHE=str(alem_cache),
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    return env


def run_child(cmd: list[str], env: dict[str, str], out: Path) -> tuple[dict, float, float, float]:
    """Run a child that writes its result to ``out`` -> (its result, with the last line of
    its stderr as ``cli_tail``; start time; process wall s; process CPU s). Exits with the
    child's stderr when it or its score failed."""
    before = os.times()
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    after = os.times()
    if proc.returncode != 0 or not out.is_file():
        raise SystemExit(f"cold call failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    res = json.loads(out.read_text())
    if res["exit_code"] != 0:
        raise SystemExit(f"score exited with {res['exit_code']}:\n{proc.stderr[-3000:]}")
    res["cli_tail"] = proc.stderr.strip().splitlines()[-1:]
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return res, t0, wall, cpu


def run_cold(args, workdir: Path) -> dict:
    """One fresh process with empty caches -> its accounted call."""
    for name in ("jax-cache", "alem-eval-cache", "results"):
        (workdir / name).mkdir()
    env = isolated_env(workdir / "jax-cache", workdir / "alem-eval-cache")
    out = workdir / "call.json"
    cmd = [sys.executable, __file__, "--child", "--out", str(out), "--results"]
    cmd += [str(workdir / "results"), "--source", args.source, "--cell", args.cell]
    cmd += ["--episodes", str(args.episodes), "--max-steps", str(args.max_steps)]
    res, t0, wall, res_cpu = run_child(cmd, env, out)
    res["process_wall_s"] = wall
    res["process_cpu_s"] = res_cpu
    res["startup_s"] = res["started_wall"] - t0
    res["exit_s"] = t0 + wall - res["ended_wall"]
    return res


def parts(run: dict) -> list[tuple[str, float, float | None]]:
    """(part, wall s, CPU s) rows of one run, summing to the process wall time."""
    split = {k: list(v) for k, v in run["split"].items()}
    rows: list[tuple[str, float, float | None]] = [
        ("interpreter start", run["startup_s"], None),
        ("Python imports", *run["import_split"].get("host work", [0.0, 0.0])),
    ]
    for name, p in sorted(run["programs"].items()):
        wall, cpu = split.pop(f"program:{name}", [0.0, 0.0])
        share = p["trace_s"] / max(p["trace_s"] + p["compile_s"], 1e-9)
        rows.append((f"program `{name}`: Python trace", wall * share, cpu * share))
        rows.append((f"program `{name}`: XLA compile", wall * (1 - share), cpu * (1 - share)))
    eager = split.pop("eager dispatch", [0.0, 0.0])
    rows.append(
        ("eager dispatch (during imports)", *run["import_split"].get("eager dispatch", [0.0, 0.0]))
    )
    rows.append(("eager dispatch (during the call)", eager[0], eager[1]))
    for name in (
        "weight staging",
        "shape checks",
        "run: resets",
        "run: rollout",
        "run: scores and records",
        "results store",
    ):
        wall, cpu = split.pop(name, [0.0, 0.0])
        rows.append((name, wall, cpu))
    host = split.pop("host work", [0.0, 0.0])
    for wall, cpu in split.values():  # (none expected)
        host = [host[0] + wall, host[1] + cpu]
    host[0] += run["between"][0]
    rows.append(("host work (remainder: CLI, listing, config, printing)", host[0], host[1]))
    # CPU: the process's total less what the child counted (so with the start's, ~0.1 s)
    exit_cpu = run["process_cpu_s"] - run["cpu_at_end"]
    rows.append(("process exit (after the command returned)", run["exit_s"], exit_cpu))
    return rows


def _fastest(saved: dict) -> dict:
    return min(saved["runs"], key=lambda r: r["process_wall_s"])


def comparison_table(before: dict, after: dict) -> list[str]:
    """Rows of the same split for a run before a change and one after it (a part that
    one run lacks, e.g. a program it did not build, is 0 there)."""
    b = {name: (wall, cpu) for name, wall, cpu in parts(before)}
    a = {name: (wall, cpu) for name, wall, cpu in parts(after)}
    table = [
        "| part | before: wall s | before: CPU s | after: wall s | after: CPU s | after: share of CPU |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    cpu_total = after["process_cpu_s"]

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    for name in dict.fromkeys([*b, *a]):
        bw, bc = b.get(name, (0.0, 0.0))
        aw, ac = a.get(name, (0.0, 0.0))
        share = "-" if ac is None else f"{100 * ac / cpu_total:.0f}%"
        table.append(f"| {name} | {bw:.1f} | {cell(bc)} | {aw:.1f} | {cell(ac)} | {share} |")
    table.append(
        f"| **total (process)** | **{before['process_wall_s']:.1f}** | "
        f"**{before['process_cpu_s']:.1f}** | **{after['process_wall_s']:.1f}** | "
        f"**{after['process_cpu_s']:.1f}** | 100% |"
    )
    return table


def render(path: Path, before: Path | None = None) -> str:
    saved = json.loads(path.read_text())
    runs, info = saved["runs"], saved["info"]
    best = _fastest(saved)
    total = best["process_wall_s"]
    table = ["| part | wall s | share | process CPU s |", "|---|---:|---:|---:|"]
    for name, wall, cpu in parts(best):
        c = "-" if cpu is None else f"{cpu:.1f}"
        table.append(f"| {name} | {wall:.1f} | {100 * wall / total:.0f}% | {c} |")
    table.append(
        f"| **total (process wall)** | **{total:.1f}** | 100% | {best['process_cpu_s']:.1f} |"
    )
    if before is not None:
        old = json.loads(before.read_text())
        table = comparison_table(_fastest(old), best)
        ratio = best["process_cpu_s"] / _fastest(old)["process_cpu_s"]
        table += [
            "",
            f"Before: {old['commit']} on {old['date']}, load average "
            f"{old['info']['load_before']:.1f} before and {old['info']['load_after']:.1f} "
            f"after; process CPU after / before: **{ratio:.2f}x**.",
        ]
    programs = sum(p["trace_s"] + p["compile_s"] for p in best["programs"].values())
    tops = ", ".join(f"`{n}` {k}" for n, k in best["top_compiled"])
    itops = ", ".join(f"`{n}` {k}" for n, k in best["top_compiled_importing"])
    walls = ", ".join(f"{r['process_wall_s']:.1f}" for r in runs)
    backend = runs[0].get("backend", "cpu")
    device = "" if backend == "cpu" else f" ({backend.upper()}, jax {runs[0].get('jax', '?')})"
    lines = [
        f"## The cold first call, accounted{device}",
        "",
        f"Measured by `bench/cold_call.py` on {saved['date']} ({saved['commit']}): "
        f"`alem-eval score {info['cell']} --source {info['source']} --episodes "
        f"{info['episodes']} --max-steps {info['max_steps']}` (a demo cell, the settings of "
        "`alem-eval demo`), in a fresh process with an empty compilation cache, an empty "
        "warm-start store and an empty alem-eval cache, each run. "
        f"Machine: {info['machine']}; load average {info['load_before']:.1f} before and "
        f"{info['load_after']:.1f} after (shared: wall times stretch with the load, process "
        f"CPU time much less). {len(runs)} cold runs: {walls} s of wall time; the split is "
        f"the fastest run's ({best['process_cpu_s']:.1f} s of process CPU).",
        "",
        *table,
        "",
        f"The evaluator's programs (trace + XLA compile) took {programs:.1f} s. Eager "
        f"dispatch: {best['import_compiles']} XLA compiles while importing "
        f"({best['import_compile_s']:.1f} s of compile) and {best['eager_compiles']} during "
        f"the call ({best['eager_compile_s']:.1f} s of XLA compile; the row adds their trace "
        f"and lowering), outside the {best['program_compiles']} program compiles; during "
        f"the call: {tops}; while importing, most often: {itops}. Modules first imported "
        f"during the call (not in the imports row): {', '.join(best['lazily_imported']) or 'none'}. The run saved "
        f"{best['exported_programs']} traced programs for a warm start.",
    ]
    return "\n".join(lines) + "\n" + saved.get("note", "")


def machine() -> str:
    import platform

    sys.path.insert(0, str(Path(__file__).parent))
    from benchmarks_md import cpu_model

    return f"{cpu_model()}; Python {platform.python_version()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="demo")
    ap.add_argument("--cell", default="demo/ippo-rnn/easy/seed0")
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--runs", type=int, default=2, help="cold processes, one after the other")
    ap.add_argument("--json", type=Path, help="write the runs here")
    ap.add_argument("--render", type=Path, help="print the BENCHMARKS.md block of a --json")
    ap.add_argument("--write", action="store_true", help="with --render: update BENCHMARKS.md")
    ap.add_argument("--before", type=Path, help="with --render: a --json of the run before")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if args.render:
        text = render(args.render, args.before)
        print(text)
        if args.write:
            sys.path.insert(0, str(Path(__file__).parent))
            from benchmarks_md import write_block

            backend = json.loads(args.render.read_text())["runs"][0].get("backend", "cpu")
            write_block("cold-call" + ("" if backend == "cpu" else f"-{backend}"), text)
        return 0
    load_before = os.getloadavg()[0]
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="alem-cold-") as tmp:
            run = run_cold(args, Path(tmp))
        runs.append(run)
        print(
            f"run {i + 1}: {run['process_wall_s']:.1f} s wall, {run['process_cpu_s']:.1f} s CPU",
            flush=True,
        )
        for name, wall, cpu in parts(run):
            c = "" if cpu is None else f" (CPU {cpu:.1f})"
            print(f"  {name:60s} {wall:7.2f}{c}", flush=True)
    info = dict(
        source=args.source,
        cell=args.cell,
        episodes=args.episodes,
        max_steps=args.max_steps,
        machine=machine(),
        load_before=load_before,
        load_after=os.getloadavg()[0],
    )
    from synthetic_release import commit

    saved = dict(date=time.strftime("%Y-%m-%d"), commit=commit(), info=info, runs=runs)
    if args.json:
        args.json.write_text(json.dumps(saved, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
