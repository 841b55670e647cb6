"""The cross-play gap and its confidence interval (numpy only, no JAX).

Every team of a cross-play run plays the same worlds: episode i is world
``PRNGKey(9999 + i)`` for every team, the members' self-play teams included. The worlds
are the independent units: AAB, ABA and BAA on world i, and the self-play of A and B on
world i (which every team with A or B is compared with), all move together. So the
interval resamples worlds, jointly for everything:

* data: ``ref (X, K, E)``, cross-play team k's self reference on world i (the mean over
  k's slots of the slot cell's self-play, :func:`slot_reference`), and ``cross (X, K, E)``,
  the team's own score; X independent data sets (1 for a command; many in the coverage
  test), K cross-play teams, E worlds. A (team, world) value counts where both are finite;
  ``d = ref - cross`` there.
* the statistic (:func:`gap_statistic`) under world weights ``c (E,)`` (how often each
  world is drawn): runs = ``teams``: the mean over teams of ``sum_i c_i d_ki / sum_i c_i``
  (finite i; each team counts the same); runs = ``episodes``: ``sum_ki c_i d_ki /
  sum_ki c_i`` (each finite (team, episode) counts the same). The two agree when every
  value is finite. The point estimate is c = 1.
* a bootstrap replicate draws E world indices with replacement, one multiset, and
  applies it to every team and to the self-play references of the same worlds
  (:func:`world_counts`, seeded by (seed, stream): the same seed gives the same interval);
* the interval is the expanded percentile interval (Hesterberg 2015, "What teachers should
  know about the bootstrap"): the replicates' percentiles at a/2 and 1 - a/2 where
  ``Phi^-1(a/2) = -sqrt(n / (n - 1)) t_{n-1}(1 - alpha/2)``, n the worlds with a finite
  value. The plain percentile interval of a mean of n = 20 worlds is too narrow (it covers
  about 93% at a nominal 95%: it misses the n - 1 and the t quantile); with fewer than 2
  worlds there is no interval (NaN bounds).

The difference of two gaps over teams that played the same worlds (a scenario's test
cells against its train cells: :func:`gap_difference`) is resampled the same way: one
multiset of worlds per replicate, applied to both sides (a paired bootstrap).

What the interval is about: these cells, on the distribution of worlds. The teams are
fixed, not a sample: differences between teams are not noise. It does not generalise over
checkpoints (training seeds); that needs more cells and a resampling of cells.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from alem_eval.analysis.bootstrap import (
    BootstrapSettings,
    Interval,
    lerp,
    expanded_levels,
    stream_rng,
)
from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.analysis.metrics import TOTAL, metric_info

RUNS_MODES: tuple[str, ...] = ("teams", "episodes")
RUNS_LABELS = {
    "teams": "every cross-play team weighs the same (the mean of the teams' mean gaps)",
    "episodes": "every finite (team, episode) weighs the same",
}
METHOD = (
    "expanded percentile bootstrap of the gap; a replicate resamples the worlds (episode "
    "indices) once, for every team and the self-play references alike"
)
DEFAULT_REPS = 10_000
DEFAULT_CONFIDENCE = 0.95
_BLOCK = 4_000_000  # (experiments x teams x replicates) values computed at once


def check_runs(runs: str) -> None:
    if runs not in RUNS_MODES:
        raise UsageError(f"--runs must be one of {', '.join(RUNS_MODES)}, got {runs!r}")


# ----------------------------------------------------------------------------------------
# Arrays: the statistic, the world resamples, the interval
# ----------------------------------------------------------------------------------------
def slot_reference(self_play: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """``self_play (X, n, E), slots (K, S) cell indices -> (X, K, E)``: each team's
    slot-weighted self-play, world by world (AAB: (2 SP_A + SP_B) / 3); NaN where a slot
    cell's self-play is."""
    return np.asarray(self_play, float)[:, np.asarray(slots)].mean(axis=2)


