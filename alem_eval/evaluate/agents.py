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
gets ``info=``:class:`~alem_eval.evaluate.host_agents.HostInfo` (which agent each row is,
which rows start an episode;
with ``wants_state = True`` also each row's env state and :meth:`HostInfo.text`, Alem's
own language view of a row from ``alem.llm``). A run with host agents plays on ONE
device, whatever the device count (one call per step holds all of an agent's rows, and
its carry); each host agent of a run has its own callback; one run with host agents at
a time per process (another is refused); a callback with no agent bound raises.

As actors of the play core (:class:`~alem_eval.evaluate.actors.Actor`) the two kinds are
two classes over their common part (:class:`~alem_eval.evaluate.actors.AgentActor`):
:class:`JaxAgent` (here) and :class:`~alem_eval.evaluate.host_agents.HostAgent`;
:func:`make_group` wraps an agent object in the one its ``host`` flag names.

Faults never leave a half-run behind silently: a wrong output shape or dtype, an
exception in a JAX ``act`` and a traced value escaping it are :class:`EvaluationError` s
at trace time; a host agent's first step runs once before the rollout compiles
(``Actor.probe``: :meth:`JaxAgent.probe`,
:meth:`~alem_eval.evaluate.host_agents.HostAgent.probe`); an illegal action of a JAX agent is an
output of the rollout
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
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError, brief
from alem_eval.evaluate.actors import (
    FOCAL_SALT,
    Actor,
    AgentActor,
    FirstWorld,
    RoleInput,
    RoleStep,
    actions_legal,
    illegal_message,
    place_actions,
)
from alem_eval.evaluate.agent_identity import agent_digest, code_digest, split_arrays
from alem_eval.evaluate.host_agents import HostAgent


@runtime_checkable
class Agent(Protocol):
    """The focal-agent protocol (see the module docstring)."""

    name: str

    def init(self, batch: int) -> Any: ...

    def act(self, carry: Any, obs: Any, mask: Any, key: Any) -> tuple[Any, Any]: ...


# ----------------------------------------------------------------------------------------
# A JAX agent as an actor
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class JaxAgent(AgentActor):
    """A JAX agent as an :class:`~alem_eval.evaluate.actors.Actor`: it steps inside the
    rollout, traced once and vmapped over the teams and episodes (:meth:`act`).

    Its ``arrays`` (the array leaves of its attributes:
    :func:`~alem_eval.evaluate.agent_identity.split_arrays`) are inputs of its program,
    like a checkpoint's weights; ``code`` (:func:`~alem_eval.evaluate.agent_identity.
    code_digest`: its source, the factory's arguments, the rest of its state) keys the
    program, so another instance with other weights, or a new process, reuses it. An
    agent whose ``act`` needs its arrays' values while it is traced keeps them as
    constants (``arrays`` empty; ``code`` then covers their bytes too: :meth:`checked`)."""

    code: str = ""
    arrays: tuple = field(default=(), repr=False)
    rebuild: Callable[[Sequence[Any]], Any] | None = field(default=None, repr=False)
    _extra: bytes = field(default=b"", repr=False)

    @property
    def key(self) -> str:
        """The group key of the compiled program: the agent's ``code`` (its arrays are
        inputs)."""
        return f"agent:{self.name}@{self.code}"

    def variables(self, weights: Any = None) -> Any:
        """The member's program input (``run_teams``; ``weights`` unused): a placeholder
        and its arrays."""
        return (np.zeros((1,), np.float32), self.arrays)

    def bound(self, variables: Any) -> Any:
        """The agent with the (traced) arrays of ``variables`` in place of its own."""
        if self.rebuild is None or not self.arrays:
            return self.agent
        return self.rebuild(list(variables[1]))

    def init(self, k: int) -> Any:
        """Zero carry of the ``k`` slots of one episode (the play core, ``evaluate.machine``,
        resets carries to zeros): ``started`` 0 makes the next step start from ``init(k)``
        (int32: the machine's reset writes 0 into every leaf)."""
        started = jnp.zeros((), jnp.int32)
        return (jax.tree_util.tree_map(jnp.asarray, self.agent.init(k)), started)

    def jax_step(self, variables: Any, carry: Any, obs: jax.Array, mask: jax.Array, key):
        """One episode's step (traced, vmapped over the episodes) with the arrays of
        ``variables`` (:meth:`variables`, as the program gets them)."""
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

    def act(self, params: Any, carry: Any, inp: RoleInput) -> RoleStep:
        """One step of the agent's role in team class ``inp.cls``: ``params`` per team
        (:meth:`variables`), ``carry`` per (team, episode) -> actions ``[size, E, P]``
        with the role's slots filled and ``illegal`` per team (:func:`illegal_actions`)."""
        o, m, keys = self.role_inputs(inp)
        step = jax.vmap(self.jax_step, in_axes=(None, 0, 0, 0, 0))  # over the episodes
        cr, a = jax.vmap(step)(params, carry, o, m, keys)  # over the teams; a: [size, E, k]
        return RoleStep(cr, place_actions(a, inp.slots, inp.obs.shape[2]), illegal_actions(a, m))

    def checked(self, obs_dim: int, num_actions: int, batches: Sequence[int] = (2,)) -> JaxAgent:
        """``init``/``act`` traced on abstract inputs (no compile), for each batch (slots it
        drives) in ``batches``: the actions are int32 ``[batch]`` and the carry keeps its
        structure, shapes and dtypes. Returns the agent with the env's action count (and
        its arrays as constants when ``act`` reads their values while traced)."""
        group = dataclasses.replace(self, num_actions=num_actions)
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

    def probe(self, first: Callable[[], FirstWorld], batch: int) -> None:
        """One concrete step, jitted, on the first ``batch`` slots of the first world: first
        actions that are illegal, or traced values escaping ``act``, fail here."""
        w = first()
        obs, mask = w.obs[:batch], w.mask[:batch]
        with agent_traces(self):
            step = jax.jit(self.jax_step)
            key = jax.random.fold_in(w.key, FOCAL_SALT)
            _, actions = step(self.variables(), self.init(batch), obs, mask, key)
        legal = np.asarray(actions_legal(actions, mask, jnp))
        if not legal.all():
            raise EvaluationError(
                illegal_message(self.label, int(np.asarray(actions)[np.argmin(legal)]))
            )


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
def agent_traces(group: JaxAgent) -> Iterator[None]:
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


