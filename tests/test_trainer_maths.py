"""The trainers' maths against straightforward Python loops, plus the training config and
the ``compare`` statistics. Fast: nothing here builds an Alem env."""

from __future__ import annotations

import numpy as np
import optax
import pytest

import jax
import jax.numpy as jnp

from alem_eval.algorithms.train_config import (
    PPOTrainConfig,
    PQNTrainConfig,
    build_train_config,
    training_run_config,
)
from alem_eval.core.errors import ConfigError
from alem_eval.trainers.common import (
    EpisodeLog,
    append_agent_id,
    entropy_of,
    epochs_over_minibatches,
    gae,
    linear_schedule,
    log_episodes,
    log_prob_of,
    mask_logits,
    normalize_advantages,
    ppo_actor_loss,
    ppo_learning_rate,
    ppo_value_loss,
)
from alem_eval.trainers.mappo_rnn import world_state
from alem_eval.trainers.pqn_vdn_rnn import masked_greedy, pqn_loss, q_lambda_targets, vdn_sum

RNG = np.random.default_rng(0)


# ----------------------------------------------------------------------------------------
# GAE and lambda-returns
# ----------------------------------------------------------------------------------------
def gae_loop(reward, value, done, last_value, gamma, lam):
    T, N = reward.shape
    adv = np.zeros((T, N))
    for n in range(N):
        running, next_v = 0.0, last_value[n]
        for t in reversed(range(T)):
            live = 1.0 - done[t, n]
            delta = reward[t, n] + gamma * next_v * live - value[t, n]
            running = delta + gamma * lam * live * running
            adv[t, n] = running
            next_v = value[t, n]
    return adv, adv + value


def test_gae_matches_loop():
    T, N = 13, 5
    reward = RNG.normal(size=(T, N)).astype(np.float32)
    value = RNG.normal(size=(T, N)).astype(np.float32)
    done = (RNG.random((T, N)) < 0.2).astype(np.float32)
    last = RNG.normal(size=N).astype(np.float32)
    adv, tgt = gae(
        jnp.array(reward),
        jnp.array(value),
        jnp.array(done, bool),
        jnp.array(last),
        gamma=0.99,
        lam=0.8,
    )
    ref_adv, ref_tgt = gae_loop(reward, value, done, last, 0.99, 0.8)
    np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tgt, ref_tgt, rtol=1e-5, atol=1e-5)


def test_gae_lambda_one_is_discounted_return():
    reward = np.array([[1.0], [2.0], [3.0]], np.float32)
    value = np.zeros((3, 1), np.float32)
    done = np.array([[0], [1], [0]], bool)
    adv, _ = gae(reward, value, done, jnp.array([10.0]), gamma=0.5, lam=1.0)
    # episode ends after step 1: G0 = 1 + .5*2; G1 = 2; G2 = 3 + .5*10
    np.testing.assert_allclose(np.asarray(adv)[:, 0], [2.0, 2.0, 8.0])


def upstream_q_lambda_loop(reward, done, q_next, gamma, lam):
    """Upstream's recursion, literally (pqn_vdn_rnn.py _compute_targets), per column.

    ``q_next[t]`` = team value after step t (their ``next_q``)."""
    T, B = reward.shape
    out = np.zeros((T, B))
    for b in range(B):
        g = reward[-1, b] + gamma * (1 - done[-1, b]) * q_next[-1, b]
        out[-1, b] = g
        for t in reversed(range(T - 1)):
            boot = reward[t, b] + gamma * (1 - done[t, b]) * q_next[t, b]
            g = boot + gamma * lam * (g - q_next[t, b])
            g = (1 - done[t, b]) * g + done[t, b] * reward[t, b]
            out[t, b] = g
    return out


def test_q_lambda_targets_match_upstream_recursion():
    T, B = 11, 4
    reward = RNG.normal(size=(T, B)).astype(np.float32)
    done = (RNG.random((T, B)) < 0.25).astype(np.float32)
    q_next = RNG.normal(size=(T, B)).astype(np.float32)
    got = q_lambda_targets(
        jnp.array(reward), jnp.array(done, bool), jnp.array(q_next), gamma=0.99, lam=0.9
    )
    np.testing.assert_allclose(
        got, upstream_q_lambda_loop(reward, done, q_next, 0.99, 0.9), rtol=1e-5, atol=1e-5
    )


def test_q_lambda_zero_is_one_step_target():
    reward = RNG.normal(size=(6, 3)).astype(np.float32)
    done = np.zeros((6, 3), bool)
    q_next = RNG.normal(size=(6, 3)).astype(np.float32)
    got = q_lambda_targets(reward, done, q_next, gamma=0.9, lam=0.0)
    np.testing.assert_allclose(got, reward + 0.9 * q_next, rtol=1e-5, atol=1e-6)


