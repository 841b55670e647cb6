"""What drives a slot: ONE interface for everything that acts in the play core.

A team's members are actors. A released checkpoint's greedy policy
(:class:`ReleasedPolicy`), a JAX focal agent and a host focal agent (both
:class:`~alem_eval.evaluate.agents.AgentGroup`) implement the same :class:`Actor`
interface, and the play core (``teams``, ``machine``, ``programs``, ``group``,
``rollout``) only ever calls it: nothing there asks what drives a slot.

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
* ``checked(obs_dim, num_actions, batches)``: the actor checked against the env (and the
  slot counts ``batches`` it will drive) before anything compiles, or a one-line error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
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

    def checked(self, obs_dim: int, num_actions: int, batches: Any) -> Any: ...


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

    def checked(self, obs_dim: int, num_actions: int, batches: Any = ()) -> ReleasedPolicy:
        """As :meth:`AgentGroup.checked`: the env's shapes must be the network's."""
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
