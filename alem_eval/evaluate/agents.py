"""Any agent in a slot: the focal-agent protocol and its adapter to the play core.

An agent is any object with a ``name`` (str) and two methods:

* ``init(batch) -> carry``: the state of ``batch`` agent slots at the start of an
  episode (any pytree whose leaves have a leading axis ``batch``, or ``None``);
* ``act(carry, obs, mask, key) -> (carry, actions)``: one step of those slots. ``obs``
  float32 ``[batch, obs_dim]`` (each slot's raw observation, as ``make_env`` gives it),
  ``mask`` bool ``[batch, num_actions]`` (the legal actions; always given, whatever the
  background's ACTION_MASKING), ``actions`` int32 ``[batch]``, each one legal.

A **JAX agent** (the default) runs inside the one compiled rollout, beside the
baselines: ``act`` is traced once and vmapped over the episodes; each call sees the
slots the agent drives in ONE episode (``batch`` = 1 for a visitor, 2 for a resident), in
slot order, and ``key`` is a ``[2]`` uint32 PRNG key, fresh each step (derived by
``fold_in(step_key, FOCAL_SALT)`` from the slot's step key, which it does not consume:
the baselines' key chains, and so their records, stay what they are without a focal).

A **host agent** (``host = True``: PyTorch, scripted, an LLM) gets numpy arrays, once per
step for ALL of its slots in the batch (one ``jax.experimental.io_callback``): ``obs
[R, obs_dim]``, ``mask [R, A]``, ``key`` uint32 ``[R, 2]`` (row r's key: its episode's
focal key, as a JAX agent of that episode gets it, with the row's slot folded in), its
carry ``init(R)`` with the rows that start an episode re-initialised (``init(R)``'s rows
for them); it returns ``R`` integer actions. With ``wants_info = True``, ``act`` also
gets ``info=``:class:`HostInfo` (which agent each row is, which rows start an episode;
with ``wants_state = True`` also each row's env state and :meth:`HostInfo.text`, Alem's
own language view of a row from ``alem.llm``). A run with host agents plays on ONE
device, whatever the device count (one call per step holds all of an agent's rows, and
its carry); each host agent of a run has its own callback; one run with host agents at
a time per process (another is refused); a callback with no agent bound raises.

Faults never leave a half-run behind silently: a wrong output shape or dtype, an
exception in a JAX ``act`` and a traced value escaping it are :class:`EvaluationError` s
at trace time; a host agent's first step runs once before the rollout compiles
(:func:`probe_host`); an illegal action of a JAX agent is an output of the rollout
(the first one per team, :func:`illegal_actions`: no host callback, so a program with
JAX agents only is exported and cached like the baselines'), raised after the call of
the rollout in which it came (``group.run_group``); an illegal action, an exception in
a host ``act`` and a host result of the wrong length are recorded as the step runs, and
:func:`~alem_eval.evaluate.agent_runs.run_agent_teams` raises them after that call of
the rollout. Either way no later team's records reach the caller. Every message starts
with ``focal <label>:``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError, brief
from alem_eval.evaluate.agent_identity import agent_digest, code_digest, split_arrays

FOCAL_SALT = 0xF0CA1  # fold_in(step_key, FOCAL_SALT): a focal's key, the step key untouched


@runtime_checkable
class Agent(Protocol):
    """The focal-agent protocol (see the module docstring)."""

    name: str

    def init(self, batch: int) -> Any: ...

    def act(self, carry: Any, obs: Any, mask: Any, key: Any) -> tuple[Any, Any]: ...


@dataclass(frozen=True)
class HostInfo:
    """What a host agent with ``wants_info`` gets besides obs/mask, per row ``[R]``."""

    player: np.ndarray  # int32: the agent slot (0..P-1) the row drives
    fresh: np.ndarray  # bool: the row's episode starts with this step
    state: Any = None  # wants_state: the row's env state (numpy pytree, leading axis R)
    difficulty: str | None = None  # the worlds' difficulty
    world: Any = None  # alem_eval.envs.eval_env.EnvStatics of the env
    max_steps: int | None = None  # the step cap in force (None: the env's max_timesteps)

    def text(self, row: int) -> str:
        """Alem's language view of row ``row`` (``alem.llm``'s ``describe_frame``): what an
        LLM agent reads. Needs ``wants_state``."""
        if self.state is None or self.difficulty is None:
            raise UsageError("HostInfo.text needs an agent with wants_state = True")
        wrapper = _language_wrapper(self.world, self.difficulty, self.max_steps)
        one = jax.tree_util.tree_map(lambda x: x[row], self.state)
        text = wrapper.describe_frame(one, int(self.player[row]))
        return "\n\n".join(map(str, text)) if isinstance(text, tuple) else str(text)


def _language_wrapper(world: Any, difficulty: str, max_steps: int | None = None) -> Any:
    key = (world, difficulty, max_steps)
    if key not in _WRAPPERS:
        from alem.llm.alem_language_wrapper import AlemLanguageWrapper

        from alem_eval.envs.eval_env import get_eval_env

        env = get_eval_env(world)
        params = env.env_params(difficulty)
        if max_steps is not None:  # the cap the rollout ends episodes at ("Step: t/cap")
            params = params.replace(max_timesteps=min(int(params.max_timesteps), max_steps))
        upstream = env.alem.make_alem_env_from_name(
            world.env_name, env_params=params, static_env_params=env.static_env_params
        )
        _WRAPPERS[key] = AlemLanguageWrapper(upstream, params)
    return _WRAPPERS[key]


_WRAPPERS: dict[Any, Any] = {}


# ----------------------------------------------------------------------------------------
# The adapter: an agent as a play-core group
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class AgentGroup:
    """An agent as a group of the play core (``teams.team_actions`` hands a role whose
    policy is one, :func:`~alem_eval.evaluate.teams.is_agent`, to :func:`role_actions`).
    ``label``: how errors name it (the CLI spec); ``identity``: ``name@digest`` (its
    class's source file, its state or declared ``identity`` / ``version``, the factory's
    arguments: :mod:`~alem_eval.evaluate.agent_identity`), what stored results are keyed
    by. ``host_slot``: which of a run's host agents it is (each has its own callback).

    A JAX agent's ``arrays`` (the array leaves of its attributes:
    :func:`~alem_eval.evaluate.agent_identity.split_arrays`) are inputs of its program,
    like a checkpoint's weights; ``code`` (:func:`~alem_eval.evaluate.agent_identity.
    code_digest`: its source, the factory's arguments, the rest of its state) keys the
    program, so another instance with other weights, or a new process, reuses it. An
    agent whose ``act`` needs its arrays' values while it is traced keeps them as
    constants (``arrays`` empty; ``code`` then covers their bytes too)."""

    agent: Any
    label: str
    identity: str
    host: bool
    wants_info: bool = False
    wants_state: bool = False
    num_actions: int = 0  # set by run_agent_teams from the env
    host_slot: int = 0  # set by run_agent_teams: the run's n-th host agent
    code: str = ""
    arrays: tuple = field(default=(), repr=False)
    rebuild: Callable[[Sequence[Any]], Any] | None = field(default=None, repr=False)
    _extra: bytes = field(default=b"", repr=False)

    @property
    def name(self) -> str:
        return str(self.agent.name)

    @property
    def algorithm(self) -> str:
        """The program label's name (``programs.Program``)."""
        return f"focal:{self.name}"

    @property
    def key(self) -> str:
        """The group key of the compiled program. Host agents share one program per
        shape and place among the run's host agents (their callbacks look up the agents
        bound now); a JAX agent's program is keyed by its ``code`` (its arrays are
        inputs)."""
        if self.host:
            return f"host-agent{self.host_slot}:state={self.wants_state}:info={self.wants_info}"
        return f"agent:{self.name}@{self.code}"

    def variables(self) -> Any:
        """The member's program input (``run_teams``): a placeholder and its arrays."""
        return (np.zeros((1,), np.float32), self.arrays)

    def prepare(self, variables: Any) -> Any:
        return variables

    def bound(self, variables: Any) -> Any:
        """The agent with the (traced) arrays of ``variables`` in place of its own."""
        if self.rebuild is None or not self.arrays:
            return self.agent
        return self.rebuild(list(variables[1]))

    def init_carry(self, k: int) -> Any:
        """Zero carry of the ``k`` slots of one episode (the play core, ``evaluate.machine``,
        resets carries to zeros): ``started`` 0 makes the next step start from ``init(k)``
        (int32: the machine's reset writes 0 into every leaf)."""
        started = jnp.zeros((), jnp.int32)
        if self.host:
            return started
        return (jax.tree_util.tree_map(jnp.asarray, self.agent.init(k)), started)

    def jax_step(self, variables: Any, carry: Any, obs: jax.Array, mask: jax.Array, key):
        """One episode's step of a JAX agent (traced, vmapped over the episodes) with the
        arrays of ``variables`` (:meth:`variables`, as the program gets them)."""
        agent = self.bound(variables)
        agent_carry, started = carry
        k = obs.shape[0]
        fresh = jax.tree_util.tree_map(jnp.asarray, agent.init(k))
        agent_carry = jax.tree_util.tree_map(
            lambda a, b: jnp.where(started > 0, a, b), agent_carry, fresh
        )
        try:
            new, actions = agent.act(agent_carry, obs, mask, key)
        except jax.errors.UnexpectedTracerError:
            raise EvaluationError(leak_message(self.label)) from None
        except _CONCRETE as exc:
            if self.arrays:  # act reads its arrays' values: they must stay constants
                raise _NeedsConstants() from exc
            raise EvaluationError(
                f"focal {self.label}: act raised {type(exc).__name__}: {brief(exc)}"
            ) from None
        except Exception as exc:
            raise EvaluationError(
                f"focal {self.label}: act raised {type(exc).__name__}: {brief(exc)}"
            ) from None
        _check_actions(self.label, actions, k)
        return (jax.tree_util.tree_map(jnp.asarray, new), jnp.ones((), jnp.int32)), actions


# What a traced array raises where its value is needed (``int(x)``, ``np.asarray(x)``, ``if x``).
_CONCRETE = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerArrayConversionError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerBoolConversionError,
)


class _NeedsConstants(Exception):
    """A JAX agent's ``act`` needs the values of its arrays at trace time."""


def leak_message(label: str) -> str:
    """The one line for a JAX agent whose traced values escape ``act``."""
    return (
        f"focal {label}: act leaked a traced value (UnexpectedTracerError): act is traced, "
        "so an array it builds and keeps on self (e.g. weights made inside act) escapes "
        "its trace; build such arrays in __init__ or the factory, or pass them in the carry"
    )


@contextlib.contextmanager
def agent_traces(group: AgentGroup) -> Iterator[None]:
    """Where ``group``'s JAX code is traced: a traced value that escaped ``act`` (JAX
    notices it when a later trace ends) is :func:`leak_message`'s one line."""
    try:
        yield
    except jax.errors.UnexpectedTracerError:
        raise EvaluationError(leak_message(group.label)) from None


def _check_actions(label: str, actions: Any, k: int) -> None:
    shape, dtype = np.shape(actions), getattr(actions, "dtype", None)
    if shape != (k,) or dtype is None or np.dtype(dtype) != np.int32:
        raise EvaluationError(
            f"focal {label}: act must return actions int32 [{k}] for {k} slots, got "
            f"{getattr(dtype, 'name', type(actions).__name__)} {list(shape)}"
        )


def make_group(agent: Any, label: str | None = None, extra: bytes = b"") -> AgentGroup:
    """Check that ``agent`` follows the protocol (attributes only; shapes are checked by
    :func:`check_group`) and wrap it. ``extra``: more identity bytes (e.g. the source
    file and the factory's arguments of a CLI spec)."""
    if isinstance(agent, AgentGroup):
        return agent
    label = label or str(getattr(agent, "name", type(agent).__name__))
    name = getattr(agent, "name", None)
    if not isinstance(name, str) or not name:
        raise UsageError(f"focal {label}: the agent needs a name (a non-empty str attribute)")
    for method in ("init", "act"):
        if not callable(getattr(agent, method, None)):
            raise UsageError(f"focal {label}: the agent has no {method}() method")
    host = bool(getattr(agent, "host", False))
    arrays, rebuild = ((), None) if host else split_arrays(agent)
    return AgentGroup(
        agent=agent,
        label=label,
        identity=f"{name}@{agent_digest(agent, extra)}",
        host=host,
        wants_info=bool(getattr(agent, "wants_info", False) or getattr(agent, "wants_state", 0)),
        wants_state=bool(getattr(agent, "wants_state", False)),
        code="" if host else code_digest(agent, extra),
        arrays=arrays,
        rebuild=rebuild,
        _extra=extra,
    )


def check_group(
    group: AgentGroup, obs_dim: int, num_actions: int, batches: Sequence[int] = (2,)
) -> AgentGroup:
    """A JAX agent's ``init``/``act`` traced on abstract inputs (no compile), for each
    batch (slots it drives) in ``batches``: the actions are int32 ``[batch]`` and the
    carry keeps its structure, shapes and dtypes. Returns the group with the env's action
    count."""
    import dataclasses

    group = dataclasses.replace(group, num_actions=num_actions)
    if group.host:
        return group
    with agent_traces(group):
        try:
            for k in sorted(set(batches)):
                _check_batch(group, obs_dim, num_actions, k)
        except _NeedsConstants:  # act reads its arrays' values: they stay constants
            group = dataclasses.replace(
                group,
                arrays=(),
                rebuild=None,
                code=code_digest(group.agent, group._extra, values=True),
            )
            for k in sorted(set(batches)):
                _check_batch(group, obs_dim, num_actions, k)
    return group


def _check_batch(group: AgentGroup, obs_dim: int, num_actions: int, k: int) -> None:
    obs = jax.ShapeDtypeStruct((k, obs_dim), jnp.float32)
    mask = jax.ShapeDtypeStruct((k, num_actions), jnp.bool_)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    try:
        carry = jax.eval_shape(lambda: group.init_carry(k))
    except Exception as exc:
        raise EvaluationError(
            f"focal {group.label}: init raised {type(exc).__name__}: {brief(exc)}"
        ) from None
    out_carry, _ = jax.eval_shape(group.jax_step, group.variables(), carry, obs, mask, key)
    a = jax.tree_util.tree_structure(carry), [(x.shape, x.dtype) for x in jax.tree.leaves(carry)]
    b = (
        jax.tree_util.tree_structure(out_carry),
        [(x.shape, x.dtype) for x in jax.tree.leaves(out_carry)],
    )
    if a != b:
        raise EvaluationError(
            f"focal {group.label}: act must return a carry like init's (structure, shapes "
            "and dtypes)"
        )


# ----------------------------------------------------------------------------------------
# Inside the rollout (called by teams.team_actions)
# ----------------------------------------------------------------------------------------
class HostRole(NamedTuple):
    """A host agent's role in one team class, waiting for the step's one callback."""

    group: AgentGroup
    cls: int
    role: Any  # teams.Role
    obs: jax.Array  # [size, E, k, obs_dim]
    mask: jax.Array  # [size, E, k, A]
    fresh: jax.Array  # [size, E] bool
    keys: jax.Array  # [size, E, 2]
    state: Any  # [size, E, ...] env states (wants_state) or None
    new_carry: jax.Array  # [size, E] int32: started (1)
    num_agents: int  # P

    @property
    def rows(self) -> int:
        return int(np.prod(self.obs.shape[:3]))


def role_actions(
    group, params, carry, obs, mask, step_keys, states, block: Callable, role, cls: int
):
    """One step of a focal role of class ``cls``: ``obs [size, E, P, D]``, ``mask [size,
    E, P, A]``, ``params`` per team (:meth:`AgentGroup.variables`), ``carry`` per (team,
    episode) -> ``(carry, actions [size, E, P], illegal)``
    with the role's slots filled and ``illegal``: (``[size]`` bool, ``[size]`` int32),
    whether each team's slots got an illegal action this step and the first one (a JAX
    agent), or ``(HostRole, None, None)`` (a host agent: see :func:`host_actions`)."""
    if step_keys is None:
        raise EvaluationError(f"focal {group.label}: this rollout gives agents no keys")
    slots = np.asarray(role.slots)
    o, m = obs[:, :, slots], mask[:, :, slots]
    keys = block(jax.vmap(lambda k: jax.random.fold_in(k, FOCAL_SALT))(step_keys))
    if group.host:
        state = None if not group.wants_state else jax.tree_util.tree_map(block, states)
        ones = jnp.ones(o.shape[:2], jnp.int32)
        hr = HostRole(group, cls, role, o, m, carry == 0, keys, state, ones, obs.shape[2])
        return hr, None, None
    step = jax.vmap(group.jax_step, in_axes=(None, 0, 0, 0, 0))  # over the episodes
    cr, a = jax.vmap(step)(params, carry, o, m, keys)  # over the teams; a: [size, E, k]
    full = jnp.zeros(obs.shape[:3], jnp.int32).at[:, :, slots].set(a)
    return cr, full, illegal_actions(a, m)


def actions_legal(actions: Any, mask: Any, xp: Any) -> Any:
    n = mask.shape[-1]
    inside = (actions >= 0) & (actions < n)
    picked = xp.take_along_axis(mask, xp.clip(actions, 0, n - 1)[..., None], axis=-1)[..., 0]
    return inside & picked


def illegal_actions(actions: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``actions [size, ...]`` against ``mask [size, ..., A]`` -> per team (axis 0): any
    illegal action (bool), and the first one (int32; 0 when none). The rollout carries
    them out (``machine.Schedule.illegal``): no host callback in the program, so it can be
    exported and kept in the persistent compilation cache."""
    size = actions.shape[0]
    legal = actions_legal(actions, mask, jnp).reshape(size, -1)
    first = jnp.argmin(legal, axis=1)
    action = jnp.take_along_axis(actions.reshape(size, -1), first[:, None], axis=1)[:, 0]
    bad = ~jnp.all(legal, axis=1)
    return bad, jnp.where(bad, action, 0).astype(jnp.int32)


def illegal_message(label: str, action: int) -> str:
    """The one line for an agent that chose an illegal action."""
    return f"focal {label}: act chose action {action}, which is not legal"


def host_actions(roles: Sequence[HostRole]) -> list[jax.Array]:
    """The step's host roles -> their actions ``[size, E, P]`` each: ONE callback per host
    agent for all of its rows (roles of every class, in order)."""
    out: list[Any] = [None] * len(roles)
    by_group: dict[str, list[int]] = {}
    for i, r in enumerate(roles):
        by_group.setdefault(r.group.key, []).append(i)
    for key, idx in by_group.items():
        group = roles[idx[0]].group
        parts = [roles[i] for i in idx]

        def rows(x, r):  # [size, E, k, ...] -> [R, ...]
            return x.reshape((r.rows,) + x.shape[3:])

        def per_row(x, r):  # [size, E, ...] -> [size, E, k, ...] -> [R, ...]
            k = len(r.role.slots)
            y = jnp.broadcast_to(x[:, :, None], x.shape[:2] + (k,) + x.shape[2:])
            return rows(y, r)

        obs = jnp.concatenate([rows(r.obs, r) for r in parts])
        mask = jnp.concatenate([rows(r.mask, r) for r in parts])
        fresh = jnp.concatenate([per_row(r.fresh, r) for r in parts])
        player = jnp.concatenate(
            [
                rows(jnp.broadcast_to(jnp.asarray(r.role.slots, jnp.int32), r.obs.shape[:3]), r)
                for r in parts
            ]
        )
        # A row's key: its episode's focal key with its slot folded in (a resident's two
        # slots draw apart).
        keys = jax.vmap(jax.random.fold_in)(
            jnp.concatenate([per_row(r.keys, r) for r in parts]), player
        )
        state = None
        if group.wants_state:
            state = jax.tree_util.tree_map(
                lambda *xs: jnp.concatenate(xs),
                *[jax.tree_util.tree_map(lambda x, r=r: per_row(x, r), r.state) for r in parts],
            )
        total = obs.shape[0]
        from jax.experimental import io_callback

        got = io_callback(
            _HostCall(key),
            jax.ShapeDtypeStruct((total,), jnp.int32),
            obs,
            mask,
            fresh,
            keys,
            player,
            state,
            ordered=False,
        )
        at = 0
        for i, r in zip(idx, parts, strict=True):
            a = got[at : at + r.rows].reshape(r.obs.shape[:3])
            at += r.rows
            full = jnp.zeros(r.obs.shape[:2] + (r.num_agents,), jnp.int32)
            out[i] = full.at[:, :, np.asarray(r.role.slots)].set(a)
    return out


# ----------------------------------------------------------------------------------------
# The host side: bindings and failures
# ----------------------------------------------------------------------------------------
_LOCK = threading.Lock()
_FAILURES: dict[str, str] = {}  # group key -> the first fault seen while it ran
NO_BINDING = (
    "a host agent's callback ran with no agent bound to it: host agents play through "
    "alem_eval.evaluate.agent_runs.run_agent_teams"
)


def _fail(key: str, message: str) -> None:
    with _LOCK:
        _FAILURES.setdefault(key, message)


@dataclass
class _Binding:
    """The host agent a host program's callback drives now, and its rows' carry (host
    programs run on one device: one call per step holds all of the agent's rows)."""

    group: AgentGroup
    difficulty: str | None
    world: Any
    max_steps: int | None = None
    carry: Any = None
    rows: int = -1

    def step(self, obs, mask, fresh, keys, player, state) -> np.ndarray:
        """One step of the agent's ``R`` rows -> ``R`` legal int32 actions; any fault is
        an :class:`EvaluationError` naming the agent."""
        g = self.group
        obs, mask, fresh = np.asarray(obs), np.asarray(mask), np.asarray(fresh)
        r = obs.shape[0]
        try:
            if self.rows != r:
                self.carry, self.rows = g.agent.init(r), r
            elif fresh.any():
                new = g.agent.init(r)
                self.carry = jax.tree_util.tree_map(
                    lambda a, b: np.where(fresh.reshape((-1,) + (1,) * (np.ndim(a) - 1)), a, b),
                    new,
                    self.carry,
                )
        except Exception as exc:
            raise EvaluationError(
                f"focal {g.label}: init raised {type(exc).__name__}: {brief(exc)}"
            ) from None
        kwargs = {}
        if g.wants_info:
            kwargs["info"] = HostInfo(
                player=np.asarray(player),
                fresh=fresh,
                state=None if state is None else jax.tree_util.tree_map(np.asarray, state),
                difficulty=self.difficulty,
                world=self.world,
                max_steps=self.max_steps,
            )
        try:
            self.carry, actions = g.agent.act(self.carry, obs, mask, np.asarray(keys), **kwargs)
        except Exception as exc:  # the agent's own code: anything may come back
            raise EvaluationError(
                f"focal {g.label}: act raised {type(exc).__name__}: {brief(exc)}"
            ) from None
        actions = np.asarray(actions)
        if actions.shape != (r,) or not np.issubdtype(actions.dtype, np.integer):
            raise EvaluationError(
                f"focal {g.label}: act must return {r} integer actions (one per row), got "
                f"{actions.dtype} {list(actions.shape)}"
            )
        legal = actions_legal(actions, mask, np)
        if not legal.all():
            raise EvaluationError(illegal_message(g.label, int(actions[np.argmin(legal)])))
        return actions.astype(np.int32)


_HOST: dict[str, _Binding] = {}


@dataclass(frozen=True)
class _HostCall:
    """The callback of a host program (keyed, so every host agent of that shape and
    place shares the compiled program): runs the bound agent. A fault is recorded and
    the step gets action 0 (the run stops after this call of the rollout and its records
    are discarded); with no agent bound it raises (never a silent NOOP)."""

    key: str

    def __call__(self, obs, mask, fresh, keys, player, state):
        zeros = np.zeros((obs.shape[0],), np.int32)
        binding = _HOST.get(self.key)
        if binding is None:
            raise EvaluationError(NO_BINDING)
        if self.key in _FAILURES:  # (the rest of the call in which the fault came)
            return zeros
        try:
            return binding.step(obs, mask, fresh, keys, player, state)
        except EvaluationError as exc:
            _fail(self.key, str(exc))
            return zeros


def probe_host(
    group: AgentGroup,
    obs,
    mask,
    key,
    state,
    difficulty: str,
    world: Any,
    max_steps: int | None = None,
) -> None:
    """One real step of a host agent (``obs [k, D]``, ``mask [k, A]`` of one world's
    first ``k`` slots, its step ``key``, the world's env ``state``), as its callback
    would run it: a fault raises here, before the rollout compiles."""
    k = obs.shape[0]
    focal_key = jax.random.fold_in(key, FOCAL_SALT)
    keys = jax.vmap(lambda s: jax.random.fold_in(focal_key, s))(jnp.arange(k))
    rows = None
    if group.wants_state:
        rows = jax.tree_util.tree_map(lambda x: np.stack([np.asarray(x)] * k), state)
    binding = _Binding(group, difficulty, world, max_steps)
    binding.step(obs, mask, np.ones(k, bool), keys, np.arange(k, dtype=np.int32), rows)


def raise_failure(groups: Sequence[AgentGroup]) -> None:
    """Raise the first fault recorded for ``groups`` (:class:`EvaluationError`)."""
    for g in groups:
        msg = _FAILURES.get(g.key)
        if msg is not None:
            raise EvaluationError(msg)


def check_bound(groups: Sequence[AgentGroup]) -> None:
    """Every host agent among ``groups`` is the one bound to its callback (by
    :func:`~alem_eval.evaluate.agent_runs.run_agent_teams`), else one error line."""
    for g in groups:
        bound = _HOST.get(g.key) if g.host else None
        if g.host and (bound is None or bound.group.agent is not g.agent):
            raise EvaluationError(
                f"focal {g.label}: a host agent plays through "
                "alem_eval.evaluate.agent_runs.run_agent_teams, which binds it to the "
                "rollout's callback (run_teams alone has none for it)"
            )


@contextlib.contextmanager
def bind_host_agents(
    groups: Sequence[AgentGroup], difficulty: str, world: Any, max_steps: int | None = None
) -> Iterator[None]:
    """Bind the host agents among ``groups`` to their callbacks for one run (and clear
    the faults recorded for ``groups``, before and after). One run with host agents at a
    time in a process: another one is refused."""
    hosts = [g for g in groups if g.host]
    keys = {g.key for g in hosts}
    if len(keys) < len(hosts):
        raise UsageError(
            "each host agent of a run needs its own place (run_agent_teams numbers them): "
            + ", ".join(g.label for g in hosts)
        )
    with _LOCK:
        if hosts and _HOST:
            busy = ", ".join(sorted(b.group.label for b in _HOST.values()))
            raise UsageError(
                f"focal {hosts[0].label}: another run with host agents ({busy}) is playing "
                "in this process; host agents play one run at a time"
            )
        for g in groups:
            _FAILURES.pop(g.key, None)
        for g in hosts:
            _HOST[g.key] = _Binding(g, difficulty, world, max_steps)
    try:
        yield
    finally:
        with _LOCK:
            for g in hosts:
                _HOST.pop(g.key, None)
            for g in groups:
                _FAILURES.pop(g.key, None)
