"""config.json resolution: defaults <- full config <- reload_overrides, typed and defensive."""

import pytest

from alem_eval.algorithms.registry import (
    HyperMARLNetConfig,
    PPONetConfig,
    PQNNetConfig,
    canonical_algorithm,
)
from alem_eval.algorithms.config import load_config_file, parse_config_json
from alem_eval.core.errors import ConfigError

from .conftest import TINY_CELLS


@pytest.mark.parametrize("cell", TINY_CELLS)
def test_fixture_configs_resolve_with_their_recorded_sizes(fixtures_root, cell):
    cfg = load_config_file(fixtures_root / cell / "config.json")
    assert cfg.algorithm == cell.split("/")[1]
    assert cfg.env.num_comm_channels == 4 and cfg.env.num_agents == 3
    assert cfg.env.action_masking is True and cfg.env.shared_reward is False
    assert cfg.eval.eval_difficulties == (cell.split("/")[2],)
    assert cfg.eval.seed == int(cell.split("seed")[-1])
    assert not cfg.warnings


def test_reload_overrides_win_over_the_full_config():
    cfg = parse_config_json(
        {
            "algorithm": "ippo-rnn",
            "config": {"FC_DIM_SIZE": 16, "SEED": 7},
            "reload_overrides": {"FC_DIM_SIZE": 32},
        }
    )
    assert cfg.network == PPONetConfig(32, 512, "tanh")
    assert cfg.eval.seed == 7


def test_string_values_are_coerced():
    cfg = parse_config_json(
        {
            "algorithm": "hypermarl-rnn",
            "reload_overrides": {
                "NUM_COMM_CHANNELS": "4",
                "APPEND_AGENT_ID": "true",
                "HYPERNET_HIDDEN_DIMS": "[16]",
                "USE_BIAS_IN_HYPERNET": "False",
                "HYPERNET_INIT_SCALE": "1.5",
            },
        }
    )
    assert cfg.env.num_comm_channels == 4
    assert isinstance(cfg.network, HyperMARLNetConfig)
    assert cfg.network.hidden_dims == (16,) and cfg.network.use_bias is False
    assert cfg.eval.append_agent_id is True


def test_defaults_are_the_trainer_yaml_values_when_the_file_says_nothing():
    cfg = parse_config_json({}, algorithm="pqn-vdn-rnn", difficulty="hard", seed=3)
    assert cfg.network == PQNNetConfig(1024, 1, "layer_norm", False, False)
    assert cfg.env.num_comm_channels == 0  # the yaml value; released cells override it to 4
    assert cfg.eval.eval_difficulties == ("hard",)  # one model per difficulty
    assert cfg.eval.seed == 3 and cfg.eval.visualize is True  # upstream code default


def test_ill_typed_known_key_is_an_error_naming_the_key():
    with pytest.raises(ConfigError, match="NUM_COMM_CHANNELS"):
        parse_config_json(
            {"algorithm": "ippo-rnn", "reload_overrides": {"NUM_COMM_CHANNELS": "four"}}
        )
    with pytest.raises(ConfigError, match="ACTIVATION"):
        parse_config_json({"algorithm": "ippo-rnn", "reload_overrides": {"ACTIVATION": "gelu"}})


def test_override_keys_are_read_whatever_their_case_and_the_exact_spelling_wins():
    cfg = parse_config_json(
        {
            "algorithm": "ippo-rnn",
            "config": {"FC_DIM_SIZE": 16},
            "reload_overrides": {"fc_dim_size": 32, "Gru_Hidden_Dim": 64, "num_comm_channels": 4},
        }
    )
    assert cfg.network == PPONetConfig(32, 64, "tanh") and cfg.env.num_comm_channels == 4
    assert not cfg.warnings
    both = {"FC_DIM_SIZE": 8, "fc_dim_size": 32}
    for overrides in (both, dict(reversed(both.items()))):
        cfg = parse_config_json({"algorithm": "ippo-rnn", "reload_overrides": overrides})
        assert cfg.network.fc_dim == 8
        assert any("'fc_dim_size'" in w for w in cfg.warnings)


def test_unknown_override_key_is_a_warning_not_an_error():
    cfg = parse_config_json({"algorithm": "ippo-rnn", "reload_overrides": {"MYSTERY": 1}})
    assert any("MYSTERY" in w for w in cfg.warnings)


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"algorithm": "sac"}', "algorithm"),
        ('{"algorithm": "ippo-rnn", "reload_overrides": [1]}', "reload_overrides"),
    ],
)
def test_bad_config_files_give_one_line_errors(tmp_path, text, match):
    p = tmp_path / "config.json"
    p.write_text(text)
    with pytest.raises(ConfigError, match=match) as info:
        load_config_file(p)
    assert "\n" not in str(info.value)


def test_config_hash_changes_with_eval_relevant_values_only():
    a = parse_config_json({"algorithm": "ippo-rnn", "config": {"SEED": 1, "LR": 1e-3}})
    b = parse_config_json({"algorithm": "ippo-rnn", "config": {"SEED": 1, "LR": 5e-3}})
    c = parse_config_json({"algorithm": "ippo-rnn", "config": {"SEED": 2}})
    assert a.config_hash == b.config_hash != c.config_hash
    assert a.network_key == c.network_key


def test_algorithm_aliases():
    assert canonical_algorithm("IPPO_RNN") == "ippo-rnn"
    assert canonical_algorithm("pqn") == "pqn-vdn-rnn"
    assert canonical_algorithm("sac") is None


def test_a_config_naming_another_algorithm_than_its_directory_is_refused():
    """The file and the layout must agree: a MAPPO config under ippo-rnn/ would be scored as
    MAPPO and filed as IPPO. Spellings of the same algorithm agree; an unrecognised name in
    the file leaves the layout's."""
    with pytest.raises(ConfigError, match=r"algorithm 'mappo-rnn' but the cell sits under 'ippo"):
        parse_config_json({"algorithm": "mappo-rnn"}, algorithm="ippo-rnn", where="x")
    assert parse_config_json({"algorithm": "IPPO_RNN"}, algorithm="ippo").algorithm == "ippo-rnn"
    assert parse_config_json({"algorithm": "my-ippo"}, algorithm="ippo-rnn").algorithm == "ippo-rnn"
