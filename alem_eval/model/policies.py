"""Greedy evaluation policies of the released algorithms (spec §2).

Two kinds of greedy head cover the four algorithms; the registry's ``greedy_policy`` field
says which one an algorithm uses:

* :data:`CATEGORICAL` (IPPO, MAPPO's actor, HyperMARL) calls the network once with
  time-major input ``obs [T=1, B=P, D]`` and the per-agent done flags. As in upstream, the
  network's logits go through a distrax ``Categorical`` twice: ``pi.logits`` is
  ``log_softmax(logits)``, the mask adds ``0`` / ``-1e10``, and ``pi.mode()`` of the
  re-built Categorical is the argmax of ``log_softmax`` of the masked values (ties -> lowest
  index). Both normalisations are kept because float rounding in them can create ties the
  raw logits do not have.
* :data:`Q_VALUES` (PQN) applies the Q-network per agent (``vmap`` over agents, ``T=1,
  B=1``, eval mode with the BatchNorm running statistics), then ``q - (1 - mask) * 1e10``
  and argmax.

The recurrent carry starts at zeros with done flags of zeros; after every step the env's
per-agent done flags are fed back as the reset flags. Parameter-only work (HyperMARL's
generated heads) is done once per checkpoint by :meth:`GreedyPolicy.prepare`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import jax
import jax.numpy as jnp

from alem_eval.model.networks import NetworkSpec

# Upstream's masked-action penalty (spec §2): masked logits get + (-1e10), masked Q-values
# - 1e10; the same magnitude the trainers use (alem_eval.trainers.common.MASK_PENALTY).
MASK_PENALTY = 1e10


def _categorical_carry(spec: NetworkSpec) -> Any:
    return spec.init_carry(spec.num_agents)


def _per_agent_carry(spec: NetworkSpec) -> Any:
    p = spec.num_agents
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (p,) + x.shape), spec.init_carry(1))


def _categorical_act(spec: NetworkSpec, params, carry, obs, dones, mask):
    out = spec.module.apply(
        params["variables"], carry, obs[None], dones[None], **params["constants"]
    )
    carry, logits = out[0], out[1]  # [P, H], [1, P, A]
    normalised = jax.nn.log_softmax(logits, axis=-1)  # distrax Categorical(logits).logits
    masked = normalised + jnp.where(mask[None], 0.0, -MASK_PENALTY)
    actions = jnp.argmax(jax.nn.log_softmax(masked, axis=-1), axis=-1)  # .mode()
    return carry, actions[0].astype(jnp.int32)


def _q_values_act(spec: NetworkSpec, params, carry, obs, dones, mask):
    module, v = spec.module, params["variables"]

    def one_agent(c, o, d):  # c: ([1, H], [1, H]); o: [1, 1, D]; d: [1, 1]
        return module.apply(v, c, o, d, False)

    carry, q = jax.vmap(one_agent)(carry, obs[:, None, None, :], dones[:, None, None])
    q = q[:, 0, 0, :]  # [P, A]
    q = q - (1 - mask) * MASK_PENALTY
    return carry, jnp.argmax(q, axis=-1).astype(jnp.int32)


@dataclass(frozen=True)
class PolicyKind:
    """How one family of networks acts greedily: its zero carry and its step."""

    name: str
    init_carry: Callable[[NetworkSpec], Any]
    act: Callable[..., tuple[Any, jax.Array]]


CATEGORICAL = PolicyKind("categorical", _categorical_carry, _categorical_act)
Q_VALUES = PolicyKind("q-values", _per_agent_carry, _q_values_act)


@dataclass(frozen=True)
class GreedyPolicy:
    """The eval-time policy of one configured network (pure functions, no state).

    ``params`` below means the output of :meth:`prepare`; ``carry`` the recurrent state of
    one episode (``P`` agents); ``obs`` ``[P, input_dim]`` float32 (pre-processed by the
    env layer); ``dones`` ``[P]`` bool; ``mask`` ``[P, num_actions]`` bool.
    """

    spec: NetworkSpec
    kind: PolicyKind

    @property
    def algorithm(self) -> str:
        return self.spec.algorithm

    def prepare(self, variables: Any) -> dict[str, Any]:
        """Per-checkpoint constants: the flax variables (from ``spec.policy_variables``)
        and, for HyperMARL, the generated per-agent head weights (computed once here)."""
        return {"variables": variables, "constants": self.spec.apply_constants(variables)}

    def init_carry(self) -> Any:
        """Zero recurrent state for one episode: ``[P, H]``; PQN ``(c, h)`` each ``[P, 1, H]``."""
        return self.kind.init_carry(self.spec)

    def policy_input(self, raw_obs: jax.Array) -> jax.Array:
        """``[P, obs_dim]`` raw observations -> ``[P, input_dim]``: followed by the one-hot
        agent id when the network takes it (as AppendAgentIDWrapper and JaxMARL's
        CTRolloutManager append it)."""
        if not self.spec.appends_agent_id:
            return raw_obs
        return jnp.concatenate([raw_obs, jnp.eye(raw_obs.shape[0], dtype=raw_obs.dtype)], axis=-1)

    def act(
        self, params: dict[str, Any], carry: Any, obs: jax.Array, dones: jax.Array, mask: jax.Array
    ) -> tuple[Any, jax.Array]:
        """One greedy step -> (new carry, actions ``[P]`` int32)."""
        return self.kind.act(self.spec, params, carry, obs, dones, mask)


def make_policy(spec: NetworkSpec) -> GreedyPolicy:
    """The greedy policy of a configured network (see :func:`alem_eval.model.networks.build_network`)."""
    from alem_eval.algorithms.registry import get_algorithm

    return GreedyPolicy(spec, get_algorithm(spec.algorithm).greedy_policy.resolve())
