"""MAPPO-RNN: a GRU actor shared by all agents and a centralised GRU critic.

Algorithm facts kept from upstream (``baselines/mappo_rnn.py``, spec §1.3, §5):
* the critic sees the *world state*: all agents' raw observations concatenated in agent
  order, the same vector for every agent (no agent id, no per-agent roll); it still runs
  one critic stream (and GRU carry) per actor, as upstream;
* actor and critic are separate networks (``alem_eval.model.networks.ActorRNN`` /
  ``CriticRNN``) with separate optimisers of the same kind (clip_by_global_norm + Adam
  eps 1e-5, linearly annealed with ANNEAL_LR), updated on the same minibatches;
* actor loss = clipped surrogate - ENT_COEF x entropy (masked policy); critic loss =
  VF_COEF x 0.5 x clipped value loss; CLIP_EPS is divided by the agent count when
  SCALE_CLIP_EPS;
* GAE, minibatching over whole actor sequences and action masking as in IPPO;
* the training env ignores NUM_AGENTS and the SOFT_SPECIALIZATION / *_EFFICIENCY keys;
* saved: ``{"actor": TrainState, "critic": TrainState}``.

With frozen partners (``alem-eval train CELL --partners ...``, :mod:`alem_eval.trainers.partners`):
the partners' greedy actions replace the actor's samples on the partner slots. The
centralised critic still sees the whole world state (every slot's observation, the
partners' included: it is the state the focal acts in) and still runs one stream per
slot, but only the focal's slots enter either loss: the actor's surrogate and entropy,
the advantage standardisation and the critic's value targets are all means over the
focal's slots (``Transition.focal``); the partner slots' values and advantages are
computed and dropped. GAE uses the focal slot's own rewards (per agent, or the team's
with SHARED_REWARD). The partners' weights are an argument of the update, outside both
optimiser states.

The world state is not stored per step (it would triple the rollout memory): minibatches
rebuild it from the stored observations of each actor's env.

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

ALGORITHM = "mappo-rnn"
# Hyperparameters: alem_eval.algorithms.train_config.PPOTrainConfig (upstream mappo_rnn.yaml,
# spec §5).

# ========================================================================================
# 2. Maths: gae, ppo_actor_loss, ppo_value_loss (alem_eval.trainers.common); world state; losses
# ========================================================================================
__all__ = ["ALGORITHM", "gae", "ppo_actor_loss", "ppo_value_loss", "world_state", "make_train"]


def world_state(obs):
    """``[..., E, A, D] -> [..., E * A, A * D]``: every agent of an env gets the
    concatenation of all its agents' observations (agent order)."""
    *lead, e, a, d = obs.shape
    joint = obs.reshape(*lead, e, 1, a * d)
    return jnp.broadcast_to(joint, (*lead, e, a, a * d)).reshape(*lead, e * a, a * d)


class Transition(NamedTuple):
    obs: jax.Array  # [N, D] actor input
    reset: jax.Array  # [N]
    action: jax.Array  # [N]
    log_prob: jax.Array  # [N]
    value: jax.Array  # [N]
    reward: jax.Array  # [N]
    done: jax.Array  # [N]
    mask: jax.Array  # [N, num_actions]
    focal: jax.Array | None = None  # [N] the focal's slots (with partners; None: every slot)


def actor_loss(logits, tr: Transition, advantages, tcfg: PPOTrainConfig):
    w = tr.focal  # None: every slot; with partners only the focal's enter the loss
    logits = mask_logits(logits, tr.mask)
    loss, aux = ppo_actor_loss(
        log_prob_of(logits, tr.action),
        tr.log_prob,
        normalize_advantages(advantages, w),
        clip_eps=tcfg.clip_eps,
        weight=w,
    )
    entropy = weighted_mean(entropy_of(logits), w)
    return loss - tcfg.ent_coef * entropy, {
        "loss/actor": loss,
        "loss/entropy": entropy,
        "loss/approx_kl": aux["approx_kl"],
        "loss/clip_frac": aux["clip_frac"],
    }


def critic_loss(value, tr: Transition, targets, tcfg: PPOTrainConfig):
    loss = ppo_value_loss(value, tr.value, targets, clip_eps=tcfg.clip_eps, weight=tr.focal)
    return tcfg.vf_coef * loss, {"loss/value": loss}


# ========================================================================================
# 3. Rollout
# ========================================================================================
class Envs(NamedTuple):
    state: Any
    obs: jax.Array  # [E, A, D]
    done: jax.Array  # [E, A]
    actor_hidden: jax.Array  # [E, A, H]
    critic_hidden: jax.Array  # [E, A, H]
    log: EpisodeLog
    team: Team | None = None  # with partners: who plays the other slots


