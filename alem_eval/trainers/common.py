"""What the trainers share: maths, optimisers, batched env helpers, saved-state types, the
compiled :class:`Trainer`, and the registry's answers.

Sections: 1. maths  2. optimisers and schedules  3. batched env helpers  4. saved-state
types  5. the compiled trainer  6. the registry's answers.

Every trainer module exposes ``make_train(run: RunConfig, tcfg: TrainConfig) -> Trainer``.
A :class:`Trainer` holds two per-seed pure functions, ``init(key, plan)`` and
``update(state, warm) -> (state, totals)``; :meth:`Trainer.compiled` vmaps them over seeds
and jits them once per compile key, running ``n`` updates per call (``n`` is traced, so
any chunk size reuses one executable). The driver
(:func:`alem_eval.trainers.driver.train_cells`, which imports this module, never the reverse) runs them; the resume store is ``alem_eval/trainers/resume.py``, device
placement ``alem_eval/trainers/devices.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Self
from collections.abc import Callable, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax

from alem_eval.algorithms.registry import get_algorithm
from alem_eval.core.boundedcache import BoundedCache
from alem_eval.algorithms.config import RunConfig
from alem_eval.algorithms.train_config import PPOTrainConfig, TrainConfig
from alem_eval.model.policies import MASK_PENALTY
from alem_eval.trainers.contract import EPISODE_KEYS


# ========================================================================================
# 1. Maths (time-major arrays: [T, ...])
# ========================================================================================
def gae(reward, value, done, last_value, *, gamma: float, lam: float):
    """Generalised advantage estimation, scanned backwards over time.

    ``done[t]`` is true when the step taken at ``t`` ended the episode (no bootstrap from
    ``t+1``). Returns ``(advantages, targets = advantages + value)``, both ``[T, ...]``.
    """

    def back(carry, xs):
        adv_next, value_next = carry
        r, v, d = xs
        live = 1.0 - d.astype(jnp.float32)
        delta = r + gamma * value_next * live - v
        adv = delta + gamma * lam * live * adv_next
        return (adv, v), adv

    _, adv = jax.lax.scan(
        back, (jnp.zeros_like(last_value), last_value), (reward, value, done), reverse=True
    )
    return adv, adv + value


def weighted_mean(x, weight=None):
    """``x.mean()``, or with ``weight`` (0/1 per element, e.g. the focal slots of training
    with partners, :mod:`alem_eval.trainers.partners`) the mean over the weighted elements
    only: elements of weight 0 (partner slots) enter neither the value nor its gradient."""
    if weight is None:
        return x.mean()
    w = weight.astype(x.dtype)
    return jnp.sum(jnp.where(w > 0, x, 0.0) * w) / jnp.maximum(w.sum(), 1.0)


def normalize_advantages(adv, weight=None):
    """Per-minibatch standardisation, as upstream (population std, +1e-8); with ``weight``
    the mean and std are the weighted elements' (see :func:`weighted_mean`)."""
    if weight is None:
        return (adv - adv.mean()) / (adv.std() + 1e-8)
    mean = weighted_mean(adv, weight)
    std = jnp.sqrt(weighted_mean(jnp.square(adv - mean), weight))
    return jnp.where(weight > 0, (adv - mean) / (std + 1e-8), 0.0)


def ppo_actor_loss(log_prob, old_log_prob, advantages, *, clip_eps: float, weight=None):
    """Clipped surrogate: ``mean(-min(r A, clip(r, 1-eps, 1+eps) A))``; returns
    ``(loss, {"approx_kl", "clip_frac"})``. ``advantages`` are used as given; ``weight``:
    the means run over the weighted elements only (:func:`weighted_mean`)."""
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -weighted_mean(jnp.minimum(unclipped, clipped), weight)
    approx_kl = weighted_mean((ratio - 1.0) - log_ratio, weight)
    clip_frac = weighted_mean((jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32), weight)
    return loss, {"approx_kl": approx_kl, "clip_frac": clip_frac}


