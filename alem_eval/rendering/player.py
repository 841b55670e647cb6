"""One ``fast``-protocol episode of a team, played by the play core, as steps to draw.

The renderer has no step of its own. It hands one team (cells, and a focal agent in some
slots) to the one orchestration (:func:`alem_eval.scoring.orchestration.play_matches`),
which plays it as every way of playing does: one call of the play core
(:func:`~alem_eval.evaluate.rollout.run_teams`, or
:func:`~alem_eval.evaluate.agent_runs.run_agent_teams` with an agent: its checks, its
probe step, a host agent's callback), the protocol's episode ``i`` as the call's only
episode (``first_episode=i``: world ``PRNGKey(9999 + i)``, its key chain), on a batch of
one slot. What render needs beyond scoring is the env state after every step, to draw:
that is a recording with ``states`` (:class:`~alem_eval.evaluate.records.RecordTo`),
where the :class:`~alem_eval.evaluate.machine.Machine` runs ONE step per compiled call
and the host takes the slot's state (and the step's log) after each, the next call
queued while it draws. :class:`EpisodeSteps` is that recorder: it turns each step into
an :class:`EpisodeStep` for the drawer.

So actions, length and return are those of ``run_teams(..., num_episodes=1)`` (and of
``score`` / ``crossplay`` / ``scenario``'s episode ``i`` of the team on a batch of one
slot) bit for bit: the same step function, only cut into calls of one step, which the
play core guarantees changes nothing (with more episodes in the batch, float rounding in
the policies' matmuls may, in rare near-ties, pick another action).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alem_eval.core.errors import UsageError
from alem_eval.scoring.orchestration import Sink

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


def reset_state(world: Any, eval_difficulty: str, episode: int) -> Any:
    """The fast protocol's reset world ``episode`` (unbatched): the data the play core
    starts that episode from (:func:`~alem_eval.evaluate.worlds.fixed_worlds`)."""
    import jax

    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.evaluate.settings import fast_keys
    from alem_eval.evaluate.worlds import fixed_worlds

    dyn = get_eval_env(world).difficulty_params(eval_difficulty)
    keys, _ = fast_keys(1, episode)
    _, state = fixed_worlds(world, dyn, [keys[0]])
    return jax.tree_util.tree_map(lambda x: x[0], state)


class EpisodeSteps(Sink):
    """The :class:`~alem_eval.scoring.orchestration.Sink` of a render: its own recorder,
    one with ``states`` (the :class:`~alem_eval.evaluate.records.RecordTo` protocol), that
    hands ``on_step`` an :class:`EpisodeStep` per step of the episode:
    ``t = 0`` (the reset world ``reset``) before the first, then one as each step's log
    and state arrive. ``episode`` holds what the episode came to (steps, terminated,
    return, actions) once it ends; ``failure``: the exception ``on_step`` raised (the
    play core keeps a recorder's fault as the recording's error)."""

    states = True

    def __init__(self, world: Any, reset: Any, on_step: Callable[[EpisodeStep], None]):
        self.num_agents = world.num_agents
        self.num_comm_channels = world.num_comm_channels
        self.comm_base = world.num_actions - world.num_comm_channels
        self.reset = reset
        self.on_step = on_step
        self.actions: list[np.ndarray] = []
        self.episode: dict[str, Any] = {}
        self.failure: BaseException | None = None

    def recorder(self, eval_difficulty: str) -> Any:
        return self

    def _unlocked(self, state: Any) -> np.ndarray:
        return np.asarray(np.asarray(state.achievements).any(axis=0))

    def _send(self, step: EpisodeStep) -> None:
        try:
            self.on_step(step)
        except BaseException as exc:
            self.failure = exc
            raise

    def add_steps(self, team: Any, episode: int, t0: int, arrays: dict[str, Any]) -> None:
        if t0 == 0:
            none = np.full(self.num_agents, -1)
            first = self._unlocked(self.reset)
            self._send(EpisodeStep(0, self.reset, None, None, 0.0, none, first, False, False))
        for r in range(len(arrays["actions"])):  # (one step per call: one row)
            actions = np.asarray(arrays["actions"][r], np.int32)
            channel = actions - self.comm_base
            comm = np.where((channel >= 0) & (channel < self.num_comm_channels), channel, -1)
            self.actions.append(actions)
            state = arrays["state"]
            self._send(
                EpisodeStep(
                    t0 + r + 1,
                    state,
                    actions,
                    np.asarray(arrays["rewards"][r]),
                    float(arrays["team_reward"][r]),
                    comm,
                    self._unlocked(state),
                    bool(arrays["last"][r]),
                    bool(arrays["terminated"][r]),
                )
            )

    def finish_episode(self, team: Any, episode: int, meta: dict[str, Any]) -> None:
        """The play core's account of the episode (the evaluator's return)."""
        self.episode = {
            "steps": int(meta["length"]),
            "terminated": bool(meta["terminated"]),
            "return": float(meta["episode_return"]),
            "actions": np.asarray(self.actions, np.int32).reshape(-1, self.num_agents),
        }


__all__ = ["EpisodeStep", "EpisodeSteps", "check_episode", "reset_state"]
