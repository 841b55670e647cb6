"""What drives a slot: ONE interface for everything that acts in the play core.

A team's members are actors. Three classes implement the one :class:`Actor` interface: a
released checkpoint's greedy policy (:class:`ReleasedPolicy`, here), a JAX agent
(:class:`~alem_eval.evaluate.agents.JaxAgent`: traced into the rollout) and a host agent
(:class:`~alem_eval.evaluate.host_agents.HostAgent`: numpy, through a host callback), the
two agents over their common part (:class:`AgentActor`). The play core (``teams``,
``machine``, ``programs``, ``group``, ``rollout``, ``agent_runs``) only ever calls the
interface: nothing there asks which class drives a slot.

An actor of a program's network group (every member the group's ``key`` names shares
its compiled code):

* ``key`` (the program's group key: a released network's ``cfg.network_key``, a JAX
  agent's code identity), ``label`` (how errors name it), ``algorithm`` (the program's
  label), ``host`` (acts through a host callback, so its run plays on one device) and
  ``masked`` (whether it sees the legal actions: a member's ACTION_MASKING; agents always);
* ``variables(weights)``: a member's program input (checked numpy arrays), stacked over
  the teams of a role;
* ``prepare(variables)``: per-member constants, traced and vmapped over the teams;
* ``init(num_slots)``: the zero carry of one episode of a role driving ``num_slots``
  slots (a released policy's covers all ``P`` slots: it runs on all of them);
* ``act(params, carry, inp: RoleInput) -> RoleStep``: one step of a role over a team
  class's teams and episodes.
* ``resolve(pending)``: the actions of the roles whose :class:`RoleStep` came back
  ``pending`` this step (a host agent's: ONE callback for all of them), ``[size, E, P]``
  each; an actor that never leaves a role pending is never asked;
* ``checked(obs_dim, num_actions, batches)``: the actor checked against the env (and the
  slot counts ``batches`` it will drive) before anything compiles, or a one-line error;
* ``probe(first, batch)``: one concrete step on the first world (``first()``: a
  :class:`FirstWorld`, made on first use) before anything compiles, or a one-line error
  (a released policy: nothing to probe);
* ``ready()``: a one-line error when the actor cannot play in a rollout now (a host agent
  whose callback has no binding: :func:`~alem_eval.evaluate.agent_runs.run_agent_teams`
  binds it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.errors import EvaluationError
from alem_eval.model.networks import NetworkSpec
from alem_eval.model.policies import GreedyPolicy, make_policy


class RoleInput(NamedTuple):
    """What a role sees in one step of its team class (``size`` teams x ``E`` episodes)."""

    obs: jax.Array  # [size, E, P, obs_dim] raw observations of every slot
    dones: jax.Array  # [size, E, P] bool
    mask: jax.Array  # [size, E, P, A] bool (all True for members without masking)
    step_keys: jax.Array | None  # [N, 2] the slots' step keys (not consumed), batch layout
    states: Any  # the slots' env states (batch layout) or None
    block: Callable[[Any], Any]  # batch layout [N, ...] -> this class's [size, E, ...]
    slots: tuple[int, ...]  # the agent slots the role drives
    cls: int  # the team class's index


class RoleStep(NamedTuple):
    """One role's step: its new carry, actions ``[size, E, P]`` int32 (kept for its
    slots), ``illegal`` (per team: any illegal action, ``[size]`` bool, and the first
    one, ``[size]`` int32; None: the actor cannot choose one) and ``pending`` (a host
    agent's rows, acted on by the step's one callback per host agent; None otherwise)."""

    carry: Any
    actions: jax.Array
    illegal: tuple[jax.Array, jax.Array] | None = None
    pending: Any = None


@runtime_checkable
class Actor(Protocol):
    """The play core's interface of whatever drives a slot (see the module docstring)."""

    @property
    def key(self) -> str: ...

    @property
    def label(self) -> str: ...

    @property
    def algorithm(self) -> str: ...

    @property
    def host(self) -> bool: ...

    @property
    def masked(self) -> bool: ...

    def variables(self, weights: Any) -> Any: ...

    def prepare(self, variables: Any) -> Any: ...

    def init(self, num_slots: int) -> Any: ...

    def act(self, params: Any, carry: Any, inp: RoleInput) -> RoleStep: ...

    def resolve(self, pending: Sequence[Any]) -> list[jax.Array]: ...

    def checked(self, obs_dim: int, num_actions: int, batches: Any) -> Any: ...

    def probe(self, first: Callable[[], FirstWorld], batch: int) -> None: ...

    def ready(self) -> None: ...


