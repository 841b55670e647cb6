"""The algorithm registry: one record per released algorithm, asked by every other module.

A record says everything that varies by algorithm: its names, how its ``config.json`` is
read (key table, network-config type, which env keys its trainer honours), how its network
is built and how it acts greedily, what its checkpoint holds and how the released tree is
packed, its trainer module and its demo sizes. No other module compares or spells an
algorithm name: it calls :func:`get_algorithm` and reads the record.

Heavy pieces (flax modules, policies, trainers) are referenced lazily (:class:`Ref`), so
importing the registry costs nothing and imports no JAX.

Adding a fifth algorithm = one :class:`Algorithm` entry here + one network builder in
``alem_eval/networks.py`` + one trainer file in ``trainers/`` (see CONTRACTS.md).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Mapping

from . import config as C
from .errors import ConfigError


@dataclass(frozen=True)
class Ref:
    """A lazily imported attribute ``module:attr`` (keeps the registry import-cheap)."""

    target: str

    def resolve(self) -> Any:
        module, _, attr = self.target.partition(":")
        return getattr(importlib.import_module(module), attr)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)


@dataclass(frozen=True)
class Algorithm:
    """Everything alem-eval knows about one algorithm."""

    name: str  # canonical, as in the Hub layout: "ippo-rnn"
    display_name: str  # "IPPO-RNN" (leaderboard entries)
    family: str  # "IPPO" (leaderboard family)
    aliases: tuple[str, ...]  # other spellings accepted in selectors and config.json
    # -- config.json ------------------------------------------------------------------
    key_table: Mapping[str, C.KeySpec]  # every upstream key its trainer reads, with defaults
    network_config: Callable[[Mapping[str, Any]], C.NetworkConfig]  # typed network sizes
    reads_num_agents: bool  # NUM_AGENTS honoured (else the env always has 3 players)
    train_family: C.TrainFamily  # how its training hyperparameters are typed and checked
    # -- network, policy, checkpoint ---------------------------------------------------
    network: Ref  # (RunConfig) -> alem_eval.networks.NetworkSpec
    greedy_policy: Ref  # alem_eval.policies.PolicyKind: how it acts greedily at eval
    input_layer_key: str  # the key sizing the first layer (shape-mismatch hints)
    recurrent_key: str  # the key sizing the recurrent core
    id_in_first_layer: bool  # the first layer's input includes the agent-id one-hot
    saved_layout: Ref  # alem_eval.released.SavedLayout: what the checkpoint tree holds
    # -- environment -------------------------------------------------------------------
    agent_id_input: str  # "never" | "if_configured" (APPEND_AGENT_ID) | "always"
    trains_with_env_overrides: bool  # its trainer applies SOFT_SPECIALIZATION / *_EFFICIENCY
    trains_with_shared_reward_key: bool  # its trainer reads SHARED_REWARD (PQN's does not)
    # -- regeneration ------------------------------------------------------------------
    reload_keys: tuple[str, ...]  # written to config.json reload_overrides
    not_logged_keys: tuple[str, ...]  # keys of the full config its trainer never reads
    trainer_module: str  # "trainers.ippo_rnn": defines make_train(run, tcfg)
    demo_overrides: Mapping[str, Any] = field(default_factory=dict)  # reduced demo sizes
    # how its bundled demo cell was trained, beyond the sizes (alem_eval.demo.DEMO_RECIPE)
    demo_training: Mapping[str, Any] = field(default_factory=dict)

    def appends_agent_id(self, cfg_append_agent_id: bool) -> bool:
        """Whether its policy input is the obs followed by the one-hot agent id."""
        if self.agent_id_input == "always":
            return True
        return self.agent_id_input == "if_configured" and bool(cfg_append_agent_id)

    def trainer(self) -> Any:
        """Its trainer module (imports ``trainers``; only the train path calls this)."""
        return importlib.import_module(self.trainer_module)


_COMMON_RELOAD = ("NUM_COMM_CHANNELS", "ACTION_MASKING")
_ENV_RELOAD = ("SHARED_REWARD", "ENV_NAME")
_PPO_SIZES = ("FC_DIM_SIZE", "GRU_HIDDEN_DIM", "ACTIVATION")
_DEMO_PPO = {"FC_DIM_SIZE": 32, "GRU_HIDDEN_DIM": 64}

_REGISTRY: tuple[Algorithm, ...] = (
    Algorithm(
        name="ippo-rnn",
        display_name="IPPO-RNN",
        family="IPPO",
        aliases=("ippo",),
        key_table={**C.COMMON_KEYS, **C.PPO_KEYS},
        network_config=C.ppo_network_config,
        reads_num_agents=True,
        train_family=C.PPO_TRAINING,
        network=Ref("alem_eval.networks:build_ippo"),
        greedy_policy=Ref("alem_eval.policies:CATEGORICAL"),
        input_layer_key="FC_DIM_SIZE",
        recurrent_key="GRU_HIDDEN_DIM",
        id_in_first_layer=False,
        saved_layout=Ref("alem_eval.released:TRAIN_STATE"),
        agent_id_input="never",
        trains_with_env_overrides=True,
        trains_with_shared_reward_key=True,
        reload_keys=(
            "NUM_COMM_CHANNELS",
            "NUM_AGENTS",
            "ACTION_MASKING",
            *_PPO_SIZES,
            *_ENV_RELOAD,
        ),
        not_logged_keys=("APPEND_AGENT_ID",),
        trainer_module="trainers.ippo_rnn",
        demo_overrides={**_DEMO_PPO, "NUM_AGENTS": 3},
        demo_training={"LR": 1e-3},
    ),
    Algorithm(
        name="mappo-rnn",
        display_name="MAPPO-RNN",
        family="MAPPO",
        aliases=("mappo",),
        key_table={**C.COMMON_KEYS, **C.PPO_KEYS, **C.MAPPO_KEYS},
        network_config=C.ppo_network_config,
        reads_num_agents=False,
        train_family=C.MAPPO_TRAINING,
        network=Ref("alem_eval.networks:build_mappo"),
        greedy_policy=Ref("alem_eval.policies:CATEGORICAL"),
        input_layer_key="FC_DIM_SIZE",
        recurrent_key="GRU_HIDDEN_DIM",
        id_in_first_layer=False,
        saved_layout=Ref("alem_eval.released:ACTOR_CRITIC"),
        agent_id_input="never",
        trains_with_env_overrides=False,
        trains_with_shared_reward_key=True,
        reload_keys=(*_COMMON_RELOAD, *_PPO_SIZES, *_ENV_RELOAD),
        not_logged_keys=("APPEND_AGENT_ID", "NUM_AGENTS"),
        trainer_module="trainers.mappo_rnn",
        demo_overrides=dict(_DEMO_PPO),
        demo_training={"LR": 1e-3},
    ),
    Algorithm(
        name="hypermarl-rnn",
        display_name="HyperMARL-RNN",
        family="HyperMARL",
        aliases=("hypermarl", "ippo-hypermarl-rnn", "hypermarl-ippo-rnn"),
        key_table={**C.COMMON_KEYS, **C.PPO_KEYS, **C.HYPERMARL_KEYS},
        network_config=C.hypermarl_network_config,
        reads_num_agents=False,
        train_family=C.HYPERMARL_TRAINING,
        network=Ref("alem_eval.networks:build_hypermarl"),
        greedy_policy=Ref("alem_eval.policies:CATEGORICAL"),
        input_layer_key="FC_DIM_SIZE",
        recurrent_key="GRU_HIDDEN_DIM",
        id_in_first_layer=False,
        saved_layout=Ref("alem_eval.released:TRAIN_STATE"),
        agent_id_input="if_configured",
        trains_with_env_overrides=False,
        trains_with_shared_reward_key=True,
        reload_keys=(
            *_COMMON_RELOAD,
            *_PPO_SIZES,
            "APPEND_AGENT_ID",
            "HYPERNET_EMBEDDING_DIM",
            "HYPERNET_HIDDEN_DIMS",
            "HYPERNET_INIT_SCALE",
            "USE_AGENT_ID_EMBEDDINGS",
            "USE_BIAS_IN_HYPERNET",
            *_ENV_RELOAD,
        ),
        not_logged_keys=("NUM_AGENTS",),
        trainer_module="trainers.hypermarl_rnn",
        demo_overrides={
            **_DEMO_PPO,
            "HYPERNET_EMBEDDING_DIM": 8,
            "HYPERNET_HIDDEN_DIMS": [16],
            "APPEND_AGENT_ID": True,
            "ACTIVATION": "relu",
            "USE_AGENT_ID_EMBEDDINGS": True,
            "USE_BIAS_IN_HYPERNET": True,
        },
        demo_training={"LR": 5e-4},
    ),
    Algorithm(
        name="pqn-vdn-rnn",
        display_name="PQN-VDN-RNN",
        family="PQN-VDN",
        aliases=("pqn", "pqn-vdn", "pqn-rnn"),
        key_table={**C.COMMON_KEYS, **C.PQN_KEYS},
        network_config=C.pqn_network_config,
        reads_num_agents=False,
        train_family=C.PQN_TRAINING,
        network=Ref("alem_eval.networks:build_pqn"),
        greedy_policy=Ref("alem_eval.policies:Q_VALUES"),
        input_layer_key="HIDDEN_SIZE",
        recurrent_key="HIDDEN_SIZE",
        id_in_first_layer=True,
        saved_layout=Ref("alem_eval.released:PQN_TRAIN_STATE"),
        agent_id_input="always",
        trains_with_env_overrides=False,
        trains_with_shared_reward_key=False,
        reload_keys=(
            *_COMMON_RELOAD,
            "HIDDEN_SIZE",
            "NUM_LAYERS",
            "NORM_TYPE",
            "NORM_INPUT",
            "DUELING",
            *_ENV_RELOAD,
        ),
        not_logged_keys=("APPEND_AGENT_ID", "NUM_AGENTS", "UPDATE_EPOCHS", "ANNEAL_LR"),
        trainer_module="trainers.pqn_vdn_rnn",
        demo_overrides={
            "HIDDEN_SIZE": 64,
            "NUM_LAYERS": 1,
            "NORM_TYPE": "layer_norm",
            "NORM_INPUT": False,
        },
        # epsilon decays over 20% of the run; its schedules span the run (not the yaml's 1e9)
        demo_training={"LR": 5e-4, "EPS_DECAY": 0.2, "TOTAL_TIMESTEPS_DECAY": 491_520},
    ),
)

ALGORITHMS: tuple[str, ...] = tuple(a.name for a in _REGISTRY)
_BY_NAME: dict[str, Algorithm] = {a.name: a for a in _REGISTRY}
_SPELLINGS: dict[str, str] = {s: a.name for a in _REGISTRY for s in (a.name, *a.aliases)}


def _normalise(name: str) -> str:
    return str(name).strip().lower().replace("_", "-")


def canonical_algorithm(name: str) -> str | None:
    """'IPPO_RNN' -> 'ippo-rnn'; None if the name is no registered algorithm."""
    return _SPELLINGS.get(_normalise(name))


def get_algorithm(name: str, *, where: str = "algorithm") -> Algorithm:
    """The record of ``name`` (any accepted spelling); :class:`ConfigError` if unknown."""
    canonical = canonical_algorithm(name)
    if canonical is None:
        raise ConfigError(f"{where}: unknown algorithm {name!r} (one of {', '.join(ALGORITHMS)})")
    return _BY_NAME[canonical]


def all_algorithms() -> tuple[Algorithm, ...]:
    """Every registered algorithm, in the release's order."""
    return _REGISTRY


def algorithm_rank(name: str) -> int:
    """Sort position of an algorithm (unknown names sort last)."""
    canonical = canonical_algorithm(name)
    return ALGORITHMS.index(canonical) if canonical else len(ALGORITHMS)