def ppo_value_loss(value, old_value, targets, *, clip_eps: float, weight=None):
    """Clipped value loss: ``0.5 * mean(max((v - R)^2, (v_old + clip(v - v_old) - R)^2))``
    (``weight``: over the weighted elements only, :func:`weighted_mean`)."""
    v_clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
    sq = jnp.maximum(jnp.square(value - targets), jnp.square(v_clipped - targets))
    return 0.5 * weighted_mean(sq, weight)


def mask_logits(logits, mask):
    """Upstream masking: add -1e10 to the logits of unavailable actions."""
    return logits + jnp.where(mask, 0.0, -MASK_PENALTY)


def log_prob_of(logits, actions):
    return jnp.take_along_axis(jax.nn.log_softmax(logits), actions[..., None], axis=-1)[..., 0]


def entropy_of(logits):
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, axis=-1)


# ========================================================================================
# 2. Optimisers and schedules (horizons may be traced: one executable serves any budget)
# ========================================================================================
def linear_schedule(count, *, init: float, end: float, steps):
    """optax.linear_schedule with a possibly traced ``steps``."""
    frac = 1.0 - jnp.clip(count, 0, steps) / jnp.maximum(steps, 1e-12)
    return (init - end) * frac + end


def ppo_learning_rate(count, *, lr: float, num_updates, grads_per_update: int, warmup: float):
    """Upstream PPO annealing: linear decay to 0 over the updates, after an optional linear
    warmup over ``warmup`` x the updates; the update index is ``count // grads_per_update``."""
    update = (count // grads_per_update).astype(jnp.float32)
    num_updates = jnp.asarray(num_updates, jnp.float32)
    if warmup <= 0.0:
        return lr * jnp.maximum(0.0, 1.0 - update / num_updates)
    warm = num_updates * warmup
    decay = num_updates - warm
    warm_lr = lr * update / jnp.maximum(1.0, warm)
    decay_lr = lr * jnp.maximum(0.0, 1.0 - (update - warm) / jnp.maximum(1.0, decay))
    return jnp.where(update < warm, warm_lr, decay_lr)


def ppo_optimizer(tcfg: PPOTrainConfig, plan: Mapping[str, Any]) -> optax.GradientTransformation:
    """chain(clip_by_global_norm, adam(eps=1e-5)): opt_state[1] = (Adam, schedule) like
    upstream. The LR and the horizon come from the (traced) ``plan``."""
    if tcfg.lr_decay:
        lr = lambda count: ppo_learning_rate(
            count,
            lr=plan["lr"],
            num_updates=plan["num_updates"],
            grads_per_update=tcfg.num_minibatches * tcfg.num_epochs,
            warmup=tcfg.lr_warmup,
        )
    else:
        lr = plan["lr"]
    return optax.chain(optax.clip_by_global_norm(tcfg.max_grad_norm), optax.adam(lr, eps=1e-5))


def epochs_over_minibatches(
    key, carry, batches, num_items: int, *, num_epochs: int, num_minibatches: int, step: Callable
):
    """``num_epochs`` passes over shuffled minibatches: each epoch permutes ``num_items``
    (actors for PPO, envs for PQN), cuts the permutation into ``num_minibatches`` equal
    parts and scans ``step(carry, minibatch) -> (carry, metrics)`` over them. ``batches``
    is a tuple of ``(tree, axis)`` pairs: the axis of each tree that holds the items.
    Minibatches are gathered one at a time (the rollout is never copied whole). Returns
    the carry and the metrics averaged over all minibatch steps."""

    def epoch(c, k):
        parts = jax.random.permutation(k, num_items).reshape(num_minibatches, -1)

        def minibatch_step(c, idx):
            mb = tuple(
                jax.tree_util.tree_map(lambda x, a=axis: jnp.take(x, idx, axis=a), tree)
                for tree, axis in batches
            )
            return step(c, mb)

        return jax.lax.scan(minibatch_step, c, parts)

    carry, metrics = jax.lax.scan(epoch, carry, jax.random.split(key, num_epochs))
    return carry, jax.tree_util.tree_map(jnp.mean, metrics)


# ========================================================================================
# 3. Batched env helpers
# ========================================================================================
def append_agent_id(obs):
    """``[..., A, D] -> [..., A, D + A]``: the one-hot agent id after the observation."""
    a = obs.shape[-2]
    ids = jnp.broadcast_to(jnp.eye(a, dtype=obs.dtype), (*obs.shape[:-2], a, a))
    return jnp.concatenate([obs, ids], axis=-1)


def reset_envs(tenv, key, num_envs: int):
    """``num_envs`` fresh worlds: ``(obs [E, A, D], states)``."""
    return jax.vmap(tenv.reset)(jax.random.split(key, num_envs))


def step_envs(tenv, key, states, actions, fresh=None):
    """Step ``E`` envs with auto-reset. ``actions [E, A]``; returns obs, states, reward
    ``[E, A]``, done ``[E]``, info (``[E]`` leaves).

    ``fresh``: ``(obs, states)`` of ``E`` pre-generated worlds (:func:`reset_envs`, drawn
    once per rollout) that an env continues with when its episode ends. Upstream generates
    a new world on every step of every env and keeps it only where the episode ended;
    world generation costs ~20x a game step, so the trainers draw one fresh world per env
    per rollout instead (an env that ends two episodes within one rollout replays the same
    world; episodes last hundreds of steps, rollouts 64-128).
    """
    keys = jax.random.split(key, actions.shape[0])
    if fresh is None:
        return jax.vmap(tenv.step)(keys, states, actions)
    return jax.vmap(tenv.step)(keys, states, actions, fresh)


def placeholder_worlds(tenv, num_envs: int):
    """Zero-filled ``(obs, states)`` of the right shapes for ``num_envs`` envs. ``init``
    uses them instead of generating worlds (which would compile world generation a second
    time); the first rollout swaps in real worlds (:func:`begin_rollout`)."""
    obs, state = jax.eval_shape(tenv.reset, jax.random.PRNGKey(0))
    zeros = lambda s: jnp.zeros((num_envs, *s.shape), s.dtype)
    return zeros(obs), jax.tree_util.tree_map(zeros, state)


def begin_rollout(tenv, key, obs, states, first):
    """Draw the rollout's fresh worlds (see :func:`step_envs`); where ``first`` (the run's
    first update) they also replace the placeholder worlds. Returns ``(obs, states, fresh)``."""
    fresh = reset_envs(tenv, key, obs.shape[0])
    obs = jnp.where(first, fresh[0], obs)
    states = jax.tree_util.tree_map(lambda f, s: jnp.where(first, f, s), fresh[1], states)
    return obs, states, fresh


def action_masks(tenv, states):
    return jax.vmap(tenv.action_mask)(states)  # [E, A, num_actions]


class EpisodeLog(NamedTuple):
    """Running per-env episode statistics (what upstream's LogWrapper tracks)."""

    returns: jax.Array  # [E, A] undiscounted return so far, per agent
    lengths: jax.Array  # [E]

    @classmethod
    def zeros(cls, num_envs: int, num_agents: int) -> EpisodeLog:
        return cls(
            jnp.zeros((num_envs, num_agents), jnp.float32), jnp.zeros((num_envs,), jnp.int32)
        )


def log_episodes(log: EpisodeLog, reward, done, info):
    """Advance the log by one step; return it and the totals of the episodes that ended.

    The episode return is the mean over agents of the per-agent undiscounted return (the
    eval's ``mean_episode_return`` convention); the length counts steps.
    """
    returns = log.returns + reward
    lengths = log.lengths + 1
    d = done.astype(jnp.float32)
    totals = {
        "env_steps": jnp.asarray(done.shape[0], jnp.float32),
        "reward": reward.mean(-1).sum(),  # summed over envs, averaged over agents
        "episodes": d.sum(),
        "return": (returns.mean(-1) * d).sum(),
        "length": (lengths * d).sum(),
        **{k: (info[k] * d).sum() for k in EPISODE_KEYS[3:]},
    }
    keep = 1 - done.astype(jnp.int32)
    return EpisodeLog(returns * (1.0 - d)[:, None], lengths * keep), totals


def sum_totals(per_step: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    return {k: v.sum() for k, v in per_step.items()}


# ========================================================================================
# 4. Saved-state types (the released on-disk pytrees, spec §1)
# ========================================================================================
@flax.struct.dataclass
class Learner:
    """Weights and optimiser of one network, as carried through training."""

    step: jax.Array  # number of gradient steps applied (TrainState.step)
    params: Any  # PPO family: {"params": ...} (the whole variables dict); PQN: inner params
    opt_state: Any

    @classmethod
    def create(cls, params, tx: optax.GradientTransformation) -> Learner:
        return cls(jnp.zeros((), jnp.int32), params, tx.init(params))

    def apply_gradients(self, grads, tx: optax.GradientTransformation) -> Self:
        updates, opt_state = tx.update(grads, self.opt_state, self.params)
        return self.replace(
            step=self.step + 1,
            params=optax.apply_updates(self.params, updates),
            opt_state=opt_state,
        )


@flax.struct.dataclass
class QLearner(Learner):
    """PQN's learner: a :class:`Learner` plus BatchNorm statistics and counters."""

    batch_stats: Any = None
    timesteps: Any = None  # env steps trained on (the warm-up is not counted)
    n_updates: Any = None
    grad_steps: Any = None

    def extras(self) -> dict[str, Any]:
        """The leaves PQN saves beside its TrainState (see ``alem_eval.hub.released``)."""
        return {
            "batch_stats": self.batch_stats,
            "timesteps": self.timesteps,
            "n_updates": self.n_updates,
            "grad_steps": self.grad_steps,
        }


# ========================================================================================
# 5. The compiled trainer
# ========================================================================================
@dataclass(frozen=True, eq=False)
class Trainer:
    """One algorithm's training functions for one compile key (see module docstring).

    ``init(key, plan) -> state`` and ``update(state, warm) -> (state, totals)`` work on
    ONE seed; ``state`` must be a :class:`RunnerState`. ``released(state)`` maps one
    seed's host state to the pytree saved in the released format. With ``warmup`` the
    driver makes one ``warm=True`` call before the first update of a fresh run (PQN's
    random-action warm-up; the same executable, ``warm`` is a traced flag).
    """

    algorithm: str
    run: RunConfig
    tcfg: TrainConfig
    spec: Any  # alem_eval.model.networks.NetworkSpec
    tenv: Any  # alem_eval.envs.training.TrainingEnv
    init: Callable[[jax.Array, dict], Any]
    update: Callable[[Any], tuple[Any, dict]]
    released: Callable[[Any], Any]
    warmup: bool = False
    # Frozen partners (alem_eval.trainers.partners.Partners; None: self-play). Their weights
    # enter the compiled update as an argument: ``update(state, warm, frozen)``.
    partners: Any = None
    _jitted: dict = field(default_factory=dict, repr=False)

    def plan(self, tcfg: TrainConfig) -> dict[str, Any]:
        """The run's values that enter the program as arrays (LR, and the horizons of the
        LR / epsilon schedules): changing them needs no recompilation."""
        p = {"num_updates": np.int32(tcfg.num_updates), "lr": np.float32(tcfg.lr)}
        if hasattr(tcfg, "num_updates_decay"):
            p["num_updates_decay"] = np.int32(tcfg.num_updates_decay)
        return p

    def compiled(self, shardings=None, key: str | None = None):
        """``(init, update_n)``: vmapped over seeds and jitted; cached per ``key`` (a name
        for the sharding layout; None = one device)."""
        if key not in self._jitted:
            init = jax.vmap(self.init)

            def update_n(state, n, warm, frozen):
                def one(st):
                    return (
                        self.update(st, warm) if frozen is None else self.update(st, warm, frozen)
                    )

                # One update traced once: its jaxpr gives the totals' shapes (their zeros
                # start the sum) and the loop replays it. Tracing the Alem step a second
                # time for the shapes alone cost 10 s of every trainer build.
                traced, out_shapes = jax.make_jaxpr(one, return_shape=True)(state)
                out_tree = jax.tree_util.tree_structure(out_shapes)

                def replay(st):
                    flat = jax.core.eval_jaxpr(
                        traced.jaxpr, traced.consts, *jax.tree_util.tree_leaves(st)
                    )
                    return jax.tree_util.tree_unflatten(out_tree, flat)

                def body(_, carry):
                    st, acc = carry
                    st, tot = replay(st)
                    return st, jax.tree_util.tree_map(jnp.add, acc, tot)

                zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), out_shapes[1])
                return jax.lax.fori_loop(0, n, body, (state, zeros))

            vupdate = jax.vmap(update_n, in_axes=(0, None, None, None))
            if shardings is None:
                jitted = (jax.jit(init), jax.jit(vupdate, donate_argnums=0))
            else:
                jitted = (
                    jax.jit(init, out_shardings=shardings),
                    jax.jit(
                        vupdate,
                        in_shardings=(shardings, None, None, None),
                        out_shardings=(shardings, None),
                        donate_argnums=0,
                    ),
                )
            frozen = None if self.partners is None else jax.device_put(self.partners.params)
            self._jitted[key] = (
                jitted[0],
                lambda state, n, warm, u=jitted[1]: u(state, n, warm, frozen),
            )
        return self._jitted[key]


