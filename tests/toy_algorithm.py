"""A toy fifth algorithm, written the way a researcher outside the package would add one:
a registry record, a network builder and a trainer, all here, registered with
``alem_eval.algorithms.registry.register`` (see CONTRACTS.md, "Adding a fifth algorithm").

* network: a feed-forward policy, ``Dense_0 -> relu -> Dense_1`` (logits), sized by its
  own key TOY_HIDDEN; the carry is a placeholder of width 1 (it has no recurrent core);
* policy and checkpoint: IPPO's (greedy categorical over the masked logits; a flax
  TrainState ``{step, params: {params: ...}, opt_state}``);
* trainer: REINFORCE with the per-step reward minus its batch mean as the advantage, one
  Adam step per update, on the released trainers' shared helpers (``alem_eval.trainers.common``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from alem_eval.envs.spaces import num_actions, obs_dim
from alem_eval.algorithms.registry import Algorithm, Ref
from alem_eval.algorithms.train_config import TrainConfig, common_train_fields
from alem_eval.algorithms.keyspec import TrainFamily, to_int
from alem_eval.model.networks import NetworkSpec, build_network, gru_carry
from alem_eval.trainers import common as tc

NAME = "toy-ff"


# ----------------------------------------------------------------------------------------
# Config: its own key and typed network sizes
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToyNetConfig:
    hidden: int


def toy_network_config(values: Mapping[str, Any]) -> ToyNetConfig:
    return ToyNetConfig(values["TOY_HIDDEN"])


def toy_train_config(run, family, where) -> TrainConfig:
    """Its hyperparameters are the ones every trainer reads (``UPDATE_EPOCHS`` unused)."""
    return TrainConfig(**common_train_fields(run, family, where))


RECORD = Algorithm(
    name=NAME,
    display_name="Toy-FF",
    family="Toy",
    aliases=("toy",),
    keys={"TOY_HIDDEN": (to_int, 8)},
    network_config=toy_network_config,
    train_family=TrainFamily("UPDATE_EPOCHS", "ANNEAL_LR", toy_train_config),
    network=Ref("tests.toy_algorithm:build_toy"),
    greedy_policy=Ref("alem_eval.model.policies:CATEGORICAL"),
    input_layer_key="TOY_HIDDEN",
    recurrent_key="TOY_HIDDEN",
    saved_layout=Ref("alem_eval.hub.released:TRAIN_STATE"),
    reload_keys=("NUM_COMM_CHANNELS", "ACTION_MASKING", "TOY_HIDDEN", "SHARED_REWARD", "ENV_NAME"),
    trainer_module="tests.toy_algorithm",
)


# ----------------------------------------------------------------------------------------
# Network
# ----------------------------------------------------------------------------------------
class ToyPolicy(nn.Module):
    action_dim: int
    hidden: int

    @nn.compact
    def __call__(self, carry, obs, dones):  # obs [T, B, D] -> (carry, logits [T, B, A])
        x = nn.relu(nn.Dense(self.hidden, name="Dense_0")(obs))
        return carry, nn.Dense(self.action_dim, name="Dense_1")(x)


def _init_variables(spec: NetworkSpec, key) -> dict[str, Any]:
    """Disk layout: the whole variables dict under ``params`` (as IPPO's)."""
    b = spec.num_agents
    obs = jnp.zeros((1, b, spec.input_dim), jnp.float32)
    return {"params": spec.module.init(key, spec.init_carry(b), obs, jnp.zeros((1, b), bool))}


def build_toy(cfg) -> NetworkSpec:
    """The registry's ``network``: (RunConfig) -> NetworkSpec."""
    p, nc = cfg.env.num_agents, cfg.env.num_comm_channels
    o, a = obs_dim(p, nc), num_actions(p, nc)
    return NetworkSpec(
        cfg.algorithm,
        ToyPolicy(a, cfg.network.hidden),
        None,
        p,
        o,
        o,
        a,
        1,
        make_carry=gru_carry,
        init_fn=_init_variables,
        policy_fn=lambda w: w["params"],
    )


# ----------------------------------------------------------------------------------------
# Trainer: make_train(run, tcfg) -> alem_eval.trainers.common.Trainer
# ----------------------------------------------------------------------------------------
class Envs(NamedTuple):
    state: Any
    obs: Any  # [E, A, D]
    log: Any  # alem_eval.trainers.common.EpisodeLog


def build_trainer(run, tcfg) -> tc.Trainer:
    spec = build_network(run)
    tenv = tc.training_env(run)
    E, A = tcfg.num_envs, tenv.num_agents
    N = E * A

    def logits_of(params, obs):  # [T, N, D] -> [T, N, num_actions]
        return spec.module.apply(params, spec.init_carry(N), obs, jnp.zeros(obs.shape[:2], bool))[1]

    def init(key, plan):
        k_net, k_run = jax.random.split(key)
        params = spec.init_variables(k_net)["params"]
        learner = tc.Learner.create(params, optax.adam(plan["lr"]))
        obs, states = tc.placeholder_worlds(tenv, E)
        envs = Envs(states, obs, tc.EpisodeLog.zeros(E, A))
        return tc.RunnerState(learner, envs, k_run, jnp.zeros((), jnp.int32), plan)

    def update(state, warm=False):
        learner, envs = state.learner, state.envs
        key, k_fresh = jax.random.split(state.key)
        obs, states, fresh = tc.begin_rollout(
            tenv, k_fresh, envs.obs, envs.state, state.updates == 0
        )

        def step(carry, _):
            obs, states, log, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            x = obs.reshape(N, -1)
            mask = tc.action_masks(tenv, states).reshape(N, -1)
            logits = tc.mask_logits(logits_of(learner.params, x[None])[0], mask)
            action = jax.random.categorical(k_act, logits)
            obs2, states2, reward, done, info = tc.step_envs(
                tenv, k_env, states, action.reshape(E, A), fresh
            )
            log, totals = tc.log_episodes(log, reward, done, info)
            return (obs2, states2, log, key), ((x, mask, action, reward.reshape(N)), totals)

        (obs, states, log, key), (batch, totals) = jax.lax.scan(
            step, (obs, states, envs.log, key), None, tcfg.num_steps
        )
        xs, masks, actions, rewards = batch

        def loss_fn(params):
            logits = tc.mask_logits(logits_of(params, xs), masks)
            advantage = rewards - rewards.mean()
            return -(tc.log_prob_of(logits, actions) * advantage).mean()

        loss, grads = jax.value_and_grad(loss_fn)(learner.params)
        learner = learner.apply_gradients(grads, optax.adam(state.plan["lr"]))
        state = state.replace(
            learner=learner, envs=Envs(states, obs, log), key=key, updates=state.updates + 1
        )
        return state, {**tc.sum_totals(totals), "loss/total": loss}

    return tc.Trainer(
        run.algorithm,
        run,
        tcfg,
        spec,
        tenv,
        init,
        update,
        released=lambda s: tc.released_tree(run, {"": s.learner}),
    )


def make_train(run, tcfg) -> tc.Trainer:
    return tc.cached_trainer(run, tcfg, build_trainer)
