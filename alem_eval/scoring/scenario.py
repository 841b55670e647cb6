"""Scenarios: your agent with the baselines (ad-hoc teamwork over a background population).

A focal agent (:mod:`alem_eval.evaluate.agents`: any JAX or host agent; or a released
cell's greedy policy, :mod:`~alem_eval.scoring.focal_cell`) joins teams of released
checkpoints it never trained with. The selected cells are grouped into
background populations (the seeds of one budget, algorithm and difficulty: the cell id
without its last component); per population and mode, with S agent slots:

* ``visitor``: 1 focal + S - 1 slots of one background cell, the focal in every position;
* ``resident``: S - 1 focal slots + 1 background slot, the background in every position.

Beside them, on the same worlds, the references: each background cell's self-play (what
the focal must match) and the background's cross-play (the same compositions with a
trained stranger in the focal's slots: the population's other seeds, or, for a
population of one cell, the other selected cells). Every team plays in ONE
:func:`~alem_eval.evaluate.agent_runs.run_agent_teams` call (protocol ``fast``: episode i is
world ``PRNGKey(9999 + i)`` of every team), through
:func:`alem_eval.scoring.play.play_teams`. Teams are rows of the results store: the
baselines' teams under the same keys as ``alem-eval crossplay``'s (shared with it), the
focal's under a key naming its identity (its name and a digest of its source and
parameters), so reruns read them back.

Per (population, mode, metric Total / Base / Coord %): the focal team's mean, the
self-play and cross-play references and ``focal - self-play``, each with the world
bootstrap interval of cross-play (:func:`alem_eval.analysis.crossplay_stats.gap_intervals`:
a replicate resamples the worlds once, for every team and reference alike).

When the background cells span more than one frozen partner split (train | val | test),
the result also holds the split table (:mod:`~alem_eval.scoring.scenario_splits`): per
mode and metric, ``focal - self`` over the cells of each split (a focal cell that records
its partners: those it trained with and the held-out ones) and the generalisation gap
``test - train`` with a paired world-bootstrap interval.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from alem_eval.analysis.bootstrap import Interval
from alem_eval.analysis.crossplay_stats import DEFAULT_CONFIDENCE, DEFAULT_REPS
from alem_eval.analysis.digests import Digests, footer_digest_line, teams_digests
from alem_eval.analysis.metrics import metric_info, pick_metrics, units_fields
from alem_eval.core.errors import UsageError
from alem_eval.core.tables import Estimate, PaperTable, PaperTables, fmt_marked
from alem_eval.scoring.crossplay import GAP_METRICS
from alem_eval.scoring.play import TeamScore, play_teams, resolve_worlds
from alem_eval.scoring.scenario_splits import (
    ZERO_WIDTH_NOTE,
    SplitRow,
    background_splits,
    split_paper_table,
    split_rows,
    split_table_rows,
    team_interval,
)
from alem_eval.scoring.teams import PROTOCOL, Team, check_int

if TYPE_CHECKING:
    from alem_eval.analysis.results import ResultsStore

MODES: tuple[str, ...] = ("visitor", "resident")
MODE_CHOICES: tuple[str, ...] = (*MODES, "both")
FOCAL_PREFIX = "focal:"
KINDS: tuple[str, ...] = ("focal", "self", "cross")


def check_mode(mode: str) -> tuple[str, ...]:
    """``visitor | resident | both`` -> the modes to play."""
    if mode not in MODE_CHOICES:
        raise UsageError(f"--mode must be one of {', '.join(MODE_CHOICES)}, got {mode!r}")
    return MODES if mode == "both" else (mode,)


def population_of(cell_id: str) -> str:
    """The background population of a cell: its id without the seed component."""
    head, sep, last = cell_id.rpartition("/")
    return head if sep and last.startswith("seed") else cell_id


@dataclass(frozen=True)
class ScenarioTeam:
    """One team of a scenario: ``team.slots`` hold cell ids, and the focal's label
    (``focal:<identity>``) in its slots; ``kind`` focal | self | cross."""

    team: Team
    kind: str
    mode: str | None  # None: a self-play team (the reference of both modes)
    population: str
    background: str
    stranger: str | None = None


def scenario_teams(
    cells: Sequence[str], modes: Sequence[str], focal: str, num_slots: int = 3
) -> list[ScenarioTeam]:
    """Every team of the scenario over ``cells`` (ids), in a stable order: per
    population, its self-play teams, then per mode the focal's and the strangers'."""
    pops: dict[str, list[str]] = {}
    for c in dict.fromkeys(cells):
        pops.setdefault(population_of(c), []).append(c)
    out: list[ScenarioTeam] = []
    for pop, members in pops.items():
        out += [ScenarioTeam(Team((c,) * num_slots), "self", None, pop, c) for c in members]
        for mode in modes:
            for c in members:
                strangers = [x for x in (members if len(members) > 1 else cells) if x != c]
                for other, kind in [(focal, "focal"), *[(x, "cross") for x in strangers]]:
                    for pos in range(num_slots):
                        slots = _place(mode, c, other, pos, num_slots)
                        out.append(
                            ScenarioTeam(
                                Team(slots),
                                kind,
                                mode,
                                pop,
                                c,
                                None if kind == "focal" else other,
                            )
                        )
    return out


def _place(mode: str, background: str, other: str, pos: int, num_slots: int) -> tuple:
    """Visitor: ``other`` at ``pos``, the background elsewhere; resident: the reverse."""
    lone, rest = (other, background) if mode == "visitor" else (background, other)
    return tuple(lone if s == pos else rest for s in range(num_slots))


# ----------------------------------------------------------------------------------------
# Statistics
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScenarioRow:
    """One (population, mode, metric): raw fractions, intervals over the worlds."""

    population: str
    mode: str
    metric: str
    focal: Interval  # the focal's teams
    self_play: Interval  # the background cells' self-play
    cross: Interval | None  # the strangers' teams (None: no stranger to be had)
    diff: Interval  # focal - self-play, team by team on the same worlds
    n_teams: int  # focal teams
    n_worlds: int

    def as_json(self) -> dict[str, Any]:
        def iv(x: Interval | None) -> dict[str, float | None] | None:
            if x is None:
                return None
            return {k: _finite(v) for k, v in zip(("point", "lo", "hi"), x.as_list())}

        return {
            "population": self.population,
            "mode": self.mode,
            "metric": self.metric,
            "label": metric_info(self.metric).name,
            "focal": iv(self.focal),
            "self_play": iv(self.self_play),
            "cross_play": iv(self.cross),
            "focal_minus_self": iv(self.diff),
            "n_teams": self.n_teams,
            "n_worlds": self.n_worlds,
        }

    def flat(self) -> dict[str, Any]:
        """One flat row (fractions in [0, 1]): ``metric`` (its name: Total, Base, Coord;
        no unit), ``<what>``, ``<what>_lo``, ``<what>_hi``."""
        out: dict[str, Any] = {
            "population": self.population,
            "mode": self.mode,
            "metric": metric_info(self.metric).name,
        }
        for name, x in (
            ("focal", self.focal),
            ("self_play", self.self_play),
            ("cross_play", self.cross),
            ("focal_minus_self", self.diff),
        ):
            pt, lo, hi = x.as_list() if x is not None else (math.nan,) * 3
            out.update({name: pt, f"{name}_lo": lo, f"{name}_hi": hi})
        out.update(n_teams=self.n_teams, n_worlds=self.n_worlds)
        return out


def _finite(v: float) -> float | None:
    return v if math.isfinite(v) else None


def scenario_rows(
    teams: Sequence[ScenarioTeam],
    scores: Mapping[Team, TeamScore],
    *,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> list[ScenarioRow]:
    """The table: per population, mode and metric (see the module docstring)."""
    boot: dict[str, Any] = dict(reps=reps, seed=seed, confidence=confidence)
    rows = []
    keys = list(dict.fromkeys((t.population, t.mode) for t in teams if t.mode is not None))
    for pop, mode in keys:
        mine = [t for t in teams if t.population == pop and t.mode == mode]
        focal = [t for t in mine if t.kind == "focal"]
        cross = [t for t in mine if t.kind == "cross"]
        selfs = [t for t in teams if t.population == pop and t.kind == "self"]
        sp = {t.background: t for t in selfs}
        for metric in GAP_METRICS:

            def values(ts: Sequence[ScenarioTeam], metric: str = metric) -> np.ndarray:
                return np.stack([scores[t.team].values(metric) for t in ts])

            f = values(focal)
            ref = values([sp[t.background] for t in focal])
            stream = (pop, mode, metric)
            rows.append(
                ScenarioRow(
                    population=pop,
                    mode=mode,
                    metric=metric,
                    focal=team_interval(f, None, stream=(*stream, "focal"), **boot),
                    self_play=team_interval(values(selfs), None, stream=(*stream, "self"), **boot),
                    cross=team_interval(values(cross), None, stream=(*stream, "cross"), **boot)
                    if cross
                    else None,
                    diff=team_interval(f, ref, stream=(*stream, "diff"), **boot),
                    n_teams=len(focal),
                    n_worlds=int(np.isfinite(f).any(axis=0).sum()),
                )
            )
    return rows


# ----------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScenarioResult(PaperTables):
    """Everything ``alem-eval scenario`` reports (values are raw fractions)."""

    focal: str  # the agent's label (its CLI spec, or its name)
    identity: str  # name@digest: what its stored teams are keyed by
    cells: tuple[str, ...]
    modes: tuple[str, ...]
    eval_difficulty: str
    num_episodes: int
    max_steps: int
    teams: tuple[ScenarioTeam, ...]
    scores: Mapping[Team, TeamScore]
    rows: tuple[ScenarioRow, ...]
    bootstrap: Mapping[str, Any]
    store: Path | None
    steps_per_s: float | None = None  # env steps per second of the rollout (None: all reused)
    digests: Digests | None = None  # of the teams' records in the store (None: no store)
    # The partner splits of the background cells (cell id -> train | val | test; cells
    # without one left out), the partners a focal cell records (None: none recorded) and
    # the split table (scoring.scenario_splits; empty within one split).
    cell_splits: Mapping[str, str] = field(default_factory=dict)
    trained_with: tuple[str, ...] | None = None
    split_rows: tuple[SplitRow, ...] = ()

    @property
    def teams_scored(self) -> int:
        """Distinct teams played by this run (the rest were read back from the store)."""
        return sum(not s.reused for s in self.scores.values())

    def team_rows(self) -> list[dict[str, Any]]:
        """One row per team: kind, mode, population, background, its ``split`` (None:
        it has none), ``trained_with`` (whether the focal trained with the background;
        None: the focal records no partners), stranger, and the team's row
        (:meth:`TeamScore.row`)."""
        partners = None if self.trained_with is None else set(self.trained_with)
        return [
            {
                "kind": t.kind,
                "mode": t.mode,
                "population": t.population,
                "background": t.background,
                "split": self.cell_splits.get(t.background),
                "trained_with": None if partners is None else t.background in partners,
                "stranger": t.stranger,
                **self.scores[t.team].row(),
            }
            for t in self.teams
        ]

    def split_table(
        self,
        metrics: Sequence[str] | None = None,
        decimals: int = 1,
        caption: str | None = None,
        label: str | None = None,
        ci: bool = True,
    ) -> PaperTable | None:
        """The split table for a paper (:mod:`~alem_eval.scoring.scenario_splits`), in
        percentage points: per mode and metric, the focal's ``focal - self`` over the
        background cells of each partner split (trained with / held out, when the focal
        records its partners) and the gap ``test - train`` with its paired interval over
        the worlds; None when the background lies within one split. Arguments as
        :meth:`paper_table`."""
        return split_paper_table(
            self.split_rows,
            focal=self.focal,
            confidence=self.bootstrap["confidence"],
            trained=self.trained_with is not None,
            metrics=pick_metrics(metrics, GAP_METRICS),
            decimals=decimals,
            caption=caption,
            label=label,
            ci=ci,
        )

    def split_table_rows(self) -> list[dict[str, Any]]:
        """The terminal's split table (empty within one split)."""
        return split_table_rows(self.split_rows)

    def table_rows(self) -> list[dict[str, Any]]:
        """The human table: percent, ``point [lo, hi]`` (``†``: zero width or none)."""
        out = []
        for r in self.rows:
            k = metric_info(r.metric).scale

            def fmt(x: Interval | None, k: float = k) -> str:
                return "-" if x is None else fmt_marked(x.scaled(k), 2)

            out.append(
                {
                    "population": r.population,
                    "mode": r.mode,
                    "metric": metric_info(r.metric).label,
                    "focal": fmt(r.focal),
                    "self-play": fmt(r.self_play),
                    "cross-play": fmt(r.cross),
                    "focal - self": fmt(r.diff),
                    "teams": r.n_teams,
                    "worlds": r.n_worlds,
                }
            )
        return out

    def paper_table(
        self,
        metrics: Sequence[str] | None = None,
        decimals: int = 1,
        caption: str | None = None,
        label: str | None = None,
        ci: bool = True,
    ) -> PaperTable:
        """The table for a paper, in percent: per (population, mode, metric) the focal,
        self-play and cross-play means and focal - self, each with its interval over the
        worlds (``ci`` False: the means alone); ``metrics`` names (Total, Base, Coord;
        default all), ``decimals`` places, an optional ``caption`` / ``label``."""
        keys = pick_metrics(metrics, GAP_METRICS)
        rows = tuple(
            (r.population, r.mode, metric_info(r.metric).label)
            + tuple(
                Estimate.of(x, metric_info(r.metric).scale)
                for x in (r.focal, r.self_play, r.cross, r.diff)
            )
            for r in self.rows
            if r.metric in keys
        )
        conf = f"{self.bootstrap['confidence']:.0%}"
        return PaperTable(
            columns=(
                "Population",
                "Mode",
                "Metric",
                "Focal",
                "Self-play",
                "Cross-play",
                "Focal - self",
            ),
            rows=rows,
            stub=3,
            notes=(
                f"{self.focal} with the baselines on {self.eval_difficulty}: means over "
                f"the teams and {_worlds(self.num_episodes)} (at most {self.max_steps} steps) "
                f"[{conf} CI, {self.bootstrap.get('method', 'bootstrap over the worlds')}], "
                "in percent (focal - self in percentage points).",
                "Visitor: 1 focal + 2 background agents; resident: 2 focal + 1; self-play: "
                "the background alone; cross-play: a trained stranger in the focal's slots "
                "(a dash: no stranger).",
                *([footer_digest_line(self.digests)] if self.digests is not None else []),
            ),
            zero_width_note=ZERO_WIDTH_NOTE,
            caption=caption,
            label=label,
            decimals=decimals,
            ci=ci,
            title=f"alem-eval scenario: {self.focal} ({self.identity})",
        )

    def as_json(self) -> dict[str, Any]:
        return {
            **units_fields(),
            "focal": self.focal,
            "identity": self.identity,
            "eval_difficulty": self.eval_difficulty,
            "protocol": PROTOCOL,
            "modes": list(self.modes),
            "num_episodes": self.num_episodes,
            "max_steps": self.max_steps,
            "cells": list(self.cells),
            "teams_total": len(self.scores),
            "teams_scored": self.teams_scored,
            "teams_reused": len(self.scores) - self.teams_scored,
            "rows": [r.as_json() for r in self.rows],
            "cell_splits": dict(self.cell_splits),
            "trained_with": None if self.trained_with is None else list(self.trained_with),
            "split_rows": [r.as_json() for r in self.split_rows],
            "bootstrap": dict(self.bootstrap),
            "teams": self.team_rows(),
            "store": str(self.store) if self.store is not None else None,
            "digests": self.digests.as_json() if self.digests is not None else None,
        }


