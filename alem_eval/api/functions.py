"""The public Python API: cells, downloads, checks and scores (``import alem_eval``).

A thin, documented façade over the library the commands use (``docs/python-api.md`` is
the user page, with the table of every public function): :func:`select` / :func:`pull` /
:func:`verify` open a source (:func:`alem_eval.hub.sources.open_source`), :func:`score`
runs :func:`alem_eval.scoring.score.score_cells` and returns the stored episodes as a
DataFrame, :func:`compare` runs :func:`alem_eval.scoring.compare.compare_sources`. The
results store's tables are in :mod:`alem_eval.api.stored`, the ways of playing teams in
:mod:`alem_eval.api.crossplay` / :mod:`alem_eval.api.scenario`, drawing in
:mod:`alem_eval.api.render`, training in :mod:`alem_eval.api.training`, the policy and
environment of your own loops in :mod:`alem_eval.api.agents`.

Every function takes its cells (or selectors) first, returns data and prints nothing on
stdout; playing shows its progress on stderr on a terminal or in Jupyter
(:mod:`alem_eval.api.calls`). Importing this module imports no JAX and no pandas.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import before_compiling, episode_progress, frame, jsonable, renamed
from alem_eval.api.cells import (
    Cell,
    Cells,
    SourceSpec,
    resolve_cells,
    select,
    selector_strings,
)
from alem_eval.core.errors import UsageError
from alem_eval.hub.source_base import PullReport

if TYPE_CHECKING:
    import pandas as pd

# Kept importable from here (the API's modules before api.cells / api.calls existed).
__all__ = [
    "Cell",
    "Cells",
    "SourceSpec",
    "before_compiling",
    "resolve_cells",
    "select",
    "pull",
    "Pull",
    "verify",
    "score",
    "compare",
    "Comparison",
]


# ----------------------------------------------------------------------------------------
# Downloads and checks
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pull(PullReport):
    """What :func:`pull` did (:class:`~alem_eval.hub.source_base.PullReport`):
    ``.files_fetched``, ``.files_skipped``, ``.files_repaired``, ``.bytes_fetched``,
    ``.root`` (holds ``<cell.id>/``), ``.commit``, ``.summary()``."""

    def to_frame(self) -> pd.DataFrame:
        """One row per cell: ``cell, path, commit``."""
        return frame(self.rows(), fractions=False)

    def to_json(self) -> dict[str, Any]:
        """What ``alem-eval pull --format json`` prints."""
        return self.as_json()


def pull(
    cells: Cells,
    *,
    workers: int = 8,
    source: SourceSpec | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> Pull:
    """Download the cells' files into the local cache (resumable; every file checked
    against the release listing), with a bar on stderr when it is a terminal. A local
    source has nothing to fetch. ``alem-eval pull``.

    Returns :class:`Pull` (a :class:`~alem_eval.hub.source_base.PullReport`):
    ``.files_fetched``, ``.files_skipped``, ``.files_repaired``, ``.bytes_fetched``,
    ``.root`` (holds ``<cell.id>/``), ``.commit``, ``.summary()``, ``.to_frame()``,
    ``.to_json()``.
    """
    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    report = src.pull(chosen, workers=workers)
    return Pull(**{f.name: getattr(report, f.name) for f in fields(report)})


def verify(
    cells: Cells,
    *,
    source: SourceSpec | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> pd.DataFrame:
    """Check that each cell's config matches its weights and that they restore (a failing
    cell never stops the others; a passing one is marked verified). ``alem-eval verify``.

    Returns a DataFrame, one row per cell: ``cell, status ("OK" | "FAIL"), num_params,
    message, warnings`` (what ``alem-eval verify --format json`` prints).
    """
    from alem_eval.model.verify import verify_cells

    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    return frame([r.as_record() for r in verify_cells(src, chosen)], fractions=False)


# ----------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------
# Columns first in a score() frame, after the ids: the evaluator's own per-episode keys.
_EPISODE_FIRST = ("episode_length", "episode_return", "terminated")


@renamed(results="store")
def score(
    cells: Cells,
    *,
    episodes: int | None = None,
    max_steps: int | None = None,
    protocol: str = "fast",
    eval_difficulty: str | None = None,
    store: str | Path | None = None,
    record: str | Path | None = None,
    source: SourceSpec | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    split: str | None = None,
    splits: Any = None,
    batch: int | None = None,
) -> pd.DataFrame:
    """Score cells with greedy self-play, as ``alem-eval score`` does, and return every
    episode.

    ``episodes`` / ``max_steps``: per cell (None: the protocol's, fast = the paper's 20
    episodes of at most 10,000 steps; reference = the run's own TEST_NUM_EPISODES /
    TEST_MAX_STEPS). ``protocol``: ``"fast"`` (every episode in parallel) or
    ``"reference"`` (upstream's sequential key chain, bit for bit). ``eval_difficulty``:
    the worlds every cell plays on (None: each cell's own training difficulty;
    ``reference``: the difficulties its run evaluated). ``store``: the results store
    directory (None: the user cache's, shared with the CLI's ``--results``): cells already
    scored the same way are read back, new ones written as they finish. ``record``: also
    record every step into this directory (:mod:`alem_eval.datasets.recorder`).
    ``progress``: an episode bar on stderr (None: on a terminal or in Jupyter; False:
    none, as ``--quiet``). ``split`` / ``splits``: only the cells of that partner split, as
    for :func:`~alem_eval.api.cells.select`.
    ``batch``: the evaluator's batch slots (None: its default layout, ``--batch``).

    Returns a DataFrame with one row per (cell, eval difficulty, episode): ``cell, budget,
    algorithm, difficulty, seed, eval_difficulty, episode, episode_length, episode_return,
    terminated``, every ``compute_score`` metric under its upstream name
    (``Team/reward_pct_of_max``, ``Team/achievement_pct``, ...; NaN where an episode's
    value was not finite), then the provenance (``protocol, checkpoint_hash,
    env_version, jax_version, alem_eval_version, config_hash``): the stored rows.
    """
    before_compiling()  # first: ScoreOptions imports JAX
    import pandas as pd

    from alem_eval.analysis.result_keys import ID_COLUMNS, PROVENANCE_COLUMNS, ResultKey
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring.score import ScoreOptions, score_cells

    options = ScoreOptions(
        protocol=protocol,
        num_episodes=episodes,
        max_steps=max_steps,
        eval_difficulty=eval_difficulty,
        batch=batch,
    )
    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir, split, splits)
    results_store = open_store(store)
    with episode_progress("score", progress) as bar:
        scores = score_cells(
            src,
            chosen,
            options=options,
            store=results_store,
            on_progress=bar and bar.cell_done,
            on_episodes=bar and bar.update,
            record_dir=Path(record) if record is not None else None,
        )
    frames = [results_store.get(ResultKey(**s.provenance)) for s in scores]
    df = pd.concat(frames, ignore_index=True)
    first = list(ID_COLUMNS) + [c for c in _EPISODE_FIRST if c in df.columns]
    metrics = [c for c in df.columns if c not in first and c not in PROVENANCE_COLUMNS]
    return frame(df[first + metrics + list(PROVENANCE_COLUMNS)])


# ----------------------------------------------------------------------------------------
# Two sources compared
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found, one row per eval difficulty (``.rows``): ``A``, ``B``
    (the sources), ``mean_A``, ``mean_B``, ``p_improvement`` = P(A > B) with its CI
    ``p_lo``, ``p_hi``, ``runs``, ``verdict``, ...; ``.metric``, ``.ci``."""

    rows: tuple[dict[str, Any], ...]
    metric: str
    ci: str

    def to_frame(self) -> pd.DataFrame:
        """One row per eval difficulty (what ``alem-eval compare --format csv`` prints)."""
        return frame(self.rows, fractions=False)

    def to_json(self) -> dict[str, Any]:
        return {"metric": self.metric, "ci": self.ci, "rows": jsonable(list(self.rows))}

    def lines(self) -> list[str]:
        """One sentence per eval difficulty, as ``alem-eval compare`` prints them."""
        return [
            f"{r['eval_difficulty']}: P(A > B) = {r['p_improvement']:.2f} "
            f"[{r['p_lo']:.2f}, {r['p_hi']:.2f}] on {self.metric} (A = {r['A']}, B = {r['B']}; "
            f"runs = {r['runs']}, {r['n_A']} vs {r['n_B']}; 95% {self.ci} bootstrap CI "
            f"resampling {r['resampled']}) -> {r['verdict']}"
            for r in self.rows
        ]


def compare(
    cells: Cells,
    sources: Sequence[SourceSpec],
    *,
    metric: str | None = None,
    difficulty: str | Sequence[str] | None = None,
    eval_difficulty: str | None = None,
    episodes: int | None = None,
    max_steps: int | None = None,
    protocol: str = "fast",
    reps: int | None = None,
    seed: int = 0,
    ci: str = "expanded",
    store: str | Path | None = None,
    progress: bool | None = None,
) -> Comparison:
    """Is source A's checkpoint better than source B's? The same cells (selectors, or
    ``Cell`` s: their ids) of the two ``sources`` (``("hub", "runs")``) scored on the same
    worlds, P(A > B) with a bootstrap CI, as ``alem-eval compare``. Runs are seeds when
    both sides have at least two cells, else episodes (the worlds resampled jointly: a
    paired comparison); difficulties are compared separately, never pooled.

    ``metric``: a per-episode metric (default Total); ``difficulty``: the training
    difficulties to keep; ``episodes`` default 20. ``store``: where both sources' scores
    are kept and read back (None: ``<user cache>/compare``, apart from the results store).
    Returns :class:`Comparison`: ``.to_frame()`` (one row per eval difficulty),
    ``.to_json()``, ``.lines()``.
    """
    before_compiling()
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.core.paths import compare_dir
    from alem_eval.core.progress import download_bar
    from alem_eval.scoring.compare import (
        DEFAULT_COMPARE_EPISODES,
        DEFAULT_COMPARE_METRIC,
        DEFAULT_COMPARE_REPS,
        compare_sources,
    )

    selectors = selector_strings(cells)
    if not selectors:
        raise UsageError("compare: no cells given (selectors, or Cells: their ids)")
    difficulties = [difficulty] if isinstance(difficulty, str) else difficulty
    metric = metric or DEFAULT_COMPARE_METRIC
    with episode_progress("compare", progress) as bar:
        rows = compare_sources(
            [str(s) for s in sources],
            selectors,
            metric=metric,
            eval_difficulty=eval_difficulty,
            difficulties=list(difficulties) if difficulties else None,
            protocol=protocol,
            episodes=DEFAULT_COMPARE_EPISODES if episodes is None else episodes,
            max_steps=max_steps,
            reps=DEFAULT_COMPARE_REPS if reps is None else reps,
            seed=seed,
            ci=ci,
            store=ResultsStore(Path(store).expanduser() if store else compare_dir()),
            on_progress=bar and bar.cell_done,
            on_episodes=bar and bar.update,
            on_download=download_bar(None if progress is not False else False),
        )
    return Comparison(tuple(rows), metric, ci)