def test_vdn_sum_and_masked_greedy():
    q = RNG.normal(size=(2, 3, 5)).astype(np.float32)
    np.testing.assert_allclose(vdn_sum(q[..., 0], axis=-1), q[..., 0].sum(-1), rtol=1e-6)
    mask = np.ones((2, 3, 5), bool)
    best = q.argmax(-1)
    for i in range(2):
        for j in range(3):
            mask[i, j, best[i, j]] = False  # the best action is unavailable
    chosen = np.asarray(masked_greedy(q, mask))
    assert (chosen != best).all()
    assert mask[np.arange(2)[:, None], np.arange(3)[None], chosen].all()


def test_pqn_loss_matches_loop():
    from alem_eval.trainers.pqn_vdn_rnn import Transition

    T, B, A, K = 6, 2, 3, 4
    q = RNG.normal(size=(T, B, A, K)).astype(np.float32)
    action = RNG.integers(0, K, size=(T, B, A))
    mask = RNG.random((T, B, A, K)) < 0.7
    mask[..., 0] = True
    reward = RNG.normal(size=(T, B)).astype(np.float32)
    done = RNG.random((T, B)) < 0.2
    tr = Transition(
        None, None, jnp.array(action), jnp.array(reward), jnp.array(done), jnp.array(mask)
    )
    loss, _ = pqn_loss(jnp.array(q), tr, gamma=0.99, lam=0.9)
    v = np.where(mask, q, -np.inf).max(-1).sum(-1)  # [T, B] team value
    target = upstream_q_lambda_loop(reward[:-1], done[:-1].astype(float), v[1:], 0.99, 0.9)
    chosen = np.take_along_axis(q, action[..., None], -1)[..., 0].sum(-1)[:-1]
    np.testing.assert_allclose(loss, 0.5 * np.mean((chosen - target) ** 2), rtol=1e-4)


