"""Host agents (``host = True``): the actor of the play core that runs outside JAX.

:class:`HostAgent` is a host agent's :class:`~alem_eval.evaluate.actors.Actor`. Its role
steps come back ``pending`` (:class:`HostRole`); the step's pending roles are resolved
through ONE ``jax.experimental.io_callback`` per step for all of the agent's rows
(:meth:`HostAgent.resolve` -> :func:`host_actions`, asked by ``teams.team_actions``); the
callback finds the agent it drives through a binding made for one run
(:func:`bind_host_agents`, by ``agent_runs.run_agent_teams``), keeps the rows' carry, and
records the first fault (:func:`raise_failure` raises it after the rollout's call).
:class:`HostInfo` is what an agent with ``wants_info`` gets; :meth:`HostAgent.probe` runs
one real step before the rollout compiles. The protocol: :mod:`alem_eval.evaluate.agents`;
the part every agent actor shares: :class:`~alem_eval.evaluate.actors.AgentActor`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError, brief
from alem_eval.evaluate.actors import (
    FOCAL_SALT,
    AgentActor,
    FirstWorld,
    RoleInput,
    RoleStep,
    actions_legal,
    illegal_message,
)


@dataclass(frozen=True, eq=False)
class HostAgent(AgentActor):
    """A host agent as an :class:`~alem_eval.evaluate.actors.Actor`: its roles' rows wait
    for the step's one callback (:meth:`act` -> ``pending``, :meth:`resolve`).
    ``host_slot``: which of a run's host agents it is (each has its own callback; set by
    ``agent_runs.run_agent_teams``); ``wants_info`` / ``wants_state``: ``act`` also gets
    ``info=``:class:`HostInfo` (with each row's env state)."""

    host: ClassVar[bool] = True

    wants_info: bool = False
    wants_state: bool = False
    host_slot: int = 0

    @property
    def key(self) -> str:
        """The group key of the compiled program: every host agent of this shape and place
        among a run's host agents shares it (the callback looks up the agent bound now)."""
        return f"host-agent{self.host_slot}:state={self.wants_state}:info={self.wants_info}"

    def variables(self, weights: Any = None) -> Any:
        """The member's program input (``weights`` unused): a placeholder."""
        return (np.zeros((1,), np.float32), ())

    def init(self, k: int) -> Any:
        """The rows' ``started`` flag (0: the next step starts an episode: the callback
        re-initialises those rows' carry, which it keeps on the host)."""
        return jnp.zeros((), jnp.int32)

    def act(self, params: Any, carry: Any, inp: RoleInput) -> RoleStep:
        """The role's rows, ``pending`` until the step's callback (:meth:`resolve`)."""
        o, m, keys = self.role_inputs(inp)
        state = None if not self.wants_state else jax.tree_util.tree_map(inp.block, inp.states)
        ones = jnp.ones(o.shape[:2], jnp.int32)  # started: 1
        role = HostRole(self, inp.cls, inp.slots, o, m, carry == 0, keys, state, inp.obs.shape[2])
        return RoleStep(ones, jnp.zeros(inp.obs.shape[:3], jnp.int32), None, role)

    def resolve(self, pending: Sequence[Any]) -> list[jax.Array]:
        """:func:`host_actions`: one callback for all of the step's pending roles."""
        return host_actions(pending)

    def checked(self, obs_dim: int, num_actions: int, batches: Any = ()) -> HostAgent:
        """The agent with the env's action count (its shapes are checked by :meth:`probe`)."""
        import dataclasses

        return dataclasses.replace(self, num_actions=num_actions)

    def probe(self, first: Callable[[], FirstWorld], batch: int) -> None:
        """One real step of the first ``batch`` slots of the first world, as the callback
        would run it: a fault raises here, before the rollout compiles."""
        w = first()
        probe_host(
            self,
            np.asarray(w.obs[:batch]),
            np.asarray(w.mask[:batch]),
            w.key,
            w.state,
            w.difficulty,
            w.world,
            w.max_steps,
        )

    def ready(self) -> None:
        """One error line unless this agent is the one bound to its callback (by
        :func:`~alem_eval.evaluate.agent_runs.run_agent_teams`)."""
        bound = _HOST.get(self.key)
        if bound is None or bound.group.agent is not self.agent:
            raise EvaluationError(
                f"focal {self.label}: a host agent plays through "
                "alem_eval.evaluate.agent_runs.run_agent_teams, which binds it to the "
                "rollout's callback (run_teams alone has none for it)"
            )


class HostRole(NamedTuple):
    """A host agent's role in one team class, waiting for the step's one callback."""

    group: HostAgent
    cls: int
    slots: tuple[int, ...]  # the agent slots the role drives
    obs: jax.Array  # [size, E, k, obs_dim]
    mask: jax.Array  # [size, E, k, A]
    fresh: jax.Array  # [size, E] bool
    keys: jax.Array  # [size, E, 2]
    state: Any  # [size, E, ...] env states (wants_state) or None
    num_agents: int  # P

    @property
    def rows(self) -> int:
        return int(np.prod(self.obs.shape[:3]))


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
            k = len(r.slots)
            y = jnp.broadcast_to(x[:, :, None], x.shape[:2] + (k,) + x.shape[2:])
            return rows(y, r)

        obs = jnp.concatenate([rows(r.obs, r) for r in parts])
        mask = jnp.concatenate([rows(r.mask, r) for r in parts])
        fresh = jnp.concatenate([per_row(r.fresh, r) for r in parts])
        player = jnp.concatenate(
            [
                rows(jnp.broadcast_to(jnp.asarray(r.slots, jnp.int32), r.obs.shape[:3]), r)
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
            out[i] = full.at[:, :, np.asarray(r.slots)].set(a)
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

    group: HostAgent
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
    group: HostAgent,
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


def raise_failure(groups: Sequence[Any]) -> None:
    """Raise the first fault recorded for ``groups`` (:class:`EvaluationError`)."""
    for g in groups:
        msg = _FAILURES.get(g.key)
        if msg is not None:
            raise EvaluationError(msg)


@contextlib.contextmanager
def bind_host_agents(
    groups: Sequence[Any], difficulty: str, world: Any, max_steps: int | None = None
) -> Iterator[None]:
    """Bind the host agents among ``groups`` (a run's actors) to their callbacks for one
    run (and clear the faults recorded for ``groups``, before and after). One run with host agents at a
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
