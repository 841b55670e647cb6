"""Cross-play outputs: ``crossplay.json``, ``teams.csv`` and the pair-matrix heatmap.

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

from alem_eval.analysis.metrics import metric_info
from alem_eval.scoring.crossplay import CrossplayResult


FIGURE_FORMATS: tuple[str, ...] = ("png", "pdf")


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
