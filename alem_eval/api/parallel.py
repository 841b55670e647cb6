"""Alem as a PettingZoo ``ParallelEnv``, for learners outside JAX (``alem_eval.parallel_env``).

:func:`parallel_env` wraps :func:`alem_eval.make_env` (its jitted reset and step run the
game and, with ``partners=``, the frozen partners inside): the agents are the focal slots
(all three without partners), observations ``Box`` float32 ``[obs_dim]`` numpy arrays,
actions ``Discrete(num_actions)``, and every agent's info holds its ``action_mask``
(``np.int8 [num_actions]``, 1 = legal; ``env.action_space(agent).sample(mask)`` takes it),
as PettingZoo's masked environments hand it out. An episode ends for every agent at once:
``terminations`` when Alem says so, ``truncations`` at ``max_steps``.

Needs the ``pettingzoo`` extra (``pip install 'alem-eval[pettingzoo]'``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from alem_eval.core.extras import require

require("pettingzoo", "alem_eval.parallel_env")
require("gymnasium", "alem_eval.parallel_env")

import gymnasium  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402
from pettingzoo import ParallelEnv  # noqa: E402

from alem_eval.api.envs import Env, make_env  # noqa: E402
from alem_eval.core.errors import UsageError  # noqa: E402


def _reset(env: Env, key: jax.Array) -> tuple[Any, Any, Any]:
    obs, state = env.reset(key)
    return obs, state, env.action_mask(state)


def _step(env: Env, key: jax.Array, state: Any, actions: jax.Array) -> tuple[Any, ...]:
    obs, state, rewards, done, _ = env.step(key, state, actions)
    return obs, state, rewards, done, env.action_mask(state)


# One compiled reset and step per env configuration; the partners' weights are arguments.
_RESET = jax.jit(_reset)
_STEP = jax.jit(_step)


class AlemParallelEnv(ParallelEnv):
    """A PettingZoo ``ParallelEnv`` over one :class:`~alem_eval.api.envs.Env` (``.env``)."""

    metadata: ClassVar[dict[str, Any]] = {
        "name": "alem_coop_v0",
        "render_modes": [],
        "is_parallelizable": True,
    }

    def __init__(self, env: Env, max_steps: int | None = None):
        if max_steps is not None and (isinstance(max_steps, bool) or int(max_steps) < 1):
            raise UsageError(f"max_steps must be a positive integer, got {max_steps!r}")
        self.env = env
        self.max_steps = None if max_steps is None else int(max_steps)
        self.render_mode = None
        self.possible_agents = [env.agents[s] for s in env.focal_slots]
        self.agents: list[str] = []
        low, high = env.observation_bounds()
        self._observation_space = gymnasium.spaces.Box(low, high, (env.obs_dim,), np.float32)
        self._action_space = gymnasium.spaces.Discrete(env.num_actions)
        self._key = jax.random.PRNGKey(0)
        self._state: Any = None
        self._steps = 0

    # PettingZoo asks for the same space object every time.
    def observation_space(self, agent: str) -> gymnasium.spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> gymnasium.spaces.Discrete:
        return self._action_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        """A new episode (``seed``: a new key chain; else the chain goes on) ->
        ``(observations, infos)``."""
        if seed is not None:
            self._key = jax.random.PRNGKey(int(seed))
            self._action_space.seed(int(seed))
        self._key, key = jax.random.split(self._key)
        obs, self._state, mask = _RESET(self.env, key)
        self.agents = list(self.possible_agents)
        self._steps = 0
        return self._per_agent(obs), self._infos(mask)

    def step(self, actions: dict[str, Any]):
        """``{agent: action}`` for every live agent -> ``(observations, rewards,
        terminations, truncations, infos)``; once an episode ends ``agents`` is empty."""
        if not self.agents:
            raise UsageError("the episode is over: call reset()")
        missing = [a for a in self.agents if a not in actions]
        if missing:
            raise UsageError(f"no action for {', '.join(missing)}")
        joint = np.asarray([int(actions[a]) for a in self.agents], np.int32)
        self._key, key = jax.random.split(self._key)
        obs, self._state, rewards, done, mask = _STEP(self.env, key, self._state, joint)
        self._steps += 1
        over = bool(done)
        cut = not over and self.max_steps is not None and self._steps >= self.max_steps
        agents = self.agents
        out = (
            self._per_agent(obs),
            {a: float(r) for a, r in zip(agents, np.asarray(rewards))},
            dict.fromkeys(agents, over),
            dict.fromkeys(agents, cut),
            self._infos(mask),
        )
        if over or cut:
            self.agents = []
        return out

    def _per_agent(self, obs: Any) -> dict[str, np.ndarray]:
        values = np.asarray(obs, np.float32)
        return {a: values[i] for i, a in enumerate(self.possible_agents)}

    def _infos(self, mask: Any) -> dict[str, dict[str, np.ndarray]]:
        values = np.asarray(mask).astype(np.int8)
        return {a: {"action_mask": values[i]} for i, a in enumerate(self.possible_agents)}

    def close(self) -> None:
        self._state = None


def parallel_env(
    cell_or_difficulty: Any,
    partners: Any = None,
    focal_slots: Any = None,
    *,
    source: str | Path | None = None,
    max_steps: int | None = None,
    split: str | None = None,
    splits: Any = None,
    difficulty: str | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> AlemParallelEnv:
    """:func:`alem_eval.make_env`'s environment as a PettingZoo ``ParallelEnv`` (the same
    arguments; ``max_steps``: truncate every episode there, None: Alem's own end only).
    Agents are the focal slots, or all three without partners; observations ``Box``,
    actions ``Discrete``, each agent's info holds its ``action_mask``."""
    env = make_env(
        cell_or_difficulty,
        partners,
        focal_slots,
        source=source,
        split=split,
        splits=splits,
        difficulty=difficulty,
        repo=repo,
        revision=revision,
        cache_dir=cache_dir,
    )
    return AlemParallelEnv(env, max_steps=max_steps)
