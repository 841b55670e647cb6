"""``alem-eval demo``: the whole pipeline offline, on the bundled (small, trained) demo cells."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated


from alem_eval.cli.app import app
from alem_eval.cli.console import OutputFormat, emit_records, err_console
from alem_eval.core.progress import Reporter
from alem_eval.cli.options import (
    QuietOpt,
    quiet_option,
    ClipsOpt,
    EpisodesOpt,
    FormatOpt,
    MaxStepsOpt,
    OutDirOpt,
    RepsOpt,
    ResultsOpt,
    override,
)


@app.command("demo")
@quiet_option
def demo(
    episodes: Annotated[int, override(EpisodesOpt)] = 8,
    max_steps: Annotated[int, override(MaxStepsOpt, help="Step cap per episode.")] = 300,
    out: Annotated[
        Path, override(OutDirOpt, help="Output directory (report/, leaderboard.md).")
    ] = Path("alem-eval-demo"),
    results: ResultsOpt = None,
    reps: RepsOpt = 10_000,
    clips: ClipsOpt = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
) -> None:
    """Score the four bundled demo cells (one per algorithm, small networks trained on a
    CPU, easy difficulty; not the paper's baselines), write a report with figures and print
    the leaderboard table. Offline; about two minutes on a 2-core CPU the first time.

    Scores go to the results store like score's (budget label 'demo'), so report and
    leaderboard can read them afterwards. Into --out: report/report.md with stats.json
    and figures/*.png, and leaderboard.md. The cells are in alem_eval/data/demo-cells/
    (its CARD.md says what they are).

    Examples:

      alem-eval demo
      alem-eval demo --episodes 20 --max-steps 1000 --out demo-run/
      alem-eval demo --clips            # and a GIF per algorithm in the report
    """
    from alem_eval.hub.demo_cells import (
        DEMO_NOTE,
    )
    from alem_eval.api.demo import (
        run_demo,
    )
    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()  # before the demo compiles its cells
    err_console.print(f"[bold]{DEMO_NOTE}[/bold]", highlight=False)
    t0 = time.perf_counter()
    with Reporter() as progress:
        res = run_demo(
            out,
            episodes=episodes,
            max_steps=max_steps,
            store=results,
            reps=reps,
            clips=clips,
            on_progress=progress.note,
        )
    if fmt == OutputFormat.table:
        emit_records(
            [s.summary_row() for s in res.scores],
            fmt,
            title=f"demo cells, fast protocol, {episodes} episodes ≤ {max_steps} steps",
        )
        print()
        print(res.leaderboard_md, end="")
    elif fmt == OutputFormat.json:
        emit_records([s.as_record() for s in res.scores], fmt)
    else:
        emit_records([s.summary_row() for s in res.scores], fmt)
    where = [
        ("demo cells", res.source),
        ("results store", res.results),
        ("report", res.report),
        ("figures", res.report.parent / "figures"),
        *([("clips", res.report.parent / "clips")] if res.clips else []),
        ("leaderboard", res.leaderboard),
    ]
    err_console.print(
        f"done in {time.perf_counter() - t0:.0f}s. Written:\n"
        + "\n".join(f"  {name:<14}{path}" for name, path in where),
        highlight=False,
        soft_wrap=True,
    )
