"""Aggregate statistics over scored episodes, the rliable way, with a seeded bootstrap.

Definitions follow rliable 1.2.0 ("Deep RL at the Edge of the Statistical Precipice"):
scores are arranged as a ``(num_runs, num_tasks)`` matrix and

* mean            = mean over tasks of the per-task mean over runs,
* IQM             = 25 % trimmed mean of all runs x tasks (``scipy.stats.trim_mean``),
* optimality gap  = ``gamma - mean(min(scores, gamma))`` (gamma = 1 on fraction metrics),
* median_of_task_means = median over tasks of the per-task means (rliable's "median"),
* P(X > Y)        = mean over tasks of the Mann-Whitney U statistic / (n_x n_y),
* score distribution (performance profile) at tau = fraction of runs x tasks above tau,

with percentile confidence intervals from a *stratified* bootstrap: runs are resampled
with replacement within each task; X and Y are resampled independently for P(X > Y).

Alem reports each difficulty separately, so every aggregate here covers exactly one task
(one eval difficulty of one (budget, algorithm)). rliable's median of task means then
equals the mean, so the "median" reported is the median over runs (the 50 % counterpart
of the IQM); the rliable definition stays available as ``median_of_task_means``.

The bootstrap is our own: vectorised (resamples are drawn as index counts and every
statistic is a weighted sum, no per-replicate Python) and seeded per group, so a group's
intervals depend only on (seed, reps, its own runs) and are reproduced exactly.
"""
from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
import scipy.stats

from .algorithms import algorithm_rank
from .config import DIFFICULTIES
from .errors import UsageError
from .manifest import budget_sort_key
from .results import ResultsError

RUNS_MODES: tuple[str, ...] = ("seeds", "episodes")
AGGREGATES: tuple[str, ...] = ("iqm", "mean", "median", "optimality_gap")
AGGREGATE_LABELS: dict[str, str] = {
    "iqm": "IQM", "mean": "Mean", "median": "Median", "optimality_gap": "Optimality gap",
    "median_of_task_means": "Median of task means",
}


# ----------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MetricInfo:
    """How a metric column is named, labelled and scaled for people."""

    key: str  # the verbatim compute_score key
    label: str  # short column label, e.g. "Total%"
    description: str
    fraction: bool  # values are fractions in [0, 1]: shown x100, optimality gap at gamma=1
    aliases: tuple[str, ...] = ()

    @property
    def scale(self) -> float:
        return 100.0 if self.fraction else 1.0

    @property
    def unit(self) -> str:
        return "%" if self.fraction else ""

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9]+", "_", self.key.lower()).strip("_")


HEADLINE_METRICS: tuple[MetricInfo, ...] = (
    MetricInfo("Team/normal_reward_pct_of_max", "Base%",
               "reward-weighted share of the 66 normal achievements", True, ("base",)),
    MetricInfo("Team/coord_reward_pct_of_max", "Coord%",
               "reward-weighted share of the 27 coordination achievements", True,
               ("coord", "coordination")),
    MetricInfo("Team/reward_pct_of_max", "Total%",
               "reward-weighted share of all 93 achievements", True, ("total",)),
    MetricInfo("Team/achievement_pct", "Ach%",
               "achievements unlocked by any agent / 93", True, ("achievement", "achievements")),
    MetricInfo("Team/normal_achievement_pct", "Base ach%",
               "normal achievements unlocked by any agent / 66", True, ("normal_achievement",)),
    MetricInfo("Team/coordination_achievement_pct", "Coord ach%",
               "coordination achievements unlocked by any agent / 27", True,
               ("coordination_achievement",)),
)
LEADERBOARD_METRICS: dict[str, str] = {  # leaderboard score name -> metric key
    "base": "Team/normal_reward_pct_of_max",
    "coord": "Team/coord_reward_pct_of_max",
    "total": "Team/reward_pct_of_max",
}
DEFAULT_METRIC = "Team/reward_pct_of_max"
_KNOWN = {m.key: m for m in HEADLINE_METRICS}
_FRACTION_KEY = re.compile(r"^(Team|Agent\d+)/\w*_pct(_of_max)?$")


def metric_info(key: str) -> MetricInfo:
    """The description of a metric column (fractions recognised by their name)."""
    if key in _KNOWN:
        return _KNOWN[key]
    return MetricInfo(key, key, key, bool(_FRACTION_KEY.match(key)))


