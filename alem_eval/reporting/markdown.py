"""The text of ``report.md`` (:func:`report_markdown`); its tables are
:func:`alem_eval.core.tables.md_table` s, its numbers :func:`~alem_eval.core.tables.fmt_interval` s
(re-exported here).

``report.md`` holds the method, a headline table (Base% / Coord% / Total% and the
achievement fractions, mean [95% CI], beside each other), one section per metric (interval
estimates, probability of improvement, performance profiles, budget comparison, each with
its figure and table) and the provenance of every scored cell. Missing (budget, algorithm,
difficulty) combinations are shown as :data:`MISSING`, never as zero.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence

from alem_eval.analysis.aggregate import (
    AggregateRow,
    Group,
    MetricAnalysis,
    PreparedResults,
    grid,
)
from alem_eval.analysis.bootstrap import AGGREGATE_LABELS, AGGREGATES, BootstrapSettings, Interval
from alem_eval.analysis.digests import Digests, footer_digest_line
from alem_eval.analysis.metrics import metric_info
from alem_eval.core.tables import MISSING_MD, fmt_interval, md_table
from alem_eval.reporting.figures import FIGURE_KINDS

__all__ = ["MISSING", "md_table", "report_markdown"]

MISSING = MISSING_MD


def _fmt(iv: Interval | None, scale: float, digits: int = 1) -> str:
    return MISSING if iv is None else fmt_interval(iv.scaled(scale), digits)


def _headline_section(
    headline: Mapping[str, Mapping[Group, AggregateRow]], df, settings: BootstrapSettings
) -> list[str]:
    budgets, algorithms, difficulties = grid(df)
    infos = [metric_info(k) for k in headline]
    out = [
        "## Headline scores",
        "",
        f"Mean over runs with its {settings.confidence:.0%} CI ({settings.method_name} "
        "bootstrap over the runs; the worlds are the protocol's fixed ones), in percent. "
        "Base% / Coord% / Total% are the reward-normalised leaderboard scores "
        "(`Team/normal_reward_pct_of_max`, `Team/coord_reward_pct_of_max`, "
        "`Team/reward_pct_of_max`); the achievement "
        "fractions (`Team/achievement_pct` and its normal / coordination variants) are "
        "shown beside them. Each is normalised on its own (Total is not Base + Coord).",
        "",
    ]
    for d in difficulties:
        rows = []
        for b in budgets:
            for alg in algorithms:
                g = Group(b, alg, d)
                first = next((headline[k].get(g) for k in headline if headline[k].get(g)), None)
                rows.append(
                    [b, alg, first.n_seeds if first else MISSING]
                    + [
                        _fmt(
                            headline[i.key][g].estimates["mean"] if g in headline[i.key] else None,
                            i.scale,
                        )
                        for i in infos
                    ]
                )
        out += [
            f"### {d}",
            "",
            md_table(["Budget", "Algorithm", "Seeds"] + [i.label for i in infos], rows),
            "",
        ]
    return out


def _metric_section(a: MetricAnalysis, refs: Mapping[tuple[str, str], str]) -> list[str]:
    info = a.metric
    s = info.scale
    out = [f"## {info.label} (`{info.key}`)", ""]
    if info.description != info.key:
        out += [f"{info.description[0].upper()}{info.description[1:]}.", ""]
    if not info.fraction:
        out += ["Not a fraction metric: the optimality gap is not reported.", ""]

    out += ["### Interval estimates", ""]
    if ("interval_estimates" in FIGURE_KINDS) and (info.key, "interval_estimates") in refs:
        out += [f"![{info.label} interval estimates]({refs[(info.key, 'interval_estimates')]})", ""]
    aggs = [n for n in AGGREGATES if n != "optimality_gap" or info.fraction]
    rows = []
    for d in a.difficulties:
        for e in a.entries:
            row = a.aggregates.get(Group(e.budget, e.algorithm, d))
            rows.append(
                [d, e.budget, e.algorithm, row.n_runs if row else MISSING]
                + [_fmt(row.estimates.get(n) if row else None, s) for n in aggs]
            )
    out += [
        md_table(
            ["Difficulty", "Budget", "Algorithm", "Runs"] + [AGGREGATE_LABELS[n] for n in aggs],
            rows,
        ),
        "",
    ]

    out += ["### Probability of improvement", ""]
    if (info.key, "probability_of_improvement") in refs:
        out += [
            f"![{info.label} probability of improvement]"
            f"({refs[(info.key, 'probability_of_improvement')]})",
            "",
        ]
    if a.improvements:
        rows = [
            [r.difficulty, r.x.label, r.y.label, _fmt(r.probability, 1.0, 2)]
            for r in sorted(
                a.improvements,
                key=lambda r: (
                    r.difficulty not in a.difficulties,
                    a.difficulties.index(r.difficulty),
                    r.kind != "algorithm",
                ),
            )
        ]
        out += [
            "P(X > Y): the probability that a run of X scores higher than a run of Y "
            "(ties count one half).",
            "",
            md_table(["Difficulty", "X", "Y", "P(X > Y) [95% CI]"], rows),
            "",
        ]
    else:
        out += ["No pair of entries shares a difficulty.", ""]

    out += ["### Performance profiles", ""]
    if (info.key, "performance_profiles") in refs:
        out += [
            f"![{info.label} performance profiles]({refs[(info.key, 'performance_profiles')]})",
            "",
            "Fraction of runs whose score exceeds τ, with pointwise CI bands.",
            "",
        ]

    out += ["### Budget comparison", ""]
    if a.budget_comparisons:
        if (info.key, "budget_comparison") in refs:
            out += [
                f"![{info.label} budget comparison]({refs[(info.key, 'budget_comparison')]})",
                "",
            ]
        rows = [
            [
                r.difficulty,
                r.algorithm,
                f"{r.low} → {r.high}",
                _fmt(r.low_mean, s),
                _fmt(r.high_mean, s),
                _fmt(r.delta, s),
                _fmt(r.probability, 1.0, 2),
            ]
            for r in a.budget_comparisons
        ]
        out += [
            md_table(
                [
                    "Difficulty",
                    "Algorithm",
                    "Budgets",
                    "Mean (smaller)",
                    "Mean (larger)",
                    "Δ mean",
                    "P(larger > smaller)",
                ],
                rows,
            ),
            "",
        ]
    elif len(a.budgets) < 2:
        out += [
            f"Only one budget ({', '.join(a.budgets)}) in the selection: nothing to compare.",
            "",
        ]
    else:
        out += ["No algorithm has scores for two budgets on the same difficulty.", ""]

    missing = a.missing()
    if missing:
        out += [
            "Missing (no scores): "
            + ", ".join(f"{g.label} on {g.difficulty}" for g in missing)
            + ".",
            "",
        ]
    return out


def _provenance_section(prepared: PreparedResults, digests: Digests | None = None) -> list[str]:
    df = prepared.frame
    per_cell = (
        df.groupby(["cell", "eval_difficulty"], sort=False)
        .agg(
            episodes=("episode", "count"),
            checkpoint_hash=("checkpoint_hash", "first"),
            config_hash=("config_hash", "first"),
            env_version=("env_version", "first"),
            jax_version=("jax_version", "first"),
            alem_eval_version=("alem_eval_version", "first"),
        )
        .reset_index()
    )

    def uniq(col: str) -> str:
        vals = sorted({str(v) for v in df[col].dropna().unique()})
        return ", ".join(f"`{v}`" for v in vals) or MISSING

    rows = [
        [
            r.cell,
            r.eval_difficulty,
            r.episodes,
            str(r.checkpoint_hash)[:16],
            r.config_hash,
            r.env_version,
            r.jax_version,
            r.alem_eval_version,
        ]
        for r in per_cell.itertuples()
    ]
    return [
        "## Provenance",
        "",
        f"- results: `{prepared.root}`; protocol `{prepared.protocol}`; "
        f"{len(per_cell)} scored cells, {len(df)} episodes",
        f"- env versions: {uniq('env_version')}; jax: {uniq('jax_version')}; "
        f"alem-eval: {uniq('alem_eval_version')}",
        *([f"- {footer_digest_line(digests)}"] if digests is not None else []),
        "",
        "<details><summary>Per cell</summary>",
        "",
        md_table(
            [
                "Cell",
                "Eval difficulty",
                "Episodes",
                "Checkpoint hash",
                "Config hash",
                "Env version",
                "JAX",
                "alem-eval",
            ],
            rows,
        ),
        "",
        "</details>",
        "",
    ]


def report_markdown(
    prepared: PreparedResults,
    settings: BootstrapSettings,
    analyses: Sequence[MetricAnalysis],
    headline,
    refs,
    *,
    digests: Digests | None = None,
) -> str:
    """The text of ``report.md``: ``headline`` is :func:`.aggregate.summarize` of the
    headline metrics, ``refs[(metric key, kind)]`` the relative path of each PNG figure."""
    from alem_eval.core.version import __version__

    df = prepared.frame
    budgets, algorithms, difficulties = grid(df)
    now = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Alem evaluation report",
        "",
        f"Generated {now} by alem-eval {__version__}.",
        "",
        "## Method",
        "",
        f"- Scores: protocol `{prepared.protocol}`; budgets {', '.join(budgets)}; algorithms "
        f"{', '.join(algorithms)}; difficulties {', '.join(difficulties)} — each difficulty "
        "is reported separately, never averaged.",
        f"- **Runs: {settings.runs}** ({settings.runs_label}).",
        f"- Intervals: {settings.confidence:.0%} {settings.method_name} CIs from a "
        f"stratified bootstrap ({settings.reps:,} replicates, seed {settings.seed}; the same "
        "seed reproduces every interval exactly). The runs are seeds on the protocol's fixed "
        "worlds (every seed plays the same episodes' worlds), so an interval is over training "
        "seeds only. "
        + (
            "Expanded: the percentile interval widened about the estimate by "
            "sqrt(n/(n−1)) t_{n−1}/z, n = runs per group (two-sample P(X > Y) and "
            "differences: the smaller n, t with n_X + n_Y − 2 degrees of freedom), so that "
            "the interval of a mean holds its level from 3 seeds on (P(X > Y) of 3 seeds "
            "stays below it); fractions clipped to [0, 1]; `--ci percentile` gives "
            "rliable's plain percentile interval."
            if settings.method == "expanded"
            else "Plain percentile intervals (rliable's) are narrower than their label with "
            "few seeds (in simulations they cover 73–75% at 3 seeds, 82–85% at 5); the "
            "default `--ci expanded` widens them."
        ),
        "- Aggregates follow rliable: IQM = 25% trimmed mean of the runs; optimality gap = "
        "1 − mean(min(score, 1)) on fraction metrics; median = median of the runs (rliable's "
        "median of per-task means equals the mean when, as here, an aggregate covers one "
        "task); P(X > Y) = Mann–Whitney U / (n_X n_Y), X and Y resampled independently.",
        "- Fraction metrics are shown ×100 (percent; gaps and differences in percentage points).",
        "",
    ]
    if prepared.notes:
        lines += ["Notes:", ""] + [f"- {n}" for n in prepared.notes] + [""]
    lines += _headline_section(headline, df, settings)
    for a in analyses:
        lines += _metric_section(a, refs)
    lines += _provenance_section(prepared, digests)
    return "\n".join(lines).replace("\n\n\n", "\n\n") + "\n"
