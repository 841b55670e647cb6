"""Training with frozen partners: the partners' greedy policies inside a training program.

``alem-eval train CELL --partners SELECTOR`` trains CELL's focal policy in ``focal_slots``
(1 or 2) of the 3 agent slots while released checkpoints (the partners) play the other
slots with their greedy evaluation policies (:func:`alem_eval.model.policies.make_policy`,
the evaluator's and ``load_policy``'s). What this module holds:

* :func:`load_partners`: a selection of a source's cells (``split=``: one part of
  :mod:`alem_eval.hub.splits`) -> :class:`Partners`: verified (``verify``'s check, every
  partner), checked against the focal's env configuration (agents, comm channels, action
  masking, env name), loaded and grouped by network shape (``cfg.network_key``): the
  prepared weights of a group are stacked, so any mix of algorithms acts in one program.
  Each partner is recorded with its checkpoint hash (:class:`PartnerRecord`, written to
  the trained cell's ``config.json`` under ``"partners"``).
* The pure functions the trainers call inside their compiled rollout:
  :meth:`Partners.init_team` / :meth:`Partners.redraw` (which partner plays, and which
  slots are the focal's, per env: drawn uniformly at the start and again wherever an
  episode ended) and :meth:`Partners.act` (the partners' actions, ``[E, A]``).

How partners act: one partner checkpoint is drawn per env and episode and drives every
non-focal slot of that env; the focal slots are a uniformly drawn ``focal_slots``-subset
of the slots, drawn with it. Every partner's policy runs on all ``A`` slots of every env
(the batch shape the evaluator gives a role, so a partner computes exactly its self-play
actions), each with its own recurrent carry, reset by the env's done flags; the drawn
partner's actions are kept for the non-focal slots. The cost per env step is one greedy
forward pass per partner checkpoint. The partners' weights are arguments of the compiled
update, never in the optimiser state and never differentiated.

What enters the focal's loss: only its own slots (:func:`focal_weight`: the trainers'
Transition carries the focal mask, and every mean of the PPO loss runs over the masked
elements only, :func:`alem_eval.trainers.common.weighted_mean`). GAE runs per slot and is
cut at episode ends, so a slot's advantages never mix focal and partner steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.registry import algorithm_names, get_algorithm
from alem_eval.core.errors import CheckpointError, ConfigError, UsageError

FOCAL_SLOT_CHOICES = (1, 2)
# The env settings partners must share with the focal (EnvConfig fields).
SHARED_ENV_FIELDS = ("env_name", "num_agents", "num_comm_channels", "action_masking")


# ========================================================================================
# 1. What the trained cell records
# ========================================================================================
@dataclass(frozen=True)
class PartnerRecord:
    """The partners of a run, as its ``config.json`` records them (and its resume identity)."""

    cells: tuple[str, ...]  # partner cell ids, in the program's member order
    checkpoint_hashes: tuple[str, ...]  # SHA-256 of each partner's checkpoint directory
    focal_slots: int
    split: str | None = None
    selectors: tuple[str, ...] = ()
    source: str | None = None
    splits: tuple[str, str] | None = None  # (name, digest) of the split file used

    def as_json(self) -> dict[str, Any]:
        return {
            "cells": list(self.cells),
            "checkpoint_hashes": dict(zip(self.cells, self.checkpoint_hashes, strict=True)),
            "split": self.split,
            "splits": None
            if self.splits is None
            else {"name": self.splits[0], "digest": self.splits[1]},
            "focal_slots": self.focal_slots,
            "selectors": list(self.selectors),
            "source": self.source,
            "draw": "one partner per env and episode, uniformly; focal slots drawn with it",
        }

    def identity(self) -> dict[str, Any]:
        """What the trained state depends on (the resume identity): the partners' weights
        and the focal slots (not where they were read from)."""
        return {
            "partners": list(zip(self.cells, self.checkpoint_hashes, strict=True)),
            "focal_slots": self.focal_slots,
        }


class Team(NamedTuple):
    """Per env (leading axis E): who plays with the focal this episode."""

    member: jax.Array  # [E] int32: the partner checkpoint (index into Partners.members)
    focal: jax.Array  # [E, A] bool: the focal's slots
    # per network group: every member's carry, [E, M_g, ...] (env axis first, as every array
    # of the trainers' Envs: it is the axis sharded over devices)
    carries: tuple


# ========================================================================================
# 2. Partners in a program
# ========================================================================================
@dataclass(frozen=True, eq=False)
class Partners:
    """Loaded partners grouped by network shape (see the module docstring).

    ``policies[g]``: group ``g``'s greedy policy; ``params[g]``: its members' prepared
    weights stacked on a leading axis (host arrays; the compiled update takes them as an
    argument); ``members``: the cell ids in group order (member ``m`` of the program).
    """

    policies: tuple[Any, ...]  # alem_eval.model.policies.GreedyPolicy per group
    params: tuple[Any, ...] = field(repr=False)
    group_sizes: tuple[int, ...]
    record: PartnerRecord
    num_agents: int

    @property
    def members(self) -> tuple[str, ...]:
        return self.record.cells

    @property
    def focal_slots(self) -> int:
        return self.record.focal_slots

    @property
    def cache_key(self) -> tuple:
        """What a compiled program depends on beyond the focal's config (shapes and slots;
        the weights are arguments, but a Trainer holds them: the hashes enter too)."""
        nets = tuple(p.spec.algorithm for p in self.policies)
        return (nets, self.group_sizes, self.record.checkpoint_hashes, self.focal_slots)

    def draw(self, key: jax.Array, num_envs: int) -> tuple[jax.Array, jax.Array]:
        """A fresh ``(member [E], focal [E, A])``: a uniform partner and a uniform
        ``focal_slots``-subset of the slots per env."""
        k_member, k_slots = jax.random.split(key)
        member = jax.random.randint(k_member, (num_envs,), 0, len(self.members))
        rank = jnp.argsort(
            jnp.argsort(jax.random.uniform(k_slots, (num_envs, self.num_agents)), axis=-1),
            axis=-1,
        )
        return member.astype(jnp.int32), rank < self.focal_slots

    def init_team(self, key: jax.Array, num_envs: int) -> Team:
        member, focal = self.draw(key, num_envs)
        carries = []
        for policy, size in zip(self.policies, self.group_sizes, strict=True):
            one = policy.init_carry()
            carries.append(
                jax.tree_util.tree_map(
                    lambda x, s=size: jnp.broadcast_to(x, (num_envs, s) + x.shape), one
                )
            )
        return Team(member, focal, tuple(carries))

    def redraw(self, key: jax.Array, team: Team, done: jax.Array) -> Team:
        """A new partner and focal slots where the episode ended (``done [E]``); the
        carries reset themselves from the env's done flags at the next step."""
        member, focal = self.draw(key, done.shape[0])
        return team._replace(
            member=jnp.where(done, member, team.member),
            focal=jnp.where(done[:, None], focal, team.focal),
        )

    def act(self, params, team: Team, raw_obs, dones, mask) -> tuple[Team, jax.Array]:
        """The partners' greedy actions ``[E, A]`` int32 (the drawn partner's, per env).

        ``params``: :attr:`params` (as the program's argument); ``raw_obs [E, A, obs_dim]``
        (raw, as the env gives them: each policy appends its own agent id), ``dones [E, A]``
        (the previous step's done flags: reset the carries), ``mask [E, A, num_actions]``.
        """
        new, acts = [], []
        for policy, p_g, c_g in zip(self.policies, params, team.carries, strict=True):

            def member_over_envs(p, c, policy=policy):
                def one_env(c1, o1, d1, m1):
                    return policy.act(p, c1, policy.policy_input(o1), d1, m1)

                return jax.vmap(one_env)(c, raw_obs, dones, mask)

            # carries [E, M_g, ...] in and out; actions a: [M_g, E, A]
            c2, a = jax.vmap(member_over_envs, in_axes=(0, 1), out_axes=(1, 0))(p_g, c_g)
            new.append(c2)
            acts.append(a)
        every = jnp.concatenate(acts, axis=0)  # [M, E, A], member order
        chosen = every[team.member, jnp.arange(team.member.shape[0])]
        return team._replace(carries=tuple(new)), chosen


