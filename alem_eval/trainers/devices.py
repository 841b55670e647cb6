"""Where a group of seeds trains: the seeds' keys, shardings over the local devices, and
device buffers XLA owns (safe to donate). Used by the driver (``alem_eval/trainers/driver.py``)."""

from __future__ import annotations

import jax
import numpy as np


def seed_key(seed: int) -> jax.Array:
    """The training key of a seed: upstream's ``split(PRNGKey(SEED), NUM_SEEDS=1)[0]``."""
    return jax.random.split(jax.random.PRNGKey(seed), 1)[0]


def device_shardings(state_shape, num_seeds: int, num_envs: int):
    """Shardings over all local devices: the seed axis if it divides, else the env axis."""
    devices = jax.local_devices()
    n = len(devices)
    if n == 1:
        return None, "1 device"
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(devices), ("d",))
    if num_seeds % n == 0:
        sh = jax.tree_util.tree_map(lambda _: NamedSharding(mesh, P("d")), state_shape)
        return sh, f"{n} devices, seeds sharded"
    if num_envs % n == 0:
        rep = NamedSharding(mesh, P())
        env = NamedSharding(mesh, P(None, "d"))
        sh = jax.tree_util.tree_map(lambda _: rep, state_shape)
        sh = sh.replace(envs=jax.tree_util.tree_map(lambda _: env, state_shape.envs))
        return sh, f"{n} devices, envs sharded"
    return None, f"1 of {n} devices (neither {num_seeds} seeds nor {num_envs} envs divide evenly)"


def device_owned(tree, shardings=None):
    """Host arrays -> device arrays whose buffers XLA owns, safe to donate.

    On CPU, ``jax.device_put`` of a suitably aligned numpy array may alias its memory
    instead of copying (jax 0.4.38; ``may_alias=False`` does not prevent it). The update
    program donates its state, and donating such an alias lets XLA write into host memory
    that is freed once the numpy array is gone (a resumed run then trained on garbage).
    An on-device copy after the transfer gives buffers XLA allocated itself; it is waited
    for, so the host arrays are read completely before their owner may free or reuse them.
    """
    placed = jax.device_put(tree) if shardings is None else jax.device_put(tree, shardings)
    return jax.block_until_ready(jax.tree_util.tree_map(lambda x: x.copy(), placed))
