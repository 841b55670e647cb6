"""The four networks reproduce the released param trees exactly (spec §1)."""

import jax
import numpy as np
import pytest

from alem_eval.algorithms.config import build_run_config, resolve_values
from alem_eval.model.networks import build_network

RELEASED_COUNTS = {
    "ippo-rnn": 2_589_885,
    "mappo-rnn": 7_508_797,
    "hypermarl-rnn": 25_614_013,
    "pqn-vdn-rnn": 18_462_800,
}


def released(algorithm):
    values, _ = resolve_values(algorithm, overrides={"NUM_COMM_CHANNELS": 4})
    return build_network(build_run_config(algorithm, values))


def shapes(tree):
    return {
        "/".join(str(getattr(k, "key", k)) for k in p): tuple(x.shape)
        for p, x in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


@pytest.mark.parametrize("algorithm", sorted(RELEASED_COUNTS))
def test_released_sizes_reproduce_the_logged_parameter_counts(algorithm):
    assert released(algorithm).num_params() == RELEASED_COUNTS[algorithm]


def test_ippo_tree_has_double_params_and_gru_cell_1():
    s = shapes(released("ippo-rnn").expected_tree())
    assert s["params/params/Dense_0/kernel"] == (9730, 128)
    assert s["params/params/ScannedRNN_0/GRUCell_1/hn/kernel"] == (512, 512)
    assert s["params/params/ScannedRNN_0/GRUCell_1/ir/kernel"] == (128, 512)
    assert s["params/params/Dense_2/kernel"] == (512, 60)
    assert s["params/params/Dense_3/kernel"] == (512, 128)  # critic hidden is FC wide
    assert "params/params/ScannedRNN_0/GRUCell_1/hr/bias" not in s


def test_mappo_has_actor_and_critic_on_world_state():
    s = shapes(released("mappo-rnn").expected_tree())
    assert s["actor/params/params/Dense_0/kernel"] == (9730, 128)
    assert s["critic/params/params/Dense_0/kernel"] == (29190, 128)
    assert s["critic/params/params/Dense_1/kernel"] == (512, 512)  # GRU wide, unlike IPPO


def test_hypermarl_numbering_and_stripped_id_columns():
    s = shapes(released("hypermarl-rnn").expected_tree())
    assert s["params/params/Dense_0/kernel"] == (9730, 128)
    assert s["params/params/agent_embeddings"] == (3, 64)
    assert s["params/params/actor_hypernet/Dense_1/kernel"] == (64, 512 * 512)
    assert s["params/params/actor_hypernet/Dense_5/kernel"] == (64, 512 * 60)
    assert s["params/params/critic_hypernet/Dense_7/bias"] == (1,)


def test_pqn_single_params_lstm_and_batch_stats():
    s = shapes(released("pqn-vdn-rnn").expected_tree())
    assert s["params/Dense_0/kernel"] == (9733, 1024)
    assert s["batch_stats/BatchNorm_0/mean"] == (9733,)
    assert s["params/ScannedRNN_0/OptimizedLSTMCell_0/hi/bias"] == (1024,)
    assert "params/ScannedRNN_0/OptimizedLSTMCell_0/ii/bias" not in s
    assert s["params/Dense_1/kernel"] == (1024, 60)


def test_the_expected_tree_is_traced_once_per_network_and_each_caller_gets_its_own():
    """A stack of many checkpoints of one network asks the tree once per checkpoint per
    evaluation call: equal specs share one trace; a caller's edits reach no other caller."""
    from alem_eval.model.networks import _expected_tree

    first, again = released("ippo-rnn"), released("ippo-rnn")
    assert first is not again and first == again
    first.expected_tree()
    before = _expected_tree.cache_info()
    mine, theirs = again.expected_tree(), first.expected_tree()
    after = _expected_tree.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (2, 0)
    assert shapes(mine) == shapes(theirs)
    mine["params"].clear()
    assert shapes(first.expected_tree()) == shapes(theirs)


def test_gru_resets_carry_before_the_step_that_sees_the_done_flag():
    values, _ = resolve_values("ippo-rnn", overrides={"FC_DIM_SIZE": 8, "GRU_HIDDEN_DIM": 16})
    spec = build_network(build_run_config("ippo-rnn", values))
    v = spec.init_variables(jax.random.PRNGKey(0))["params"]
    obs = jax.random.normal(jax.random.PRNGKey(1), (1, 3, spec.input_dim))
    warm = jax.random.normal(jax.random.PRNGKey(2), (3, 16))
    h_reset, logits_reset, _ = spec.module.apply(v, warm, obs, np.ones((1, 3), bool))
    h_zero, logits_zero, _ = spec.module.apply(v, spec.init_carry(3), obs, np.zeros((1, 3), bool))
    np.testing.assert_array_equal(h_reset, h_zero)
    np.testing.assert_array_equal(logits_reset, logits_zero)
