"""The vectorised evaluator: greedy episodes of teams of checkpoints in one compiled call.

Structure (gymnax / PureJaxRL style, everything pure and jitted once):

* The rollout (:class:`Machine`) -- a batch of ``slots`` per team, fed from per-team
  queues of episodes inside ``lax.while_loop`` calls of at most :data:`CHUNK` steps.
  Each step splits every slot's key into 3 (key, act key, env key) exactly like
  upstream's ``_run_eval_sequential``, applies the mask, the greedy policies and one
  vmapped ``env.step_env``. After every step a slot whose episode ended writes its result
  to the output buffer and starts the team's next pending episode (continuous batching:
  no slot waits for the batch's longest episode, nor for a chunk boundary, and no host
  round trip); the loop ends when every queue is empty.
* Teams: every agent slot names the checkpoint driving it (:func:`run_teams`); a team of
  one checkpoint is its self-play (:func:`run_stack`). Checkpoints are grouped by network
  (``cfg.network_key``) and teams by role structure (:class:`TeamClass`), so any mix of
  algorithms runs in one program with one trace of the Alem step. The compiled program
  is cached per (protocol, networks, team classes, env statics, slots, chunk, buffer
  capacity, devices); the difficulty, the keys, the step cap and the weights are traced
  arguments, so one compilation serves all difficulties and all checkpoints of that shape.
  Traced programs are also saved with ``jax.export`` (see :class:`_Compiled`): a new
  process with the same shapes skips the Python trace (the warm start).

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

Per-episode records carry every ``compute_score`` key verbatim, reduced like upstream's
``_flatten_user_info_prefix`` (``float(jnp.array(v).mean())`` of each ``[P]`` value,
NaN/inf dropped; see :func:`alem_eval.envs.eval_env.upstream_mean`), plus
``episode_return`` (float64 running sum of the per-step float32 mean-over-agents reward, in
step order, exactly like upstream's Python accumulation), ``episode_length`` (the TRUE
number of steps; upstream logs length - 1) and ``terminated`` (1.0 if the env ended the
episode before the cap).

With several local devices the episode axis (``fast``) or the checkpoints of a one-class
``reference`` stack are split across them with ``shard_map`` (padded to a multiple of the
device count); each device runs its own slots and loop.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast
from collections.abc import Callable, Collection, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.algorithms.config import DIFFICULTIES, RunConfig
from alem_eval.core.errors import AlemEvalError, EvaluationError, UsageError
from alem_eval.core.fsutil import write_bytes_atomic
from alem_eval.model.networks import NetworkSpec, build_network
from alem_eval.model.policies import GreedyPolicy, make_policy

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
# Batch slots when --batch is not given (continuous batching; see Machine): on a CPU a
# small multiple of the cores (BENCHMARKS.md: 100 slots vectorise better than 35, but on
# ragged episode lengths their idle tail costs more than that gains), on an accelerator
# enough to keep it full; and never fewer than MIN_SLOTS_PER_TEAM per team (or all its
# episodes): a team's policy step reads all of its weights once per step however few
# slots it drives, and on a CPU one or two slots per team leave most of the step to that
# (BENCHMARKS.md, "Slots per team").
CPU_SLOTS_PER_CORE = 16
MIN_SLOTS_PER_TEAM = 8
# ... up to this many slots in all, per device (~7 MB of working memory per slot on a CPU).
FLOOR_MAX_SLOTS = 1024
DEFAULT_BATCH = {"gpu": 4096, "cuda": 4096, "rocm": 4096, "tpu": 4096}
ENV_MISMATCH_POLICIES: tuple[str, ...] = ("error", "warn", "ignore")

# Diagnostics: how often each program kind traced its rollout, and compile timings.
TRACE_COUNTS: collections.Counter[str] = collections.Counter()


@dataclass(frozen=True)
class CompileStat:
    program: str
    shapes: str
    trace_s: float
    compile_s: float


COMPILE_STATS: list[CompileStat] = []
# Wall-clock split of the last evaluated group (s): resets, rollout, scores, records.
LAST_TIMINGS: dict[str, float] = {}


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


def _check_count(name: str, value: int | None) -> None:
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
    _check_count("--episodes", num_episodes)
    _check_count("--max-steps", max_steps)
    _check_count("--batch", batch)


def check_eval_difficulty(eval_difficulty: str) -> None:
    """A :class:`UsageError` unless ``eval_difficulty`` names a difficulty's worlds."""
    if eval_difficulty not in DIFFICULTIES:
        raise UsageError(
            f"unknown eval difficulty {eval_difficulty!r} "
            f"(expected one of {', '.join(DIFFICULTIES)})"
        )


def _validate_request(
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


# The columns every per-episode record has besides the compute_score keys (see _records).
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


def fast_keys(num_episodes: int) -> tuple[jax.Array, jax.Array]:
    """(world keys, step-chain start keys) of the ``fast`` protocol, each ``[E, 2]``."""
    worlds = jax.vmap(jax.random.PRNGKey)(FAST_WORLD_SEED + jnp.arange(num_episodes))
    chains = jax.vmap(lambda k: jax.random.fold_in(k, 1))(worlds)
    return worlds, chains


# ----------------------------------------------------------------------------------------
# One episode
# ----------------------------------------------------------------------------------------
class SlotCarry(NamedTuple):
    """The loop state of ``N = teams x slots`` batch slots (leading axis ``N``)."""

    episode: jax.Array  # [N] int32: the episode index the slot runs (E: idle)
    t: jax.Array  # [N] int32: steps taken in that episode
    alive: jax.Array  # [N] bool: the episode still runs
    key: jax.Array  # [N, 2] the threaded step keys (frozen once an episode is over)
    state: Any  # EnvState (keeps stepping, unused, while the slot idles)
    obs: jax.Array  # [N, P, obs_dim] raw observations
    policy_carry: Any  # per team class, per role: the role's recurrent state
    dones: jax.Array  # [N, P] bool: fed back as reset flags


class EpisodeResult(NamedTuple):
    """Per-episode results, leading axes ``[teams, episodes]``: the output buffer each
    episode is written to at the step it ends (its rewards at every step)."""

    length: jax.Array  # int32, true length
    terminated: jax.Array  # bool
    start: jax.Array  # int32: the loop step at which the episode's first step ran
    rewards: jax.Array  # [capacity] float32 (entries >= length are 0)
    snapshot: tuple  # the terminal state's leaves that compute_score reads
    key: jax.Array  # [2] the step key after the episode's last step


class Schedule(NamedTuple):
    """How busy the batch slots were: ``live_steps / (steps x N)`` is the utilisation."""

    steps: jax.Array  # [] int32: loop steps run (each one steps every slot)
    next_episode: jax.Array  # [teams] int32: episodes started per team (== E at the end)
    finished: jax.Array  # [teams] int32: episodes written to the output buffer, per team
    live_steps: jax.Array  # [] int32: env steps that belonged to an episode


# ----------------------------------------------------------------------------------------
# Teams: any checkpoint in any agent slot
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Role:
    """One policy of a team: the network group it belongs to and the agent slots it drives."""

    group: int  # index into the program's network groups
    slots: tuple[int, ...]


@dataclass(frozen=True)
class TeamClass:
    """Teams with the same role structure (which group drives which slots), batched together."""

    roles: tuple[Role, ...]
    size: int  # teams of this class in the batch


def team_roles(team: Sequence[int]) -> tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]:
    """``(members, slots)``: the team's distinct members in order of first appearance and
    the agent slots each drives. ``(4, 4, 7)`` -> ``((4, 7), ((0, 1), (2,)))``."""
    members = tuple(dict.fromkeys(team))
    return members, tuple(tuple(s for s, m in enumerate(team) if m == x) for x in members)


def init_team_carries(
    policies: Sequence[GreedyPolicy], classes: Sequence[TeamClass], episodes: int
) -> tuple:
    """Zero recurrent state of every role: per class, per role, ``[size, episodes, ...]``."""
    return tuple(
        tuple(
            jax.tree_util.tree_map(
                lambda x, s=cls.size: jnp.broadcast_to(x, (s, episodes) + x.shape),
                # focal agents (evaluate.agents): a carry for the slots they drive
                cast(Any, policies[role.group]).init_carry(len(role.slots))
                if getattr(policies[role.group], "is_agent", False)
                else policies[role.group].init_carry(),
            )
            for role in cls.roles
        )
        for cls in classes
    )


