"""PQN-VDN-RNN: parallel Q-learning with Q(lambda) targets and a VDN team value, LSTM Q-net.

Algorithm facts kept from upstream (``baselines/pqn_vdn_rnn.py`` on JaxMARL's
CTRolloutManager, spec §1.5, §5):
* one Q-network shared by the agents (``alem_eval.model.networks.QNetwork``: BatchNorm_0 dummy,
  [Dense, LayerNorm, relu] x NUM_LAYERS, LSTM, linear head); its input is the observation
  followed by the one-hot agent id, and the whole input is zeroed on the step after an
  episode ended (CTRolloutManager's ``preprocess_obs``: obs of done agents are 0);
* epsilon-greedy over the *available* actions: greedy = argmax of the masked Q-values,
  exploration = uniform over the valid actions; epsilon decays linearly from EPS_START to
  EPS_FINISH over the first EPS_DECAY x the decay updates and stays there (the decay updates
  span TOTAL_TIMESTEPS_DECAY env steps: the yaml's 1e9 whatever the budget, unless the
  cell's released config.json or --set says otherwise, ``alem_eval.trainers.planning``; with the
  yaml's EPS_DECAY 0.1, epsilon reaches its floor after 1e8 env steps);
* before the first update the envs run NUM_STEPS steps of uniformly random (unmasked)
  actions whose transitions are discarded (upstream's memory fill with MEMORY_WINDOW 0):
  the driver's warm-up call of the same compiled update (``warm=True``), which also swaps
  in the first worlds;
* the team reward is the sum of the per-agent rewards (x REW_SCALE); the training env
  always uses per-agent rewards (upstream reads a lower-case ``shared_reward`` key);
* VDN: the team Q of a step is the sum over agents of each agent's chosen-action Q; the
  target is Q(lambda) over the rollout, bootstrapped with the sum over agents of the masked
  max Q (no target network), 0.5 x squared error, the rollout's last step only bootstraps;
* NUM_EPOCHS x NUM_MINIBATCHES minibatches of whole env sequences (all agents of an env
  together), the LSTM carry of the rollout start as initial state, BatchNorm statistics
  updated in training mode;
* RAdam behind clip_by_global_norm(MAX_GRAD_NORM), LR decaying linearly to 1e-20 over
  NUM_EPOCHS x NUM_MINIBATCHES x the decay updates (all TOTAL_TIMESTEPS_DECAY env steps,
  1e9 in the yaml) when LR_LINEAR_DECAY;
* saved: upstream's CustomTrainState ``{step, params, opt_state, batch_stats, timesteps,
  n_updates, grad_steps}`` (weights at ``params/...``, no double ``params``).

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
import optax

from alem_eval.algorithms.registry import PQNNetConfig
from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import PQNTrainConfig
from alem_eval.model.networks import QNetwork, build_network

from alem_eval.trainers.common import (
    MASK_PENALTY,
    EpisodeLog,
    QLearner,
    RunnerState,
    Trainer,
    action_masks,
    append_agent_id,
    begin_rollout,
    cached_trainer,
    epochs_over_minibatches,
    linear_schedule,
    log_episodes,
    placeholder_worlds,
    released_tree,
    step_envs,
    sum_totals,
    training_env,
)

ALGORITHM = "pqn-vdn-rnn"
# Hyperparameters: alem_eval.algorithms.train_config.PQNTrainConfig (upstream
# pqn_vdn_rnn.yaml, spec §5).
LR_END = 1e-20  # upstream's linear LR schedule ends here, not at 0

# ========================================================================================
# 2. Maths
# ========================================================================================
__all__ = ["ALGORITHM", "vdn_sum", "q_lambda_targets", "masked_greedy", "pqn_loss", "make_train"]


def vdn_sum(q, axis: int = -1):
    """VDN: the team value is the sum of the agents' values (agents on ``axis``)."""
    return jnp.sum(q, axis=axis)


def q_lambda_targets(reward, done, next_value, *, gamma: float, lam: float):
    """Q(lambda) returns over a rollout, time-major ``[T, ...]``.

    ``reward[t]``, ``done[t]``: the reward of step ``t`` and whether it ended the episode;
    ``next_value[t]``: the (team) value of the state after step ``t``. Then
    ``G[T-1] = r + gamma (1 - d) V``, and
    ``G[t] = r[t] + gamma (1 - d[t]) ((1 - lam) V[t] + lam G[t+1])``.
    """
    live = 1.0 - done.astype(jnp.float32)
    last = reward[-1] + gamma * live[-1] * next_value[-1]

    def back(g_next, xs):
        r, lv, v = xs
        g = r + gamma * lv * ((1.0 - lam) * v + lam * g_next)
        return g, g

    _, g = jax.lax.scan(back, last, (reward[:-1], live[:-1], next_value[:-1]), reverse=True)
    return jnp.concatenate([g, last[None]], axis=0)


def masked_q(q, mask):
    """Q-values with -1e10 on unavailable actions (upstream masking)."""
    return q - (1.0 - mask.astype(q.dtype)) * MASK_PENALTY


