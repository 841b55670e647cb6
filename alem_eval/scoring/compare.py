"""The same cell(s) from two sources, scored on the same worlds, compared.

:func:`compare_sources` scores the selected cells of each source as ``score`` does
(:func:`alem_eval.scoring.score.score_cells`: the same episodes and worlds for both) and states
how likely source A beats source B: the probability of improvement P(A > B) (the chance
that a random run of A scores higher than a random run of B, ties counted one half) with a
seeded bootstrap CI, plus the mean difference. Difficulties are compared separately.

* Runs are episodes (a side has one cell): episode i of every cell is world i, so the two
  sides are paired by world. :func:`compare_paired` resamples the worlds, one multiset per
  replicate applied to both sides (as the cross-play gap does,
  :func:`~alem_eval.analysis.crossplay_stats.world_counts`): what a hard world costs both
  sides cancels from the difference, and its interval is narrower than one that resamples
  the sides independently when their scores move together world by world.
* Runs are seeds (both sides have two cells or more): each seed's score is its mean over
  the same fixed worlds, as on the leaderboard, and :func:`compare_scores` resamples each
  side's seeds (independent training runs).

Both intervals are the settings' ``method`` (expanded percentile by default, n = the worlds
or the smaller side's seeds; see :mod:`alem_eval.analysis.bootstrap`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError

if TYPE_CHECKING:
    from alem_eval.hub.transfer import DownloadProgress

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
    ci: str = "expanded",
) -> dict[str, Any]:
    """``x (n_x,), y (n_y,)`` independent run scores -> P(X > Y) and mean(X) - mean(Y) with
    bootstrap CIs (each side resampled on its own), and a verdict ("A better" when the CI
    of P lies above 1/2, "B better" below).

    Keys: ``p_improvement, p_lo, p_hi, diff, diff_lo, diff_hi, verdict``.
    """
    from alem_eval.analysis.bootstrap import BootstrapSettings, StratifiedBootstrap

    x = np.asarray(x, float).reshape(-1, 1)
    y = np.asarray(y, float).reshape(-1, 1)
    if len(x) == 0 or len(y) == 0:
        raise UsageError("compare needs at least one run on each side")
    bs = StratifiedBootstrap(BootstrapSettings(reps, seed, confidence, method=ci))
    poi = bs.improvement(x, y, (*stream, "A"), (*stream, "B"))
    diff = bs.difference(x, y, (*stream, "A"), (*stream, "B"))
    return _result(poi, diff)


def compare_paired(
    a: np.ndarray,
    b: np.ndarray,
    *,
    reps: int = DEFAULT_COMPARE_REPS,
    seed: int = 0,
    confidence: float = 0.95,
    stream: Sequence = (),
    ci: str = "expanded",
) -> dict[str, Any]:
    """``a (K_a, E), b (K_b, E)``: per-episode scores of each side's cells, column i on
    world i for both (NaN: no value) -> P(A > B) over the (cell, episode) runs and the
    difference of their means, with CIs that resample the E worlds jointly for both sides
    (n = the worlds with a value on both sides); the keys of :func:`compare_scores`."""
    from alem_eval.analysis.bootstrap import (
        BootstrapSettings,
        Interval,
        StratifiedBootstrap,
        pairwise,
    )
    from alem_eval.analysis.crossplay_stats import world_counts

    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    if a.shape[1] != b.shape[1]:
        raise EvaluationError(
            f"the sides have {a.shape[1]} and {b.shape[1]} episodes; episode i is world i "
            "of both, so they need the same number"
        )
    (ka, wa), (kb, wb) = np.nonzero(np.isfinite(a)), np.nonzero(np.isfinite(b))
    if len(wa) == 0 or len(wb) == 0:
        raise UsageError("compare needs at least one run on each side")
    xa, xb = a[ka, wa], b[kb, wb]  # the runs, and their worlds wa / wb
    bs = StratifiedBootstrap(BootstrapSettings(reps, seed, confidence, method=ci))
    c = world_counts(a.shape[1], reps, seed, (*stream, "paired")).astype(float)
    ca, cb = c[:, wa], c[:, wb]  # (reps, runs): how often each run is drawn
    na, nb = ca.sum(axis=1), cb.sum(axis=1)
    ok = (na > 0) & (nb > 0)  # a replicate that drew no world of a side has no statistic
    ca, cb, na, nb = ca[ok], cb[ok], na[ok], nb[ok]
    pairs = pairwise(xa, xb).astype(float)
    p_samples = np.einsum("bj,bj->b", ca @ pairs, cb) / (na * nb)
    d_samples = ca @ xa / na - cb @ xb / nb
    n = int(np.intersect1d(wa, wb).size)
    poi = bs.interval(p_samples, float(pairs.mean()), n=n, bounds=(0.0, 1.0))
    diff = bs.interval(d_samples, float(xa.mean() - xb.mean()), n=n)
    assert isinstance(poi, Interval) and isinstance(diff, Interval)
    return _result(poi, diff)


def _result(poi, diff) -> dict[str, Any]:
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


def select_source(
    spec: str,
    selectors: Sequence[str],
    difficulties: Sequence[str] | None = None,
    *,
    on_download: DownloadProgress | None = None,
) -> tuple[Any, list[Any]]:
    """Open source ``spec`` and select its cells (``difficulties``: of these training
    difficulties only): a missing source or a selector matching nothing fails here,
    before anything is scored. ``on_download``: told what the source downloads."""
    from alem_eval.hub.sources import open_source

    src = open_source(spec, on_download=on_download)
    return src, src.select(list(selectors), difficulties=difficulties)


def resolve_compare_metric(metric: str, src: Any, cells: Sequence[Any]) -> str:
    """The record column ``metric`` names, before anything is scored: a registered metric's
    key, label or alias, else a column the records of the source's first selected cell
    will carry (:func:`~alem_eval.evaluate.settings.record_columns`, from its config.json only);
    else a UsageError with the closest names."""
    from alem_eval.evaluate.settings import record_columns
    from alem_eval.model.loader import resolve_cell
    from alem_eval.analysis.metrics import METRICS, resolve_metric

    try:
        return resolve_metric(metric, [m.key for m in METRICS])
    except UsageError:
        c = cells[0]
        cfg, _ = resolve_cell(
            src.local_dir(c), algorithm=c.algorithm, difficulty=c.difficulty, seed=c.seed
        )
        return resolve_metric(metric, record_columns(cfg))


def score_source(
    spec: str,
    selectors: Sequence[str],
    *,
    metric: str,
    eval_difficulty: str | None,
    protocol: str,
    episodes: int | None,
    max_steps: int | None,
    store=None,
    on_progress: Callable[[str, int, int], None] | None = None,
    on_episodes: Callable[[Any], None] | None = None,
    selected: tuple[Any, list[Any]] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """``{eval difficulty: {cell id: [per-episode values of metric, NaN where an episode has
    none]}}`` for one source
    (each cell on ``eval_difficulty``, default its own training difficulty), scored as
    ``score`` scores (:func:`~alem_eval.scoring.score.score_cells`: the same keys, stacks
    and store; both sources play the same worlds).

    With ``store`` (a :class:`~alem_eval.analysis.results.ResultsStore`), a cell whose scores it
    holds under the same key (checkpoint and config hashes, protocol, episodes, cap) is
    read back, and each scored cell is stored as soon as its episodes end: a rerun, or a
    rerun after an interruption, evaluates only what is missing.

    ``on_progress(message, done, total)``: ``score_cells``' messages, prefixed with
    ``spec``; ``on_episodes`` as the evaluator's episodes finish
    (:class:`~alem_eval.evaluate.rollout.RolloutProgress`).
    ``selected``: what :func:`select_source` returned for ``spec`` and ``selectors``.
    """
    from alem_eval.scoring.score import ScoreOptions, score_cells

    src, cells = selected or select_source(spec, selectors)
    name = resolve_compare_metric(metric, src, cells)
    by_difficulty: dict[str, list[Any]] = defaultdict(list)
    for c in cells:
        by_difficulty[eval_difficulty or c.difficulty].append(c)

    def note(message: str, done: int, total: int) -> None:
        if on_progress is not None:
            on_progress(f"{spec}: {message}", done, total)

    out: dict[str, dict[str, list[float]]] = defaultdict(dict)
    for diff, group in by_difficulty.items():
        options = ScoreOptions(
            protocol=protocol, num_episodes=episodes, max_steps=max_steps, eval_difficulty=diff
        )
        for score in score_cells(
            src, group, options=options, store=store, on_progress=note, on_episodes=on_episodes
        ):
            # A record drops a non-finite score: such episodes have no value of it (NaN);
            # episode i stays at index i, world i.
            values = [float(e.get(name, np.nan)) for e in score.episodes]
            if not np.isfinite(values).any():
                raise EvaluationError(f"{spec}:{score.cell.id}: no episode has a finite {name}")
            out[diff][score.cell.id] = values
    return out


def compare_sources(
    sources: Sequence[str],
    selectors: Sequence[str],
    *,
    metric: str = DEFAULT_COMPARE_METRIC,
    eval_difficulty: str | None = None,
    difficulties: Sequence[str] | None = None,
    protocol: str = "fast",
    episodes: int | None = DEFAULT_COMPARE_EPISODES,
    max_steps: int | None = None,
    reps: int = DEFAULT_COMPARE_REPS,
    seed: int = 0,
    ci: str = "expanded",
    store=None,
    on_progress: Callable[[str, int, int], None] | None = None,
    on_episodes: Callable[[Any], None] | None = None,
    on_download: DownloadProgress | None = None,
) -> list[dict[str, Any]]:
    """Score the selected cells of two sources and compare them, one row per eval
    difficulty: ``eval_difficulty, metric, A, B, runs ("seeds" | "episodes"), resampled
    ("seeds of each side" | "worlds, jointly"), n_A, n_B, mean_A, mean_B`` and the keys of
    :func:`compare_scores` (``ci``: the interval, as for the leaderboard). ``difficulties``
    narrows the selection to cells of these training difficulties; ``eval_difficulty``
    plays every cell on that difficulty's worlds (default: each its own). Both sources' scores are
    read from and written to ``store`` (see :func:`score_source`; the CLI's default is
    ``<user cache>/compare``, kept apart from the results store; progress callbacks
    as there; ``on_download`` is told what a Hub source downloads)."""
    if len(sources) != 2:
        raise UsageError(f"compare needs exactly two --source options (got {len(sources)})")
    if eval_difficulty is not None:
        from alem_eval.evaluate.settings import check_eval_difficulty

        check_eval_difficulty(eval_difficulty)
    # Both sources and their cells first: a wrong B fails before A is scored.
    selected = [select_source(s, selectors, difficulties, on_download=on_download) for s in sources]
    metric = resolve_compare_metric(metric, *selected[0])  # before minutes of scoring
    scored = [
        score_source(
            s,
            selectors,
            metric=metric,
            eval_difficulty=eval_difficulty,
            protocol=protocol,
            episodes=episodes,
            max_steps=max_steps,
            store=store,
            on_progress=on_progress,
            on_episodes=on_episodes,
            selected=sel,
        )
        for s, sel in zip(sources, selected, strict=True)
    ]
    rows = []
    for diff in sorted(set(scored[0]) | set(scored[1])):
        a, b = scored[0].get(diff, {}), scored[1].get(diff, {})
        if not a or not b:
            raise UsageError(f"{diff}: only one source has cells to compare")
        by_seed = len(a) >= 2 and len(b) >= 2
        kw: dict[str, Any] = {"reps": reps, "seed": seed, "stream": (diff, metric), "ci": ci}
        if by_seed:
            x = np.array([np.nanmean(v) for v in a.values()])
            y = np.array([np.nanmean(v) for v in b.values()])
            res = compare_scores(x, y, **kw)
        else:
            x, y = np.concatenate(list(a.values())), np.concatenate(list(b.values()))
            res = compare_paired(_episodes(a), _episodes(b), **kw)
            x, y = x[np.isfinite(x)], y[np.isfinite(y)]
        rows.append(
            {
                "eval_difficulty": diff,
                "metric": metric,
                "A": sources[0],
                "B": sources[1],
                "runs": "seeds" if by_seed else "episodes",
                "resampled": "seeds of each side" if by_seed else "worlds, jointly",
                "n_A": len(x),
                "n_B": len(y),
                "mean_A": float(np.mean(x)),
                "mean_B": float(np.mean(y)),
                **res,
            }
        )
    return rows


def _episodes(side: dict[str, list[float]]) -> np.ndarray:
    """``{cell: per-episode values}`` -> ``(cells, episodes)``; every cell played the same
    number of episodes (one ``episodes`` setting), world i at index i."""
    lengths = {len(v) for v in side.values()}
    if len(lengths) > 1:
        raise EvaluationError(
            f"the cells have {' or '.join(map(str, sorted(lengths)))} episodes; episode i is "
            "world i of every cell, so they need the same number"
        )
    return np.array(list(side.values()), dtype=float)