def team_actions(
    policies: Sequence[GreedyPolicy],
    classes: Sequence[TeamClass],
    params: Any,
    use_mask: Any,
    carries: Any,
    raw_obs: jax.Array,
    dones: jax.Array,
    mask: jax.Array | None,
    *,
    episodes: int,
    num_actions: int,
    step_keys: jax.Array | None = None,
    states: Any = None,
) -> tuple[Any, jax.Array]:
    """One greedy step of every team in the batch -> (new carries, actions ``[N, P]`` int32).

    ``raw_obs [N, P, obs_dim]``, ``dones [N, P]``, ``mask [N, P, A]`` (None: all legal),
    laid out class by class, team by team, episode by episode (``N = sum(sizes) x
    episodes``). Each role's policy runs on all ``P`` slots of its teams -- the batch shape
    upstream's policies use, so a team of one checkpoint computes exactly its self-play
    actions -- and its actions are kept for the slots it drives.

    Focal agents (:mod:`alem_eval.evaluate.agents`, roles whose policy has ``is_agent``)
    act on the slots they drive only, with a key derived from ``step_keys [N, 2]`` (the
    slots' step keys, not consumed); host agents' roles are gathered into one callback
    per agent and step (``states``: the slots' env states, for agents that read them).
    """
    from alem_eval.evaluate import agents as focal  # focal agents' roles (evaluate.agents)

    num_agents = raw_obs.shape[1]
    new_carries, actions, start = [], [], 0
    host_roles: list[focal.HostRole] = []
    for c, cls in enumerate(classes):
        size = cls.size * episodes
        lo = start

        def block(x, lo=lo, cls=cls, size=size):
            return x[lo : lo + size].reshape((cls.size, episodes) + x.shape[1:])

        obs, done = block(raw_obs), block(dones)
        mask_c = block(mask) if mask is not None else None
        acts = jnp.zeros((cls.size, episodes, num_agents), jnp.int32)
        role_carries = []
        for r, role in enumerate(cls.roles):
            policy = policies[role.group]
            if mask_c is None:
                m = jnp.ones(obs.shape[:3] + (num_actions,), bool)
            else:  # members with ACTION_MASKING off see every action as legal
                m = jnp.where(use_mask[c][r][:, None, None, None], mask_c, True)

            def per_team(p, cr, o, d, mm, policy=policy):
                def one(cr1, o1, d1, m1):
                    return policy.act(p, cr1, policy.policy_input(o1), d1, m1)

                return jax.vmap(one)(cr, o, d, mm)

            if getattr(policy, "is_agent", False):  # a focal agent (evaluate.agents)
                cr, a = focal.role_actions(
                    policy, carries[c][r], obs, m, step_keys, states, block, role, c
                )
                if a is None:  # a host agent: its actions come from the callback below
                    host_roles.append(cr)
                    role_carries.append(cr.new_carry)
                    continue
            else:
                cr, a = jax.vmap(per_team)(params[c][r], carries[c][r], obs, done, m)
            acts = jnp.where(np.isin(np.arange(num_agents), role.slots), a, acts)
            role_carries.append(cr)
        new_carries.append(tuple(role_carries))
        actions.append(acts)
        start += size
    for hr, a in zip(host_roles, focal.host_actions(host_roles), strict=True):
        on = np.isin(np.arange(num_agents), hr.role.slots)
        actions[hr.cls] = jnp.where(on, a, actions[hr.cls])
    return tuple(new_carries), jnp.concatenate([a.reshape((-1, num_agents)) for a in actions])


def _select(pred: jax.Array, new: Any, old: Any) -> Any:
    """Per-slot select of two trees with leading axis N (``pred`` is ``[N]`` bool)."""
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(pred.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, old
    )


class Loop(NamedTuple):
    """Everything the rollout carries from one call to the next (it never leaves the
    device): the batch slots, the output buffer and the schedule."""

    slots: SlotCarry
    done: EpisodeResult
    sched: Schedule


class Status(NamedTuple):
    """What the host reads after each call (a few scalars): enough for a progress bar."""

    running: jax.Array  # [] int32: slots with an episode in progress
    finished: jax.Array  # [] int32: episodes handed to the output buffer so far
    live_steps: jax.Array  # [] int32: env steps that belonged to an episode so far
    slot_steps: jax.Array  # [] int32: steps run so far x slots (live or idle)
    team_finished: jax.Array  # [teams] int32: ``finished`` per team (its queue is done at E)


class StepLog(NamedTuple):
    """Every step of one call, for recording (leading axes ``[steps, N]``). Step ``t`` of an
    episode: the observation and legal actions the agents saw, the actions they took, and
    the rewards, dones and team achievements that came back."""

    live: jax.Array  # bool: the slot's step belonged to an episode
    episode: jax.Array  # int32: that episode (queue index of the slot's team)
    t: jax.Array  # int32: its step index
    key: jax.Array  # [2] uint32: the slot's step key before the step
    observations: jax.Array  # [P, obs_dim] float32, raw
    legal_actions: jax.Array  # [P, A] bool
    actions: jax.Array  # [P] int32
    rewards: jax.Array  # [P] float32
    dones: jax.Array  # [P] bool
    team_achievements: jax.Array  # int32: distinct achievements the team holds after it
    team_reward: jax.Array  # float32: mean over agents (what the episode return sums)
    last: jax.Array  # bool: the episode's last step (the env ended it, or the cap)
    terminated: jax.Array  # bool: the env reported ``__all__`` done


