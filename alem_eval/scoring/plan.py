"""What ``pull``, ``score``, ``crossplay`` and ``scenario`` would do, without doing it (``--dry-run``).

A plan lists the cells, the files and bytes to download, the episodes and an upper bound
of the env steps (every episode running to its step cap; cells or teams already in the
results store are played again only if their provenance changed, so the real run may do
less). Making a plan downloads, runs and writes nothing when the source is opened with
``read_only=True`` (a Hub source then keeps no listing in its cache and refuses to
download); the Hub's file lists and sizes come from its listing, a local directory has
nothing to download.

    src = open_source("hub", read_only=True)
    plan = plan_score(src, src.select(["1B/*/hard"]))
    plan.totals()  # {"cells": 20, "files_to_download": ..., "max_env_steps": ..., ...}

A cell not downloaded yet has no ``config.json`` to read: the trainer defaults for its
algorithm, difficulty and seed stand in (what ``reference`` episodes and cross-play team
sizes depend on; a note says so).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from alem_eval.core.errors import UsageError
from alem_eval.core.units import format_bytes

if TYPE_CHECKING:
    from alem_eval.algorithms.config import RunConfig
    from alem_eval.scoring.score import ScoreOptions


@dataclass(frozen=True)
class CellPlan:
    """One cell: its files (sizes in bytes), those a pull would download, and for
    ``score`` its eval difficulties, episodes over them and the step cap per episode."""

    cell: str
    files: int
    bytes: int
    files_to_download: int
    bytes_to_download: int
    eval_difficulties: tuple[str, ...] = ()
    episodes: int | None = None
    max_steps: int | None = None

    @property
    def max_env_steps(self) -> int | None:
        if self.episodes is None or self.max_steps is None:
            return None
        return self.episodes * self.max_steps

    def as_record(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "cell": self.cell,
            "files": self.files,
            "bytes": self.bytes,
            "files_to_download": self.files_to_download,
            "bytes_to_download": self.bytes_to_download,
        }
        if self.episodes is not None:
            row.update(
                eval_difficulties=",".join(self.eval_difficulties),
                episodes=self.episodes,
                max_steps=self.max_steps,
                max_env_steps=self.max_env_steps,
            )
        return row


@dataclass(frozen=True)
class RunPlan:
    """What a command would do: a :class:`CellPlan` per cell, the teams (``crossplay``),
    the episodes in all and at most how many env steps they take; ``notes`` are the
    source's warnings and what the plan had to assume."""

    command: str
    source: str
    cells: tuple[CellPlan, ...]
    episodes: int = 0
    max_env_steps: int = 0
    teams: int | None = None
    notes: tuple[str, ...] = ()

    def records(self) -> list[dict[str, Any]]:
        """One row per cell (``--format csv|table``)."""
        return [c.as_record() for c in self.cells]

    def totals(self) -> dict[str, Any]:
        out: dict[str, Any] = {"cells": len(self.cells)}
        if self.teams is not None:
            out["teams"] = self.teams
        for key in ("files", "bytes", "files_to_download", "bytes_to_download"):
            out[key] = sum(getattr(c, key) for c in self.cells)
        out.update(episodes=self.episodes, max_env_steps=self.max_env_steps)
        return out

    def as_json(self) -> dict[str, Any]:
        """The whole plan as plain JSON types (``--format json``)."""
        return {
            "command": self.command,
            "dry_run": True,
            "source": self.source,
            "totals": self.totals(),
            "cells": self.records(),
            "notes": list(self.notes),
        }

    def summary(self) -> str:
        t = self.totals()
        teams = f" in {t['teams']} teams" if self.teams is not None else ""
        play = (
            f"; {t['episodes']:,} episode(s), at most {t['max_env_steps']:,} env steps"
            if self.command != "pull"
            else ""
        )
        return (
            f"{self.command} --dry-run: {t['cells']} cell(s){teams}, "
            f"{t['files_to_download']} of {t['files']} file(s) to download "
            f"({format_bytes(t['bytes_to_download'])} of {format_bytes(t['bytes'])}){play}; "
            "nothing was downloaded, run or written"
        )


def plan_pull(source, cells: Sequence[Any]) -> RunPlan:
    """The files and bytes ``source.pull(cells)`` would download."""
    rows = tuple(CellPlan(c.id, *_transfer(source, c)) for c in cells)
    return RunPlan("pull", source.description, rows, notes=tuple(source.warnings))


def plan_score(source, cells: Sequence[Any], options: ScoreOptions | None = None) -> RunPlan:
    """What :func:`alem_eval.scoring.score.score_cells` would download and play with ``options``:
    per cell the eval difficulties, episodes and step cap it is scored with
    (:func:`alem_eval.scoring.score.score_settings`)."""
    from alem_eval.scoring.score import ScoreOptions, score_settings

    options = options or ScoreOptions()
    rows, assumed = [], []
    for cell in cells:
        cfg, known = _config(source, cell)
        if not known:
            assumed.append(cell.id)
        diffs, episodes, steps = score_settings(cfg, options)
        rows.append(
            CellPlan(
                cell.id,
                *_transfer(source, cell),
                eval_difficulties=tuple(diffs),
                episodes=episodes * len(diffs),
                max_steps=steps,
            )
        )
    notes = list(source.warnings)
    if assumed and options.protocol == "reference":  # fast plays the same whatever the file says
        notes.append(_assumed_note(assumed))
    return RunPlan(
        "score",
        source.description,
        tuple(rows),
        episodes=sum(r.episodes or 0 for r in rows),
        max_env_steps=sum(r.max_env_steps or 0 for r in rows),
        notes=tuple(notes),
    )