@flax.struct.dataclass
class RunnerState:
    """Everything one seed carries between updates. ``envs`` holds only arrays with a
    leading NUM_ENVS axis (sharded over devices when seeds cannot be)."""

    learner: Any
    envs: Any
    key: jax.Array
    updates: jax.Array  # completed updates
    plan: Any  # traced horizons (see Trainer.plan)


# The trainers of this process, the MAX_TRAINERS most recently used (core.boundedcache:
# a compiled training program holds about a gigabyte; a forgotten one loads again from
# the persistent compilation cache).
MAX_TRAINERS = 2
_TRAINERS: BoundedCache[Trainer] = BoundedCache(MAX_TRAINERS)


def cached_trainer(
    run: RunConfig, tcfg: TrainConfig, build: Callable[..., Trainer], partners: Any = None
) -> Trainer:
    """One :class:`Trainer` (and one compilation) per network, env and compile key (and
    set of frozen partners: ``build(run, tcfg, partners)`` when there are some)."""
    key: tuple = (run.algorithm, run.network_key, run.env, tcfg.compile_key)
    if partners is not None:
        key += (partners.cache_key,)
    if partners is None:
        return _TRAINERS.get_or_make(key, lambda: build(run, tcfg))
    return _TRAINERS.get_or_make(key, lambda: build(run, tcfg, partners))


