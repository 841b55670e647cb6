"""The bootstrap engine: rliable's aggregates and a seeded, stratified bootstrap.

Every function takes scores as rliable does, an ``ndarray (num_runs x num_tasks)``
(a 1-D array is one task), and returns floats or :class:`Interval` s:

* ``aggregate_mean(scores) -> float``: mean over tasks of the per-task mean over runs,
* ``aggregate_iqm(scores) -> float``: 25 % trimmed mean of all runs x tasks (scipy's),
* ``aggregate_median(scores) -> float``: median of all runs x tasks (the 50 % counterpart
  of the IQM; see below), ``aggregate_median_of_task_means(scores) -> float``: rliable's
  "median", the median over tasks of the per-task means,
* ``aggregate_optimality_gap(scores, gamma=1) -> float``: ``gamma - mean(min(scores, gamma))``,
* ``probability_of_improvement(x (n_x x T), y (n_y x T)) -> float``: P(X > Y), the mean
  over tasks of the Mann-Whitney U statistic / (n_x n_y) (ties count one half),
* ``score_distribution(scores, taus (K,)) -> ndarray (K,)``: the fraction of runs x tasks
  above each tau (the performance profile),

and :class:`StratifiedBootstrap` gives their confidence intervals: runs are resampled with
replacement within each task; X and Y are resampled independently for P(X > Y).
Definitions follow rliable 1.2.0 ("Deep RL at the Edge of the Statistical Precipice").

The interval (:attr:`BootstrapSettings.method`):

* ``"expanded"`` (default): the percentile interval widened about the estimate by ``k =
  sqrt(n/(n-1)) t_{n-1}(1 - alpha/2) / z(1 - alpha/2)`` (:func:`expansion`), n the runs per
  task (the seeds): Hesterberg's expanded percentile interval (2015; :func:`expanded_levels`)
  with the expansion applied to distances, not quantile levels. The two agree on a normal
  bootstrap distribution, but a mean of 3 seeds never resamples outside [min, max], so
  expanded levels cover at most 75% there. Coverage: ``bench/interval_coverage.py``.
  Two-sample statistics (P(X > Y), differences) use the smaller n and ``n_x + n_y - 2``
  degrees of freedom; a profile point (a mean of indicators) is expanded like a mean;
  ``bounds`` clip (fractions, P and profiles: [0, 1]).
* ``"percentile"``: rliable's plain percentile interval, for parity with papers that used it.

Alem reports each difficulty separately, so every aggregate of :mod:`alem_eval.analysis.aggregate`
covers exactly one task. rliable's median of task means then equals the mean, so the
"median" reported is the median over runs.

The bootstrap is our own: vectorised (resamples are drawn as index counts and every
statistic is a weighted sum, no per-replicate Python) and seeded per stream, so an
interval depends only on (seed, reps, stream, its own runs) and is reproduced exactly.
Nothing here knows about results frames, metrics or cells.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np
import scipy.stats

from alem_eval.core.errors import UsageError

AGGREGATES: tuple[str, ...] = ("iqm", "mean", "median", "optimality_gap")
AGGREGATE_LABELS: dict[str, str] = {
    "iqm": "IQM",
    "mean": "Mean",
    "median": "Median",
    "optimality_gap": "Optimality gap",
    "median_of_task_means": "Median of task means",
}
# What a run is (BootstrapSettings.runs): the analysis builds the run matrices accordingly.
RUNS_MODES: tuple[str, ...] = ("seeds", "episodes")

RUNS_LABELS = {
    "seeds": "runs = seeds: each seed's score is the mean over its episodes on the "
    "protocol's fixed worlds, so an interval is over training seeds only",
    "episodes": "runs = episodes: every (seed, episode) pair is a run; this ignores that "
    "episodes of one seed share a checkpoint, so the CIs are narrower than "
    "seed-level ones",
}

# The interval method (BootstrapSettings.method); see the module docstring.
CI_METHODS: tuple[str, ...] = ("expanded", "percentile")
CI_NAMES = {"expanded": "expanded percentile", "percentile": "plain percentile (rliable's)"}
CI_LABELS = {
    "expanded": "expanded percentile CIs (the percentile interval widened about the estimate "
    "by sqrt(n/(n-1)) t_{n-1}/z, n = seeds per group)",
    "percentile": "plain percentile CIs (rliable's)",
}


# ----------------------------------------------------------------------------------------
# Exact aggregates (rliable definitions) on a (runs, tasks) matrix
# ----------------------------------------------------------------------------------------
def aggregate_mean(scores: np.ndarray) -> float:
    """``scores (num_runs x num_tasks) -> float``: mean over tasks of the task means."""
    return float(np.mean(np.mean(scores, axis=0)))


def aggregate_median_of_task_means(scores: np.ndarray) -> float:
    """``scores (num_runs x num_tasks) -> float``: median over tasks of the task means."""
    return float(np.median(np.mean(scores, axis=0)))


def aggregate_median(scores: np.ndarray) -> float:
    """``scores (num_runs x num_tasks) -> float``: median of all runs x tasks."""
    return float(np.median(scores))


def aggregate_iqm(scores: np.ndarray) -> float:
    """``scores (num_runs x num_tasks) -> float``: 25% trimmed mean of all runs x tasks."""
    return float(scipy.stats.trim_mean(scores, proportiontocut=0.25, axis=None))


def aggregate_optimality_gap(scores: np.ndarray, gamma: float = 1.0) -> float:
    """``scores (num_runs x num_tasks) -> float``: ``gamma - mean(min(scores, gamma))``."""
    return float(gamma - np.mean(np.minimum(scores, gamma)))


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """``x (n_x x num_tasks), y (n_y x num_tasks) -> float``: P(X > Y) averaged over tasks;
    ties count one half (Mann-Whitney U / (n_x n_y))."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    return float(np.mean([pairwise(x[:, t], y[:, t]).mean() for t in range(x.shape[1])]))


