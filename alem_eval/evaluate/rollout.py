"""The evaluation calls: teams of checkpoints to per-episode records.

Every agent slot of a team names the checkpoint driving it (:func:`run_teams`); a team of
one checkpoint is its self-play (:func:`run_stack`, :func:`score_stack`). A call checks
its request (settings, env versions, teams, weights against their networks), groups the
teams by world and episode settings, and runs each group in one compiled program
(:func:`~alem_eval.evaluate.group.run_group`); the :class:`StackResult` keeps the input
order.
"""

from __future__ import annotations

import collections
import functools
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Collection, Mapping, Sequence

import jax
import numpy as np

from alem_eval.algorithms.config import RunConfig
from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.evaluate.actors import Actor, released_policy
from alem_eval.evaluate.actors import policy_variables as policy_variables  # (re-export)
from alem_eval.evaluate.group import run_group
from alem_eval.evaluate.machine import Status
from alem_eval.evaluate.records import RecordTo
from alem_eval.evaluate.settings import (
    CHUNK,
    DEFAULT_PROTOCOL,
    check_count,
    check_env_version,
    episode_settings,
    eval_statics,
    reference_key,
    validate_request,
)
from alem_eval.evaluate.teams import check_team
from alem_eval.model.networks import NetworkSpec, build_network


@dataclass(frozen=True)
class RolloutProgress:
    """Where an evaluation call stands (reported after every compiled call)."""

    episodes_done: int
    episodes_total: int
    live_steps: int  # env steps that belonged to an episode so far
    elapsed_s: float  # since the call's first rollout started (compiles included)

    @property
    def steps_per_s(self) -> float:
        return self.live_steps / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class StackResult:
    """Per-team (self-play: per-checkpoint), per-episode results of one evaluation call."""

    records: list[list[dict[str, float]]]  # [team][episode]
    starts: list[np.ndarray]  # [team] -> [episodes] the loop step each episode started at
    protocol: str
    eval_difficulty: str
    chunk: int
    live_steps: int = 0  # env steps that belonged to an episode
    slot_steps: int = 0  # env steps the batch slots ran (live or idle)
    record_error: str | None = None  # why the recording stopped early (run_teams' record)

    @property
    def utilisation(self) -> float:
        """Live env-steps per slot-step: 1.0 when no batch slot ever idled."""
        return self.live_steps / self.slot_steps if self.slot_steps else 0.0


def check_play(
    cfgs: Sequence[RunConfig],
    teams: Sequence[Sequence[int]],
    protocol: str,
    eval_difficulty: str,
    *,
    on_env_mismatch: str = "error",
) -> tuple[list[Any], list[NetworkSpec]]:
    """The checks every way of playing makes before anything is compiled (``run_teams``,
    the render player): the PRNG mode, each checkpoint's env version, each team's world,
    the reference run's difficulties, each network's input width. Returns the eval envs
    and network specs of ``cfgs``."""
    # Both protocols: the PRNG mode draws the worlds (PRNGKey(9999 + i)) and the step keys.
    if jax.config.jax_threefry_partitionable or jax.config.jax_enable_x64:  # type: ignore[attr-defined]
        raise EvaluationError(
            f"protocol {protocol!r} needs jax_threefry_partitionable=False and "
            "jax_enable_x64=False (the PRNG mode and precision the released "
            "numbers were produced with: other worlds and key chains otherwise)"
        )
    from alem_eval.envs.loader import installed_env_version

    installed = installed_env_version()
    for i, cfg in enumerate(cfgs):
        check_env_version(
            cfg, on_mismatch=on_env_mismatch, where=f"checkpoint {i}", installed=installed
        )
    statics = [eval_statics(c) for c in cfgs]
    specs = [build_network(c) for c in cfgs]
    for i, team in enumerate(teams):
        check_team(i, team, cfgs, statics, protocol)
    if protocol == "reference":
        for cfg in cfgs:
            reference_key(cfg, eval_difficulty)  # fail early when the difficulty was not run
    for i, (spec, st) in enumerate(zip(specs, statics, strict=True)):
        if st.input_dim != spec.input_dim:
            raise EvaluationError(
                f"checkpoint {i} ({cfgs[i].algorithm}): the network expects inputs of width "
                f"{spec.input_dim} but the eval env gives {st.input_dim} (HyperMARL needs "
                "APPEND_AGENT_ID=true)"
            )
    return statics, specs


