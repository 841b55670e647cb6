"""Training hyperparameters: the typed config of one trainer run and its run config.

:func:`training_run_config` builds the :class:`~alem_eval.algorithms.config.RunConfig` a
trainer (``alem_eval/trainers/``) uses to (re)generate one cell: the trainer defaults,
:data:`REGENERATION_DEFAULTS`, the released ``config.json`` when there is one, the cell's
identity and ``--set KEY=VALUE`` overrides, in that order. :func:`build_train_config` turns
a resolved run config into the typed, validated hyperparameters
(:class:`PPOTrainConfig` / :class:`PQNTrainConfig`) through the algorithm's registry record
(its ``train_family``: :func:`ppo_train_config` or :func:`pqn_train_config`, both on top of
:func:`common_train_fields`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from alem_eval.algorithms.config import (
    RunConfig,
    coerce,
    build_run_config,
    key_table,
    resolve_values,
)
from alem_eval.algorithms.keyspec import TrainFamily
from alem_eval.algorithms.registry import get_algorithm
from alem_eval.core.errors import ConfigError

# What regenerating a released cell sets beyond the yaml defaults: the released cells use
# 4 communication channels (the yamls say 0), and the trainers run no visualisation.
REGENERATION_DEFAULTS: dict[str, Any] = {"NUM_COMM_CHANNELS": 4, "VISUALIZE": False}


@dataclass(frozen=True)
class TrainConfig:
    """Hyperparameters every trainer reads (spec §5). ``num_epochs`` is PPO's UPDATE_EPOCHS
    and PQN's NUM_EPOCHS; ``lr_decay`` is ANNEAL_LR (PPO) or LR_LINEAR_DECAY (PQN)."""

    algorithm: str
    seed: int
    total_timesteps: int
    num_envs: int
    num_steps: int
    num_minibatches: int
    num_epochs: int
    lr: float
    max_grad_norm: float
    lr_decay: bool
    gamma: float

    @property
    def steps_per_update(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.num_steps // self.num_envs

    @property
    def compile_key(self) -> TrainConfig:
        """This config with every value that only feeds traced arrays (seed, budget, LR)
        zeroed: two runs with equal keys share one compiled trainer."""
        return dataclasses.replace(self, seed=0, total_timesteps=0, lr=0.0)


@dataclass(frozen=True)
class PPOTrainConfig(TrainConfig):
    """IPPO, MAPPO and HyperMARL. ``clip_eps`` is already divided by the agent count when
    MAPPO's SCALE_CLIP_EPS is set."""

    gae_lambda: float
    clip_eps: float
    ent_coef: float
    vf_coef: float
    lr_warmup: float


@dataclass(frozen=True)
class PQNTrainConfig(TrainConfig):
    q_lambda: float
    total_timesteps_decay: int
    eps_start: float
    eps_finish: float
    eps_decay: float
    rew_scale: float
    memory_window: int

    @property
    def num_updates_decay(self) -> int:
        return self.total_timesteps_decay // self.num_steps // self.num_envs

    @property
    def compile_key(self) -> TrainConfig:
        return dataclasses.replace(self, seed=0, total_timesteps=0, total_timesteps_decay=0, lr=0.0)


def training_run_config(
    algorithm: str,
    *,
    difficulty: str,
    seed: int,
    total_timesteps: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    released: Mapping[str, Any] | None = None,
    where: str = "train",
) -> RunConfig:
    """The run config a trainer uses to (re)generate one cell.

    Layers: trainer defaults (the upstream yaml's) <- :data:`REGENERATION_DEFAULTS` <- the
    cell's released ``config.json`` when one is given (``released``, parsed: its ``config``,
    then its ``reload_overrides``; every key it states, so a regenerated cell trains with the
    hyperparameters the released one used) <- the cell's identity (difficulty, seed, and
    ``total_timesteps``) <- ``overrides`` (``--set KEY=VALUE``; strings are coerced like
    ``reload_overrides``). Unknown keys in ``overrides`` are errors (a typo must not train a
    different model silently). EVAL_DIFFICULTIES is the training difficulty (one model per
    difficulty).

    Without a released config every other key follows the yaml, none follows the budget: PQN's
    TOTAL_TIMESTEPS_DECAY stays at the yaml's 1e9 for a 100M cell too (its epsilon then
    reaches its floor after EPS_DECAY x 1e9 = 1e8 env steps and its LR decays over 1e9, as
    upstream's trainer does with its yaml).
    """
    algo = get_algorithm(algorithm, where=where).name
    table = key_table(algo)
    user: dict[str, Any] = {}
    for key, value in (overrides or {}).items():
        k = str(key).strip().upper()
        if k not in table:
            close = difflib_close(k, table)
            hint = (
                f"did you mean {', '.join(close)}?"
                if close
                else "the keys are the upstream yaml's, see alem_eval.algorithms.config.key_table()"
            )
            raise ConfigError(f"{where}: unknown training key {key!r} for {algo} ({hint})")
        user[k] = value
    stated: dict[str, Any] = {}
    if released is not None:
        if not isinstance(released, Mapping):
            raise ConfigError(f"{where}: config.json: expected a JSON object at the top level")
        layers = [released.get("config") or {}, released.get("reload_overrides") or {}]
        values, _ = resolve_values(
            algo, full_config=layers[0], overrides=layers[1], where=f"{where} config.json"
        )
        stated = {k: values[k] for layer in layers for k in layer if k in table}
    cell = {"TRAINING_COORDINATION_DIFFICULTY": difficulty, "SEED": seed}
    base: dict[str, Any] = {
        **REGENERATION_DEFAULTS,
        **stated,
        **cell,
        "EVAL_DIFFICULTIES": [difficulty],
    }
    if total_timesteps is not None:
        base["TOTAL_TIMESTEPS"] = total_timesteps
    merged, _ = resolve_values(algo, full_config=base, overrides=user, where=where)
    for k, v in cell.items():  # the cell's identity wins over --set
        coerced = coerce(table, k, v, where)
        if merged[k] != coerced:
            raise ConfigError(f"{where}: key {k}={merged[k]!r} contradicts the cell ({coerced!r})")
    merged["NUM_SEEDS"] = 1  # one cell = one seed; several cells train side by side (vmap)
    return build_run_config(algo, merged, where=where)


def difflib_close(key: str, table: Mapping[str, Any]) -> list[str]:
    import difflib

    return difflib.get_close_matches(key, list(table), n=3, cutoff=0.6)


def _positive(v: Mapping[str, Any], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if v[key] < 1:
            raise ConfigError(f"{where}: key {key}={v[key]} must be positive")


def common_train_fields(cfg: RunConfig, family: TrainFamily, where: str) -> dict[str, Any]:
    """The :class:`TrainConfig` fields every trainer reads, validated."""
    v = dict(cfg.values)
    _positive(
        v, ("NUM_ENVS", "NUM_STEPS", "NUM_MINIBATCHES", "TOTAL_TIMESTEPS", family.epochs_key), where
    )
    if v["TOTAL_TIMESTEPS"] < v["NUM_ENVS"] * v["NUM_STEPS"]:
        raise ConfigError(
            f"{where}: TOTAL_TIMESTEPS={v['TOTAL_TIMESTEPS']} is less than one update "
            f"(NUM_ENVS x NUM_STEPS = {v['NUM_ENVS'] * v['NUM_STEPS']})"
        )
    return dict(
        algorithm=cfg.algorithm,
        seed=v["SEED"],
        total_timesteps=v["TOTAL_TIMESTEPS"],
        num_envs=v["NUM_ENVS"],
        num_steps=v["NUM_STEPS"],
        num_minibatches=v["NUM_MINIBATCHES"],
        num_epochs=v[family.epochs_key],
        lr=v["LR"],
        max_grad_norm=v["MAX_GRAD_NORM"],
        lr_decay=v[family.lr_decay_key],
        gamma=v["GAMMA"],
    )


def ppo_train_config(cfg: RunConfig, family: TrainFamily, where: str) -> PPOTrainConfig:
    v = dict(cfg.values)
    common = common_train_fields(cfg, family, where)
    if family.needs_agent_id and not v["APPEND_AGENT_ID"]:
        raise ConfigError(
            f"{where}: {cfg.algorithm} trains on observations with the agent id "
            "appended; APPEND_AGENT_ID must be true"
        )
    actors = cfg.env.num_agents * v["NUM_ENVS"]
    if actors % v["NUM_MINIBATCHES"]:
        raise ConfigError(
            f"{where}: NUM_MINIBATCHES={v['NUM_MINIBATCHES']} must divide the number of actors "
            f"(agents x NUM_ENVS = {cfg.env.num_agents} x {v['NUM_ENVS']} = {actors})"
        )
    clip = v["CLIP_EPS"]
    if family.scales_clip_eps and v["SCALE_CLIP_EPS"]:
        clip = clip / cfg.env.num_agents
    return PPOTrainConfig(
        **common,
        gae_lambda=v["GAE_LAMBDA"],
        clip_eps=clip,
        ent_coef=v["ENT_COEF"],
        vf_coef=v["VF_COEF"],
        lr_warmup=v["LR_WARMUP"],
    )


def pqn_train_config(cfg: RunConfig, family: TrainFamily, where: str) -> PQNTrainConfig:
    v = dict(cfg.values)
    common = common_train_fields(cfg, family, where)
    if v["NUM_ENVS"] % v["NUM_MINIBATCHES"]:
        raise ConfigError(
            f"{where}: NUM_ENVS={v['NUM_ENVS']} must be divisible by "
            f"NUM_MINIBATCHES={v['NUM_MINIBATCHES']}"
        )
    if v["MEMORY_WINDOW"] != 0:
        raise ConfigError(
            f"{where}: MEMORY_WINDOW={v['MEMORY_WINDOW']} is not supported "
            "(the released runs use 0)"
        )
    if v["NUM_STEPS"] < 2:
        raise ConfigError(f"{where}: PQN needs NUM_STEPS >= 2 (the last step only bootstraps)")
    return PQNTrainConfig(
        **common,
        q_lambda=v["LAMBDA"],
        total_timesteps_decay=max(1, v["TOTAL_TIMESTEPS_DECAY"]),
        eps_start=v["EPS_START"],
        eps_finish=v["EPS_FINISH"],
        eps_decay=v["EPS_DECAY"],
        rew_scale=v["REW_SCALE"],
        memory_window=v["MEMORY_WINDOW"],
    )


def build_train_config(cfg: RunConfig, where: str = "train") -> TrainConfig:
    """Typed training hyperparameters from a resolved run config (validated)."""
    family = get_algorithm(cfg.algorithm, where=where).train_family
    return family.build(cfg, family, where)
