"""The public API over the results store: :func:`results`, :func:`leaderboard`,
:func:`report`, :func:`export` and :func:`merge` (``alem-eval leaderboard``, ``report``,
``export``, ``merge``: the commands call these functions).

Each takes the cells first (``Cell`` s, selector strings or a list of either; None:
everything the store holds) and the results store as ``store=`` (None: the user cache's,
the CLI's ``--results`` default). Importing this module imports no JAX.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import before_compiling, cells_in_one, frame, jsonable, renamed
from alem_eval.api.cells import Cells, source_of, selector_strings
from alem_eval.reporting.report import ReportResult

if TYPE_CHECKING:
    import pandas as pd

    from alem_eval.analysis.interop import MergeReport
    from alem_eval.reporting.leaderboard import Leaderboard


def _selectors(cells: Cells) -> list[str] | None:
    return selector_strings(cells) or None


@cells_in_one
@renamed(results="store")
def results(
    cells: Cells = None,
    *,
    store: str | Path | None = None,
    teams: bool = False,
    eval_difficulty: str | None = None,
    protocol: str | None = None,
    all_versions: bool = False,
) -> pd.DataFrame:
    """The scored episodes in the results store ``store`` (None: the user cache's) as
    one DataFrame, one row per episode: the cells' own scores (what ``score`` wrote), or
    with ``teams`` the teams ``crossplay`` and ``scenario`` played (a ``team`` column names
    the member driving each agent slot). ``cells`` (``Cell`` s or selectors; None: all)
    pick cells (a team by its anchor cell); ``eval_difficulty`` / ``protocol`` narrow
    further. A cell scored under several provenances gives its latest unless
    ``all_versions``."""
    from alem_eval.analysis.results import open_store

    return frame(
        open_store(store).load(
            _selectors(cells),
            eval_difficulties=[eval_difficulty] if eval_difficulty else None,
            protocols=[protocol] if protocol else None,
            all_versions=all_versions,
            teams=teams,
        )
    )


@cells_in_one
@renamed(results="store")
def leaderboard(
    cells: Cells = None,
    *,
    store: str | Path | None = None,
    reps: int = 50_000,
    seed: int = 0,
    protocol: str | None = None,
    ci: str = "expanded",
    runs: str = "seeds",
) -> Leaderboard:
    """Base% / Coord% / Total% per difficulty of the scored ``cells`` (``Cell`` s or
    selectors; None: all), from the results store ``store`` (None: the user cache's):
    mean over seeds with a stratified bootstrap CI (``reps`` resamples, ``seed``) over the
    training seeds, each scored on the protocol's fixed worlds; ``runs="episodes"`` makes
    every episode a run (cells scored with one seed). ``ci``: ``"expanded"`` (the
    percentile interval widened for the number of runs: it covers its 95% label from 3
    seeds on) or ``"percentile"`` (rliable's plain interval, for parity with papers that
    used it). ``protocol``: which one to read when the store holds several.

    Returns :class:`~alem_eval.reporting.leaderboard.Leaderboard`: ``.to_frame()`` (one row per
    budget x algorithm, fractions in [0, 1]), ``.to_csv()`` (fractions),
    ``.to_markdown()`` / ``.to_latex()`` (percent; ``difficulties``, ``metrics``,
    ``decimals``, ``caption``, ``label``, ``ci``), ``.to_json()`` (the upstream entry
    schema, percent), ``.notes``.
    """
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.analysis.results import open_store
    from alem_eval.reporting.leaderboard import build_leaderboard

    return build_leaderboard(
        open_store(store),
        _selectors(cells),
        settings=BootstrapSettings(reps=reps, seed=seed, method=ci, runs=runs),
        protocol=protocol,
    )


@dataclass(frozen=True)
class Report(ReportResult):
    """What :func:`report` wrote (:class:`~alem_eval.reporting.report.ReportResult`):
    ``.markdown``, ``.stats_json``, ``.figures``, ``.clips``, ``.notes``, ``.digests``."""

    def to_json(self) -> dict[str, Any]:
        """``stats.json``: the settings, the headline and every metric's aggregates,
        probabilities of improvement and budget comparison (fractions)."""
        loaded: dict[str, Any] = json.loads(Path(self.stats_json).read_text())
        return loaded

    def to_frame(self) -> pd.DataFrame:
        """One row per (metric, budget, algorithm, difficulty): ``n_runs``, ``n_seeds`` and
        each interval estimate (``iqm``, ``mean``, ``median``, ``optimality_gap``, ...) with
        ``_lo`` / ``_hi``; fractions in [0, 1]."""
        rows = []
        for m in self.to_json()["metrics"]:
            for agg in m["aggregates"]:
                row: dict[str, Any] = {"metric": m["metric"]}
                for k, v in agg.items():
                    if isinstance(v, list) and len(v) == 3:
                        row.update({k: v[0], f"{k}_lo": v[1], f"{k}_hi": v[2]})
                    else:
                        row[k] = v
                rows.append(row)
        return frame(rows)


@cells_in_one
@renamed(results="store")
def report(
    cells: Cells = None,
    *,
    out: str | Path,
    store: str | Path | None = None,
    metrics: Sequence[str] = ("total",),
    reps: int = 50_000,
    seed: int = 0,
    runs: str = "seeds",
    protocol: str | None = None,
    ci: str = "expanded",
    pdf: bool = False,
    jobs: int | None = None,
    clips: Any = None,
    clip_steps: int = 200,
) -> Report:
    """Write the rliable-style report of the scored ``cells`` (None: all) into ``out``:
    ``report.md``, ``stats.json`` and ``figures/*.png`` (also ``*.pdf`` with ``pdf``):
    interval estimates (IQM, mean, median, optimality gap), probability of improvement,
    performance profiles and the budget comparison, one panel per difficulty.

    ``metrics``: names, labels or aliases (``"total"``, ``"achievement"``,
    ``"Team/achievement_pct"``). ``runs``: ``"seeds"`` (each seed's mean is a run) or
    ``"episodes"``. ``ci``: the interval, as for :func:`leaderboard` (every interval of
    the report; see :mod:`alem_eval.analysis.bootstrap`). ``jobs``: processes drawing the
    figures. ``clips``: the source of the scored cells (``"hub"``, ``"demo"``, a directory,
    or a ``Cell`` of it) to draw a short self-play GIF per algorithm from, embedded in the
    report (``clip_steps`` steps each).

    Returns :class:`Report`: ``.markdown``, ``.stats_json``, ``.figures``, ``.clips``,
    ``.notes``, ``.to_frame()``, ``.to_json()``.
    """
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.analysis.results import open_store
    from alem_eval.reporting.report import ClipRequest, build_report

    request = None
    if clips is not None:
        before_compiling()
        request = ClipRequest(source_of(clips), max_steps=clip_steps)
    built = build_report(
        open_store(store),
        out,
        selectors=_selectors(cells),
        metrics=tuple(metrics),
        settings=BootstrapSettings(reps=reps, seed=seed, runs=runs, method=ci),
        protocol=protocol,
        formats=("png", "pdf") if pdf else ("png",),
        jobs=jobs,
        clips=request,
    )
    return Report(**{f.name: getattr(built, f.name) for f in fields(built)})


# ----------------------------------------------------------------------------------------
# Results to other tools, and from other results stores
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Export:
    """What :func:`export` wrote: ``.text`` (marl-eval's JSON), ``.path`` (None without
    ``out``), ``.tasks`` (the difficulties: marl-eval tasks), ``.notes``, ``.warning``
    (several difficulties exported: separate tasks, never to be averaged)."""

    text: str
    path: Path | None
    tasks: tuple[str, ...]
    notes: tuple[str, ...]
    warning: str | None

    def to_json(self) -> dict[str, Any]:
        """marl-eval's document: task -> ``<algorithm>_<budget>`` -> ``seed_<N>`` -> ..."""
        loaded: dict[str, Any] = json.loads(self.text)
        return loaded

    def to_frame(self) -> pd.DataFrame:
        """One row per (task, algorithm, seed, metric): the episodes' values as a list."""
        rows = []
        for env, tasks in self.to_json().items():
            for task, algos in tasks.items():
                for algo, seeds in algos.items():
                    for seed, steps in seeds.items():
                        for metric, values in steps.get("absolute_metrics", {}).items():
                            row = {"env": env, "task": task, "algorithm": algo}
                            row.update(seed=seed, metric=metric, values=values)
                            rows.append(row)
        return frame(rows)


def export(
    cells: Cells = None,
    *,
    store: str | Path | None = None,
    metrics: Sequence[str] = (),
    out: str | Path | None = None,
    protocol: str | None = None,
    complete_subgrid: bool = False,
    difficulty: str | None = None,
) -> Export:
    """The scored ``cells`` (None: all) in marl-eval's JSON layout, as ``alem-eval
    export``: alem -> difficulty -> ``<algorithm>_<budget>`` -> ``seed_<N>`` -> ``step_0``
    / ``absolute_metrics`` (metric names lower-cased, ``/`` -> ``_``); written to ``out``
    when given. ``metrics``: default the headline ones. ``difficulty``: one difficulty
    (one marl-eval task); ``complete_subgrid``: when runs are missing, the largest complete
    grid of difficulties x algorithms x seeds instead of an error."""
    from alem_eval.analysis.interop import export_marl_eval
    from alem_eval.analysis.results import open_store

    exported = export_marl_eval(
        open_store(store),
        out,
        selectors=_selectors(cells),
        metrics=tuple(metrics),
        protocol=protocol,
        complete_subgrid=complete_subgrid,
        difficulty=difficulty,
    )
    return Export(
        exported.text,
        None if out is None else Path(out),
        exported.tasks,
        tuple(exported.prepared.notes),
        exported.warning,
    )


@dataclass(frozen=True)
class Merge:
    """What :func:`merge` did: ``.report`` (the library's
    :class:`~alem_eval.analysis.interop.MergeReport`: ``copied``, ``identical``,
    ``replaced``, ``conflicts``, ``notes``), ``.summary()``."""

    report: MergeReport

    def summary(self) -> str:
        """One line: what was (or, dry run, would be) copied, replaced and in conflict."""
        return f"merge {self.report.source} -> {self.report.dest}: {self.report.summary()}"

    def to_frame(self) -> pd.DataFrame:
        """One row per scored key: ``cell, eval_difficulty, protocol, team, action``
        (copied | identical | replaced | conflict) and the conflict's ``detail``."""
        rows = [
            {
                "cell": k.cell,
                "eval_difficulty": k.eval_difficulty,
                "protocol": k.protocol,
                "team": ",".join(k.team),
                "action": action,
                "detail": "",
            }
            for action in ("copied", "identical", "replaced")
            for k in getattr(self.report, action)
        ]
        rows += [
            {
                "cell": c.cell,
                "eval_difficulty": c.eval_difficulty,
                "protocol": c.protocol,
                "team": "",
                "action": "conflict",
                "detail": c.detail,
            }
            for c in self.report.conflicts
        ]
        return frame(rows, fractions=False)

    def to_json(self) -> dict[str, Any]:
        r = self.report
        return {
            "source": r.source,
            "dest": r.dest,
            "dry_run": r.dry_run,
            "summary": r.summary(),
            "rows": jsonable(self.to_frame().to_dict("records")),
            "conflicts": [c.as_record() for c in r.conflicts],
            "notes": list(r.notes),
        }


def merge(
    cells: Cells = None,
    *,
    other: str | Path,
    store: str | Path | None = None,
    prefer: str = "ours",
    dry_run: bool = False,
) -> Merge:
    """Import the scored ``cells`` (None: all) of ``other`` (another results directory,
    e.g. one SLURM task's) into ``store`` (None: the user cache's), as ``alem-eval merge``;
    provenance conflicts keep ``prefer`` (``"ours"`` | ``"theirs"``) and are listed.
    ``dry_run``: say what would happen, write nothing. Returns :class:`Merge`."""
    from alem_eval.analysis.interop import merge_results
    from alem_eval.analysis.results import ResultsStore, open_store

    return Merge(
        merge_results(
            open_store(store),
            ResultsStore(Path(other)),
            selectors=_selectors(cells),
            prefer=prefer,
            dry_run=dry_run,
        )
    )
