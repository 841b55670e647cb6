"""Benchmark: a researcher's first command, `alem-eval demo`, cold and warm (not a test).

Runs `alem-eval demo` (its defaults: the four bundled demo cells, fast protocol, 8 episodes
of at most 300 steps each, report with figures, leaderboard) in a fresh process each time,
offline (``HF_HUB_OFFLINE=1``), from an empty directory:

1. **cold**: empty alem-eval cache and empty JAX compilation cache, as after a fresh
   install (the environment's texture cache, built once by ``scripts/bootstrap.sh``, is
   kept: it belongs to the install);
2. **warm**: the compilation cache of (1), a new output directory (so every episode is
   played again; only compiling is saved);
3. **rerun**: the same command as (2) again (the scores are read back from its results).

It prints the wall times and the scores, and with ``--write`` replaces the ``first-hour``
block of BENCHMARKS.md.

    .venv/bin/python bench/first_hour.py [--write] [-- extra demo arguments]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks_md import write_block  # noqa: E402  (a sibling: bench/ is sys.path[0])


def cli_env(cache: Path, jax_cache: Path) -> dict[str, str]:
    """A fresh user's environment: these caches only, offline, no inherited JAX settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "ALEM_EVAL_"))}
    env.update(ALEM_EVAL_CACHE=str(cache), ALEM_EVAL_JAX_CACHE=str(jax_cache))
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(cache / "hf-home"))
    return env