def plan_crossplay(
    source,
    cells: Sequence[Any],
    *,
    scheme: str = "pairs",
    eval_difficulty: str | None = None,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    max_teams: int | None = None,
    seed: int = 0,
) -> RunPlan:
    """What :func:`alem_eval.scoring.crossplay.run_crossplay` would download and play: the
    scheme's teams (:func:`alem_eval.scoring.teams.compositions`), each for ``num_episodes``
    episodes of at most ``max_steps`` steps, with its checks of the options."""
    from alem_eval.scoring.teams import DEFAULT_MAX_TEAMS, check_scheme, compositions

    check_scheme(scheme)

    def teams(cells: Sequence[Any], slots: int) -> list:
        return compositions(cells, scheme, max_teams or DEFAULT_MAX_TEAMS, seed, num_slots=slots)

    return plan_teams(source, cells, "crossplay", teams, eval_difficulty, num_episodes, max_steps)


def plan_scenario(
    source,
    cells: Sequence[Any],
    *,
    focal: str,
    mode: str = "both",
    eval_difficulty: str | None = None,
    num_episodes: int | None = None,
    max_steps: int | None = None,
) -> RunPlan:
    """What :func:`alem_eval.scoring.scenario.run_scenario` would download and play: the
    scenario's teams (:func:`alem_eval.scoring.scenario.scenario_teams`; the focal agent is
    not loaded: its spec names its slots), each for ``num_episodes`` episodes of at most
    ``max_steps`` steps."""
    from alem_eval.scoring.scenario import FOCAL_PREFIX, check_mode, scenario_teams

    modes = check_mode(mode)

    def teams(cells: Sequence[Any], slots: int) -> list:
        ids = [c.id for c in cells]
        return [t.team for t in scenario_teams(ids, modes, FOCAL_PREFIX + focal, slots)]

    return plan_teams(source, cells, "scenario", teams, eval_difficulty, num_episodes, max_steps)


def plan_teams(
    source,
    cells: Sequence[Any],
    command: str,
    build: Callable[[Sequence[Any], int], Sequence[Any]],
    eval_difficulty: str | None,
    num_episodes: int | None,
    max_steps: int | None,
) -> RunPlan:
    """The plan of a way of playing teams: the cells to download and the teams that
    ``build(cells, slots per team)`` draws, each for ``num_episodes`` episodes of at most
    ``max_steps`` steps on the cells' shared difficulty (or ``eval_difficulty``)."""
    from alem_eval.scoring.play import shared_difficulty
    from alem_eval.scoring.teams import PROTOCOL
    from alem_eval.evaluate.settings import FAST_MAX_STEPS, FAST_NUM_EPISODES, validate_request

    cells = list({c.id: c for c in cells}.values())
    if not cells:
        raise UsageError(f"{command} needs at least one cell")
    configs = {c.id: _config(source, c) for c in cells}
    resolved = {cell_id: (None, cfg, None) for cell_id, (cfg, _) in configs.items()}
    eval_difficulty = eval_difficulty or shared_difficulty(cells, resolved)
    validate_request(PROTOCOL, eval_difficulty, num_episodes, max_steps)
    num_episodes = num_episodes or FAST_NUM_EPISODES
    max_steps = max_steps or FAST_MAX_STEPS
    teams = list(dict.fromkeys(build(cells, configs[cells[0].id][0].env.num_agents)))
    notes = list(source.warnings)
    assumed = [cell_id for cell_id, (_, known) in configs.items() if not known]
    if assumed:
        notes.append(_assumed_note(assumed))
    return RunPlan(
        command,
        source.description,
        tuple(CellPlan(c.id, *_transfer(source, c)) for c in cells),
        episodes=len(teams) * num_episodes,
        max_env_steps=len(teams) * num_episodes * max_steps,
        teams=len(teams),
        notes=tuple(notes),
    )


def _transfer(source, cell) -> tuple[int, int, int, int]:
    """(files, bytes, files to download, bytes to download) of a cell."""
    sizes, todo = source.files_to_fetch(cell)
    return len(sizes), sum(sizes.values()), len(todo), sum(sizes[p] for p in todo)


def _config(source, cell) -> tuple[RunConfig, bool]:
    """The cell's config and whether it was read from its ``config.json`` (False: not
    downloaded yet, the trainer defaults for its place in the layout)."""
    from alem_eval.algorithms.config import load_config_file, parse_config_json
    from alem_eval.hub.layout import config_path

    layout = {"algorithm": cell.algorithm, "difficulty": cell.difficulty, "seed": cell.seed}
    cell_dir = source.cached_dir(cell)
    if cell_dir is not None:
        return load_config_file(config_path(cell_dir), **layout), True
    return parse_config_json({}, where=cell.id, **layout), False


def _assumed_note(cell_ids: Sequence[str]) -> str:
    first = ", ".join(cell_ids[:3]) + (
        f" and {len(cell_ids) - 3} more" if len(cell_ids) > 3 else ""
    )
    return (
        f"{len(cell_ids)} cell(s) not downloaded yet ({first}): the trainer defaults stand in "
        "for their config.json until they are"
    )