def run_stack(
    cfgs: Sequence[RunConfig],
    weights: Sequence[Any],
    *,
    protocol: str = DEFAULT_PROTOCOL,
    eval_difficulty: str,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    on_env_mismatch: str = "error",
    chunk: int = CHUNK,
    batch: int | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
    record: RecordTo | None = None,
    episode_caps: Sequence[int] | None = None,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    padding: Collection[int] = (),
) -> StackResult:
    """Self-play evaluation of a stack of checkpoints (any algorithms) on ``eval_difficulty``.

    ``cfgs[k]`` describes ``weights[k]`` (a weights tree in the released disk layout, or at
    least its policy part). Each checkpoint drives all agents of its own team; all teams
    that share the world's env configuration run in ONE compiled program (one trace of the
    Alem step, whatever the algorithms). The result keeps the input order;
    ``on_team(k, records)`` gets checkpoint ``k``'s records as soon as its last episode
    ends (see :func:`run_teams`). ``padding``: checkpoints that only fill the stack's
    structure (see :func:`run_teams`).
    """
    teams = [(k,) * (cfg.env.num_agents if cfg is not None else 1) for k, cfg in enumerate(cfgs)]
    return run_teams(
        cfgs,
        weights,
        teams,
        protocol=protocol,
        eval_difficulty=eval_difficulty,
        num_episodes=num_episodes,
        max_steps=max_steps,
        on_env_mismatch=on_env_mismatch,
        chunk=chunk,
        batch=batch,
        on_progress=on_progress,
        record=record,
        episode_caps=episode_caps,
        on_team=on_team,
        padding=padding,
    )


def run_teams(
    cfgs: Sequence[RunConfig],
    weights: Sequence[Any],
    teams: Sequence[Sequence[int]],
    *,
    protocol: str = DEFAULT_PROTOCOL,
    eval_difficulty: str,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    on_env_mismatch: str = "error",
    chunk: int = CHUNK,
    batch: int | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
    record: RecordTo | None = None,
    episode_caps: Sequence[int] | None = None,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    padding: Collection[int] = (),
    agents: Mapping[int, Any] | None = None,
    first_episode: int = 0,
) -> StackResult:
    """Evaluate teams whose agent slots are driven by any of the given checkpoints.

    ``teams[i][s]`` is the index (into ``cfgs``/``weights``) of the checkpoint driving agent
    slot ``s`` of team ``i``; a team of one repeated index is that checkpoint's self-play.
    All members of a team must share the world's env configuration (agents, comm
    channels, reward sharing, difficulty scaling); ``reference`` evaluates self-play teams
    only (it reproduces upstream's evaluation, which has no mixed teams). Returns
    ``records[team][episode]``. With ``record``, every evaluated step of every episode
    streams to ``record.recorder`` as the rollout runs (see :class:`RecordTo`); a recorder
    failure ends the recording, not the evaluation (``StackResult.record_error``).

    ``on_team(i, records)`` is called once per team, with team ``i``'s records, as soon
    as its last episode ends, while other teams may still run (a caller can save a
    finished cell before the whole call ends); they are the records the result holds.

    ``episode_caps[e]`` (benchmarks, tests) truncates episode ``e`` of every team at its
    own step limit, at most the cap: a batch ragged by design, as policies that end
    episodes early would make it.

    ``padding``: indices of teams that only fill the batch structure (copies, so that
    every stack of a selection shares one compiled program). They run, but nothing of
    them is reported: their records and starts are empty, ``on_team`` and the recording
    never see them, and progress counts only the other teams' episodes (``live_steps``
    and ``slot_steps`` still count every step the batch ran).

    ``first_episode`` (``fast``): episode ``e`` of the call is the protocol's episode
    ``first_episode + e`` (world ``PRNGKey(9999 + first_episode + e)`` and its key
    chain); records, starts and the recording count from 0 all the same.

    ``agents``: members driven by another :class:`~alem_eval.evaluate.actors.Actor` than
    their checkpoint's greedy policy (a focal agent's
    :class:`~alem_eval.evaluate.agents.JaxAgent` or
    :class:`~alem_eval.evaluate.host_agents.HostAgent`: run them through
    :func:`alem_eval.evaluate.agent_runs.run_agent_teams`; a released cell's
    :class:`~alem_eval.evaluate.actors.ReleasedPolicy` with its own weights): ``cfgs[k]``
    says the env it plays in, ``weights[k]`` goes to its ``variables`` (None: its own).
    """
    agents = dict(agents or {})
    validate_request(protocol, eval_difficulty, num_episodes, max_steps)
    for actor in agents.values():  # (a host agent without its callback: never a NOOP)
        actor.ready()
    if len(cfgs) != len(weights):
        raise EvaluationError(f"{len(cfgs)} configs but {len(weights)} weight trees")
    if not cfgs or not teams:
        raise EvaluationError("nothing to evaluate: the stack is empty")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise UsageError(f"chunk must be a positive integer, got {chunk!r}")
    check_count("--batch", batch)
    if (
        isinstance(first_episode, bool)
        or not isinstance(first_episode, (int, np.integer))
        or first_episode < 0
        or (first_episode and protocol != "fast")
    ):
        raise UsageError(
            f"first_episode must be an integer >= 0 (protocol 'fast' only), got {first_episode!r}"
        )
    padding = frozenset(padding)
    if not padding <= set(range(len(teams))) or len(padding) == len(teams):
        raise UsageError(
            f"padding {sorted(padding, key=str)} must name some, not all, of the "
            f"{len(teams)} teams (indices from 0)"
        )
    statics, specs = check_play(
        cfgs, teams, protocol, eval_difficulty, on_env_mismatch=on_env_mismatch
    )
    used = sorted({m for team in teams for m in team})
    actors: dict[int, Actor] = {
        i: agents[i] if i in agents else released_policy(cfgs[i], specs[i], f"checkpoint {i}")
        for i in used
    }
    variables = {i: actors[i].variables(weights[i]) for i in used}

    def settings(team):
        return episode_settings(cfgs[team[0]], protocol, num_episodes, max_steps)

    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, team in enumerate(teams):
        seed = (cfgs[team[0]].eval.eval_seed,) if protocol == "reference" else ()
        groups[(statics[team[0]].world, *settings(team), *seed)].append(i)

    records: list[Any] = [None] * len(teams)
    starts: list[Any] = [None] * len(teams)
    live = slot = slot_done = 0
    record_error: str | None = None
    real = {g: [i for i in idx if i not in padding] for g, idx in groups.items()}
    total = sum(len(real[g]) * settings(teams[idx[0]])[0] for g, idx in groups.items())
    clock = time.perf_counter()
    for g, idx in groups.items():
        n_ep, cap = settings(teams[idx[0]])
        caps = _episode_caps(episode_caps, n_ep, cap)
        if not real[g]:  # only padding: nothing to report, nothing to run
            for i in idx:
                records[i], starts[i] = [], np.zeros(0, np.int32)
            continue

        def on_status(st: Status, before=(slot_done, live), size=len(real[g]) * n_ep) -> None:
            if on_progress is not None:
                episodes = before[0] + min(int(st.finished), size)
                steps = before[1] + int(st.live_steps)
                on_progress(RolloutProgress(episodes, total, steps, time.perf_counter() - clock))

        recs, st, slot_steps, live_steps, error = run_group(
            [tuple(teams[i]) for i in idx],
            cfgs,
            actors,
            statics,
            variables,
            protocol,
            eval_difficulty,
            n_ep,
            caps,
            chunk,
            batch,
            on_status,
            record,
            None if on_team is None else functools.partial(_team_in, on_team, idx),
            {j for j, i in enumerate(idx) if i in padding},
            int(first_episode),
        )
        record_error = record_error or error
        for j, i in enumerate(idx):
            records[i], starts[i] = recs[j], st[j]
        live, slot = live + live_steps, slot + slot_steps
        slot_done += len(real[g]) * n_ep
    return StackResult(
        records=records,
        starts=starts,
        protocol=protocol,
        eval_difficulty=eval_difficulty,
        chunk=chunk,
        live_steps=live,
        slot_steps=slot,
        record_error=record_error,
    )


