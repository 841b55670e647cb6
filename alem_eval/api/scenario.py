"""``alem_eval.scenario``: your agent with the baselines, from Python.

    import alem_eval
    from alem_eval.evaluate.reference_agents import RandomLegal

    s = alem_eval.scenario("demo/*", RandomLegal(), source="demo", episodes=4, max_steps=200)
    s.table        # one row per (population, mode, metric): focal, self_play, cross_play,
                   # focal_minus_self, each with _lo / _hi (fractions in [0, 1])
    s.to_frame()   # one row per team (= s.teams)
    print(s.to_latex(caption="With the baselines", label="tab:scenario"))  # percent
    s.by_split     # background cells of several partner splits: focal - self per split
                   # and the gap test - train (empty within one split)
    print(s.split_table().to_markdown())   # that table in percentage points (None: none)

The background cells come first, as in every function of the API; the focal is an agent
object (any JAX or host agent: :mod:`alem_eval.evaluate.agents`) or a ``--focal`` SPEC
string (``focal_args`` its factory's keyword arguments). ``scenario(focal, cells)``, the
order before, still works for one release (with a :class:`DeprecationWarning`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import deprecated, frame, renamed
from alem_eval.api.cells import Cell, Cells, SourceSpec
from alem_eval.api.teams import Where, play_teams
from alem_eval.core.tables import PaperTables

if TYPE_CHECKING:
    import pandas as pd

    from alem_eval.scoring.plan import RunPlan
    from alem_eval.scoring.scenario import ScenarioResult


@dataclass(frozen=True)
class Scenario(PaperTables):
    """What :func:`scenario` played: ``.result`` is the library's
    :class:`~alem_eval.scoring.scenario.ScenarioResult`; ``.outputs`` the files written
    with ``out=``. Values are fractions in [0, 1] (``.table``, ``.teams``, ``.to_json()``);
    ``.to_markdown()`` / ``.to_latex()`` show percent."""

    result: ScenarioResult
    outputs: tuple[Path, ...] = ()

    @property
    def table(self) -> pd.DataFrame:
        """One row per (population, mode, metric: Total, Base, Coord): ``focal``, ``self_play``,
        ``cross_play``, ``focal_minus_self``, each with ``_lo`` / ``_hi`` (the world
        bootstrap CI), ``n_teams``, ``n_worlds``; fractions in [0, 1] (``.attrs["units"]``)."""
        return frame([r.flat() for r in self.result.rows])

    @property
    def teams(self) -> pd.DataFrame:
        """One row per team: ``kind`` (focal | self | cross), ``mode``, ``population``,
        ``background``, ``stranger``, the slots and the metric means."""
        return self.to_frame()

    @property
    def by_split(self) -> pd.DataFrame:
        """The split table (:mod:`~alem_eval.scoring.scenario_splits`; no rows when the
        background lies within one partner split): per ``mode`` and ``metric``, a ``row``
        per split (``train``, ``val``, ``test``; ``trained with (train)`` / ``held out
        (test)`` for a focal cell that records its partners) and the gap row (``gap (test
        - train)``), ``focal_minus_self`` with ``_lo`` / ``_hi`` (fractions; the gap's
        interval a paired bootstrap over the worlds), ``cells``, ``n_teams``, ``n_worlds``."""
        return frame([r.flat() for r in self.result.split_rows])

    def split_table(
        self,
        metrics: Sequence[str] | None = None,
        decimals: int = 1,
        caption: str | None = None,
        label: str | None = None,
        ci: bool = True,
    ) -> Any:
        """:attr:`by_split` for a paper, in percentage points (a
        :class:`~alem_eval.core.tables.PaperTable`: ``.to_markdown()``, ``.to_latex()``);
        None within one split. Arguments as :meth:`paper_table`."""
        return self.result.split_table(metrics, decimals, caption, label, ci)

    def to_frame(self) -> pd.DataFrame:
        """One row per team played (as :meth:`CrossPlay.to_frame`): ``kind`` (focal | self
        | cross), ``mode``, ``population``, ``background``, its ``split`` and
        ``trained_with`` (whether the focal trained with it: None when it records no
        partners), ``stranger``, the slots and the metric means (fractions); the paper's
        rows are :attr:`table`, the split table :attr:`by_split`."""
        return frame(self.result.team_rows())

    @property
    def digests(self) -> Any:
        """The results and config digests of the teams' records
        (:class:`~alem_eval.analysis.digests.Digests`; None without a results store)."""
        return self.result.digests

    def to_json(self) -> dict[str, Any]:
        return self.result.as_json()

    def paper_table(
        self,
        metrics: Sequence[str] | None = None,
        decimals: int = 1,
        caption: str | None = None,
        label: str | None = None,
        ci: bool = True,
    ) -> Any:
        """The paper table, in percent: per (population, mode, metric) the focal,
        self-play, cross-play and focal - self with their intervals
        (:meth:`~alem_eval.scoring.scenario.ScenarioResult.paper_table`); ``to_markdown`` /
        ``to_latex`` take the same arguments."""
        return self.result.paper_table(metrics, decimals, caption, label, ci)


def _is_focal(value: Any) -> bool:
    """An agent object or a ``--focal`` SPEC string (``module:factory``, ``file.py:factory``
    or a reference agent's name), never cells or selectors (which hold no ``:``)."""
    if isinstance(value, str):
        from alem_eval.evaluate.reference_agents import REFERENCE_AGENTS

        return ":" in value or value in REFERENCE_AGENTS
    return not isinstance(value, (Cell, list, tuple)) and hasattr(value, "act")


@renamed(results="store")
def scenario(
    cells: Cells,
    focal: Any,
    *,
    focal_args: Mapping[str, Any] | None = None,
    mode: str = "both",
    eval_difficulty: str | None = None,
    episodes: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    reps: int = 10_000,
    store: str | Path | None = None,
    fresh: bool = False,
    out: str | Path | None = None,
    source: SourceSpec | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    difficulty: str | Sequence[str] | None = None,
    split: str | None = None,
    splits: Any = None,
    on_env_mismatch: str = "error",
    batch: int | None = None,
    devices: str | int | None = None,
    record: str | Path | None = None,
    dry_run: bool = False,
) -> Scenario | RunPlan:
    """``focal`` with the background ``cells`` (``Cell`` s or selectors; none: every cell
    of a local ``source``), as ``alem-eval scenario``: ``mode``
    ``"visitor"`` (1 focal + 2 background agents), ``"resident"`` (2 + 1) or ``"both"``,
    every slot position, beside the background's self-play and cross-play on the same
    worlds. Teams are kept in the results store ``store`` (None: the user cache's; team
    rows) and read back on a rerun (keyed by the focal's identity: its code, factory
    arguments and state); ``fresh=True`` plays every team again (and stores it anew).
    ``out``: also write ``scenario.png`` and ``scenario.json`` there. ``progress``: an
    episode bar and a line per step on stderr (None: on a terminal or in Jupyter; False:
    none). ``difficulty``: only background cells of these training difficulties;
    ``split`` / ``splits``: only the background cells of that partner split, as
    for :func:`alem_eval.select`; without ``split``, background cells of several splits
    also give :attr:`Scenario.by_split` (focal - self per split and the gap test - train,
    read from ``splits``: None, the release's). ``on_env_mismatch``, ``batch``,
    ``devices``, ``record``: as :func:`alem_eval.crossplay` (``record``: a dataset of the
    scenario's episodes). Returns :class:`Scenario` (``.table``, ``.to_frame()``:
    DataFrames); ``dry_run=True`` plays and writes nothing and returns the
    :class:`~alem_eval.scoring.plan.RunPlan` (the focal is not loaded: a focal object is
    named by its class), as ``alem-eval scenario --dry-run``."""
    if _is_focal(cells) and not _is_focal(focal):
        deprecated("alem_eval.scenario(focal, cells) is now alem_eval.scenario(cells, focal)")
        cells, focal = focal, cells
    play: dict[str, Any] = {  # the run's settings, and its plan's
        "mode": mode,
        "eval_difficulty": eval_difficulty,
        "num_episodes": episodes,
        "max_steps": max_steps,
    }

    def plan(src: Any, chosen: list) -> RunPlan:
        from alem_eval.scoring.plan import plan_scenario

        name = focal if isinstance(focal, str) else type(focal).__name__
        return plan_scenario(src, chosen, focal=name, **play)

    def run(src: Any, chosen: list, **callbacks: Any) -> ScenarioResult:
        from alem_eval.analysis.results import open_store
        from alem_eval.scoring.scenario import run_scenario

        return run_scenario(
            src,
            chosen,
            focal,
            focal_args=focal_args,
            **play,
            reps=reps,
            seed=seed,
            store=open_store(store),
            splits=splits,
            on_env_mismatch=on_env_mismatch,
            fresh=fresh,
            batch=batch,
            record_dir=None if record is None else Path(record),
            **callbacks,
        )

    where = Where(source, repo, revision, cache_dir, difficulty, split, splits, devices)
    found = play_teams("scenario", cells, where, plan, run, write_scenario, out, progress, dry_run)
    return found if dry_run else Scenario(*found)


def write_scenario(result: ScenarioResult, out: str | Path) -> list[Path]:
    """``scenario.png`` and ``scenario.json`` (with the list of outputs) into ``out``:
    what ``alem-eval scenario`` and ``scenario(out=...)`` leave behind."""
    from alem_eval.core.fsutil import write_text_atomic
    from alem_eval.core.jsonout import json_text
    from alem_eval.scoring.crossplay_outputs import save_figure
    from alem_eval.scoring.scenario import plot_scenario

    where = Path(out)
    where.mkdir(parents=True, exist_ok=True)
    paths = save_figure(plot_scenario(result), where / "scenario", formats=("png",))
    doc = {**result.as_json(), "outputs": [str(p) for p in paths]}
    paths.append(write_text_atomic(where / "scenario.json", json_text(doc) + "\n"))
    return paths
