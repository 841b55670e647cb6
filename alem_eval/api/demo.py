"""``alem-eval demo``: the whole pipeline on the bundled demo cells, offline, in minutes.

:func:`run_demo` verifies and scores the cells of :mod:`alem_eval.hub.demo_cells` (fast
protocol), then writes a report with its figures and the leaderboard table, all under one
output directory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from alem_eval.core.errors import CheckpointError
from alem_eval.hub.demo_cells import demo_root


# ----------------------------------------------------------------------------------------
# alem-eval demo
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DemoOutcome:
    """What :func:`run_demo` scored and wrote."""

    scores: list  # scoring.CellScore, one per demo cell
    leaderboard_md: str
    out_dir: Path
    results: Path  # the results store
    report: Path  # report.md
    figures: tuple[Path, ...]
    clips: tuple[Path, ...]  # report/clips/<algorithm>.gif (with clips=True)
    leaderboard: Path  # leaderboard.md
    source: Path


def run_demo(
    out_dir: str | Path,
    *,
    episodes: int = 8,
    max_steps: int = 300,
    store: str | Path | None = None,
    reps: int = 10_000,
    clips: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> DemoOutcome:
    """Verify and score the demo cells (fast protocol, ``episodes`` episodes of at most
    ``max_steps`` steps) into the results store ``store`` (default: the user's, like
    ``score``; the cells' budget label ``demo`` keeps them apart from the baselines), then
    write under ``out_dir``: ``report/`` (report.md, stats.json, figures/*.png) and
    ``leaderboard.md`` (runs = episodes in both, as each cell is one seed). ``clips``: also a GIF of
    each cell's episode 0 (:class:`.report.ClipRequest`), embedded in the report."""
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.core.fsutil import write_text_atomic
    from alem_eval.reporting.leaderboard import build_leaderboard, render
    from alem_eval.reporting.report import ClipRequest, build_report
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring.score import ScoreOptions, score_cells
    from alem_eval.hub.sources import open_source
    from alem_eval.model.verify import verify_cells

    say = on_progress or (lambda message: None)
    out = Path(out_dir)
    results = open_store(store)
    src = open_source("demo")
    cells = src.select([])
    bad = [r for r in verify_cells(src, cells) if not r.ok]
    if bad:
        raise CheckpointError(f"demo cell {bad[0].cell} does not load: {bad[0].message}")
    say(f"verified {len(cells)} demo cells in {demo_root()}")
    scores = score_cells(
        src,
        cells,
        options=ScoreOptions(num_episodes=episodes, max_steps=max_steps),
        store=results,
        on_progress=lambda m, d, t: say(f"[{d}/{t}] {m}"),
    )
    selectors = [c.id for c in cells]
    rep = build_report(
        results,
        out / "report",
        selectors=selectors,
        settings=BootstrapSettings(reps=reps, runs="episodes"),
        protocol="fast",
        clips=ClipRequest(src, max_steps=max_steps) if clips else None,
    )
    lb = build_leaderboard(  # one seed per cell: episodes are the runs, as in the report
        results, selectors, settings=BootstrapSettings(reps=reps, runs="episodes"), protocol="fast"
    )
    text = render(lb, "md")
    lb_path = write_text_atomic(out / "leaderboard.md", text)
    return DemoOutcome(
        scores=scores,
        leaderboard_md=text,
        out_dir=out,
        results=results.root,
        report=rep.markdown,
        figures=rep.figures,
        clips=rep.clips,
        leaderboard=lb_path,
        source=demo_root(),
    )
