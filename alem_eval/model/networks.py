"""The four released networks, written once, with param trees identical to upstream's.

Spec: ``shared/docs/upstream-format.md`` §1. Every submodule is named explicitly so the
trees match the released checkpoints exactly, including upstream's quirks:

* the GRU cell sits at ``ScannedRNN_0/GRUCell_1`` (upstream's reset path creates a
  param-less ``GRUCell_0`` first), and its width is ``GRU_HIDDEN_DIM`` (the carry width);
* PQN's LSTM sits at ``ScannedRNN_0/OptimizedLSTMCell_0`` and carries ``(c, h)``;
* HyperMARL's hypernetwork heads are numbered ``Dense_{k}`` in creation order.

Inputs are time-major: ``obs [T, B, D]``, ``dones [T, B]``; carries are ``[B, H]``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from flax.linen.initializers import constant, orthogonal

from alem_eval.envs.spaces import num_actions, obs_dim

from alem_eval.algorithms.registry import HyperMARLNetConfig, PPONetConfig, PQNNetConfig
from alem_eval.algorithms.config import RunConfig

SQRT2 = float(np.sqrt(2.0))


def activation_fn(name: str) -> Callable[[jax.Array], jax.Array]:
    table: dict[str, Callable[[jax.Array], jax.Array]] = {"tanh": nn.tanh, "relu": nn.relu}
    return table[name]


def _dense(features: int, gain: float, name: str) -> nn.Dense:
    return nn.Dense(features, kernel_init=orthogonal(gain), bias_init=constant(0.0), name=name)


# ----------------------------------------------------------------------------------------
# Recurrent cores
# ----------------------------------------------------------------------------------------
class ScannedGRU(nn.Module):
    """GRU scanned over time; the carry is zeroed where ``reset`` is true *before* the step."""

    @functools.partial(
        nn.scan, variable_broadcast="params", in_axes=0, out_axes=0, split_rngs={"params": False}
    )
    @nn.compact
    def __call__(self, carry: jax.Array, x: tuple[jax.Array, jax.Array]):
        ins, resets = x
        carry = jnp.where(resets[:, None], jnp.zeros_like(carry), carry)
        # flax 0.10.3 sizes the GRU from the carry; `features` is informational only.
        return nn.GRUCell(features=carry.shape[-1], name="GRUCell_1")(carry, ins)


class ScannedLSTM(nn.Module):
    """PQN's LSTM core: carry ``(c, h)``, both zeroed where ``reset`` is true."""

    @functools.partial(
        nn.scan, variable_broadcast="params", in_axes=0, out_axes=0, split_rngs={"params": False}
    )
    @nn.compact
    def __call__(self, carry: tuple[jax.Array, jax.Array], x: tuple[jax.Array, jax.Array]):
        ins, resets = x
        carry = jax.tree_util.tree_map(
            lambda c: jnp.where(resets[:, None], jnp.zeros_like(c), c), carry
        )
        cell = nn.OptimizedLSTMCell(features=carry[0].shape[-1], name="OptimizedLSTMCell_0")
        return cell(carry, ins)


def gru_carry(batch: int, hidden: int) -> jax.Array:
    return jnp.zeros((batch, hidden), jnp.float32)


def lstm_carry(batch: int, hidden: int) -> tuple[jax.Array, jax.Array]:
    return (jnp.zeros((batch, hidden), jnp.float32), jnp.zeros((batch, hidden), jnp.float32))


# ----------------------------------------------------------------------------------------
# IPPO (shared parameters) and MAPPO
# ----------------------------------------------------------------------------------------
class ActorCriticRNN(nn.Module):
    """IPPO: Dense_0 -> GRU -> actor (Dense_1, Dense_2) and critic (Dense_3, Dense_4)."""

    action_dim: int
    fc_dim: int
    gru_hidden: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, hidden, obs, dones):
        act = activation_fn(self.activation)
        x = act(_dense(self.fc_dim, SQRT2, "Dense_0")(obs))
        hidden, x = ScannedGRU(name="ScannedRNN_0")(hidden, (x, dones))
        a = act(_dense(self.gru_hidden, 2.0, "Dense_1")(x))
        logits = _dense(self.action_dim, 0.01, "Dense_2")(a)
        c = act(_dense(self.fc_dim, 2.0, "Dense_3")(x))
        value = _dense(1, 1.0, "Dense_4")(c)
        return hidden, logits, jnp.squeeze(value, -1)


