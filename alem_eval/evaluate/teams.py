"""Teams: any actor in any agent slot.

A team names, per agent slot, the member driving it; its distinct members are its roles
(:class:`Role`: a network group and the slots it drives). What drives a member is an
:class:`~alem_eval.evaluate.actors.Actor` (a checkpoint's greedy policy, a focal agent):
members are grouped by their actor's ``key`` (a network: ``cfg.network_key``) and teams by
role structure (:class:`TeamClass`), so any mix of algorithms runs in one program with
one trace of the Alem step (:func:`batch_structure`). :func:`team_actions` is one step of
every role of a batch: each role's actor sees all ``P`` agents of its teams (upstream's
batch shape) and its actions are kept for the slots it drives."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError
from alem_eval.evaluate.actors import Actor, RoleInput


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


def init_team_carries(
    actors: Sequence[Actor], classes: Sequence[TeamClass], episodes: int
) -> tuple:
    """Zero recurrent state of every role: per class, per role, ``[size, episodes, ...]``."""
    return tuple(
        tuple(
            jax.tree_util.tree_map(
                lambda x, s=cls.size: jnp.broadcast_to(x, (s, episodes) + x.shape),
                actors[role.group].init(len(role.slots)),
            )
            for role in cls.roles
        )
        for cls in classes
    )


def team_actions(
    actors: Sequence[Actor],
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
    """One step of every team in the batch -> (new carries, actions ``[N, P]`` int32,
    illegal). ``illegal``: None when no actor can choose an illegal action (released
    policies only), else ``([T, G] bool, [T, G] int32)``, per team and network group
    whether its actor chose an illegal action this step and the first one.

    ``raw_obs [N, P, obs_dim]``, ``dones [N, P]``, ``mask [N, P, A]`` (None: all legal),
    laid out class by class, team by team, episode by episode (``N = sum(sizes) x
    episodes``). Each role's actor (:class:`~alem_eval.evaluate.actors.Actor`) sees all
    ``P`` slots of its teams and its actions are kept for the slots it drives (a released
    policy runs on all of them -- the batch shape upstream's policies use, so a team of
    one checkpoint computes exactly its self-play actions). ``step_keys [N, 2]`` and
    ``states`` (the slots' env states) are there for actors that read them; the roles an
    actor leaves ``pending`` (``RoleStep.pending``: a host agent's rows) are handed back
    to it once per step, all together (``Actor.resolve``: one callback per host agent).
    """
    num_agents = raw_obs.shape[1]
    new_carries, actions, start, first_team = [], [], 0, 0
    pending: list[tuple[int, int, tuple[int, ...], Any]] = []  # (group, class, slots, rows)
    shape = (sum(cls.size for cls in classes), len(actors))
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
            if mask_c is None:
                m = jnp.ones(obs.shape[:3] + (num_actions,), bool)
            else:  # members with ACTION_MASKING off see every action as legal
                m = jnp.where(use_mask[c][r][:, None, None, None], mask_c, True)
            inp = RoleInput(obs, done, m, step_keys, states, block, role.slots, c)
            out = actors[role.group].act(params[c][r], carries[c][r], inp)
            acts = jnp.where(np.isin(np.arange(num_agents), role.slots), out.actions, acts)
            role_carries.append(out.carry)
            if out.pending is not None:  # (a host agent's rows): resolved below
                pending.append((role.group, c, role.slots, out.pending))
            if out.illegal is not None:
                if illegal is None:
                    illegal = (jnp.zeros(shape, bool), jnp.zeros(shape, jnp.int32))
                rows = slice(first_team, first_team + cls.size)
                seen = illegal[0][rows, role.group]
                illegal = (
                    illegal[0].at[rows, role.group].set(seen | out.illegal[0]),
                    illegal[1]
                    .at[rows, role.group]
                    .set(jnp.where(seen, illegal[1][rows, role.group], out.illegal[1])),
                )
        new_carries.append(tuple(role_carries))
        actions.append(acts)
        start += size
        first_team += cls.size
    for g in dict.fromkeys(p[0] for p in pending):  # each actor once per step
        mine = [p for p in pending if p[0] == g]
        resolved = actors[g].resolve([p[3] for p in mine])
        for (_, c, slots, _), a in zip(mine, resolved, strict=True):
            actions[c] = jnp.where(np.isin(np.arange(num_agents), slots), a, actions[c])
    joined = jnp.concatenate([a.reshape((-1, num_agents)) for a in actions])
    return tuple(new_carries), joined, illegal


def batch_structure(teams: Sequence[Sequence[int]], actors: Mapping[int, Actor]):
    """Network groups, team classes (role structure) and the batch order of the teams ->
    ``(keys, group_actors, classes, order)``. ``actors[m]``: what drives member ``m``
    (:class:`~alem_eval.evaluate.actors.Actor`); members whose actors share a ``key`` (a
    network, an agent's code) form one group, played by its first member's actor."""
    keys = list(dict.fromkeys(actors[m].key for team in teams for m in team))
    group_of = {m: keys.index(actors[m].key) for team in teams for m in team}
    by_class: dict[tuple[Role, ...], list[int]] = {}
    for i, team in enumerate(teams):
        members, slots = team_roles(team)
        sig = tuple(Role(group_of[m], s) for m, s in zip(members, slots))
        by_class.setdefault(sig, []).append(i)
    classes = tuple(TeamClass(sig, len(idx)) for sig, idx in by_class.items())
    order = [i for idx in by_class.values() for i in idx]
    first = [next(m for m in group_of if group_of[m] == g) for g in range(len(keys))]
    return tuple(keys), [actors[m] for m in first], classes, order


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
