"""The report's figures: one plot kind per :data:`FIGURE_KINDS` entry, drawn per metric.

Interval estimates (IQM, mean, median, optimality gap), probability of improvement,
performance profiles (score distributions) and the budget comparison, one panel per
difficulty (difficulties are never averaged); missing (budget, algorithm, difficulty)
combinations are shown as missing.

Figures are drawn on :class:`matplotlib.figure.Figure` objects (Agg canvas, no pyplot
state) and saved with a tight bounding box. Drawing dominates the report's time (about a
second per figure file on a 2-core CPU, against well under a second for all the statistics),
so each figure is drawn and saved in its own worker process (:func:`render_figures`; one
worker per core, forked, so a worker starts with this module already imported); PDF copies
are written only when asked for (``formats``).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
from pathlib import Path
from typing import Any
from collections.abc import Sequence

import numpy as np

from alem_eval.analysis.aggregate import Entry, Group, MetricAnalysis
from alem_eval.analysis.bootstrap import AGGREGATE_LABELS, AGGREGATES
from alem_eval.analysis.metrics import MetricInfo

FIGURE_KINDS: tuple[str, ...] = (
    "interval_estimates",
    "probability_of_improvement",
    "performance_profiles",
    "budget_comparison",
)
FIGURE_FORMATS: tuple[str, ...] = ("png", "pdf")  # every format a figure can be saved in
DEFAULT_FORMATS: tuple[str, ...] = ("png",)  # what the report writes unless asked (--pdf)
_COLORS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


# ----------------------------------------------------------------------------------------
# Rendering figures in worker processes
# ----------------------------------------------------------------------------------------
def _plotter(kind: str):
    return {
        "interval_estimates": plot_interval_estimates,
        "probability_of_improvement": plot_improvements,
        "performance_profiles": plot_profiles,
        "budget_comparison": plot_budget_comparison,
    }[kind]


def _render_one(a: MetricAnalysis, kind: str, fig_dir: Path, formats: Sequence[str]) -> list[Path]:
    """Draw one figure and save it in every format ([] when the figure does not apply)."""
    fig = _plotter(kind)(a)
    return [] if fig is None else save_figure(fig, fig_dir / f"{a.metric.slug}_{kind}", formats)


def fork_is_safe() -> bool:
    """Whether worker processes may be forked from this one: the platform forks, and no
    multithreaded runtime that forking could leave with a held lock (JAX) is loaded."""
    return "fork" in multiprocessing.get_all_start_methods() and "jax" not in sys.modules


def default_jobs(n_figures: int) -> int:
    """One worker per core (at most one per figure) where forking is safe, else 1."""
    if not fork_is_safe():
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(n_figures, cores or 1))


def render_figures(
    analyses: Sequence[MetricAnalysis],
    fig_dir: Path,
    formats: Sequence[str] = DEFAULT_FORMATS,
    *,
    jobs: int | None = None,
) -> dict[tuple[str, str], list[Path]]:
    """Draw and save every figure of ``analyses`` -> {(metric key, kind): paths}, in
    report order; figures that do not apply (a single budget: no budget comparison) are
    left out. matplotlib is not thread-safe, so figures are drawn in ``jobs`` worker
    processes (default :func:`default_jobs`; 1: in this process). Workers are forked
    (nothing to import again); where forking is not safe (JAX loaded) and ``jobs`` > 1
    they are spawned, which costs each one the imports (about a second)."""
    tasks = [(a, kind) for a in analyses for kind in FIGURE_KINDS]
    n = default_jobs(len(tasks)) if jobs is None else max(1, min(jobs, len(tasks)))
    if n <= 1:
        paths = [_render_one(a, kind, fig_dir, formats) for a, kind in tasks]
    else:
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork" if fork_is_safe() else "spawn")
        with ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            futures = [
                pool.submit(_render_one, a, kind, fig_dir, tuple(formats)) for a, kind in tasks
            ]
            paths = [f.result() for f in futures]
    return {(a.metric.key, kind): p for (a, kind), p in zip(tasks, paths, strict=True) if p}


# ----------------------------------------------------------------------------------------
# Figures
# ----------------------------------------------------------------------------------------
def save_figure(fig, base: Path, formats: Sequence[str] = DEFAULT_FORMATS) -> list[Path]:
    """Save ``fig`` as ``base.<fmt>`` for each format (tight bounding box); returns paths."""
    out = []
    for fmt in formats:
        path = base.with_suffix(f".{fmt}")
        meta = {"CreationDate": None} if fmt == "pdf" else {}
        fig.savefig(path, format=fmt, bbox_inches="tight", dpi=150, metadata=meta)
        out.append(path)
    return out


def _new_figure(nrows: int, ncols: int, width: float, height: float, **kw):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False, **kw)
    return fig, axes


def _entry_colors(a: MetricAnalysis) -> dict[str, str]:
    return {alg: _COLORS[i % len(_COLORS)] for i, alg in enumerate(a.algorithms)}


def _budget_style(a: MetricAnalysis, budget: str) -> dict[str, Any]:
    """Largest budget: solid / filled; smaller ones: dashed / hollow."""
    rank = len(a.budgets) - 1 - a.budgets.index(budget)
    return {
        "linestyle": ("-", "--", ":", "-.")[rank % 4],
        "fill": rank == 0,
        "marker": ("o", "s", "D", "^")[rank % 4],
    }


def _axis_label(info: MetricInfo) -> str:
    """'Total%' as is; other fraction metrics say they are shown x100."""
    return info.label if info.label.endswith("%") or not info.fraction else f"{info.label} (×100)"


def _budget_legend(fig, a: MetricAnalysis, *, bars: bool) -> None:
    """Legend of the budget styles (bars: hollow bar = smaller budget; else markers)."""
    if len(a.budgets) < 2:
        return
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = []
    for b in a.budgets:
        style = _budget_style(a, b)
        if bars:
            handles.append(
                Patch(
                    facecolor="0.55" if style["fill"] else "white",
                    edgecolor="0.55",
                    label=f"budget {b}",
                )
            )
        else:
            handles.append(
                Line2D(
                    [],
                    [],
                    marker=style["marker"],
                    color="0.3",
                    linestyle="none",
                    markerfacecolor="0.3" if style["fill"] else "white",
                    label=f"budget {b}",
                )
            )
    fig.legend(
        handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False
    )


def _missing_text(ax, y: float, x: float = 0.5) -> None:
    ax.text(
        x,
        y,
        "missing",
        transform=ax.get_yaxis_transform(),
        ha="center",
        va="center",
        fontsize=8,
        color="0.45",
        style="italic",
    )


def plot_interval_estimates(a: MetricAnalysis):
    """Rows = difficulties, columns = IQM / mean / median / optimality gap."""
    aggs = [n for n in AGGREGATES if n != "optimality_gap" or a.metric.fraction]
    entries = list(a.entries)
    colors = _entry_colors(a)
    n_rows = len(a.difficulties)
    fig, axes = _new_figure(
        n_rows,
        len(aggs),
        3.1 * len(aggs) + 1.6,
        (0.34 * len(entries) + 1.0) * n_rows + 0.4,
        sharey=True,
    )
    ys = np.arange(len(entries))[::-1]
    for r, d in enumerate(a.difficulties):
        for c, name in enumerate(aggs):
            ax = axes[r][c]
            for y, e in zip(ys, entries):
                row = a.aggregates.get(Group(e.budget, e.algorithm, d))
                if row is None or name not in row.estimates:
                    _missing_text(ax, y)
                    continue
                iv = row.estimates[name].scaled(a.metric.scale)
                style = _budget_style(a, e.budget)
                ax.hlines(y, iv.lo, iv.hi, color=colors[e.algorithm], linewidth=5, alpha=0.55)
                ax.plot([iv.point], [y], marker="|", color="k", markersize=11, mew=1.6)
                if not style["fill"]:
                    ax.hlines(y, iv.lo, iv.hi, color="white", linewidth=1.5, alpha=0.9)
            ax.set_yticks(ys, [e.label for e in entries], fontsize=9)
            ax.set_ylim(-0.7, len(entries) - 0.3)
            ax.grid(axis="x", alpha=0.3)
            ax.tick_params(axis="x", labelsize=8)
            ax.set_title(f"{d} · {AGGREGATE_LABELS[name]}", fontsize=10)
            if r == n_rows - 1:
                ax.set_xlabel(_axis_label(a.metric), fontsize=9)
            _pad_xlim(ax)
    _budget_legend(fig, a, bars=True)
    fig.suptitle(
        f"{a.metric.label}: interval estimates ({a.settings.confidence:.0%} "
        f"{a.settings.method_name} bootstrap CIs, {a.settings.runs} as runs)",
        fontsize=11,
    )
    return fig


def _pad_xlim(ax) -> None:
    ax.margins(x=0.08)
    lo, hi = ax.get_xlim()
    if not math.isfinite(lo) or not math.isfinite(hi) or hi - lo < 1e-9:
        ax.set_xlim(lo - 0.5, hi + 0.5)


def _pair_label(x: Entry, y: Entry) -> str:
    if x.budget == y.budget:
        return f"{x.algorithm} > {y.algorithm} ({x.budget})"
    if x.algorithm == y.algorithm:
        return f"{x.algorithm}: {x.budget} > {y.budget}"
    return f"{x.label} > {y.label}"


def _pairs(a: MetricAnalysis) -> list[tuple[Entry, Entry, str]]:
    seen: dict[tuple[Entry, Entry], str] = {}
    for row in a.improvements:
        seen.setdefault((row.x, row.y), row.kind)
    order = sorted(
        seen.items(),
        key=lambda kv: (kv[1] != "algorithm", kv[0][0].sort_key(), kv[0][1].sort_key()),
    )
    return [(x, y, kind) for (x, y), kind in order]


def plot_improvements(a: MetricAnalysis):
    """One panel per difficulty: P(X > Y) with CIs for algorithm and budget pairs."""
    pairs = _pairs(a)
    if not pairs:
        return None
    index = {(r.difficulty, r.x, r.y): r for r in a.improvements}
    n = len(a.difficulties)
    fig, axes = _new_figure(1, n, 2.9 * n + 2.6, 0.3 * len(pairs) + 1.3, sharey=True)
    ys = np.arange(len(pairs))[::-1]
    for c, d in enumerate(a.difficulties):
        ax = axes[0][c]
        for y, (x_e, y_e, kind) in zip(ys, pairs):
            row = index.get((d, x_e, y_e))
            if row is None:
                _missing_text(ax, y)
                continue
            p = row.probability
            color = "#4c72b0" if kind == "algorithm" else "#c44e52"
            ax.hlines(y, p.lo, p.hi, color=color, linewidth=5, alpha=0.55)
            ax.plot([p.point], [y], marker="|", color="k", markersize=10, mew=1.6)
        ax.axvline(0.5, color="0.4", linestyle="--", linewidth=0.8)
        ax.set_xlim(0, 1)
        ax.set_yticks(ys, [_pair_label(x, y) for x, y, _ in pairs], fontsize=9)
        ax.set_ylim(-0.7, len(pairs) - 0.3)
        ax.set_title(d, fontsize=10)
        ax.set_xlabel("P(X > Y)", fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"{a.metric.label}: probability of improvement "
        f"({a.settings.confidence:.0%} CIs; blue: algorithms within a budget, "
        f"red: larger vs smaller budget)",
        fontsize=10,
    )
    return fig


def plot_profiles(a: MetricAnalysis):
    """One panel per difficulty: fraction of runs scoring above tau, with CI bands."""
    if not a.profiles:
        return None
    colors = _entry_colors(a)
    n = len(a.difficulties)
    fig, axes = _new_figure(1, n, 3.6 * n + 0.6, 3.6)
    handles: dict[Any, Any] = {}
    for c, d in enumerate(a.difficulties):
        ax = axes[0][c]
        missing = []
        for e in a.entries:
            prof = a.profiles.get(Group(e.budget, e.algorithm, d))
            if prof is None:
                missing.append(e.label)
                continue
            style = _budget_style(a, e.budget)
            taus = prof.taus * a.metric.scale
            (line,) = ax.plot(
                taus,
                prof.point,
                color=colors[e.algorithm],
                linestyle=style["linestyle"],
                linewidth=1.6,
                label=e.label,
            )
            ax.fill_between(
                taus, prof.lo, prof.hi, color=colors[e.algorithm], alpha=0.12, linewidth=0
            )
            handles.setdefault(e.label, line)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(d + (f"\nmissing: {', '.join(missing)}" if missing else ""), fontsize=10)
        ax.set_xlabel(f"τ: {_axis_label(a.metric)}", fontsize=9)
        if c == 0:
            ax.set_ylabel("Fraction of runs with score > τ", fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    fig.legend(
        list(handles.values()),
        list(handles),
        loc="outside lower center",
        ncol=min(4, max(1, len(handles))),
        fontsize=8,
        frameon=False,
    )
    fig.suptitle(
        f"{a.metric.label}: performance profiles (score distributions, "
        f"{a.settings.confidence:.0%} CI bands, {a.settings.runs} as runs)",
        fontsize=11,
    )
    return fig


def plot_budget_comparison(a: MetricAnalysis):
    """One panel per difficulty: each algorithm's mean per budget, annotated with the
    difference of means and P(larger > smaller). None when there is a single budget."""
    if len(a.budgets) < 2:
        return None
    colors = _entry_colors(a)
    n = len(a.difficulties)
    algs = list(a.algorithms)
    fig, axes = _new_figure(n, 1, 8.6, (0.55 * len(algs) + 0.9) * n + 0.5)
    by_key: dict[tuple[str, str], list[Any]] = {
        (r.algorithm, r.difficulty): [] for r in a.budget_comparisons
    }
    for r in a.budget_comparisons:
        by_key[(r.algorithm, r.difficulty)].append(r)
    ys = np.arange(len(algs))[::-1]
    nb = len(a.budgets)
    offsets = np.linspace(0.18, -0.18, nb) if nb > 1 else np.zeros(1)
    for di, d in enumerate(a.difficulties):
        ax = axes[di][0]
        for y, alg in zip(ys, algs):
            points = []
            for off, b in zip(offsets, a.budgets):
                row = a.aggregates.get(Group(b, alg, d))
                if row is None:
                    continue
                iv = row.estimates["mean"].scaled(a.metric.scale)
                style = _budget_style(a, b)
                ax.errorbar(
                    [iv.point],
                    [y + off],
                    xerr=[[iv.point - iv.lo], [iv.hi - iv.point]],
                    fmt=style["marker"],
                    color=colors[alg],
                    capsize=3,
                    markersize=6,
                    markerfacecolor=colors[alg] if style["fill"] else "white",
                )
                points.append((iv.point, y + off))
            if len(points) >= 2:
                ax.plot(
                    [p[0] for p in points],
                    [p[1] for p in points],
                    color="0.6",
                    linewidth=0.8,
                    zorder=0,
                )
            comps = by_key.get((alg, d), [])
            if comps:
                text = "; ".join(
                    f"{c.low}→{c.high}: Δ {c.delta.scaled(a.metric.scale).point:+.1f} "
                    f"[{c.delta.scaled(a.metric.scale).lo:+.1f}, "
                    f"{c.delta.scaled(a.metric.scale).hi:+.1f}], "
                    f"P {c.probability.point:.2f} [{c.probability.lo:.2f}, {c.probability.hi:.2f}]"
                    for c in comps
                )
            elif not points:
                text = "missing"
            else:
                text = "missing: " + ", ".join(
                    b for b in a.budgets if Group(b, alg, d) not in a.aggregates
                )
            ax.text(1.02, y, text, transform=ax.get_yaxis_transform(), va="center", fontsize=8)
        ax.set_yticks(ys, algs, fontsize=9)
        ax.set_ylim(-0.7, len(algs) - 0.3)
        ax.set_title(d, fontsize=10, loc="left")
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        if di == n - 1:
            ax.set_xlabel(f"Mean {_axis_label(a.metric)}", fontsize=9)
    _budget_legend(fig, a, bars=False)
    fig.suptitle(
        f"{a.metric.label}: budget comparison (mean, {a.settings.confidence:.0%} CI; "
        f"Δ = larger − smaller budget, P = P(larger > smaller))",
        fontsize=10,
    )
    return fig
