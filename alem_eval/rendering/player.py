"""Play one ``fast``-protocol episode of a team from the host, one jitted step at a time.

The episode is exactly the one ``score --protocol fast`` plays as episode ``i``: world
``PRNGKey(9999 + i)``, step keys threaded from ``fold_in(PRNGKey(9999 + i), 1)`` with the
evaluator's 3-way split per step (key, act key unused, env key), the greedy actions of
:func:`alem_eval.evaluate.teams.team_actions` (action masking as each member's config says) and
the eval env's ``step``, all on a batch of one slot -- the shapes ``run_teams`` uses for a
single episode, so its actions, length and return are those of
``run_teams(..., num_episodes=1)`` bit for bit (with more episodes in the batch, float
rounding in the policies' matmuls may, in rare near-ties, pick another action).

:class:`EpisodePlayer` yields an :class:`EpisodeStep` per env step (``t = 0``: the reset
world); each step is one call of a jitted env + policy step (:func:`_step_program`, cached
per team structure), the next one queued while the host draws the current one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from alem_eval.core.boundedcache import BoundedCache
from alem_eval.core.errors import UsageError

MAX_EPISODE = 2**31 - 1 - 9999  # PRNGKey(9999 + i) takes an int32 seed


def check_episode(episode: int) -> None:
    if (
        isinstance(episode, bool)
        or not isinstance(episode, (int, np.integer))
        or not 0 <= episode <= MAX_EPISODE
    ):
        raise UsageError(
            f"--episode must be an integer from 0 to {MAX_EPISODE} (episode i is the world "
            f"PRNGKey(9999 + i) of the fast protocol), got {episode!r}"
        )


@dataclass(frozen=True)
class EpisodeStep:
    """The episode after ``t`` steps (``t = 0``: the reset world)."""

    t: int
    state: Any = field(repr=False)  # the env state (unbatched, on the device)
    actions: np.ndarray | None  # [P] int32: the actions of step t (None at t = 0)
    rewards: np.ndarray | None  # [P] float32: their rewards (None at t = 0)
    team_reward: float  # float32 mean over agents (what the episode return sums); 0 at t = 0
    comm: np.ndarray  # [P] int: the comm channel each agent signalled at step t, -1: none
    achievements: np.ndarray  # [num_achievements] bool: unlocked by any agent so far
    last: bool  # the episode ends here (the env said done, or the step cap)
    terminated: bool  # the env said done


class EpisodePlayer:
    """One ``fast``-protocol episode of a team, stepped from the host.

    ``cfgs[k]`` / ``weights[k]`` describe checkpoint ``k``; ``team[s]`` is the checkpoint
    driving agent slot ``s``. Iterating yields :class:`EpisodeStep` s for ``t = 0 ..
    length``; each step is one call of a jitted function (the policies of every role and
    one env step, on a batch of one slot, as :class:`alem_eval.evaluate.machine.Machine` steps).
    """

    def __init__(
        self,
        cfgs: Sequence[Any],
        weights: Sequence[Any],
        team: Sequence[int],
        *,
        eval_difficulty: str,
        episode: int = 0,
        max_steps: int | None = None,
        on_env_mismatch: str = "error",
    ):
        from alem_eval.evaluate.group import stack_trees
        from alem_eval.evaluate.actors import released_policy
        from alem_eval.evaluate.rollout import check_play
        from alem_eval.evaluate.settings import (
            FAST_MAX_STEPS,
            check_eval_difficulty,
            check_settings,
        )
        from alem_eval.evaluate.teams import batch_structure, team_roles

        check_episode(episode)
        check_settings("fast", None, max_steps)
        check_eval_difficulty(eval_difficulty)
        team = tuple(int(m) for m in team)
        statics, specs = check_play(
            cfgs, [team], "fast", eval_difficulty, on_env_mismatch=on_env_mismatch
        )
        self.team = team
        self.eval_difficulty = eval_difficulty
        self.episode = int(episode)
        self.max_steps = int(max_steps or FAST_MAX_STEPS)
        self.world = statics[team[0]].world
        self.num_agents = self.world.num_agents
        self.num_comm_channels = self.world.num_comm_channels
        actors = {m: released_policy(cfgs[m], specs[m], f"checkpoint {m}") for m in team}
        keys, group_actors, classes, _ = batch_structure([team], actors)
        members, _slots = team_roles(team)
        masking = any(actors[m].masked for m in team)
        self._step = _step_program(keys, classes, self.world, masking, tuple(group_actors))
        variables = tuple(actors[m].variables(weights[m]) for m in members)
        # Per class (one), per role: the member's variables with a leading team axis of one.
        self._variables = (tuple(stack_trees([v]) for v in variables),)
        self._use_mask = (tuple(np.array([cfgs[m].env.action_masking]) for m in members),)
        self._classes = classes

    def __iter__(self) -> Iterator[EpisodeStep]:
        import jax

        from alem_eval.evaluate.group import reset_worlds
        from alem_eval.evaluate.settings import fast_keys
        from alem_eval.evaluate.teams import init_team_carries

        env = self._step.env
        dyn = env.difficulty_params(self.eval_difficulty)
        worlds, chains = fast_keys(self.episode + 1)
        obs, state = reset_worlds(self.world, dyn, [worlds[self.episode]])  # [1, ...]
        carry = _Carry(
            key=chains[self.episode][None],
            state=state,
            obs=obs,
            dones=np.zeros((1, self.num_agents), bool),
            policy=init_team_carries(self._step.policies, self._classes, 1),
        )
        view = jax.tree_util.tree_map(lambda x: x[0], state)
        unlocked = np.asarray(np.asarray(view.achievements).any(axis=0))
        none = np.full(self.num_agents, -1)
        yield EpisodeStep(0, view, None, None, 0.0, none, unlocked, False, False)
        step = functools.partial(self._step.fn, self._variables, self._use_mask, dyn)
        pending = step(carry)
        for t in range(1, self.max_steps + 1):
            carry, out = pending
            if t < self.max_steps:  # queue the next step while the host draws this one
                pending = step(carry)
            actions, rewards, team_reward, done, unlocked, comm = jax.device_get(
                (out.actions, out.rewards, out.team_reward, out.done, out.achievements, out.comm)
            )
            terminated = bool(done)
            yield EpisodeStep(
                t,
                out.state,
                np.asarray(actions),
                np.asarray(rewards),
                float(team_reward),
                np.asarray(comm),
                np.asarray(unlocked),
                terminated or t >= self.max_steps,
                terminated,
            )
            if terminated:
                return


class _Carry(NamedTuple):
    """What one step hands the next (leading axis: one batch slot)."""

    key: Any  # [1, 2] the threaded step key
    state: Any  # the env state
    obs: Any  # [1, P, obs_dim] raw observations
    dones: Any  # [1, P] bool: fed back as reset flags
    policy: Any  # per class, per role: the recurrent state


class _StepOut(NamedTuple):
    state: Any  # the new env state, unbatched (what the renderer draws)
    actions: Any  # [P] int32
    rewards: Any  # [P] float32
    team_reward: Any  # [] float32: their mean, computed as the evaluator computes it
    done: Any  # [] bool
    achievements: Any  # [num_achievements] bool, any agent
    comm: Any  # [P] int32: channel signalled this step, -1: none


@dataclass(frozen=True)
class _StepProgram:
    fn: Callable
    env: Any
    policies: tuple


# The step programs of this process, the two most recently used (core.boundedcache).
_STEP_PROGRAMS: BoundedCache[_StepProgram] = BoundedCache(2)


def clear_step_programs() -> int:
    """Drop this process's compiled step programs (frees their memory); return how many."""
    held = len(_STEP_PROGRAMS)
    _STEP_PROGRAMS.clear()
    return held