def _team_in(on_team: Callable[[int, Any], None], idx: Sequence[int], j: int, records) -> None:
    """``on_team`` of a group's ``j``-th team, ``idx[j]`` in the caller's order."""
    on_team(idx[j], records)


def _episode_caps(caps: Sequence[int] | None, num_episodes: int, cap: int) -> np.ndarray:
    """``[E]`` step limits: the cap for every episode, or ``caps`` checked against it."""
    if caps is None:
        return np.full(num_episodes, cap, np.int32)
    out = np.asarray(caps)
    if out.shape != (num_episodes,) or not np.issubdtype(out.dtype, np.integer):
        raise UsageError(f"episode_caps must be {num_episodes} integers, got {caps!r}")
    if out.min() < 1 or out.max() > cap:
        raise UsageError(f"episode_caps must lie in [1, {cap}], got {out.min()}..{out.max()}")
    return out.astype(np.int32)


def score_stack(
    cfgs: Sequence[RunConfig],
    weights: Sequence[Any],
    *,
    protocol: str = DEFAULT_PROTOCOL,
    eval_difficulty: str,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    on_env_mismatch: str = "error",
    batch: int | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
) -> list[list[dict[str, float]]]:
    """``[checkpoint][episode]`` records (see :mod:`alem_eval.evaluate.records`); CONTRACTS.md API."""
    return run_stack(
        cfgs,
        weights,
        protocol=protocol,
        eval_difficulty=eval_difficulty,
        num_episodes=num_episodes,
        max_steps=max_steps,
        on_env_mismatch=on_env_mismatch,
        batch=batch,
        on_progress=on_progress,
    ).records
