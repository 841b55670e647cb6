"""Benchmark: what ``score --record`` costs (not a test).

One cell (default: the full-size fixture ``full/ippo-rnn/hard/seed1``: 3 agents, 9,730
observation values each) x ``E`` episodes, fast protocol, scored by the library two ways
(timed in one process after both compiled, alternating, best of ``--repeats``; peak
memory measured with each mode alone in a fresh process):

* **plain** -- ``score_cells`` as ``alem-eval score`` runs it;
* **record** -- the same with ``record_dir`` (every step streamed to the recorder).

Reported: wall times and their ratio (target: recording <= 25% slower),
recorded steps, bytes on disk per cell, per step and per agent-step (and the float32
equivalent), peak resident memory of each process, the observation dtypes chosen.

    .venv/bin/python bench/recording.py [--cell DIR] [--episodes 20] [--max-steps 1024]
        [--repeats 3] [--write]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import textwrap
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CELL = REPO.parent / "shared" / "fixtures" / "hub" / "full" / "ippo-rnn" / "hard" / "seed1"

_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    from alem_eval.core.runtime import enable_compilation_cache
    enable_compilation_cache({cache!r})
    from alem_eval.hub.manifest import Cell
    from alem_eval.scoring.score import ScoreOptions, score_cells
    from alem_eval.hub.sources import open_source

    src = open_source({root!r})
    cells = [Cell.from_id({cell_id!r})]
    opts = ScoreOptions(num_episodes={episodes}, max_steps={max_steps})
    modes = {modes!r}
    walls = {{m: [] for m in modes}}
    steps = {{}}
    for attempt in range({repeats} + 1):  # attempt 0 compiles; modes alternate
        for m in modes:
            out = Path({tmp!r}) / f"rec-{{m}}-{{attempt}}" if m == "record" else None
            t = time.perf_counter()
            scores = score_cells(src, cells, options=opts, record_dir=out)
            walls[m].append(time.perf_counter() - t)
            steps[m] = int(sum(e["episode_length"] for s in scores for e in s.episodes))
    size, dtypes = 0, {{}}
    if "record" in modes:
        root = Path({tmp!r}) / f"rec-record-{repeats}"
        size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        for meta in root.rglob("episode.json"):
            for part in json.loads(meta.read_text()).get("parts", []):
                d = part.get("observations_dtype")
                dtypes[d] = dtypes.get(d, 0) + 1
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT" + json.dumps(dict(walls=walls, steps=steps, size=size, peak=peak,
                                     dtypes=dtypes)))
""")


def child(args, cache: str, tmp: str, modes: tuple[str, ...], repeats: int) -> dict:
    cell_dir = Path(args.cell).resolve()
    code = _CHILD.format(
        repo=str(REPO),
        cache=cache,
        root=str(cell_dir.parents[3]),
        cell_id="/".join(cell_dir.parts[-4:]),
        episodes=args.episodes,
        max_steps=args.max_steps,
        modes=modes,
        repeats=repeats,
        tmp=tmp,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-3000:])
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cell", default=str(DEFAULT_CELL))
    ap.add_argument("--episodes", type=int, default=20)
    ap.add_argument("--max-steps", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="update BENCHMARKS.md")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "jax-cache")
        # Timing: both modes in one process, alternating, best of `repeats` each.
        both = child(args, cache, tmp, ("plain", "record"), args.repeats)
        # Memory: each mode alone in its own process (one timed run after the compile).
        plain = child(args, cache, tmp, ("plain",), 1)
        rec = child(args, cache, tmp, ("record",), 1)
    assert both["steps"]["plain"] == both["steps"]["record"], both["steps"]
    steps = both["steps"]["record"]
    t_plain, t_rec = min(both["walls"]["plain"][1:]), min(both["walls"]["record"][1:])
    ratio = t_rec / t_plain
    agents, obs_dim = 3, 9730
    per_step = rec["size"] / steps
    f32 = agents * obs_dim * 4
    mib = 2**20
    text = textwrap.dedent(f"""\
        ## Recording (`score --record`)

        Measured by `bench/recording.py` on {date.today()}: `{Path(args.cell).name}` of
        `{"/".join(Path(args.cell).parts[-4:-1])}`, fast protocol, {args.episodes} episodes
        <= {args.max_steps} steps ({steps:,} steps recorded). Timing: both modes in one
        process after their compiles, alternating, best of {args.repeats} runs each; peak
        memory: each mode alone in a fresh process. Machine: {platform.machine()},
        {os.cpu_count()} cores; load average before the run {load:.2f}.

        | | plain score | score --record | ratio |
        |---|---:|---:|---:|
        | wall (s, best of {args.repeats}) | {t_plain:.1f} | {t_rec:.1f} | **{ratio:.2f}** |
        | first run incl. compile (s) | {both["walls"]["plain"][0]:.1f} | {both["walls"]["record"][0]:.1f} | |
        | peak RSS, alone (MiB) | {plain["peak"] / mib:.0f} | {rec["peak"] / mib:.0f} | |

        On disk: {rec["size"] / mib:.1f} MiB for the cell's {steps:,} steps = {per_step / 1024:.2f} KiB
        per step ({per_step / agents:,.0f} B per agent-step; float32 observations alone would
        be {f32 / 1024:.0f} KiB per step, {f32 / per_step:.0f}x more). Observation dtypes chosen per
        part: {rec["dtypes"]}. At that rate a cell at the paper's cap (20 episodes of
        10,000 steps) would take about {per_step * 200_000 / 2**30:.2f} GiB.
        """)
    print(text)
    if args.write:
        from benchmarks_md import write_block

        write_block("recording", text)


if __name__ == "__main__":
    main()
