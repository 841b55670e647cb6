"""``alem_eval.crossplay``: teams mixing the cells' agents against their self-play
(``alem-eval crossplay`` calls :func:`crossplay`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import frame, renamed
from alem_eval.api.cells import Cells, SourceSpec
from alem_eval.api.teams import Where, play_teams
from alem_eval.core.tables import PaperTables

if TYPE_CHECKING:
    import pandas as pd

    from alem_eval.scoring.crossplay import CrossplayResult
    from alem_eval.scoring.plan import RunPlan


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
        return frame(self.result.team_rows())

    @property
    def gap(self) -> pd.DataFrame:
        """One row per metric: ``metric, label`` (Total, Base, Coord), ``self`` (slot-weighted
        self-play of the members), ``cross`` (the cross-play teams), ``gap`` (self -
        cross) with its bootstrap CI ``lo, hi`` (fractions), ``n_teams, n_runs, n_worlds``."""
        return frame([g.as_json() for g in self.result.gaps])

    @property
    def matrix(self) -> pd.DataFrame:
        """The pair matrix of Total: rows the partner A (two slots), columns the newcomer
        B (one slot), the diagonal self-play; NaN where no team was scored."""
        import pandas as pd

        m = self.result.matrix
        return frame(pd.DataFrame(m.values, index=list(m.cells), columns=list(m.cells)))

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


@renamed(results="store")
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
    store: str | Path | None = None,
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
) -> CrossPlay | RunPlan:
    """Teams mixing the cells' agents against their self-play, as ``alem-eval crossplay``.

    ``cells``: ``Cell`` s or selectors (none: every cell of a local ``source``; the Hub
    needs a selection). ``scheme``: ``"pairs"`` (two agents of A + one of B in every slot
    position), ``"distinct"`` / ``"mixed"`` (sampled, at most ``max_teams``, seeded by
    ``seed``) or ``"all"``; each cell's self-play is always included. All teams play the
    same worlds (``eval_difficulty``, default the cells' shared training difficulty;
    ``episodes`` / ``max_steps`` default 20 / 10,000). Teams are kept in the results store
    (team rows, never mixed with the cells' own scores) in ``store`` (None: the user
    cache's results store) and read back on a rerun. ``runs``: ``"teams"`` or
    ``"episodes"`` as the bootstrap's runs (``reps`` resamples). ``out``: also write
    ``pair_matrix.png/.pdf``, ``teams.csv`` and ``crossplay.json`` there. ``progress``: an
    episode bar and a line per step on stderr (None: on a terminal or in Jupyter; False:
    none). ``difficulty``: only cells of these training difficulties; ``split`` /
    ``splits``: only the cells of that partner split, as for :func:`alem_eval.select`.
    ``on_env_mismatch``: a cell trained on another environment version is an ``"error"``
    (or only a ``"warn"`` ing). ``batch``: the evaluator's batch
    slots (None: its default layout); ``devices``: split the work over that many CPU
    devices (``"auto"``: one per core; only before JAX starts); ``record``: also record
    every played step into this directory, a dataset of the teams' episodes (as
    :func:`alem_eval.score`'s ``record``).

    Returns :class:`CrossPlay`: ``.to_frame()`` (one row per team), ``.gap`` and
    ``.matrix`` (DataFrames), ``.to_json()``. ``dry_run=True`` plays and writes nothing
    and returns the :class:`~alem_eval.scoring.plan.RunPlan` (``.records()``: a row per
    cell to download, ``.as_json()``, ``.summary()``), as ``alem-eval crossplay
    --dry-run``.
    """
    play: dict[str, Any] = {  # the run's settings, and its plan's
        "scheme": scheme,
        "eval_difficulty": eval_difficulty,
        "num_episodes": episodes,
        "max_steps": max_steps,
        "max_teams": max_teams,
        "seed": seed,
    }

    def plan(src: Any, chosen: list) -> RunPlan:
        from alem_eval.scoring.plan import plan_crossplay

        return plan_crossplay(src, chosen, **play)

    def run(src: Any, chosen: list, **callbacks: Any) -> CrossplayResult:
        from alem_eval.analysis.results import open_store
        from alem_eval.scoring.crossplay import run_crossplay

        return run_crossplay(
            src,
            chosen,
            **play,
            reps=reps,
            runs=runs,
            store=open_store(store),
            on_env_mismatch=on_env_mismatch,
            batch=batch,
            record_dir=None if record is None else Path(record),
            **callbacks,
        )

    def write(result: CrossplayResult, directory: Path) -> list[Path]:
        from alem_eval.scoring.crossplay_outputs import write_outputs

        return write_outputs(result, directory)

    where = Where(source, repo, revision, cache_dir, difficulty, split, splits, devices)
    found = play_teams("crossplay", cells, where, plan, run, write, out, progress, dry_run)
    return found if dry_run else CrossPlay(*found)
