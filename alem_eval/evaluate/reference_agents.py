"""Reference focal agents shipped with alem-eval: every scenario table has a floor, and
the agent wiring (:mod:`alem_eval.evaluate.agents`) is always exercised.

* ``random-legal`` (JAX): a uniformly random legal action per slot and step;
* ``noop`` (JAX): NOOP (action 0) where it is legal, else the lowest legal action;
* ``scripted`` (JAX) and ``scripted-host`` (a host agent, numpy): the same simple script
  (DO every other step, else walk one way for 8 steps, then the next; the lowest legal
  action when the wanted one is not legal), written once for both array libraries: they
  choose the same actions, so their scores are identical (the host path's test).

``--focal random-legal`` (any of :data:`REFERENCE_AGENTS`) names them on the command
line; ``alem_eval.evaluate.reference_agents:random_legal`` is the same agent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

NOOP, LEFT, DO = 0, 1, 5  # alem's Action enum
WALK_STEPS = 8  # the script walks one way this many steps


@dataclass(frozen=True)
class RandomLegal:
    """A uniformly random legal action per slot (JAX)."""

    name: str = "random-legal"

    def init(self, batch: int) -> Any:
        return None

    def act(self, carry: Any, obs: jax.Array, mask: jax.Array, key: jax.Array):
        keys = jax.random.split(key, obs.shape[0])
        logits = jnp.where(mask, 0.0, -jnp.inf)
        actions = jax.vmap(jax.random.categorical)(keys, logits)
        return carry, actions.astype(jnp.int32)


@dataclass(frozen=True)
class Noop:
    """NOOP where legal, else the lowest legal action (JAX)."""

    name: str = "noop"

    def init(self, batch: int) -> Any:
        return None

    def act(self, carry: Any, obs: jax.Array, mask: jax.Array, key: jax.Array):
        first = jnp.argmax(mask, axis=-1).astype(jnp.int32)
        return carry, jnp.where(mask[:, NOOP], NOOP, first).astype(jnp.int32)


def script(xp: Any, t: Any, mask: Any) -> tuple[Any, Any]:
    """The script on ``xp`` arrays (numpy or jax.numpy): step counters ``t [B]``,
    ``mask [B, A]`` -> ``(t + 1, actions [B] int32)``."""
    direction = LEFT + (t // WALK_STEPS) % 4  # LEFT, RIGHT, UP, DOWN
    want = xp.where(t % 2 == 0, DO, direction).astype(xp.int32)
    legal = xp.take_along_axis(mask, want[:, None], axis=-1)[:, 0]
    first = xp.argmax(mask, axis=-1).astype(xp.int32)
    return t + 1, xp.where(legal, want, first).astype(xp.int32)


@dataclass(frozen=True)
class Scripted:
    """The script as a JAX agent (carry: each slot's step counter)."""

    name: str = "scripted"

    def init(self, batch: int) -> Any:
        return jnp.zeros((batch,), jnp.int32)

    def act(self, carry: Any, obs: jax.Array, mask: jax.Array, key: jax.Array):
        return script(jnp, carry, mask)


@dataclass(frozen=True)
class ScriptedHost:
    """The script as a host agent: numpy, called once per step for all of its slots."""

    name: str = "scripted-host"
    host: bool = True

    def init(self, batch: int) -> Any:
        return np.zeros((batch,), np.int32)

    def act(self, carry: Any, obs: np.ndarray, mask: np.ndarray, key: np.ndarray):
        return script(np, carry, mask)


def random_legal() -> RandomLegal:
    return RandomLegal()


def noop() -> Noop:
    return Noop()


def scripted() -> Scripted:
    return Scripted()


def scripted_host() -> ScriptedHost:
    return ScriptedHost()


REFERENCE_AGENTS: dict[str, Callable[[], Any]] = {
    "random-legal": random_legal,
    "noop": noop,
    "scripted": scripted,
    "scripted-host": scripted_host,
}
