"""The vectorised evaluator: greedy episodes of a stack of checkpoints in one compiled call.

Structure (gymnax / PureJaxRL style, everything pure and jitted once):

* :func:`rollout` -- ONE episode from a given start state: a ``lax.while_loop`` over
  fixed-size ``lax.scan`` chunks (:data:`CHUNK` steps). Each step splits the key into
  3 (key, act key, env key) exactly like upstream's ``_run_eval_sequential``, applies the
  mask, the greedy policy and ``env.step_env``. A per-episode ``alive`` flag masks
  everything the result depends on once the episode has ended (env done, or the step cap):
  key, step count, rewards and the state leaves ``compute_score`` reads are frozen; the
  loop exits at the end of the chunk in which the episode ended (under ``vmap``: when
  all have ended).
* ``vmap`` over episodes (``fast``) and over a stack of checkpoints that share a
  ``cfg.network_key`` (both protocols). The compiled program is cached at module level per
  (protocol, network, env statics, chunk, buffer capacity, devices); the difficulty, the
  keys, the step cap and the weights are traced arguments, so one compilation serves all
  difficulties and all checkpoints of that shape.

Protocols (spec §3):

* ``reference`` reproduces upstream's sequential evaluation bit for bit. root =
  PRNGKey(SEED); if VISUALIZE: root, _ = split(root); root, eval_key = split(root); then for
  each difficulty of EVAL_DIFFICULTIES in order chain, d_key = split(chain) -- the evaluated
  difficulty uses the d_key of its (first) position. That key is threaded through all steps
  of all episodes in order; episode i resets with PRNGKey(EVAL_SEED + i). Episodes are a
  ``lax.scan`` (sequential, since each start key depends on the previous episode's length);
  the checkpoints of a stack run side by side, each with its own chain.
* ``fast`` (default): episode i on world PRNGKey(9999 + i); its step keys thread (same
  3-way split per step) from ``fold_in(PRNGKey(9999 + i), 1)``, independent of the
  checkpoint, its SEED and the difficulty (common random numbers), so all episodes run in
  parallel. Defaults: 20 episodes, at most 10000 steps. Deterministic: a repeat gives
  identical records. (Batch shapes enter the float rounding of the policy's matmuls, so
  a different episode count or device split may, in rare near-ties, pick another action;
  ``reference`` keeps upstream's shapes per checkpoint and is exact however it is
  stacked or sharded.)

Per-episode records carry every ``compute_score`` key verbatim, reduced like upstream's
``_flatten_user_info_prefix`` (``float(jnp.array(v).mean())`` of each ``[P]`` value,
NaN/inf dropped; see :func:`alem_env.eval_env.upstream_mean`), plus
``episode_return`` (float64 running sum of the per-step float32 mean-over-agents reward, in
step order, exactly like upstream's Python accumulation), ``episode_length`` (the TRUE
number of steps; upstream logs length - 1) and ``terminated`` (1.0 if the env ended the
episode before the cap).

With several local devices the checkpoint axis (``reference``) or the episode axis
(``fast``) is split across them with ``shard_map`` (padded to a multiple of the device
count); each device runs its own early-exit loop.
"""
from __future__ import annotations

import collections
import functools
import math
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .config import DIFFICULTIES, RunConfig
from .errors import EvaluationError, UsageError
from .networks import NetworkSpec, build_network
from .policies import GreedyPolicy, make_policy