# ----------------------------------------------------------------------------------------
# PPO losses
# ----------------------------------------------------------------------------------------
def test_ppo_actor_loss_matches_loop_and_clips():
    n, eps = 200, 0.2
    logp = RNG.normal(scale=0.3, size=n).astype(np.float32)
    old = RNG.normal(scale=0.3, size=n).astype(np.float32)
    adv = RNG.normal(size=n).astype(np.float32)
    loss, aux = ppo_actor_loss(jnp.array(logp), jnp.array(old), jnp.array(adv), clip_eps=eps)
    terms, kl, frac = [], [], []
    for lp, o, a in zip(logp, old, adv, strict=True):
        r = float(np.exp(lp - o))
        terms.append(-min(r * a, min(max(r, 1 - eps), 1 + eps) * a))
        kl.append((r - 1) - (lp - o))
        frac.append(abs(r - 1) > eps)
    np.testing.assert_allclose(loss, np.mean(terms), rtol=1e-5)
    np.testing.assert_allclose(aux["approx_kl"], np.mean(kl), rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(aux["clip_frac"], np.mean(frac))
    assert 0 < np.mean(frac) < 1  # the sample exercises both branches
    # a ratio far above 1+eps with positive advantage gives no gradient
    clipped = lambda lp: ppo_actor_loss(lp, jnp.zeros(1), jnp.ones(1), clip_eps=eps)[0]
    g = jax.grad(clipped)(jnp.ones(1))
    assert float(g[0]) == 0.0


def test_ppo_value_loss_matches_loop():
    n, eps = 100, 0.2
    v = RNG.normal(size=n).astype(np.float32)
    old = v + RNG.normal(scale=0.5, size=n).astype(np.float32)
    tgt = RNG.normal(size=n).astype(np.float32)
    got = ppo_value_loss(jnp.array(v), jnp.array(old), jnp.array(tgt), clip_eps=eps)
    ref = []
    for a, o, t in zip(v, old, tgt, strict=True):
        clipped = o + min(max(a - o, -eps), eps)
        ref.append(max((a - t) ** 2, (clipped - t) ** 2))
    np.testing.assert_allclose(got, 0.5 * np.mean(ref), rtol=1e-5)


def test_masking_logprob_entropy_and_advantage_norm():
    logits = jnp.array(RNG.normal(size=(4, 6)).astype(np.float32))
    mask = jnp.array([[1, 1, 0, 0, 0, 0]] * 4, bool)
    m = mask_logits(logits, mask)
    p = jax.nn.softmax(m)
    assert float(p[:, 2:].max()) == 0.0
    two = jax.nn.log_softmax(logits[:, :2])
    np.testing.assert_allclose(log_prob_of(m, jnp.zeros(4, int)), two[:, 0], rtol=1e-5)
    np.testing.assert_allclose(entropy_of(m), -(jnp.exp(two) * two).sum(-1), rtol=1e-5)
    samples = jax.random.categorical(jax.random.PRNGKey(0), m, shape=(500, 4))
    assert int(samples.max()) <= 1
    a = jnp.array([1.0, 2.0, 3.0, 6.0])
    z = normalize_advantages(a)
    np.testing.assert_allclose(z, (a - a.mean()) / (np.std(np.asarray(a)) + 1e-8), rtol=1e-6)


# ----------------------------------------------------------------------------------------
# Schedules
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("warmup", [0.0, 0.25])
def test_ppo_learning_rate_matches_upstream_formula(warmup):
    lr, num_updates, per = 2e-4, 10, 32

    def upstream(count):
        update = count // per
        if warmup > 0:
            w = num_updates * warmup
            if update < w:
                return lr * update / max(1.0, w)
            return lr * max(0.0, 1 - (update - w) / max(1.0, num_updates - w))
        return lr * max(0.0, 1 - update / num_updates)

    for count in (0, 1, 31, 32, 100, 319, 320, 400):
        got = float(
            ppo_learning_rate(
                jnp.asarray(count),
                lr=lr,
                num_updates=jnp.asarray(num_updates),
                grads_per_update=per,
                warmup=warmup,
            )
        )
        assert got == pytest.approx(upstream(count), rel=1e-5, abs=1e-12)


def test_linear_schedule_matches_optax():
    ref = optax.linear_schedule(1.0, 0.01, 40)
    for c in (0, 1, 10, 39, 40, 100):
        assert float(
            linear_schedule(jnp.asarray(c), init=1.0, end=0.01, steps=jnp.asarray(40.0))
        ) == pytest.approx(float(ref(c)), rel=1e-6)


# ----------------------------------------------------------------------------------------
# Batching helpers
# ----------------------------------------------------------------------------------------
def test_epochs_over_minibatches_cover_every_item_once_per_epoch():
    T, N = 3, 12
    traj = jnp.arange(T * N).reshape(T, N)  # items on axis 1
    h0 = jnp.arange(N) * 10  # items on axis 0

    def step(count, mb):
        (h,), (x,) = mb
        assert h.shape == (4,) and x.shape == (T, 4)
        return count + 1, {"h": h, "x0": x[0], "aligned": jnp.all(x[0] * 10 == h)}

    count, metrics = epochs_over_minibatches(
        jax.random.PRNGKey(0),
        0,
        (((h0,), 0), ((traj,), 1)),
        N,
        num_epochs=2,
        num_minibatches=3,
        step=lambda c, mb: step(c, mb),
    )
    assert int(count) == 6 and float(metrics["aligned"]) == 1.0


def test_epochs_over_minibatches_permutation():
    """Every epoch sees each item exactly once (checked through sums, since the metrics
    come back averaged over the 3 x 5 minibatch steps)."""
    N = 10
    items = ((jnp.arange(N),), 0)
    _, metrics = epochs_over_minibatches(
        jax.random.PRNGKey(1),
        0,
        (items,),
        N,
        num_epochs=3,
        num_minibatches=5,
        step=lambda c, mb: (c, {"sum": mb[0][0].sum(), "sq": (mb[0][0] ** 2).sum()}),
    )
    assert float(metrics["sum"]) == pytest.approx(sum(range(N)) / 5)
    assert float(metrics["sq"]) == pytest.approx(sum(i * i for i in range(N)) / 5)


def test_episode_log_accounting():
    log = EpisodeLog.zeros(2, 3)
    info = {
        "achievement_pct": jnp.array([0.5, 0.1]),
        "normal_achievement_pct": jnp.zeros(2),
        "coordination_achievement_pct": jnp.zeros(2),
    }
    log, t1 = log_episodes(log, jnp.ones((2, 3)), jnp.array([False, False]), info)
    log, t2 = log_episodes(log, jnp.array([[3.0, 0, 0], [1, 1, 1]]), jnp.array([True, False]), info)
    assert float(t1["episodes"]) == 0 and float(t2["episodes"]) == 1
    assert float(t2["return"]) == pytest.approx((4 + 1 + 1) / 3)  # env 0: per-agent 4,1,1
    assert float(t2["length"]) == 2 and float(t2["achievement_pct"]) == 0.5
    np.testing.assert_array_equal(log.lengths, [0, 2])
    np.testing.assert_allclose(log.returns[0], 0.0)


def test_agent_id_and_world_state():
    obs = jnp.arange(2 * 3 * 2, dtype=jnp.float32).reshape(2, 3, 2)  # [E, A, D]
    x = append_agent_id(obs)
    assert x.shape == (2, 3, 5)
    np.testing.assert_array_equal(x[1, 2, 2:], [0, 0, 1])
    ws = world_state(obs)  # [E*A, A*D]
    assert ws.shape == (6, 6)
    for e in range(2):
        for a in range(3):
            np.testing.assert_array_equal(ws[e * 3 + a], obs[e].reshape(-1))


# ----------------------------------------------------------------------------------------
# Training configs
# ----------------------------------------------------------------------------------------
def test_training_run_config_defaults():
    run = training_run_config("ippo", difficulty="hard", seed=3, total_timesteps=10**8)
    t = build_train_config(run)
    assert isinstance(t, PPOTrainConfig)
    assert run.env.num_comm_channels == 4 and run.env.training_difficulty == "hard"
    assert run.value("EVAL_DIFFICULTIES") == ("hard",) and run.value("SEED") == 3
    assert (t.num_envs, t.num_steps, t.num_minibatches, t.num_epochs) == (1024, 64, 8, 4)
    assert (t.lr, t.gae_lambda, t.clip_eps, t.ent_coef) == (2e-4, 0.8, 0.2, 0.01)
    assert t.num_updates == 10**8 // 64 // 1024
    p = build_train_config(
        training_run_config("pqn", difficulty="easy", seed=0, total_timesteps=10**8)
    )
    assert isinstance(p, PQNTrainConfig)
    # the yaml's decay horizon, whatever the budget (tests/test_train_planning.py)
    assert p.total_timesteps_decay == 10**9 and (p.num_envs, p.num_steps, p.lr) == (512, 128, 5e-5)
    p2 = build_train_config(
        training_run_config(
            "pqn",
            difficulty="easy",
            seed=0,
            total_timesteps=10**8,
            overrides={"TOTAL_TIMESTEPS_DECAY": "1e8"},
        )
    )
    assert p2.total_timesteps_decay == 10**8
    h = build_train_config(training_run_config("hypermarl-rnn", difficulty="easy", seed=0))
    assert h.lr == 1e-4 and h.total_timesteps == 10**9
    m = build_train_config(
        training_run_config(
            "mappo", difficulty="easy", seed=0, overrides={"SCALE_CLIP_EPS": "true"}
        )
    )
    assert m.num_envs == 512 and m.clip_eps == pytest.approx(0.2 / 3)
    # the compile key ignores what only feeds traced values
    a = build_train_config(
        training_run_config("ippo", difficulty="easy", seed=0, total_timesteps=10**6)
    )
    b = build_train_config(
        training_run_config("ippo", difficulty="easy", seed=4, total_timesteps=10**7)
    )
    assert a.compile_key == b.compile_key and a != b


@pytest.mark.parametrize(
    "algo, overrides, match",
    [
        ("ippo", {"NUM_MINIBATCHES": "7", "NUM_ENVS": "4"}, "must divide the number of actors"),
        ("pqn", {"NUM_MINIBATCHES": "3", "NUM_ENVS": "4"}, "divisible by NUM_MINIBATCHES"),
        ("pqn", {"MEMORY_WINDOW": "8"}, "MEMORY_WINDOW"),
        ("ippo", {"TOTAL_TIMESTEPS": "10"}, "less than one update"),
        ("ippo", {"LEARNING_RATE": "1"}, "unknown training key"),
        ("ippo", {"SEED": "7"}, "contradicts the cell"),
        ("hypermarl", {"APPEND_AGENT_ID": "false"}, "APPEND_AGENT_ID"),
        ("ippo", {"NUM_ENVS": "many"}, "ill-typed"),
    ],
)
def test_training_config_errors(algo, overrides, match):
    with pytest.raises(ConfigError, match=match):
        build_train_config(
            training_run_config(algo, difficulty="easy", seed=0, overrides=overrides)
        )


def _aligned_zeros(shape, dtype, align: int = 64):
    """Zeros whose buffer starts on an ``align``-byte boundary (what CPU device_put aliases)."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off : off + n].view(dtype).reshape(shape)


def test_device_owned_never_aliases_host_memory():
    """Resumed state is donated to the update program, so it must not alias the numpy
    arrays it was read into. On CPU a plain device_put of a 64-byte-aligned array does."""
    from alem_eval.trainers.devices import device_owned

    host = {"w": _aligned_zeros((1 << 16,), np.float32), "n": _aligned_zeros((3, 1024), np.int32)}
    plain = jax.block_until_ready(jax.device_put(host["w"]))
    dev = device_owned(host)  # returns once the copy is complete
    host["w"][0], host["n"][0, 0] = 5.0, 7
    assert float(plain[0]) == 5.0  # the hazard is real: the plain transfer is an alias
    assert float(dev["w"][0]) == 0.0 and int(dev["n"][0, 0]) == 0
