"""Greedy evaluation policies of the four released algorithms (spec §2).

A :class:`GreedyPolicy` is a pure, traceable description of how upstream's eval loop turns
one environment step's observations into actions for one episode of ``P`` agents:

* IPPO, MAPPO (actor only) and HyperMARL call the network once with time-major input
  ``obs [T=1, B=P, D]`` and the per-agent done flags. As in upstream, the network's logits
  go through a distrax ``Categorical`` twice: ``pi.logits`` is ``log_softmax(logits)``, the
  mask adds ``0`` / ``-1e10``, and ``pi.mode()`` of the re-built Categorical is the argmax
  of ``log_softmax`` of the masked values (ties -> lowest index). Both normalisations are
  kept because float rounding in them can create ties the raw logits do not have.
* PQN applies the Q-network per agent (``vmap`` over agents, ``T=1, B=1``, eval mode with
  the BatchNorm running statistics), then ``q - (1 - mask) * 1e10`` and argmax.

The recurrent carry starts at zeros with done flags of zeros; after every step the env's
per-agent done flags are fed back as the reset flags. HyperMARL's hypernetworks do not
depend on the observation, so :meth:`GreedyPolicy.prepare` evaluates them once per
checkpoint and every step reuses the generated per-agent weights (``heads=``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from .networks import NetworkSpec

# Additive mask value of upstream's PPO-family policies and PQN's penalty (spec §2).
MASK_PENALTY = -1e10
PQN_MASK_SCALE = 1e10


@dataclass(frozen=True)
class GreedyPolicy:
    """The eval-time policy of one configured network (pure functions, no state).

    ``params`` below means the output of :meth:`prepare`; ``carry`` the recurrent state of
    one episode (``P`` agents); ``obs`` ``[P, input_dim]`` float32 (pre-processed by the
    env layer); ``dones`` ``[P]`` bool; ``mask`` ``[P, num_actions]`` bool.
    """

    spec: NetworkSpec

    @property
    def algorithm(self) -> str:
        return self.spec.algorithm

    def prepare(self, variables: Any) -> dict[str, Any]:
        """Per-checkpoint constants: the flax variables (from ``spec.policy_variables``)
        and, for HyperMARL, the generated per-agent head weights (computed once here)."""
        return {"variables": variables, "constants": self.spec.apply_constants(variables)}

    def init_carry(self) -> Any:
        """Zero recurrent state for one episode: ``[P, H]``; PQN ``(c, h)`` each ``[P, 1, H]``."""
        p = self.spec.num_agents
        if self.algorithm == "pqn-vdn-rnn":
            return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (p,) + x.shape),
                                          self.spec.init_carry(1))
        return self.spec.init_carry(p)

    def act(self, params: dict[str, Any], carry: Any, obs: jax.Array, dones: jax.Array,
            mask: jax.Array) -> tuple[Any, jax.Array]:
        """One greedy step -> (new carry, actions ``[P]`` int32)."""
        if self.algorithm == "pqn-vdn-rnn":
            return self._act_pqn(params, carry, obs, dones, mask)
        return self._act_pg(params, carry, obs, dones, mask)

    # ---------------------------------------------------------------- PPO family
    def _act_pg(self, params, carry, obs, dones, mask):
        module, v = self.spec.module, params["variables"]
        out = module.apply(v, carry, obs[None], dones[None], **params["constants"])
        carry, logits = out[0], out[1]  # [P, H], [1, P, A]
        normalised = jax.nn.log_softmax(logits, axis=-1)  # distrax Categorical(logits).logits
        masked = normalised + jnp.where(mask[None], 0.0, MASK_PENALTY)
        actions = jnp.argmax(jax.nn.log_softmax(masked, axis=-1), axis=-1)  # .mode()
        return carry, actions[0].astype(jnp.int32)

    # ---------------------------------------------------------------- PQN
    def _act_pqn(self, params, carry, obs, dones, mask):
        module, v = self.spec.module, params["variables"]

        def one_agent(c, o, d):  # c: ([1, H], [1, H]); o: [1, 1, D]; d: [1, 1]
            return module.apply(v, c, o, d, False)

        carry, q = jax.vmap(one_agent)(carry, obs[:, None, None, :], dones[:, None, None])
        q = q[:, 0, 0, :]  # [P, A]
        q = q - (1 - mask) * PQN_MASK_SCALE
        return carry, jnp.argmax(q, axis=-1).astype(jnp.int32)


def make_policy(spec: NetworkSpec) -> GreedyPolicy:
    """The greedy policy of a configured network (see :func:`alem_eval.networks.build_network`)."""
    return GreedyPolicy(spec)
