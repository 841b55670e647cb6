"""The evaluator's settings: the protocols and their keys, the checks of a request, the eval
env of a run config, the record columns and the batch sizing.

Protocols (spec §3):

* ``reference`` reproduces upstream's sequential evaluation bit for bit. root =
  PRNGKey(SEED); if VISUALIZE: root, _ = split(root); root, eval_key = split(root); then for
  each difficulty of EVAL_DIFFICULTIES in order chain, d_key = split(chain) -- the evaluated
  difficulty uses the d_key of its (first) position. That key is threaded through all steps
  of all episodes in order (one slot per checkpoint; its episodes run back to back, the key
  carried from one to the next); episode i resets with PRNGKey(EVAL_SEED + i). Self-play
  only: upstream has no mixed teams.
* ``fast`` (default): episode i on world PRNGKey(9999 + i); its step keys thread (same
  3-way split per step) from ``fold_in(PRNGKey(9999 + i), 1)``, independent of the
  checkpoint, its SEED, the difficulty and the slot that runs it (common random numbers),
  so all episodes run in parallel. Defaults: 20 episodes, at most 10000 steps, and
  ``batch`` = :func:`default_batch` slots shared out over the teams (at least
  ``MIN_SLOTS_PER_TEAM`` each, see :func:`slots_per_team`). Deterministic: a
  repeat gives identical records, and for a given batch an episode's records do not
  depend on which slot ran it or when. (Batch shapes enter the float rounding of the
  policy's matmuls, so a different batch, episode count or device split may, in rare
  near-ties, pick another action; ``reference`` keeps upstream's shapes per checkpoint and
  is exact however it is stacked or sharded.)
"""

from __future__ import annotations

import os
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.algorithms.config import DIFFICULTIES, RunConfig
from alem_eval.core.errors import EvaluationError, UsageError

PROTOCOLS: tuple[str, ...] = ("fast", "reference")
DEFAULT_PROTOCOL = "fast"
FAST_WORLD_SEED = 9999
FAST_NUM_EPISODES = 20
FAST_MAX_STEPS = 10_000
CHUNK = 64  # steps per compiled call: how often the host hears of progress
RECORD_CHUNK = 16  # steps per call when recording (each call hands the host their log)
SLOTS_PER_PORT = 16  # one refill port (a slot taking a new episode after a step) per 16 slots
# Recording: the default batch keeps what one call hands the host near this size.
RECORD_LOG_BYTES = 256 * 2**20
CAPACITY_BUCKET = 1024  # the reward buffer is sized to max_steps rounded up to this
# Batch slots when --batch is not given (continuous batching; see Machine): on a CPU
# enough per core that a stack of 5 cells x the fast protocol's 20 episodes has every
# episode live at once on a 2-core machine (BENCHMARKS.md, "Evaluation throughput": 0.93
# of the fused env + policy limit there, against 0.75-0.81 at 16 per core; a team never
# gets more slots than it has episodes, so small runs take no more); on an accelerator
# enough to keep it full; and never fewer than MIN_SLOTS_PER_TEAM per team (or all its
# episodes): a team's policy step reads all of its weights once per step however few
# slots it drives, and on a CPU one or two slots per team leave most of the step to that
# (BENCHMARKS.md, "Slots per team"). Ragged episode lengths favour fewer slots (the idle
# tail of the last round: BENCHMARKS.md, "Continuous batching"); --batch sets it.
CPU_SLOTS_PER_CORE = 64
MIN_SLOTS_PER_TEAM = 8
# ... up to this many slots in all, per device (~7 MB of working memory per slot on a CPU).
FLOOR_MAX_SLOTS = 1024
# Compiled rollout programs a process keeps (the most recently used; each about 0.5 GB of
# host memory on a CPU: core.boundedcache). One call uses one; a forgotten one is loaded
# again from the persistent compilation cache and the warm-start store, not recompiled.
MAX_PROGRAMS = 4
DEFAULT_BATCH = {"gpu": 4096, "cuda": 4096, "rocm": 4096, "tpu": 4096}
ENV_MISMATCH_POLICIES: tuple[str, ...] = ("error", "warn", "ignore")


