"""THE ALGORITHM REGISTRY: one record per algorithm, asked by every other module."""

from __future__ import annotations

import re

import jax
import numpy as np
import optax
import pytest

from alem_eval.algorithms.registry import (
    algorithm_names,
    algorithm_rank,
    all_algorithms,
    canonical_algorithm,
    get_algorithm,
)
from alem_eval.algorithms.config import build_run_config, key_table, resolve_values
from alem_eval.core.errors import ConfigError
from alem_eval.model.networks import build_network
from tests.conftest import REPO

RECORDS = [pytest.param(a, id=a.name) for a in all_algorithms()]
RELEASED = [pytest.param(a, id=a.name) for a in all_algorithms() if a.release is not None]


def test_names_aliases_and_order():
    released = [a.name for a in all_algorithms() if a.release is not None]
    assert released == ["ippo-rnn", "mappo-rnn", "hypermarl-rnn", "pqn-vdn-rnn"]
    assert list(algorithm_names()[: len(released)]) == released  # the release's order first
    for algo in all_algorithms():
        for spelling in (algo.name, algo.name.upper().replace("-", "_"), *algo.aliases):
            assert canonical_algorithm(spelling) == algo.name
    names = algorithm_names()
    assert [algorithm_rank(a) for a in names] == list(range(len(names)))
    assert algorithm_rank("my-own-algo") == len(names)


def test_an_unknown_algorithm_is_one_clear_error_never_a_fall_through():
    assert canonical_algorithm("sac") is None
    with pytest.raises(ConfigError, match=r"unknown algorithm 'sac' \(one of ippo-rnn, "):
        get_algorithm("sac")
    with pytest.raises(ConfigError, match="unknown algorithm"):
        key_table("sac")


@pytest.mark.parametrize("algo", RECORDS)
def test_each_record_builds_its_network_policy_and_released_tree(algo):
    small = algo.demo.overrides if algo.demo else {}
    values, _ = resolve_values(algo.name, overrides={"NUM_COMM_CHANNELS": 4, **small})
    cfg = build_run_config(algo.name, values)
    spec = build_network(cfg)
    assert spec.algorithm == algo.name
    assert spec.appends_agent_id == algo.appends_agent_id(cfg.eval.append_agent_id)
    assert algo.greedy_policy.resolve().init_carry(spec) is not None
    weights = spec.init_variables(jax.random.PRNGKey(0))
    # The released tree packs every trained group with its optimiser state.
    tree = algo.saved_layout.resolve().fresh(weights, optax.adam(1e-3))
    leaves = {jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]}
    assert any("opt_state" in k for k in leaves)
    policy = spec.policy_variables(weights)
    assert jax.tree_util.tree_leaves(policy)
    for key in (*algo.reload_keys, algo.input_layer_key, algo.recurrent_key):
        assert key in key_table(algo.name), key
    assert callable(algo.trainer().make_train)


@pytest.mark.parametrize("algo", RELEASED)
def test_released_parameter_counts(algo):
    """The registry's builders give the released networks: the count its release record
    (and so the manifest) states; tests/test_networks.py pins the spec §1.6 numbers."""
    values, _ = resolve_values(algo.name, overrides={"NUM_COMM_CHANNELS": 4})
    assert (
        build_network(build_run_config(algo.name, values)).num_params() == algo.release.num_params
    )


def test_no_module_outside_the_registry_spells_an_algorithm_name():
    """Only the registry, the network builders and each algorithm's own trainer file may
    name an algorithm: everything else asks the registry (docstrings excepted)."""
    allowed = {"alem_eval/algorithms/registry.py", "alem_eval/model/networks.py"}
    names = "|".join(re.escape(n) for a in all_algorithms() for n in (a.name, *a.aliases))
    pattern = re.compile(rf"""["']({names})["']""")
    offenders = []
    for path in (
        sorted((REPO / "alem_eval").rglob("*.py"))
        + sorted((REPO / "alem_eval.envs").rglob("*.py"))
        + sorted((REPO / "trainers").glob("*.py"))
    ):
        rel = path.relative_to(REPO).as_posix()
        text = path.read_text()
        own = rel.startswith("alem_eval/trainers/") and re.search(rf'ALGORITHM = "({names})"', text)
        for m in pattern.finditer(text):
            line = text[: m.start()].count("\n") + 1
            src = text.splitlines()[line - 1].strip()
            if (
                rel in allowed
                or (own and src.startswith("ALGORITHM ="))
                or src.startswith('"""')
                or "``" in src
            ):
                continue
            offenders.append(f"{rel}:{line}: {src}")
    assert not offenders, "\n".join(offenders)
    assert np.all([get_algorithm(a).name == a for a in algorithm_names()])
