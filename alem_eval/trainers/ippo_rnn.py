"""IPPO-RNN: independent PPO with one GRU actor-critic shared by all agents.

Algorithm facts kept from upstream (``baselines/ippo_rnn.py``, spec §1.1, §5):
* actors = agents x envs, each with its own GRU carry, reset where the previous step ended
  an episode; one shared network (``alem_eval.model.networks.ActorCriticRNN``);
* masked categorical policy (logits + -1e10 on unavailable actions) when ACTION_MASKING,
  the same mask reused in the loss;
* GAE on per-agent rewards with the episode-done flag of each step, bootstrapped from the
  value of the observation after the rollout;
* UPDATE_EPOCHS x NUM_MINIBATCHES minibatches of whole actor sequences (initial carry =
  the carry at the start of the rollout); advantages standardised per minibatch; clipped
  surrogate + 0.5 x clipped value loss x VF_COEF - ENT_COEF x entropy;
* Adam(eps 1e-5) behind clip_by_global_norm(MAX_GRAD_NORM); with ANNEAL_LR the learning
  rate decays linearly to 0 over the updates (optional LR_WARMUP);
* the training env applies NUM_AGENTS and the SOFT_SPECIALIZATION / *_EFFICIENCY keys
  (``alem_eval.envs.training``);
* saved: a flax TrainState ``{step, params: {params: ...}, opt_state}``.

With frozen partners (``alem-eval train CELL --partners ...``, :mod:`alem_eval.trainers.partners`):
the network still runs on every actor, the partners' greedy actions replace its samples on
the partner slots, and the loss (every mean of it, and the advantage standardisation)
runs over the focal's slots only (``Transition.focal``); the partners' weights are an
argument of the update, outside the optimiser state.

Sections: 1. config  2. maths  3. rollout  4. update  5. make_train  6. entry point.
"""

from __future__ import annotations

# ========================================================================================
# 1. Config
# ========================================================================================
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import PPOTrainConfig
from alem_eval.model.networks import build_network

from alem_eval.trainers.common import (
    EpisodeLog,
    Learner,
    RunnerState,
    Trainer,
    action_masks,
    append_agent_id,
    begin_rollout,
    cached_trainer,
    entropy_of,
    epochs_over_minibatches,
    gae,
    log_episodes,
    log_prob_of,
    mask_logits,
    normalize_advantages,
    placeholder_worlds,
    ppo_actor_loss,
    ppo_optimizer,
    ppo_value_loss,
    released_tree,
    step_envs,
    sum_totals,
    training_env,
    weighted_mean,
)
from alem_eval.trainers.partners import Partners, Team, focal_weight, mix_actions

ALGORITHM = "ippo-rnn"
# Hyperparameters: alem_eval.algorithms.train_config.PPOTrainConfig, built by
# build_train_config() from the resolved run config (upstream yaml defaults, spec §5).

# ========================================================================================
# 2. Maths: gae, ppo_actor_loss, ppo_value_loss (alem_eval.trainers.common), and the PPO loss
# ========================================================================================
__all__ = ["ALGORITHM", "gae", "ppo_actor_loss", "ppo_value_loss", "ppo_loss", "make_train"]


class Transition(NamedTuple):
    """One rollout step of every actor (time-major once scanned: ``[T, N, ...]``)."""

    obs: jax.Array  # [N, D] policy input
    reset: jax.Array  # [N] the done flag fed to the GRU with this obs
    action: jax.Array  # [N]
    log_prob: jax.Array  # [N]
    value: jax.Array  # [N]
    reward: jax.Array  # [N]
    done: jax.Array  # [N] this step ended the episode
    mask: jax.Array  # [N, num_actions] available actions
    focal: jax.Array | None = None  # [N] the focal's slots (with partners; None: every slot)


def ppo_loss(logits, value, tr: Transition, advantages, targets, tcfg: PPOTrainConfig):
    """Total PPO loss of one minibatch (shared actor-critic) and its parts."""
    w = tr.focal  # None: every slot; with partners only the focal's enter the loss
    logits = mask_logits(logits, tr.mask)
    log_prob = log_prob_of(logits, tr.action)
    actor, aux = ppo_actor_loss(
        log_prob, tr.log_prob, normalize_advantages(advantages, w), clip_eps=tcfg.clip_eps, weight=w
    )
    critic = ppo_value_loss(value, tr.value, targets, clip_eps=tcfg.clip_eps, weight=w)
    entropy = weighted_mean(entropy_of(logits), w)
    total = actor + tcfg.vf_coef * critic - tcfg.ent_coef * entropy
    return total, {
        "loss/total": total,
        "loss/actor": actor,
        "loss/value": critic,
        "loss/entropy": entropy,
        "loss/approx_kl": aux["approx_kl"],
        "loss/clip_frac": aux["clip_frac"],
    }


# ========================================================================================
# 3. Rollout
# ========================================================================================
class Envs(NamedTuple):
    """Per-env arrays (leading axis NUM_ENVS)."""

    state: Any
    obs: jax.Array  # [E, A, D]
    done: jax.Array  # [E, A] done flags of the last step (GRU resets)
    hidden: jax.Array  # [E, A, H]
    log: EpisodeLog
    team: Team | None = None  # with partners: who plays the other slots


