"""``alem_eval.scenario``: your agent with the baselines, from Python.

    import alem_eval
    from alem_eval.evaluate.reference_agents import RandomLegal

    s = alem_eval.scenario(RandomLegal(), "demo/*", source="demo", episodes=4, max_steps=200)
    s.table   # one row per (population, mode, metric): focal, self_play, cross_play,
              # focal_minus_self, each with _lo / _hi (fractions in [0, 1])
    s.teams   # one row per team
    print(s.to_latex(caption="With the baselines", label="tab:scenario"))  # percent

The focal is an agent object (any JAX or host agent: :mod:`alem_eval.evaluate.agents`)
or a ``--focal`` SPEC string (``focal_args`` its factory's keyword arguments).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.functions import (
    Cells,
    SourceSpec,
    cells_of_split,
    before_compiling,
    resolve_cells,
)
from alem_eval.core.tables import PaperTables

if TYPE_CHECKING:
    import pandas as pd

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
        import pandas as pd

        from alem_eval.analysis.metrics import UNITS

        df = pd.DataFrame([r.flat() for r in self.result.rows])
        df.attrs["units"] = UNITS
        return df

    @property
    def teams(self) -> pd.DataFrame:
        """One row per team: ``kind`` (focal | self | cross), ``mode``, ``population``,
        ``background``, ``stranger``, the slots and the metric means."""
        import pandas as pd

        from alem_eval.analysis.metrics import UNITS

        df = pd.DataFrame(self.result.team_rows())
        df.attrs["units"] = UNITS
        return df

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


def scenario(
    focal: Any,
    cells: Cells,
    *,
    focal_args: Mapping[str, Any] | None = None,
    mode: str = "both",
    eval_difficulty: str | None = None,
    episodes: int | None = None,
    max_steps: int | None = None,
    seed: int = 0,
    reps: int = 10_000,
    results: str | Path | None = None,
    fresh: bool = False,
    out: str | Path | None = None,
    source: SourceSpec = "hub",
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    split: str | None = None,
    splits: Any = None,
) -> Scenario:
    """``focal`` with the background ``cells``, as ``alem-eval scenario``: ``mode``
    ``"visitor"`` (1 focal + 2 background agents), ``"resident"`` (2 + 1) or ``"both"``,
    every slot position, beside the background's self-play and cross-play on the same
    worlds. Teams are kept in the results store (team rows) and read back on a rerun
    (keyed by the focal's identity: its code, factory arguments and state); ``fresh=True``
    plays every team again (and stores it anew). ``split`` / ``splits``: only the
    background cells of that partner split (:func:`alem_eval.select`).
    ``out``: also write ``scenario.png`` and ``scenario.json`` there. Returns
    :class:`Scenario` (``.table``, ``.teams``: DataFrames)."""
    before_compiling()
    from alem_eval.core.progress import err_console
    from alem_eval.scoring.crossplay_outputs import save_figure
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring.scenario import plot_scenario, run_scenario

    src, chosen = resolve_cells(cells, source, repo, revision, cache_dir)
    chosen = cells_of_split(chosen, split, splits)
    show = err_console.is_terminal if progress is None else progress
    result = run_scenario(
        src,
        chosen,
        focal,
        focal_args=focal_args,
        mode=mode,
        eval_difficulty=eval_difficulty,
        num_episodes=episodes,
        max_steps=max_steps,
        reps=reps,
        seed=seed,
        store=open_store(results),
        fresh=fresh,
        on_progress=(lambda m: err_console.print(m, highlight=False)) if show else None,
    )
    outputs: tuple[Path, ...] = ()
    if out is not None:
        from alem_eval.core.fsutil import write_text_atomic
        from alem_eval.core.jsonout import json_text

        where = Path(out)
        where.mkdir(parents=True, exist_ok=True)
        paths = save_figure(plot_scenario(result), where / "scenario", formats=("png",))
        paths.append(write_text_atomic(where / "scenario.json", json_text(result.as_json()) + "\n"))
        outputs = tuple(paths)
    return Scenario(result, outputs)