@dataclass(frozen=True)
class Machine:
    """The continuous-batching rollout of one batch structure, as two pure functions:
    :meth:`start` (slots take each team's first episodes) and :meth:`advance` (run up to
    ``chunk`` steps). The host calls ``advance`` until :class:`Status` says no slot runs:
    a call after that changes nothing, so results never depend on how the loop was cut
    into calls.

    ``world_obs [E, P, obs_dim]`` / ``world_states [E, ...]`` are the reset worlds of the
    episodes (episode ``e`` of every team starts from world ``e``). The batch is
    ``N = sum(class sizes) x slots`` slots, laid out class by class, team by team. Each
    team has a queue (its episodes, in order) served by its own slots, so a team's
    weights drive the same block of the batch for the whole run (one stacked matmul per
    team and step, never a per-slot gather of weights). After every step, a slot whose
    episode ended writes it to the output buffer, and up to ``ports`` free slots (lowest
    index first) take their team's next pending episodes, on the device: the new episode
    runs from the very next step, so a slot idles only once its team's queue is empty.
    Step keys: ``fast`` -- episode ``e`` threads its own chain from ``episode_keys[e]``,
    so its records do not depend on which slot ran it or when; ``reference``
    (``slots == 1``) -- each team's key chain starts at ``start_keys[team]`` and is
    carried from one episode to the next, as upstream's sequential evaluation does.

    Every step, each class's roles run their policies (vmapped over the class's teams,
    then its slots) on the raw observations of all ``P`` agents -- the batch shape
    upstream's policies see -- each role's actions are kept for the agent slots it drives,
    and ONE vmapped ``env.step`` advances all ``N`` slots. ``params`` and ``use_mask`` are
    nested per class, per role, with a leading axis of the class size.

    Guarantees: exactly ``min(T, max_steps[e])`` env steps count for episode ``e``, where T
    is the step at which the env reports ``__all__`` done. What an episode's result
    depends on (key, step count, rewards, the ~1 kB of state leaves ``compute_score``
    reads) is written when it ends; the rest of an idle slot's env state keeps stepping,
    unused (freezing all ~390 kB of it every step would cost 10-25% of the step).
    ``max_steps [E]`` are the episodes' step limits, each in ``[1, capacity]`` (one cap
    for all, or per episode: a batch ragged by design).
    """

    env: Any
    mask_env: Any  # None: no member masks and nothing is recorded
    policies: tuple[GreedyPolicy, ...]
    classes: tuple[TeamClass, ...]
    slots: int
    chunk: int  # steps per call (at most)
    capacity: int
    record: bool
    cond_refill: bool = True  # skip the writes and refill on steps with nothing to do

    @property
    def num_teams(self) -> int:
        return sum(c.size for c in self.classes)

    @property
    def num_slots(self) -> int:
        return self.num_teams * self.slots

    @property
    def team_of(self) -> np.ndarray:
        """``[N]`` (static): the team each batch slot belongs to."""
        return np.repeat(np.arange(self.num_teams), self.slots)

    @property
    def ports(self) -> int:
        """Slots that can take a new episode after one step (each port gathers one reset
        world into the batch): one per :data:`SLOTS_PER_PORT` slots."""
        return -(-self.num_slots // SLOTS_PER_PORT)

    @staticmethod
    def _cap(episode: jax.Array, max_steps: jax.Array) -> jax.Array:
        """The step limit of each slot's episode (idle slots: the last episode's)."""
        return max_steps[jnp.clip(episode, 0, max_steps.shape[0] - 1)]

    def _snapshot(self, state, score_idx) -> tuple:
        leaves = jax.tree_util.tree_leaves(state)
        return tuple(leaves[i] for i in score_idx)

    def _score_idx(self, world_states) -> tuple[int, ...]:
        return self.env.score_leaf_indices(jax.tree_util.tree_map(lambda x: x[0], world_states))

    def start(self, world_obs, world_states, episode_keys, start_keys, max_steps) -> Loop:
        """Idle slots, empty buffers, then every slot takes its team's first episode."""
        n = self.num_slots
        num_episodes, num_agents = world_obs.shape[:2]
        score_idx = self._score_idx(world_states)
        first = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x[0], (n,) + x.shape[1:]), world_states
        )
        idle = SlotCarry(
            episode=jnp.full((n,), num_episodes, jnp.int32),
            t=jnp.zeros((n,), jnp.int32),
            alive=jnp.zeros((n,), bool),
            key=(
                jnp.zeros((n, 2), jnp.uint32)
                if start_keys is None
                else jnp.repeat(start_keys, self.slots, axis=0)
            ),
            state=first,
            obs=jnp.broadcast_to(world_obs[0], (n,) + world_obs.shape[1:]),
            policy_carry=init_team_carries(self.policies, self.classes, self.slots),
            dones=jnp.zeros((n, num_agents), bool),
        )
        te = (self.num_teams, num_episodes)
        done = EpisodeResult(
            length=jnp.zeros(te, jnp.int32),
            terminated=jnp.zeros(te, bool),
            start=jnp.zeros(te, jnp.int32),
            rewards=jnp.zeros(te + (self.capacity,), jnp.float32),
            snapshot=tuple(
                jnp.zeros(te + x.shape[1:], x.dtype)
                for x in self._snapshot(world_states, score_idx)
            ),
            key=jnp.zeros(te + (2,), jnp.uint32),
        )
        zero = jnp.zeros((), jnp.int32)
        teams = jnp.zeros((self.num_teams,), jnp.int32)
        sched = Schedule(zero, teams, teams, zero)
        world = (world_obs, world_states, episode_keys)
        return self._refill(Loop(idle, done, sched), world, ports=n)

    def advance(
        self, loop: Loop, params, use_mask, dyn, world_obs, world_states, episode_keys, max_steps
    ) -> tuple[Loop, Status, StepLog | None]:
        """Up to ``chunk`` steps (none once every queue is empty and no slot runs)."""
        TRACE_COUNTS["rollout"] += 1
        score_idx = self._score_idx(world_states)
        step = functools.partial(
            self._step,
            policy=(params, use_mask, dyn),
            world=(world_obs, world_states, episode_keys),
            max_steps=max_steps,
            score_idx=score_idx,
        )
        if self.record:  # a log row per step: a fixed number of steps per call

            def body(lp: Loop, _):
                return step(lp, log=True)

            def steps(lp: Loop):
                return jax.lax.scan(body, lp, None, length=self.chunk)

            # The call the host queues after the end costs nothing (no step runs).
            busy = jnp.any(loop.slots.alive)
            loop, log = jax.lax.cond(busy, steps, lambda lp: (lp, self._idle_log(lp)), loop)
        else:  # a while_loop: it stops at the step after which no slot runs

            def more(state):
                lp, i = state
                return jnp.any(lp.slots.alive) & (i < self.chunk)

            def one(state):
                lp, i = state
                return step(lp, log=False)[0], i + 1

            loop, _ = jax.lax.while_loop(more, one, (loop, jnp.int32(0)))
            log = None
        s = loop.sched
        status = Status(
            jnp.sum(loop.slots.alive, dtype=jnp.int32),
            jnp.sum(s.finished),
            s.live_steps,
            s.steps * self.num_slots,
            s.finished,
        )
        return loop, status, log

    def _idle_log(self, lp: Loop) -> StepLog:
        """The log of a call in which nothing runs (every row dead)."""
        c = lp.slots
        n, p = c.dones.shape

        def zeros(shape, dtype):
            return jnp.zeros((self.chunk, n) + shape, dtype)

        return StepLog(
            live=zeros((), bool),
            episode=zeros((), jnp.int32),
            t=zeros((), jnp.int32),
            key=zeros((2,), c.key.dtype),
            observations=zeros(c.obs.shape[1:], c.obs.dtype),
            legal_actions=zeros((p, self.env.statics.num_actions), bool),
            actions=zeros((p,), jnp.int32),
            rewards=zeros((p,), jnp.float32),
            dones=zeros((p,), bool),
            team_achievements=zeros((), jnp.int32),
            team_reward=zeros((), jnp.float32),
            last=zeros((), bool),
            terminated=zeros((), bool),
        )

    # -- one step -------------------------------------------------------------------------
    def _step(self, lp: Loop, *, policy, world, max_steps, score_idx, log: bool):
        """One step of every slot, the output buffer's writes, then the refill ->
        (loop, this step's log row or None)."""
        params, use_mask, dyn = policy
        env = self.env
        c, done, sched = lp
        n = self.num_slots
        split = jax.vmap(lambda k: jax.random.split(k, 3))(c.key)  # act key unused: greedy
        key, env_key = split[:, 0], split[:, 2]
        mask = (
            None
            if self.mask_env is None
            else jax.vmap(self.mask_env.action_mask, (0, None))(c.state, dyn)
        )
        pcarry, actions = team_actions(
            self.policies,
            self.classes,
            params,
            use_mask,
            c.policy_carry,
            c.obs,
            c.dones,
            mask,
            episodes=self.slots,
            num_actions=env.statics.num_actions,
            step_keys=c.key,  # focal agents derive their keys from it (evaluate.agents)
            states=c.state,
        )
        out = jax.vmap(env.step, (0, 0, 0, None))(env_key, c.state, actions, dyn)
        live = c.alive
        t = c.t + live.astype(jnp.int32)
        ended = live & (out.done | (t >= self._cap(c.episode, max_steps)))
        key = _select(live, key, c.key)
        team_of = self.team_of
        team_reward = jnp.mean(out.reward, axis=-1)
        # The output buffer: every live step's reward (then, below, each episode that ended).
        at_team = jnp.where(live, team_of, self.num_teams)  # out of bounds -> dropped
        rewards = done.rewards.at[at_team, c.episode, c.t].set(team_reward, mode="drop")
        sched = sched._replace(  # (a recording's last call pads with steps nothing runs in)
            steps=sched.steps + jnp.any(live).astype(jnp.int32),
            finished=sched.finished
            + jnp.sum(ended.reshape(self.num_teams, self.slots), axis=1, dtype=jnp.int32),
            live_steps=sched.live_steps + jnp.sum(live, dtype=jnp.int32),
        )
        new = c._replace(
            t=t,
            alive=live & ~ended,
            key=key,
            state=out.state,
            obs=out.obs,
            policy_carry=pcarry,
            dones=out.agent_dones,
        )
        snapshot = self._snapshot(out.state, score_idx)
        end_team = jnp.where(ended, team_of, self.num_teams)

        def finish_and_refill(lp: Loop) -> Loop:
            def put(buf, value):
                return buf.at[end_team, c.episode].set(value, mode="drop")

            d = lp.done
            d = d._replace(
                length=put(d.length, t),
                terminated=put(d.terminated, out.done),
                snapshot=tuple(put(b, v) for b, v in zip(d.snapshot, snapshot, strict=True)),
                key=put(d.key, key),
            )
            return self._refill(lp._replace(done=d), world, ports=min(self.ports, n))

        loop = Loop(new, done._replace(rewards=rewards), sched)
        # Most steps no episode ends and no slot waits: skip the writes and the refill's
        # gathers (a few hundred small ops, one per env-state leaf) on those steps.
        pending = (world[0].shape[0] - sched.next_episode > 0)[team_of]
        busy = jnp.any(ended) | jnp.any(~new.alive & pending)
        if self.cond_refill:
            loop = jax.lax.cond(busy, finish_and_refill, lambda lp: lp, loop)
        else:
            loop = finish_and_refill(loop)
        if not log:
            return loop, None
        row = StepLog(
            live=live,
            episode=c.episode,
            t=c.t,
            key=c.key,
            observations=c.obs,
            legal_actions=mask if mask is not None else jnp.ones(actions.shape + (1,), bool),
            actions=actions,
            rewards=out.reward,
            dones=out.agent_dones,
            team_achievements=jax.vmap(env.team_achievements)(out.state),
            team_reward=team_reward,
            last=ended,
            terminated=out.done,
        )
        return loop, row

    # -- refill ---------------------------------------------------------------------------
    def _reset_carries(self, carries, take: jax.Array):
        """Zero the recurrent state of the roles of every slot that starts an episode."""
        out, start = [], 0
        for cls, role_carries in zip(self.classes, carries, strict=True):
            size = cls.size * self.slots
            fresh = take[start : start + size].reshape(cls.size, self.slots)
            out.append(
                tuple(
                    jax.tree_util.tree_map(
                        lambda x, f=fresh: jnp.where(
                            f.reshape(f.shape + (1,) * (x.ndim - 2)), 0, x
                        ),
                        rc,
                    )
                    for rc in role_carries
                )
            )
            start += size
        return tuple(out)

    def _refill(self, lp: Loop, world, *, ports: int) -> Loop:
        """Up to ``ports`` free slots (lowest index first) take their team's next pending
        episodes: its reset world, its key (``fast``), zero recurrent state."""
        world_obs, world_states, episode_keys = world
        c, done, sched = lp
        n_teams, slots, n = self.num_teams, self.slots, self.num_slots
        num_episodes = world_obs.shape[0]
        free = (~c.alive).reshape(n_teams, slots)
        rank = jnp.cumsum(free, axis=1) - 1  # among the team's free slots
        pending = num_episodes - sched.next_episode
        wants = (free & (rank < pending[:, None])).reshape(n)
        if ports >= n:
            sel = jnp.where(wants, jnp.arange(n), n)
        else:
            sel = jnp.nonzero(wants, size=ports, fill_value=n)[0]
        # Per selected slot (out of bounds n: nothing to take): team, episode.
        team = jnp.asarray(np.append(self.team_of, n_teams))[sel]
        episode = jnp.where(
            sel < n,
            sched.next_episode[jnp.clip(team, 0, n_teams - 1)]
            + rank.reshape(n)[jnp.clip(sel, 0, n - 1)],
            num_episodes,
        )
        idx = jnp.clip(episode, 0, num_episodes - 1)

        def put(x, value):
            return x.at[sel].set(value, mode="drop")

        fresh = put(jnp.zeros((n,), bool), True)
        c = SlotCarry(
            episode=put(c.episode, episode),
            t=put(c.t, 0),
            alive=put(c.alive, True),
            key=c.key if episode_keys is None else put(c.key, episode_keys[idx]),
            state=jax.tree_util.tree_map(lambda x, w: put(x, w[idx]), c.state, world_states),
            obs=put(c.obs, world_obs[idx]),
            policy_carry=self._reset_carries(c.policy_carry, fresh),
            dones=put(c.dones, False),
        )
        done = done._replace(start=done.start.at[team, episode].set(sched.steps, mode="drop"))
        sched = sched._replace(
            next_episode=sched.next_episode.at[team].add(1, mode="drop"),
        )
        return Loop(c, done, sched)


# ----------------------------------------------------------------------------------------
# Compiled programs
# ----------------------------------------------------------------------------------------
def _timed_compile(jitted, args, label: str):
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    COMPILE_STATS.append(
        CompileStat(label, _shape_summary(args), t1 - t0, time.perf_counter() - t1)
    )
    return compiled