def run_cli(
    args: list[str], cwd: Path, cache: Path, jax_cache: Path
) -> tuple[float, subprocess.CompletedProcess]:
    """``alem-eval ARGS`` in a fresh process: (wall time in s, the finished process); exits
    with its stderr if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "alem_eval", *args],
        cwd=cwd,
        env=cli_env(cache, jax_cache),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"alem-eval {args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return wall, proc


def run_demo(cwd: Path, cache: Path, jax_cache: Path, out: str, extra: list[str]) -> float:
    args = ["demo", "--out", out, "--results", str(cwd / out / "results"), *extra]
    wall, proc = run_cli(args, cwd, cache, jax_cache)
    done = [line for line in proc.stderr.splitlines() if line.startswith("done in")]
    print(f"{out}: {wall:.1f} s wall; the command says: {done[-1] if done else '?'}")
    return wall


def run_render(cwd: Path, cache: Path, jax_cache: Path) -> tuple[float, int]:
    """``alem-eval render`` of the IPPO demo cell (300 steps) in a fresh process: wall time
    and GIF size in bytes (its step program is not among the demo's, so it compiles)."""
    args = ["render", "demo/ippo/easy/0", "--source", "demo", "--max-steps", "300"]
    wall, _ = run_cli([*args, "--out", "ippo.gif"], cwd, cache, jax_cache)
    print(f"render: {wall:.1f} s wall")
    return wall, (cwd / "ippo.gif").stat().st_size


def untrained_scores(root: Path, cache: Path, jax_cache: Path) -> dict[str, dict[str, float]]:
    """The same protocol on cells of the demo sizes with their initial weights
    (``scripts/make_demo_cells.py --untrained``), warm compilation cache: what training
    bought. {algorithm: {label: mean in percent}}."""
    from alem_eval.analysis.metrics import HEADLINE_METRICS

    cells = root / "untrained-cells"
    script = REPO / "scripts" / "make_demo_cells.py"
    subprocess.run(
        [sys.executable, str(script), "--untrained", str(cells)],
        env=cli_env(cache, jax_cache),
        check=True,
    )
    args = ["score", "untrained", "--source", str(cells), "--episodes", "8"]
    args += ["--max-steps", "300", "--format", "json", "--results", str(root / "untrained-results")]
    _, proc = run_cli(args, root, cache, jax_cache)
    table: dict[str, dict[str, float]] = {}
    for record in json.loads(proc.stdout):
        means = record["aggregate"]
        table[record["algorithm"]] = {
            m.label: 100 * means[m.key] for m in HEADLINE_METRICS if m.key in means
        }
    return table


def headline(out: Path) -> dict[str, dict[str, float]]:
    """{algorithm: {label: mean in percent}} from the demo report's stats.json."""
    from alem_eval.analysis.metrics import metric_info

    stats = json.loads((out / "report" / "stats.json").read_text())
    table: dict[str, dict[str, float]] = {}
    for row in stats["headline"]:
        info = metric_info(row["metric"])
        table.setdefault(row["algorithm"], {})[info.label] = 100 * row["mean"][0]
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="record the results in BENCHMARKS.md")
    ap.add_argument("extra", nargs="*", help="more `alem-eval demo` arguments (after --)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="first-hour-") as tmp:
        root = Path(tmp)
        cwd, cache, jax_cache = root / "work", root / "cache", root / "jax-cache"
        cwd.mkdir()
        times = {
            "cold": run_demo(cwd, cache, jax_cache, "cold", args.extra),
            "warm": run_demo(cwd, cache, jax_cache, "warm", args.extra),
            "rerun": run_demo(cwd, cache, jax_cache, "warm", args.extra),
        }
        render_s, gif_bytes = run_render(cwd, cache, jax_cache)
        scores = headline(cwd / "cold")
        untrained = untrained_scores(root, cache, jax_cache)
        figures = sorted(p.name for p in (cwd / "cold" / "report" / "figures").iterdir())
    for name, t in times.items():
        print(f"{name:>6}: {t:6.1f} s")
    labels = ["Total%", "Base%", "Coord%", "Ach%"]
    lines = [
        f"| {a} | " + " | ".join(f"{s.get(k, float('nan')):.2f}" for k in labels) + " |"
        for a, s in scores.items()
    ]
    before = [
        f"| {a} (initial weights) | "
        + " | ".join(f"{s.get(k, float('nan')):.2f}" for k in labels)
        + " |"
        for a, s in untrained.items()
    ]
    print("\n".join(lines + before))
    if not args.write:
        return
    demo_args = " ".join(args.extra) or "(defaults: 8 episodes ≤ 300 steps)"
    text = f"""## First hour: `alem-eval demo`

Measured by `bench/first_hour.py --write` on {date.today().isoformat()}: `alem-eval demo`
{demo_args}, each run a fresh process, offline (`HF_HUB_OFFLINE=1`), from an empty
directory. Machine: {platform.machine()}, {os.cpu_count()} cores, Python
{platform.python_version()}; load average before the run {load:.2f} (the machine is shared).

| run | what is cached | wall time |
| --- | --- | ---: |
| cold (a fresh install) | nothing (empty alem-eval and JAX compilation caches) | {times["cold"]:.0f} s |
| warm | the compiled programs of the cold run; new output directory | {times["warm"]:.0f} s |
| rerun | the same command again: the scores are read back | {times["rerun"]:.0f} s |
| then `alem-eval render demo/ippo/easy/0 --source demo --max-steps 300 --out ippo.gif` | its step program compiles (not the demo's) | {render_s:.0f} s ({gif_bytes / 2**20:.1f} MiB GIF) |

Target: ≤ 2 min cold on this 2-core CPU. Each run verifies the four bundled cells, scores
them in one compiled rollout, writes `report/` ({len(figures)} PNG figures, stats.json,
report.md; runs = episodes), `leaderboard.md`, and prints both tables. The cold run's time
is mostly tracing and compiling the Alem step once for all four algorithms (see the
mixed-teams block); the environment's texture cache (built once by `scripts/bootstrap.sh`)
was already there.

Scores of that run (fast protocol on easy, mean over the episodes, percent), and below
them the same protocol on cells of the same sizes with their initial weights
(`scripts/make_demo_cells.py --untrained`): what the 491,520 training steps bought.

| algorithm | {" | ".join(labels)} |
| --- | {" | ".join("---:" for _ in labels)} |
{chr(10).join(lines)}
{chr(10).join(before)}
"""
    write_block("first-hour", text)
    print("wrote the first-hour block of BENCHMARKS.md")


if __name__ == "__main__":
    main()