def focal_weight(team: Team | None):
    """The loss weight of every actor (``[E * A]`` bool, env-major like the trainers'
    actors): True on the focal's slots; None without partners (every slot counts)."""
    return None if team is None else team.focal.reshape(-1)


def mix_actions(team: Team, focal_actions, partner_actions):
    """``[E, A]``: the focal's actions on its slots, the partner's elsewhere."""
    return jnp.where(team.focal, focal_actions, partner_actions)


# ========================================================================================
# 3. Loading a selection
# ========================================================================================
def check_focal_slots(focal_slots: int) -> int:
    if isinstance(focal_slots, bool) or focal_slots not in FOCAL_SLOT_CHOICES:
        raise UsageError(f"--focal-slots must be 1 or 2 (of the 3 agent slots), not {focal_slots}")
    return int(focal_slots)


def check_supported(algorithm: str, where: str) -> None:
    """One line for an algorithm whose trainer cannot train with partners yet."""
    if not get_algorithm(algorithm).trains_with_partners:
        able = ", ".join(n for n in algorithm_names() if get_algorithm(n).trains_with_partners)
        raise UsageError(
            f"{where}: {algorithm} is not supported yet with --partners (supported: {able})"
        )


def _env_diff(focal: RunConfig, partner: RunConfig) -> str:
    diffs = [
        f"{f} {getattr(partner.env, f)!r} (the focal's: {getattr(focal.env, f)!r})"
        for f in SHARED_ENV_FIELDS
        if getattr(partner.env, f) != getattr(focal.env, f)
    ]
    return ", ".join(diffs)