def world_counts(num_worlds: int, reps: int, seed: int, stream: Sequence = ()) -> np.ndarray:
    """``(reps, num_worlds)``: how often each replicate draws each world (``num_worlds``
    draws with replacement); the same for the same (seed, stream, num_worlds, reps)."""
    rng = stream_rng(seed, ("crossplay-worlds", *stream))
    idx = rng.integers(0, num_worlds, size=(reps, num_worlds), dtype=np.int64)
    idx += (np.arange(reps, dtype=np.int64) * num_worlds)[:, None]
    return np.bincount(idx.ravel(), minlength=reps * num_worlds).reshape(reps, num_worlds)


def gap_statistic(d: np.ndarray, w: np.ndarray, counts: np.ndarray, runs: str) -> np.ndarray:
    """``d, w (X, K, E), counts (B, E) -> (X, B)``: the weighted mean of ``d`` under each
    world weighting (``w`` is 1 where a (team, world) value counts, 0 else, and ``d`` is 0
    there). NaN where a weighting leaves no value."""
    check_runs(runs)
    c = np.asarray(counts, float).T  # (E, B)
    if runs == "episodes":
        num, den = d.sum(axis=1) @ c, w.sum(axis=1) @ c
        return np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)
    x, k, e = d.shape
    b = c.shape[1]
    out = np.empty((x, b))
    xs = max(1, _BLOCK // (k * b))  # experiments at once
    bs = max(1, _BLOCK // (min(xs, x) * k))  # replicates at once
    for i in range(0, x, xs):
        d2, w2 = d[i : i + xs].reshape(-1, e), w[i : i + xs].reshape(-1, e)
        for j in range(0, b, bs):
            cb = c[:, j : j + bs]
            num = (d2 @ cb).reshape(-1, k, cb.shape[1])  # 0 where den is: d is 0 where w is
            den = (w2 @ cb).reshape(num.shape)
            has = den > 0
            means = np.divide(num, den, out=num, where=has).sum(axis=1)
            teams = has.sum(axis=1)
            out[i : i + xs, j : j + bs] = np.divide(
                means, teams, out=np.full_like(means, np.nan), where=teams > 0
            )
    return out


def row_quantiles(samples: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``samples (X, B), q (X,) -> (X,)``: row x's quantile at level ``q[x]`` over its
    finite samples (NumPy's linear method); NaN when q is or no sample is finite."""
    s = np.sort(samples, axis=1)  # NaN last
    m = np.isfinite(samples).sum(axis=1)
    valid = (m > 0) & np.isfinite(q)
    pos = np.where(valid, np.clip(q, 0.0, 1.0) * (m - 1), 0.0)
    j = np.floor(pos).astype(np.int64)
    a = np.take_along_axis(s, j[:, None], axis=1)[:, 0]
    b = np.take_along_axis(s, np.minimum(j + 1, np.maximum(m - 1, 0))[:, None], axis=1)[:, 0]
    return np.where(valid, lerp(a, b, pos - j), np.nan)


@dataclass(frozen=True)
class GapIntervals:
    """The gap of X data sets, each field ``(X,)``: ``point = self_score - cross`` and its
    interval; the teams, runs (teams or (team, episode) values) and worlds counted."""

    point: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    self_score: np.ndarray
    cross: np.ndarray
    n_teams: np.ndarray
    n_runs: np.ndarray
    n_worlds: np.ndarray

    def interval(self, i: int = 0) -> Interval:
        """Data set ``i``'s gap and its bounds as one :class:`Interval`."""
        return Interval(float(self.point[i]), float(self.lo[i]), float(self.hi[i]))


def gap_intervals(
    ref: np.ndarray,
    cross: np.ndarray,
    *,
    runs: str = "teams",
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stream: Sequence = (),
) -> GapIntervals:
    """``ref, cross (X, K, E) -> GapIntervals``: the gap ``ref - cross`` with its world
    bootstrap interval, for X data sets at once (the same world resamples for each)."""
    check_runs(runs)
    BootstrapSettings(reps=reps, seed=seed, confidence=confidence)  # validates them
    g = _Gap(ref, cross, runs)
    samples = g.stat(world_counts(g.num_worlds, reps, seed, stream))
    n_worlds = g.ok.any(axis=1).sum(axis=1)
    lo, hi = _bounds(samples, n_worlds, confidence)
    return GapIntervals(
        point=g.point,
        lo=lo,
        hi=hi,
        self_score=g.ref_score,
        cross=g.cross_score,
        n_teams=g.n_teams,
        n_runs=g.n_runs,
        n_worlds=n_worlds,
    )


def gap_difference(
    a: tuple[np.ndarray, np.ndarray],
    b: tuple[np.ndarray, np.ndarray],
    *,
    runs: str = "teams",
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    stream: Sequence = (),
) -> GapIntervals:
    """``a = (ref_a, cross_a) (X, K_a, E)``, ``b = (ref_b, cross_b) (X, K_b, E)`` -> the
    difference of their gaps, ``gap_a - gap_b`` (each as :func:`gap_intervals` computes
    it, so the point is exactly the difference of the two points), with a paired world
    bootstrap: a replicate draws ONE world resample and applies it to both sides (their
    teams played the same worlds). ``self_score`` / ``cross`` hold ``gap_a`` / ``gap_b``;
    ``n_teams`` / ``n_runs`` both sides together; ``n_worlds`` the worlds with a finite
    value on either side."""
    check_runs(runs)
    BootstrapSettings(reps=reps, seed=seed, confidence=confidence)
    ga, gb = _Gap(*a, runs), _Gap(*b, runs)
    if ga.num_worlds != gb.num_worlds or ga.ok.shape[0] != gb.ok.shape[0]:
        raise ValueError(f"a {ga.ok.shape} and b {gb.ok.shape} must share X and E")
    counts = world_counts(ga.num_worlds, reps, seed, stream)
    n_worlds = (ga.ok.any(axis=1) | gb.ok.any(axis=1)).sum(axis=1)
    lo, hi = _bounds(ga.stat(counts) - gb.stat(counts), n_worlds, confidence)
    return GapIntervals(
        point=ga.point - gb.point,
        lo=lo,
        hi=hi,
        self_score=ga.point,
        cross=gb.point,
        n_teams=ga.n_teams + gb.n_teams,
        n_runs=ga.n_runs + gb.n_runs,
        n_worlds=n_worlds,
    )


class _Gap:
    """``ref, cross (X, K, E)``: which values count, the point estimates and the gap's
    statistic under world weightings (:func:`gap_statistic`)."""

    def __init__(self, ref: np.ndarray, cross: np.ndarray, runs: str) -> None:
        check_runs(runs)
        ref, cross = np.asarray(ref, float), np.asarray(cross, float)
        if ref.ndim != 3 or ref.shape != cross.shape:
            raise ValueError(f"ref {ref.shape} and cross {cross.shape} must be equal (X, K, E)")
        self.ok = np.isfinite(ref) & np.isfinite(cross)
        self._w = self.ok.astype(float)
        self._d = np.where(self.ok, ref - cross, 0.0)
        self.runs = runs
        self.num_worlds = ref.shape[2]
        ones = np.ones((1, self.num_worlds))
        self.ref_score = self._stat(ref, ones)[:, 0]
        self.cross_score = self._stat(cross, ones)[:, 0]
        self.point = self.ref_score - self.cross_score
        self.n_teams = self.ok.any(axis=2).sum(axis=1)
        self.n_runs = self.n_teams if runs == "teams" else self.ok.sum(axis=(1, 2))

    def _stat(self, values: np.ndarray, counts: np.ndarray) -> np.ndarray:
        return gap_statistic(np.where(self.ok, values, 0.0), self._w, counts, self.runs)

    def stat(self, counts: np.ndarray) -> np.ndarray:
        """``counts (B, E) -> (X, B)``: the gap under each world weighting."""
        return gap_statistic(self._d, self._w, counts, self.runs)


def _bounds(samples: np.ndarray, n_worlds: np.ndarray, confidence: float):
    """The expanded percentile interval's bounds ``(X,), (X,)`` of ``samples (X, B)``."""
    q_lo, q_hi = expanded_levels(n_worlds, confidence)
    return row_quantiles(samples, q_lo), row_quantiles(samples, q_hi)


# ----------------------------------------------------------------------------------------
# Per team: {team: per-episode values} -> GapEstimate
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GapEstimate:
    """Cross-play gap of one metric: ``gap.point = self_score - cross`` (raw fractions)."""

    metric: str
    self_score: float  # slot-weighted self-play of the cross-play teams' members
    cross: float  # the cross-play teams' own score
    gap: Interval  # lo / hi NaN with fewer than 2 worlds
    n_teams: int  # cross-play teams with a finite value
    n_runs: int  # values averaged: teams, or finite (team, episode) pairs
    n_worlds: int  # worlds (episode indices) the bootstrap resamples

    def as_json(self) -> dict[str, Any]:
        info = metric_info(self.metric)
        return {
            "metric": self.metric,
            "label": info.name,
            "self": self.self_score,
            "cross": self.cross,
            "gap": self.gap.point,
            "lo": _finite(self.gap.lo),
            "hi": _finite(self.gap.hi),
            "n_teams": self.n_teams,
            "n_runs": self.n_runs,
            "n_worlds": self.n_worlds,
        }


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def crossplay_gap(
    scores: Mapping[Any, Sequence[float] | np.ndarray],
    *,
    metric: str = TOTAL,
    runs: str = "teams",
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> GapEstimate:
    """``{team: per-episode values (E,)}`` of one metric, the members' self-play teams
    included -> the cross-play gap (self - cross) with its world bootstrap interval.

    A team is a :class:`~alem_eval.scoring.teams.Team` or a tuple of cell ids (one per slot);
    episode i of every team is world i, so every team needs the same number of episodes.
    """
    check_runs(runs)
    teams = {
        tuple(getattr(t, "slots", t)): np.asarray(v, float).reshape(-1) for t, v in scores.items()
    }
    self_play = {s[0]: v for s, v in teams.items() if len(set(s)) == 1}
    cross = {s: v for s, v in teams.items() if len(set(s)) > 1}
    if not cross:
        raise UsageError("no cross-play team to compare with self-play")
    cells = sorted({c for s in cross for c in s})
    for s in cross:
        missing = [c for c in dict.fromkeys(s) if c not in self_play]
        if missing:
            raise EvaluationError(f"team {' | '.join(s)}: {missing[0]} has no self-play scores")
    lengths = {len(teams[s]) for s in cross} | {len(self_play[c]) for c in cells}
    if len(lengths) > 1:
        raise EvaluationError(
            f"the teams have {' or '.join(str(n) for n in sorted(lengths))} episodes; "
            "episode i is world i of every team, so they need the same number"
        )
    index = {c: i for i, c in enumerate(cells)}
    ref = slot_reference(
        np.stack([self_play[c] for c in cells])[None],
        np.array([[index[c] for c in s] for s in cross]),
    )
    est = gap_intervals(
        ref,
        np.stack(list(cross.values()))[None],
        runs=runs,
        reps=reps,
        seed=seed,
        confidence=confidence,
        stream=(metric,),
    )
    if est.n_teams[0] == 0:
        raise EvaluationError(f"no finite {metric} values in the cross-play teams")
    if est.n_worlds[0] < 2:
        from alem_eval.analysis.results import ResultsWarning

        warnings.warn(
            f"cross-play gap of {metric_info(metric).label}: no interval from "
            f"{est.n_worlds[0]} episode with finite values (it resamples episodes' worlds; "
            "use 2 episodes or more)",
            ResultsWarning,
            stacklevel=2,
        )
    return GapEstimate(
        metric,
        float(est.self_score[0]),
        float(est.cross[0]),
        est.interval(),
        n_teams=int(est.n_teams[0]),
        n_runs=int(est.n_runs[0]),
        n_worlds=int(est.n_worlds[0]),
    )
