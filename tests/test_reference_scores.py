"""REFERENCE SCORES are computed as upstream computes them: compute_score run eagerly on the
terminal state. Inside a compiled program XLA turns ``x / 376.0`` into a multiplication by
the reciprocal, which changes the last bit for many numerators; the fixtures (numerators
<= 4) cannot show it, trained checkpoints do."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from alem_eval.envs.eval_env import EnvStatics, get_eval_env
from alem_eval.evaluate.records import _scores, _scores_eager
from alem_eval.evaluate.rollout import run_stack
from tests.eval_support import REFERENCE_GROUP

# Only the test that compiles shares the reference group (its world programs); the other
# is refused before anything compiles: any worker, the fast lane.

WORLD = EnvStatics("Alem-Coop-Symbolic", 3, 4, False, False, False, False)
METRIC = "Team/reward_pct_of_max"


def _differing_numerators() -> set[int]:
    n = np.arange(377, dtype=np.float32)
    return set(np.nonzero(n / np.float32(376.0) != np.asarray(jax.jit(lambda x: x / 376.0)(n)))[0])


@pytest.mark.xdist_group(REFERENCE_GROUP)
def test_reference_scores_equal_eager_compute_score_where_compiled_ones_do_not():
    bad = _differing_numerators()
    assert len(bad) > 100  # the effect is real on this JAX / CPU
    env = get_eval_env(WORLD)
    _, state = env.reset(jax.random.PRNGKey(0), env.difficulty_params("easy"))
    achievements = np.zeros(state.achievements.shape, np.asarray(state.achievements).dtype)
    # Unlock achievements for agent 0 one by one until the team's reward total is a
    # numerator whose compiled division differs from the eager one.
    for a in range(achievements.shape[1]):
        achievements[0, a] = 1
        candidate = state.replace(achievements=jnp.asarray(achievements))
        total = round(float(np.asarray(env.score(candidate)[METRIC]).mean()) * 376)
        if total in bad:
            state = candidate
            break
    else:
        raise AssertionError("no achievement prefix reaches a differing numerator")
    idx = env.score_leaf_indices(state)
    leaves = jax.tree_util.tree_leaves(state)
    snapshot = tuple(jnp.asarray(leaves[i])[None, None] for i in idx)  # [K=1, E=1, ...]
    with jax.disable_jit():
        upstream = np.asarray(env._score_impl(state)[METRIC])  # upstream: eager
    reference = _scores_eager(WORLD, snapshot, state, 1, 1)[METRIC][0, 0]
    compiled = _scores(WORLD, snapshot, state, 1, 1)[METRIC][0, 0]
    np.testing.assert_array_equal(reference, upstream)
    assert not np.array_equal(compiled, upstream)  # what reference used to report


def test_both_protocols_refuse_another_prng_mode_or_precision():
    from alem_eval.core.errors import EvaluationError
    from tests.eval_support import load

    cell = load("tiny/ippo-rnn/easy/seed0")
    for flag in ("jax_threefry_partitionable", "jax_enable_x64"):
        jax.config.update(flag, True)
        try:
            for protocol in ("fast", "reference"):
                with pytest.raises(EvaluationError, match="jax_threefry_partitionable=False"):
                    run_stack(
                        [cell.cfg],
                        [cell.weights],
                        protocol=protocol,
                        eval_difficulty="easy",
                        num_episodes=1,
                        max_steps=4,
                    )
        finally:
            jax.config.update(flag, False)
