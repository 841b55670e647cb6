"""Running teams with focal agents (:mod:`alem_eval.evaluate.agents`) through the play
core: the agents checked on one real step first, then one :func:`run_teams` call with the
host agents bound, and an agent's fault raised before any team's records are handed on."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.evaluate.agents import (
    FOCAL_SALT,
    AgentGroup,
    _bound,
    _legal,
    check_group,
    make_group,
    raise_failure,
)
from alem_eval.evaluate.rollout import run_teams
from alem_eval.evaluate.settings import check_eval_difficulty, eval_statics


def probe_group(group: AgentGroup, world: Any, difficulty: str, batch: int) -> None:
    """One concrete step of a JAX agent on the first world of the ``fast`` protocol, on
    its first ``batch`` agent slots (with the reset program the rollout uses): an agent
    whose first actions are illegal fails here, before minutes of compiling."""
    import dataclasses

    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.evaluate.programs import world_programs
    from alem_eval.evaluate.settings import FAST_WORLD_SEED

    if group.host:
        return
    reset, _ = world_programs(world)
    env = get_eval_env(dataclasses.replace(world, action_masking=True))
    dyn: Any = env.difficulty_params(difficulty)
    key = jax.random.PRNGKey(FAST_WORLD_SEED)
    obs, state = reset(key, dyn)
    obs, mask = obs[:batch], env.action_mask(state, dyn)[:batch]
    carry = group.init_carry(batch)
    _, actions = jax.jit(group.jax_step)(carry, obs, mask, jax.random.fold_in(key, FOCAL_SALT))
    legal = np.asarray(_legal(actions, mask, jnp))
    if not legal.all():
        bad = int(np.asarray(actions)[np.argmin(legal)])
        raise EvaluationError(f"focal {group.label}: act chose action {bad}, which is not legal")


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
    **kwargs: Any,
):
    """:func:`alem_eval.evaluate.rollout.run_teams` with members driven by agents:
    ``agents[k]`` (an agent, or an :class:`AgentGroup` from :func:`make_group`) drives the
    slots of member ``k``; ``cfgs[k]`` is the env it plays in (e.g. a background
    checkpoint's config) and ``weights[k]`` is ignored. A fault of an agent raises
    :class:`EvaluationError` before any team's records reach ``on_team`` (or the caller)."""
    check_eval_difficulty(kwargs.get("eval_difficulty", ""))
    groups: dict[int, AgentGroup] = {}
    batches: dict[int, list[int]] = {}
    for k, agent in agents.items():
        st = eval_statics(cfgs[k])
        batches[k] = sorted({list(team).count(k) for team in teams if k in team} or {1})
        groups[k] = check_group(make_group(agent), st.obs_dim, st.num_actions, batches[k])
    if not groups:
        raise UsageError("run_agent_teams needs at least one agent")
    first = eval_statics(cfgs[next(iter(groups))])
    unique = list({g.key: g for g in groups.values()}.values())
    for k, g in groups.items():
        probe_group(g, first.world, kwargs["eval_difficulty"], batches[k][0])

    def guarded(i: int, records: list[dict[str, float]]) -> None:
        raise_failure(unique)
        if on_team is not None:
            on_team(i, records)

    with _bound(unique, kwargs.get("eval_difficulty", ""), first.world):
        result = run_teams(cfgs, weights, teams, agents=groups, on_team=guarded, **kwargs)
        raise_failure(unique)
    return result
