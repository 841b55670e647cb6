"""``alem-eval compare``: the same cell(s) from two sources, scored on the same worlds.

``alem-eval compare 1B/ippo-rnn/hard --source hub --source runs`` scores the selected
cells of each source with :func:`alem_eval.evaluate.score_stack` (the same episodes and
worlds for both) and states how likely source A beats source B: the probability of
improvement P(A > B) (the chance that a random run of A scores higher than a random run
of B, ties counted one half) with a seeded stratified bootstrap CI, plus the mean
difference. Runs are seeds when both sides have at least two cells, else episodes.
Difficulties are compared separately, never pooled.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, List, Optional, Sequence

import numpy as np
import typer

from ..cli import app
from ..console import OutputFormat, emit_records, err_console
from ..errors import UsageError

DEFAULT_COMPARE_METRIC = "Team/achievement_pct"


def compare_scores(x: np.ndarray, y: np.ndarray, *, reps: int = 20_000, seed: int = 0,
                   confidence: float = 0.95, stream: Sequence = ()) -> dict[str, Any]:
    """P(X > Y) and mean(X) - mean(Y) with bootstrap CIs; ``x``, ``y``: run scores."""
    from ..stats import BootstrapSettings, StratifiedBootstrap

    x = np.asarray(x, float).reshape(-1, 1)
    y = np.asarray(y, float).reshape(-1, 1)
    if len(x) == 0 or len(y) == 0:
        raise UsageError("compare needs at least one run on each side")
    bs = StratifiedBootstrap(BootstrapSettings(reps=reps, seed=seed, confidence=confidence))
    poi = bs.improvement(x, y, (*stream, "A"), (*stream, "B"))
    diff = bs.difference(x, y, (*stream, "A"), (*stream, "B"))
    if poi.lo > 0.5:
        verdict = "A better"
    elif poi.hi < 0.5:
        verdict = "B better"
    else:
        verdict = "no clear difference"
    return {"p_improvement": poi.point, "p_lo": poi.lo, "p_hi": poi.hi, "diff": diff.point,
            "diff_lo": diff.lo, "diff_hi": diff.hi, "verdict": verdict}


def _score_source(spec: str, selectors: Sequence[str], *, metric: str, eval_difficulty: str | None,
                  protocol: str, episodes: int | None, max_steps: int | None):
    """``{difficulty: {cell_id: [episode metric values]}}`` for one source."""
    from ..evaluate import score_stack
    from ..loader import load_cell
    from ..sources import open_source

    src = open_source(spec)
    cells = src.select(list(selectors))
    loaded = [(c, load_cell(src.local_dir(c), algorithm=c.algorithm, difficulty=c.difficulty,
                            seed=c.seed, policy_only=True, where=f"{spec}:{c.id}")) for c in cells]
    groups: dict[tuple, list] = defaultdict(list)
    for c, lc in loaded:
        groups[(lc.cfg.network_key, eval_difficulty or c.difficulty)].append((c, lc))
    out: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for (_, diff), members in groups.items():
        records = score_stack([lc.cfg for _, lc in members], [lc.weights for _, lc in members],
                              protocol=protocol, eval_difficulty=diff, num_episodes=episodes,
                              max_steps=max_steps)
        for (c, _), eps in zip(members, records):
            if eps and metric not in eps[0]:
                from ..stats import resolve_metric

                resolve_metric(metric, eps[0].keys())  # raises a UsageError with hints
            out[diff][c.id] = [float(e[metric]) for e in eps]
    return out


@app.command("compare")
def compare(
    selectors: List[str] = typer.Argument(..., help="Cell(s) or selector(s) present in both sources."),
    sources: List[str] = typer.Option(..., "--source", help="Exactly two: 'hub', 'demo' or a local directory (e.g. runs)."),
    metric: str = typer.Option(DEFAULT_COMPARE_METRIC, "--metric", help="Per-episode metric (a compute_score key, episode_return, ...)."),
    difficulty: Optional[str] = typer.Option(None, "--difficulty", help="Eval difficulty (default: each cell's training difficulty)."),
    episodes: Optional[int] = typer.Option(20, "--episodes", help="Episodes per cell."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Step cap per episode."),
    protocol: str = typer.Option("fast", "--protocol", help="fast | reference"),
    reps: int = typer.Option(20_000, "--reps", help="Bootstrap replicates."),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed."),
    fmt: OutputFormat = typer.Option(OutputFormat.table, "--format", help="table | json | csv"),
) -> None:
    """Is source A's checkpoint better than source B's? P(A > B) with a bootstrap CI."""
    if len(sources) != 2:
        raise UsageError(f"compare needs exactly two --source options (got {len(sources)})")
    from ..evaluate import enable_compilation_cache

    enable_compilation_cache()
    scored = [_score_source(s, selectors, metric=metric, eval_difficulty=difficulty,
                            protocol=protocol, episodes=episodes, max_steps=max_steps)
              for s in sources]
    rows = []
    for diff in sorted(set(scored[0]) | set(scored[1])):
        a, b = scored[0].get(diff, {}), scored[1].get(diff, {})
        if not a or not b:
            raise UsageError(f"{diff}: only one source has cells to compare")
        by_seed = len(a) >= 2 and len(b) >= 2
        if by_seed:
            x = np.array([np.mean(v) for v in a.values()])
            y = np.array([np.mean(v) for v in b.values()])
        else:
            x = np.concatenate([v for v in a.values()])
            y = np.concatenate([v for v in b.values()])
        res = compare_scores(x, y, reps=reps, seed=seed, stream=(diff, metric))
        rows.append({
            "eval_difficulty": diff, "metric": metric, "A": sources[0], "B": sources[1],
            "runs": "seeds" if by_seed else "episodes", "n_A": len(x), "n_B": len(y),
            "mean_A": float(np.mean(x)), "mean_B": float(np.mean(y)), **res,
        })
    if fmt == OutputFormat.table:
        for r in rows:
            err_console.print(
                f"{r['eval_difficulty']}: P(A > B) = {r['p_improvement']:.2f} "
                f"[{r['p_lo']:.2f}, {r['p_hi']:.2f}] on {metric} (A = {r['A']}, B = {r['B']}; "
                f"runs = {r['runs']}, {r['n_A']} vs {r['n_B']}; 95% bootstrap CI) -> {r['verdict']}",
                highlight=False)
    emit_records(rows, fmt, title="compare: probability of improvement P(A > B)")