def masked_greedy(q, mask):
    return jnp.argmax(masked_q(q, mask), axis=-1)


def pqn_loss(q, tr: Transition, *, gamma: float, lam: float):
    """VDN Q(lambda) loss of one minibatch. ``q [T, B, A, num_actions]`` from the network
    on the minibatch's sequences; returns ``(loss, mean chosen team Q)``."""
    q_next = vdn_sum(jnp.max(masked_q(jax.lax.stop_gradient(q), tr.mask), axis=-1))  # [T, B]
    target = q_lambda_targets(tr.reward[:-1], tr.done[:-1], q_next[1:], gamma=gamma, lam=lam)
    chosen = vdn_sum(jnp.take_along_axis(q, tr.action[..., None], axis=-1)[..., 0])  # [T, B]
    loss = 0.5 * jnp.mean(jnp.square(chosen[:-1] - jax.lax.stop_gradient(target)))
    return loss, chosen.mean()


# ========================================================================================
# 3. Rollout
# ========================================================================================
class Transition(NamedTuple):
    """One step of every env (``[T, E, ...]`` once scanned)."""

    obs: jax.Array  # [E, A, D + A] network input (id appended, zeroed after a done)
    reset: jax.Array  # [E, A] LSTM reset flags fed with this obs
    action: jax.Array  # [E, A]
    reward: jax.Array  # [E] team reward (sum over agents x REW_SCALE)
    done: jax.Array  # [E]
    mask: jax.Array  # [E, A, num_actions]


class Envs(NamedTuple):
    state: Any
    obs: jax.Array  # [E, A, D] raw observations
    done: jax.Array  # [E, A] the last step ended the episode
    hidden: tuple  # LSTM (c, h), each [E, A, H]
    log: EpisodeLog


def network_input(envs: Envs):
    """Upstream's preprocessing: obs + one-hot id, all zeros where the agent is done."""
    return jnp.where(envs.done[..., None], 0.0, append_agent_id(envs.obs))


def make_rollout(net, tenv, tcfg: PQNTrainConfig):
    E, A = tcfg.num_envs, tenv.num_agents
    N = E * A

    def rollout(variables, envs: Envs, key, *, swap_in, uniform, eps):
        """``num_steps`` steps; ``uniform``: random actions over all actions (warm-up);
        ``swap_in``: replace init's placeholder worlds (first rollout of a run)."""
        key, k_fresh = jax.random.split(key)
        obs, states, fresh = begin_rollout(tenv, k_fresh, envs.obs, envs.state, swap_in)
        envs = envs._replace(obs=obs, state=states)

        def step(carry, _):
            envs, key = carry
            key, k_explore, k_random, k_uniform, k_env = jax.random.split(key, 5)
            x = network_input(envs)
            hidden = jax.tree_util.tree_map(lambda h: h.reshape(N, -1), envs.hidden)
            hidden, q = net.apply(
                variables, hidden, x.reshape(N, -1)[None], envs.done.reshape(N)[None], train=False
            )
            q = q[0].reshape(E, A, -1)
            mask = action_masks(tenv, envs.state)
            greedy = masked_greedy(q, mask)
            random_valid = jax.random.categorical(k_random, jnp.where(mask, 0.0, -jnp.inf))
            explore = jax.random.uniform(k_explore, (E, A)) < eps
            action = jnp.where(explore, random_valid, greedy)
            action = jnp.where(
                uniform, jax.random.randint(k_uniform, (E, A), 0, tenv.num_actions), action
            )
            obs2, state2, reward, done, info = step_envs(tenv, k_env, envs.state, action, fresh)
            log, totals = log_episodes(envs.log, reward, done, info)
            tr = Transition(x, envs.done, action, tcfg.rew_scale * reward.sum(-1), done, mask)
            hidden = jax.tree_util.tree_map(lambda h: h.reshape(E, A, -1), hidden)
            envs = Envs(state2, obs2, jnp.broadcast_to(done[:, None], (E, A)), hidden, log)
            return (envs, key), (tr, totals)

        (envs, key), (traj, totals) = jax.lax.scan(step, (envs, key), None, tcfg.num_steps)
        return envs, key, traj, sum_totals(totals)

    return rollout


# ========================================================================================
# 4. Update
# ========================================================================================
def pqn_optimizer(tcfg: PQNTrainConfig, plan) -> optax.GradientTransformation:
    """chain(clip_by_global_norm, radam): opt_state[1] = (RAdam, schedule) like upstream.
    The LR and the decay horizon come from the (traced) ``plan``."""
    if tcfg.lr_decay:
        steps = tcfg.num_epochs * tcfg.num_minibatches * plan["num_updates_decay"]
        lr = lambda count: linear_schedule(count, init=plan["lr"], end=LR_END, steps=steps)
    else:
        lr = plan["lr"]
    return optax.chain(optax.clip_by_global_norm(tcfg.max_grad_norm), optax.radam(learning_rate=lr))


