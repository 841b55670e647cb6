"""Run configurations: the one place where upstream's UPPER_CASE trainer keys are read.

A released cell's ``config.json`` is resolved in three layers (spec §5):

1. the algorithm's trainer defaults (the upstream yaml files),
2. the full training config, if the file has one (``config``),
3. ``reload_overrides`` last: it is the authority.

Only ``reload_overrides`` is a field name known from the real Hub files, so every other
field is read defensively. Values may be JSON numbers/booleans/lists or strings ("4",
"true", "[16]"); a known key whose value cannot be coerced is a :class:`ConfigError`
naming the key. Unknown keys in ``reload_overrides`` produce warnings; nothing is ever
evaluated as code.

Which keys an algorithm's trainer reads (:func:`key_table`: :data:`COMMON_KEYS` plus its
registry record's ``keys``) and how its network sizes are typed (the record's
``network_config``) are the registry's (``alem_eval.algorithms.registry``): nothing here is
per-algorithm. The coercions are ``alem_eval.algorithms.keyspec``'s. The typed training
hyperparameters a trainer builds from a run config are :mod:`alem_eval.algorithms.train_config`'s.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from alem_eval.algorithms.registry import algorithm_names, canonical_algorithm, get_algorithm
from alem_eval.core.errors import ConfigError
from alem_eval.algorithms.keyspec import (
    KeySpec,
    NetworkConfig,
    choice,
    to_bool,
    to_float,
    to_int,
    to_list,
)

DIFFICULTIES: tuple[str, ...] = ("easy", "medium", "hard")
ENV_NAMES: tuple[str, ...] = ("Alem-Coop-Symbolic",)
# The keys upstream's final evaluation derives its step-key chain from (spec §3.1).
REFERENCE_CHAIN_KEYS: tuple[str, ...] = ("SEED", "VISUALIZE", "EVAL_DIFFICULTIES")
# StaticEnvParams.version of alem-env 0.1.0, the paper's environment.
PAPER_ENV_VERSION = "v0.13741-fix-construction-more-metrics"


def _difficulty(v: Any) -> str:
    return choice(DIFFICULTIES)(v)


# ----------------------------------------------------------------------------------------
# The key table: every upstream key alem-eval reads, its type and trainer defaults (§5)
# ----------------------------------------------------------------------------------------
# The keys every trainer reads; an algorithm's registry record adds its own (``keys``: its
# network sizes and training keys, and the common keys whose yaml default differs).
COMMON_KEYS: dict[str, KeySpec] = {
    "ENV_NAME": (choice(ENV_NAMES, lower=False), "Alem-Coop-Symbolic"),
    "SHARED_REWARD": (to_bool, False),
    "SOFT_SPECIALIZATION": (to_bool, True),
    "SPECIALIST_EFFICIENCY": (to_float, 1.0),
    "NON_SPECIALIST_EFFICIENCY": (to_float, 0.2),
    "SCALE_BASE_DIFFICULTY": (to_bool, False),
    "TRAINING_COORDINATION_DIFFICULTY": (_difficulty, "easy"),
    "NUM_AGENTS": (to_int, 3),
    "NUM_COMM_CHANNELS": (to_int, 0),
    "ACTION_MASKING": (to_bool, True),
    "NUM_SEEDS": (to_int, 1),
    "SEED": (to_int, 0),
    "TEST_NUM_EPISODES": (to_int, 20),
    "TEST_MAX_STEPS": (to_int, 10000),
    "EVAL_DIFFICULTIES": (to_list(_difficulty), ("easy",)),
    # Not in any yaml: upstream code defaults.
    "VISUALIZE": (to_bool, True),
    "EVAL_SEED": (to_int, 9999),
    "APPEND_AGENT_ID": (to_bool, False),
    # Training (read by the trainers; harmless for evaluation).
    "TOTAL_TIMESTEPS": (to_int, 1_000_000_000),
    "NUM_ENVS": (to_int, 1024),
    "NUM_STEPS": (to_int, 64),
    "NUM_MINIBATCHES": (to_int, 8),
    "UPDATE_EPOCHS": (to_int, 4),
    "GAMMA": (to_float, 0.99),
    "LR": (to_float, 2e-4),
    "MAX_GRAD_NORM": (to_float, 1.0),
    "ANNEAL_LR": (to_bool, True),
}


def key_table(algorithm: str) -> Mapping[str, KeySpec]:
    """Every upstream key the trainer of ``algorithm`` reads: ``{KEY: (coerce, default)}``
    (:data:`COMMON_KEYS`, then its registry record's ``keys``)."""
    return {**COMMON_KEYS, **get_algorithm(algorithm, where="config").keys}


# Keys the trainers log but that carry no meaning for alem-eval: not warned about.
_IGNORED_PREFIXES = (
    "coord_",
    "WANDB",
    "ENTITY",
    "PROJECT",
    "RUN_NAME",
    "ALG_NAME",
    "RUN_TAGS",
    "env_version",
    "LOAD_CHECKPOINT",
    "NUM_RNN_LAYERS",
    "ADD_LAST_ACTION",
    "REW_SHAPING_HORIZON",
    "TEST_",
    "HYDRA",
    "SAVE_PATH",
)


# ----------------------------------------------------------------------------------------
# Typed records
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EnvConfig:
    """How the Alem environment is built for this run (training and evaluation)."""

    env_name: str
    num_agents: int
    num_comm_channels: int
    shared_reward: bool
    action_masking: bool
    scale_base_difficulty: bool
    training_difficulty: str
    soft_specialization: bool
    specialist_efficiency: float
    non_specialist_efficiency: float


@dataclass(frozen=True)
class EvalConfig:
    """Upstream's evaluation settings as the reloaded run would use them (spec §3)."""

    seed: int  # SEED: roots the reference key chain
    visualize: bool  # VISUALIZE: one extra split of the root key
    eval_difficulties: tuple[str, ...]  # EVAL_DIFFICULTIES, in order
    num_episodes: int  # TEST_NUM_EPISODES
    max_steps: int  # TEST_MAX_STEPS
    eval_seed: int  # EVAL_SEED: episode i resets with PRNGKey(eval_seed + i)
    append_agent_id: bool  # APPEND_AGENT_ID (HyperMARL's eval env wrapper)


@dataclass(frozen=True)
class RunConfig:
    """A fully resolved, typed run configuration."""

    algorithm: str
    env: EnvConfig
    network: NetworkConfig
    eval: EvalConfig
    env_version: str | None
    logged_num_params: int | None
    values: tuple[tuple[str, Any], ...]  # the merged, coerced UPPER_CASE mapping (sorted)
    warnings: tuple[str, ...] = field(default=(), compare=False)
    # Keys that root the reference key chain but that config.json did not record (no full
    # training config): the values are upstream's defaults / the layout's, an assumption.
    assumed_keys: tuple[str, ...] = field(default=(), compare=False)

    def value(self, key: str) -> Any:
        """A merged upstream value by its UPPER_CASE name (for trainers and reports)."""
        return dict(self.values)[key]

    @property
    def network_key(self) -> str:
        """Identifies everything that fixes parameter shapes and the forward pass."""
        return json.dumps(
            [
                self.algorithm,
                dataclasses.asdict(self.network),
                self.env.num_agents,
                self.env.num_comm_channels,
                self.env.env_name,
                self.eval.append_agent_id,
            ],
            sort_keys=True,
        )

    @property
    def config_hash(self) -> str:
        """Hash of every value that can change an evaluation number."""
        payload = json.dumps(
            [self.network_key, dataclasses.asdict(self.env), dataclasses.asdict(self.eval)],
            sort_keys=True,
            default=list,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------------------
# Resolution
# ----------------------------------------------------------------------------------------
def coerce(table, key: str, value: Any, where: str) -> Any:
    conv, _ = table[key]
    try:
        return conv(value)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{where}: key {key}={value!r} is ill-typed ({exc})") from None


def resolve_values(
    algorithm: str,
    *,
    full_config: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    where: str = "config",
    defaults: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Merge trainer defaults <- full config <- overrides, coercing every known key."""
    table = key_table(algorithm)
    merged = {k: d for k, (_, d) in table.items()}
    merged.update(defaults or {})
    warnings: list[str] = []
    for layer_name, layer in (("config", full_config), ("reload_overrides", overrides)):
        if layer is None:
            continue
        if not isinstance(layer, Mapping):
            raise ConfigError(f"{where}: field {layer_name!r} is not a JSON object")
        for key, value in layer.items():
            if key not in table and layer_name == "reload_overrides":
                # An override is meant for the run: "gru_hidden_dim" is GRU_HIDDEN_DIM (the
                # exact spelling wins where the layer has both).
                upper = str(key).upper()
                key = upper if upper in table and upper not in layer else key
            if key in table:
                merged[key] = coerce(table, key, value, f"{where} {layer_name}")
            elif layer_name == "reload_overrides" and not str(key).startswith(_IGNORED_PREFIXES):
                warnings.append(f"{where}: unknown key {key!r} in reload_overrides ignored")
    return merged, warnings


def build_run_config(
    algorithm: str,
    values: Mapping[str, Any],
    *,
    env_version: str | None = None,
    logged_num_params: int | None = None,
    warnings: tuple[str, ...] = (),
    assumed_keys: tuple[str, ...] = (),
    where: str = "config",
) -> RunConfig:
    """Typed records from a merged UPPER_CASE mapping (after :func:`resolve_values`)."""
    v = dict(values)
    algo = get_algorithm(algorithm, where=where)
    # Only IPPO's trainer reads NUM_AGENTS; the others always build 3 players (spec §1.6).
    num_agents = v["NUM_AGENTS"] if algo.reads_num_agents else 3
    if num_agents < 2:
        raise ConfigError(f"{where}: key NUM_AGENTS={num_agents} must be at least 2")
    if v["NUM_COMM_CHANNELS"] < 0:
        raise ConfigError(f"{where}: key NUM_COMM_CHANNELS={v['NUM_COMM_CHANNELS']} is negative")
    for key in ("TEST_NUM_EPISODES", "TEST_MAX_STEPS"):
        if v[key] < 1:
            raise ConfigError(f"{where}: key {key}={v[key]} must be positive")
    env = EnvConfig(
        env_name=v["ENV_NAME"],
        num_agents=num_agents,
        num_comm_channels=v["NUM_COMM_CHANNELS"],
        shared_reward=v["SHARED_REWARD"],
        action_masking=v["ACTION_MASKING"],
        scale_base_difficulty=v["SCALE_BASE_DIFFICULTY"],
        training_difficulty=v["TRAINING_COORDINATION_DIFFICULTY"],
        soft_specialization=v["SOFT_SPECIALIZATION"],
        specialist_efficiency=v["SPECIALIST_EFFICIENCY"],
        non_specialist_efficiency=v["NON_SPECIALIST_EFFICIENCY"],
    )
    ev = EvalConfig(
        seed=v["SEED"],
        visualize=v["VISUALIZE"],
        eval_difficulties=tuple(v["EVAL_DIFFICULTIES"]),
        num_episodes=v["TEST_NUM_EPISODES"],
        max_steps=v["TEST_MAX_STEPS"],
        eval_seed=v["EVAL_SEED"],
        append_agent_id=v["APPEND_AGENT_ID"],
    )
    return RunConfig(
        algorithm=algo.name,
        env=env,
        network=algo.network_config(v),
        eval=ev,
        env_version=env_version,
        logged_num_params=logged_num_params,
        values=tuple(sorted((k, _freeze(x)) for k, x in v.items())),
        warnings=tuple(warnings),
        assumed_keys=tuple(assumed_keys),
    )


def _freeze(x: Any) -> Any:
    return tuple(x) if isinstance(x, list) else x


def parse_config_json(
    data: Any,
    *,
    algorithm: str | None = None,
    difficulty: str | None = None,
    seed: int | None = None,
    where: str = "config.json",
) -> RunConfig:
    """Resolve a parsed ``config.json`` into a :class:`RunConfig`.

    ``algorithm``, ``difficulty`` and ``seed`` come from the cell's place in the layout;
    they fill in what the file does not say (the file wins where it does).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a JSON object at the top level")
    full = data.get("config")
    if full is not None and not isinstance(full, Mapping):
        raise ConfigError(f"{where}: field 'config' is not a JSON object")
    overrides = data.get("reload_overrides")
    if overrides is None:
        overrides = {}
    raw_env = data.get("env_config")
    env_cfg: Mapping[str, Any] = raw_env if isinstance(raw_env, Mapping) else {}

    declared = data.get("algorithm") or (full or {}).get("ALG_NAME")
    algo = canonical_algorithm(declared) if declared else None
    if declared and algo is None and algorithm is None:
        raise ConfigError(
            f"{where}: field algorithm={declared!r} is not one of {', '.join(algorithm_names())}"
        )
    placed = get_algorithm(algorithm, where=where).name if algorithm else None
    if algo and placed and algo != placed:  # its scores would be filed under the wrong name
        raise ConfigError(
            f"{where}: config.json says algorithm {declared!r} but the cell sits under "
            f"{placed!r} (move the cell or correct the file)"
        )
    algo = algo or placed
    if algo is None:
        raise ConfigError(f"{where}: cannot tell the algorithm (no 'algorithm' field, no layout)")

    # Layout facts fill in what the run itself does not record.
    defaults: dict[str, Any] = {}
    train_diff = env_cfg.get("coordination_difficulty") or difficulty
    if train_diff is not None:
        defaults["TRAINING_COORDINATION_DIFFICULTY"] = coerce(
            key_table(algo), "TRAINING_COORDINATION_DIFFICULTY", train_diff, f"{where} env_config"
        )
    if seed is not None:
        defaults["SEED"] = seed
    merged, warnings = resolve_values(
        algo, full_config=full, overrides=overrides, where=where, defaults=defaults
    )
    # One model per difficulty, evaluated on it (EVALUATION.md): unless the run recorded its
    # own EVAL_DIFFICULTIES, evaluate the training difficulty.
    recorded = any("EVAL_DIFFICULTIES" in (layer or {}) for layer in (full, overrides))
    if not recorded:
        merged["EVAL_DIFFICULTIES"] = (merged["TRAINING_COORDINATION_DIFFICULTY"],)

    # Without the full training config, the keys that root upstream's eval key chain come
    # from defaults (SEED from the layout): 'reference' then reproduces an assumption.
    assumed = tuple(k for k in REFERENCE_CHAIN_KEYS if k not in overrides) if full is None else ()
    env_version = env_cfg.get("env_version") or (full or {}).get("env_version")
    logged = None
    summary = data.get("wandb_summary")
    if isinstance(summary, Mapping) and "num_params" in summary:
        try:
            logged = to_int(summary["num_params"])
        except ValueError:
            warnings.append(f"{where}: wandb_summary.num_params is not an integer; ignored")
    return build_run_config(
        algo,
        merged,
        env_version=str(env_version) if env_version else None,
        logged_num_params=logged,
        warnings=tuple(warnings),
        assumed_keys=assumed,
        where=where,
    )


def load_config_file(path: str | Path, **layout: Any) -> RunConfig:
    """Read and resolve a ``config.json`` (JSON only; nothing is evaluated)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config.json is missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config.json ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return parse_config_json(data, where=str(path), **layout)
