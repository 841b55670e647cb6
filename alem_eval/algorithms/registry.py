"""The algorithm registry: one record per algorithm, asked by every other module.

A record says everything that varies by algorithm: its names, how its ``config.json`` is
read (its own keys, its network-config type, which env keys its trainer honours), how its
network is built and how it acts greedily, what its checkpoint holds and how the saved tree
is packed, its trainer module, its bundled demo cell and its Hub release (if any). No other
module compares or spells an algorithm name: it calls :func:`get_algorithm` and reads the
record.

Heavy pieces (flax modules, policies, trainers) are referenced lazily (:class:`Ref`), so
importing the registry costs nothing and imports no JAX.

A fifth algorithm = one :class:`Algorithm` record passed to :func:`register` (from any
module: the package's own four are registered below) + its network builder + its trainer
module (see CONTRACTS.md, "Adding a fifth algorithm").
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from alem_eval.core.errors import ConfigError
from alem_eval.algorithms.keyspec import (
    KeySpec,
    NetworkConfig,
    TrainFamily,
    choice,
    to_bool,
    to_float,
    to_int,
    to_list,
    to_str,
)


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
class Demo:
    """How its bundled demo cell (``alem_eval.api.demo``) was trained, beyond ``DEMO_ENV``."""

    overrides: Mapping[str, Any]  # reduced network sizes
    training: Mapping[str, Any] = field(default_factory=dict)  # --set beside DEMO_RECIPE's


@dataclass(frozen=True)
class Release:
    """Its cells in the Hub release: ``manifests/generate.py`` writes them from this."""

    family: str  # the manifest's network family ("ppo")
    num_params: int  # as its trainer logs it at the released sizes, NUM_COMM_CHANNELS=4
    approx_size_mb: int  # measured size of a cell, optimiser state included


@dataclass(frozen=True, kw_only=True)
class Algorithm:
    """Everything alem-eval knows about one algorithm (keyword arguments only)."""

    name: str  # canonical, as in the Hub layout: "ippo-rnn" (lower case, hyphens)
    display_name: str  # "IPPO-RNN" (leaderboard entries)
    family: str  # "IPPO" (leaderboard family)
    aliases: tuple[str, ...] = ()  # other spellings accepted in selectors and config.json
    # -- config.json ------------------------------------------------------------------
    # the upstream keys its trainer reads beyond alem_eval.algorithms.config.COMMON_KEYS, with their
    # yaml defaults (a common key listed here takes this default)
    keys: Mapping[str, KeySpec]
    network_config: Callable[[Mapping[str, Any]], NetworkConfig]  # values -> typed sizes
    reads_num_agents: bool = False  # NUM_AGENTS honoured (else the env always has 3 players)
    train_family: TrainFamily  # how its training hyperparameters are typed and checked
    # -- network, policy, checkpoint ---------------------------------------------------
    network: Ref  # (RunConfig) -> alem_eval.model.networks.NetworkSpec
    greedy_policy: Ref  # alem_eval.model.policies.PolicyKind: how it acts greedily at eval
    input_layer_key: str  # the key sizing the first layer (shape-mismatch hints)
    recurrent_key: str  # the key sizing the recurrent core
    id_in_first_layer: bool = False  # the first layer's input includes the agent-id one-hot
    saved_layout: Ref  # alem_eval.hub.released.SavedLayout: what the checkpoint tree holds
    # -- environment -------------------------------------------------------------------
    agent_id_input: str = "never"  # "never" | "if_configured" (APPEND_AGENT_ID) | "always"
    trains_with_env_overrides: bool = False  # trainer applies SOFT_SPECIALIZATION / *_EFFICIENCY
    trains_with_shared_reward_key: bool = True  # trainer reads SHARED_REWARD (PQN's does not)
    trains_with_partners: bool = False  # its trainer takes frozen partners (train --partners)
    # -- training and regeneration -----------------------------------------------------
    reload_keys: tuple[str, ...]  # written to config.json reload_overrides
    not_logged_keys: tuple[str, ...] = ()  # keys of the full config its trainer never reads
    trainer_module: str  # "alem_eval.trainers.ippo_rnn": defines make_train(run, tcfg)
    demo: Demo | None = None  # its bundled demo cell; None: it has none
    release: Release | None = None  # its released Hub cells; None: it has none

    def appends_agent_id(self, cfg_append_agent_id: bool) -> bool:
        """Whether its policy input is the obs followed by the one-hot agent id."""
        if self.agent_id_input == "always":
            return True
        return self.agent_id_input == "if_configured" and bool(cfg_append_agent_id)

    def trainer(self) -> Any:
        """Its trainer module (imports it; only the train path calls this)."""
        return importlib.import_module(self.trainer_module)


# ----------------------------------------------------------------------------------------
# The released algorithms' config: keys beyond the common ones, typed network sizes
# ----------------------------------------------------------------------------------------
ACTIVATIONS: tuple[str, ...] = ("tanh", "relu")
NORM_TYPES: tuple[str, ...] = ("layer_norm", "batch_norm", "none")


def _norm_type(v: Any) -> str:
    s = to_str(v).strip().lower()
    return "none" if s in ("", "none", "null") else choice(NORM_TYPES)(s)


PPO_KEYS: dict[str, KeySpec] = {
    "GRU_HIDDEN_DIM": (to_int, 512),
    "FC_DIM_SIZE": (to_int, 128),
    "ACTIVATION": (choice(ACTIVATIONS), "tanh"),
    "GAE_LAMBDA": (to_float, 0.8),
    "CLIP_EPS": (to_float, 0.2),
    "SCALE_CLIP_EPS": (to_bool, False),
    "ENT_COEF": (to_float, 0.01),
    "VF_COEF": (to_float, 0.5),
    "LR_WARMUP": (to_float, 0.0),
}
MAPPO_KEYS: dict[str, KeySpec] = {**PPO_KEYS, "NUM_ENVS": (to_int, 512)}
HYPERMARL_KEYS: dict[str, KeySpec] = {
    **PPO_KEYS,
    "ACTIVATION": (choice(ACTIVATIONS), "relu"),
    "APPEND_AGENT_ID": (to_bool, True),
    "HYPERNET_EMBEDDING_DIM": (to_int, 64),
    "HYPERNET_HIDDEN_DIMS": (to_list(to_int), (64,)),
    "HYPERNET_INIT_SCALE": (to_float, 1.41421356237),
    "USE_AGENT_ID_EMBEDDINGS": (to_bool, True),
    "USE_BIAS_IN_HYPERNET": (to_bool, True),
    "LR": (to_float, 1e-4),
}
PQN_KEYS: dict[str, KeySpec] = {
    "HIDDEN_SIZE": (to_int, 1024),
    "NUM_LAYERS": (to_int, 1),
    "NORM_INPUT": (to_bool, False),
    "NORM_TYPE": (_norm_type, "layer_norm"),
    "DUELING": (to_bool, False),
    "NUM_ENVS": (to_int, 512),
    "NUM_STEPS": (to_int, 128),
    "NUM_MINIBATCHES": (to_int, 16),
    "NUM_EPOCHS": (to_int, 4),
    "LR": (to_float, 5e-5),
    "MAX_GRAD_NORM": (to_float, 0.5),
    "LR_LINEAR_DECAY": (to_bool, True),
    "LAMBDA": (to_float, 0.9),
    "EPS_START": (to_float, 1.0),
    "EPS_FINISH": (to_float, 0.01),
    "EPS_DECAY": (to_float, 0.1),
    "TOTAL_TIMESTEPS_DECAY": (to_int, 1_000_000_000),
    "REW_SCALE": (to_float, 1.0),
    "MEMORY_WINDOW": (to_int, 0),
}


@dataclass(frozen=True)
class PPONetConfig:
    """IPPO (shared parameters) and MAPPO actor/critic sizes."""

    fc_dim: int
    gru_hidden: int
    activation: str


@dataclass(frozen=True)
class HyperMARLNetConfig:
    fc_dim: int
    gru_hidden: int
    activation: str
    embedding_dim: int
    hidden_dims: tuple[int, ...]
    init_scale: float
    use_agent_id_embeddings: bool
    use_bias: bool


@dataclass(frozen=True)
class PQNNetConfig:
    hidden_size: int
    num_layers: int
    norm_type: str  # layer_norm | batch_norm | none
    norm_input: bool
    dueling: bool


def ppo_network_config(v: Mapping[str, Any]) -> PPONetConfig:
    return PPONetConfig(v["FC_DIM_SIZE"], v["GRU_HIDDEN_DIM"], v["ACTIVATION"])


def hypermarl_network_config(v: Mapping[str, Any]) -> HyperMARLNetConfig:
    return HyperMARLNetConfig(
        v["FC_DIM_SIZE"],
        v["GRU_HIDDEN_DIM"],
        v["ACTIVATION"],
        v["HYPERNET_EMBEDDING_DIM"],
        tuple(v["HYPERNET_HIDDEN_DIMS"]),
        v["HYPERNET_INIT_SCALE"],
        v["USE_AGENT_ID_EMBEDDINGS"],
        v["USE_BIAS_IN_HYPERNET"],
    )


def pqn_network_config(v: Mapping[str, Any]) -> PQNNetConfig:
    return PQNNetConfig(
        v["HIDDEN_SIZE"], v["NUM_LAYERS"], v["NORM_TYPE"], v["NORM_INPUT"], v["DUELING"]
    )


PPO_TRAINING = TrainFamily(
    "UPDATE_EPOCHS", "ANNEAL_LR", Ref("alem_eval.algorithms.train_config:ppo_train_config")
)
# TOTAL_TIMESTEPS_DECAY is the yaml's 1e9 unless a released config.json or --set says
# otherwise (see train_config.training_run_config): it does not follow the budget.
PQN_TRAINING = TrainFamily(
    "NUM_EPOCHS", "LR_LINEAR_DECAY", Ref("alem_eval.algorithms.train_config:pqn_train_config")
)

# ----------------------------------------------------------------------------------------
# The built-in algorithms (the released four)
# ----------------------------------------------------------------------------------------
_COMMON_RELOAD = ("NUM_COMM_CHANNELS", "ACTION_MASKING")
_ENV_RELOAD = ("SHARED_REWARD", "ENV_NAME")
_PPO_SIZES = ("FC_DIM_SIZE", "GRU_HIDDEN_DIM", "ACTIVATION")
_DEMO_PPO = {"FC_DIM_SIZE": 32, "GRU_HIDDEN_DIM": 64}

_BUILT_IN: tuple[Algorithm, ...] = (
    Algorithm(
        name="ippo-rnn",
        display_name="IPPO-RNN",
        family="IPPO",
        aliases=("ippo",),
        keys=PPO_KEYS,
        network_config=ppo_network_config,
        reads_num_agents=True,
        train_family=PPO_TRAINING,
        network=Ref("alem_eval.model.networks:build_ippo"),
        greedy_policy=Ref("alem_eval.model.policies:CATEGORICAL"),
        input_layer_key="FC_DIM_SIZE",
        recurrent_key="GRU_HIDDEN_DIM",
        saved_layout=Ref("alem_eval.hub.released:TRAIN_STATE"),
        trains_with_env_overrides=True,
        reload_keys=(
            "NUM_COMM_CHANNELS",
            "NUM_AGENTS",
            "ACTION_MASKING",
            *_PPO_SIZES,
            *_ENV_RELOAD,
        ),
        not_logged_keys=("APPEND_AGENT_ID",),
        trainer_module="alem_eval.trainers.ippo_rnn",
        trains_with_partners=True,
        demo=Demo({**_DEMO_PPO, "NUM_AGENTS": 3}, {"LR": 1e-3}),
        release=Release("ppo", 2_589_885, 20),
    ),
    Algorithm(
        name="mappo-rnn",
        display_name="MAPPO-RNN",
        family="MAPPO",
        aliases=("mappo",),
        keys=MAPPO_KEYS,
        network_config=ppo_network_config,
        train_family=dataclasses.replace(PPO_TRAINING, scales_clip_eps=True),
        network=Ref("alem_eval.model.networks:build_mappo"),
        greedy_policy=Ref("alem_eval.model.policies:CATEGORICAL"),
        input_layer_key="FC_DIM_SIZE",
        recurrent_key="GRU_HIDDEN_DIM",
        saved_layout=Ref("alem_eval.hub.released:ACTOR_CRITIC"),
        reload_keys=(*_COMMON_RELOAD, *_PPO_SIZES, *_ENV_RELOAD),
        not_logged_keys=("APPEND_AGENT_ID", "NUM_AGENTS"),
        trainer_module="alem_eval.trainers.mappo_rnn",
        trains_with_partners=True,
        demo=Demo(dict(_DEMO_PPO), {"LR": 1e-3}),
        release=Release("ppo-ctde", 7_508_797, 48),
    ),
    Algorithm(
        name="hypermarl-rnn",
        display_name="HyperMARL-RNN",
        family="HyperMARL",
        aliases=("hypermarl", "ippo-hypermarl-rnn", "hypermarl-ippo-rnn"),
        keys=HYPERMARL_KEYS,
        network_config=hypermarl_network_config,
        train_family=dataclasses.replace(PPO_TRAINING, needs_agent_id=True),
        network=Ref("alem_eval.model.networks:build_hypermarl"),
        greedy_policy=Ref("alem_eval.model.policies:CATEGORICAL"),
        input_layer_key="FC_DIM_SIZE",
        recurrent_key="GRU_HIDDEN_DIM",
        saved_layout=Ref("alem_eval.hub.released:TRAIN_STATE"),
        agent_id_input="if_configured",
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
        trainer_module="alem_eval.trainers.hypermarl_rnn",
        demo=Demo(
            {
                **_DEMO_PPO,
                "HYPERNET_EMBEDDING_DIM": 8,
                "HYPERNET_HIDDEN_DIMS": [16],
                "APPEND_AGENT_ID": True,
                "ACTIVATION": "relu",
                "USE_AGENT_ID_EMBEDDINGS": True,
                "USE_BIAS_IN_HYPERNET": True,
            },
            {"LR": 5e-4},
        ),
        release=Release("hypermarl", 25_614_013, 241),
    ),
    Algorithm(
        name="pqn-vdn-rnn",
        display_name="PQN-VDN-RNN",
        family="PQN-VDN",
        aliases=("pqn", "pqn-vdn", "pqn-rnn"),
        keys=PQN_KEYS,
        network_config=pqn_network_config,
        train_family=PQN_TRAINING,
        network=Ref("alem_eval.model.networks:build_pqn"),
        greedy_policy=Ref("alem_eval.model.policies:Q_VALUES"),
        input_layer_key="HIDDEN_SIZE",
        recurrent_key="HIDDEN_SIZE",
        id_in_first_layer=True,
        saved_layout=Ref("alem_eval.hub.released:PQN_TRAIN_STATE"),
        agent_id_input="always",
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
        trainer_module="alem_eval.trainers.pqn_vdn_rnn",
        demo=Demo(
            {"HIDDEN_SIZE": 64, "NUM_LAYERS": 1, "NORM_TYPE": "layer_norm", "NORM_INPUT": False},
            # epsilon decays over 20% of the run; its schedules span the run (not the yaml's 1e9)
            {"LR": 5e-4, "EPS_DECAY": 0.2, "TOTAL_TIMESTEPS_DECAY": 491_520},
        ),
        release=Release("pqn", 18_462_800, 134),
    ),
)

# ----------------------------------------------------------------------------------------
# The registry
# ----------------------------------------------------------------------------------------
_BY_NAME: dict[str, Algorithm] = {}  # canonical name -> record, in registration order
_SPELLINGS: dict[str, str] = {}  # every accepted spelling (normalised) -> canonical name
_NOT_IN_NAMES = set("/\\*?[],") | {" "}  # would break cell ids and selectors


def _normalise(name: str) -> str:
    return str(name).strip().lower().replace("_", "-")


def register(algorithm: Algorithm, *, replace: bool = False) -> Algorithm:
    """Add ``algorithm`` to the registry, from any module (a plugin, a notebook, a test):
    every module asks the registry, so selectors, config.json, verify, score, train,
    reports and the leaderboard know it from then on. Returns the record.

    Its ``name`` must be canonical (lower case, hyphens, no ``/`` or pattern characters:
    it is a folder of the cell layout). A name or alias another algorithm already answers
    to is a :class:`ConfigError`; ``replace=True`` swaps out a record of the same name.
    """
    name = algorithm.name
    if not name or name != _normalise(name) or _NOT_IN_NAMES & set(name):
        raise ConfigError(
            f"register: algorithm name {name!r} must be lower case with hyphens "
            "(no '/', spaces or pattern characters)"
        )
    if name in _BY_NAME and not replace:
        raise ConfigError(f"register: algorithm {name!r} is already registered")
    spellings = dict.fromkeys((name, *(_normalise(a) for a in algorithm.aliases)))
    taken = {s: _SPELLINGS[s] for s in spellings if _SPELLINGS.get(s, name) != name}
    if taken:
        s, owner = next(iter(taken.items()))
        raise ConfigError(f"register: {s!r} already names the algorithm {owner!r}")
    if name in _BY_NAME:
        unregister(name)
    _BY_NAME[name] = algorithm
    _SPELLINGS.update({s: name for s in spellings})
    return algorithm


def unregister(name: str) -> Algorithm:
    """Remove an algorithm (any accepted spelling) from the registry; returns its record."""
    record = get_algorithm(name, where="unregister")
    del _BY_NAME[record.name]
    for s in [s for s, owner in _SPELLINGS.items() if owner == record.name]:
        del _SPELLINGS[s]
    return record


for _record in _BUILT_IN:
    register(_record)


def canonical_algorithm(name: str) -> str | None:
    """'IPPO_RNN' -> 'ippo-rnn'; None if the name is no registered algorithm."""
    return _SPELLINGS.get(_normalise(name))


def get_algorithm(name: str, *, where: str = "algorithm") -> Algorithm:
    """The record of ``name`` (any accepted spelling); :class:`ConfigError` if unknown."""
    canonical = canonical_algorithm(name)
    if canonical is None:
        raise ConfigError(
            f"{where}: unknown algorithm {name!r} (one of {', '.join(algorithm_names())})"
        )
    return _BY_NAME[canonical]


def all_algorithms() -> tuple[Algorithm, ...]:
    """Every registered algorithm: the released four in the release's order, then the
    others in the order they were registered."""
    return tuple(_BY_NAME.values())


def algorithm_names() -> tuple[str, ...]:
    """The canonical names of :func:`all_algorithms`, in that order."""
    return tuple(_BY_NAME)


def algorithm_rank(name: str) -> int:
    """Sort position of an algorithm (unknown names sort last)."""
    canonical = canonical_algorithm(name)
    names = algorithm_names()
    return names.index(canonical) if canonical else len(names)


def __getattr__(name: str) -> Any:
    # ALGORITHMS: the registered names when it is read (an import binds them then); prefer
    # algorithm_names(), which also sees algorithms registered later.
    if name == "ALGORITHMS":
        return algorithm_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