def _check_batch(group: JaxAgent, obs_dim: int, num_actions: int, k: int) -> None:
    obs = jax.ShapeDtypeStruct((k, obs_dim), jnp.float32)
    mask = jax.ShapeDtypeStruct((k, num_actions), jnp.bool_)
    key = jax.ShapeDtypeStruct((2,), jnp.uint32)
    try:
        carry = jax.eval_shape(lambda: group.init(k))
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


# ----------------------------------------------------------------------------------------
# An agent object -> its actor
# ----------------------------------------------------------------------------------------
def make_group(agent: Any, label: str | None = None, extra: bytes = b"") -> Any:
    """An :class:`~alem_eval.evaluate.actors.Actor` as it is (or the one an object carries
    as ``actor``: a loaded ``Policy``); else check that ``agent`` follows the protocol
    (attributes only; shapes are checked by ``Actor.checked``) and wrap it: a
    :class:`~alem_eval.evaluate.host_agents.HostAgent` when its ``host`` is true, else a
    :class:`JaxAgent`. ``extra``: more identity bytes (e.g. the source file and the
    factory's arguments of a CLI spec)."""
    if isinstance(agent, Actor):  # already the play core's (an agent actor, a released policy)
        return agent
    if isinstance(getattr(agent, "actor", None), Actor):  # e.g. alem_eval.load_policy's
        return agent.actor
    label = label or str(getattr(agent, "name", type(agent).__name__))
    name = getattr(agent, "name", None)
    if not isinstance(name, str) or not name:
        raise UsageError(f"focal {label}: the agent needs a name (a non-empty str attribute)")
    for method in ("init", "act"):
        if not callable(getattr(agent, method, None)):
            raise UsageError(f"focal {label}: the agent has no {method}() method")
    identity = f"{name}@{agent_digest(agent, extra)}"
    if getattr(agent, "host", False):
        return HostAgent(
            agent,
            label,
            identity,
            wants_info=bool(
                getattr(agent, "wants_info", False) or getattr(agent, "wants_state", 0)
            ),
            wants_state=bool(getattr(agent, "wants_state", False)),
        )
    arrays, rebuild = split_arrays(agent)
    return JaxAgent(
        agent,
        label,
        identity,
        code=code_digest(agent, extra),
        arrays=arrays,
        rebuild=rebuild,
        _extra=extra,
    )
