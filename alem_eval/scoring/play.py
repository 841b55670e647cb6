"""Playing teams: the one pipeline every way of playing teams builds on.

A way of playing (cross-play's schemes, a scenario's focal placements) is a team builder:
it draws :class:`~alem_eval.scoring.teams.Team` s over the selected cells (and, for a
scenario, an agent's label) and hands them to :func:`play_teams`, which does the rest
once for all of them:

1. the worlds: every cell resolved and checked to play in one env (:func:`resolve_worlds`);
2. the keys: each team's :class:`~alem_eval.analysis.result_keys.ResultKey`, with its
   composition (``team``) and the provenance of every member (``team_hash``);
3. read back: teams the results store holds under their key are not played again;
4. play and hand out: the one orchestration (:func:`alem_eval.scoring.orchestration.
   play_matches`, also ``score``'s) loads the cells the other teams use, plays every team
   in ONE call of the play core (:func:`alem_eval.evaluate.rollout.run_teams`, or
   :func:`~alem_eval.evaluate.agent_runs.run_agent_teams` when an agent drives some
   slots) and hands what it makes to its sinks (``orchestration.Sink``): the results
   store gets each team's episodes as soon as its last episode ends (a run killed
   part-way keeps every team that finished; an agent's fault stores nothing), the
   recording every step when asked, progress, and any sink the caller adds.

Teams live in the one results store (:mod:`alem_eval.analysis.results`), beside the cells'
own scores: ``<anchor cell>/<eval_difficulty>/fast-team-<digest>.parquet``, rows with a
``team`` column. ``report``, ``leaderboard`` and ``export`` never read them
(:meth:`~alem_eval.analysis.results.ResultsStore.entries` leaves them out unless asked).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alem_eval.analysis.metrics import BASE, COORD, TOTAL
from alem_eval.core.errors import AlemEvalError, ConfigError, EvaluationError, UsageError
from alem_eval.scoring.teams import PROTOCOL, Team

# The means a team's row reports (Total%, Base%, Coord%), besides return and length.
TEAM_METRICS: tuple[str, ...] = (TOTAL, BASE, COORD)


# ----------------------------------------------------------------------------------------
# Worlds: where the teams play
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Worlds:
    """Where a way of playing over ``cells`` plays: each cell resolved (its directory,
    config, manifest entry), its eval env, the eval difficulty and the episode settings."""

    resolved: dict[str, Any]
    statics: dict[str, Any]
    eval_difficulty: str
    num_episodes: int
    max_steps: int

    @property
    def num_slots(self) -> int:
        """Agent slots of a team (every cell plays in the same env)."""
        return next(iter(self.statics.values())).num_agents

    @property
    def settings(self) -> dict[str, Any]:
        return {
            "eval_difficulty": self.eval_difficulty,
            "num_episodes": self.num_episodes,
            "max_steps": self.max_steps,
        }


def resolve_worlds(
    source,
    cells: Sequence[Any],
    eval_difficulty: str | None,
    num_episodes: int | None,
    max_steps: int | None,
    on_env_mismatch: str,
) -> Worlds:
    """Resolve ``cells`` (distinct) and check that they play in one world with these
    settings (the cells' shared difficulty unless ``eval_difficulty``; the fast protocol's
    episodes and cap unless given): one-line errors naming the cell otherwise."""
    from alem_eval.evaluate.settings import (
        FAST_MAX_STEPS,
        FAST_NUM_EPISODES,
        check_env_version,
        eval_statics,
        validate_request,
    )

    resolved = {c.id: _resolve(source, c) for c in cells}
    eval_difficulty = eval_difficulty or shared_difficulty(cells, resolved)
    validate_request(PROTOCOL, eval_difficulty, num_episodes, max_steps)
    for c in cells:
        check_env_version(resolved[c.id][1], on_mismatch=on_env_mismatch, where=c.id)
    statics = {c.id: eval_statics(resolved[c.id][1]) for c in cells}
    _check_same_world(cells, statics)
    return Worlds(
        resolved,
        statics,
        eval_difficulty,
        num_episodes or FAST_NUM_EPISODES,
        max_steps or FAST_MAX_STEPS,
    )


def _resolve(source, cell) -> tuple[Path, Any, Any]:
    """``(cell_dir, cfg, spec)`` of a cell; errors name the cell."""
    from alem_eval.model.loader import resolve_cell

    cell_dir = source.local_dir(cell)
    try:
        cfg, spec = resolve_cell(
            cell_dir, algorithm=cell.algorithm, difficulty=cell.difficulty, seed=cell.seed
        )
    except AlemEvalError as exc:
        if cell.id in str(exc):
            raise
        raise ConfigError(f"{cell.id}: {exc}") from exc
    return cell_dir, cfg, spec


def shared_difficulty(cells, resolved) -> str:
    found = {c.id: resolved[c.id][1].env.training_difficulty for c in cells}
    names = sorted(set(found.values()))
    if len(names) > 1:
        raise UsageError(
            f"the selected cells were trained on different difficulties "
            f"({', '.join(names)}); pass --eval-difficulty to play them together on one "
            "difficulty's worlds, or --difficulty to keep the cells of one"
        )
    return names[0]


_WORLD_FIELDS = (
    "env_name",
    "num_agents",
    "num_comm_channels",
    "shared_reward",
    "scale_base_difficulty",
)


def _check_same_world(cells, statics) -> None:
    first = cells[0]
    for c in cells[1:]:
        a, b = statics[first.id].world, statics[c.id].world
        if a != b:
            fields = [f for f in _WORLD_FIELDS if getattr(a, f) != getattr(b, f)]
            detail = ", ".join(f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in fields)
            raise EvaluationError(
                f"{first.id} and {c.id} need different env configurations "
                f"({detail}); they cannot play in one team"
            )


# ----------------------------------------------------------------------------------------
# Keys: a team's provenance
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CellKey:
    """What identifies a member's play: its id (a cell id, or an agent's label) and the
    provenance of its weights and config (an agent: its identity, no config)."""

    cell: str
    checkpoint_hash: str
    config_hash: str
    env_version: str | None


def cell_key(cell, cell_dir: Path, cfg) -> CellKey:
    """The :class:`CellKey` of a resolved cell (its checkpoint hashed, memoised)."""
    from alem_eval.model.checkpoint import checkpoint_hash
    from alem_eval.model.loader import cell_checkpoint_dir

    return CellKey(
        cell.id, checkpoint_hash(cell_checkpoint_dir(cell_dir)), cfg.config_hash, cfg.env_version
    )


def team_hash(
    team: Team,
    members: Mapping[str, CellKey],
    *,
    eval_difficulty: str,
    num_episodes: int,
    max_steps: int,
) -> str:
    """16-hex-digit digest of everything that decides a team's records (the ``team_key``
    of its rows in ``crossplay`` and ``scenario`` outputs)."""
    doc = {
        "slots": [
            [m.cell, m.checkpoint_hash, m.config_hash, m.env_version]
            for m in (members[c] for c in team.slots)
        ],
        "eval_difficulty": eval_difficulty,
        "protocol": PROTOCOL,
        "num_episodes": num_episodes,
        "max_steps": max_steps,
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


def team_result_key(team: Team, members: Mapping[str, CellKey], cell_ids, **settings: Any):
    """The results-store key of ``team``: anchored at its anchor cell (the first cell in
    slot order when an agent is the anchor), composition and members' digest included."""
    from alem_eval.analysis.result_keys import ResultKey

    cells = [c for c in team.slots if c in cell_ids]
    if not cells:
        raise UsageError(f"team {team.label()} has no released cell: nothing to anchor it")
    anchor = members[team.anchor if team.anchor in cell_ids else cells[0]]
    return ResultKey(
        cell=anchor.cell,
        eval_difficulty=settings["eval_difficulty"],
        protocol=PROTOCOL,
        checkpoint_hash=anchor.checkpoint_hash,
        config_hash=anchor.config_hash,
        env_version=anchor.env_version,
        num_episodes=settings["num_episodes"],
        max_steps=settings["max_steps"],
        team=team.slots,
        team_hash=team_hash(team, members, **settings),
    )