def _worlds(n: int) -> str:
    return f"{n} world" + ("" if n == 1 else "s")


def run_scenario(
    source,
    cells: Sequence[Any],
    focal: Any,
    *,
    focal_args: Mapping[str, Any] | None = None,
    mode: str = "both",
    eval_difficulty: str | None = None,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    reps: int = DEFAULT_REPS,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
    store: ResultsStore | None = None,
    splits: Any = None,
    on_env_mismatch: str = "error",
    fresh: bool = False,
    batch: int | None = None,
    record_dir: Path | None = None,
    on_progress: Callable[[str], None] | None = None,
    on_episodes: Callable[[Any], None] | None = None,
) -> ScenarioResult:
    """Play ``focal`` (an agent, a ``--focal`` SPEC string with ``focal_args``, a cell
    directory in the released layout or a loaded policy: :mod:`~alem_eval.scoring.
    focal_cell`) with
    the background ``cells`` of ``source`` in the ``mode`` compositions, beside the
    background's self-play and cross-play, in one compiled rollout; see the module
    docstring. Teams already in ``store`` are read back (``fresh``: none is, every team
    plays again; the focal's teams read back are said in one ``on_progress`` line); the
    others are written to it as each one's episodes end, after the agent's checks (see
    docs/scenarios.md for what a fault keeps). ``batch``: the evaluator's batch slots
    (None: its default layout); ``record_dir``: every played step is recorded there (a
    dataset of the scenario's episodes, the focal's slots named by its label).
    ``on_episodes(RolloutProgress)`` as the rollout's episodes end (an episode bar's
    ``update``). ``splits``: the partner splits the split table reads (a
    :class:`~alem_eval.hub.splits.Splits` or a split file; None: the release's)."""
    from alem_eval.scoring.focal_cell import check_focal_world, resolve_focal

    modes = check_mode(mode)
    check_int("--reps", reps, 1)
    group = resolve_focal(focal, focal_args)
    cells = list({c.id: c for c in cells}.values())
    if not cells:
        raise UsageError("a scenario needs at least one background cell")
    cell_splits = background_splits(cells, splits)  # before playing: a bad file is one line
    w = resolve_worlds(source, cells, eval_difficulty, num_episodes, max_steps, on_env_mismatch)
    check_focal_world(group, w, on_env_mismatch)
    label = FOCAL_PREFIX + group.identity
    teams = scenario_teams([c.id for c in cells], modes, label, num_slots=w.num_slots)
    played = play_teams(
        source,
        cells,
        [t.team for t in teams],
        w,
        agents={label: group},
        store=store,
        what=f" ({group.label} with {len(cells)} background cells)",
        fresh=fresh,
        batch=batch,
        record_dir=record_dir,
        on_progress=on_progress,
        on_episodes=on_episodes,
    )
    scores = played.scores
    reused = sum(s.reused for t, s in scores.items() if label in t.slots)
    if reused and on_progress is not None:
        on_progress(
            f"focal {group.label}: {reused} of its teams read back from the results store, "
            f"played before under its identity {group.identity} (fresh=True / --fresh "
            "plays them again)"
        )
    boot: dict[str, Any] = {"reps": reps, "seed": seed, "confidence": confidence}
    bootstrap = {**boot, "method": "expanded percentile bootstrap over the worlds"}
    trained_with = getattr(group, "trained_with", None)
    return ScenarioResult(
        focal=group.label,
        identity=group.identity,
        cells=tuple(c.id for c in cells),
        modes=modes,
        teams=tuple(teams),
        scores=scores,
        rows=tuple(scenario_rows(teams, scores, **boot)),
        bootstrap=bootstrap,
        store=store.root if store is not None else None,
        cell_splits=cell_splits,
        trained_with=trained_with,
        split_rows=tuple(
            split_rows(teams, scores, cell_splits, trained_with, metrics=GAP_METRICS, **boot)
        ),
        steps_per_s=played.steps_per_s,
        digests=teams_digests(
            store,
            scores.values(),
            {
                "command": "scenario",
                "focal": group.label,
                "agents": {label: group.identity},
                "modes": modes,
                "bootstrap": bootstrap,
            },
        ),
        **w.settings,
    )


