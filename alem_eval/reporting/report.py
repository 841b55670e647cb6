"""``alem-eval report``: a self-contained Markdown report with figures (PNG; PDF on request).

For each requested metric: interval estimates (IQM, mean, median, optimality gap),
probability of improvement, performance profiles (score distributions) and the budget
comparison, one panel per difficulty (difficulties are never averaged). A headline table
gives Base% / Coord% / Total% and the achievement fractions (mean [95% CI]) beside each
other. Missing (budget, algorithm, difficulty) combinations are shown as missing.

This module analyses the results and writes the report's files (``report.md``,
``stats.json``, ``figures/``, and with ``clips`` an episode GIF per algorithm); the figures
are drawn by :mod:`alem_eval.reporting.figures` (in worker processes), the Markdown text by
:mod:`alem_eval.reporting.markdown`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from collections.abc import Sequence

from alem_eval.analysis.aggregate import (
    Group,
    MetricAnalysis,
    PreparedResults,
    analyze,
    prepare,
    summarize,
    with_one_seed_note,
)
from alem_eval.analysis.bootstrap import BootstrapSettings, Interval
from alem_eval.analysis.digests import Digests, prepared_digests
from alem_eval.core.fsutil import write_text_atomic
from alem_eval.analysis.metrics import DEFAULT_METRIC, HEADLINE_METRICS, units_fields
from alem_eval.reporting.figures import DEFAULT_FORMATS, FIGURE_FORMATS, render_figures
from alem_eval.reporting.markdown import report_markdown


@dataclass(frozen=True)
class ReportResult:
    """What :func:`build_report` wrote."""

    out_dir: Path
    markdown: Path
    stats_json: Path
    figures: tuple[Path, ...]
    metrics: tuple[str, ...]
    protocol: str
    notes: tuple[str, ...]
    clips: tuple[Path, ...] = ()  # clips/<algorithm>.gif, embedded in report.md
    digests: Digests | None = None  # of the records the report used (also in stats.json)


@dataclass(frozen=True)
class ClipRequest:
    """Add a short self-play clip per algorithm to a report (``report --clips``): the first
    scored cell of each algorithm, read from ``source``, plays fast-protocol episode 0 on
    its training difficulty for at most ``max_steps`` steps
    (:func:`alem_eval.rendering.episode.algorithm_clips`)."""

    source: Any  # a hub.source_base.Source holding the scored cells
    max_steps: int = 200
    on_env_mismatch: str = "error"


def build_report(
    store,
    out_dir: str | Path,
    *,
    selectors: Sequence[str] | None = None,
    metrics: Sequence[str] = (DEFAULT_METRIC,),
    settings: BootstrapSettings = BootstrapSettings(),
    protocol: str | None = None,
    formats: Sequence[str] = DEFAULT_FORMATS,
    jobs: int | None = None,
    clips: ClipRequest | None = None,
) -> ReportResult:
    """Analyse the selected results of ``store`` and write the report into ``out_dir``
    (``report.md``, ``stats.json``, ``figures/<metric>_<kind>.<format>``).

    ``formats``: figure file formats (``png`` always; add ``pdf`` for vector copies).
    ``jobs``: worker processes drawing the figures (see :func:`.figures.render_figures`).
    ``clips``: also draw a clip per algorithm into ``clips/`` and embed them (after the
    figures, which are drawn before JAX is loaded)."""
    prepared = prepare(
        store,
        selectors,
        metrics=metrics or (DEFAULT_METRIC,),
        optional_metrics=[m.key for m in HEADLINE_METRICS],
        protocol=protocol,
    )
    result = write_report(prepared, Path(out_dir), settings, formats=formats, jobs=jobs)
    return result if clips is None else embed_clips(result, prepared, clips)


def embed_clips(
    result: ReportResult, prepared: PreparedResults, request: ClipRequest
) -> ReportResult:
    """Draw one clip per algorithm of the report's cells into ``clips/`` and append an
    "Episodes" section embedding them to ``report.md``."""
    from alem_eval.rendering.episode import algorithm_clips

    cell_ids = sorted({e.key.cell for e in prepared.entries})
    cells = request.source.select(cell_ids)
    clips = algorithm_clips(
        request.source,
        cells,
        result.out_dir / "clips",
        max_steps=request.max_steps,
        on_env_mismatch=request.on_env_mismatch,
    )
    lines = [
        "",
        "## Episodes",
        "",
        f"One greedy self-play episode per algorithm (fast protocol, episode 0: world "
        f"PRNGKey(9999), at most {request.max_steps} steps) on its cell's training "
        "difficulty, drawn with the environment's renderer (`alem-eval render`).",
        "",
    ]
    for algorithm, clip in clips.items():
        rel = clip.path.relative_to(result.out_dir).as_posix()
        lines += [
            f"**{algorithm}** (`{' + '.join(dict.fromkeys(clip.team))}`, {clip.eval_difficulty}): "
            f"{clip.steps} steps, {len(clip.achievements)} team achievements",
            "",
            f"![{algorithm}]({rel})",
            "",
        ]
    write_text_atomic(result.markdown, result.markdown.read_text() + "\n".join(lines))
    return replace(result, clips=tuple(c.path for c in clips.values()))


def write_report(
    prepared: PreparedResults,
    out_dir: Path,
    settings: BootstrapSettings,
    *,
    formats: Sequence[str] = DEFAULT_FORMATS,
    jobs: int | None = None,
) -> ReportResult:
    """Write ``report.md``, ``stats.json`` and ``figures/`` for already prepared results."""
    if not formats or "png" not in formats:
        raise ValueError("the Markdown report embeds PNG figures: formats must include 'png'")
    unknown = sorted(set(formats) - set(FIGURE_FORMATS))
    if unknown:
        raise ValueError(f"unknown figure format(s) {unknown}; choose from {FIGURE_FORMATS}")
    prepared = with_one_seed_note(prepared, settings.runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(exist_ok=True)
    df = prepared.frame
    analyses = [analyze(df, m, settings) for m in prepared.metrics]
    headline_keys = [m.key for m in HEADLINE_METRICS if m.key in df.columns]
    headline = summarize(df, headline_keys, settings)

    rendered = render_figures(analyses, fig_dir, formats, jobs=jobs)
    figures: list[Path] = []
    figure_refs: dict[tuple[str, str], str] = {}
    for (metric_key, kind), paths in rendered.items():
        figures += paths
        png = next(p for p in paths if p.suffix == ".png")
        figure_refs[(metric_key, kind)] = png.relative_to(out_dir).as_posix()

    digests = prepared_digests(
        prepared.root,
        prepared.entries,
        df,
        {
            "command": "report",
            "metrics": list(prepared.metrics),
            "bootstrap": dataclasses.asdict(settings),
        },
    )
    md = write_text_atomic(
        out_dir / "report.md",
        report_markdown(prepared, settings, analyses, headline, figure_refs, digests=digests),
    )
    stats = {**_stats_json(prepared, settings, analyses, headline), "digests": digests.as_json()}
    js = write_text_atomic(out_dir / "stats.json", json.dumps(stats, indent=1, allow_nan=False))
    return ReportResult(
        out_dir,
        md,
        js,
        tuple(figures),
        prepared.metrics,
        prepared.protocol,
        prepared.notes,
        digests=digests,
    )


# ----------------------------------------------------------------------------------------
# Machine-readable dump
# ----------------------------------------------------------------------------------------
def _iv(iv: Interval | None) -> list[float] | None:
    return None if iv is None else [round(v, 10) for v in iv.as_list()]


def _stats_json(
    prepared: PreparedResults,
    settings: BootstrapSettings,
    analyses: Sequence[MetricAnalysis],
    headline,
) -> dict[str, Any]:
    def group_dict(g: Group) -> dict[str, str]:
        return {"budget": g.budget, "algorithm": g.algorithm, "difficulty": g.difficulty}

    return {
        **units_fields(),
        "protocol": prepared.protocol,
        "settings": {
            "reps": settings.reps,
            "seed": settings.seed,
            "confidence": settings.confidence,
            "runs": settings.runs,
            "runs_label": settings.runs_label,
            "method": settings.method,
            "method_label": settings.method_label,
        },
        "notes": list(prepared.notes),
        "scale": "raw metric values (fractions in [0, 1] are not multiplied by 100)",
        "headline": [
            {
                **group_dict(g),
                "metric": k,
                "n_seeds": row.n_seeds,
                "n_runs": row.n_runs,
                "mean": _iv(row.estimates["mean"]),
            }
            for k, rows in headline.items()
            for g, row in rows.items()
        ],
        "metrics": [
            {
                "metric": a.metric.key,
                "aggregates": [
                    {
                        **group_dict(g),
                        "n_runs": row.n_runs,
                        "n_seeds": row.n_seeds,
                        **{n: _iv(iv) for n, iv in row.estimates.items()},
                    }
                    for g, row in a.aggregates.items()
                ],
                "probability_of_improvement": [
                    {
                        "difficulty": r.difficulty,
                        "x": r.x.label,
                        "y": r.y.label,
                        "kind": r.kind,
                        "p": _iv(r.probability),
                    }
                    for r in a.improvements
                ],
                "budget_comparison": [
                    {
                        "algorithm": r.algorithm,
                        "difficulty": r.difficulty,
                        "low": r.low,
                        "high": r.high,
                        "low_mean": _iv(r.low_mean),
                        "high_mean": _iv(r.high_mean),
                        "delta": _iv(r.delta),
                        "p_high_better": _iv(r.probability),
                    }
                    for r in a.budget_comparisons
                ],
                "missing": [group_dict(g) for g in a.missing()],
            }
            for a in analyses
        ],
    }