def load_partners(
    selectors: Sequence[str],
    focal: RunConfig,
    *,
    source: str = "hub",
    split: str | None = None,
    splits: Any = None,
    focal_slots: int = 1,
    where: str = "--partners",
) -> Partners:
    """Select, verify, check and load the partners of a focal run. ``split``: only the
    selected cells of this split of ``splits`` (a :class:`alem_eval.hub.splits.Splits`, a
    split file, or None: the release's). One-line errors:
    :class:`SelectorError` when nothing matches, :class:`CheckpointError` when a partner
    fails verification, :class:`ConfigError` when its env configuration differs from the
    focal's)."""
    from alem_eval.core.progress import download_bar
    from alem_eval.evaluate.rollout import policy_variables
    from alem_eval.hub.sources import open_source
    from alem_eval.model.checkpoint import checkpoint_hash
    from alem_eval.model.loader import cell_checkpoint_dir, load_policy_cell
    from alem_eval.model.policies import make_policy
    from alem_eval.model.verify import verify_cells

    focal_slots = check_focal_slots(focal_slots)
    selectors = [s for s in selectors if str(s).strip()]
    if not selectors:
        raise UsageError(f"{where}: name the partner cells (a selector, e.g. 'demo/*')")
    if focal_slots >= focal.env.num_agents:
        raise UsageError(
            f"--focal-slots {focal_slots} leaves no slot to the partners "
            f"({focal.env.num_agents} agents)"
        )
    src = open_source(source, on_download=download_bar())
    cells = src.select(selectors)
    used = None
    if split is not None or splits is not None:
        from alem_eval.hub.splits import as_splits, select_split

        chosen = as_splits(splits)
        cells = select_split(cells, split, chosen)
        used = (chosen.name, chosen.digest)
    for result in verify_cells(src, cells):
        if not result.ok:
            raise CheckpointError(f"partner {result.cell} fails verification: {result.message}")
    loaded = []
    for cell in cells:
        one = load_policy_cell(src, cell)
        diff = _env_diff(focal, one.cfg)
        if diff:
            raise ConfigError(f"partner {cell.id}: env configuration differs: {diff}")
        loaded.append((cell, one))
    by_net: dict[Any, list] = {}
    for cell, one in loaded:
        by_net.setdefault(one.cfg.network_key, []).append((cell, one))
    policies, params, sizes, ids, hashes = [], [], [], [], []
    for members in by_net.values():
        policy = make_policy(members[0][1].spec)
        prepare = jax.jit(policy.prepare)
        prepared = [
            jax.device_get(prepare(policy_variables(one.spec, one.weights, cell.id)))
            for cell, one in members
        ]
        policies.append(policy)
        params.append(jax.tree_util.tree_map(lambda *xs: np.stack(xs), *prepared))
        sizes.append(len(members))
        for cell, one in members:
            ids.append(cell.id)
            hashes.append(checkpoint_hash(cell_checkpoint_dir(one.cell_dir)))
    record = PartnerRecord(
        tuple(ids), tuple(hashes), focal_slots, split, tuple(selectors), str(source), used
    )
    return Partners(tuple(policies), tuple(params), tuple(sizes), record, focal.env.num_agents)
