"""Cross-play outputs: ``crossplay.json``, ``teams.csv``, the pair-matrix heatmap and the
paper tables (:func:`paper_table`: the gap or the pair matrix, Markdown or LaTeX).

:func:`write_outputs` writes what ``alem-eval crossplay --out DIR`` (and
``alem_eval.crossplay(out=...)``) leaves behind: ``pair_matrix.{png,pdf}``
(:func:`plot_pair_matrix`, saved by :func:`save_figure` with reproducible PDF bytes),
``teams.csv`` (one row per team) and ``crossplay.json``
(:meth:`~alem_eval.scoring.crossplay.CrossplayResult.as_json` plus ``outputs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from alem_eval.analysis.digests import footer_digest_line
from alem_eval.analysis.metrics import metric_info, pick_metrics
from alem_eval.core.errors import UsageError
from alem_eval.core.tables import Estimate, PaperTable
from alem_eval.scoring.crossplay import GAP_METRICS, CrossplayResult


FIGURE_FORMATS: tuple[str, ...] = ("png", "pdf")
TABLES: tuple[str, ...] = ("gap", "matrix")


def paper_table(
    result: CrossplayResult,
    table: str = "gap",
    *,
    metrics: Sequence[str] | None = None,
    decimals: int = 1,
    caption: str | None = None,
    label: str | None = None,
    ci: bool = True,
) -> PaperTable:
    """A table for a paper, in percent. ``"gap"``: per metric (``metrics``: Total, Base,
    Coord; default all) the self-play and cross-play means and the gap (self - cross)
    with its interval over the worlds (``ci`` False: the gap alone), the teams and worlds.
    ``"matrix"``: the pair matrix (rows: the partner A in all slots but one, columns: the
    newcomer B, diagonal: self-play). ``decimals`` places; optional ``caption`` / ``label``."""
    if table not in TABLES:
        raise UsageError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
    b = result.bootstrap
    where = (
        f"on {result.eval_difficulty} ({result.scheme} teams; {result.num_episodes} world{'' if result.num_episodes == 1 else 's'}, at "
        f"most {result.max_steps} steps)"
    )
    common = dict(caption=caption, label=label, decimals=decimals, ci=ci)
    digest_notes = [footer_digest_line(result.digests)] if result.digests is not None else []
    if table == "matrix":
        m = result.matrix
        info = metric_info(m.metric)
        prefix, names = _short_labels(m.cells)
        rows = tuple(
            (a,)
            + tuple(
                None if not np.isfinite(v) else Estimate(v * info.scale, interval=False)
                for v in row
            )
            for a, row in zip(names, m.values, strict=True)
        )
        return PaperTable(
            columns=("A \\ B", *names),
            rows=rows,
            notes=(
                f"Cross-play {info.label} {where}, in percent: row A in all slots but one, "
                "column B in the other (every position), the diagonal self-play; a dash = "
                "not played." + (f" Cells {prefix}/..." if prefix else ""),
                *digest_notes,
            ),
            title=f"alem-eval crossplay pair matrix: {info.label}",
            **common,  # type: ignore[arg-type]
        )
    rows = tuple(
        (
            metric_info(g.metric).label,
            Estimate(g.self_score * metric_info(g.metric).scale, interval=False),
            Estimate(g.cross * metric_info(g.metric).scale, interval=False),
            Estimate.of(g.gap, metric_info(g.metric).scale),
            str(g.n_teams),
            str(g.n_worlds),
        )
        for k in pick_metrics(metrics, GAP_METRICS)
        for g in result.gaps
        if g.metric == k
    )
    return PaperTable(
        columns=("Metric", "Self-play", "Cross-play", "Gap (self - cross)", "Teams", "Worlds"),
        rows=rows,
        notes=(
            f"Cross-play {where}, in percent (the gap in percentage points); the gap's "
            f"{b['confidence']:.0%} CI: {b['method']}; runs = {b['runs']}.",
            *digest_notes,
        ),
        zero_width_note="† no interval, or a zero-width one: fewer than 2 worlds, or every "
        "world scoring the same, gives no measure of uncertainty.",
        title=f"alem-eval crossplay gap on {result.eval_difficulty}",
        **common,  # type: ignore[arg-type]
    )


def write_outputs(result: CrossplayResult, out_dir: str | Path) -> list[Path]:
    """Write the heatmap of the pair matrix (PNG + PDF), ``teams.csv`` (one row per team)
    and ``crossplay.json`` (:meth:`CrossplayResult.as_json` plus ``outputs``); returns the
    paths written, the JSON last."""
    import csv
    import io

    from alem_eval.core.fsutil import write_text_atomic
    from alem_eval.core.jsonout import json_text

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = save_figure(plot_pair_matrix(result), out / "pair_matrix")
    rows = result.team_rows()
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
    writer.writeheader()
    writer.writerows(rows)
    paths.append(write_text_atomic(out / "teams.csv", buf.getvalue()))
    doc = {**result.as_json(), "outputs": [str(p) for p in paths]}
    paths.append(write_text_atomic(out / "crossplay.json", json_text(doc) + "\n"))
    return paths


def plot_pair_matrix(result: CrossplayResult):
    """Heatmap of the pair matrix on the display scale (a :class:`matplotlib.figure.Figure`
    on an Agg canvas); missing entries are grey."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    m = result.matrix
    info = metric_info(m.metric)
    n = len(m.cells)
    prefix, labels = _short_labels(m.cells)
    size = min(14.0, 2.5 + 0.55 * n)
    fig = Figure(figsize=(size + 1.5, size), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
    data = np.ma.masked_invalid(m.values * info.scale)
    im = ax.imshow(data, cmap=cmap, aspect="equal")
    fig.colorbar(im, ax=ax, label=info.label, shrink=0.8)
    ax.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(n), labels, fontsize=8)
    ax.set_xlabel("newcomer B (1 agent)")
    ax.set_ylabel(f"partner A ({_num_slots(result) - 1} agents)")
    ax.set_title(
        f"Cross-play {info.label} on {result.eval_difficulty} (diagonal: self-play)"
        + (f"\ncells {prefix}/..." if prefix else ""),
        fontsize=10,
    )
    if n <= 16:
        finite = data.compressed()
        mid = float(finite.mean()) if finite.size else 0.0
        for i in range(n):
            for j in range(n):
                if not np.ma.is_masked(data[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{data[i, j]:.3g}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color="black" if data[i, j] > mid else "white",
                    )
    return fig


def save_figure(fig, base: Path, formats: Sequence[str] = FIGURE_FORMATS) -> list[Path]:
    """``base.<fmt>`` for each format (PDFs without a creation date: reproducible bytes)."""
    out = []
    for fmt in formats:
        path = base.with_suffix(f".{fmt}")
        fig.savefig(
            path,
            format=fmt,
            bbox_inches="tight",
            dpi=150,
            metadata={"CreationDate": None} if fmt == "pdf" else {},
        )
        out.append(path)
    return out


def _num_slots(result: CrossplayResult) -> int:
    return len(result.teams[0].team.slots) if result.teams else 3


def _short_labels(ids: Sequence[str]) -> tuple[str, list[str]]:
    """Drop the leading id components every cell shares: ``("tiny/ippo-rnn", ["easy/seed0",
    ...])``."""
    parts = [i.split("/") for i in ids]
    k = 0
    while all(len(p) > k + 1 and p[k] == parts[0][k] for p in parts):
        k += 1
    return "/".join(parts[0][:k]), ["/".join(p[k:]) for p in parts]