class ActorRNN(nn.Module):
    """MAPPO actor: Dense_0 -> GRU -> Dense_1 -> Dense_2 (logits)."""

    action_dim: int
    fc_dim: int
    gru_hidden: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, hidden, obs, dones):
        act = activation_fn(self.activation)
        x = act(_dense(self.fc_dim, SQRT2, "Dense_0")(obs))
        hidden, x = ScannedGRU(name="ScannedRNN_0")(hidden, (x, dones))
        a = act(_dense(self.gru_hidden, 2.0, "Dense_1")(x))
        return hidden, _dense(self.action_dim, 0.01, "Dense_2")(a)


class CriticRNN(nn.Module):
    """MAPPO centralised critic on the world state (all agents' obs concatenated)."""

    fc_dim: int
    gru_hidden: int
    activation: str = "tanh"

    @nn.compact
    def __call__(self, hidden, world_state, dones):
        act = activation_fn(self.activation)
        x = act(_dense(self.fc_dim, SQRT2, "Dense_0")(world_state))
        hidden, x = ScannedGRU(name="ScannedRNN_0")(hidden, (x, dones))
        c = act(_dense(self.gru_hidden, 2.0, "Dense_1")(x))
        return hidden, jnp.squeeze(_dense(1, 1.0, "Dense_2")(c), -1)


# ----------------------------------------------------------------------------------------
# HyperMARL
# ----------------------------------------------------------------------------------------
def _batched_orthogonal(gain: float, fan_in: int, fan_out: int):
    """Init a hypernet weight head: a batch of orthogonal [fan_in, fan_out] matrices."""

    def init(key, shape, dtype=jnp.float32):
        keys = jax.random.split(key, shape[0])
        mats = jax.vmap(orthogonal(gain), in_axes=(0, None, None))(keys, (fan_in, fan_out), dtype)
        return mats.reshape(shape)

    return init


class MLPHyperNetwork(nn.Module):
    """Generates (weights, biases) of a target MLP from agent embeddings.

    For each target layer i: [hidden stack -> weight head], then [hidden stack -> bias
    head], auto-numbered ``Dense_k`` in that creation order.
    """

    layer_dims: tuple[tuple[int, int], ...]
    final_gain: float
    hidden_dims: tuple[int, ...]
    init_scale: float
    use_bias: bool

    @nn.compact
    def __call__(self, emb):
        counter = iter(range(10_000))

        def dense(features, kernel_init):
            return nn.Dense(
                features,
                use_bias=self.use_bias,
                kernel_init=kernel_init,
                bias_init=constant(0.0),
                name=f"Dense_{next(counter)}",
            )

        weights, biases = [], []
        for i, (fan_in, fan_out) in enumerate(self.layer_dims):
            gain = self.final_gain if i == len(self.layer_dims) - 1 else self.init_scale
            h = emb
            for width in self.hidden_dims:
                h = nn.relu(dense(width, orthogonal(SQRT2))(h))
            weights.append(dense(fan_in * fan_out, _batched_orthogonal(gain, fan_in, fan_out))(h))
            h = emb
            for width in self.hidden_dims:
                h = nn.relu(dense(width, orthogonal(SQRT2))(h))
            biases.append(dense(fan_out, nn.initializers.zeros)(h))
        return tuple(weights), tuple(biases)


def apply_generated_mlp(x, weights, biases, layer_dims, activation: str):
    """Apply one agent's generated MLP (hidden layers activated, final layer linear)."""
    act = activation_fn(activation)
    for (fan_in, fan_out), w, b in zip(layer_dims[:-1], weights[:-1], biases[:-1]):
        x = act(jnp.matmul(x, w.reshape(fan_in, fan_out)) + b)
    fan_in, fan_out = layer_dims[-1]
    return jnp.matmul(x, weights[-1].reshape(fan_in, fan_out)) + biases[-1]


