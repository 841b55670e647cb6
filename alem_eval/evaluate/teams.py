"""Teams: any checkpoint in any agent slot.

A team names, per agent slot, the checkpoint driving it; its distinct members are its
roles (:class:`Role`: a network group and the slots it drives). Checkpoints are grouped by
network (``cfg.network_key``) and teams by role structure (:class:`TeamClass`), so any mix
of algorithms runs in one program with one trace of the Alem step
(:func:`batch_structure`). :func:`team_actions` is one greedy step of every role of a
batch: each role's policy runs on all ``P`` agents of its teams (upstream's batch shape)
and its actions are kept for the slots it drives.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError
from alem_eval.model.policies import GreedyPolicy


@dataclass(frozen=True)
class Role:
    """One policy of a team: the network group it belongs to and the agent slots it drives."""

    group: int  # index into the program's network groups
    slots: tuple[int, ...]


@dataclass(frozen=True)
class TeamClass:
    """Teams with the same role structure (which group drives which slots), batched together."""

    roles: tuple[Role, ...]
    size: int  # teams of this class in the batch


def team_roles(team: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """``(members, slots)``: the team's distinct members in order of first appearance and
    the agent slots each drives. ``(4, 4, 7)`` -> ``((4, 7), ((0, 1), (2,)))``."""
    members = tuple(dict.fromkeys(team))
    return members, tuple(tuple(s for s, m in enumerate(team) if m == x) for x in members)


def is_agent(policy: Any) -> bool:
    """Whether a role's policy is a focal agent's group (:class:`~alem_eval.evaluate.agents.
    AgentGroup`: acts on the slots it drives, with its own keys) rather than a checkpoint's
    greedy policy."""
    from alem_eval.evaluate.agents import AgentGroup

    return isinstance(policy, AgentGroup)


def init_team_carries(
    policies: Sequence[GreedyPolicy], classes: Sequence[TeamClass], episodes: int
) -> tuple:
    """Zero recurrent state of every role: per class, per role, ``[size, episodes, ...]``."""
    return tuple(
        tuple(
            jax.tree_util.tree_map(
                lambda x, s=cls.size: jnp.broadcast_to(x, (s, episodes) + x.shape),
                # focal agents (evaluate.agents): a carry for the slots they drive
                cast(Any, policies[role.group]).init_carry(len(role.slots))
                if is_agent(policies[role.group])
                else policies[role.group].init_carry(),
            )
            for role in cls.roles
        )
        for cls in classes
    )


def team_actions(
    policies: Sequence[GreedyPolicy],
    classes: Sequence[TeamClass],
    params: Any,
    use_mask: Any,
    carries: Any,
    raw_obs: jax.Array,
    dones: jax.Array,
    mask: jax.Array | None,
    *,
    episodes: int,
    num_actions: int,
    step_keys: jax.Array | None = None,
    states: Any = None,
) -> tuple[Any, jax.Array, tuple[jax.Array, jax.Array] | None]:
    """One greedy step of every team in the batch -> (new carries, actions ``[N, P]`` int32,
    illegal). ``illegal``: None without focal JAX agents, else ``([T, G] bool, [T, G]
    int32)``, per team and network group whether a focal chose an illegal action this step
    and the first one (:func:`~alem_eval.evaluate.agents.illegal_actions`).

    ``raw_obs [N, P, obs_dim]``, ``dones [N, P]``, ``mask [N, P, A]`` (None: all legal),
    laid out class by class, team by team, episode by episode (``N = sum(sizes) x
    episodes``). Each role's policy runs on all ``P`` slots of its teams -- the batch shape
    upstream's policies use, so a team of one checkpoint computes exactly its self-play
    actions -- and its actions are kept for the slots it drives.

    Focal agents (:mod:`alem_eval.evaluate.agents`, roles whose policy :func:`is_agent`)
    act on the slots they drive only, with a key derived from ``step_keys [N, 2]`` (the
    slots' step keys, not consumed); host agents' roles are gathered into one callback
    per agent and step (``states``: the slots' env states, for agents that read them).
    """
    from alem_eval.evaluate import agents as focal  # focal agents' roles (evaluate.agents)
    from alem_eval.evaluate import host_agents

    num_agents = raw_obs.shape[1]
    new_carries, actions, start, first_team = [], [], 0, 0
    host_roles: list[focal.HostRole] = []
    shape = (sum(cls.size for cls in classes), len(policies))
    illegal: tuple[jax.Array, jax.Array] | None = None
    for c, cls in enumerate(classes):
        size = cls.size * episodes
        lo = start

        def block(x, lo=lo, cls=cls, size=size):
            return x[lo : lo + size].reshape((cls.size, episodes) + x.shape[1:])

        obs, done = block(raw_obs), block(dones)
        mask_c = block(mask) if mask is not None else None
        acts = jnp.zeros((cls.size, episodes, num_agents), jnp.int32)
        role_carries = []
        for r, role in enumerate(cls.roles):
            policy = policies[role.group]
            if mask_c is None:
                m = jnp.ones(obs.shape[:3] + (num_actions,), bool)
            else:  # members with ACTION_MASKING off see every action as legal
                m = jnp.where(use_mask[c][r][:, None, None, None], mask_c, True)

            def per_team(p, cr, o, d, mm, policy=policy):
                def one(cr1, o1, d1, m1):
                    return policy.act(p, cr1, policy.policy_input(o1), d1, m1)

                return jax.vmap(one)(cr, o, d, mm)

            if is_agent(policy):  # a focal agent (evaluate.agents)
                cr, a, bad = focal.role_actions(
                    policy, params[c][r], carries[c][r], obs, m, step_keys, states, block, role, c
                )
                if a is None:  # a host agent: its actions come from the callback below
                    host_roles.append(cr)
                    role_carries.append(cr.new_carry)
                    continue
                if illegal is None:
                    illegal = (jnp.zeros(shape, bool), jnp.zeros(shape, jnp.int32))
                rows = slice(first_team, first_team + cls.size)
                seen = illegal[0][rows, role.group]
                illegal = (
                    illegal[0].at[rows, role.group].set(seen | bad[0]),
                    illegal[1]
                    .at[rows, role.group]
                    .set(jnp.where(seen, illegal[1][rows, role.group], bad[1])),
                )
            else:
                cr, a = jax.vmap(per_team)(params[c][r], carries[c][r], obs, done, m)
            acts = jnp.where(np.isin(np.arange(num_agents), role.slots), a, acts)
            role_carries.append(cr)
        new_carries.append(tuple(role_carries))
        actions.append(acts)
        start += size
        first_team += cls.size
    for hr, a in zip(host_roles, host_agents.host_actions(host_roles), strict=True):
        on = np.isin(np.arange(num_agents), hr.role.slots)
        actions[hr.cls] = jnp.where(on, a, actions[hr.cls])
    joined = jnp.concatenate([a.reshape((-1, num_agents)) for a in actions])
    return tuple(new_carries), joined, illegal


def batch_structure(teams, cfgs, specs, agents: Mapping[int, Any] | None = None):
    """Network groups, team classes (role structure) and the batch order of the teams.
    ``agents``: members driven by a focal agent (:mod:`alem_eval.evaluate.agents`): their
    group is the agent's adapter, keyed by its ``key`` instead of a network."""
    agents = agents or {}

    def net(m):
        return agents[m].key if m in agents else cfgs[m].network_key

    keys = list(dict.fromkeys(net(m) for team in teams for m in team))
    group_of = {m: keys.index(net(m)) for team in teams for m in team}
    by_class: dict[tuple[Role, ...], list[int]] = {}
    for i, team in enumerate(teams):
        members, slots = team_roles(team)
        sig = tuple(Role(group_of[m], s) for m, s in zip(members, slots))
        by_class.setdefault(sig, []).append(i)
    classes = tuple(TeamClass(sig, len(idx)) for sig, idx in by_class.items())
    order = [i for idx in by_class.values() for i in idx]
    first = [next(m for m in group_of if group_of[m] == g) for g in range(len(keys))]
    group_specs = [agents[m] if m in agents else specs[m] for m in first]
    return tuple(keys), group_specs, classes, order


def check_team(i: int, team: Sequence[int], cfgs, statics, protocol: str) -> None:
    if not team or any(
        isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 0 <= m < len(cfgs)
        for m in team
    ):
        raise EvaluationError(
            f"team {i}: {list(team)!r} names a checkpoint that is not in "
            f"the stack (indices 0..{len(cfgs) - 1})"
        )
    first = statics[team[0]]
    if len(team) != first.num_agents:
        raise EvaluationError(
            f"team {i}: {len(team)} slots but the env has {first.num_agents} agents"
        )
    for m in team[1:]:
        if statics[m].world != first.world:
            raise EvaluationError(
                f"team {i}: checkpoints {team[0]} and {m} need different env configurations "
                f"({_world_diff(first.world, statics[m].world)}); they cannot play together"
            )
    if protocol == "reference" and len(set(team)) > 1:
        raise EvaluationError(
            f"team {i}: protocol 'reference' reproduces upstream's "
            "self-play evaluation; score mixed teams with protocol 'fast'"
        )


def _world_diff(a, b) -> str:
    fields = [f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)]
    return ", ".join(f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in fields)