@dataclass(frozen=True)
class FirstWorld:
    """What an actor's probe step sees (``Actor.probe``): the first world of the ``fast``
    protocol (the world the rollout starts from) with the run's settings."""

    obs: Any  # [P, obs_dim] its observations, every slot
    mask: Any  # [P, A] bool: the legal actions of every slot
    key: Any  # [2] uint32: its step key
    state: Any  # its env state
    difficulty: str
    world: Any  # alem_eval.envs.eval_env.EnvStatics of the env
    max_steps: int | None  # the step cap in force


FOCAL_SALT = 0xF0CA1  # fold_in(step_key, FOCAL_SALT): an agent's key, the step key untouched


def actions_legal(actions: Any, mask: Any, xp: Any) -> Any:
    """Whether each action (``[...]``) is legal under ``mask`` (``[..., A]``); ``xp``: numpy
    or jax.numpy."""
    n = mask.shape[-1]
    inside = (actions >= 0) & (actions < n)
    picked = xp.take_along_axis(mask, xp.clip(actions, 0, n - 1)[..., None], axis=-1)[..., 0]
    return inside & picked


def illegal_message(label: str, action: int) -> str:
    """The one line for an agent that chose an illegal action."""
    return f"focal {label}: act chose action {action}, which is not legal"


@dataclass(frozen=True, eq=False)
class AgentActor:
    """What a JAX agent and a host agent share as actors (an agent object of the focal
    protocol, :mod:`alem_eval.evaluate.agents`, in some slots): ``label`` (how errors name
    it: the CLI spec), ``identity`` (``name@digest``: what stored results are keyed by;
    :mod:`~alem_eval.evaluate.agent_identity`), the env's action count once checked. An
    agent always sees the legal actions; its keys are ``fold_in(step_key, FOCAL_SALT)``
    of its slots' step keys, which it does not consume. Subclasses:
    :class:`~alem_eval.evaluate.agents.JaxAgent`,
    :class:`~alem_eval.evaluate.host_agents.HostAgent`."""

    host: ClassVar[bool] = False

    agent: Any
    label: str
    identity: str
    num_actions: int = 0  # set by ``checked`` from the env

    @property
    def name(self) -> str:
        return str(self.agent.name)

    @property
    def algorithm(self) -> str:
        """The program label's name (``programs.Program``)."""
        return f"focal:{self.name}"

    @property
    def masked(self) -> bool:
        """An agent always sees the legal actions, whatever the background's ACTION_MASKING."""
        return True

    def prepare(self, variables: Any) -> Any:
        return variables

    def role_inputs(self, inp: RoleInput) -> tuple[jax.Array, jax.Array, jax.Array]:
        """The role's own slots of ``inp``: observations ``[size, E, k, D]``, legal actions
        ``[size, E, k, A]`` and each (team, episode)'s agent key ``[size, E, 2]``."""
        if inp.step_keys is None:
            raise EvaluationError(f"focal {self.label}: this rollout gives agents no keys")
        slots = np.asarray(inp.slots)
        keys = inp.block(jax.vmap(lambda k: jax.random.fold_in(k, FOCAL_SALT))(inp.step_keys))
        return inp.obs[:, :, slots], inp.mask[:, :, slots], keys

    def resolve(self, pending: Sequence[Any]) -> list[jax.Array]:
        raise EvaluationError(f"focal {self.label}: it leaves no role pending")

    def ready(self) -> None:
        """Nothing to wait for (a host agent waits for its binding)."""