# ----------------------------------------------------------------------------------------
# Playing
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TeamScore:
    """One team's per-episode records (every ``run_teams`` key verbatim)."""

    team: Team
    key: str  # the team's digest (ResultKey.team_hash)
    episodes: tuple[Mapping[str, float], ...]
    reused: bool
    result_key: Any = None  # its ResultKey: where the store keeps it (the outputs' digests)

    def values(self, metric: str) -> np.ndarray:
        """``(episodes,)``; NaN where an episode lacks the metric."""
        return np.array([ep.get(metric, np.nan) for ep in self.episodes], dtype=float)

    def mean(self, metric: str) -> float | None:
        v = self.values(metric)
        v = v[np.isfinite(v)]
        return float(v.mean()) if len(v) else None

    def row(self) -> dict[str, Any]:
        """Flat per-team row: slots, shape, anchor, reused, episodes, metric means."""
        return {
            "team_key": self.key,
            **{f"slot{s}": c for s, c in enumerate(self.team.slots)},
            "shape": self.team.shape,
            "anchor": self.team.anchor,
            "reused": self.reused,
            "episodes": len(self.episodes),
            **{k: self.mean(k) for k in (*TEAM_METRICS, "episode_return", "episode_length")},
        }


@dataclass(frozen=True)
class TeamPlay:
    """What :func:`play_teams` returns: every team's score (in the order given), the env
    steps the played teams ran and the seconds their play took (0 when all were read back)."""

    scores: dict[Team, TeamScore]
    live_steps: int
    seconds: float

    @property
    def steps_per_s(self) -> float | None:
        return self.live_steps / self.seconds if self.seconds > 0 else None


