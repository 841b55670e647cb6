"""Aggregate statistics over scored episodes: a façade over three small modules.

* :mod:`alem_eval.metrics`: the metric registry (keys, labels, display scale, aliases),
* :mod:`alem_eval.bootstrap`: rliable's aggregates and the seeded stratified bootstrap on
  ``(num_runs x num_tasks)`` matrices,
* :mod:`alem_eval.analysis`: from the results store to run matrices, interval estimates,
  probabilities of improvement, profiles and budget comparisons.

New code imports from those modules; the public names stay importable from here.
"""

from __future__ import annotations

from .analysis import (
    AggregateRow,
    BudgetRow,
    Entry,
    Group,
    ImprovementRow,
    MetricAnalysis,
    PreparedResults,
    ProfileRow,
    RunScores,
    algorithm_order,
    analyze,
    budget_order,
    budget_steps,
    difficulty_order,
    grid,
    pair_improvement,
    prepare,
    run_scores,
    standard_rows,
    summarize,
)
from .bootstrap import (
    AGGREGATE_LABELS,
    AGGREGATES,
    RUNS_LABELS,
    RUNS_MODES,
    BootstrapSettings,
    Interval,
    Resamples,
    StratifiedBootstrap,
    aggregate_iqm,
    aggregate_mean,
    aggregate_median,
    aggregate_median_of_task_means,
    aggregate_optimality_gap,
    probability_of_improvement,
    score_distribution,
    weighted_percentiles,
)
from .metrics import (
    DEFAULT_METRIC,
    HEADLINE_METRICS,
    LEADERBOARD_METRICS,
    METRICS,
    MetricInfo,
    metric_info,
    resolve_metric,
)

__all__ = [
    # metrics
    "METRICS",
    "HEADLINE_METRICS",
    "LEADERBOARD_METRICS",
    "DEFAULT_METRIC",
    "MetricInfo",
    "metric_info",
    "resolve_metric",
    # bootstrap
    "AGGREGATES",
    "AGGREGATE_LABELS",
    "RUNS_MODES",
    "RUNS_LABELS",
    "Interval",
    "BootstrapSettings",
    "Resamples",
    "StratifiedBootstrap",
    "aggregate_mean",
    "aggregate_median",
    "aggregate_median_of_task_means",
    "aggregate_iqm",
    "aggregate_optimality_gap",
    "probability_of_improvement",
    "score_distribution",
    "weighted_percentiles",
    # analysis
    "budget_steps",
    "budget_order",
    "algorithm_order",
    "difficulty_order",
    "Entry",
    "Group",
    "RunScores",
    "standard_rows",
    "run_scores",
    "AggregateRow",
    "ImprovementRow",
    "ProfileRow",
    "BudgetRow",
    "MetricAnalysis",
    "grid",
    "summarize",
    "analyze",
    "pair_improvement",
    "PreparedResults",
    "prepare",
]