def make_rollout(spec, tenv, tcfg: PPOTrainConfig, partners: Partners | None = None):
    E, A = tcfg.num_envs, tenv.num_agents
    N = E * A

    def rollout(actor_params, critic_params, envs: Envs, key, first, frozen=None):
        key, k_fresh = jax.random.split(key)
        obs, states, fresh = begin_rollout(tenv, k_fresh, envs.obs, envs.state, first)
        envs = envs._replace(obs=obs, state=states)

        def step(carry, _):
            envs, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            obs, reset = envs.obs.reshape(N, -1), envs.done.reshape(N)
            a_hidden, logits = spec.module.apply(
                actor_params, envs.actor_hidden.reshape(N, -1), obs[None], reset[None]
            )
            c_hidden, value = spec.critic.apply(
                critic_params,
                envs.critic_hidden.reshape(N, -1),
                world_state(envs.obs)[None],
                reset[None],
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
            envs = Envs(
                state2,
                obs2,
                jnp.broadcast_to(done[:, None], (E, A)),
                a_hidden.reshape(E, A, -1),
                c_hidden.reshape(E, A, -1),
                log,
                team,
            )
            return (envs, key), (tr, totals)

        (envs, key), (traj, totals) = jax.lax.scan(step, (envs, key), None, tcfg.num_steps)
        _, last_value = spec.critic.apply(
            critic_params,
            envs.critic_hidden.reshape(N, -1),
            world_state(envs.obs)[None],
            envs.done.reshape(N)[None],
        )
        return envs, key, traj, last_value[0], sum_totals(totals)

    return rollout


# ========================================================================================
# 4. Update
# ========================================================================================
def make_update(spec, tenv, tcfg: PPOTrainConfig, partners: Partners | None = None):
    E, A = tcfg.num_envs, tenv.num_agents
    N = E * A
    rollout = make_rollout(spec, tenv, tcfg, partners)

    def update(state: RunnerState, warm=False, frozen=None):  # no warm-up in PPO
        (actor, critic), key = state.learner, state.key
        h0 = (state.envs.actor_hidden.reshape(N, -1), state.envs.critic_hidden.reshape(N, -1))
        envs, key, traj, last_value, totals = rollout(
            actor.params, critic.params, state.envs, key, state.updates == 0, frozen
        )
        adv, targets = gae(
            traj.reward, traj.value, traj.done, last_value, gamma=tcfg.gamma, lam=tcfg.gae_lambda
        )
        tx = ppo_optimizer(tcfg, state.plan)
        # [T, E, A*D]: each env's joint observation, indexed by actor // A in minibatches
        joint_obs = traj.obs.reshape(tcfg.num_steps, E, -1)

        def minibatch_step(learners, mb):
            actor, critic = learners
            (ha, hc, idx), (tr, a, t) = mb

            def a_loss(params):
                _, logits = spec.module.apply(params, ha, tr.obs, tr.reset)
                return actor_loss(logits, tr, a, tcfg)

            def c_loss(params):
                ws = joint_obs[:, idx // A]  # [T, mb, A*D]
                _, value = spec.critic.apply(params, hc, ws, tr.reset)
                return critic_loss(value, tr, t, tcfg)

            (la, ma), ga = jax.value_and_grad(a_loss, has_aux=True)(actor.params)
            (lc, mc), gc = jax.value_and_grad(c_loss, has_aux=True)(critic.params)
            learners = (actor.apply_gradients(ga, tx), critic.apply_gradients(gc, tx))
            return learners, {"loss/total": la + lc, **ma, **mc}

        key, k_upd = jax.random.split(key)
        learners, losses = epochs_over_minibatches(
            k_upd,
            (actor, critic),
            (((*h0, jnp.arange(N)), 0), ((traj, adv, targets), 1)),
            N,
            num_epochs=tcfg.num_epochs,
            num_minibatches=tcfg.num_minibatches,
            step=minibatch_step,
        )
        state = state.replace(learner=learners, envs=envs, key=key, updates=state.updates + 1)
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
        variables = spec.init_variables(k_net)  # {"actor": {"params": v}, "critic": {...}}
        tx = ppo_optimizer(tcfg, plan)
        learners = (
            Learner.create(variables["actor"]["params"], tx),
            Learner.create(variables["critic"]["params"], tx),
        )
        obs, states = placeholder_worlds(tenv, E)
        zeros_h = jnp.zeros((E, A, spec.hidden), jnp.float32)
        team = None if partners is None else partners.init_team(jax.random.fold_in(k_run, 1), E)
        envs = Envs(
            states, obs, jnp.zeros((E, A), bool), zeros_h, zeros_h, EpisodeLog.zeros(E, A), team
        )
        return RunnerState(learners, envs, k_run, jnp.zeros((), jnp.int32), plan)

    def released(state):
        actor, critic = state.learner
        return released_tree(run, {"actor": actor, "critic": critic})

    update = make_update(spec, tenv, tcfg, partners)
    return Trainer(ALGORITHM, run, tcfg, spec, tenv, init, update, released, partners=partners)


def make_train(run: RunConfig, tcfg: PPOTrainConfig, partners: Partners | None = None) -> Trainer:
    """The (cached) trainer for this config (``partners``: frozen partners in the other
    slots); see :func:`alem_eval.trainers.driver.train_cells`."""
    return cached_trainer(run, tcfg, build_trainer, partners)


# ========================================================================================
# 6. Entry point: ``python -m alem_eval.trainers.mappo_rnn CELL [options]`` = ``alem-eval train CELL``
# ========================================================================================
if __name__ == "__main__":
    from alem_eval.cli.app import run

    run(["train", *sys.argv[1:]])
