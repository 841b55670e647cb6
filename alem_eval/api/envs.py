"""The Alem environment for loops of your own, alone or with frozen partners (``import alem_eval``).

:func:`make_env` builds one unbatched eval environment, as the evaluator builds it
(:class:`alem_eval.envs.eval_env.EvalEnv`), from a difficulty (the released cells'
configuration) or from a cell (its own: agents, comm channels, action masking). Pure
functions on explicit keys and state, gymnax style: ``reset(key) -> (obs, state)``,
``step(key, state, actions) -> (obs, state, rewards, done, info)``, ``action_mask(state)``;
``jax.jit``, ``jax.vmap`` and ``lax.scan`` them. Observations are raw ``[F, obs_dim]``
float32 (a network that takes the one-hot agent id appends it itself).

With ``partners=`` the released checkpoints it names play the slots that are not
``focal_slots``, with their greedy released policies (the evaluator's
:class:`~alem_eval.model.policies.GreedyPolicy`, as :func:`alem_eval.load_policy` plays it),
inside ``step``; one partner is drawn at every reset among the selected cells (per
environment, so a vmapped batch mixes them). What comes back is the focal slots' only:
``obs [F, obs_dim]``, ``rewards [F]``, ``action_mask(state) [F, A]``; ``done`` is the
episode's (an Alem episode ends for every agent at once).

    env = alem_eval.make_env("demo/ippo-rnn/easy/seed0", partners="demo/mappo,pqn",
                             focal_slots=(0,), source="demo")
    obs, state = env.reset(jax.random.PRNGKey(0))        # obs [1, obs_dim]
    obs, state, rewards, done, info = env.step(key, state, actions)   # actions [1]

Partner weights are leaves of the :class:`Env` pytree: ``jax.jit(lambda env, k:
env.reset(k))(env, key)`` passes them as arguments rather than baking them into the
program as constants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alem_eval.api.calls import before_compiling
from alem_eval.core.errors import UsageError

before_compiling()  # the persistent compilation cache, while JAX is not yet imported

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

# The released configurations' world (config.py defaults): 3 players, no shared reward,
# the base difficulty not scaled.
NUM_AGENTS = 3
ENV_NAME = "Alem-Coop-Symbolic"


@dataclass(frozen=True, eq=False)
class _Static:
    """What the compiled reset / step are specialised on (compared by identity)."""

    env: Any  # alem_eval.envs.eval_env.EvalEnv
    dyn: Any  # the difficulty's EnvParams fields (host arrays)
    groups: tuple[Any, ...]  # per network group of the partners: its GreedyPolicy
    group_of: tuple[int, ...]  # per partner: its group
    index_in_group: tuple[int, ...]  # per partner: its row of the group's stacked params


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PartnerState:
    """The state of an :class:`Env` with partners (a pytree; ``jax.vmap`` batches it)."""

    env: Any  # the Alem EnvState
    partner: jax.Array  # [] int32: which of Env.partners plays this episode
    carries: tuple  # per network group: the partners' recurrent state (only the drawn one's moves)
    dones: jax.Array  # [P] bool: the reset flags the partner sees next (the env's agent dones)
    obs: jax.Array  # [P, obs_dim] float32: every slot's observation (the partner acts on it)
    mask: jax.Array  # [P, A] bool: every slot's legal actions


@jax.tree_util.register_dataclass
@dataclass(frozen=True, eq=False)
class Env:
    """One Alem-Coop-Symbolic eval environment on ``difficulty``'s worlds, unbatched
    (``jax.vmap`` its methods for a batch). ``num_agents`` (P, the env's), ``obs_dim``,
    ``num_actions`` (A), ``action_names`` (A names: alem's action enum, then the extra
    give slots and the comm channels), ``agents`` (the env's agent names, in slot order),
    ``focal_slots`` (the F slots you act for: all P without partners), ``partners`` (the
    partner cells' ids; ``()`` without), ``action_masking``.
    """

    partner_params: tuple = field(repr=False)  # per network group: stacked prepared params
    difficulty: str = field(metadata=dict(static=True))
    num_comm_channels: int = field(metadata=dict(static=True))
    num_agents: int = field(metadata=dict(static=True))
    obs_dim: int = field(metadata=dict(static=True))
    num_actions: int = field(metadata=dict(static=True))
    agents: tuple[str, ...] = field(metadata=dict(static=True))
    action_names: tuple[str, ...] = field(metadata=dict(static=True), repr=False)
    focal_slots: tuple[int, ...] = field(metadata=dict(static=True))
    partners: tuple[str, ...] = field(metadata=dict(static=True))
    action_masking: bool = field(metadata=dict(static=True))
    _static: _Static = field(metadata=dict(static=True), repr=False)

    # ------------------------------------------------------------------ reset / step
    def reset(self, key: jax.Array) -> tuple[jax.Array, Any]:
        """A new world from ``key`` -> ``(obs [F, obs_dim] float32, state)``. Without
        partners the state is Alem's own and ``jax.random.PRNGKey(9999 + i)`` is the fast
        protocol's episode ``i``; with partners ``key`` also draws the partner
        (:class:`PartnerState`)."""
        env, dyn = self._static.env, self._static.dyn
        if not self.partners:
            return env.reset(key, dyn)
        world_key, partner_key = jax.random.split(key)
        obs, env_state = env.reset(world_key, dyn)
        state = PartnerState(
            env=env_state,
            partner=jax.random.randint(partner_key, (), 0, len(self.partners), jnp.int32),
            carries=tuple(g.init_carry() for g in self._static.groups),
            dones=jnp.zeros((self.num_agents,), jnp.bool_),
            obs=obs,
            mask=env.action_mask(env_state, dyn),
        )
        return obs[self._focal], state

    def step(
        self, key: jax.Array, state: Any, actions: jax.Array
    ) -> tuple[jax.Array, Any, jax.Array, jax.Array, dict[str, jax.Array]]:
        """One step (no auto-reset) with the focal slots' ``actions [F]`` int ->
        ``(obs [F, obs_dim] float32, state, rewards [F] float32, done [] bool, info)``;
        ``info``: ``agent_dones [F]`` bool, ``team_achievements`` [] int32 (distinct
        achievements any agent has unlocked) and, with partners, ``actions [P]`` (every
        slot's, the partner's included), ``partner`` [] int32 and ``action_mask [F, A]``
        (of the new state). Once ``done``, reset (``jax.tree.map(lambda a, b:
        jnp.where(done, a, b), fresh, state)`` inside a scan)."""
        env, dyn = self._static.env, self._static.dyn
        actions = jnp.asarray(actions, jnp.int32)
        if not self.partners:
            out = env.step(key, state, actions, dyn)
            info = {
                "agent_dones": out.agent_dones,
                "team_achievements": env.team_achievements(out.state),
            }
            return out.obs, out.state, out.reward, out.done, info
        carries, partner_actions = self._partner_actions(state)
        joint = partner_actions.at[self._focal].set(actions)
        out = env.step(key, state.env, joint, dyn)
        new = PartnerState(
            env=out.state,
            partner=state.partner,
            carries=carries,
            dones=out.agent_dones,
            obs=out.obs,
            mask=env.action_mask(out.state, dyn),
        )
        focal = self._focal
        info = {
            "agent_dones": out.agent_dones[focal],
            "team_achievements": env.team_achievements(out.state),
            "actions": joint,
            "partner": state.partner,
            "action_mask": new.mask[focal],
        }
        return out.obs[focal], new, out.reward[focal], out.done, info

    def action_mask(self, state: Any) -> jax.Array:
        """``[F, A]`` bool: the actions each focal slot may take in ``state`` (all legal
        when the cell was trained without action masking)."""
        if self.partners:
            return state.mask[self._focal]
        return self._static.env.action_mask(state, self._static.dyn)

    def observation_bounds(self) -> tuple[float, float]:
        """``(low, high)`` of the observation values, as alem's observation space states them."""
        return self._static.env.observation_bounds()

    # ------------------------------------------------------------------ partners
    @property
    def _focal(self) -> np.ndarray:
        return np.asarray(self.focal_slots, np.int32)

    def _partner_actions(self, state: PartnerState) -> tuple[tuple, jax.Array]:
        """The drawn partner's greedy step on every slot (the evaluator's batch shape: a
        role's policy runs on all P agents and keeps its own slots' actions) -> (carries,
        actions [P]). One branch per network group (``lax.switch``), the partner's row
        of the group's stacked parameters gathered inside it."""
        s = self._static
        group = jnp.asarray(s.group_of, jnp.int32)[state.partner]
        row = jnp.asarray(s.index_in_group, jnp.int32)[state.partner]

        def branch(g: int):
            greedy = s.groups[g]

            def run(carries: tuple) -> tuple[tuple, jax.Array]:
                params = jax.tree_util.tree_map(lambda x: x[row], self.partner_params[g])
                obs = greedy.policy_input(state.obs)
                carry, acts = greedy.act(params, carries[g], obs, state.dones, state.mask)
                return carries[:g] + (carry,) + carries[g + 1 :], acts

            return run

        if len(s.groups) == 1:
            return branch(0)(state.carries)
        return jax.lax.switch(group, [branch(g) for g in range(len(s.groups))], state.carries)


# ----------------------------------------------------------------------------------------
# Building one
# ----------------------------------------------------------------------------------------
def make_env(
    cell_or_difficulty: Any,
    partners: Any = None,
    focal_slots: Sequence[int] | None = None,
    *,
    source: str | Path | None = None,
    split: str | None = None,
    splits: Any = None,
    difficulty: str | None = None,
    num_comm_channels: int | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> Env:
    """The eval environment of a difficulty (``"easy"``, ``"medium"``, ``"hard"``: the
    released cells' configuration, 3 agents, ``num_comm_channels`` (4) comm channels,
    action masking) or of one cell (a ``Cell`` or a selector naming one cell of
    ``source``: its config's agents, comm channels and masking; its training difficulty
    unless ``difficulty``), built as the evaluator builds it.

    ``partners``: cells (a selector, several, or ``Cell`` s; ``split`` / ``splits`` keep
    those of a partner split, :mod:`alem_eval.hub.splits`) whose greedy released
    policies play every slot but ``focal_slots`` (default ``(0,)``); one is drawn per
    reset. Their env configuration must be the focal's. Returns :class:`Env`.
    """
    from alem_eval.evaluate.settings import check_eval_difficulty

    statics, own_difficulty = _focal_statics(
        cell_or_difficulty, num_comm_channels, source, repo, revision, cache_dir
    )
    chosen_difficulty = difficulty or own_difficulty
    check_eval_difficulty(chosen_difficulty)
    slots = _focal_slots(focal_slots, statics.num_agents, partners is not None)
    groups: tuple[Any, ...] = ()
    params: tuple = ()
    group_of: tuple[int, ...] = ()
    index_in_group: tuple[int, ...] = ()
    ids: tuple[str, ...] = ()
    if partners is not None:
        loaded = _load_partners(partners, statics, source, split, splits, repo, revision, cache_dir)
        ids = tuple(cell_id for cell_id, _, _, _ in loaded)
        keys = list(dict.fromkeys(key for _, key, _, _ in loaded))
        group_of = tuple(keys.index(key) for _, key, _, _ in loaded)
        index_in_group = tuple(group_of[:i].count(g) for i, g in enumerate(group_of))
        groups = tuple(next(gr for _, k, gr, _ in loaded if k == key) for key in keys)
        params = tuple(
            jax.tree_util.tree_map(
                lambda *xs: jnp.stack(xs), *[p for _, k, _, p in loaded if k == key]
            )
            for key in keys
        )
    from alem_eval.envs.eval_env import get_eval_env

    env = get_eval_env(statics)
    return Env(
        partner_params=params,
        difficulty=chosen_difficulty,
        num_comm_channels=statics.num_comm_channels,
        num_agents=statics.num_agents,
        obs_dim=statics.obs_dim,
        num_actions=statics.num_actions,
        agents=env.agents,
        action_names=env.action_names,
        focal_slots=slots,
        partners=ids,
        action_masking=statics.action_masking,
        _static=_Static(
            env, env.difficulty_params(chosen_difficulty), groups, group_of, index_in_group
        ),
    )


def _focal_statics(cell_or_difficulty, num_comm_channels, source, repo, revision, cache_dir):
    """(the focal's EnvStatics: no agent id appended, the policy's business; its difficulty)."""
    import dataclasses

    from alem_eval.algorithms.config import DIFFICULTIES
    from alem_eval.envs.eval_env import EnvStatics

    if isinstance(cell_or_difficulty, str) and cell_or_difficulty in DIFFICULTIES:
        nc = 4 if num_comm_channels is None else num_comm_channels
        if isinstance(nc, bool) or not isinstance(nc, (int, np.integer)):
            raise UsageError(f"num_comm_channels must be an integer, got {nc!r}")
        if nc < 0:
            raise UsageError(f"num_comm_channels must be at least 0, got {nc}")
        statics = EnvStatics(
            env_name=ENV_NAME,
            num_agents=NUM_AGENTS,
            num_comm_channels=int(nc),
            shared_reward=False,
            scale_base_difficulty=False,
            action_masking=True,
            append_agent_id=False,
        )
        return statics, cell_or_difficulty
    if num_comm_channels is not None:
        raise UsageError("num_comm_channels is for a difficulty; a cell has its own")
    if isinstance(cell_or_difficulty, str) and "/" not in cell_or_difficulty:
        raise UsageError(
            f"unknown eval difficulty {cell_or_difficulty!r} (expected one of "
            f"{', '.join(DIFFICULTIES)}, or a cell BUDGET/ALGORITHM/DIFFICULTY/seedN)"
        )
    from alem_eval.evaluate.settings import eval_statics
    from alem_eval.model.loader import resolve_cell

    src, cell = _one_cell(cell_or_difficulty, source, repo, revision, cache_dir, "make_env")
    cfg, _ = resolve_cell(
        src.local_dir(cell), algorithm=cell.algorithm, difficulty=cell.difficulty, seed=cell.seed
    )
    return dataclasses.replace(eval_statics(cfg), append_agent_id=False), cell.difficulty


def _one_cell(cell, source, repo, revision, cache_dir, what: str):
    from alem_eval.api.cells import resolve_cells

    src, cells = resolve_cells(cell, source, repo, revision, cache_dir)
    if len(cells) != 1:
        shown = ", ".join(c.id for c in cells[:3]) + (", ..." if len(cells) > 3 else "")
        raise UsageError(f"{what} takes one cell; {cell!r} names {len(cells)} ({shown})")
    return src, cells[0]


def _focal_slots(focal_slots, num_agents: int, with_partners: bool) -> tuple[int, ...]:
    if focal_slots is None:
        return (0,) if with_partners else tuple(range(num_agents))
    try:
        slots = tuple(int(s) for s in focal_slots)
    except (TypeError, ValueError):
        raise UsageError(f"focal_slots must be slot numbers, got {focal_slots!r}") from None
    if not slots or len(set(slots)) != len(slots) or not all(0 <= s < num_agents for s in slots):
        raise UsageError(
            f"focal_slots {list(focal_slots)!r}: distinct slots in 0..{num_agents - 1}, at least one"
        )
    if not with_partners and len(slots) != num_agents:
        raise UsageError("focal_slots without partners: nobody would play the other slots")
    if with_partners and len(slots) == num_agents:
        raise UsageError(f"focal_slots {list(slots)} leave no slot to the partners")
    return tuple(sorted(slots))


def _load_partners(partners, statics, source, split, splits, repo, revision, cache_dir):
    """Per partner cell: ``(id, network key, GreedyPolicy, prepared params)``; a one-line
    :class:`UsageError` when one's env configuration is not the focal's."""
    from alem_eval.api.cells import resolve_cells
    from alem_eval.evaluate.rollout import policy_variables
    from alem_eval.evaluate.settings import eval_statics
    from alem_eval.model.loader import load_policy_cell
    from alem_eval.model.policies import make_policy

    src, cells = resolve_cells(partners, source, repo, revision, cache_dir, split, splits)
    out = []
    for c in cells:
        loaded = load_policy_cell(src, c)
        mine = eval_statics(loaded.cfg)
        _check_same_env(c.id, mine, statics)
        greedy = make_policy(loaded.spec)
        variables = policy_variables(loaded.spec, loaded.weights, c.id)
        out.append((c.id, loaded.cfg.network_key, greedy, jax.jit(greedy.prepare)(variables)))
    return out


def _check_same_env(cell_id: str, partner, focal) -> None:
    fields: tuple[str, ...] = ("num_agents", "num_comm_channels", "action_masking")
    fields += ("shared_reward", "scale_base_difficulty", "env_name")
    diff = [f for f in fields if getattr(partner, f) != getattr(focal, f)]
    if diff:
        shown = ", ".join(f"{f} {getattr(partner, f)} vs {getattr(focal, f)}" for f in diff)
        raise UsageError(
            f"partner {cell_id} needs another env configuration than the focal's ({shown})"
        )