PROTOCOLS: tuple[str, ...] = ("fast", "reference")
DEFAULT_PROTOCOL = "fast"
FAST_WORLD_SEED = 9999
FAST_NUM_EPISODES = 20
FAST_MAX_STEPS = 10_000
CHUNK = 64  # steps per lax.scan chunk: the early-exit granularity
CAPACITY_BUCKET = 1024  # the reward buffer is sized to max_steps rounded up to this
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
# Compilation cache
# ----------------------------------------------------------------------------------------
def enable_compilation_cache(directory: str | os.PathLike | None = None) -> Path:
    """Turn on JAX's persistent compilation cache (idempotent) and return its directory.

    Default: ``alem_eval.paths.compilation_cache_dir()`` (under the user cache). Every
    compiled program, whatever its compile time, is stored, so a second process (or a
    rerun of the CLI) skips the dominant cost of scoring: compiling the Alem step.
    """
    if directory is None:
        from .paths import compilation_cache_dir

        directory = compilation_cache_dir()
    path = Path(directory).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return path


def use_host_devices(n: int | None = None) -> int | None:
    """Expose ``n`` CPU devices to JAX (default: one per core) so that the evaluator's
    episode / checkpoint axis is split over all cores (the Alem step itself is mostly
    single-threaded on CPU). Only effective before JAX initialises its backends (call it
    first thing); returns the count applied, or None when it is too late or already set.
    It does not change which device runs unsharded work (device 0), nor GPU behaviour.
    """
    from jax._src import xla_bridge

    n = n or os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if n < 2 or xla_bridge.backends_are_initialized() or \
            "xla_force_host_platform_device_count" in flags:
        return None
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    return n