class HyperActorCriticRNN(nn.Module):
    """HyperMARL-IPPO: shared trunk, per-agent actor/critic heads generated by hypernets.

    The input carries the agent-id one-hot in its last ``num_agents`` columns.
    ``heads=None`` computes the generated weights; passing precomputed heads (from
    :meth:`generate_heads`) skips that work (it does not depend on the observation).
    """

    action_dim: int
    num_agents: int
    cfg: HyperMARLNetConfig

    def setup(self):
        c = self.cfg
        if c.use_agent_id_embeddings:
            self.agent_embeddings = self.param(
                "agent_embeddings", orthogonal(c.init_scale), (self.num_agents, c.embedding_dim)
            )
        common = dict(
            hidden_dims=tuple(c.hidden_dims), init_scale=c.init_scale, use_bias=c.use_bias
        )
        self.actor_hypernet = MLPHyperNetwork(self.actor_dims, 0.01, **common)
        self.critic_hypernet = MLPHyperNetwork(self.critic_dims, 1.0, **common)

    @property
    def actor_dims(self):
        h = self.cfg.gru_hidden
        return ((h, h), (h, self.action_dim))

    @property
    def critic_dims(self):
        return ((self.cfg.gru_hidden, self.cfg.fc_dim), (self.cfg.fc_dim, 1))

    def generate_heads(self):
        emb = (
            self.agent_embeddings
            if self.cfg.use_agent_id_embeddings
            else jnp.eye(self.num_agents, dtype=jnp.float32)
        )
        return self.actor_hypernet(emb), self.critic_hypernet(emb)

    @nn.compact
    def __call__(self, hidden, obs_with_id, dones, heads=None):
        c = self.cfg
        agent_id = jnp.argmax(obs_with_id[..., -self.num_agents :], axis=-1)
        obs = obs_with_id[..., : -self.num_agents]
        x = activation_fn(c.activation)(_dense(c.fc_dim, SQRT2, "Dense_0")(obs))
        hidden, x = ScannedGRU(name="ScannedRNN_0")(hidden, (x, dones))
        (aw, ab), (cw, cb) = heads if heads is not None else self.generate_heads()

        def per_agent(w, b, dims):
            # every agent's MLP on every row, then each row keeps its own agent's output
            out = jax.vmap(apply_generated_mlp, in_axes=(None, 0, 0, None, None))(
                x, w, b, dims, c.activation
            )  # [A, T, B, out]
            return jnp.take_along_axis(out, agent_id[None, ..., None], axis=0)[0]

        logits = per_agent(aw, ab, self.actor_dims)
        value = per_agent(cw, cb, self.critic_dims)
        return hidden, logits, jnp.squeeze(value, -1)


# ----------------------------------------------------------------------------------------
# PQN-VDN
# ----------------------------------------------------------------------------------------
class QNetwork(nn.Module):
    """PQN: BatchNorm_0 (a dummy unless norm_input), [Dense_k -> norm -> relu] x L, LSTM, head."""

    action_dim: int
    cfg: PQNNetConfig
    norm_input: bool = False  # upstream's eval network never sets it (spec §1.5)

    @nn.compact
    def __call__(self, hidden, x, dones, train: bool = False):
        c = self.cfg
        normed = nn.BatchNorm(use_running_average=not train, name="BatchNorm_0")(x)
        if self.norm_input:
            x = normed
        for k in range(c.num_layers):
            x = nn.Dense(c.hidden_size, name=f"Dense_{k}")(x)
            if c.norm_type == "layer_norm":
                x = nn.LayerNorm(name=f"LayerNorm_{k}")(x)
            elif c.norm_type == "batch_norm":
                x = nn.BatchNorm(use_running_average=not train, name=f"BatchNorm_{k + 1}")(x)
            x = nn.relu(x)
        hidden, x = ScannedLSTM(name="ScannedRNN_0")(hidden, (x, dones))
        if c.dueling:
            adv = nn.Dense(self.action_dim, name=f"Dense_{c.num_layers}")(x)
            val = nn.Dense(1, name=f"Dense_{c.num_layers + 1}")(x)
            return hidden, val + adv - jnp.mean(adv, axis=-1, keepdims=True)
        return hidden, nn.Dense(self.action_dim, name=f"Dense_{c.num_layers}")(x)