def place_actions(actions: jax.Array, slots: Sequence[int], num_agents: int) -> jax.Array:
    """``[size, E, k]`` actions of a role's ``slots`` -> ``[size, E, P]`` (0 elsewhere)."""
    full = jnp.zeros(actions.shape[:2] + (num_agents,), jnp.int32)
    return full.at[:, :, np.asarray(slots)].set(actions)


def policy_variables(spec: NetworkSpec, weights: Any, where: str) -> Any:
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


@dataclass(frozen=True, eq=False)
class ReleasedPolicy:
    """A checkpoint's greedy policy as an actor: each role runs it on all ``P`` slots of
    its teams (the batch shape upstream's policies use, so a team of one checkpoint
    computes exactly its self-play actions) and keeps the actions of the slots it drives.

    ``weights``: the checkpoint's own weights, used when a member's are not given; a
    released cell that plays as a focal carries them, its ``identity`` and ``cfg``
    (:mod:`alem_eval.scoring.focal_cell`)."""

    policy: GreedyPolicy
    key: str
    label: str
    masked: bool
    weights: Any = field(default=None, repr=False)
    identity: str = ""  # a released focal's: what the results store keys its teams by
    cfg: Any = field(default=None, repr=False)  # a released focal's RunConfig
    # a released focal's partners (the cell ids its config.json records under "partners":
    # trained with frozen partners); None: it records none
    trained_with: tuple[str, ...] | None = None
    host: bool = False

    @property
    def algorithm(self) -> str:
        return self.policy.algorithm

    @property
    def spec(self) -> NetworkSpec:
        return self.policy.spec

    def variables(self, weights: Any) -> Any:
        return policy_variables(self.spec, self.weights if weights is None else weights, self.label)

    def prepare(self, variables: Any) -> Any:
        return self.policy.prepare(variables)

    def init(self, num_slots: int) -> Any:
        return self.policy.init_carry()  # every slot: the policy runs on all P of them

    def act(self, params: Any, carry: Any, inp: RoleInput) -> RoleStep:
        policy = self.policy

        def per_team(p, cr, o, d, m):
            def one(cr1, o1, d1, m1):
                return policy.act(p, cr1, policy.policy_input(o1), d1, m1)

            return jax.vmap(one)(cr, o, d, m)

        cr, a = jax.vmap(per_team)(params, carry, inp.obs, inp.dones, inp.mask)
        return RoleStep(cr, a)

    def resolve(self, pending: Sequence[Any]) -> list[jax.Array]:
        raise EvaluationError(f"{self.label}: a released policy leaves no role pending")

    def probe(self, first: Callable[[], FirstWorld], batch: int) -> None:
        """Nothing to probe: the evaluator's own code (its shapes: :meth:`checked`)."""

    def ready(self) -> None:
        """Always ready."""

    def checked(self, obs_dim: int, num_actions: int, batches: Any = ()) -> ReleasedPolicy:
        """The env's shapes must be the network's."""
        if (self.spec.obs_dim, self.spec.num_actions) != (obs_dim, num_actions):
            raise EvaluationError(
                f"{self.label}: its network takes {self.spec.obs_dim} observations and "
                f"{self.spec.num_actions} actions, the env has {obs_dim} and {num_actions}"
            )
        return self


def released_policy(cfg: Any, spec: NetworkSpec, label: str, weights: Any = None) -> ReleasedPolicy:
    """The actor of a checkpoint configured by ``cfg`` (``spec``: its network)."""
    return ReleasedPolicy(
        make_policy(spec), cfg.network_key, label, bool(cfg.env.action_masking), weights
    )