def parse_devices(value: str | int | None) -> int | None:
    """``--devices``: None (leave JAX's devices as they are), a count >= 1, or ``"auto"``
    (one per CPU core). Raises :class:`UsageError` for anything else."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "auto":
        return os.cpu_count() or 1
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--devices must be a positive integer or 'auto', got {value!r}")
    return n


# ----------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------
def check_env_version(cfg: RunConfig, *, on_mismatch: str = "error", where: str | None = None,
                      installed: str | None = None) -> str | None:
    """Compare ``cfg.env_version`` with the installed ``StaticEnvParams().version``.

    Returns a message when they differ (None when they match or the config records no
    version). ``on_mismatch``: ``"error"`` raises :class:`EvaluationError`, ``"warn"``
    emits an :class:`EnvVersionWarning`, ``"ignore"`` only returns the message.
    """
    if on_mismatch not in ENV_MISMATCH_POLICIES:
        raise UsageError(f"unknown env-version policy {on_mismatch!r} "
                         f"(expected one of {', '.join(ENV_MISMATCH_POLICIES)})")
    if cfg.env_version is None:
        return None
    if installed is None:
        from alem_env.loader import installed_env_version

        installed = installed_env_version()
    if cfg.env_version == installed:
        return None
    msg = (f"{where + ': ' if where else ''}checkpoint was scored on alem env version "
           f"{cfg.env_version!r} but the installed alem is {installed!r}; numbers will not "
           f"reproduce the released evaluation (install alem-env==0.1.0)")
    if on_mismatch == "error":
        raise EvaluationError(msg + "; pass the mismatch policy 'warn' to score anyway")
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


def _validate_request(protocol: str, eval_difficulty: str, num_episodes: int | None,
                      max_steps: int | None) -> None:
    if protocol not in PROTOCOLS:
        raise UsageError(f"unknown protocol {protocol!r} (expected one of {', '.join(PROTOCOLS)})")
    if eval_difficulty not in DIFFICULTIES:
        raise UsageError(f"unknown eval difficulty {eval_difficulty!r} "
                         f"(expected one of {', '.join(DIFFICULTIES)})")
    _check_count("--episodes", num_episodes)
    _check_count("--max-steps", max_steps)


def eval_statics(cfg: RunConfig):
    """The eval env of a resolved run config (spec §3.2): :class:`alem_env.eval_env.EnvStatics`.

    The agent-id one-hot is appended when the algorithm's policy takes it (the registry's
    ``agent_id_input``: PQN always, HyperMARL when APPEND_AGENT_ID is set).
    """
    from alem_env.eval_env import EnvStatics

    from .algorithms import get_algorithm

    return EnvStatics(
        env_name=cfg.env.env_name,
        num_agents=cfg.env.num_agents,
        num_comm_channels=cfg.env.num_comm_channels,
        shared_reward=bool(cfg.env.shared_reward),
        scale_base_difficulty=bool(cfg.env.scale_base_difficulty),
        action_masking=bool(cfg.env.action_masking),
        append_agent_id=get_algorithm(cfg.algorithm).appends_agent_id(cfg.eval.append_agent_id),
    )


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
            f"(use protocol 'fast' to score other difficulties)")
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
class EpisodeCarry(NamedTuple):
    t: jax.Array  # [] int32: steps taken
    alive: jax.Array  # [] bool: the episode still runs
    terminated: jax.Array  # [] bool: the env said done
    chunks: jax.Array  # [] int32: scan chunks executed for this episode
    key: jax.Array  # the threaded step key (frozen once the episode is over)
    state: Any  # EnvState (keeps stepping, unused, once the episode is over)
    snapshot: tuple  # the state leaves compute_score reads, frozen at the episode's end
    obs: jax.Array  # [P, D]
    policy_carry: Any
    dones: jax.Array  # [P] bool: fed back as reset flags
    rewards: jax.Array  # [capacity] float32: per-step mean-over-agents reward


class EpisodeResult(NamedTuple):
    length: jax.Array  # [] int32, true length
    terminated: jax.Array  # [] bool
    chunks: jax.Array  # [] int32
    rewards: jax.Array  # [capacity] float32 (entries >= length are 0)
    final_state: Any  # scores like the state after the last effective step (see rollout)


def rollout(env, policy: GreedyPolicy, params: Any, dyn: Mapping[str, jax.Array],
            raw_obs0: jax.Array, state0: Any, key: jax.Array, max_steps: jax.Array, *,
            chunk: int = CHUNK, capacity: int) -> tuple[jax.Array, EpisodeResult]:
    """Run one greedy episode from a reset ``(raw_obs0, state0)``, step keys threaded from
    ``key``.

    Guarantees: exactly ``min(T, max_steps)`` env steps count, where T is the step at
    which the env reports ``__all__`` done; the while loop stops at the end of the chunk
    in which the episode ended. Once it is over (``alive`` false) everything the result
    depends on is masked: the key and the step count stop, rewards are no longer
    written, and the state leaves ``compute_score`` reads are frozen. (The rest of the
    env state keeps stepping, unused, under ``vmap`` -- freezing all ~390 kB of it by a
    select every step would cost 10-25% of the step.) Returns the key after the last
    effective step (upstream's chain goes on from it) and the :class:`EpisodeResult`,
    whose ``final_state`` gives exactly the terminal state's ``compute_score``.
    ``max_steps`` must be in ``[1, capacity]``.
    """
    TRACE_COUNTS["rollout"] += 1
    score_idx = env.score_leaf_indices(state0)

    def snapshot(state) -> tuple:
        leaves = jax.tree_util.tree_leaves(state)
        return tuple(leaves[i] for i in score_idx)

    def step(c: EpisodeCarry, _):
        key, _act_key, env_key = jax.random.split(c.key, 3)  # act key unused: greedy
        mask = env.action_mask(c.state, dyn)
        pcarry, actions = policy.act(params, c.policy_carry, c.obs, c.dones, mask)
        out = env.step(env_key, c.state, actions, dyn)
        live = c.alive

        def keep(new, old):
            return jax.tree_util.tree_map(lambda n, o: jnp.where(live, n, o), new, old)

        t = c.t + live.astype(jnp.int32)
        slot = jnp.where(live, c.t, capacity)  # out of bounds -> dropped
        return EpisodeCarry(
            t=t,
            alive=live & ~out.done & (t < max_steps),
            terminated=jnp.where(live, out.done, c.terminated),
            chunks=c.chunks,
            key=keep(key, c.key),
            state=out.state,
            snapshot=keep(snapshot(out.state), c.snapshot),
            obs=out.obs,
            policy_carry=pcarry,
            dones=out.agent_dones,
            rewards=c.rewards.at[slot].set(jnp.mean(out.reward), mode="drop"),
        ), None

    def run_chunk(c: EpisodeCarry) -> EpisodeCarry:
        c, _ = jax.lax.scan(step, c, None, length=chunk)
        return c._replace(chunks=c.chunks + 1)

    init = EpisodeCarry(
        t=jnp.zeros((), jnp.int32), alive=max_steps > 0, terminated=jnp.zeros((), bool),
        chunks=jnp.zeros((), jnp.int32), key=key, state=state0, snapshot=snapshot(state0),
        obs=env.preprocess(raw_obs0), policy_carry=policy.init_carry(),
        dones=jnp.zeros((env.statics.num_agents,), bool),
        rewards=jnp.zeros((capacity,), jnp.float32))
    final = jax.lax.while_loop(lambda c: c.alive, run_chunk, init)
    leaves, treedef = jax.tree_util.tree_flatten(final.state)
    for i, leaf in zip(score_idx, final.snapshot):
        leaves[i] = leaf
    return final.key, EpisodeResult(final.t, final.terminated, final.chunks, final.rewards,
                                    jax.tree_util.tree_unflatten(treedef, leaves))


# ----------------------------------------------------------------------------------------
# Compiled programs
# ----------------------------------------------------------------------------------------
def _timed_compile(jitted, args, label: str):
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile()
    COMPILE_STATS.append(CompileStat(label, _shape_summary(args), t1 - t0,
                                     time.perf_counter() - t1))
    return compiled


class _Compiled:
    """A jitted function whose executables are compiled ahead of time, once per input
    shapes, with the trace/compile time recorded in :data:`COMPILE_STATS`."""

    def __init__(self, fn: Callable, label: str):
        self._jitted = jax.jit(fn)
        self.label = label
        self._executables: dict[Any, Any] = {}

    def __call__(self, *args):
        shapes = jax.tree_util.tree_map(lambda x: (np.shape(x), str(np.result_type(x))), args)
        sig = (str(jax.tree_util.tree_structure(args)), str(jax.tree_util.tree_leaves(shapes)))
        exe = self._executables.get(sig)
        if exe is None:
            exe = self._executables[sig] = _timed_compile(self._jitted, args, self.label)
        return exe(*args)


def _shape_summary(args) -> str:
    leaves = jax.tree_util.tree_leaves(args)
    return f"{len(leaves)} leaves, first {tuple(np.shape(leaves[0]))}" if leaves else "-"


@functools.lru_cache(maxsize=None)
def _world_programs(world: Any) -> tuple[_Compiled, _Compiled]:
    """(reset, batched score) for one env: programs shared by every algorithm, protocol
    and stack size (they depend only on the world statics). Reset is compiled for one
    world; the score for a batch of final states whose size is rounded up to a power of
    two, so few sizes are ever compiled."""
    from alem_env.eval_env import get_eval_env

    env = get_eval_env(world)
    return (_Compiled(env.reset, "reset"), _Compiled(jax.vmap(env.score), "score"))


@dataclass(frozen=True)
class ProgramKey:
    protocol: str
    network_key: str
    statics: Any  # alem_env.eval_env.EnvStatics
    chunk: int
    capacity: int
    num_devices: int


class _Program:
    """The jitted multi-episode rollout of one (protocol, network, env statics)."""

    def __init__(self, key: ProgramKey, spec: NetworkSpec):
        from alem_env.eval_env import get_eval_env

        self.key = key
        self.env = get_eval_env(key.statics)
        self.policy = make_policy(spec)
        fn = self._reference if key.protocol == "reference" else self._fast
        if key.num_devices > 1:
            fn = self._sharded(fn)
        self.run = _Compiled(fn, f"{key.protocol}:{spec.algorithm}")

    def _episode(self, params, dyn, raw_obs0, state0, key, max_steps):
        return rollout(self.env, self.policy, params, dyn, raw_obs0, state0, key, max_steps,
                       chunk=self.key.chunk, capacity=self.key.capacity)

    def _reference(self, variables, dyn, start_keys, raw_obs0, state0, max_steps):
        """[K] checkpoints, [E] episodes in sequence (one key chain per checkpoint).

        ``raw_obs0``/``state0`` are the E reset worlds (shared by all checkpoints).
        Returns EpisodeResult leaves ``[E, K, ...]``.
        """
        params = jax.vmap(self.policy.prepare)(variables)

        def one_episode(keys, world):
            obs0, s0 = world
            run = lambda p, k: self._episode(p, dyn, obs0, s0, k, max_steps)  # noqa: E731
            return jax.vmap(run)(params, keys)

        _, results = jax.lax.scan(one_episode, start_keys, (raw_obs0, state0))
        return results

    def _fast(self, variables, dyn, chain_keys, raw_obs0, state0, max_steps):
        """[K] checkpoints x [E] parallel episodes -> EpisodeResult leaves ``[K, E, ...]``."""
        params = jax.vmap(self.policy.prepare)(variables)

        def per_checkpoint(p):
            run = lambda o, s, k: self._episode(p, dyn, o, s, k, max_steps)[1]  # noqa: E731
            return jax.vmap(run)(raw_obs0, state0, chain_keys)

        return jax.vmap(per_checkpoint)(params)

    def _sharded(self, fn: Callable) -> Callable:
        from jax.experimental.shard_map import shard_map
        from jax.sharding import Mesh, PartitionSpec as P

        mesh = Mesh(np.array(jax.local_devices()[: self.key.num_devices]), ("d",))
        if self.key.protocol == "reference":  # split the checkpoint axis
            in_specs = (P("d"), P(), P("d"), P(), P(), P())
        else:  # split the episode axis
            in_specs = (P(), P(), P("d"), P("d"), P("d"), P())
        return shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=P(None, "d"),
                         check_rep=False)


_PROGRAMS: dict[ProgramKey, _Program] = {}


def _program(key: ProgramKey, spec: NetworkSpec) -> _Program:
    prog = _PROGRAMS.get(key)
    if prog is None:
        prog = _PROGRAMS[key] = _Program(key, spec)
    return prog


def clear_program_cache() -> None:
    """Forget every compiled program (tests; frees memory)."""
    _PROGRAMS.clear()
    _world_programs.cache_clear()


# ----------------------------------------------------------------------------------------
# Stacks
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StackResult:
    """Per-checkpoint, per-episode results of one :func:`run_stack` call."""

    records: list[list[dict[str, float]]]  # [checkpoint][episode]
    chunks: list[np.ndarray]  # [checkpoint] -> [episodes] scan chunks executed per episode
    protocol: str
    eval_difficulty: str
    chunk: int


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
    got = {jax.tree_util.keystr(p): tuple(x.shape)
           for p, x in jax.tree_util.tree_flatten_with_path(variables)[0]}
    exp = {jax.tree_util.keystr(p): tuple(x.shape)
           for p, x in jax.tree_util.tree_flatten_with_path(expected)[0]}
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


def _group_key(cfg: RunConfig, statics, protocol: str, num_episodes: int, max_steps: int):
    key = (cfg.network_key, statics, num_episodes, max_steps)
    return key + ((cfg.eval.eval_seed,) if protocol == "reference" else ())


def run_stack(cfgs: Sequence[RunConfig], weights: Sequence[Any], *,
              protocol: str = DEFAULT_PROTOCOL, eval_difficulty: str,
              num_episodes: int | None = None, max_steps: int | None = None,
              on_env_mismatch: str = "error", chunk: int = CHUNK) -> StackResult:
    """Evaluate a stack of checkpoints on ``eval_difficulty``; see the module docstring.

    ``cfgs[k]`` describes ``weights[k]`` (a weights tree in the released disk layout, or
    at least its policy part). All must share ``network_key``. Checkpoints whose eval
    settings differ (env flags, episode count, step cap, EVAL_SEED for ``reference``) are
    evaluated in separate compiled calls; the result keeps the input order.
    """
    _validate_request(protocol, eval_difficulty, num_episodes, max_steps)
    if len(cfgs) != len(weights):
        raise EvaluationError(f"{len(cfgs)} configs but {len(weights)} weight trees")
    if not cfgs:
        raise EvaluationError("nothing to evaluate: the stack is empty")
    if len({c.network_key for c in cfgs}) > 1:
        raise EvaluationError("checkpoints in one stack must share network_key (same algorithm "
                              "and network shapes); score them in separate stacks")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise UsageError(f"chunk must be a positive integer, got {chunk!r}")
    if protocol == "reference" and (jax.config.jax_threefry_partitionable
                                    or jax.config.jax_enable_x64):
        raise EvaluationError("protocol 'reference' needs jax_threefry_partitionable=False and "
                              "jax_enable_x64=False (the PRNG mode and precision the released "
                              "numbers were produced with)")
    from alem_env.loader import installed_env_version

    installed = installed_env_version()
    for i, cfg in enumerate(cfgs):
        check_env_version(cfg, on_mismatch=on_env_mismatch, where=f"checkpoint {i}",
                          installed=installed)
    if protocol == "reference":
        for cfg in cfgs:
            reference_key(cfg, eval_difficulty)  # fail early when the difficulty was not run

    spec = build_network(cfgs[0])
    statics = [eval_statics(c) for c in cfgs]
    if statics[0].input_dim != spec.input_dim:
        raise EvaluationError(
            f"{cfgs[0].algorithm}: the network expects inputs of width {spec.input_dim} but "
            f"the eval env gives {statics[0].input_dim} (HyperMARL needs APPEND_AGENT_ID=true)")
    variables = [_policy_variables(spec, w, f"checkpoint {i}") for i, w in enumerate(weights)]

    def settings(cfg):
        if protocol == "fast":
            return (num_episodes or FAST_NUM_EPISODES, max_steps or FAST_MAX_STEPS)
        return (num_episodes or cfg.eval.num_episodes, max_steps or cfg.eval.max_steps)

    groups: dict[tuple, list[int]] = collections.defaultdict(list)
    for i, cfg in enumerate(cfgs):
        groups[_group_key(cfg, statics[i], protocol, *settings(cfg))].append(i)

    records: list[Any] = [None] * len(cfgs)
    chunks: list[Any] = [None] * len(cfgs)
    for idx in groups.values():
        n_ep, cap = settings(cfgs[idx[0]])
        recs, ch = _run_group(spec, statics[idx[0]], [cfgs[i] for i in idx],
                              [variables[i] for i in idx], protocol, eval_difficulty,
                              n_ep, cap, chunk)
        for j, i in enumerate(idx):
            records[i], chunks[i] = recs[j], ch[j]
    return StackResult(records=records, chunks=chunks, protocol=protocol,
                       eval_difficulty=eval_difficulty, chunk=chunk)


def _resets(world, dyn, keys: Sequence[Any]) -> tuple[jax.Array, Any]:
    """Reset worlds for the given keys (one shared compiled reset), stacked on axis 0."""
    reset, _ = _world_programs(world)
    outs = [reset(k, dyn) for k in keys]
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)


def _scores(world, final_states: Any, k: int, e: int) -> dict[str, np.ndarray]:
    """compute_score of every final state ([K, E] leading axes) -> host ``[K, E, ...]``."""
    _, score = _world_programs(world)
    n = k * e
    padded = 1 << max(0, (n - 1).bit_length())

    def flat(x):
        x = x.reshape((n,) + x.shape[2:])
        return jnp.concatenate([x, jnp.broadcast_to(x[:1], (padded - n,) + x.shape[1:])])

    out = jax.device_get(score(jax.tree_util.tree_map(flat, final_states)))
    return {name: np.asarray(v)[:n].reshape((k, e) + np.shape(v)[1:]) for name, v in out.items()}


def _run_group(spec, statics, cfgs, variables, protocol, eval_difficulty, num_episodes,
               max_steps, chunk):
    k = len(cfgs)
    capacity = _capacity(max_steps)
    n_dev = _devices_for(k if protocol == "reference" else num_episodes)
    prog = _program(ProgramKey(protocol, cfgs[0].network_key, statics, chunk, capacity, n_dev),
                    spec)
    world = statics.world
    dyn = prog.env.difficulty_params(eval_difficulty)
    steps = np.asarray(max_steps, np.int32)
    clock = time.perf_counter()
    if protocol == "reference":
        pad = (-k) % n_dev
        keys = [np.asarray(reference_key(c, eval_difficulty)) for c in cfgs]
        seeds = cfgs[0].eval.eval_seed + np.arange(num_episodes)
        obs0, state0 = jax.block_until_ready(
            _resets(world, dyn, [jax.random.PRNGKey(int(s)) for s in seeds]))
        t_reset = time.perf_counter()
        res = prog.run(_stack(variables + [variables[-1]] * pad), dyn,
                       np.stack(keys + [keys[-1]] * pad), obs0, state0, steps)
        res = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1)[:k], res)  # -> [K, E]
    else:
        padded = num_episodes + (-num_episodes) % n_dev
        worlds, chains = fast_keys(padded)
        obs0, state0 = jax.block_until_ready(_resets(world, dyn, list(worlds)))
        t_reset = time.perf_counter()
        res = prog.run(_stack(variables), dyn, np.asarray(chains), obs0, state0, steps)
        res = jax.tree_util.tree_map(lambda x: x[:, :num_episodes], res)
    res = jax.block_until_ready(res)
    t_roll = time.perf_counter()
    scores = _scores(world, res.final_state, k, num_episodes)
    t_score = time.perf_counter()
    small = jax.device_get(res._replace(final_state=None))
    records = _records(small, scores)
    LAST_TIMINGS.clear()
    LAST_TIMINGS.update(resets_s=t_reset - clock, rollout_s=t_roll - t_reset,
                        scores_s=t_score - t_roll, records_s=time.perf_counter() - t_score)
    return records, np.asarray(small.chunks)


def _records(res: EpisodeResult, scores: Mapping[str, np.ndarray]) -> list[list[dict[str, float]]]:
    """Host-side per-episode records from [K, E]-leading result arrays."""
    from alem_env.eval_env import upstream_mean

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


def score_stack(cfgs: Sequence[RunConfig], weights: Sequence[Any], *, protocol: str = DEFAULT_PROTOCOL,
                eval_difficulty: str, num_episodes: int | None = None,
                max_steps: int | None = None, on_env_mismatch: str = "error"
                ) -> list[list[dict[str, float]]]:
    """``[checkpoint][episode]`` records (see the module docstring); CONTRACTS.md API."""
    return run_stack(cfgs, weights, protocol=protocol, eval_difficulty=eval_difficulty,
                     num_episodes=num_episodes, max_steps=max_steps,
                     on_env_mismatch=on_env_mismatch).records


def upstream_view(record: Mapping[str, float], episode: int) -> dict[str, float]:
    """A record as upstream logs it per episode (``eval_ep/<difficulty>/...`` suffixes):
    ``episode_length`` = true length - 1, ``done``, ``seed`` = the episode index."""
    out = {k: v for k, v in record.items()
           if k not in ("episode_length", "terminated", "episode_return")}
    out["episode_return"] = record["episode_return"]
    out["episode_length"] = record["episode_length"] - 1
    out["done"] = record["terminated"]
    out["seed"] = episode
    return out