def make_update(net, tenv, tcfg: PQNTrainConfig):
    E, A, T = tcfg.num_envs, tenv.num_agents, tcfg.num_steps
    rollout = make_rollout(net, tenv, tcfg)

    def learn(learner: QLearner, traj: Transition, hidden0, key, plan):
        tx = pqn_optimizer(tcfg, plan)

        def minibatch_step(learner: QLearner, mb):
            hidden, tr = mb  # hidden: (c, h) [B, A, H]; tr: [T, B, ...]
            b = tr.done.shape[1]

            def loss_fn(params):
                (_, q), updates = net.apply(
                    {"params": params, "batch_stats": learner.batch_stats},
                    jax.tree_util.tree_map(lambda h: h.reshape(b * A, -1), hidden),
                    tr.obs.reshape(T, b * A, -1),
                    tr.reset.reshape(T, b * A),
                    train=True,
                    mutable=["batch_stats"],
                )
                loss, q_mean = pqn_loss(
                    q.reshape(T, b, A, -1), tr, gamma=tcfg.gamma, lam=tcfg.q_lambda
                )
                return loss, (updates["batch_stats"], q_mean)

            grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
            (loss, (stats, q_mean)), grads = grad_fn(learner.params)
            learner = learner.apply_gradients(grads, tx)
            learner = learner.replace(batch_stats=stats, grad_steps=learner.grad_steps + 1)
            return learner, {"loss/total": loss, "loss/q_mean": q_mean}

        learner = learner.replace(timesteps=learner.timesteps + T * E)
        learner, losses = epochs_over_minibatches(
            key,
            learner,
            ((hidden0, 0), (traj, 1)),
            E,
            num_epochs=tcfg.num_epochs,
            num_minibatches=tcfg.num_minibatches,
            step=minibatch_step,
        )
        return learner.replace(n_updates=learner.n_updates + 1), losses

    def update(state: RunnerState, warm):
        """One update; with ``warm`` (the run's warm-up call, see the module docstring) the
        rollout takes uniformly random actions and nothing is learned or counted."""
        learner = state.learner
        eps = linear_schedule(
            learner.n_updates,
            init=tcfg.eps_start,
            end=tcfg.eps_finish,
            steps=tcfg.eps_decay * state.plan["num_updates_decay"],
        )
        variables = {"params": learner.params, "batch_stats": learner.batch_stats}
        hidden0 = state.envs.hidden
        envs, key, traj, totals = rollout(
            variables, state.envs, state.key, swap_in=warm, uniform=warm, eps=eps
        )
        key, k_upd = jax.random.split(key)
        zero_losses = {"loss/total": jnp.zeros(()), "loss/q_mean": jnp.zeros(())}
        learner, losses = jax.lax.cond(
            warm,
            lambda: (learner, zero_losses),
            lambda: learn(learner, traj, hidden0, k_upd, state.plan),
        )
        totals = jax.tree_util.tree_map(lambda t: jnp.where(warm, 0.0, t), totals)
        state = state.replace(
            learner=learner, envs=envs, key=key, updates=state.updates + 1 - warm.astype(jnp.int32)
        )
        return state, {**totals, **losses, "sched/eps": eps}

    return update


# ========================================================================================
# 5. make_train
# ========================================================================================
def build_trainer(run: RunConfig, tcfg: PQNTrainConfig) -> Trainer:
    spec = build_network(run)
    assert isinstance(run.network, PQNNetConfig)
    # The same module as the released one; NORM_INPUT only changes training's forward pass.
    net = QNetwork(spec.num_actions, run.network, norm_input=run.network.norm_input)
    tenv = training_env(run)
    E, A = tcfg.num_envs, tenv.num_agents

    def init(key, plan):
        k_net, k_run = jax.random.split(key)
        v = spec.init_variables(k_net)  # {"params": ..., "batch_stats": ...}
        zero = jnp.zeros((), jnp.int32)
        base = QLearner.create(v["params"], pqn_optimizer(tcfg, plan))
        learner = QLearner(
            base.step, base.params, base.opt_state, v["batch_stats"], zero, zero, zero
        )
        obs, states = placeholder_worlds(tenv, E)
        hidden = tuple(jnp.zeros((E, A, spec.hidden), jnp.float32) for _ in range(2))
        envs = Envs(states, obs, jnp.zeros((E, A), bool), hidden, EpisodeLog.zeros(E, A))
        return RunnerState(learner, envs, k_run, zero, plan)

    return Trainer(
        ALGORITHM,
        run,
        tcfg,
        spec,
        tenv,
        init,
        make_update(net, tenv, tcfg),
        released=lambda s: released_tree(run, {"": s.learner}, s.learner.extras()),
        warmup=True,
    )


def make_train(run: RunConfig, tcfg: PQNTrainConfig) -> Trainer:
    """The (cached) trainer for this config; see :func:`alem_eval.trainers.driver.train_cells`."""
    return cached_trainer(run, tcfg, build_trainer)


# ========================================================================================
# 6. Entry point: ``python -m alem_eval.trainers.pqn_vdn_rnn CELL [options]`` = ``alem-eval train CELL``
# ========================================================================================
if __name__ == "__main__":
    from alem_eval.cli.app import run

    run(["train", *sys.argv[1:]])