def play_teams(
    source,
    cells: Sequence[Any],
    teams: Sequence[Team],
    worlds: Worlds,
    *,
    agents: Mapping[str, Any] | None = None,
    store=None,
    what: str = "",
    fresh: bool = False,
    batch: int | None = None,
    record_dir: Path | None = None,
    sinks: Sequence[Any] = (),
    on_progress: Callable[[str], None] | None = None,
    on_episodes: Callable[[Any], None] | None = None,
) -> TeamPlay:
    """Play ``teams`` (slots naming ``cells`` by id, or ``agents`` by label: an
    :class:`~alem_eval.evaluate.actors.Actor` each) on ``worlds``; see the module
    docstring. ``store`` (a :class:`~alem_eval.analysis.results.ResultsStore`): teams it
    holds under their key are read back (``fresh``: none is, every team plays again), the
    others written as each one ends. ``batch``: the evaluator's batch slots (None: its
    default layout). ``record_dir``: every played step recorded there, as ``score
    --record`` records (:mod:`alem_eval.datasets.recorder`; a team's episodes under
    ``mixed/<digest>`` of its slots). ``sinks``: more
    :class:`~alem_eval.scoring.orchestration.Sink` s, handed each team's episodes as they
    end (beside the results store, the recording and progress). ``on_progress(message)``: a line for the teams to
    play (``what`` describes them) and one when they are played (however many: 64 teams
    are two lines, the episode bar shows the rest); ``on_episodes(RolloutProgress)`` as the
    rollout's episodes end. ``source`` is kept for the builders' signature (the
    cells are ``worlds.resolved``)."""
    from alem_eval.scoring.orchestration import Match, Member, play_matches

    note = on_progress or (lambda _m: None)
    agents = dict(agents or {})
    teams = list(dict.fromkeys(teams))
    members = {c.id: cell_key(c, *worlds.resolved[c.id][:2]) for c in cells}
    members.update({a: CellKey(a, g.identity, "", None) for a, g in agents.items()})
    keys = {t: team_result_key(t, members, worlds.resolved, **worlds.settings) for t in teams}
    matches = [
        Match(
            t,
            keys[t],
            producer={"team_hash": keys[t].team_hash, "max_steps": worlds.max_steps},
            **worlds.settings,
        )
        for t in teams
    ]

    def read_back(reused: int, todo: int) -> None:
        note(
            f"{len(teams)} teams on {worlds.eval_difficulty}{what}: {reused} read back "
            f"from the results store, {todo} to score"
        )

    outcome = play_matches(
        {c.id: Member(c, *worlds.resolved[c.id]) for c in cells},
        matches,
        protocol=PROTOCOL,
        agents=agents,
        store=store,
        fresh=fresh,
        batch=batch,
        record_dir=record_dir,
        sinks=sinks,
        on_read_back=read_back,
        on_episodes=on_episodes,
        on_note=note,
    )
    played = len(matches) - len(outcome.reused)
    if played:
        where = f"; stored in {store.root}" if store is not None else ""
        note(f"scored {played} teams in {outcome.seconds:.0f}s{where}")
    scores = {
        m.team: TeamScore(
            m.team,
            keys[m.team].team_hash,
            outcome.episodes[m],
            reused=m in outcome.reused,
            result_key=keys[m.team],
        )
        for m in matches
    }
    return TeamPlay(scores, outcome.live_steps, outcome.seconds)