class EnvVersionWarning(UserWarning):
    """The installed alem differs from the version a checkpoint was trained and scored on."""


# ----------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------
def check_env_version(
    cfg: RunConfig,
    *,
    on_mismatch: str = "error",
    where: str | None = None,
    installed: str | None = None,
) -> str | None:
    """Compare ``cfg.env_version`` with the installed ``StaticEnvParams().version``.

    Returns a message when they differ (None when they match or the config records no
    version). ``on_mismatch``: ``"error"`` raises :class:`EvaluationError`, ``"warn"``
    emits an :class:`EnvVersionWarning`, ``"ignore"`` only returns the message.
    """
    if on_mismatch not in ENV_MISMATCH_POLICIES:
        raise UsageError(
            f"unknown env-version policy {on_mismatch!r} "
            f"(expected one of {', '.join(ENV_MISMATCH_POLICIES)})"
        )
    if cfg.env_version is None:
        return None
    if installed is None:
        from alem_eval.envs.loader import installed_env_version

        installed = installed_env_version()
    if cfg.env_version == installed:
        return None
    from alem_eval.algorithms.config import PAPER_ENV_VERSION

    fix = (
        "install alem-env==0.1.0, the paper's environment"
        if installed != PAPER_ENV_VERSION
        else "its worlds and scoring may differ from the ones it was trained on"
    )
    msg = (
        f"{where + ': ' if where else ''}checkpoint was trained on alem env version "
        f"{cfg.env_version!r} but the installed alem is {installed!r}; its scores here may "
        f"not match the ones it was trained and scored with ({fix})"
    )
    if on_mismatch == "error":
        raise EvaluationError(msg + "; --on-env-mismatch warn scores it anyway")
    if on_mismatch == "warn":
        warnings.warn(msg, EnvVersionWarning, stacklevel=2)
    return msg


def check_count(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise UsageError(f"{name} must be an integer, got {value!r}")
    if value < 1:
        raise UsageError(f"{name} must be at least 1, got {value}")


def check_settings(
    protocol: str, num_episodes: int | None, max_steps: int | None, batch: int | None = None
) -> None:
    """The evaluator's checks of its settings (one wording for the library and the CLI):
    a known protocol, and positive counts where given."""
    if protocol not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r} (expected one of {', '.join(PROTOCOLS)})")
    check_count("--episodes", num_episodes)
    check_count("--max-steps", max_steps)
    check_count("--batch", batch)


def check_eval_difficulty(eval_difficulty: str) -> None:
    """A :class:`UsageError` unless ``eval_difficulty`` names a difficulty's worlds."""
    if eval_difficulty not in DIFFICULTIES:
        raise UsageError(
            f"unknown eval difficulty {eval_difficulty!r} "
            f"(expected one of {', '.join(DIFFICULTIES)})"
        )


def validate_request(
    protocol: str, eval_difficulty: str, num_episodes: int | None, max_steps: int | None
) -> None:
    check_settings(protocol, num_episodes, max_steps)
    check_eval_difficulty(eval_difficulty)


def eval_statics(cfg: RunConfig):
    """The eval env of a resolved run config (spec §3.2): :class:`alem_eval.envs.eval_env.EnvStatics`.

    The agent-id one-hot is appended when the algorithm's policy takes it (the registry's
    ``agent_id_input``: PQN always, HyperMARL when APPEND_AGENT_ID is set).
    """
    from alem_eval.envs.eval_env import EnvStatics

    from alem_eval.algorithms.registry import get_algorithm

    return EnvStatics(
        env_name=cfg.env.env_name,
        num_agents=cfg.env.num_agents,
        num_comm_channels=cfg.env.num_comm_channels,
        shared_reward=bool(cfg.env.shared_reward),
        scale_base_difficulty=bool(cfg.env.scale_base_difficulty),
        action_masking=bool(cfg.env.action_masking),
        append_agent_id=get_algorithm(cfg.algorithm).appends_agent_id(cfg.eval.append_agent_id),
    )


# The columns every per-episode record has besides the compute_score keys (see records._records).
EPISODE_COLUMNS: tuple[str, ...] = ("episode_return", "episode_length", "terminated")


