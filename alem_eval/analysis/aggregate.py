"""The analysis over the results store: run matrices per group, and what report and
leaderboard show of them.

The shapes, from the store to the numbers:

* :func:`prepare` ``(store, selectors) -> PreparedResults``: the rows of one protocol,
  newest provenance per (cell, eval difficulty), eval difficulty == training difficulty;
  ``.frame`` is a DataFrame of one row per (cell, eval difficulty, episode) with the
  results-store columns (CONTRACTS.md).
* :func:`run_scores` ``(frame, metric) -> {Group: RunScores}``: per (budget, algorithm, eval
  difficulty), the run scores as rliable's ``(num_runs x 1)`` matrix (runs = seeds: each
  seed's mean over its episodes; runs = episodes: every (seed, episode)).
* :func:`summarize` ``(frame, metrics) -> {metric: {Group: AggregateRow}}`` and
  :func:`analyze` ``(frame, metric) -> MetricAnalysis``: the bootstrap estimates of
  :mod:`alem_eval.analysis.bootstrap` over those matrices. Difficulties are never pooled.

Metric names, labels and scales come from :mod:`alem_eval.analysis.metrics`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from alem_eval.algorithms.registry import algorithm_rank
from alem_eval.analysis.bootstrap import (
    AGGREGATES,
    RUNS_MODES,
    BootstrapSettings,
    Interval,
    StratifiedBootstrap,
)
from alem_eval.algorithms.config import DIFFICULTIES
from alem_eval.core.errors import UsageError
from alem_eval.hub.layout import budget_sort_key, budget_steps  # noqa: F401 (budget_steps re-exported)
from alem_eval.analysis.metrics import MetricInfo, metric_info, resolve_metric
from alem_eval.analysis.result_keys import ResultsError


# ----------------------------------------------------------------------------------------
# Ordering and groups
# ----------------------------------------------------------------------------------------
def budget_order(budget: str) -> tuple:
    return budget_sort_key(str(budget))


def algorithm_order(algorithm: str) -> tuple:
    return (algorithm_rank(algorithm), algorithm)


def difficulty_order(difficulty: str) -> tuple:
    return (
        DIFFICULTIES.index(difficulty) if difficulty in DIFFICULTIES else len(DIFFICULTIES),
        difficulty,
    )


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
        raise ResultsError(
            "run scores need eval difficulty == training difficulty rows; use standard_rows() first"
        )
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
        out[group] = RunScores(
            group, values.reshape(-1, 1), runs, tuple(int(s) for s in per_seed.size().index), len(g)
        )
    return dict(sorted(out.items(), key=lambda kv: kv[0].sort_key()))


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
        return [
            Group(e.budget, e.algorithm, d)
            for d in self.difficulties
            for e in self.entries
            if Group(e.budget, e.algorithm, d) not in self.aggregates
        ]


def _stream(runs: RunScores) -> tuple:
    g = runs.group
    return ("runs", runs.runs, g.budget, g.algorithm, g.difficulty)


def grid(df: pd.DataFrame) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """(budgets, algorithms, eval difficulties) present, in report order."""
    if df.empty:
        return (), (), ()
    return (
        tuple(sorted(map(str, df["budget"].unique()), key=budget_order)),
        tuple(sorted(map(str, df["algorithm"].unique()), key=algorithm_order)),
        tuple(sorted(map(str, df["eval_difficulty"].unique()), key=difficulty_order)),
    )


def summarize(
    df: pd.DataFrame,
    metrics: Sequence[str],
    settings: BootstrapSettings,
    *,
    names: Sequence[str] = ("mean",),
    bootstrap: StratifiedBootstrap | None = None,
) -> dict[str, dict[Group, AggregateRow]]:
    """Interval estimates of ``names`` for every metric and group (standard rows only):
    ``settings.method``'s interval, expanded for the group's runs (seeds), a fraction
    metric's clipped to [0, 1]."""
    bs = bootstrap or StratifiedBootstrap(settings)
    out: dict[str, dict[Group, AggregateRow]] = {}
    for metric in metrics:
        info = metric_info(metric)
        rows: dict[Group, AggregateRow] = {}
        for group, rs in run_scores(df, metric, runs=settings.runs).items():
            est = bs.aggregates(
                rs.scores,
                _stream(rs),
                names=names,
                gamma=1.0 if info.fraction else None,
                bounds=(0.0, 1.0) if info.fraction else None,
            )
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


