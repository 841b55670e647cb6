"""Your agent with the baselines: user-written focal agents for ``alem-eval scenario``.

    alem-eval scenario --focal examples/agents.py:explorer 'demo/*' --source demo --mode both
    alem-eval scenario --focal examples/agents.py:explorer --focal-arg do_every=3 ...
    alem-eval scenario --focal examples/agents.py:numpy_explorer ...   # a host agent

An agent has a ``name`` and two methods (see ``alem_eval.evaluate.agents``):
``init(batch) -> carry`` and ``act(carry, obs, mask, key) -> (carry, actions)``, with
``obs`` float32 ``[batch, obs_dim]``, ``mask`` bool ``[batch, num_actions]`` (legal
actions) and ``actions`` int32 ``[batch]``, one row per agent slot it drives. A JAX
agent runs inside the compiled rollout; one with ``host = True`` gets numpy arrays, once
per step for all of its slots (PyTorch, scripted, an LLM reading ``alem.llm``'s text).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

DO = 5  # alem's Action.DO: interact with what the agent faces


@dataclass(frozen=True)
class Explorer:
    """Interacts every ``do_every`` steps when it may, else a random legal action (JAX)."""

    do_every: int = 2
    name: str = "explorer"

    def init(self, batch: int):
        return jnp.zeros((batch,), jnp.int32)  # each slot's step counter

    def act(self, carry, obs, mask, key):
        keys = jax.random.split(key, obs.shape[0])
        random = jax.vmap(jax.random.categorical)(keys, jnp.where(mask, 0.0, -jnp.inf))
        do = (carry % self.do_every == 0) & mask[:, DO]
        return carry + 1, jnp.where(do, DO, random).astype(jnp.int32)


@dataclass
class NumpyExplorer:
    """The same idea as a host agent: plain numpy, its own random generator."""

    do_every: int = 2
    seed: int = 0
    name: str = "numpy-explorer"
    host: bool = True

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def init(self, batch: int):
        return np.zeros((batch,), np.int32)

    def act(self, carry, obs, mask, key):
        scores = np.where(mask, self.rng.random(mask.shape), -1.0)
        actions = scores.argmax(axis=1)
        do = (carry % self.do_every == 0) & mask[:, DO]
        return carry + 1, np.where(do, DO, actions).astype(np.int32)


def explorer(do_every: int = 2) -> Explorer:
    return Explorer(do_every=do_every)


def numpy_explorer(do_every: int = 2, seed: int = 0) -> NumpyExplorer:
    return NumpyExplorer(do_every=do_every, seed=seed)
