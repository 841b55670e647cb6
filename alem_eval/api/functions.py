"""The public Python API: cells, scores, tables and reports (``import alem_eval``).

A thin, documented façade over the library the commands use (``docs/python-api.md`` is
the user page): :func:`select` / :func:`pull` / :func:`verify` open a source
(:func:`alem_eval.hub.sources.open_source`), :func:`score` runs
:func:`alem_eval.scoring.score.score_cells` and returns the stored episodes as a DataFrame,
:func:`leaderboard` / :func:`report` read the results store
(:mod:`alem_eval.reporting.leaderboard`, :mod:`alem_eval.reporting.report`), :func:`crossplay` runs
:func:`alem_eval.scoring.crossplay.run_crossplay`. The policy and environment of your own loops are
in :mod:`alem_eval.api.agents` (:func:`~alem_eval.api.agents.load_policy`,
:func:`~alem_eval.api.agents.make_env`).

Every function returns data and prints nothing on stdout; scoring shows its progress on
stderr on a terminal or in Jupyter (:mod:`alem_eval.core.progress`). Wherever cells are taken, ``Cell`` s from :func:`select`
(they remember their source) or selector strings with ``source=`` work alike. Importing
this module imports no JAX and no pandas.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.core.errors import UsageError
from alem_eval.core.tables import PaperTables
from alem_eval.hub.manifest import Cell as _ManifestCell

if TYPE_CHECKING:
    import pandas as pd

    from alem_eval.scoring.crossplay import CrossplayResult
    from alem_eval.reporting.leaderboard import Leaderboard
    from alem_eval.reporting.report import ReportResult
    from alem_eval.hub.source_base import PullReport, Source

SourceSpec = str | Path  # "hub", "demo" or a directory in the released layout
Cells = Any  # a Cell, a selector string, or an iterable of either (see resolve_cells)


@dataclass(frozen=True)
class Cell(_ManifestCell):
    """One checkpoint cell and the source it was selected from.

    ``budget, algorithm, difficulty`` (training difficulty), ``seed``; ``.id`` is
    ``"1B/ippo-rnn/hard/seed0"``, its path in the release. Equal cells from two sources
    compare equal; the source travels with the cell, so ``score(cells)`` needs no
    ``source=``.
    """

    source: Any = field(default=None, compare=False, repr=False)  # a hub.source_base.Source
    origin: tuple = field(default=(), compare=False, repr=False)  # what opened it


# ----------------------------------------------------------------------------------------
# Cells and sources
# ----------------------------------------------------------------------------------------
def _origin(source: SourceSpec, repo, revision, cache_dir) -> tuple:
    spec = str(source).strip()
    if spec.lower() in ("hub", "demo"):
        spec = spec.lower()
    else:
        spec = str(Path(spec).expanduser().resolve())
    return (spec, repo, revision, None if cache_dir is None else str(cache_dir))


def _selectors(items: Iterable[Any]) -> list[str]:
    """Selector strings from strings, ``Cell`` s (their id) and lists of either."""
    out: list[str] = []
    for item in items:
        if isinstance(item, _ManifestCell):
            out.append(item.id)
        elif isinstance(item, str):
            out.append(item)
        elif isinstance(item, Iterable):
            out += _selectors(item)
        else:
            raise UsageError(f"not a cell or selector: {item!r}")
    return out


def select(
    *selectors: str | Sequence[str],
    source: SourceSpec = "hub",
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    split: str | None = None,
    splits: Any = None,
) -> list[Cell]:
    """The cells of ``source`` matched by the selectors (every cell when none is given).

    ``selectors``: ``BUDGET/ALGORITHM/DIFFICULTY/seedN`` patterns, any level a glob or a
    comma list, trailing levels optional (``"1B/*/hard"``, ``"1B/ippo,pqn"``).
    ``source``: ``"hub"`` (the Hugging Face release; ``repo`` / ``revision`` /
    ``cache_dir`` as in the CLI), ``"demo"`` (the cells bundled with the package) or a
    local directory in the released layout. ``split``: only the cells of that frozen
    partner split (``"train"``, ``"val"``, ``"test"``) of ``splits`` (None: the release's;
    a split file's path or an :class:`~alem_eval.hub.splits.Splits`). Nothing is
    downloaded here; what a later call downloads for these cells shows a bar on stderr
    when it is a terminal.
    Returns ``list[Cell]`` in manifest order; a selector that matches nothing raises
    :class:`~alem_eval.core.errors.SelectorError`.
    """
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.sources import open_source

    src = open_source(
        source, repo=repo, revision=revision, cache_dir=cache_dir, on_download=download_bar()
    )
    origin = _origin(source, repo, revision, cache_dir)
    return [
        Cell(c.budget, c.algorithm, c.difficulty, c.seed, source=src, origin=origin)
        for c in cells_of_split(src.select(_selectors(selectors)), split, splits)
    ]


def cells_of_split(cells: list, split: str | None, splits: Any) -> list:
    """The ``cells`` of ``split`` (None: all) in ``splits`` (:mod:`alem_eval.hub.splits`)."""
    if split is None and splits is None:
        return cells
    from alem_eval.hub.splits import as_splits, select_split

    return select_split(cells, split, as_splits(splits))


def resolve_cells(
    cells: Cells, source: SourceSpec, repo, revision, cache_dir
) -> tuple[Source, list[_ManifestCell]]:
    """(source, the library's cells): ``Cell`` s keep their own source (one per call);
    selector strings are selected from ``source``."""
    items: list[Any] = [cells] if isinstance(cells, (str, _ManifestCell)) else list(cells)
    if not items:
        raise UsageError("no cells given: pass Cells from alem_eval.select() or selectors")
    if all(isinstance(c, str) for c in items):
        items = select(*items, source=source, repo=repo, revision=revision, cache_dir=cache_dir)
    elif not all(isinstance(c, Cell) and c.source is not None for c in items):
        raise UsageError(
            "cells must be all Cells from alem_eval.select() or all selector strings (with source=)"
        )
    origins = list(dict.fromkeys(c.origin for c in items))
    if len(origins) > 1:
        names = ", ".join(str(o[0]) for o in origins)
        raise UsageError(f"the cells come from {len(origins)} sources ({names}); one per call")
    plain = [_ManifestCell(c.budget, c.algorithm, c.difficulty, c.seed) for c in items]
    return items[0].source, list(dict.fromkeys(plain))


def pull(
    cells: Cells,
    *,
    workers: int = 8,
    source: SourceSpec = "hub",
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> PullReport:
    """Download the cells' files into the local cache (resumable; every file checked
    against the release listing), with a bar on stderr when it is a terminal. A local
    source has nothing to fetch.

    Returns :class:`~alem_eval.hub.source_base.PullReport`: ``.files_fetched``,
    ``.files_skipped``, ``.files_repaired``, ``.bytes_fetched``, ``.root`` (holds
    ``<cell.id>/``), ``.commit``, ``.summary()``.
    """
    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    return src.pull(chosen, workers=workers)


def verify(
    cells: Cells,
    *,
    source: SourceSpec = "hub",
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Check that each cell's config matches its weights and that they restore (a failing
    cell never stops the others; a passing one is marked verified).

    Returns a DataFrame, one row per cell: ``cell, status ("OK" | "FAIL"), num_params,
    message, warnings`` (what ``alem-eval verify --format json`` prints).
    """
    import pandas as pd

    from alem_eval.model.verify import verify_cells

    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    return pd.DataFrame([r.as_record() for r in verify_cells(src, chosen)])


# ----------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------
def before_compiling() -> None:
    """The persistent compilation cache, as the CLI sets it, while that can still take
    effect and is nobody else's choice: before JAX is imported, unless JAX's own cache
    variable is set (then, or once JAX runs, the caller decides)."""
    import sys

    if "jax" not in sys.modules and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        from alem_eval.core.runtime import enable_compilation_cache

        enable_compilation_cache()


@contextlib.contextmanager
def _progress(label: str, show: bool | None) -> Iterator[Any]:
    """An :class:`~alem_eval.core.progress.EpisodeBar` on stderr (``show`` None: only on a
    terminal or in Jupyter, :func:`~alem_eval.core.progress.live_display`), else None."""
    from alem_eval.core.progress import EpisodeBar, live_display

    if not (live_display() if show is None else show):
        yield None
        return
    with EpisodeBar(label) as bar:
        yield bar


# Columns first in a score() frame, after the ids: the evaluator's own per-episode keys.
_EPISODE_FIRST = ("episode_length", "episode_return", "terminated")


def score(
    cells: Cells,
    *,
    episodes: int | None = None,
    max_steps: int | None = None,
    protocol: str = "fast",
    eval_difficulty: str | None = None,
    results: str | Path | None = None,
    record: str | Path | None = None,
    source: SourceSpec = "hub",
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    split: str | None = None,
    splits: Any = None,
) -> pd.DataFrame:
    """Score cells with greedy self-play, as ``alem-eval score`` does, and return every
    episode.

    ``episodes`` / ``max_steps``: per cell (None: the protocol's, fast = the paper's 20
    episodes of at most 10,000 steps; reference = the run's own TEST_NUM_EPISODES /
    TEST_MAX_STEPS). ``protocol``: ``"fast"`` (every episode in parallel) or
    ``"reference"`` (upstream's sequential key chain, bit for bit). ``eval_difficulty``:
    the worlds every cell plays on (None: each cell's own training difficulty;
    ``reference``: the difficulties its run evaluated). ``results``: the results store
    (None: the user cache's, shared with the CLI): cells already scored the same way are
    read back, new ones written as they finish. ``record``: also record every step into
    this directory (:mod:`alem_eval.datasets.recorder`). ``progress``: an episode bar on stderr
    (None: on a terminal or in Jupyter). ``split`` / ``splits``: only the cells of that
    partner split, as for :func:`select`.

    Returns a DataFrame with one row per (cell, eval difficulty, episode): ``cell, budget,
    algorithm, difficulty, seed, eval_difficulty, episode, episode_length, episode_return,
    terminated``, every ``compute_score`` metric under its upstream name
    (``Team/reward_pct_of_max``, ``Team/achievement_pct``, ...; NaN where an episode's
    value was not finite), then the provenance (``protocol, checkpoint_hash,
    env_version, jax_version, alem_eval_version, config_hash``): the stored rows.
    """
    before_compiling()  # first: ScoreOptions imports JAX
    import pandas as pd

    from alem_eval.analysis.results import open_store
    from alem_eval.analysis.result_keys import ID_COLUMNS, PROVENANCE_COLUMNS, ResultKey
    from alem_eval.scoring.score import ScoreOptions, score_cells

    options = ScoreOptions(
        protocol=protocol,
        num_episodes=episodes,
        max_steps=max_steps,
        eval_difficulty=eval_difficulty,
    )
    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    chosen = cells_of_split(chosen, split, splits)
    store = open_store(results)
    with _progress("score", progress) as bar:
        scores = score_cells(
            src,
            chosen,
            options=options,
            store=store,
            on_progress=bar and bar.cell_done,
            on_episodes=bar and bar.update,
            record_dir=Path(record) if record is not None else None,
        )
    frames = [store.get(ResultKey(**s.provenance)) for s in scores]
    frame = pd.concat(frames, ignore_index=True)
    first = list(ID_COLUMNS) + [c for c in _EPISODE_FIRST if c in frame.columns]
    metrics = [c for c in frame.columns if c not in first and c not in PROVENANCE_COLUMNS]
    return frame[first + metrics + list(PROVENANCE_COLUMNS)]


# ----------------------------------------------------------------------------------------
# Tables and reports over the results store
# ----------------------------------------------------------------------------------------
def leaderboard(
    *selectors: str | Cell | Sequence[str | Cell],
    results: str | Path | None = None,
    reps: int = 50_000,
    seed: int = 0,
    protocol: str | None = None,
    ci: str = "expanded",
    runs: str = "seeds",
) -> Leaderboard:
    """Base% / Coord% / Total% per difficulty of the scored cells (all when no selector;
    ``Cell`` s work as selectors), from the results store ``results`` (None: the user
    cache's): mean over seeds with a stratified bootstrap CI (``reps`` resamples,
    ``seed``) over the training seeds, each scored on the protocol's fixed worlds;
    ``runs="episodes"`` makes every episode a run (cells scored with one seed).
    ``ci``: ``"expanded"`` (the percentile interval widened for the number of runs: it
    covers its 95% label from 3 seeds on) or ``"percentile"`` (rliable's plain interval,
    for parity with papers that used it). ``protocol``: which one to read when the store
    holds several.

    Returns :class:`~alem_eval.reporting.leaderboard.Leaderboard`: ``.to_frame()`` (one row per
    budget x algorithm, fractions in [0, 1]), ``.to_csv()`` (fractions),
    ``.to_markdown()`` / ``.to_latex()`` (percent; ``difficulties``, ``metrics``,
    ``decimals``, ``caption``, ``label``, ``ci``), ``.to_json()`` (the upstream entry
    schema, percent), ``.notes``.
    """
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.reporting.leaderboard import build_leaderboard
    from alem_eval.analysis.results import open_store

    return build_leaderboard(
        open_store(results),
        _selectors(selectors) or None,
        settings=BootstrapSettings(reps=reps, seed=seed, method=ci, runs=runs),
        protocol=protocol,
    )


def results(
    *selectors: str | Cell | Sequence[str | Cell],
    results: str | Path | None = None,
    teams: bool = False,
    eval_difficulty: str | None = None,
    protocol: str | None = None,
    all_versions: bool = False,
) -> pd.DataFrame:
    """The scored episodes in the results store ``results`` (None: the user cache's) as
    one DataFrame, one row per episode: the cells' own scores (what ``score`` wrote), or
    with ``teams`` the teams ``crossplay`` and ``scenario`` played (a ``team`` column names
    the member driving each agent slot). ``selectors`` (and ``Cell`` s) pick cells (a
    team by its anchor cell); ``eval_difficulty`` / ``protocol`` narrow further. A cell
    scored under several provenances gives its latest unless ``all_versions``."""
    from alem_eval.analysis.results import open_store

    return open_store(results).load(
        _selectors(selectors) or None,
        eval_difficulties=[eval_difficulty] if eval_difficulty else None,
        protocols=[protocol] if protocol else None,
        all_versions=all_versions,
        teams=teams,
    )


def report(
    *selectors: str | Cell | Sequence[str | Cell],
    out: str | Path,
    results: str | Path | None = None,
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
) -> ReportResult:
    """Write the rliable-style report of the scored cells into ``out``: ``report.md``,
    ``stats.json`` and ``figures/*.png`` (also ``*.pdf`` with ``pdf``): interval estimates
    (IQM, mean, median, optimality gap), probability of improvement, performance profiles
    and the budget comparison, one panel per difficulty.

    ``metrics``: names, labels or aliases (``"total"``, ``"achievement"``,
    ``"Team/achievement_pct"``). ``runs``: ``"seeds"`` (each seed's mean is a run) or
    ``"episodes"``. ``ci``: the interval, as for :func:`leaderboard` (every interval of
    the report; see :mod:`alem_eval.analysis.bootstrap`). ``jobs``: processes drawing the
    figures. ``clips``: the source of the scored cells (``"hub"``, ``"demo"``, a directory,
    or a ``Cell`` of it) to draw a short self-play GIF per algorithm from, embedded in the
    report (``clip_steps`` steps each).

    Returns :class:`~alem_eval.reporting.report.ReportResult`: ``.markdown``, ``.stats_json``,
    ``.figures``, ``.clips``, ``.notes``.
    """
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.reporting.report import ClipRequest, build_report
    from alem_eval.analysis.results import open_store

    request = None
    if clips is not None:
        before_compiling()
        request = ClipRequest(_source_of(clips), max_steps=clip_steps)
    return build_report(
        open_store(results),
        out,
        selectors=_selectors(selectors) or None,
        metrics=tuple(metrics),
        settings=BootstrapSettings(reps=reps, seed=seed, runs=runs, method=ci),
        protocol=protocol,
        formats=("png", "pdf") if pdf else ("png",),
        jobs=jobs,
        clips=request,
    )


def _source_of(clips: Any) -> Source:
    """A source object, the source of a ``Cell``, or one opened from its spec."""
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.source_base import Source
    from alem_eval.hub.sources import open_source

    if isinstance(clips, Source):
        return clips
    if isinstance(clips, Cell):
        return clips.source
    return open_source(clips, on_download=download_bar())


# ----------------------------------------------------------------------------------------
# Cross-play
# ----------------------------------------------------------------------------------------
def _fractions(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with its unit named (``.attrs["units"]``: the metric values are fractions)."""
    from alem_eval.analysis.metrics import UNITS

    df.attrs["units"] = UNITS
    return df


@dataclass(frozen=True)
class CrossPlay(PaperTables):
    """What :func:`crossplay` scored: ``.result`` is the library's
    :class:`~alem_eval.scoring.crossplay.CrossplayResult` (``.as_json()``, ``.matrix``, ``.gaps``);
    ``.outputs`` the files written with ``out=``. Values are fractions in [0, 1]
    (``.to_frame()``, ``.gap``, ``.matrix``, ``.to_json()``); ``.to_markdown()`` /
    ``.to_latex()`` show percent."""

    result: CrossplayResult
    outputs: tuple[Path, ...] = ()

    def to_frame(self) -> pd.DataFrame:
        """One row per team: ``team_key, slot0..slot2`` (the cell in each agent slot),
        ``shape`` (self | pair | distinct | other), ``anchor``, ``reused``, ``episodes``
        and the mean ``Team/reward_pct_of_max``, ``Team/normal_reward_pct_of_max``,
        ``Team/coord_reward_pct_of_max``, ``episode_return``, ``episode_length``."""
        import pandas as pd

        return _fractions(pd.DataFrame(self.result.team_rows()))

    @property
    def gap(self) -> pd.DataFrame:
        """One row per metric: ``metric, label`` (Total, Base, Coord), ``self`` (slot-weighted
        self-play of the members), ``cross`` (the cross-play teams), ``gap`` (self -
        cross) with its bootstrap CI ``lo, hi`` (fractions), ``n_teams, n_runs, n_worlds``."""
        import pandas as pd

        return _fractions(pd.DataFrame([g.as_json() for g in self.result.gaps]))

    @property
    def matrix(self) -> pd.DataFrame:
        """The pair matrix of Total: rows the partner A (two slots), columns the newcomer
        B (one slot), the diagonal self-play; NaN where no team was scored."""
        import pandas as pd

        m = self.result.matrix
        return _fractions(pd.DataFrame(m.values, index=list(m.cells), columns=list(m.cells)))

    @property
    def digests(self) -> Any:
        """The results and config digests of the teams' records
        (:class:`~alem_eval.analysis.digests.Digests`; None without a results store)."""
        return self.result.digests

    def to_json(self) -> dict[str, Any]:
        return self.result.as_json()

    def paper_table(
        self,
        table: str = "gap",
        metrics: Sequence[str] | None = None,
        decimals: int = 1,
        caption: str | None = None,
        label: str | None = None,
        ci: bool = True,
    ) -> Any:
        """The paper table, in percent: ``table="gap"`` (per metric: self-play, cross-play
        and the gap with its interval) or ``"matrix"`` (the pair matrix); ``to_markdown`` /
        ``to_latex`` take the same arguments."""
        return self.result.paper_table(
            table, metrics=metrics, decimals=decimals, caption=caption, label=label, ci=ci
        )


def crossplay(
    cells: Cells,
    *,
    scheme: str = "pairs",
    eval_difficulty: str | None = None,
    episodes: int | None = None,
    max_steps: int | None = None,
    max_teams: int = 64,
    seed: int = 0,
    reps: int = 10_000,
    runs: str = "teams",
    results: str | Path | None = None,
    out: str | Path | None = None,
    source: SourceSpec = "hub",
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    split: str | None = None,
    splits: Any = None,
) -> CrossPlay:
    """Teams mixing the cells' agents against their self-play, as ``alem-eval crossplay``.

    ``scheme``: ``"pairs"`` (two agents of A + one of B in every slot position),
    ``"distinct"`` / ``"mixed"`` (sampled, at most ``max_teams``, seeded by ``seed``) or
    ``"all"``; each cell's self-play is always included. All teams play the same worlds
    (``eval_difficulty``, default the cells' shared training difficulty; ``episodes`` /
    ``max_steps`` default 20 / 10,000). Teams are kept in the results store (team rows,
    never mixed with the cells' own scores) and read back on a rerun. ``runs``:
    ``"teams"`` or ``"episodes"`` as the bootstrap's runs (``reps`` resamples). ``out``: also write ``pair_matrix.png/.pdf``, ``teams.csv`` and
    ``crossplay.json`` there. ``progress``: an episode bar and a line per step on
    stderr (None: on a terminal or in Jupyter). ``split`` / ``splits``: only the cells of
    that partner split, as for :func:`select`.

    Returns :class:`CrossPlay`: ``.to_frame()`` (one row per team), ``.gap`` and
    ``.matrix`` (DataFrames), ``.to_json()``.
    """
    before_compiling()
    from alem_eval.scoring.crossplay import run_crossplay
    from alem_eval.scoring.crossplay_outputs import write_outputs
    from alem_eval.analysis.results import open_store

    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    chosen = cells_of_split(chosen, split, splits)
    with _progress("crossplay", progress) as bar:
        result = run_crossplay(
            src,
            chosen,
            scheme=scheme,
            eval_difficulty=eval_difficulty,
            num_episodes=episodes,
            max_steps=max_steps,
            max_teams=max_teams,
            seed=seed,
            reps=reps,
            runs=runs,
            store=open_store(results),
            on_progress=bar and bar.note,
            on_episodes=bar and bar.update,
        )
    outputs = tuple(write_outputs(result, out)) if out is not None else ()
    return CrossPlay(result, outputs)