def score_distribution(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """``scores (num_runs x num_tasks), taus (K,) -> (K,)``: fraction of runs x tasks
    scoring above each tau."""
    return (np.asarray(scores).reshape(-1, 1) > np.asarray(taus).reshape(1, -1)).mean(axis=0)


def pairwise(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``x (n_x,), y (n_y,) -> (n_x, n_y)``: 1 where x > y, 0.5 on ties, else 0."""
    return (x[:, None] > y[None, :]) + 0.5 * (x[:, None] == y[None, :])


_POINT = {
    "mean": aggregate_mean,
    "iqm": aggregate_iqm,
    "median": aggregate_median,
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

    def scaled(self, k: float) -> Interval:
        return Interval(self.point * k, self.lo * k, self.hi * k)

    def as_list(self) -> list[float]:
        return [self.point, self.lo, self.hi]

    def fmt(self, digits: int = 1) -> str:
        return f"{self.point:.{digits}f} [{self.lo:.{digits}f}, {self.hi:.{digits}f}]"


@dataclass(frozen=True)
class BootstrapSettings:
    """Stratified bootstrap settings (validated: bad values are UsageErrors); ``method`` is
    the interval, one of :data:`CI_METHODS`."""

    reps: int = 50_000
    seed: int = 0
    confidence: float = 0.95
    runs: str = "seeds"
    method: str = "expanded"

    def __post_init__(self) -> None:
        if (
            isinstance(self.reps, bool)
            or not isinstance(self.reps, (int, np.integer))
            or not 1 <= self.reps <= 10_000_000
        ):
            raise UsageError(f"--reps must be an integer between 1 and 10000000, got {self.reps!r}")
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, (int, np.integer))
            or self.seed < 0
        ):
            raise UsageError(f"--seed must be a non-negative integer, got {self.seed!r}")
        if not 0.0 < float(self.confidence) < 1.0:
            raise UsageError(f"confidence must be in (0, 1), got {self.confidence!r}")
        if self.runs not in RUNS_MODES:
            raise UsageError(f"--runs must be one of {', '.join(RUNS_MODES)}, got {self.runs!r}")
        if self.method not in CI_METHODS:
            raise UsageError(f"--ci must be one of {', '.join(CI_METHODS)}, got {self.method!r}")

    @property
    def runs_label(self) -> str:
        return RUNS_LABELS[self.runs]

    @property
    def method_name(self) -> str:
        """``"expanded percentile"`` or ``"plain percentile (rliable's)"``."""
        return CI_NAMES[self.method]

    @property
    def method_label(self) -> str:
        return CI_LABELS[self.method]

    def describe(self) -> str:
        return (
            f"stratified bootstrap, {self.reps:,} replicates, seed {self.seed}, "
            f"{self.confidence:.0%} {self.method_label}; {self.runs_label}"
        )


def expanded_z(n, confidence: float, df=None) -> np.ndarray:
    """``n (X,) -> (X,)``: ``sqrt(n / (n - 1)) t_df(1/2 + confidence/2)``, the normal
    quantile the expanded interval stands at (``df`` defaults to n - 1); NaN for n < 2."""
    n = np.asarray(n, float)
    ok = n >= 2
    dof = np.where(ok, n - 1 if df is None else df, 1.0)
    z = np.sqrt(np.where(ok, n, 2.0) / np.where(ok, n - 1, 1.0)) * scipy.stats.t.ppf(
        0.5 + confidence / 2, dof
    )
    return np.where(ok, z, np.nan)


def expanded_levels(n, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """``n (X,) -> (lo, hi)``, each ``(X,)`` in [0, 1]: the quantile levels of Hesterberg's
    expanded percentile interval for n independent units; NaN for n < 2."""
    lo = scipy.stats.norm.cdf(-expanded_z(n, confidence))
    return lo, 1.0 - lo


@functools.lru_cache(maxsize=1024)
def expansion(n: int, confidence: float, df: float | None = None) -> float:
    """The factor the expanded interval widens the percentile interval by (about the
    estimate): ``expanded_z / z``; 1 for n < 2 (one run: the interval has zero width)."""
    z = float(expanded_z(n, confidence, df))
    return z / float(scipy.stats.norm.ppf(0.5 + confidence / 2)) if math.isfinite(z) else 1.0


def _stream_entropy(seed: int, stream: Sequence) -> list[int]:
    digest = hashlib.sha256(json.dumps([str(s) for s in stream]).encode()).digest()
    return [int(seed)] + [int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4)]


def stream_rng(seed: int, stream: Sequence) -> np.random.Generator:
    """The random stream named by ``stream`` under the user's ``seed``: independent
    streams from one seed, the same numbers for the same (seed, stream)."""
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(_stream_entropy(seed, stream)))
    )


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
    def from_counts(cls, counts: np.ndarray) -> Resamples:
        reps, _, n_runs = counts.shape
        flat = counts.reshape(reps, -1)
        if flat.shape[1] * math.log2(n_runs + 1) < 62:  # a row fits one int64 code
            powers = (n_runs + 1) ** np.arange(flat.shape[1], dtype=np.int64)
            codes = flat.astype(np.int64) @ powers
            _, first, index, weights = np.unique(
                codes, return_index=True, return_inverse=True, return_counts=True
            )
            if len(first) <= reps // 2:
                return cls(counts[first], weights.astype(np.int64), index.reshape(-1))
        return cls(counts, np.ones(reps, dtype=np.int64), np.arange(reps))


def lerp(a: np.ndarray, b: np.ndarray, t: float | np.ndarray) -> np.ndarray:
    """NumPy's percentile interpolation, reproduced bit for bit."""
    diff = b - a
    return np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)


def weighted_percentiles(
    values: np.ndarray, weights: np.ndarray, qs: Sequence[float]
) -> np.ndarray:
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
        j = math.floor(pos)
        a = vs[(cw <= j).sum(axis=0), cols]
        b = vs[(cw <= min(j + 1, n - 1)).sum(axis=0), cols]
        out[i] = lerp(a, b, pos - j)
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
        rng = stream_rng(self.settings.seed, stream)
        rows = self.reps * n_tasks
        idx = rng.integers(0, n_runs, size=(rows, n_runs), dtype=np.int64)
        idx += (np.arange(rows, dtype=np.int64) * n_runs)[:, None]
        dtype = np.uint8 if n_runs < 256 else np.uint16 if n_runs < 65536 else np.int64
        counts = np.bincount(idx.ravel(), minlength=rows * n_runs).astype(dtype)
        return counts.reshape(self.reps, n_tasks, n_runs)

    def interval(
        self,
        samples: np.ndarray,
        point,
        weights: np.ndarray | None = None,
        *,
        n: int,
        df: float | None = None,
        bounds: tuple[float, float] | None = None,
    ):
        """The interval(s) of bootstrap ``samples`` (axis 0 = replicates, or distinct
        resamples with ``weights``) about ``point``: their percentiles, expanded for ``n``
        independent runs (``df`` degrees of freedom) under ``method="expanded"``, clipped
        to ``bounds``."""
        if weights is None:
            lo, hi = np.percentile(samples, self._quantiles, axis=0)
        else:
            lo, hi = weighted_percentiles(samples, weights, self._quantiles)
        return self._finish(point, lo, hi, n=n, df=df, bounds=bounds)

    def _finish(self, point, lo, hi, *, n: int, df: float | None, bounds):
        if self.settings.method == "expanded":
            k = expansion(n, self.settings.confidence, df)
            lo, hi = point + k * (lo - point), point + k * (hi - point)
        if bounds is not None:
            lo, hi = np.clip(lo, *bounds), np.clip(hi, *bounds)
        if np.ndim(point) == 0:
            return Interval(float(point), float(lo), float(hi))
        return np.asarray(point, float), np.asarray(lo, float), np.asarray(hi, float)

    # -- statistics ----------------------------------------------------------------------
    def aggregates(
        self,
        scores: np.ndarray,
        stream: Sequence,
        *,
        names: Sequence[str] = AGGREGATES,
        gamma: float | None = 1.0,
        bounds: tuple[float, float] | None = None,
    ) -> dict[str, Interval]:
        """``scores (num_runs x num_tasks) -> {name: Interval}``: interval estimates of the
        named aggregates (``optimality_gap`` needs a gamma; it is left out when ``gamma``
        is None). The expansion's n is ``num_runs`` (runs per task: the seeds); ``bounds``
        clips every interval (fractions: (0, 1))."""
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
                out[name] = self.interval(
                    samples, aggregate_optimality_gap(x, gamma), w, n=n_runs, bounds=bounds
                )
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
            out[name] = self.interval(samples, _POINT[name](x), w, n=n_runs, bounds=bounds)
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

    def improvement(
        self, x: np.ndarray, y: np.ndarray, stream_x: Sequence, stream_y: Sequence
    ) -> Interval:
        """``x (n_x x T), y (n_y x T) -> Interval``: P(X > Y) with X and Y resampled
        independently (each within each task)."""
        x, y = _as_matrix(x), _as_matrix(y)
        if x.shape[1] != y.shape[1]:
            raise ValueError("X and Y must have the same tasks")
        rx = self.resamples(x.shape[0], x.shape[1], stream_x)
        ry = self.resamples(y.shape[0], y.shape[1], stream_y)
        pairs = [pairwise(x[:, t], y[:, t]).astype(np.float32) for t in range(x.shape[1])]
        norm = x.shape[0] * y.shape[0]

        # float32 is exact here: counts <= n and pairwise values in {0, 0.5, 1}, sums < 2**24.
        def table():
            return (
                np.mean(
                    [
                        (rx.counts[:, t, :].astype(np.float32) @ s)
                        @ ry.counts[:, t, :].astype(np.float32).T
                        for t, s in enumerate(pairs)
                    ],
                    axis=0,
                    dtype=np.float64,
                )
                / norm
            )

        def per_replicate(cx, cy):
            return (
                np.mean(
                    [
                        np.einsum(
                            "bj,bj->b",
                            cx[:, t, :].astype(np.float32) @ s,
                            cy[:, t, :].astype(np.float32),
                            dtype=np.float64,
                        )
                        for t, s in enumerate(pairs)
                    ],
                    axis=0,
                )
                / norm
            )

        samples, w = self._paired(rx, ry, table, per_replicate)
        n, df = _two_sample(x, y)
        return self.interval(
            samples, probability_of_improvement(x, y), w, n=n, df=df, bounds=(0.0, 1.0)
        )

    def difference(
        self, x: np.ndarray, y: np.ndarray, stream_x: Sequence, stream_y: Sequence
    ) -> Interval:
        """``x (n_x x T), y (n_y x T) -> Interval``: mean(X) - mean(Y), resampled
        independently."""
        x, y = _as_matrix(x), _as_matrix(y)
        (nx, tx), (ny, ty) = x.shape, y.shape
        rx, ry = self.resamples(nx, tx, stream_x), self.resamples(ny, ty, stream_y)
        mx = _weighted_task_means(rx.counts, x.T).mean(axis=1)
        my = _weighted_task_means(ry.counts, y.T).mean(axis=1)
        samples, w = self._paired(
            rx, ry, lambda: mx[:, None] - my[None, :], lambda cx, cy: mx[rx.index] - my[ry.index]
        )
        n, df = _two_sample(x, y)
        return self.interval(samples, aggregate_mean(x) - aggregate_mean(y), w, n=n, df=df)

    def profile(self, scores: np.ndarray, taus: np.ndarray, stream: Sequence):
        """``scores (num_runs x num_tasks), taus (K,) -> (point, lo, hi)``, each ``(K,)``:
        the score distribution at each tau with its pointwise interval."""
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
        point = score_distribution(x, taus)
        return self._finish(point, lo, hi, n=x.shape[0], df=None, bounds=(0.0, 1.0))


def _two_sample(x: np.ndarray, y: np.ndarray) -> tuple[int, int]:
    """(n, df) of a two-sample expansion: the smaller runs per task, n_x + n_y - 2 dof."""
    return min(x.shape[0], y.shape[0]), max(x.shape[0] + y.shape[0] - 2, 1)


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
        j = math.floor(pos)
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
