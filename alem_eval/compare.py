"""The same cell(s) from two sources, scored on the same worlds, compared.

:func:`compare_sources` scores the selected cells of each source with
:func:`alem_eval.evaluate.score_stack` (the same episodes and worlds for both) and states
how likely source A beats source B: the probability of improvement P(A > B) (the chance
that a random run of A scores higher than a random run of B, ties counted one half) with a
seeded stratified bootstrap CI, plus the mean difference. Runs are seeds when both sides
have at least two cells, else episodes. Difficulties are compared separately, never pooled.
"""

from __future__ import annotations

import contextlib

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import UsageError

DEFAULT_COMPARE_METRIC = "Team/achievement_pct"
DEFAULT_COMPARE_REPS = 20_000
DEFAULT_COMPARE_EPISODES = 20


def compare_scores(
    x: np.ndarray,
    y: np.ndarray,
    *,
    reps: int = DEFAULT_COMPARE_REPS,
    seed: int = 0,
    confidence: float = 0.95,
    stream: Sequence = (),
) -> dict[str, Any]:
    """``x (n_x,), y (n_y,)`` run scores -> P(X > Y) and mean(X) - mean(Y) with bootstrap
    CIs, and a verdict ("A better" when the CI of P lies above 1/2, "B better" below).

    Keys: ``p_improvement, p_lo, p_hi, diff, diff_lo, diff_hi, verdict``.
    """
    from .bootstrap import BootstrapSettings, StratifiedBootstrap

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
    return {
        "p_improvement": poi.point,
        "p_lo": poi.lo,
        "p_hi": poi.hi,
        "diff": diff.point,
        "diff_lo": diff.lo,
        "diff_hi": diff.hi,
        "verdict": verdict,
    }


def score_source(
    spec: str,
    selectors: Sequence[str],
    *,
    metric: str,
    eval_difficulty: str | None,
    protocol: str,
    episodes: int | None,
    max_steps: int | None,
) -> dict[str, dict[str, list[float]]]:
    """``{eval difficulty: {cell id: [per-episode values of metric]}}`` for one source
    (each cell on ``eval_difficulty``, default its own training difficulty)."""
    from . import evaluate
    from .loader import load_cell
    from .metrics import resolve_metric
    from .sources import open_source

    src = open_source(spec)
    cells = src.select(list(selectors))
    loaded = [
        (
            c,
            load_cell(
                src.local_dir(c),
                algorithm=c.algorithm,
                difficulty=c.difficulty,
                seed=c.seed,
                policy_only=True,
                where=f"{spec}:{c.id}",
            ),
        )
        for c in cells
    ]
    groups: dict[tuple, list] = defaultdict(list)
    for c, lc in loaded:
        groups[(lc.cfg.network_key, eval_difficulty or c.difficulty)].append((c, lc))
    out: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for (_, diff), members in groups.items():
        records = evaluate.score_stack(
            [lc.cfg for _, lc in members],
            [lc.weights for _, lc in members],
            protocol=protocol,
            eval_difficulty=diff,
            num_episodes=episodes,
            max_steps=max_steps,
        )
        for (c, _), eps in zip(members, records, strict=True):
            key = resolve_metric(metric, eps[0].keys()) if eps else metric  # or UsageError
            out[diff][c.id] = [float(e[key]) for e in eps]
    return out


def compare_sources(
    sources: Sequence[str],
    selectors: Sequence[str],
    *,
    metric: str = DEFAULT_COMPARE_METRIC,
    eval_difficulty: str | None = None,
    protocol: str = "fast",
    episodes: int | None = DEFAULT_COMPARE_EPISODES,
    max_steps: int | None = None,
    reps: int = DEFAULT_COMPARE_REPS,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Score the selected cells of two sources and compare them, one row per eval
    difficulty: ``eval_difficulty, metric, A, B, runs ("seeds" | "episodes"), n_A, n_B,
    mean_A, mean_B`` and the keys of :func:`compare_scores`."""
    if len(sources) != 2:
        raise UsageError(f"compare needs exactly two --source options (got {len(sources)})")
    from .metrics import METRICS, resolve_metric

    with contextlib.suppress(UsageError):  # a registered metric's key, label or alias: its key
        metric = resolve_metric(metric, [m.key for m in METRICS])  # before minutes of scoring
    scored = [
        score_source(
            s,
            selectors,
            metric=metric,
            eval_difficulty=eval_difficulty,
            protocol=protocol,
            episodes=episodes,
            max_steps=max_steps,
        )
        for s in sources
    ]
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
            x = np.concatenate(list(a.values()))
            y = np.concatenate(list(b.values()))
        res = compare_scores(x, y, reps=reps, seed=seed, stream=(diff, metric))
        rows.append(
            {
                "eval_difficulty": diff,
                "metric": metric,
                "A": sources[0],
                "B": sources[1],
                "runs": "seeds" if by_seed else "episodes",
                "n_A": len(x),
                "n_B": len(y),
                "mean_A": float(np.mean(x)),
                "mean_B": float(np.mean(y)),
                **res,
            }
        )
    return rows