# ----------------------------------------------------------------------------------------
# One description per configured run
# ----------------------------------------------------------------------------------------
def _nested_params(spec: NetworkSpec, key: jax.Array) -> dict[str, Any]:
    """IPPO / HyperMARL disk layout: the whole variables dict under ``params``."""
    b = spec.num_agents
    obs = jnp.zeros((1, b, spec.input_dim), jnp.float32)
    return {"params": spec.module.init(key, spec.init_carry(b), obs, jnp.zeros((1, b), bool))}


def _actor_critic(spec: NetworkSpec, key: jax.Array) -> dict[str, Any]:
    """MAPPO disk layout: ``{"actor": {"params": v}, "critic": {"params": v}}``."""
    b = spec.num_agents
    dones = jnp.zeros((1, b), bool)
    ka, kc = jax.random.split(key)
    obs = jnp.zeros((1, b, spec.input_dim), jnp.float32)
    actor = spec.module.init(ka, spec.init_carry(b), obs, dones)
    world_state = jnp.zeros((1, b, spec.obs_dim * spec.num_agents), jnp.float32)
    assert spec.critic is not None
    critic = spec.critic.init(kc, spec.init_carry(b), world_state, dones)
    return {"actor": {"params": actor}, "critic": {"params": critic}}


def _params_and_stats(spec: NetworkSpec, key: jax.Array) -> dict[str, Any]:
    """PQN disk layout: inner ``params`` and ``batch_stats`` side by side."""
    b = spec.num_agents
    obs = jnp.zeros((1, b, spec.input_dim), jnp.float32)
    v = spec.module.init(key, spec.init_carry(b), obs, jnp.zeros((1, b), bool), train=False)
    return {"params": v["params"], "batch_stats": v["batch_stats"]}


def _no_constants(spec: NetworkSpec, variables: Any) -> dict[str, Any]:
    return {}


def _hypermarl_heads(spec: NetworkSpec, variables: Any) -> dict[str, Any]:
    return {"heads": spec.module.apply(variables, method="generate_heads")}


@dataclass(frozen=True)
class NetworkSpec:
    """The configured network of one run: modules, input widths and the saved-tree layout.

    Built by the algorithm's builder below (the registry's ``network`` field); the
    behaviour that differs by algorithm is carried as functions, never as name checks.
    """

    algorithm: str
    module: nn.Module  # the policy network (MAPPO: the actor)
    critic: nn.Module | None  # MAPPO's separate critic, else None
    num_agents: int
    obs_dim: int  # raw per-agent observation width
    input_dim: int  # policy input width (obs + id one-hot for HyperMARL and PQN)
    num_actions: int
    hidden: int  # recurrent width
    # (batch, hidden) -> zero carry
    make_carry: Callable[[int, int], Any] = field(repr=False, compare=False)
    init_fn: Callable[[NetworkSpec, jax.Array], dict[str, Any]] = field(repr=False, compare=False)
    # disk-layout weights -> the variables module.apply takes
    policy_fn: Callable[[dict[str, Any]], Any] = field(repr=False, compare=False)
    constants_fn: Callable[[NetworkSpec, Any], dict[str, Any]] = field(
        default=_no_constants, repr=False, compare=False
    )

    @property
    def appends_agent_id(self) -> bool:
        return self.input_dim != self.obs_dim

    def init_carry(self, batch: int):
        return self.make_carry(batch, self.hidden)

    def init_variables(self, key: jax.Array) -> dict[str, Any]:
        """Fresh variables in the released on-disk layout (weights only, no optimiser)."""
        return self.init_fn(self, key)

    def expected_tree(self) -> dict[str, Any]:
        """``jax.eval_shape`` of :meth:`init_variables`: ShapeDtypeStructs, nothing allocated.
        Traced once per distinct network (equal specs share it; each call gets its own
        containers): tracing an initialiser costs ~0.2 s, and a stack of many checkpoints
        of a few networks asked it once per checkpoint on every evaluation call."""
        return jax.tree_util.tree_map(lambda x: x, _expected_tree(self))

    def num_params(self) -> int:
        return int(sum(np.prod(x.shape) for x in jax.tree_util.tree_leaves(self.expected_tree())))

    def apply_constants(self, variables: Any) -> dict[str, Any]:
        """Keyword arguments of ``module.apply`` that depend on the parameters only, to
        compute once per parameter set rather than on every forward pass: HyperMARL's
        generated per-agent heads (``heads=``); empty for the other algorithms."""
        return self.constants_fn(self, variables)

    def policy_variables(self, weights: dict[str, Any]) -> dict[str, Any]:
        """The flax variables ``module.apply`` needs, from a weights tree in disk layout."""
        return self.policy_fn(weights)