def analyze(
    df: pd.DataFrame, metric: str, settings: BootstrapSettings, *, profile_points: int = 101
) -> MetricAnalysis:
    """Interval estimates, P(improvement), profiles and budget comparisons for one metric.

    ``df`` holds standard-protocol rows of one protocol (see :func:`standard_rows`,
    :func:`prepare`). Improvements: every pair of algorithms within a budget, and
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
                    p = bs.improvement(
                        runs[g1].scores, runs[g2].scores, _stream(runs[g1]), _stream(runs[g2])
                    )
                    improvements.append(ImprovementRow(d, g1.entry, g2.entry, p, "algorithm"))
        for a in algorithms:
            for b_lo, b_hi in itertools.combinations(budgets, 2):
                lo_g, hi_g = Group(b_lo, a, d), Group(b_hi, a, d)
                if lo_g not in runs or hi_g not in runs:
                    continue
                r_lo, r_hi = runs[lo_g], runs[hi_g]
                p = bs.improvement(r_hi.scores, r_lo.scores, _stream(r_hi), _stream(r_lo))
                improvements.append(ImprovementRow(d, hi_g.entry, lo_g.entry, p, "budget"))
                budget_rows.append(
                    BudgetRow(
                        a,
                        d,
                        b_lo,
                        b_hi,
                        aggregates[lo_g].estimates["mean"],
                        aggregates[hi_g].estimates["mean"],
                        bs.difference(r_hi.scores, r_lo.scores, _stream(r_hi), _stream(r_lo)),
                        p,
                    )
                )

    profiles: dict[Group, ProfileRow] = {}
    for d in difficulties:
        in_d = [rs for g, rs in runs.items() if g.difficulty == d]
        if not in_d:
            continue
        taus = _profile_taus(
            np.concatenate([rs.scores.ravel() for rs in in_d]), info.fraction, profile_points
        )
        for rs in in_d:
            point, lo, hi = bs.profile(rs.scores, taus, _stream(rs))
            profiles[rs.group] = ProfileRow(rs.group, taus, point, lo, hi)

    return MetricAnalysis(
        info,
        settings,
        budgets,
        algorithms,
        difficulties,
        aggregates,
        tuple(improvements),
        profiles,
        tuple(budget_rows),
    )


def pair_improvement(
    df: pd.DataFrame, metric: str, x: Group, y: Group, settings: BootstrapSettings
) -> Interval:
    """P(X > Y) for any two groups of one difficulty (e.g. two algorithms of two budgets)."""
    if x.difficulty != y.difficulty:
        raise UsageError(
            "probability of improvement compares groups of one difficulty; "
            "difficulties are never pooled"
        )
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


def with_one_seed_note(prepared: PreparedResults, runs: str) -> PreparedResults:
    """``prepared`` with a note when seeds are the runs and some (budget, algorithm, eval
    difficulty) has a single seed: its interval then has zero width (that seed's mean),
    which a table of intervals would otherwise pass off as certainty."""
    df = prepared.frame
    if runs != "seeds" or df.empty:
        return prepared
    seeds = df.groupby(["budget", "algorithm", "eval_difficulty"])["seed"].nunique()
    one = [f"{a} ({b}) {d}" for (b, a, d), n in seeds.items() if n == 1]
    if not one:
        return prepared
    named = ", ".join(one[:3]) + (", ..." if len(one) > 3 else "")
    note = (
        f"{len(one)} of {len(seeds)} groups have one seed ({named}): with seeds as runs, "
        "their intervals have zero width"
    )
    return replace(prepared, notes=(*prepared.notes, note))


def prepare(
    store,
    selectors: Sequence[str] | None = None,
    *,
    metrics: Sequence[str] = (),
    optional_metrics: Sequence[str] = (),
    protocol: str | None = None,
) -> PreparedResults:
    """Load what an analysis needs from a :class:`~alem_eval.analysis.results.ResultsStore`.

    ``metrics`` are names, labels or aliases and must exist (UsageError otherwise);
    ``optional_metrics`` are read when present. The rows are restricted to one protocol
    (``protocol`` or the only one present), to the newest provenance per (cell, eval
    difficulty) and to eval difficulty == training difficulty; each choice is noted.
    """
    from alem_eval.analysis.results import collect_warnings, latest_entries

    with collect_warnings() as notes:
        entries = store.entries(selectors)
        if not entries:
            raise ResultsError(
                f"no scored results in {store.root}; run `alem-eval score` first "
                f"or point --results at a results directory"
            )
        present = sorted({e.key.protocol for e in entries})
        if protocol is None and len(present) > 1:
            raise UsageError(
                f"the selected results mix protocols ({', '.join(present)}); "
                f"choose one with --protocol"
            )
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
        notes.append(
            f"left out {dropped} cross-difficulty rows (eval difficulty differs from "
            f"the training difficulty); reports use the standard protocol only"
        )
    if frame.empty:
        raise ResultsError(
            "the selected results hold no standard-protocol rows (eval "
            "difficulty == training difficulty)"
        )
    return PreparedResults(
        frame.reset_index(drop=True),
        resolved,
        chosen,
        tuple(notes),
        str(store.root),
        tuple(entries),
    )