# Sources whose code ends up in the compiled programs: an exported program is reused only
# by the same code (an editable install keeps no version number honest).
# Paths relative to the alem_eval package: the play core's package, whole, and the models.
_PROGRAM_SOURCES = ("evaluate", "model/policies.py", "model/networks.py", "envs/eval_env.py")


@functools.lru_cache(maxsize=1)
def _code_identity() -> str:
    """Versions and source hash that an exported program is valid for."""
    import hashlib

    import jaxlib

    from alem_eval.envs.loader import installed_env_version

    h = hashlib.sha256()
    package = Path(__file__).parents[1]
    for name in _PROGRAM_SOURCES:
        where = package / name
        for path in sorted(where.glob("*.py")) if where.is_dir() else [where]:
            h.update(path.read_bytes())
    parts = (
        jax.__version__,
        jaxlib.__version__,
        installed_env_version(),
        jax.default_backend(),
        str(jax.config.jax_threefry_partitionable),  # type: ignore[attr-defined]
        str(jax.config.jax_enable_x64),  # type: ignore[attr-defined]
        h.hexdigest(),
    )
    return "|".join(parts)


def _export_dir() -> Path | None:
    """Where traced programs are kept (beside the compilation cache); None when the
    compilation cache is off, or ALEM_EVAL_NO_EXPORT is set."""
    if os.environ.get("ALEM_EVAL_NO_EXPORT") or not jax.config.jax_compilation_cache_dir:  # type: ignore[attr-defined]
        return None
    return Path(jax.config.jax_compilation_cache_dir) / "alem-eval-exported"  # type: ignore[attr-defined]


class _Compiled:
    """A jitted function whose executables are compiled ahead of time, once per input
    shapes, with the trace/compile time recorded in :data:`COMPILE_STATS`.

    With an ``identity`` (a string naming everything the function closes over) and the
    persistent compilation cache on, the traced program is also serialised with
    ``jax.export`` (keyed by the identity, the input shapes and :func:`_code_identity`), so
    a later process skips the Python trace of the Alem step (5-20 s) and, through the
    compilation cache, the XLA compile too.
    """

    def __init__(self, fn: Callable, label: str, identity: str | None = None, *, donate: int = 0):
        self._fn = fn
        self._donate = donate  # the first `donate` arguments' buffers are reused for outputs
        self._jitted = jax.jit(fn, donate_argnums=tuple(range(donate)))
        self.label = label
        self.identity = identity
        self._executables: dict[Any, Any] = {}

    def __call__(self, *args):
        shapes = jax.tree_util.tree_map(lambda x: (np.shape(x), str(np.result_type(x))), args)
        sig = (str(jax.tree_util.tree_structure(args)), str(jax.tree_util.tree_leaves(shapes)))
        exe = self._executables.get(sig)
        if exe is None:
            exe = self._executables[sig] = self._build(args, sig)
        return exe(*args)

    def _build(self, args, sig):
        kind = self.label.split(":")[0]
        store = _export_dir() if self.identity is not None else None
        if store is None:
            TRACE_COUNTS[f"{kind}:traced"] += 1
            return _timed_compile(self._jitted, args, self.label)
        import hashlib

        # The device context and the inputs' shardings shape the exported program too.
        shardings = tuple(
            str(getattr(x, "sharding", None)) for x in jax.tree_util.tree_leaves(args)
        )
        context = (self.identity, sig, shardings, jax.local_device_count(), _code_identity())
        name = hashlib.sha256(repr(context).encode()).hexdigest()
        path = store / f"{name[:40]}.jaxexport"
        t0 = time.perf_counter()
        compiled = None
        loaded = _load_exported(path)
        if loaded is not None:
            try:
                compiled = self._compile_exported(loaded, args)
                TRACE_COUNTS[f"{kind}:loaded"] += 1
            except Exception:
                compiled = None
        if compiled is None:
            TRACE_COUNTS[f"{kind}:traced"] += 1
            loaded = self._export(args, path)
            compiled = self._compile_exported(loaded, args)
        stat = COMPILE_STATS[-1]  # "trace": everything before the XLA compile
        COMPILE_STATS[-1] = dataclasses.replace(
            stat, trace_s=time.perf_counter() - t0 - stat.compile_s
        )
        return compiled

    def _export(self, args, path: Path) -> tuple[Any, Any]:
        """Trace ``fn`` (flat leaves in and out: jax.export cannot serialise alem's state
        classes) and save it with the output tree structure beside it."""
        import pickle

        from jax import export

        in_tree = jax.tree_util.tree_structure(args)
        out_tree: list[Any] = []

        def flat_fn(*leaves):
            out = self._fn(*jax.tree_util.tree_unflatten(in_tree, leaves))
            out_leaves, tree = jax.tree_util.tree_flatten(out)
            out_tree.append(tree)
            return out_leaves

        exported = export.export(jax.jit(flat_fn))(*jax.tree_util.tree_leaves(args))
        try:
            blob = pickle.dumps({"exported": exported.serialize(), "out_tree": out_tree[0]})
            write_bytes_atomic(path, blob)
        except (ImportError, OSError, pickle.PicklingError) as exc:  # no warm start
            warnings.warn(f"traced program not saved for a warm start ({exc})", stacklevel=2)
        return exported, out_tree[0]

    def _compile_exported(self, loaded: tuple[Any, Any], args) -> Callable:
        exported, tree = loaded
        leaves = jax.tree_util.tree_leaves(args)
        donated = tuple(range(len(jax.tree_util.tree_leaves(args[: self._donate]))))
        compiled = _timed_compile(
            jax.jit(exported.call, donate_argnums=donated), leaves, self.label
        )
        return lambda *a: jax.tree_util.tree_unflatten(
            tree, compiled(*jax.tree_util.tree_leaves(a))
        )


def _load_exported(path: Path) -> tuple[Any, Any] | None:
    """A saved ``(Exported, output tree)``, or None when absent or unreadable."""
    import pickle

    from jax import export

    if not path.is_file():
        return None
    try:
        blob = pickle.loads(path.read_bytes())
        return export.deserialize(bytearray(blob["exported"])), blob["out_tree"]
    except Exception:
        return None


def _shape_summary(args) -> str:
    leaves = jax.tree_util.tree_leaves(args)
    return f"{len(leaves)} leaves, first {tuple(np.shape(leaves[0]))}" if leaves else "-"


@functools.cache
def _world_programs(world: Any) -> tuple[_Compiled, _Compiled]:
    """(reset, batched score) for one env: programs shared by every algorithm, protocol
    and stack size (they depend only on the world statics). Reset is compiled for one
    world; the score for a batch of terminal snapshots whose size is rounded up to a power
    of two, so few sizes are ever compiled."""
    from alem_eval.envs.eval_env import get_eval_env

    env = get_eval_env(world)

    def score(snapshot: tuple, template: Any) -> dict[str, jax.Array]:
        """compute_score of ``template`` with the leaves it reads replaced by ``snapshot``."""
        return env.score(terminal_state(template, snapshot, env.score_leaf_indices(template)))

    ident = repr(world)
    return (
        _Compiled(env.reset, "reset", f"reset:{ident}"),
        _Compiled(jax.vmap(score, in_axes=(0, None)), "score", f"score:{ident}"),
    )


@dataclass(frozen=True)
class ProgramKey:
    protocol: str
    network_keys: tuple[str, ...]  # the network groups, in role-group order
    classes: tuple[TeamClass, ...]
    world: Any  # alem_eval.envs.eval_env.EnvStatics of the world (no policy-side flags)
    masking: bool  # some member uses ACTION_MASKING: the program computes masks
    slots: int  # batch slots per team (per device); reference: 1
    chunk: int  # steps per call
    capacity: int
    num_devices: int
    record: bool = False  # calls also return every step (StepLog)