@functools.lru_cache(maxsize=64)
def _expected_tree(spec: NetworkSpec) -> dict[str, Any]:
    return jax.eval_shape(spec.init_variables, jax.random.PRNGKey(0))


def _sizes(cfg: RunConfig, *, with_id: bool) -> tuple[int, int, int, int]:
    """(agents, obs width, input width, actions) of a run's env."""
    n_agents, nc = cfg.env.num_agents, cfg.env.num_comm_channels
    o = obs_dim(n_agents, nc)
    return n_agents, o, o + (n_agents if with_id else 0), num_actions(n_agents, nc)


def build_ippo(cfg: RunConfig) -> NetworkSpec:
    net = cfg.network
    assert isinstance(net, PPONetConfig)
    p, o, i, a = _sizes(cfg, with_id=False)
    return NetworkSpec(
        cfg.algorithm,
        ActorCriticRNN(a, net.fc_dim, net.gru_hidden, net.activation),
        None,
        p,
        o,
        i,
        a,
        net.gru_hidden,
        make_carry=gru_carry,
        init_fn=_nested_params,
        policy_fn=lambda w: w["params"],
    )


def build_mappo(cfg: RunConfig) -> NetworkSpec:
    net = cfg.network
    assert isinstance(net, PPONetConfig)
    p, o, i, a = _sizes(cfg, with_id=False)
    return NetworkSpec(
        cfg.algorithm,
        ActorRNN(a, net.fc_dim, net.gru_hidden, net.activation),
        CriticRNN(net.fc_dim, net.gru_hidden, net.activation),
        p,
        o,
        i,
        a,
        net.gru_hidden,
        make_carry=gru_carry,
        init_fn=_actor_critic,
        policy_fn=lambda w: w["actor"]["params"],
    )


def build_hypermarl(cfg: RunConfig) -> NetworkSpec:
    net = cfg.network
    assert isinstance(net, HyperMARLNetConfig)
    p, o, i, a = _sizes(cfg, with_id=True)
    return NetworkSpec(
        cfg.algorithm,
        HyperActorCriticRNN(a, p, net),
        None,
        p,
        o,
        i,
        a,
        net.gru_hidden,
        make_carry=gru_carry,
        init_fn=_nested_params,
        policy_fn=lambda w: w["params"],
        constants_fn=_hypermarl_heads,
    )


def build_pqn(cfg: RunConfig) -> NetworkSpec:
    net = cfg.network
    assert isinstance(net, PQNNetConfig)
    p, o, i, a = _sizes(cfg, with_id=True)
    return NetworkSpec(
        cfg.algorithm,
        QNetwork(a, net),
        None,
        p,
        o,
        i,
        a,
        net.hidden_size,
        make_carry=lstm_carry,
        init_fn=_params_and_stats,
        policy_fn=lambda w: {"params": w["params"], "batch_stats": w["batch_stats"]},
    )


def build_network(cfg: RunConfig) -> NetworkSpec:
    """The network a resolved run config describes (the registry's builder), sized from it."""
    from alem_eval.algorithms.registry import get_algorithm

    return get_algorithm(cfg.algorithm).network(cfg)
