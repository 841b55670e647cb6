"""Alem as the trainers use it: batched-friendly reset/step with auto-reset, action masks
and cheap episode metrics, built the way each upstream trainer builds its training env.

Nothing of the game is re-implemented: ``alem``'s ``make_alem_env_from_name``,
``EnvParams``, ``StaticEnvParams``, ``get_coordination_params`` and
``compute_action_mask`` do the work (imported quietly through :mod:`alem_eval.envs.loader`).

Per-algorithm facts reproduced here (spec §1.2-1.5, §3.2, §5):

* IPPO applies SOFT_SPECIALIZATION / SPECIALIST_EFFICIENCY / NON_SPECIALIST_EFFICIENCY on
  top of the difficulty preset and honours NUM_AGENTS; MAPPO, HyperMARL and PQN use the
  preset values and always 3 players. The caller says which (``env_overrides``; alem-eval's
  algorithm registry knows it per algorithm).
* PQN's training env reads a lower-case ``shared_reward`` key that no config sets, so it
  always trains with per-agent rewards (SHARED_REWARD has no effect on PQN training): the
  caller passes ``shared_reward=False`` for it.
* ``step`` is the JaxMARL-style auto-reset step of the upstream base class (split the key
  into step and reset keys, select the reset world where the episode ended), written out
  here so the metrics can be read from the *terminal* state before the reset replaces it,
  and so a pre-generated fresh world can be supplied (world generation costs ~20x a game
  step on CPU; upstream pays it on every step of every env).
  The env is built with ``compute_full_info=False``: upstream computes ``compute_score``'s
  ~400 metrics on every training step only to log them; it does not change training, and
  skipping it halves the step cost. The metrics here come from the achievement table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from alem_eval.envs.loader import import_alem

# Achievement ids (spec §4): 0-65 normal, 66-92 coordination.
NUM_NORMAL_ACHIEVEMENTS = 66


@dataclass(frozen=True, eq=False)
class TrainingEnv:
    """One configured Alem training env. Single-env functions: vmap them over envs."""

    algorithm: str
    env: Any = field(repr=False)  # alem's AlemCoopSymbolicEnv
    num_agents: int
    obs_dim: int
    num_actions: int
    action_masking: bool
    env_version: str
    coord_params: dict = field(repr=False)  # the difficulty preset as applied (for logging)

    def reset(self, key: jax.Array) -> tuple[jax.Array, Any]:
        """A new world: ``(obs [A, obs_dim] float32, state)``."""
        obs, state = self.env.reset(key)
        return self._stack(obs), state

    def action_mask(self, state) -> jax.Array:
        """``[A, num_actions]`` bool; all True when ACTION_MASKING is off."""
        if not self.action_masking:
            return jnp.ones((self.num_agents, self.num_actions), bool)
        m = import_alem().compute_action_mask(
            state, self.env.default_params, self.env.static_env_params
        )
        return m.astype(bool)

    def step(self, key: jax.Array, state, actions: jax.Array, reset=None):
        """One step with auto-reset.

        Returns ``(obs [A, D], state, reward [A], done [], info)``; where ``done`` is true the
        returned obs/state are those of a fresh world, and ``info`` holds the finished
        episode's team achievement fractions (meaningful only where ``done``).

        ``reset``: an optional pre-generated ``(obs, state)`` fresh world to continue with
        when the episode ends (see :func:`alem_eval.trainers.common.step_envs`). Without it a world is
        generated from the reset key on every step, exactly as upstream's ``env.step`` does.
        """
        key_step, key_reset = jax.random.split(key)
        act = {a: actions[i] for i, a in enumerate(self.env.agents)}
        obs_st, state_st, reward, dones, _ = self.env.step_env(key_step, state, act)
        obs_re, state_re = self.reset(key_reset) if reset is None else reset
        done = dones["__all__"]
        state_next = jax.tree_util.tree_map(
            lambda r, s: jax.lax.select(done, r, s), state_re, state_st
        )
        obs_next = jnp.where(done, obs_re, self._stack(obs_st))
        rew = jnp.stack([reward[a] for a in self.env.agents]).astype(jnp.float32)
        return obs_next, state_next, rew, done, achievement_metrics(state_st)

    def _stack(self, obs: dict) -> jax.Array:
        return jnp.stack([obs[a] for a in self.env.agents]).astype(jnp.float32)


def achievement_metrics(state) -> dict[str, jax.Array]:
    """Team (any-agent) achievement fractions of a state, as ``compute_score`` defines them."""
    team = jnp.any(state.achievements > 0, axis=0).astype(jnp.float32)  # [num_achievements]
    return {
        "achievement_pct": team.mean(),
        "normal_achievement_pct": team[:NUM_NORMAL_ACHIEVEMENTS].mean(),
        "coordination_achievement_pct": team[NUM_NORMAL_ACHIEVEMENTS:].mean(),
    }


def coordination_kwargs(env_cfg: Any, *, env_overrides: bool) -> dict[str, Any]:
    """The EnvParams difficulty fields a trainer applies: the preset of
    ``env_cfg.training_difficulty``, plus the SOFT_SPECIALIZATION / *_EFFICIENCY values of
    the config when ``env_overrides`` (only IPPO's upstream trainer applies them)."""
    alem = import_alem()
    kw = dict(
        alem.get_coordination_params(
            env_cfg.training_difficulty, scale_base=env_cfg.scale_base_difficulty
        )
    )
    if env_overrides:
        kw["soft_specialization"] = bool(env_cfg.soft_specialization)
        kw["non_specialist_efficiency"] = float(env_cfg.non_specialist_efficiency)
        kw["specialist_efficiency"] = float(env_cfg.specialist_efficiency)
    return kw


def make_training_env(
    env_cfg: Any, *, label: str, env_overrides: bool, shared_reward: bool
) -> TrainingEnv:
    """A training env built as an upstream trainer builds it.

    ``env_cfg`` has the fields of ``alem_eval.algorithms.config.EnvConfig``; ``env_overrides`` and
    ``shared_reward`` are the trainer's own habits (see the module docstring); ``label``
    names the run's algorithm in reprs and logs.
    """
    alem = import_alem()
    kw = coordination_kwargs(env_cfg, env_overrides=env_overrides)
    params = alem.EnvParams(shared_reward=bool(shared_reward), randomize_alpha=False, **kw)
    static = alem.StaticEnvParams(
        player_count=int(env_cfg.num_agents), num_comm_channels=int(env_cfg.num_comm_channels)
    )
    env = alem.make_alem_env_from_name(
        env_cfg.env_name, env_params=params, static_env_params=static, compute_full_info=False
    )
    agent0 = env.agents[0]
    return TrainingEnv(
        algorithm=label,
        env=env,
        num_agents=env.num_agents,
        obs_dim=int(env.observation_space(agent0).shape[0]),
        num_actions=int(env.action_space(agent0).n),
        action_masking=bool(env_cfg.action_masking),
        env_version=str(static.version),
        coord_params=kw,
    )
