"""Running teams with focal agents (:mod:`alem_eval.evaluate.agents`) through the play
core: every actor checked (``Actor.checked``) and probed on one real step first
(``Actor.probe``: JAX and host agents alike; a released policy has nothing to probe), then
one :func:`run_teams` call with the host agents bound, stopped by an agent's fault after
the compiled call in which it came (no team that ends later reaches the caller)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax

from alem_eval.core.errors import UsageError
from alem_eval.evaluate.actors import Actor, FirstWorld
from alem_eval.evaluate.agents import make_group
from alem_eval.evaluate.host_agents import bind_host_agents, raise_failure
from alem_eval.evaluate.rollout import run_teams
from alem_eval.evaluate.settings import (
    DEFAULT_PROTOCOL,
    check_eval_difficulty,
    episode_settings,
    eval_statics,
)


@functools.lru_cache(maxsize=4)
def _first_world(world: Any, difficulty: str, max_steps: int | None) -> FirstWorld:
    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.evaluate.settings import FAST_WORLD_SEED
    from alem_eval.evaluate.worlds import fixed_worlds

    env = get_eval_env(dataclasses.replace(world, action_masking=True))
    dyn: Any = env.difficulty_params(difficulty)
    key = jax.random.PRNGKey(FAST_WORLD_SEED)
    # the rollout's first world, as data (evaluate.worlds): no reset program compiles here
    obs, state = jax.tree_util.tree_map(lambda x: x[0], fixed_worlds(world, dyn, [key]))
    return FirstWorld(obs, env.action_mask(state, dyn), key, state, difficulty, world, max_steps)


def probe_group(
    group: Actor, world: Any, difficulty: str, batch: int, max_steps: int | None = None
) -> None:
    """One concrete step of an actor on the first world of the ``fast`` protocol, on its
    first ``batch`` agent slots (``Actor.probe``; the world is made once, on the first
    probe that asks for it): a JAX agent whose first actions are illegal or whose traced
    values escape ``act``, a host agent with any fault, fails here, in seconds, before
    minutes of compiling. (A host agent's ``act`` is called once more than the run calls
    it.)"""
    group.probe(functools.partial(_first_world, world, difficulty, max_steps), batch)


# ----------------------------------------------------------------------------------------
# Running teams with agents
# ----------------------------------------------------------------------------------------
def run_agent_teams(
    cfgs: Sequence[Any],
    weights: Sequence[Any],
    teams: Sequence[Sequence[int]],
    agents: Mapping[int, Any],
    *,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    on_progress: Callable[[Any], None] | None = None,
    on_note: Callable[[str], None] | None = None,
    **kwargs: Any,
):
    """:func:`alem_eval.evaluate.rollout.run_teams` with members driven by agents:
    ``agents[k]`` (an agent object, or any :class:`~alem_eval.evaluate.actors.Actor`: an
    agent's from :func:`~alem_eval.evaluate.agents.make_group`, a released cell's policy) drives the
    slots of member ``k``; ``cfgs[k]`` is the env it plays in (e.g. a background
    checkpoint's config) and ``weights[k]`` is ignored. A fault of an agent raises
    :class:`EvaluationError` after the compiled call in which it came: the teams whose
    records reached ``on_team`` in earlier calls never saw it; no other team's records
    reach ``on_team`` (or the caller). ``on_note(line)``: a line worth telling (host
    agents on one of several devices)."""
    check_eval_difficulty(kwargs.get("eval_difficulty", ""))
    groups: dict[int, Any] = {}  # evaluate.actors.Actor
    batches: dict[int, list[int]] = {}
    hosts = 0
    for k, agent in agents.items():
        st = eval_statics(cfgs[k])
        batches[k] = sorted({list(team).count(k) for team in teams if k in team} or {1})
        group = make_group(agent)
        if group.host:  # each host agent its own callback
            group, hosts = dataclasses.replace(group, host_slot=hosts), hosts + 1
        groups[k] = group.checked(st.obs_dim, st.num_actions, batches[k])
    if not groups:
        raise UsageError("run_agent_teams needs at least one agent")
    first = eval_statics(cfgs[next(iter(groups))])
    unique = list({g.key: g for g in groups.values()}.values())
    protocol = kwargs.get("protocol", DEFAULT_PROTOCOL)  # the cap in force, as run_teams'
    _, cap = episode_settings(cfgs[teams[0][0]], protocol, None, kwargs.get("max_steps"))
    for k, g in groups.items():
        probe_group(g, first.world, kwargs["eval_difficulty"], batches[k][0], cap)
    if hosts and jax.local_device_count() > 1 and on_note is not None:
        on_note(
            f"host agents play on one of the {jax.local_device_count()} devices (one "
            "callback per step holds all of an agent's rows)"
        )

    def guarded(i: int, records: list[dict[str, float]]) -> None:
        raise_failure(unique)
        if on_team is not None:
            on_team(i, records)

    def progress(p: Any) -> None:  # after every compiled call: stop at a fault
        raise_failure(unique)
        if on_progress is not None:
            on_progress(p)

    with bind_host_agents(unique, kwargs.get("eval_difficulty", ""), first.world, cap):
        result = run_teams(
            cfgs, weights, teams, agents=groups, on_team=guarded, on_progress=progress, **kwargs
        )
        raise_failure(unique)
    return result
