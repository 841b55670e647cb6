"""The compiled programs: one :class:`Program` per batch structure, and the warm start.

A :class:`Program` compiles ``start`` and ``advance`` of its
:class:`~alem_eval.evaluate.machine.Machine` per protocol. It is cached per
:class:`ProgramKey` (protocol, networks, team classes, env statics, slots, chunk, buffer
capacity, devices); the difficulty, the keys, the step cap and the weights are traced
arguments, so one compilation serves all difficulties and all checkpoints of that shape.
Traced programs are also saved with ``jax.export`` (see :class:`_Compiled`): a new process
with the same shapes skips the Python trace (the warm start). The reset and score
programs of a world (:func:`world_programs`) are shared by every algorithm and protocol.

With several local devices the episode axis (``fast``) or the checkpoints of a one-class
``reference`` stack are split across them with ``shard_map`` (padded to a multiple of the
device count); each device runs its own slots and loop. A group with a host agent runs
on one device (:func:`~alem_eval.evaluate.group.run_group`): its callback takes all of
the agent's rows in one call per step.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.boundedcache import BoundedCache
from alem_eval.core.errors import AlemEvalError, brief
from alem_eval.core.fsutil import write_bytes_atomic
from alem_eval.evaluate.machine import TRACE_COUNTS, Machine, Status
from alem_eval.evaluate.actors import Actor
from alem_eval.evaluate.settings import MAX_PROGRAMS
from alem_eval.evaluate.teams import TeamClass


# Diagnostics: the trace and compile time of every program compiled.
@dataclass(frozen=True)
class CompileStat:
    program: str
    shapes: str
    trace_s: float
    compile_s: float


COMPILE_STATS: list[CompileStat] = []


# ----------------------------------------------------------------------------------------
# Compiled programs
# ----------------------------------------------------------------------------------------
# XLA options for the rollout of a short run, on a CPU: LLVM at -O1 instead of -O2
# compiles the Alem step's rollout ~15% faster (CPU time) with the same records and no
# slower a run of the demo's size (BENCHMARKS.md, "The cold first call, accounted"; -O0
# compiles faster still but runs 6x slower). Longer runs keep XLA's defaults: the
# options are part of the ProgramKey and of the compilation cache's key, never of the
# traced program (one jax.export file serves both).
SHORT_RUN_OPTIONS: tuple[tuple[str, Any], ...] = (("xla_backend_optimization_level", 1),)
SHORT_RUN_STEPS = 50_000  # at most this many env-steps in a call (teams x step caps)


def compile_options_for(env_steps: int) -> tuple[tuple[str, Any], ...]:
    """The XLA options of the rollout of a call that runs at most ``env_steps`` env-steps
    (every team's episodes, each to its cap): :data:`SHORT_RUN_OPTIONS` for a short run on
    a CPU, else none (XLA's defaults)."""
    if jax.default_backend() == "cpu" and env_steps <= SHORT_RUN_STEPS:
        return SHORT_RUN_OPTIONS
    return ()


def _timed_compile(jitted, args, label: str, options: dict[str, Any] | None = None):
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    t1 = time.perf_counter()
    compiled = lowered.compile(compiler_options=options) if options else lowered.compile()
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

    def __init__(
        self,
        fn: Callable,
        label: str,
        identity: str | None = None,
        *,
        donate: int = 0,
        options: dict[str, Any] | None = None,
    ):
        self._fn = fn
        self._options = options or None  # XLA compiler options (compile_options_for)
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
            return _timed_compile(self._jitted, args, self.label, self._options)
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
            try:
                loaded = self._export(args, path)
            except AlemEvalError:  # (an agent's fault, found as its code is traced)
                raise
            except Exception as exc:  # code jax.export cannot serialise: no warm start
                warnings.warn(f"traced program not exported ({brief(exc)})", stacklevel=2)
                return _timed_compile(self._jitted, args, self.label, self._options)
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
            jax.jit(exported.call, donate_argnums=donated), leaves, self.label, self._options
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


def terminal_state(template: Any, snapshot: Sequence[Any], score_idx: Sequence[int]) -> Any:
    """``template`` with the leaves ``compute_score`` reads replaced by ``snapshot``."""
    leaves, treedef = jax.tree_util.tree_flatten(template)
    for i, leaf in zip(score_idx, snapshot, strict=True):
        leaves[i] = leaf
    return jax.tree_util.tree_unflatten(treedef, leaves)


@functools.cache
def world_programs(world: Any) -> tuple[_Compiled, _Compiled]:
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
    # XLA options of start and advance (compile_options_for): not in the traced program
    compile_options: tuple[tuple[str, Any], ...] = ()


class Program:
    """The compiled rollout of one batch structure (network groups x team classes x world):
    ``start`` and ``advance`` of its :class:`Machine`, per protocol, over the devices."""

    def __init__(self, key: ProgramKey, actors: Sequence[Actor]):
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
            policies=tuple(actors),  # one per network group (evaluate.actors)
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
        names = "+".join(dict.fromkeys(a.algorithm for a in actors))
        # Multi-device (shard_map) programs are not exported: they trace every process.
        # A JAX agent's code is in the key (its group key names its code identity:
        # evaluate.agents.JaxAgent.code; its arrays are inputs); a rollout with a host
        # actor is not exported (its callback cannot be serialised), its start program is.
        host = any(a.host for a in actors)
        traced = dataclasses.replace(key, compile_options=())  # what the trace depends on
        ident = repr(traced) if key.num_devices == 1 else None
        label = f"{key.protocol}:{names}"
        opts = dict(key.compile_options)
        self.start = _Compiled(
            start, f"rollout-start:{label}", ident and f"start:{ident}", options=opts
        )
        self.advance = _Compiled(
            advance, f"rollout:{label}", None if host else ident, donate=1, options=opts
        )

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
        bad: Any = np.asarray(status.illegal)
        action: Any = np.asarray(status.illegal_action)
        if bad.ndim == 3:  # [D, teams, groups]: as team_finished, then the first device's
            if self.key.protocol == "reference":
                bad, action = bad.reshape(-1, bad.shape[-1]), action.reshape(-1, bad.shape[-1])
            else:
                first = np.argmax(bad, axis=0)
                action = np.take_along_axis(action, first[None], axis=0)[0]
                bad = bad.any(axis=0)
        return Status(running, finished, live, slot, per_team, bad, action)

    def merge(self, tree: Any) -> Any:
        """Per-device results -> one: ``[D, T, E/D, ...] -> [T, E]`` (``fast``) or
        ``[D, T/D, E, ...] -> [T, E]`` (``reference``); single-device results pass through."""
        if self.key.num_devices == 1:
            return tree
        axis = 0 if self.key.protocol == "reference" else 1

        def join(x):
            return jnp.concatenate(list(x), axis=axis)

        return jax.tree_util.tree_map(join, tree)


# The programs of this process, the MAX_PROGRAMS most recently used (core.boundedcache:
# each holds about half a gigabyte; a forgotten one loads again from the caches on disk).
_PROGRAMS: BoundedCache[Program] = BoundedCache(MAX_PROGRAMS)


def program(key: ProgramKey, actors: Sequence[Actor]) -> Program:
    return _PROGRAMS.get_or_make(key, lambda: Program(key, actors))


def clear_program_cache() -> int:
    """Forget every compiled program of this process (frees its memory; the caches on disk
    keep them) and return how many there were."""
    held = len(_PROGRAMS)
    _PROGRAMS.clear()
    world_programs.cache_clear()
    return held
