"""``alem-eval score``: vectorised greedy evaluation of cells, with a results store."""
from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console


def _split(values: Optional[List[str]]) -> Optional[List[str]]:
    if not values:
        return None
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


@app.command("score")
def score(
    selectors: Optional[List[str]] = typer.Argument(None, help="Cells (default: all in the source)."),
    budget: Optional[List[str]] = typer.Option(None, "--budget", help="Filter: budget(s), e.g. 1B."),
    algorithm: Optional[List[str]] = typer.Option(None, "--algorithm", help="Filter: algorithm(s)."),
    difficulty: Optional[List[str]] = typer.Option(None, "--difficulty", help="Filter: difficulty(ies)."),
    episodes: Optional[int] = typer.Option(None, "--episodes", help="Episodes per cell (fast: 20; reference: TEST_NUM_EPISODES)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Step cap per episode (fast: 10000; reference: TEST_MAX_STEPS)."),
    protocol: str = typer.Option("fast", "--protocol", help="fast (paper protocol, parallel episodes) | reference (upstream's sequential key chain, bit for bit)."),
    source: str = typer.Option("hub", "--source", help="'hub', 'demo' or a local directory in the released layout."),
    repo: Optional[str] = typer.Option(None, "--repo", help="Hub repo id."),
    revision: Optional[str] = typer.Option(None, "--revision", help="Hub revision."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Download cache."),
    results: Optional[Path] = typer.Option(None, "--results", help="Results store directory (default: user cache)."),
    stack: int = typer.Option(5, "--stack", help="Checkpoints evaluated together in one compiled call."),
    on_env_mismatch: str = typer.Option("error", "--on-env-mismatch", help="error | warn when a cell's env version differs from the installed alem-env."),
    devices: Optional[str] = typer.Option(
        None, "--devices", help="CPU: split the batch over N host devices, one per core with "
        "'auto' (the Alem step is single-threaded, so this scales with cores). 'reference' "
        "numbers are identical however they are split; 'fast' ones may differ in rare "
        "near-ties, so leave it unset for numbers that must not depend on the core count."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv"),
) -> None:
    """Score cells the way the paper did, as one compiled batched computation per stack.

    The table shows mean ± s.e. over episodes of Total%, Base%, Coord% (Team/*_reward_pct_of_max
    ×100) and Team/achievement_pct. Episode lengths are true lengths (upstream logs length − 1).
    """
    from ..evaluate import enable_compilation_cache, parse_devices, use_host_devices
    from ..results import open_store
    from ..scoring import ScoreOptions, score_cells
    from ..sources import open_source

    n_devices = parse_devices(devices)
    if n_devices is not None and use_host_devices(n_devices):  # before JAX starts its backends
        err_console.print(f"splitting the work over {n_devices} CPU devices", highlight=False)
    options = ScoreOptions(protocol=protocol, num_episodes=episodes, max_steps=max_steps,
                           eval_difficulties=tuple(_split(difficulty) or ()) or None,
                           max_stack=stack, on_env_mismatch=on_env_mismatch)
    src = open_source(source, repo=repo, revision=revision, cache_dir=cache_dir)
    cells = src.select(list(selectors or []), budgets=_split(budget),
                       algorithms=_split(algorithm), difficulties=_split(difficulty))
    store = open_store(results)
    enable_compilation_cache()
    t0 = time.perf_counter()

    def progress(message: str, done: int, total: int) -> None:
        err_console.print(f"[{done}/{total}] {message} ({time.perf_counter() - t0:.0f}s)",
                          highlight=False)

    scores = score_cells(src, cells, options=options, store=store, on_progress=progress)
    if fmt == OutputFormat.json:
        emit_records([s.as_record() for s in scores], fmt)
    elif fmt == OutputFormat.csv:
        rows = []
        for s in scores:
            for i, ep in enumerate(s.episodes):
                rows.append({"cell": s.cell.id, "eval_difficulty": s.eval_difficulty,
                             "protocol": s.protocol, "episode": i, **ep})
        columns = list(dict.fromkeys(k for r in rows for k in r))
        emit_records(rows, fmt, columns=columns)
    else:
        emit_records([s.summary_row() for s in scores], fmt,
                     title=f"protocol={options.protocol}; mean ± s.e. over episodes")
    steps = sum(ep.get("episode_length", 0) for s in scores if not s.reused for ep in s.episodes)
    elapsed = time.perf_counter() - t0
    err_console.print(f"{len(scores)} cell-difficulties, {steps:,.0f} env steps in {elapsed:.1f}s"
                      f" ({steps / max(elapsed, 1e-9):,.0f} env-steps/s); results in {store.root}",
                      highlight=False)