def clear_trainer_cache() -> int:
    """Drop every cached :class:`Trainer` (and so its compiled programs and their memory);
    return how many there were."""
    held = len(_TRAINERS)
    _TRAINERS.clear()
    return held


# ========================================================================================
# 6. The registry's answers for the trainers
# ========================================================================================
def trainer_for(run: RunConfig, tcfg: TrainConfig, partners: Any = None) -> Trainer:
    """The (cached) trainer of ``run.algorithm`` for this config (the registry's module);
    ``partners``: frozen partners (:mod:`alem_eval.trainers.partners`; the algorithm's
    record must say ``trains_with_partners``)."""
    module = get_algorithm(run.algorithm).trainer()
    if partners is None:
        return module.make_train(run, tcfg)
    return module.make_train(run, tcfg, partners=partners)


def training_env(run: RunConfig):
    """The training env of one run, built the way its upstream trainer builds it."""
    from alem_eval.envs.training import make_training_env

    algo = get_algorithm(run.algorithm)
    shared = bool(run.env.shared_reward) and algo.trains_with_shared_reward_key
    return make_training_env(
        run.env, label=algo.name, shared_reward=shared, env_overrides=algo.trains_with_env_overrides
    )


def released_tree(
    run: RunConfig, learners: Mapping[str, Any], extras: Mapping[str, Any] | None = None
) -> Any:
    """The saved pytree of one seed, packed by the algorithm's released layout."""
    return get_algorithm(run.algorithm).saved_layout.resolve().pack(learners, extras or {})
