"""The fused limit of greedy evaluation: the policy forward and the Alem step in ONE
``lax.scan``, with no evaluator code at all (no done handling, no output buffer, no
refill, no host round trip), and interleaved timing.

``fused_rollout`` plays ``k`` checkpoints x ``e`` episodes for ``t`` steps: each step
splits every env's key in three (as the evaluator and upstream do), computes the action
mask when the cell masks, takes the greedy actions of each checkpoint's policy on its
``e`` envs and steps them. It is what the evaluator's rollout costs at best on one
device; ``fused_rollout_sharded`` splits the episodes over the local devices
(``jax.pmap``), as ``score --devices auto`` splits the evaluator's.
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _fused_fn(env, policy, num_agents: int, dyn, k: int, e: int, t: int, masking: bool):
    """The pure fused rollout over ``k`` checkpoints x ``e`` episodes (see module doc)."""
    import jax
    import jax.numpy as jnp

    def run(stacked, obs, state, keys):
        params = jax.vmap(policy.prepare)(stacked)
        carry0 = jax.vmap(jax.vmap(lambda _: policy.init_carry()))(jnp.zeros((k, e)))
        dones0 = jnp.zeros((k, e, num_agents), bool)

        def act(p, c, o, d, m):  # one checkpoint, its e episodes
            return jax.vmap(lambda c1, o1, d1, m1: policy.act(p, c1, o1, d1, m1))(c, o, d, m)

        def body(loop, _):
            s, o, c, d, key = loop
            split = jax.vmap(lambda kk: jax.random.split(kk, 3))(key)
            key, env_key = split[:, 0], split[:, 2]
            if masking:
                mask = jax.vmap(env.action_mask, (0, None))(s, dyn)
            else:
                mask = jnp.ones(o.shape[:2] + (env.statics.num_actions,), bool)
            shape = lambda x: x.reshape((k, e) + x.shape[1:])
            c, acts = jax.vmap(act)(params, c, shape(o), d, shape(mask))
            out = jax.vmap(env.step, (0, 0, 0, None))(env_key, s, acts.reshape(k * e, -1), dyn)
            d = out.agent_dones.reshape(k, e, num_agents)
            return (out.state, out.obs, c, d, key), out.reward.sum()

        loop, rewards = jax.lax.scan(body, (state, obs, carry0, dones0, keys), None, length=t)
        return loop[0], rewards  # the final states and every reward: nothing is dropped

    return run


def fused_rollout(env, policy, num_agents: int, dyn, k: int, e: int, t: int, masking: bool):
    """Jitted ``f(stacked [k], obs [k*e, P, in], state [k*e], keys [k*e, 2])``."""
    import jax

    return jax.jit(_fused_fn(env, policy, num_agents, dyn, k, e, t, masking))


def fused_rollout_sharded(
    env, policy, num_agents: int, dyn, k: int, e: int, t: int, masking: bool, n_dev: int
):
    """The fused rollout with the episodes split over ``n_dev`` devices (``e % n_dev ==
    0``): ``f`` takes the same arguments as :func:`fused_rollout`'s."""
    import jax

    per = e // n_dev
    inner = jax.pmap(
        _fused_fn(env, policy, num_agents, dyn, k, per, t, masking), in_axes=(None, 0, 0, 0)
    )

    def split(x):  # [k*e, ...] -> [n_dev, k*per, ...]: device d gets episodes d*per.. of each
        x = x.reshape((k, n_dev, per) + x.shape[1:]).swapaxes(0, 1)
        return x.reshape((n_dev, k * per) + x.shape[3:])

    def run(stacked, obs, state, keys):
        return inner(stacked, *jax.tree_util.tree_map(split, (obs, state, keys)))

    return run


def interleaved_walls(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, list[float]]:
    """Wall times of ``repeats`` rounds, the variants taking turns in each round (so a
    change of the machine's load hits them all alike); every ``fn`` blocks until done."""
    walls: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            walls[name].append(time.perf_counter() - t0)
    return walls