class _Program:
    """The compiled rollout of one batch structure (network groups x team classes x world):
    ``start`` and ``advance`` of its :class:`Machine`, per protocol, over the devices."""

    def __init__(self, key: ProgramKey, specs: Sequence[NetworkSpec]):
        from alem_eval.envs.eval_env import get_eval_env

        self.key = key
        self.env = env = get_eval_env(key.world)
        mask_env = (
            get_eval_env(dataclasses.replace(key.world, action_masking=True))
            if key.masking or key.record
            else None
        )
        self.machine = Machine(
            env=env,
            mask_env=mask_env,
            # a focal agent's group is its adapter (evaluate.agents), not a network spec
            policies=tuple(
                cast(Any, s) if getattr(s, "is_agent", False) else make_policy(s) for s in specs
            ),
            classes=self.classes,
            slots=key.slots,
            chunk=key.chunk,
            capacity=key.capacity,
            record=key.record,
        )
        start, advance = (
            (self._reference_start, self._reference_advance)
            if key.protocol == "reference"
            else (self._fast_start, self._fast_advance)
        )
        if key.num_devices > 1:
            start, advance = self._sharded(start, loop_in=False), self._sharded(advance)
        names = "+".join(dict.fromkeys(s.algorithm for s in specs))
        # Multi-device (shard_map) programs are not exported: they trace every process;
        # nor are those with focal agents (their code is not in _code_identity; host
        # agents' callbacks cannot be serialised).
        focal = any(getattr(s, "is_agent", False) for s in specs)
        ident = repr(key) if key.num_devices == 1 and not focal else None
        label = f"{key.protocol}:{names}"
        self.start = _Compiled(start, f"rollout-start:{label}", ident and f"start:{ident}")
        self.advance = _Compiled(advance, f"rollout:{label}", ident, donate=1)

    @property
    def classes(self) -> tuple[TeamClass, ...]:
        """The team classes one device sees (``reference`` splits the teams of its single
        class over the devices; ``fast`` splits the episodes)."""
        n = self.key.num_devices
        if self.key.protocol == "reference" and n > 1:
            return tuple(TeamClass(c.roles, c.size // n) for c in self.key.classes)
        return self.key.classes

    def _prepare(self, variables):
        """Per class, per role: the policy's per-checkpoint constants (vmapped over teams)."""
        return tuple(
            tuple(
                jax.vmap(self.machine.policies[role.group].prepare)(variables[c][r])
                for r, role in enumerate(cls.roles)
            )
            for c, cls in enumerate(self.classes)
        )

    # Per protocol: the arguments each one needs, in the order _sharded splits them.
    def _reference_start(self, start_keys, world_obs, world_states, max_steps):
        """[T] teams, each its episodes back to back in one slot, one key chain per team."""
        return self.machine.start(world_obs, world_states, None, start_keys, max_steps)

    def _reference_advance(
        self, loop, variables, use_mask, dyn, world_obs, world_states, max_steps
    ):
        return self.machine.advance(
            loop, self._prepare(variables), use_mask, dyn, world_obs, world_states, None, max_steps
        )

    def _fast_start(self, chain_keys, world_obs, world_states, max_steps):
        """[T] teams x [E] episodes through the teams' slots (buffers ``[T, E, ...]``)."""
        return self.machine.start(world_obs, world_states, chain_keys, None, max_steps)

    def _fast_advance(
        self, loop, variables, use_mask, dyn, chain_keys, world_obs, world_states, max_steps
    ):
        return self.machine.advance(
            loop,
            self._prepare(variables),
            use_mask,
            dyn,
            world_obs,
            world_states,
            chain_keys,
            max_steps,
        )

    def _sharded(self, fn: Callable, loop_in: bool = True) -> Callable:
        """Split the episodes (``fast``) or the teams of the single class (``reference``)
        over the local devices; each device runs its own slots and loop. Everything a
        device returns gets a leading device axis (see :meth:`merge`)."""
        from jax.experimental.shard_map import shard_map
        from jax.sharding import Mesh
        from jax.sharding import PartitionSpec as P

        mesh = Mesh(np.array(jax.local_devices()[: self.key.num_devices]), ("d",))
        d, r = P("d"), P()
        if self.key.protocol == "reference":  # (start keys | variables, mask, dyn), worlds, caps
            specs: tuple = (d, d, r, r, r, r) if loop_in else (d, r, r, r)
        else:  # (variables, mask, dyn), chain keys, worlds, caps (all per episode)
            specs = (r, r, r, d, d, d, d) if loop_in else (d, d, d, d)
        if loop_in:
            specs = (d,) + specs

        def per_device(*args):
            if loop_in:
                args = (jax.tree_util.tree_map(lambda x: x[0], args[0]),) + args[1:]
            return jax.tree_util.tree_map(lambda x: x[None], fn(*args))

        return shard_map(per_device, mesh=mesh, in_specs=specs, out_specs=d, check_rep=False)

    def host_status(self, status: Status) -> Status:
        """A call's :class:`Status` (host arrays, per device) -> totals, ``team_finished``
        in batch order."""
        per_team: Any = np.asarray(status.team_finished)
        if per_team.ndim == 2:  # [D, teams]: fast splits episodes, reference teams
            per_team = per_team.reshape(-1) if self.key.protocol == "reference" else per_team.sum(0)
        running, finished, live, slot = (np.sum(np.asarray(x)) for x in status[:4])
        return Status(running, finished, live, slot, per_team)

    def merge(self, tree: Any) -> Any:
        """Per-device results -> one: ``[D, T, E/D, ...] -> [T, E]`` (``fast``) or
        ``[D, T/D, E, ...] -> [T, E]`` (``reference``); single-device results pass through."""
        if self.key.num_devices == 1:
            return tree
        axis = 0 if self.key.protocol == "reference" else 1

        def join(x):
            return jnp.concatenate(list(x), axis=axis)

        return jax.tree_util.tree_map(join, tree)


_PROGRAMS: dict[ProgramKey, _Program] = {}


def _program(key: ProgramKey, specs: Sequence[NetworkSpec]) -> _Program:
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _PROGRAMS[key] = _Program(key, specs)
    return prog


def clear_program_cache() -> None:
    """Forget every compiled program (tests; frees memory)."""
    _PROGRAMS.clear()
    _world_programs.cache_clear()


# ----------------------------------------------------------------------------------------
# Stacks and teams
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RolloutProgress:
    """Where an evaluation call stands (reported after every compiled call)."""

    episodes_done: int
    episodes_total: int
    live_steps: int  # env steps that belonged to an episode so far
    elapsed_s: float  # since the call's first rollout started (compiles included)

    @property
    def steps_per_s(self) -> float:
        return self.live_steps / self.elapsed_s if self.elapsed_s > 0 else 0.0


@dataclass(frozen=True)
class StackResult:
    """Per-team (self-play: per-checkpoint), per-episode results of one evaluation call."""

    records: list[list[dict[str, float]]]  # [team][episode]
    starts: list[np.ndarray]  # [team] -> [episodes] the loop step each episode started at
    protocol: str
    eval_difficulty: str
    chunk: int
    live_steps: int = 0  # env steps that belonged to an episode
    slot_steps: int = 0  # env steps the batch slots ran (live or idle)
    record_error: str | None = None  # why the recording stopped early (run_teams' record)

    @property
    def utilisation(self) -> float:
        """Live env-steps per slot-step: 1.0 when no batch slot ever idled."""
        return self.live_steps / self.slot_steps if self.slot_steps else 0.0


def _capacity(max_steps: int) -> int:
    return int(math.ceil(max_steps / CAPACITY_BUCKET) * CAPACITY_BUCKET)


def _policy_variables(spec: NetworkSpec, weights: Any, where: str) -> Any:
    """The policy's flax variables as float32 numpy, checked against the configured shapes."""
    try:
        variables = spec.policy_variables(weights)
    except (KeyError, TypeError) as exc:
        raise EvaluationError(f"{where}: weights lack the policy parameters ({exc})") from None
    variables = jax.tree_util.tree_map(np.asarray, variables)
    expected = spec.policy_variables(spec.expected_tree())
    got = {
        jax.tree_util.keystr(p): tuple(x.shape)
        for p, x in jax.tree_util.tree_flatten_with_path(variables)[0]
    }
    exp = {
        jax.tree_util.keystr(p): tuple(x.shape)
        for p, x in jax.tree_util.tree_flatten_with_path(expected)[0]
    }
    if got != exp:
        bad = sorted(set(got) ^ set(exp)) or sorted(k for k in exp if exp[k] != got[k])
        detail = ", ".join(f"{k}: expected {exp.get(k)}, found {got.get(k)}" for k in bad[:3])
        raise EvaluationError(f"{where}: weights do not match the configured network ({detail})")
    return jax.tree_util.tree_map(lambda x: x.astype(np.float32, copy=False), variables)


def _stack(trees: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *trees)


def _devices_for(n: int) -> int:
    """How many local devices to split an axis of length n over (all of them, if n > 1)."""
    return max(1, min(jax.local_device_count(), n))


def run_stack(
    cfgs: Sequence[RunConfig],
    weights: Sequence[Any],
    *,
    protocol: str = DEFAULT_PROTOCOL,
    eval_difficulty: str,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    on_env_mismatch: str = "error",
    chunk: int = CHUNK,
    batch: int | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
    record: RecordTo | None = None,
    episode_caps: Sequence[int] | None = None,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    padding: Collection[int] = (),
) -> StackResult:
    """Self-play evaluation of a stack of checkpoints (any algorithms) on ``eval_difficulty``.

    ``cfgs[k]`` describes ``weights[k]`` (a weights tree in the released disk layout, or at
    least its policy part). Each checkpoint drives all agents of its own team; all teams
    that share the world's env configuration run in ONE compiled program (one trace of the
    Alem step, whatever the algorithms). The result keeps the input order;
    ``on_team(k, records)`` gets checkpoint ``k``'s records as soon as its last episode
    ends (see :func:`run_teams`). ``padding``: checkpoints that only fill the stack's
    structure (see :func:`run_teams`).
    """
    teams = [(k,) * (cfg.env.num_agents if cfg is not None else 1) for k, cfg in enumerate(cfgs)]
    return run_teams(
        cfgs,
        weights,
        teams,
        protocol=protocol,
        eval_difficulty=eval_difficulty,
        num_episodes=num_episodes,
        max_steps=max_steps,
        on_env_mismatch=on_env_mismatch,
        chunk=chunk,
        batch=batch,
        on_progress=on_progress,
        record=record,
        episode_caps=episode_caps,
        on_team=on_team,
        padding=padding,
    )


def run_teams(
    cfgs: Sequence[RunConfig],
    weights: Sequence[Any],
    teams: Sequence[Sequence[int]],
    *,
    protocol: str = DEFAULT_PROTOCOL,
    eval_difficulty: str,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    on_env_mismatch: str = "error",
    chunk: int = CHUNK,
    batch: int | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
    record: RecordTo | None = None,
    episode_caps: Sequence[int] | None = None,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    padding: Collection[int] = (),
    agents: Mapping[int, Any] | None = None,
) -> StackResult:
    """Evaluate teams whose agent slots are driven by any of the given checkpoints.

    ``teams[i][s]`` is the index (into ``cfgs``/``weights``) of the checkpoint driving agent
    slot ``s`` of team ``i``; a team of one repeated index is that checkpoint's self-play.
    All members of a team must share the world's env configuration (agents, comm
    channels, reward sharing, difficulty scaling); ``reference`` evaluates self-play teams
    only (it reproduces upstream's evaluation, which has no mixed teams). Returns
    ``records[team][episode]``. With ``record``, every evaluated step of every episode
    streams to ``record.recorder`` as the rollout runs (see :class:`RecordTo`); a recorder
    failure ends the recording, not the evaluation (``StackResult.record_error``).

    ``on_team(i, records)`` is called once per team, with team ``i``'s records, as soon
    as its last episode ends, while other teams may still run (a caller can save a
    finished cell before the whole call ends); they are the records the result holds.

    ``episode_caps[e]`` (benchmarks, tests) truncates episode ``e`` of every team at its
    own step limit, at most the cap: a batch ragged by design, as policies that end
    episodes early would make it.

    ``padding``: indices of teams that only fill the batch structure (copies, so that
    every stack of a selection shares one compiled program). They run, but nothing of
    them is reported: their records and starts are empty, ``on_team`` and the recording
    never see them, and progress counts only the other teams' episodes (``live_steps``
    and ``slot_steps`` still count every step the batch ran).

    ``agents``: checkpoint indices driven by a focal agent instead (an
    :class:`alem_eval.evaluate.agents.AgentGroup`; run them through
    :func:`alem_eval.evaluate.agents.run_agent_teams`): ``cfgs[k]`` says the env it plays
    in, ``weights[k]`` is unused.
    """
    agents = dict(agents or {})
    _validate_request(protocol, eval_difficulty, num_episodes, max_steps)
    if len(cfgs) != len(weights):
        raise EvaluationError(f"{len(cfgs)} configs but {len(weights)} weight trees")
    if not cfgs or not teams:
        raise EvaluationError("nothing to evaluate: the stack is empty")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise UsageError(f"chunk must be a positive integer, got {chunk!r}")
    _check_count("--batch", batch)
    padding = frozenset(padding)
    if not padding <= set(range(len(teams))) or len(padding) == len(teams):
        raise UsageError(
            f"padding {sorted(padding, key=str)} must name some, not all, of the "
            f"{len(teams)} teams (indices from 0)"
        )
    # Both protocols: the PRNG mode draws the worlds (PRNGKey(9999 + i)) and the step keys.
    if jax.config.jax_threefry_partitionable or jax.config.jax_enable_x64:  # type: ignore[attr-defined]
        raise EvaluationError(
            f"protocol {protocol!r} needs jax_threefry_partitionable=False and "
            "jax_enable_x64=False (the PRNG mode and precision the released "
            "numbers were produced with: other worlds and key chains otherwise)"
        )
    from alem_eval.envs.loader import installed_env_version

    installed = installed_env_version()
    for i, cfg in enumerate(cfgs):
        check_env_version(
            cfg, on_mismatch=on_env_mismatch, where=f"checkpoint {i}", installed=installed
        )
    statics = [eval_statics(c) for c in cfgs]
    specs = [build_network(c) for c in cfgs]
    for i, team in enumerate(teams):
        _check_team(i, team, cfgs, statics, protocol)
    if protocol == "reference":
        for cfg in cfgs:
            reference_key(cfg, eval_difficulty)  # fail early when the difficulty was not run
    for i, (spec, st) in enumerate(zip(specs, statics)):
        if st.input_dim != spec.input_dim:
            raise EvaluationError(
                f"checkpoint {i} ({cfgs[i].algorithm}): the network expects inputs of width "
                f"{spec.input_dim} but the eval env gives {st.input_dim} (HyperMARL needs "
                "APPEND_AGENT_ID=true)"
            )
    used = sorted({m for team in teams for m in team})
    variables = {
        # a focal agent's members carry a placeholder (evaluate.agents.AgentGroup.prepare)
        i: np.zeros((1,), np.float32)
        if i in agents
        else _policy_variables(specs[i], weights[i], f"checkpoint {i}")
        for i in used
    }

    def settings(team):
        return episode_settings(cfgs[team[0]], protocol, num_episodes, max_steps)

    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, team in enumerate(teams):
        seed = (cfgs[team[0]].eval.eval_seed,) if protocol == "reference" else ()
        groups[(statics[team[0]].world, *settings(team), *seed)].append(i)

    records: list[Any] = [None] * len(teams)
    starts: list[Any] = [None] * len(teams)
    live = slot = slot_done = 0
    record_error: str | None = None
    real = {g: [i for i in idx if i not in padding] for g, idx in groups.items()}
    total = sum(len(real[g]) * settings(teams[idx[0]])[0] for g, idx in groups.items())
    clock = time.perf_counter()
    for g, idx in groups.items():
        n_ep, cap = settings(teams[idx[0]])
        caps = _episode_caps(episode_caps, n_ep, cap)
        if not real[g]:  # only padding: nothing to report, nothing to run
            for i in idx:
                records[i], starts[i] = [], np.zeros(0, np.int32)
            continue

        def on_status(st: Status, before=(slot_done, live), size=len(real[g]) * n_ep) -> None:
            if on_progress is not None:
                episodes = before[0] + min(int(st.finished), size)
                steps = before[1] + int(st.live_steps)
                on_progress(RolloutProgress(episodes, total, steps, time.perf_counter() - clock))

        recs, st, slot_steps, live_steps, error = _run_group(
            [tuple(teams[i]) for i in idx],
            cfgs,
            specs,
            statics,
            variables,
            protocol,
            eval_difficulty,
            n_ep,
            caps,
            chunk,
            batch,
            on_status,
            record,
            None if on_team is None else functools.partial(_team_in, on_team, idx),
            {j for j, i in enumerate(idx) if i in padding},
            agents,
        )
        record_error = record_error or error
        for j, i in enumerate(idx):
            records[i], starts[i] = recs[j], st[j]
        live, slot = live + live_steps, slot + slot_steps
        slot_done += len(real[g]) * n_ep
    return StackResult(
        records=records,
        starts=starts,
        protocol=protocol,
        eval_difficulty=eval_difficulty,
        chunk=chunk,
        live_steps=live,
        slot_steps=slot,
        record_error=record_error,
    )


def _team_in(on_team: Callable[[int, Any], None], idx: Sequence[int], j: int, records) -> None:
    """``on_team`` of a group's ``j``-th team, ``idx[j]`` in the caller's order."""
    on_team(idx[j], records)


def _episode_caps(caps: Sequence[int] | None, num_episodes: int, cap: int) -> np.ndarray:
    """``[E]`` step limits: the cap for every episode, or ``caps`` checked against it."""
    if caps is None:
        return np.full(num_episodes, cap, np.int32)
    out = np.asarray(caps)
    if out.shape != (num_episodes,) or not np.issubdtype(out.dtype, np.integer):
        raise UsageError(f"episode_caps must be {num_episodes} integers, got {caps!r}")
    if out.min() < 1 or out.max() > cap:
        raise UsageError(f"episode_caps must lie in [1, {cap}], got {out.min()}..{out.max()}")
    return out.astype(np.int32)


def _check_team(i: int, team: Sequence[int], cfgs, statics, protocol: str) -> None:
    if not team or any(
        isinstance(m, bool) or not isinstance(m, (int, np.integer)) or not 0 <= m < len(cfgs)
        for m in team
    ):
        raise EvaluationError(
            f"team {i}: {list(team)!r} names a checkpoint that is not in "
            f"the stack (indices 0..{len(cfgs) - 1})"
        )
    first = statics[team[0]]
    if len(team) != first.num_agents:
        raise EvaluationError(
            f"team {i}: {len(team)} slots but the env has {first.num_agents} agents"
        )
    for m in team[1:]:
        if statics[m].world != first.world:
            raise EvaluationError(
                f"team {i}: checkpoints {team[0]} and {m} need different env configurations "
                f"({_world_diff(first.world, statics[m].world)}); they cannot play together"
            )
    if protocol == "reference" and len(set(team)) > 1:
        raise EvaluationError(
            f"team {i}: protocol 'reference' reproduces upstream's "
            "self-play evaluation; score mixed teams with protocol 'fast'"
        )


def _world_diff(a, b) -> str:
    fields = [f.name for f in dataclasses.fields(a) if getattr(a, f.name) != getattr(b, f.name)]
    return ", ".join(f"{f} {getattr(a, f)} vs {getattr(b, f)}" for f in fields)


def _resets(world, dyn, keys: Sequence[Any]) -> tuple[jax.Array, Any]:
    """Reset worlds for the given keys (one shared compiled reset), stacked on axis 0."""
    reset, _ = _world_programs(world)
    return _stacked(*[reset(k, dyn) for k in keys])


# Array plumbing between the compiled programs, each jitted as a whole: run eagerly, every
# leaf of the Alem state (~130) compiles its own tiny program on first use, ~45 ms each
# on a GPU (an H200 run compiled 658 small programs before its first reset, alem-env's
# import-time constants among them; on a CPU this plumbing was 173 of a first call's 272).
@jax.jit
def _stacked(*trees: Any) -> Any:
    """The trees' leaves stacked on a new axis 0."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


@jax.jit
def _first(tree: Any) -> Any:
    """Row 0 of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[0], tree)


@jax.jit
def _rows(tree: Any, pick: jax.Array) -> Any:
    """Rows ``pick`` of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[pick], tree)


@functools.partial(jax.jit, static_argnums=1)
def _flat_padded(snapshot: tuple, padded: int) -> tuple:
    """``[K, E, ...]`` leaves as ``[padded, ...]``: K*E rows, then copies of the first."""

    def flat(x):
        x = x.reshape((-1,) + x.shape[2:])
        n = x.shape[0]
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (padded - n,) + x.shape[1:])])

    return tuple(flat(x) for x in snapshot)


def _scores(world, snapshot: tuple, template: Any, k: int, e: int) -> dict[str, np.ndarray]:
    """compute_score of every terminal state (``snapshot`` leaves with ``[K, E]`` leading
    axes over the ``template`` state's other leaves) -> host ``[K, E, ...]``."""
    _, score = _world_programs(world)
    n = k * e
    out = jax.device_get(score(_flat_padded(tuple(snapshot), _pow2_at_least(n)), template))
    return {name: np.asarray(v)[:n].reshape((k, e) + np.shape(v)[1:]) for name, v in out.items()}


def terminal_state(template: Any, snapshot: Sequence[Any], score_idx: Sequence[int]) -> Any:
    """``template`` with the leaves ``compute_score`` reads replaced by ``snapshot``."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    for i, leaf in zip(score_idx, snapshot, strict=True):
        leaves[i] = leaf
    return jax.tree_util.tree_unflatten(treedef, leaves)


def _scores_eager(world, snapshot: tuple, template: Any, k: int, e: int) -> dict[str, np.ndarray]:
    """As :func:`_scores`, but ``compute_score`` runs eagerly on each terminal state, as
    upstream's evaluation runs it: inside a compiled program XLA rewrites divisions by
    constants (``x / 376.0`` -> ``x * (1 / 376.0)``), which changes the last bit of the
    reward percentages for 162 of the 377 possible numerators. ``reference`` uses this."""
    from alem_eval.envs.eval_env import get_eval_env

    env = get_eval_env(world)
    host = [np.asarray(x) for x in snapshot]
    idx = env.score_leaf_indices(template)
    out: dict[str, list[np.ndarray]] = {}
    with jax.disable_jit():
        for i in range(k):
            for j in range(e):
                state = terminal_state(template, [jnp.asarray(x[i, j]) for x in host], idx)
                for name, v in env.score(state).items():
                    out.setdefault(name, []).append(np.asarray(v))
    return {name: np.stack(vs).reshape((k, e) + vs[0].shape) for name, vs in out.items()}


def _batch_structure(teams, cfgs, specs, agents: Mapping[int, Any] | None = None):
    """Network groups, team classes (role structure) and the batch order of the teams.
    ``agents``: members driven by a focal agent (:mod:`alem_eval.evaluate.agents`): their
    group is the agent's adapter, keyed by its ``key`` instead of a network."""
    agents = agents or {}

    def net(m):
        return agents[m].key if m in agents else cfgs[m].network_key

    keys = list(dict.fromkeys(net(m) for team in teams for m in team))
    group_of = {m: keys.index(net(m)) for team in teams for m in team}
    by_class: dict[tuple[Role, ...], list[int]] = {}
    for i, team in enumerate(teams):
        members, slots = team_roles(team)
        sig = tuple(Role(group_of[m], s) for m, s in zip(members, slots))
        by_class.setdefault(sig, []).append(i)
    classes = tuple(TeamClass(sig, len(idx)) for sig, idx in by_class.items())
    order = [i for idx in by_class.values() for i in idx]
    first = [next(m for m in group_of if group_of[m] == g) for g in range(len(keys))]
    group_specs = [agents[m] if m in agents else specs[m] for m in first]
    return tuple(keys), group_specs, classes, order


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


def _run_group(
    teams,
    cfgs,
    specs,
    statics,
    variables,
    protocol,
    eval_difficulty,
    num_episodes,
    caps: np.ndarray,
    chunk,
    batch,
    on_status: Callable[[Status], None],
    record: RecordTo | None = None,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    padding: Collection[int] = (),
    agents: Mapping[int, Any] | None = None,
):
    """Evaluate one group of teams (one world and settings) in one program -> (records,
    starts, slot-steps, live env-steps, recording error), per team in the group's order.
    A team's records are made as soon as its last episode ends (``on_team(i, records)``,
    ``i`` its index in ``teams``), from the same output buffer and score program as at the
    end. The teams in ``padding`` (indices into ``teams``) run unreported (:func:`run_teams`)."""
    agents = agents or {}
    keys, group_specs, classes, order = _batch_structure(teams, cfgs, specs, agents)
    batch_teams = [teams[i] for i in order]  # class by class
    t = len(batch_teams)
    wanted = [j for j in range(t) if order[j] not in padding]  # batch rows to report
    world = statics[batch_teams[0][0]].world
    # (focal agents always see the legal actions: evaluate.agents)
    masking = bool(agents) or any(cfgs[m].env.action_masking for team in batch_teams for m in team)
    capacity = _capacity(int(caps.max()))
    if record is not None:
        chunk = min(chunk, RECORD_CHUNK)  # a short log per call: the last call pads it
        if batch is None:  # bound what one call hands the host
            world_dims = statics[batch_teams[0][0]]
            per_slot = (
                chunk * world_dims.num_agents * (world_dims.obs_dim + world_dims.num_actions) * 4
            )
            batch = min(default_batch(), max(1, RECORD_LOG_BYTES // per_slot))
    if protocol == "fast":
        n_dev = _devices_for(num_episodes)
        padded = num_episodes + (-num_episodes) % n_dev
        slots = slots_per_team(t, padded // n_dev, None if batch is None else -(-batch // n_dev))
    else:  # one slot per team; teams of one class split over the devices
        n_dev = _devices_for(t) if len(classes) == 1 else 1
        pad = (-t) % n_dev
        batch_teams += [batch_teams[-1]] * pad
        classes = (TeamClass(classes[0].roles, t + pad),) if pad else classes
        slots = 1
    prog = _program(
        ProgramKey(
            protocol,
            keys,
            classes,
            world,
            masking,
            slots,
            chunk,
            capacity,
            n_dev,
            record=record is not None,
        ),
        group_specs,
    )
    # Per class, per role: the members' variables and masking flags, stacked over teams.
    role_vars, role_mask, start = [], [], 0
    for cls in classes:
        members = [team_roles(team)[0] for team in batch_teams[start : start + cls.size]]
        role_vars.append(
            tuple(_stack([variables[m[r]] for m in members]) for r in range(len(cls.roles)))
        )
        role_mask.append(
            tuple(
                np.array([m[r] in agents or cfgs[m[r]].env.action_masking for m in members])
                for r in range(len(cls.roles))
            )
        )
        start += cls.size
    dyn = prog.env.difficulty_params(eval_difficulty)
    steps = np.pad(caps, (0, padded - num_episodes), mode="edge") if protocol == "fast" else caps
    clock = time.perf_counter()
    worlds: list[Any]
    if protocol == "reference":
        chain = np.stack(
            [np.asarray(reference_key(cfgs[team[0]], eval_difficulty)) for team in batch_teams]
        )
        seeds = cfgs[batch_teams[0][0]].eval.eval_seed + np.arange(num_episodes)
        worlds = [jax.random.PRNGKey(int(s)) for s in seeds]
    else:
        world_keys, chain_keys = fast_keys(padded)
        worlds, chain = list(world_keys), np.asarray(chain_keys)
    obs0, state0 = jax.block_until_ready(_resets(world, dyn, worlds))
    t_reset = time.perf_counter()
    shared = (tuple(role_vars), tuple(role_mask), dyn)
    keys_arg = () if protocol == "reference" else (chain,)  # fast threads per-episode keys
    loop = prog.start(chain, obs0, state0, steps)
    sink = (
        None
        if record is None
        else _RecordSink(
            record,
            prog,
            [team if j in wanted else None for j, team in enumerate(batch_teams[:t])],
            np.stack(worlds),
            num_episodes,
        )
    )
    template = _first(state0)
    queue = len(steps)  # a team's queue (fast: with the episodes padding it to the devices)
    made: dict[int, list[dict[str, float]]] = {}  # batch row -> its episodes' records
    scoring = {"s": 0.0}

    def make_records(rows: list[int], done: EpisodeResult) -> None:
        t0 = time.perf_counter()
        res = jax.tree_util.tree_map(lambda x: x[:t, :num_episodes], prog.merge(done))
        for j, recs in zip(rows, _team_records(protocol, world, res, template, rows), strict=True):
            made[j] = recs
            if on_team is not None:
                on_team(order[j], recs)
        scoring["s"] += time.perf_counter() - t0

    def status(st: Status, done: EpisodeResult) -> None:
        finished = np.minimum(st.team_finished[wanted], num_episodes)  # padding's uncounted
        on_status(st._replace(finished=finished.sum()))
        rows = [j for j in wanted if j not in made and st.team_finished[j] >= queue]
        if rows:
            make_records(rows, done)

    done, slot_steps = _drive(prog, loop, (*shared, *keys_arg, obs0, state0, steps), status, sink)
    t_roll, in_roll = time.perf_counter(), scoring["s"]
    rest = [j for j in wanted if j not in made]
    if rest:  # (every team's last status came with its records: none, unless cut short)
        make_records(rest, done)
    starts = np.asarray(prog.merge(done.start))[:t, :num_episodes]
    lengths = np.asarray(prog.merge(done.length))[:t, :num_episodes]
    LAST_TIMINGS.clear()
    LAST_TIMINGS.update(
        resets_s=t_reset - clock,
        rollout_s=t_roll - t_reset - in_roll,
        records_s=scoring["s"],  # scores and records, also those made during the rollout
    )
    out_records: list[Any] = [None] * t
    out_starts: list[Any] = [None] * t
    for j, i in enumerate(order):
        out_records[i], out_starts[i] = made.get(j, []), starts[j] if j in made else starts[j, :0]
    live_steps = int(lengths.sum())  # every team's, the padding's too: the work the batch ran
    error = None if sink is None else sink.error
    return out_records, out_starts, slot_steps, live_steps, error


def _drive(
    prog: _Program,
    loop: Loop,
    call_args: tuple,
    on_status: Callable[[Status, EpisodeResult], None],
    on_log: Callable[[StepLog], None] | None = None,
):
    """Call ``prog.advance`` until no slot runs -> (output buffer, slot-steps run).

    The next call is queued before the host reads the last call's :class:`Status` and
    :class:`StepLog` (the loop state never leaves the device, its buffers are donated call
    to call), so the device computes while the host reports and records; the one call
    queued after the end changes nothing. ``on_status`` also gets the queued call's output
    buffer (device arrays: every episode the status counts as finished is final in it).
    """
    pending = prog.advance(loop, *call_args)
    while True:
        loop, status, log = pending
        pending = prog.advance(loop, *call_args)
        st = prog.host_status(jax.device_get(status))
        if on_log is not None and log is not None:
            on_log(jax.device_get(log))
        on_status(st, pending[0].done)
        if st.running == 0:
            return pending[0].done, int(st.slot_steps)


@dataclass(frozen=True)
class RecordTo:
    """Where :func:`run_teams` streams every evaluated step (``score --record``)."""

    recorder: Any  # alem_eval.datasets.recording.Recorder
    names: Sequence[str]  # per checkpoint index: the cell id recorded for its agent slots


class _RecordSink:
    """Turns the per-call :class:`StepLog` of one batch into the recorder's calls: a
    slot's live rows in one call are consecutive steps of one or more episodes (a slot
    takes its next episode right after one ends); an episode's last row finishes it. A
    recorder error (unwritable or full disk) stops the recording, never the evaluation:
    it is kept in :attr:`error`."""

    FIELDS = ("observations", "legal_actions", "actions", "rewards", "dones", "team_achievements")

    def __init__(self, target: RecordTo, prog: _Program, teams, world_keys, num_episodes: int):
        """``teams[j]``: batch row ``j``'s team, None for a padding team (never recorded)."""
        self.recorder = target.recorder
        self.team_names = [
            None if team is None else tuple(target.names[m] for m in team) for team in teams
        ]
        self.prog = prog
        self.world_keys = np.asarray(world_keys, np.uint32)
        self.num_episodes = num_episodes
        self.open: dict[tuple[int, int], dict[str, Any]] = {}
        self.error: str | None = None

    def __call__(self, log: StepLog) -> None:
        if self.error is not None:
            return
        key = self.prog.key
        per_device = key.num_devices > 1
        try:
            for d in range(key.num_devices):
                view = jax.tree_util.tree_map(lambda x, d=d: x[d], log) if per_device else log
                self._device(view, d)
        except AlemEvalError as exc:
            self.error = str(exc)

    def _device(self, log: StepLog, d: int) -> None:
        key = self.prog.key
        local_teams = sum(c.size for c in self.prog.classes)
        local_episodes = self.world_keys.shape[0] // (
            1 if key.protocol == "reference" else key.num_devices
        )
        for n in range(log.live.shape[1]):
            live = np.nonzero(log.live[:, n])[0]
            # Split the slot's live rows where its episode changes: one run per episode.
            cuts = np.nonzero(np.diff(log.episode[live, n]))[0] + 1
            for rows in np.split(live, cuts) if live.size else ():
                team = n // key.slots + (d * local_teams if key.protocol == "reference" else 0)
                episode = int(log.episode[rows[0], n]) + (
                    d * local_episodes if key.protocol == "fast" else 0
                )
                names = self.team_names[team] if team < len(self.team_names) else None
                if names is not None and episode < self.num_episodes:  # else padding
                    self._run(log, n, rows, team, names, episode)

    def _run(
        self, log: StepLog, n: int, rows: np.ndarray, team: int, names: tuple, episode: int
    ) -> None:
        """Hand the recorder consecutive rows of one episode of slot ``n``."""
        t0 = int(log.t[rows[0], n])
        acc = self.open.setdefault((team, episode), {"return": [], "step_key": None})
        if t0 == 0:
            acc.update(steps=[], step_key=[int(x) for x in log.key[rows[0], n]])
        acc["return"].append(np.asarray(log.team_reward[rows, n], np.float64))
        self.recorder.add_steps(
            names, episode, t0, {f: getattr(log, f)[rows, n] for f in self.FIELDS}
        )
        last = rows[-1]
        if bool(log.last[last, n]):
            del self.open[(team, episode)]
            steps = np.concatenate(acc["return"])
            self.recorder.finish_episode(
                names,
                episode,
                {
                    "length": int(log.t[last, n]) + 1,
                    "terminated": bool(log.terminated[last, n]),
                    "episode_return": float(np.add.accumulate(steps)[-1]),
                    "final_achievements": int(log.team_achievements[last, n]),
                    "world_key": [int(x) for x in self.world_keys[episode]],
                    "step_key": acc["step_key"],
                },
            )


def _team_records(
    protocol: str, world, res: EpisodeResult, template: Any, rows: Sequence[int]
) -> list[list[dict[str, float]]]:
    """Records of the teams in ``rows`` of a ``[T, E]`` output buffer. ``fast`` scores the
    whole buffer with its one compiled score program (the same numbers whichever rows are
    asked for); ``reference`` scores each asked terminal state eagerly. Only the asked
    rows leave the device (with padding, see :func:`_row_pick`)."""
    n, pick = len(rows), _row_pick(rows, res.length.shape[0])

    def picked(tree):  # gathered on the device, the padding dropped on the host
        got = jax.device_get(_rows(tree, pick))
        return jax.tree_util.tree_map(lambda x: np.asarray(x)[:n], got)

    if protocol == "reference":
        scores = _scores_eager(world, picked(res.snapshot), template, n, res.length.shape[1])
    else:
        every = _scores(world, res.snapshot, template, *res.length.shape)
        scores = {name: v[np.asarray(rows)] for name, v in every.items()}
    return _records(picked(res._replace(snapshot=())), scores)


def _pow2_at_least(n: int) -> int:
    """The smallest power of two >= n, for n >= 1: the sizes compiled programs are
    padded to, so few of them ever compile."""
    return 1 << max(0, (n - 1).bit_length())


def _row_pick(rows: Sequence[int], total: int) -> np.ndarray:
    """``rows`` padded (repeating the last) to the next power of two, at most ``total``.
    Each length of a device gather compiles its own program (slow on a GPU), and teams
    hand over in groups of any size: padded, a run of ``T`` teams compiles at most
    ``log2(T) + 1`` of them per leaf, and moves at most twice the rows asked for."""
    size = min(total, _pow2_at_least(len(rows)))
    return np.asarray([*rows, *[rows[-1]] * (size - len(rows))], dtype=np.int32)


def _records(res: EpisodeResult, scores: Mapping[str, np.ndarray]) -> list[list[dict[str, float]]]:
    """Host-side per-episode records from [K, E]-leading result arrays."""
    from alem_eval.envs.eval_env import upstream_mean

    k, e = res.length.shape
    out = []
    for i in range(k):
        row = []
        for j in range(e):
            rec: dict[str, float] = {}
            for name, v in scores.items():
                x = upstream_mean(v[i, j])
                if math.isfinite(x):  # upstream drops NaN and inf
                    rec[name] = x
            n = int(res.length[i, j])
            # Upstream adds float(float32 step mean) to a Python float, step by step.
            steps = res.rewards[i, j, :n].astype(np.float64)
            rec["episode_return"] = float(np.add.accumulate(steps)[-1]) if n else 0.0
            rec["episode_length"] = float(n)
            rec["terminated"] = 1.0 if bool(res.terminated[i, j]) else 0.0
            row.append(rec)
        out.append(row)
    return out


def episode_settings(
    cfg: RunConfig, protocol: str, num_episodes: int | None, max_steps: int | None
) -> tuple[int, int]:
    """(episodes, step cap) a checkpoint is evaluated with: the given values, else the
    protocol's (fast: the paper's 20 x 10,000; reference: what the run itself logged)."""
    if protocol == "fast":
        return (num_episodes or FAST_NUM_EPISODES, max_steps or FAST_MAX_STEPS)
    return (num_episodes or cfg.eval.num_episodes, max_steps or cfg.eval.max_steps)


def score_stack(
    cfgs: Sequence[RunConfig],
    weights: Sequence[Any],
    *,
    protocol: str = DEFAULT_PROTOCOL,
    eval_difficulty: str,
    num_episodes: int | None = None,
    max_steps: int | None = None,
    on_env_mismatch: str = "error",
    batch: int | None = None,
    on_progress: Callable[[RolloutProgress], None] | None = None,
) -> list[list[dict[str, float]]]:
    """``[checkpoint][episode]`` records (see the module docstring); CONTRACTS.md API."""
    return run_stack(
        cfgs,
        weights,
        protocol=protocol,
        eval_difficulty=eval_difficulty,
        num_episodes=num_episodes,
        max_steps=max_steps,
        on_env_mismatch=on_env_mismatch,
        batch=batch,
        on_progress=on_progress,
    ).records


def upstream_view(record: Mapping[str, float], episode: int) -> dict[str, float]:
    """A record as upstream logs it per episode (``eval_ep/<difficulty>/...`` suffixes):
    ``episode_length`` = true length - 1, ``done``, ``seed`` = the episode index."""
    out = {
        k: v
        for k, v in record.items()
        if k not in ("episode_length", "terminated", "episode_return")
    }
    out["episode_return"] = record["episode_return"]
    out["episode_length"] = record["episode_length"] - 1
    out["done"] = record["terminated"]
    out["seed"] = episode
    return out
