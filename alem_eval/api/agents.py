"""A released policy for loops of your own (``import alem_eval``).

:func:`load_policy` gives the greedy policy the evaluator plays, as two pure functions,
``init(batch)`` and ``act(carry, obs, mask)``; :func:`alem_eval.make_env`
(:mod:`alem_eval.api.envs`) gives one unbatched eval environment, built as the evaluator
builds it (:class:`alem_eval.envs.eval_env.EvalEnv`), with ``reset(key)``,
``step(key, state, actions)`` and ``action_mask(state)``. Both take and
give raw observations ``[P, obs_dim]`` float32 (P = 3 agents): a policy whose network
takes the one-hot agent id appends it itself, exactly as in the evaluator, so the same
actions follow from the same inputs. Everything is jit-, vmap- and scan-able.

    policy = alem_eval.load_policy(cell)
    env = alem_eval.make_env("easy")
    obs, state = env.reset(jax.random.PRNGKey(9999))  # the fast protocol's episode 0
    carry = policy.init(1)
    carry, actions = policy.act(carry, obs[None], env.action_mask(state)[None])
    obs, state, rewards, done, info = env.step(key, state, actions[0])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alem_eval.api.functions import before_compiling
from alem_eval.core.errors import UsageError

before_compiling()  # the persistent compilation cache, while JAX is not yet imported

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


@dataclass(frozen=True, eq=False)
class _Static:
    """What a policy's compiled step is specialised on (compared by identity)."""

    greedy: Any  # policies.GreedyPolicy
    masks: bool  # the cell was trained with ACTION_MASKING (else every action is legal)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class Policy:
    """The greedy policy of one cell, as the evaluator plays it (a pytree: ``params`` are
    its leaves, so ``jax.jit(lambda p, c, o, m: p.act(c, o, m))`` takes the weights as an
    argument).

    ``cell`` (id), ``algorithm``, ``num_agents`` (P = 3), ``obs_dim`` (the raw observation
    width), ``num_actions`` (A); ``params``: the prepared network variables.

    A focal for :func:`alem_eval.scenario` as it is (``scenario(policy, cells)``): there it
    plays as the released checkpoint plays in a cross-play team (``actor``: the play
    core's :class:`~alem_eval.evaluate.actors.ReleasedPolicy`, on all P slots of each team,
    its actions kept for its own slots), keyed in the results store by its checkpoint
    and config hashes. Its ``act`` here is the same step for loops of your own, on
    whole episodes (``obs [batch, P, obs_dim]``), not the agent protocol's ``act(carry,
    obs[k, obs_dim], mask, key)``: a released network may read every slot's row and
    append the slot's one-hot id, so it needs all P rows.
    """

    params: Any = field(repr=False)
    cell: str = field(metadata=dict(static=True))
    algorithm: str = field(metadata=dict(static=True))
    num_agents: int = field(metadata=dict(static=True))
    obs_dim: int = field(metadata=dict(static=True))
    num_actions: int = field(metadata=dict(static=True))
    _static: _Static = field(metadata=dict(static=True), repr=False)
    actor: Any = field(default=None, metadata=dict(static=True), repr=False)

    def init(self, batch: int) -> Any:
        """The zero recurrent state of ``batch`` episodes (a pytree, leading axis
        ``batch``; ``[batch, P, H]`` for IPPO / MAPPO / HyperMARL). Start every episode
        from it."""
        one = self._static.greedy.init_carry()
        return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), one)

    def act(self, carry: Any, obs: jax.Array, mask: jax.Array) -> tuple[Any, jax.Array]:
        """One greedy step of ``batch`` episodes -> ``(carry, actions)``.

        ``obs``: ``[batch, P, obs_dim]`` float32 raw observations (``Env.reset`` /
        ``Env.step``); ``mask``: ``[batch, P, A]`` bool legal actions
        (``Env.action_mask``; ignored, as by the evaluator, when the cell was trained
        without action masking); ``actions``: ``[batch, P]`` int32, the argmax of the
        masked policy (ties -> the lowest action). Pure and jit-able: the same inputs give
        the actions the evaluator takes.
        """
        obs = jnp.asarray(obs, jnp.float32)
        mask = jnp.asarray(mask, jnp.bool_)
        want = {"obs": (self.num_agents, self.obs_dim), "mask": (self.num_agents, self.num_actions)}
        for name, x in (("obs", obs), ("mask", mask)):
            if x.ndim != 3 or tuple(x.shape[1:]) != want[name]:
                raise UsageError(
                    f"{self.cell}: {name} must be [batch, {', '.join(map(str, want[name]))}], "
                    f"got {list(x.shape)}"
                )
        return _act(self, carry, obs, mask)


@jax.jit
def _act(policy: Policy, carry: Any, obs: jax.Array, mask: jax.Array) -> tuple[Any, jax.Array]:
    """The evaluator's step of one role (``evaluate.teams.team_actions``): the policy on all P
    agents of each episode, reset flags all False (an Alem episode ends for every agent
    at once, so no agent is done before the end)."""
    greedy = policy._static.greedy
    if not policy._static.masks:
        mask = jnp.ones_like(mask)
    dones = jnp.zeros(obs.shape[:2], jnp.bool_)

    def one(c, o, d, m):
        return greedy.act(policy.params, c, greedy.policy_input(o), d, m)

    return jax.vmap(one)(carry, obs, dones, mask)


def load_policy(
    cell: Any,
    *,
    source: str | Path | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
) -> Policy:
    """The greedy policy of one cell: a ``Cell`` from :func:`alem_eval.select`, or a
    selector naming exactly one cell of ``source`` (None: the Hub; downloaded if needed).

    Returns :class:`Policy`: ``init(batch) -> carry``, ``act(carry, obs, mask) ->
    (carry, actions)``; also a focal :func:`alem_eval.scenario` takes as it is.
    """
    from alem_eval.api.functions import resolve_cells
    from alem_eval.evaluate.rollout import policy_variables
    from alem_eval.model.loader import load_policy_cell
    from alem_eval.model.policies import make_policy
    from alem_eval.scoring.focal_cell import focal_of_cell

    src, cells = resolve_cells(cell, source, repo, revision, cache_dir)
    if len(cells) != 1:
        shown = ", ".join(c.id for c in cells[:3]) + (", ..." if len(cells) > 3 else "")
        raise UsageError(f"load_policy takes one cell; {cell!r} names {len(cells)} ({shown})")
    (c,) = cells
    loaded = load_policy_cell(src, c)
    spec, greedy = loaded.spec, make_policy(loaded.spec)
    variables = policy_variables(spec, loaded.weights, c.id)
    return Policy(
        params=jax.jit(greedy.prepare)(variables),
        cell=c.id,
        algorithm=spec.algorithm,
        num_agents=loaded.cfg.env.num_agents,
        obs_dim=spec.obs_dim,
        num_actions=spec.num_actions,
        _static=_Static(greedy, bool(loaded.cfg.env.action_masking)),
        actor=focal_of_cell(loaded.cell_dir, c.id, loaded),
    )