def make_rollout(spec, tenv, tcfg: PPOTrainConfig, partners: Partners | None = None):
    E, A = tcfg.num_envs, tenv.num_agents
    N = E * A

    def policy_input(obs):  # [E, A, D] -> [N, input_dim]
        return (append_agent_id(obs) if spec.appends_agent_id else obs).reshape(N, -1)

    def rollout(params, envs: Envs, key, first, frozen=None):
        consts = spec.apply_constants(params)  # HyperMARL: heads generated once per rollout
        key, k_fresh = jax.random.split(key)
        obs, states, fresh = begin_rollout(tenv, k_fresh, envs.obs, envs.state, first)
        envs = envs._replace(obs=obs, state=states)

        def step(carry, _):
            envs, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            obs, reset = policy_input(envs.obs), envs.done.reshape(N)
            hidden, logits, value = spec.module.apply(
                params, envs.hidden.reshape(N, -1), obs[None], reset[None], **consts
            )
            mask = action_masks(tenv, envs.state).reshape(N, -1)
            logits = mask_logits(logits[0], mask)
            action = jax.random.categorical(k_act, logits)
            team = envs.team
            if partners is not None:  # the partners' actions on their slots
                k_env, k_draw = jax.random.split(k_env)
                team, theirs = partners.act(
                    frozen, team, envs.obs, envs.done, mask.reshape(E, A, -1)
                )
                action = mix_actions(team, action.reshape(E, A), theirs).reshape(N)
            obs2, state2, reward, done, info = step_envs(
                tenv, k_env, envs.state, action.reshape(E, A), fresh
            )
            log, totals = log_episodes(envs.log, reward, done, info)
            tr = Transition(
                obs,
                reset,
                action,
                log_prob_of(logits, action),
                value[0],
                reward.reshape(N),
                jnp.repeat(done, A),
                mask,
                focal_weight(team),
            )
            if partners is not None:
                team = partners.redraw(k_draw, team, done)
            done_agents = jnp.broadcast_to(done[:, None], (E, A))
            envs = Envs(state2, obs2, done_agents, hidden.reshape(E, A, -1), log, team)
            return (envs, key), (tr, totals)

        (envs, key), (traj, totals) = jax.lax.scan(step, (envs, key), None, tcfg.num_steps)
        _, _, last_value = spec.module.apply(
            params,
            envs.hidden.reshape(N, -1),
            policy_input(envs.obs)[None],
            envs.done.reshape(N)[None],
            **consts,
        )
        return envs, key, traj, last_value[0], sum_totals(totals)

    return rollout


# ========================================================================================
# 4. Update
# ========================================================================================
def make_update(spec, tenv, tcfg: PPOTrainConfig, partners: Partners | None = None):
    N = tcfg.num_envs * tenv.num_agents
    rollout = make_rollout(spec, tenv, tcfg, partners)

    def update(state: RunnerState, warm=False, frozen=None):  # no warm-up in PPO
        learner, key = state.learner, state.key
        h0 = state.envs.hidden.reshape(N, -1)
        envs, key, traj, last_value, totals = rollout(
            learner.params, state.envs, key, state.updates == 0, frozen
        )
        adv, targets = gae(
            traj.reward, traj.value, traj.done, last_value, gamma=tcfg.gamma, lam=tcfg.gae_lambda
        )
        tx = ppo_optimizer(tcfg, state.plan)

        def minibatch_step(learner: Learner, mb):
            h, (tr, a, t) = mb

            def loss_fn(params):
                _, logits, value = spec.module.apply(params, h, tr.obs, tr.reset)
                return ppo_loss(logits, value, tr, a, t, tcfg)

            (_, metrics), grads = jax.value_and_grad(loss_fn, has_aux=True)(learner.params)
            return learner.apply_gradients(grads, tx), metrics

        key, k_upd = jax.random.split(key)
        learner, losses = epochs_over_minibatches(
            k_upd,
            learner,
            ((h0, 0), ((traj, adv, targets), 1)),
            N,
            num_epochs=tcfg.num_epochs,
            num_minibatches=tcfg.num_minibatches,
            step=minibatch_step,
        )
        state = state.replace(learner=learner, envs=envs, key=key, updates=state.updates + 1)
        return state, {**totals, **losses}

    return update


# ========================================================================================
# 5. make_train
# ========================================================================================
def build_trainer(
    run: RunConfig, tcfg: PPOTrainConfig, partners: Partners | None = None
) -> Trainer:
    spec = build_network(run)
    tenv = training_env(run)
    E, A = tcfg.num_envs, tenv.num_agents

    def init(key, plan):
        k_net, k_run = jax.random.split(key)
        params = spec.init_variables(k_net)["params"]  # the variables dict {"params": ...}
        learner = Learner.create(params, ppo_optimizer(tcfg, plan))
        obs, states = placeholder_worlds(tenv, E)  # real worlds arrive with the first rollout
        envs = Envs(
            states,
            obs,
            jnp.zeros((E, A), bool),
            jnp.zeros((E, A, spec.hidden), jnp.float32),
            EpisodeLog.zeros(E, A),
            None if partners is None else partners.init_team(jax.random.fold_in(k_run, 1), E),
        )
        return RunnerState(learner, envs, k_run, jnp.zeros((), jnp.int32), plan)

    return Trainer(
        run.algorithm,
        run,
        tcfg,
        spec,
        tenv,
        init,
        make_update(spec, tenv, tcfg, partners),
        released=lambda s: released_tree(run, {"": s.learner}),
        partners=partners,
    )


def make_train(run: RunConfig, tcfg: PPOTrainConfig, partners: Partners | None = None) -> Trainer:
    """The (cached) trainer for this config (``partners``: frozen partners in the other
    slots); see :func:`alem_eval.trainers.driver.train_cells`."""
    return cached_trainer(run, tcfg, build_trainer, partners)


# ========================================================================================
# 6. Entry point: ``python -m alem_eval.trainers.ippo_rnn CELL [options]`` = ``alem-eval train CELL``
# ========================================================================================
if __name__ == "__main__":
    from alem_eval.cli.app import run

    run(["train", *sys.argv[1:]])