def resolve_metric(name: str, available: Iterable[str]) -> str:
    """A metric key from a key, a label ("Total%") or an alias ("total"); else UsageError."""
    avail = list(dict.fromkeys(available))
    if name in avail:
        return name
    low = name.strip().lower()
    for m in HEADLINE_METRICS:
        if low in (m.key.lower(), m.label.lower(), m.label.lower().rstrip("%"), *m.aliases):
            if m.key in avail:
                return m.key
            raise UsageError(f"metric {m.key!r} ({m.label}) is not in the selected results")
    for a in avail:
        if a.lower() == low:
            return a
    close = difflib.get_close_matches(name, avail, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else \
        "; try total, base, coord, achievement or a column such as Team/achievement_pct"
    raise UsageError(f"unknown metric {name!r}{hint}")


# ----------------------------------------------------------------------------------------
# Ordering and groups
# ----------------------------------------------------------------------------------------
def budget_steps(budget: str) -> int | None:
    """'100M' -> 100_000_000, '1B' -> 1_000_000_000; None for free-form labels ('tiny')."""
    numeric, steps, _ = budget_sort_key(str(budget))
    return int(steps) if numeric == 0 else None


def budget_order(budget: str) -> tuple:
    return budget_sort_key(str(budget))


def algorithm_order(algorithm: str) -> tuple:
    return (algorithm_rank(algorithm), algorithm)


def difficulty_order(difficulty: str) -> tuple:
    return (DIFFICULTIES.index(difficulty) if difficulty in DIFFICULTIES else len(DIFFICULTIES),
            difficulty)


@dataclass(frozen=True)
class Entry:
    """A leaderboard row: one algorithm trained with one budget."""

    budget: str
    algorithm: str

    @property
    def label(self) -> str:
        return f"{self.algorithm} ({self.budget})"

    def sort_key(self) -> tuple:
        return (budget_order(self.budget), algorithm_order(self.algorithm))


@dataclass(frozen=True)
class Group:
    """One aggregate: an entry scored on one eval difficulty (never averaged across)."""

    budget: str
    algorithm: str
    difficulty: str  # eval difficulty (== training difficulty in the standard protocol)

    @property
    def entry(self) -> Entry:
        return Entry(self.budget, self.algorithm)

    @property
    def label(self) -> str:
        return self.entry.label

    def sort_key(self) -> tuple:
        return (difficulty_order(self.difficulty), *self.entry.sort_key())


# ----------------------------------------------------------------------------------------
# Run matrices
# ----------------------------------------------------------------------------------------
RUNS_LABELS = {
    "seeds": "runs = seeds: each seed's score is the mean over its episodes",
    "episodes": "runs = episodes: every (seed, episode) pair is a run; this ignores that "
                "episodes of one seed share a checkpoint, so the CIs are narrower than "
                "seed-level ones",
}


@dataclass(frozen=True)
class RunScores:
    """The run scores of one group in rliable's layout ``(num_runs, num_tasks=1)``."""

    group: Group
    scores: np.ndarray = field(compare=False)
    runs: str
    seeds: tuple[int, ...]
    num_episodes: int  # episodes used in total

    @property
    def n_runs(self) -> int:
        return int(self.scores.shape[0])


def standard_rows(df: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Rows of the standard protocol (eval difficulty == training difficulty) and how
    many cross-difficulty rows were left out."""
    if df.empty:
        return df, 0
    keep = df["difficulty"].astype(str) == df["eval_difficulty"].astype(str)
    return df[keep], int((~keep).sum())


def run_scores(df: pd.DataFrame, metric: str, *, runs: str = "seeds") -> dict[Group, RunScores]:
    """Per (budget, algorithm, eval difficulty), the run scores of ``metric``.

    ``runs="seeds"``: one run per seed, its score the mean over its episodes (NaN episodes,
    i.e. a key compute_score did not report, are skipped). ``runs="episodes"``: one run per
    (seed, episode). Rows must be of the standard protocol and of one protocol.
    """
    if runs not in RUNS_MODES:
        raise UsageError(f"--runs must be one of {', '.join(RUNS_MODES)}, got {runs!r}")
    if metric not in df.columns:
        raise UsageError(f"unknown metric {metric!r}: not a column of the results")
    if df.empty:
        return {}
    if df["protocol"].nunique() > 1:
        raise ResultsError("run scores mix protocols; select one first")
    if (df["difficulty"].astype(str) != df["eval_difficulty"].astype(str)).any():
        raise ResultsError("run scores need eval difficulty == training difficulty rows; "
                           "use standard_rows() first")
    sub = df[["budget", "algorithm", "eval_difficulty", "seed", "episode", metric]]
    sub = sub[np.isfinite(sub[metric].to_numpy(dtype=float))]
    out: dict[Group, RunScores] = {}
    for (b, a, d), g in sub.groupby(["budget", "algorithm", "eval_difficulty"], sort=False):
        group = Group(str(b), str(a), str(d))
        per_seed = g.groupby("seed", sort=True)[metric]
        if runs == "seeds":
            values = per_seed.mean().to_numpy(dtype=float)
        else:
            values = g.sort_values(["seed", "episode"])[metric].to_numpy(dtype=float)
        out[group] = RunScores(group, values.reshape(-1, 1), runs,
                               tuple(int(s) for s in per_seed.size().index), int(len(g)))
    return dict(sorted(out.items(), key=lambda kv: kv[0].sort_key()))


# ----------------------------------------------------------------------------------------
# Exact aggregates (rliable definitions) on a (runs, tasks) matrix
# ----------------------------------------------------------------------------------------
def aggregate_mean(scores: np.ndarray) -> float:
    return float(np.mean(np.mean(scores, axis=0)))


def aggregate_median_of_task_means(scores: np.ndarray) -> float:
    return float(np.median(np.mean(scores, axis=0)))


def aggregate_median(scores: np.ndarray) -> float:
    """Median over all runs x tasks (see the module docstring)."""
    return float(np.median(scores))


def aggregate_iqm(scores: np.ndarray) -> float:
    return float(scipy.stats.trim_mean(scores, proportiontocut=0.25, axis=None))


def aggregate_optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    return float(gamma - np.mean(np.minimum(scores, gamma)))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """P(X > Y) averaged over tasks: ties count one half (Mann-Whitney U / (n_x n_y))."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float(np.mean([_pairwise(x[:, t], y[:, t]).mean() for t in range(x.shape[1])]))


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """Fraction of runs x tasks with a score above each tau."""
    return (np.asarray(scores).reshape(-1, 1) > np.asarray(taus).reshape(1, -1)).mean(axis=0)


def _pairwise(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


_POINT = {
    "mean": aggregate_mean, "iqm": aggregate_iqm, "median": aggregate_median,
    "median_of_task_means": aggregate_median_of_task_means,
}


# ----------------------------------------------------------------------------------------
# The bootstrap
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A point estimate with its confidence interval."""

    point: float
    lo: float
    hi: float

    def scaled(self, k: float) -> "Interval":
        return Interval(self.point * k, self.lo * k, self.hi * k)

    def as_list(self) -> list[float]:
        return [self.point, self.lo, self.hi]

    def fmt(self, digits: int = 1) -> str:
        return f"{self.point:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


@dataclass(frozen=True)
class BootstrapSettings:
    """Stratified percentile bootstrap settings (validated: bad values are UsageErrors)."""

    reps: int = 50_000
    seed: int = 0
    confidence: float = 0.95
    runs: str = "seeds"

    def __post_init__(self) -> None:
        if isinstance(self.reps, bool) or not isinstance(self.reps, (int, np.integer)) \
                or not 1 <= self.reps <= 10_000_000:
            raise UsageError(f"--reps must be an integer between 1 and 10000000, got {self.reps!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) \
                or self.seed < 0:
            raise UsageError(f"--seed must be a non-negative integer, got {self.seed!r}")
        if not 0.0 < float(self.confidence) < 1.0:
            raise UsageError(f"confidence must be in (0, 1), got {self.confidence!r}")
        if self.runs not in RUNS_MODES:
            raise UsageError(f"--runs must be one of {', '.join(RUNS_MODES)}, got {self.runs!r}")

    @property
    def runs_label(self) -> str:
        return RUNS_LABELS[self.runs]

    def describe(self) -> str:
        return (f"stratified percentile bootstrap, {self.reps:,} replicates, seed {self.seed}, "
                f"{self.confidence:.0%} CIs; {self.runs_label}")


def _stream_entropy(seed: int, stream: Sequence) -> list[int]:
    digest = hashlib.sha256(json.dumps([str(s) for s in stream]).encode()).digest()
    return [int(seed)] + [int.from_bytes(digest[i:i + 4], "little") for i in range(0, 16, 4)]


class Resamples:
    """The bootstrap replicates of one (runs, tasks) shape drawn from one stream.

    ``counts[u, t, r]`` is how often distinct resample ``u`` draws run ``r`` of task ``t``;
    ``weights[u]`` how many replicates are that resample; ``index[b]`` which distinct
    resample replicate ``b`` is. With few runs (e.g. 5 seeds: at most 126 distinct
    resamples) the replicates collapse to a few distinct rows, and every statistic is
    computed once per row and weighted; otherwise each replicate is its own row.
    """

    def __init__(self, counts: np.ndarray, weights: np.ndarray, index: np.ndarray):
        self.counts, self.weights, self.index = counts, weights, index

    @property
    def reps(self) -> int:
        return int(self.index.shape[0])

    @property
    def compressed(self) -> bool:
        return self.counts.shape[0] < self.reps

    @classmethod
    def from_counts(cls, counts: np.ndarray) -> "Resamples":
        reps, n_tasks, n_runs = counts.shape
        flat = counts.reshape(reps, -1)
        if flat.shape[1] * math.log2(n_runs + 1) < 62:  # a row fits one int64 code
            powers = (n_runs + 1) ** np.arange(flat.shape[1], dtype=np.int64)
            codes = flat.astype(np.int64) @ powers
            _, first, index, weights = np.unique(codes, return_index=True, return_inverse=True,
                                                 return_counts=True)
            if len(first) <= reps // 2:
                return cls(counts[first], weights.astype(np.int64), index.reshape(-1))
        return cls(counts, np.ones(reps, dtype=np.int64), np.arange(reps))


def _lerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """NumPy's percentile interpolation, reproduced bit for bit."""
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def weighted_percentiles(values: np.ndarray, weights: np.ndarray,
                         qs: Sequence[float]) -> np.ndarray:
    """``np.percentile(np.repeat(values, weights, axis=0), qs, axis=0)`` (linear method)
    without expanding: ``values`` is (U,) or (U, G), ``weights`` (U,) positive ints."""
    v = np.asarray(values, dtype=float)
    one_d = v.ndim == 1
    if one_d:
        v = v[:, None]
    order = np.argsort(v, axis=0, kind="stable")
    vs = np.take_along_axis(v, order, axis=0)
    cw = np.cumsum(np.asarray(weights)[order], axis=0)
    n = int(cw[-1, 0])
    cols = np.arange(v.shape[1])
    out = np.empty((len(qs), v.shape[1]))
    for i, q in enumerate(qs):
        pos = q / 100.0 * (n - 1)
        j = int(math.floor(pos))
        a = vs[(cw <= j).sum(axis=0), cols]
        b = vs[(cw <= min(j + 1, n - 1)).sum(axis=0), cols]
        out[i] = _lerp(a, b, pos - j)
    return out[:, 0] if one_d else out


class StratifiedBootstrap:
    """Vectorised, seeded stratified bootstrap over ``(num_runs, num_tasks)`` matrices.

    The replicates of a shape come from a random stream named by ``stream`` (e.g. the
    group), so the same (seed, stream, shape) always gives the same resamples: each is
    ``num_runs`` run indices drawn with replacement per task, kept as counts (see
    :class:`Resamples`). Every statistic is then a weighted sum over the original (sorted)
    values, and intervals are percentiles over the replicates.
    """

    _CACHE_BYTES = 256 * 2**20

    def __init__(self, settings: BootstrapSettings | None = None):
        self.settings = settings or BootstrapSettings()
        self._cache: dict[tuple, Resamples] = {}
        self._cached_bytes = 0

    @property
    def reps(self) -> int:
        return int(self.settings.reps)

    @property
    def _quantiles(self) -> tuple[float, float]:
        alpha = (1.0 - self.settings.confidence) / 2.0
        return 100 * alpha, 100 * (1 - alpha)

    def resamples(self, n_runs: int, n_tasks: int, stream: Sequence) -> Resamples:
        key = (tuple(str(s) for s in stream), n_runs, n_tasks)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        res = Resamples.from_counts(self.counts(n_runs, n_tasks, stream))
        size = res.counts.nbytes + res.index.nbytes + res.weights.nbytes
        if self._cached_bytes + size <= self._CACHE_BYTES:
            self._cache[key] = res
            self._cached_bytes += size
        return res

    def counts(self, n_runs: int, n_tasks: int, stream: Sequence) -> np.ndarray:
        """Resample counts ``(reps, n_tasks, n_runs)``, replicate by replicate; equal to
        drawing ``n_runs`` run indices with replacement, independently per task."""
        rng = np.random.Generator(np.random.PCG64(
            np.random.SeedSequence(_stream_entropy(self.settings.seed, stream))))
        rows = self.reps * n_tasks
        idx = rng.integers(0, n_runs, size=(rows, n_runs), dtype=np.int64)
        idx += (np.arange(rows, dtype=np.int64) * n_runs)[:, None]
        dtype = np.uint8 if n_runs < 256 else np.uint16 if n_runs < 65536 else np.int64
        counts = np.bincount(idx.ravel(), minlength=rows * n_runs).astype(dtype)
        return counts.reshape(self.reps, n_tasks, n_runs)

    def interval(self, samples: np.ndarray, point, weights: np.ndarray | None = None):
        """Percentile interval(s) of bootstrap ``samples`` (axis 0 = replicates, or
        distinct resamples with ``weights``)."""
        if weights is None:
            lo, hi = np.percentile(samples, self._quantiles, axis=0)
        else:
            lo, hi = weighted_percentiles(samples, weights, self._quantiles)
        if np.ndim(point) == 0:
            return Interval(float(point), float(lo), float(hi))
        return np.asarray(point, float), np.asarray(lo, float), np.asarray(hi, float)

    # -- statistics ----------------------------------------------------------------------
    def aggregates(self, scores: np.ndarray, stream: Sequence, *,
                   names: Sequence[str] = AGGREGATES,
                   gamma: float | None = 1.0) -> dict[str, Interval]:
        """Interval estimates of the named aggregates (``optimality_gap`` needs a gamma;
        it is left out when ``gamma`` is None)."""
        x = _as_matrix(scores)
        n_runs, n_tasks = x.shape
        res = self.resamples(n_runs, n_tasks, stream)
        c, w = res.counts, res.weights
        xt = x.T  # (tasks, runs), aligned with the counts
        out: dict[str, Interval] = {}
        pooled = None
        for name in names:
            if name == "mean":
                samples = _weighted_task_means(c, xt).mean(axis=1)
            elif name == "median_of_task_means":
                samples = np.median(_weighted_task_means(c, xt), axis=1)
            elif name == "optimality_gap":
                if gamma is None:
                    continue
                samples = gamma - _weighted_task_means(c, np.minimum(xt, gamma)).mean(axis=1)
                out[name] = self.interval(samples, aggregate_optimality_gap(x, gamma), w)
                continue
            elif name in ("iqm", "median"):
                if pooled is None:
                    pooled = _SortedPool(c, xt)
                n = n_runs * n_tasks
                if name == "iqm":
                    cut = int(0.25 * n)
                    lo, hi = cut, n - cut
                else:
                    lo, hi = ((n - 1) // 2, (n - 1) // 2 + 1) if n % 2 else (n // 2 - 1, n // 2 + 1)
                samples = pooled.window_mean(lo, hi)
            else:
                raise ValueError(f"unknown aggregate {name!r}")
            out[name] = self.interval(samples, _POINT[name](x), w)
        return out

    def _paired(self, rx: Resamples, ry: Resamples, table, per_replicate) -> tuple:
        """Samples of a two-sample statistic: on the (distinct x) x (distinct y) table
        weighted by how often each pair occurs, or replicate by replicate."""
        ux, uy = rx.counts.shape[0], ry.counts.shape[0]
        if ux * uy <= 4 * self.reps:
            pair = rx.index * uy + ry.index
            w = np.bincount(pair, minlength=ux * uy)
            keep = np.nonzero(w)[0]
            return table().reshape(-1)[keep], w[keep]
        return per_replicate(rx.counts[rx.index], ry.counts[ry.index]), None

    def improvement(self, x: np.ndarray, y: np.ndarray, stream_x: Sequence,
                    stream_y: Sequence) -> Interval:
        """P(X > Y) with X and Y resampled independently (each within each task)."""
        x, y = _as_matrix(x), _as_matrix(y)
        if x.shape[1] != y.shape[1]:
            raise ValueError("X and Y must have the same tasks")
        rx = self.resamples(x.shape[0], x.shape[1], stream_x)
        ry = self.resamples(y.shape[0], y.shape[1], stream_y)
        pairs = [_pairwise(x[:, t], y[:, t]).astype(np.float32) for t in range(x.shape[1])]
        norm = x.shape[0] * y.shape[0]

        # float32 is exact here: counts <= n and pairwise values in {0, 0.5, 1}, sums < 2**24.
        def table():
            return np.mean([(rx.counts[:, t, :].astype(np.float32) @ s)
                            @ ry.counts[:, t, :].astype(np.float32).T
                            for t, s in enumerate(pairs)], axis=0, dtype=np.float64) / norm

        def per_replicate(cx, cy):
            return np.mean([np.einsum("bj,bj->b", cx[:, t, :].astype(np.float32) @ s,
                                      cy[:, t, :].astype(np.float32), dtype=np.float64)
                            for t, s in enumerate(pairs)], axis=0) / norm

        samples, w = self._paired(rx, ry, table, per_replicate)
        return self.interval(samples, probability_of_improvement(x, y), w)

    def difference(self, x: np.ndarray, y: np.ndarray, stream_x: Sequence,
                   stream_y: Sequence) -> Interval:
        """mean(X) - mean(Y), resampled independently."""
        x, y = _as_matrix(x), _as_matrix(y)
        rx, ry = self.resamples(*x.shape, stream_x), self.resamples(*y.shape, stream_y)
        mx = _weighted_task_means(rx.counts, x.T).mean(axis=1)
        my = _weighted_task_means(ry.counts, y.T).mean(axis=1)
        samples, w = self._paired(rx, ry, lambda: mx[:, None] - my[None, :],
                                  lambda cx, cy: mx[rx.index] - my[ry.index])
        return self.interval(samples, aggregate_mean(x) - aggregate_mean(y), w)

    def profile(self, scores: np.ndarray, taus: np.ndarray, stream: Sequence):
        """Score distribution at each tau: ``(point, lo, hi)`` arrays of len(taus)."""
        x = _as_matrix(scores)
        res = self.resamples(x.shape[0], x.shape[1], stream)
        above = (x.T.reshape(-1, 1) > np.asarray(taus).reshape(1, -1)).astype(np.float32)
        # Number of resampled runs above each tau: an integer in [0, n] (exact in float32).
        flat = res.counts.reshape(res.counts.shape[0], -1).astype(np.float32)
        k = np.rint(flat @ above).astype(np.int64)
        if res.compressed:
            lo, hi = weighted_percentiles(k, res.weights, self._quantiles) / x.size
        else:
            lo, hi = _integer_percentiles(k, x.size, self._quantiles) / x.size
        return score_distribution(x, taus), lo, hi


def _as_matrix(scores) -> np.ndarray:
    x = np.asarray(scores, dtype=float)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"scores must be a non-empty (runs, tasks) matrix, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("scores must be finite")
    return x


def _integer_percentiles(k: np.ndarray, n: int, qs: Sequence[float]) -> np.ndarray:
    """``np.percentile(k, qs, axis=0)`` (linear method) for integers ``k`` in [0, n],
    computed from per-column histograms instead of a partition of every column."""
    reps, cols = k.shape
    hist = np.bincount((k + (n + 1) * np.arange(cols)).ravel(), minlength=cols * (n + 1))
    cum = np.cumsum(hist.reshape(cols, n + 1), axis=1)
    out = np.empty((len(qs), cols))
    for i, q in enumerate(qs):
        pos = q / 100.0 * (reps - 1)
        j = int(math.floor(pos))
        frac = pos - j
        below = (cum <= j).sum(axis=1)  # the j-th smallest value (0-based)
        above = (cum <= min(j + 1, reps - 1)).sum(axis=1)
        out[i] = below + (above - below) * frac
    return out


def _weighted_task_means(counts: np.ndarray, xt: np.ndarray) -> np.ndarray:
    """(reps, tasks) task means of each resample."""
    return np.einsum("btr,tr->bt", counts, xt, dtype=np.float64) / xt.shape[1]


class _SortedPool:
    """Runs x tasks pooled and sorted once; each resample is a count per sorted value.

    The sorted resample repeats value j ``count_j`` times, occupying positions
    ``[C_{j-1}, C_j)`` (C = cumulative counts), so the mean of sorted positions
    ``[lo, hi)`` is a weighted sum with weights = overlap of the two ranges.
    """

    def __init__(self, counts: np.ndarray, xt: np.ndarray):
        flat = xt.reshape(-1)
        order = np.argsort(flat, kind="stable")
        self.values = flat[order]
        c = counts.reshape(counts.shape[0], -1)[:, order]
        self.upper = np.cumsum(c, axis=1, dtype=np.int32)
        self.lower = self.upper - c

    def window_mean(self, lo: int, hi: int) -> np.ndarray:
        w = np.minimum(self.upper, hi) - np.maximum(self.lower, lo)
        np.clip(w, 0, None, out=w)
        return (w @ self.values) / (hi - lo)


# ----------------------------------------------------------------------------------------
# Analyses over a results frame
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AggregateRow:
    """Interval estimates of one group for one metric (raw metric scale)."""

    group: Group
    n_runs: int
    n_seeds: int
    n_episodes: int
    estimates: Mapping[str, Interval] = field(hash=False)


@dataclass(frozen=True)
class ImprovementRow:
    """P(X > Y) on one difficulty; ``kind`` is "algorithm" (same budget) or "budget"."""

    difficulty: str
    x: Entry
    y: Entry
    probability: Interval
    kind: str


@dataclass(frozen=True)
class ProfileRow:
    group: Group
    taus: np.ndarray = field(compare=False)
    point: np.ndarray = field(compare=False)
    lo: np.ndarray = field(compare=False)
    hi: np.ndarray = field(compare=False)


@dataclass(frozen=True)
class BudgetRow:
    """The smaller -> larger budget comparison of one algorithm on one difficulty."""

    algorithm: str
    difficulty: str
    low: str
    high: str
    low_mean: Interval
    high_mean: Interval
    delta: Interval  # mean(high) - mean(low)
    probability: Interval  # P(high > low)


@dataclass(frozen=True)
class MetricAnalysis:
    """Everything the report shows for one metric."""

    metric: MetricInfo
    settings: BootstrapSettings
    budgets: tuple[str, ...]
    algorithms: tuple[str, ...]
    difficulties: tuple[str, ...]
    aggregates: Mapping[Group, AggregateRow] = field(hash=False)
    improvements: tuple[ImprovementRow, ...] = ()
    profiles: Mapping[Group, ProfileRow] = field(default_factory=dict, hash=False)
    budget_comparisons: tuple[BudgetRow, ...] = ()

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(Entry(b, a) for b in self.budgets for a in self.algorithms)

    def missing(self) -> list[Group]:
        return [Group(e.budget, e.algorithm, d) for d in self.difficulties for e in self.entries
                if Group(e.budget, e.algorithm, d) not in self.aggregates]


def _stream(runs: RunScores) -> tuple:
    g = runs.group
    return ("runs", runs.runs, g.budget, g.algorithm, g.difficulty)


def grid(df: pd.DataFrame) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(budgets, algorithms, eval difficulties) present, in report order."""
    if df.empty:
        return (), (), ()
    return (tuple(sorted(map(str, df["budget"].unique()), key=budget_order)),
            tuple(sorted(map(str, df["algorithm"].unique()), key=algorithm_order)),
            tuple(sorted(map(str, df["eval_difficulty"].unique()), key=difficulty_order)))


def summarize(df: pd.DataFrame, metrics: Sequence[str], settings: BootstrapSettings, *,
              names: Sequence[str] = ("mean",),
              bootstrap: StratifiedBootstrap | None = None) -> dict[str, dict[Group, AggregateRow]]:
    """Interval estimates of ``names`` for every metric and group (standard rows only)."""
    bs = bootstrap or StratifiedBootstrap(settings)
    out: dict[str, dict[Group, AggregateRow]] = {}
    for metric in metrics:
        info = metric_info(metric)
        rows: dict[Group, AggregateRow] = {}
        for group, rs in run_scores(df, metric, runs=settings.runs).items():
            est = bs.aggregates(rs.scores, _stream(rs), names=names,
                                gamma=1.0 if info.fraction else None)
            rows[group] = AggregateRow(group, rs.n_runs, len(rs.seeds), rs.num_episodes, est)
        out[metric] = rows
    return out


def _profile_taus(values: np.ndarray, fraction: bool, points: int) -> np.ndarray:
    """Thresholds spanning the observed scores with a 5% margin (clipped to [0, 1] for
    fraction metrics), so every profile starts at 1 and ends at 0."""
    lo, hi = float(np.min(values)), float(np.max(values))
    margin = 0.05 * (hi - lo) if hi > lo else max(abs(hi) * 0.05, 0.01)
    lo, hi = lo - margin, hi + margin
    if fraction:
        lo, hi = max(lo, 0.0), min(hi, 1.0)
        if hi <= lo:
            lo, hi = 0.0, 1.0
    return np.linspace(lo, hi, points)


def analyze(df: pd.DataFrame, metric: str, settings: BootstrapSettings, *,
            profile_points: int = 101) -> MetricAnalysis:
    """Interval estimates, P(improvement), profiles and budget comparisons for one metric.

    ``df`` holds standard-protocol rows of one protocol (see :func:`standard_rows`,
    :func:`choose_protocol`). Improvements: every pair of algorithms within a budget, and
    every pair of budgets of one algorithm (larger vs smaller); all per difficulty.
    """
    bs = StratifiedBootstrap(settings)
    info = metric_info(metric)
    runs = run_scores(df, metric, runs=settings.runs)
    budgets, algorithms, difficulties = grid(df)
    aggregates = summarize(df, [metric], settings, names=AGGREGATES, bootstrap=bs)[metric]

    improvements: list[ImprovementRow] = []
    budget_rows: list[BudgetRow] = []
    for d in difficulties:
        for b in budgets:
            for a1, a2 in itertools.combinations(algorithms, 2):
                g1, g2 = Group(b, a1, d), Group(b, a2, d)
                if g1 in runs and g2 in runs:
                    p = bs.improvement(runs[g1].scores, runs[g2].scores,
                                       _stream(runs[g1]), _stream(runs[g2]))
                    improvements.append(ImprovementRow(d, g1.entry, g2.entry, p, "algorithm"))
        for a in algorithms:
            for b_lo, b_hi in itertools.combinations(budgets, 2):
                lo_g, hi_g = Group(b_lo, a, d), Group(b_hi, a, d)
                if lo_g not in runs or hi_g not in runs:
                    continue
                r_lo, r_hi = runs[lo_g], runs[hi_g]
                p = bs.improvement(r_hi.scores, r_lo.scores, _stream(r_hi), _stream(r_lo))
                improvements.append(ImprovementRow(d, hi_g.entry, lo_g.entry, p, "budget"))
                budget_rows.append(BudgetRow(
                    a, d, b_lo, b_hi, aggregates[lo_g].estimates["mean"],
                    aggregates[hi_g].estimates["mean"],
                    bs.difference(r_hi.scores, r_lo.scores, _stream(r_hi), _stream(r_lo)), p))

    profiles: dict[Group, ProfileRow] = {}
    for d in difficulties:
        in_d = [rs for g, rs in runs.items() if g.difficulty == d]
        if not in_d:
            continue
        taus = _profile_taus(np.concatenate([rs.scores.ravel() for rs in in_d]),
                             info.fraction, profile_points)
        for rs in in_d:
            point, lo, hi = bs.profile(rs.scores, taus, _stream(rs))
            profiles[rs.group] = ProfileRow(rs.group, taus, point, lo, hi)

    return MetricAnalysis(info, settings, budgets, algorithms, difficulties, aggregates,
                          tuple(improvements), profiles, tuple(budget_rows))


def pair_improvement(df: pd.DataFrame, metric: str, x: Group, y: Group,
                     settings: BootstrapSettings) -> Interval:
    """P(X > Y) for any two groups of one difficulty (e.g. two algorithms of two budgets)."""
    if x.difficulty != y.difficulty:
        raise UsageError("probability of improvement compares groups of one difficulty; "
                         "difficulties are never pooled")
    runs = run_scores(df, metric, runs=settings.runs)
    for g in (x, y):
        if g not in runs:
            raise UsageError(f"no scores for {g.label} on {g.difficulty}")
    bs = StratifiedBootstrap(settings)
    return bs.improvement(runs[x].scores, runs[y].scores, _stream(runs[x]), _stream(runs[y]))


# ----------------------------------------------------------------------------------------
# From the store to an analysis frame
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PreparedResults:
    """Standard-protocol rows of one protocol, ready for :func:`analyze` / :func:`summarize`."""

    frame: pd.DataFrame = field(compare=False)
    metrics: tuple[str, ...]  # resolved keys of the requested metrics
    protocol: str
    notes: tuple[str, ...]  # what the loader skipped or chose, for the user
    root: str
    entries: tuple = ()  # the StoreEntry of every file read (keys, extras)


def prepare(store, selectors: Sequence[str] | None = None, *, metrics: Sequence[str] = (),
            optional_metrics: Sequence[str] = (), protocol: str | None = None) -> PreparedResults:
    """Load what an analysis needs from a :class:`~alem_eval.results.ResultsStore`.

    ``metrics`` are names, labels or aliases and must exist (UsageError otherwise);
    ``optional_metrics`` are read when present. The rows are restricted to one protocol
    (``protocol`` or the only one present), to the newest provenance per (cell, eval
    difficulty) and to eval difficulty == training difficulty; each choice is noted.
    """
    from .results import collect_warnings, latest_entries

    with collect_warnings() as notes:
        entries = store.entries(selectors)
        if not entries:
            raise ResultsError(f"no scored results in {store.root}; run `alem-eval score` first "
                               f"or point --results at a results directory")
        present = sorted({e.key.protocol for e in entries})
        if protocol is None and len(present) > 1:
            raise UsageError(f"the selected results mix protocols ({', '.join(present)}); "
                             f"choose one with --protocol")
        chosen = protocol or present[0]
        if chosen not in present:
            raise UsageError(f"no results with protocol {chosen!r} (present: {', '.join(present)})")
        entries = latest_entries([e for e in entries if e.key.protocol == chosen])
        available = sorted({c for e in entries for c in e.metric_columns})
        resolved = tuple(dict.fromkeys(resolve_metric(m, available) for m in metrics))
        optional = [m for m in optional_metrics if m in available]
        frame = store.read(entries, list(dict.fromkeys([*resolved, *optional])))
    frame, dropped = standard_rows(frame)
    if dropped:
        notes.append(f"left out {dropped} cross-difficulty rows (eval difficulty differs from "
                     f"the training difficulty); reports use the standard protocol only")
    if frame.empty:
        raise ResultsError("the selected results hold no standard-protocol rows (eval "
                           "difficulty == training difficulty)")
    return PreparedResults(frame.reset_index(drop=True), resolved, chosen, tuple(notes),
                           str(store.root), tuple(entries))