def _step_program(keys, classes, world, masking: bool, policies) -> _StepProgram:
    """The jitted one-step function of a team structure (cached per process)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from alem_eval.envs.eval_env import get_eval_env

    from alem_eval.evaluate.teams import team_actions

    cache_key = (keys, classes, world, masking)
    found = _STEP_PROGRAMS.get(cache_key)
    if found is not None:
        return found
    env = get_eval_env(world)
    mask_env = get_eval_env(dataclasses.replace(world, action_masking=True)) if masking else None
    nc = world.num_comm_channels
    comm_base = world.num_actions - nc

    def step(variables, use_mask, dyn, c: _Carry) -> tuple[_Carry, _StepOut]:
        # As the evaluator's program: the policies' constants (HyperMARL's heads) are
        # computed in the same compiled call, vmapped over the class's team axis.
        params = tuple(
            tuple(
                jax.vmap(policies[role.group].prepare)(variables[ci][r])
                for r, role in enumerate(cls.roles)
            )
            for ci, cls in enumerate(classes)
        )
        split = jax.vmap(lambda k: jax.random.split(k, 3))(c.key)  # act key unused: greedy
        key, env_key = split[:, 0], split[:, 2]
        mask = None if mask_env is None else jax.vmap(mask_env.action_mask, (0, None))(c.state, dyn)
        policy_carry, actions, _ = team_actions(
            policies,
            classes,
            params,
            use_mask,
            c.policy,
            c.obs,
            c.dones,
            mask,
            episodes=1,
            num_actions=world.num_actions,
        )
        out = jax.vmap(env.step, (0, 0, 0, None))(env_key, c.state, actions, dyn)
        channel = actions[0] - comm_base
        new = _Carry(key, out.state, out.obs, out.agent_dones, policy_carry)
        state = jax.tree_util.tree_map(lambda x: x[0], out.state)
        return new, _StepOut(
            state=state,
            actions=actions[0],
            rewards=out.reward[0],
            team_reward=jnp.mean(out.reward, axis=-1)[0],
            done=out.done[0],
            achievements=jnp.any(state.achievements, axis=0),
            comm=jnp.where((channel >= 0) & (channel < nc), channel, -1),
        )

    return _STEP_PROGRAMS.get_or_make(cache_key, lambda: _StepProgram(jax.jit(step), env, policies))


__all__ = ["EpisodePlayer", "EpisodeStep", "check_episode"]