# ----------------------------------------------------------------------------------------
# Outputs: the figure
# ----------------------------------------------------------------------------------------
def plot_scenario(result: ScenarioResult, metric: str = GAP_METRICS[0]):
    """Bars per population and mode: the focal, the self-play and the cross-play
    references of ``metric`` with their intervals (a Figure on an Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    info = metric_info(metric)
    rows = [r for r in result.rows if r.metric == metric]
    fig = Figure(figsize=(max(5.0, 1.6 * len(rows) + 2), 4.2), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    width = 0.27
    for j, (name, color) in enumerate(
        (("focal", "#d95f02"), ("self_play", "#1b9e77"), ("cross", "#7570b3"))
    ):
        xs, ys, err = [], [], []
        for i, r in enumerate(rows):
            x = getattr(r, name)
            if x is None:
                continue
            y = x.scaled(info.scale)
            xs.append(i + (j - 1) * width)
            ys.append(y.point)
            lo, hi = (y.point - y.lo, y.hi - y.point) if math.isfinite(y.lo) else (0.0, 0.0)
            err.append((lo, hi))
        label = {"focal": result.focal, "self_play": "self-play", "cross": "cross-play"}[name]
        ax.bar(xs, ys, width, color=color, label=label, yerr=np.array(err).T if err else None)
    ax.set_xticks(range(len(rows)), [f"{r.population}\n{r.mode}" for r in rows], fontsize=7)
    ax.set_ylabel(info.label)
    ax.set_title(f"{result.focal} with the baselines on {result.eval_difficulty}", fontsize=10)
    ax.legend(fontsize=7)
    return fig