def record_columns(cfg: RunConfig) -> tuple[str, ...]:
    """Every column an episode record of ``cfg`` can carry: the eval env's compute_score
    keys and :data:`EPISODE_COLUMNS`, known without playing an episode (a metric name is
    checked against them before minutes of scoring). A record drops a score that is not
    finite, so one record may lack a column listed here."""
    from alem_eval.envs.eval_env import get_eval_env

    return get_eval_env(eval_statics(cfg).world).score_columns() + EPISODE_COLUMNS


# ----------------------------------------------------------------------------------------
# Keys
# ----------------------------------------------------------------------------------------
def reference_key(cfg: RunConfig, eval_difficulty: str) -> jax.Array:
    """The step-key chain start upstream's ``run_final_eval`` gives ``eval_difficulty``.

    Raises :class:`EvaluationError` when the difficulty is not in EVAL_DIFFICULTIES (the
    reference run never evaluated it, so no upstream number exists to reproduce).
    """
    order = cfg.eval.eval_difficulties
    if eval_difficulty not in order:
        raise EvaluationError(
            f"protocol 'reference' reproduces upstream's final eval, which ran "
            f"EVAL_DIFFICULTIES={list(order)}; {eval_difficulty!r} is not among them "
            f"(use protocol 'fast' to score other difficulties)"
        )
    root = jax.random.PRNGKey(cfg.eval.seed)
    if cfg.eval.visualize:
        root, _ = jax.random.split(root)
    _, chain = jax.random.split(root)
    position = order.index(eval_difficulty)
    for _ in range(position + 1):
        chain, d_key = jax.random.split(chain)
    return d_key


def fast_keys(num_episodes: int, first: int = 0) -> tuple[jax.Array, jax.Array]:
    """(world keys, step-chain start keys) of the ``fast`` protocol's episodes ``first,
    ..., first + E - 1``, each ``[E, 2]``."""
    worlds = jax.vmap(jax.random.PRNGKey)(FAST_WORLD_SEED + first + jnp.arange(num_episodes))
    chains = jax.vmap(lambda k: jax.random.fold_in(k, 1))(worlds)
    return worlds, chains


# ----------------------------------------------------------------------------------------
# Batch sizing and episode settings
# ----------------------------------------------------------------------------------------
def default_batch() -> int:
    """Batch slots used when ``batch`` is not given: :data:`CPU_SLOTS_PER_CORE` per core
    on a CPU, :data:`DEFAULT_BATCH` (thousands) on an accelerator."""
    backend = jax.default_backend()
    if backend in DEFAULT_BATCH:
        return DEFAULT_BATCH[backend]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return CPU_SLOTS_PER_CORE * max(1, cores or 1)


def slots_per_team(num_teams: int, num_episodes: int, batch: int | None) -> int:
    """Batch slots each team gets: ``batch`` shared out, at least 1 and at most the
    episode count (then every episode runs at once). Without ``batch``: the
    :func:`default_batch` shared out, but at least :data:`MIN_SLOTS_PER_TEAM` as long as
    that keeps the slots in all within :data:`FLOOR_MAX_SLOTS` (so many teams may get
    more slots in all than the default batch). ``fast`` on several devices asks this per
    device, with the episodes each device runs."""
    least = 1
    if batch is None:
        batch = default_batch()
        least = min(MIN_SLOTS_PER_TEAM, max(batch, FLOOR_MAX_SLOTS) // num_teams)
    return max(1, min(num_episodes, max(least, -(-batch // num_teams))))


def episode_settings(
    cfg: RunConfig, protocol: str, num_episodes: int | None, max_steps: int | None
) -> tuple[int, int]:
    """(episodes, step cap) a checkpoint is evaluated with: the given values, else the
    protocol's (fast: the paper's 20 x 10,000; reference: what the run itself logged)."""
    if protocol == "fast":
        return (num_episodes or FAST_NUM_EPISODES, max_steps or FAST_MAX_STEPS)
    return (num_episodes or cfg.eval.num_episodes, max_steps or cfg.eval.max_steps)
