"""The continuous-batching rollout of one batch structure, pure and traced once.

:class:`Machine` is a batch of ``slots`` per team, fed from per-team queues of episodes
inside ``lax.while_loop`` calls of at most ``CHUNK`` steps. Each step splits every slot's
key into 3 (key, act key, env key) exactly like upstream's ``_run_eval_sequential``,
applies the mask, the greedy policies (:func:`~alem_eval.evaluate.teams.team_actions`) and
one vmapped ``env.step_env``. After every step a slot whose episode ended writes its
result to the output buffer and starts the team's next pending episode (continuous
batching: no slot waits for the batch's longest episode, nor for a chunk boundary, and no
host round trip); the loop ends when every queue is empty. Here too the state it carries
(:class:`SlotCarry`, :class:`EpisodeResult`, :class:`Schedule` in a :class:`Loop`), what
the host reads after each call (:class:`Status`) and a recording's per-step log
(:class:`StepLog`).
"""

from __future__ import annotations

import collections
import functools
from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.evaluate.settings import SLOTS_PER_PORT
from alem_eval.evaluate.teams import TeamClass, init_team_carries, team_actions
from alem_eval.evaluate.actors import Actor

# Diagnostics: traces of the rollout (``Machine.advance``: "rollout") and, per program kind,
# traces and loads of exported programs (``programs._Compiled``: "<kind>:traced"/":loaded").
TRACE_COUNTS: collections.Counter[str] = collections.Counter()


# ----------------------------------------------------------------------------------------
# One episode
# ----------------------------------------------------------------------------------------
class SlotCarry(NamedTuple):
    """The loop state of ``N = teams x slots`` batch slots (leading axis ``N``)."""

    episode: jax.Array  # [N] int32: the episode index the slot runs (E: idle)
    t: jax.Array  # [N] int32: steps taken in that episode
    alive: jax.Array  # [N] bool: the episode still runs
    key: jax.Array  # [N, 2] the threaded step keys (frozen once an episode is over)
    state: Any  # EnvState (keeps stepping, unused, while the slot idles)
    obs: jax.Array  # [N, P, obs_dim] raw observations
    policy_carry: Any  # per team class, per role: the role's recurrent state
    dones: jax.Array  # [N, P] bool: fed back as reset flags


class EpisodeResult(NamedTuple):
    """Per-episode results, leading axes ``[teams, episodes]``: the output buffer each
    episode is written to at the step it ends (its rewards at every step)."""

    length: jax.Array  # int32, true length
    terminated: jax.Array  # bool
    start: jax.Array  # int32: the loop step at which the episode's first step ran
    rewards: jax.Array  # [capacity] float32 (entries >= length are 0)
    snapshot: tuple  # the terminal state's leaves that compute_score reads
    key: jax.Array  # [2] the step key after the episode's last step


class Schedule(NamedTuple):
    """How busy the batch slots were: ``live_steps / (steps x N)`` is the utilisation."""

    steps: jax.Array  # [] int32: loop steps run (each one steps every slot)
    next_episode: jax.Array  # [teams] int32: episodes started per team (== E at the end)
    finished: jax.Array  # [teams] int32: episodes written to the output buffer, per team
    live_steps: jax.Array  # [] int32: env steps that belonged to an episode
    # Focal JAX agents' illegal actions (evaluate.agents), per team and network group: the
    # first one seen, an output of the rollout (no host callback in the program).
    illegal: jax.Array  # [teams, groups] bool: the group chose an illegal action there
    illegal_action: jax.Array  # [teams, groups] int32: the first such action


def _select(pred: jax.Array, new: Any, old: Any) -> Any:
    """Per-slot select of two trees with leading axis N (``pred`` is ``[N]`` bool)."""
    return jax.tree_util.tree_map(
        lambda a, b: jnp.where(pred.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), new, old
    )


class Loop(NamedTuple):
    """Everything the rollout carries from one call to the next (it never leaves the
    device): the batch slots, the output buffer and the schedule."""

    slots: SlotCarry
    done: EpisodeResult
    sched: Schedule


class Status(NamedTuple):
    """What the host reads after each call (a few scalars): enough for a progress bar."""

    running: jax.Array  # [] int32: slots with an episode in progress
    finished: jax.Array  # [] int32: episodes handed to the output buffer so far
    live_steps: jax.Array  # [] int32: env steps that belonged to an episode so far
    slot_steps: jax.Array  # [] int32: steps run so far x slots (live or idle)
    team_finished: jax.Array  # [teams] int32: ``finished`` per team (its queue is done at E)
    illegal: Any = None  # [teams, groups] bool: Schedule.illegal (focal agents)
    illegal_action: Any = None  # [teams, groups] int32: Schedule.illegal_action


class StepLog(NamedTuple):
    """Every step of one call, for recording (leading axes ``[steps, N]``). Step ``t`` of an
    episode: the observation and legal actions the agents saw, the actions they took, and
    the rewards, dones and team achievements that came back."""

    live: jax.Array  # bool: the slot's step belonged to an episode
    episode: jax.Array  # int32: that episode (queue index of the slot's team)
    t: jax.Array  # int32: its step index
    key: jax.Array  # [2] uint32: the slot's step key before the step
    observations: jax.Array  # [P, obs_dim] float32, raw
    legal_actions: jax.Array  # [P, A] bool
    actions: jax.Array  # [P] int32
    rewards: jax.Array  # [P] float32
    dones: jax.Array  # [P] bool
    team_achievements: jax.Array  # int32: distinct achievements the team holds after it
    team_reward: jax.Array  # float32: mean over agents (what the episode return sums)
    last: jax.Array  # bool: the episode's last step (the env ended it, or the cap)
    terminated: jax.Array  # bool: the env reported ``__all__`` done


@dataclass(frozen=True)
class Machine:
    """The continuous-batching rollout of one batch structure, as two pure functions:
    :meth:`start` (slots take each team's first episodes) and :meth:`advance` (run up to
    ``chunk`` steps). The host calls ``advance`` until :class:`Status` says no slot runs:
    a call after that changes nothing, so results never depend on how the loop was cut
    into calls.

    ``world_obs [E, P, obs_dim]`` / ``world_states [E, ...]`` are the reset worlds of the
    episodes (episode ``e`` of every team starts from world ``e``). The batch is
    ``N = sum(class sizes) x slots`` slots, laid out class by class, team by team. Each
    team has a queue (its episodes, in order) served by its own slots, so a team's
    weights drive the same block of the batch for the whole run (one stacked matmul per
    team and step, never a per-slot gather of weights). After every step, a slot whose
    episode ended writes it to the output buffer, and up to ``ports`` free slots (lowest
    index first) take their team's next pending episodes, on the device: the new episode
    runs from the very next step, so a slot idles only once its team's queue is empty.
    Step keys: ``fast`` -- episode ``e`` threads its own chain from ``episode_keys[e]``,
    so its records do not depend on which slot ran it or when; ``reference``
    (``slots == 1``) -- each team's key chain starts at ``start_keys[team]`` and is
    carried from one episode to the next, as upstream's sequential evaluation does.

    Every step, each class's roles run their policies (vmapped over the class's teams,
    then its slots) on the raw observations of all ``P`` agents -- the batch shape
    upstream's policies see -- each role's actions are kept for the agent slots it drives,
    and ONE vmapped ``env.step`` advances all ``N`` slots. ``params`` and ``use_mask`` are
    nested per class, per role, with a leading axis of the class size.

    Guarantees: exactly ``min(T, max_steps[e])`` env steps count for episode ``e``, where T
    is the step at which the env reports ``__all__`` done. What an episode's result
    depends on (key, step count, rewards, the ~1 kB of state leaves ``compute_score``
    reads) is written when it ends; the rest of an idle slot's env state keeps stepping,
    unused (freezing all ~390 kB of it every step would cost 10-25% of the step).
    ``max_steps [E]`` are the episodes' step limits, each in ``[1, capacity]`` (one cap
    for all, or per episode: a batch ragged by design).
    """

    env: Any
    mask_env: Any  # None: no member masks and nothing is recorded
    policies: tuple[Actor, ...]  # one per network group (evaluate.actors)
    classes: tuple[TeamClass, ...]
    slots: int
    chunk: int  # steps per call (at most)
    capacity: int
    record: bool
    cond_refill: bool = True  # skip the writes and refill on steps with nothing to do

    @property
    def num_teams(self) -> int:
        return sum(c.size for c in self.classes)

    @property
    def num_slots(self) -> int:
        return self.num_teams * self.slots

    @property
    def team_of(self) -> np.ndarray:
        """``[N]`` (static): the team each batch slot belongs to."""
        return np.repeat(np.arange(self.num_teams), self.slots)

    @property
    def ports(self) -> int:
        """Slots that can take a new episode after one step (each port gathers one reset
        world into the batch): one per :data:`SLOTS_PER_PORT` slots."""
        return -(-self.num_slots // SLOTS_PER_PORT)

    @staticmethod
    def _cap(episode: jax.Array, max_steps: jax.Array) -> jax.Array:
        """The step limit of each slot's episode (idle slots: the last episode's)."""
        return max_steps[jnp.clip(episode, 0, max_steps.shape[0] - 1)]

    def _snapshot(self, state, score_idx) -> tuple:
        leaves = jax.tree_util.tree_leaves(state)
        return tuple(leaves[i] for i in score_idx)

    def _score_idx(self, world_states) -> tuple[int, ...]:
        return self.env.score_leaf_indices(jax.tree_util.tree_map(lambda x: x[0], world_states))

    def start(self, world_obs, world_states, episode_keys, start_keys, max_steps) -> Loop:
        """Idle slots, empty buffers, then every slot takes its team's first episode."""
        n = self.num_slots
        num_episodes, num_agents = world_obs.shape[:2]
        score_idx = self._score_idx(world_states)
        first = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x[0], (n,) + x.shape[1:]), world_states
        )
        idle = SlotCarry(
            episode=jnp.full((n,), num_episodes, jnp.int32),
            t=jnp.zeros((n,), jnp.int32),
            alive=jnp.zeros((n,), bool),
            key=(
                jnp.zeros((n, 2), jnp.uint32)
                if start_keys is None
                else jnp.repeat(start_keys, self.slots, axis=0)
            ),
            state=first,
            obs=jnp.broadcast_to(world_obs[0], (n,) + world_obs.shape[1:]),
            policy_carry=init_team_carries(self.policies, self.classes, self.slots),
            dones=jnp.zeros((n, num_agents), bool),
        )
        te = (self.num_teams, num_episodes)
        done = EpisodeResult(
            length=jnp.zeros(te, jnp.int32),
            terminated=jnp.zeros(te, bool),
            start=jnp.zeros(te, jnp.int32),
            rewards=jnp.zeros(te + (self.capacity,), jnp.float32),
            snapshot=tuple(
                jnp.zeros(te + x.shape[1:], x.dtype)
                for x in self._snapshot(world_states, score_idx)
            ),
            key=jnp.zeros(te + (2,), jnp.uint32),
        )
        zero = jnp.zeros((), jnp.int32)
        teams = jnp.zeros((self.num_teams,), jnp.int32)
        none = jnp.zeros((self.num_teams, len(self.policies)), jnp.int32)
        sched = Schedule(zero, teams, teams, zero, none.astype(bool), none)
        world = (world_obs, world_states, episode_keys)
        return self._refill(Loop(idle, done, sched), world, ports=n)

    def advance(
        self, loop: Loop, params, use_mask, dyn, world_obs, world_states, episode_keys, max_steps
    ) -> tuple[Loop, Status, StepLog | None]:
        """Up to ``chunk`` steps (none once every queue is empty and no slot runs)."""
        TRACE_COUNTS["rollout"] += 1
        score_idx = self._score_idx(world_states)
        step = functools.partial(
            self._step,
            policy=(params, use_mask, dyn),
            world=(world_obs, world_states, episode_keys),
            max_steps=max_steps,
            score_idx=score_idx,
        )
        if self.record:  # a log row per step: a fixed number of steps per call

            def body(lp: Loop, _):
                return step(lp, log=True)

            def steps(lp: Loop):
                return jax.lax.scan(body, lp, None, length=self.chunk)

            # The call the host queues after the end costs nothing (no step runs).
            busy = jnp.any(loop.slots.alive)
            loop, log = jax.lax.cond(busy, steps, lambda lp: (lp, self._idle_log(lp)), loop)
        else:  # a while_loop: it stops at the step after which no slot runs

            def more(state):
                lp, i = state
                return jnp.any(lp.slots.alive) & (i < self.chunk)

            def one(state):
                lp, i = state
                return step(lp, log=False)[0], i + 1

            loop, _ = jax.lax.while_loop(more, one, (loop, jnp.int32(0)))
            log = None
        s = loop.sched
        status = Status(
            jnp.sum(loop.slots.alive, dtype=jnp.int32),
            jnp.sum(s.finished),
            s.live_steps,
            s.steps * self.num_slots,
            s.finished,
            s.illegal,
            s.illegal_action,
        )
        return loop, status, log

    def _idle_log(self, lp: Loop) -> StepLog:
        """The log of a call in which nothing runs (every row dead)."""
        c = lp.slots
        n, p = c.dones.shape

        def zeros(shape, dtype):
            return jnp.zeros((self.chunk, n) + shape, dtype)

        return StepLog(
            live=zeros((), bool),
            episode=zeros((), jnp.int32),
            t=zeros((), jnp.int32),
            key=zeros((2,), c.key.dtype),
            observations=zeros(c.obs.shape[1:], c.obs.dtype),
            legal_actions=zeros((p, self.env.statics.num_actions), bool),
            actions=zeros((p,), jnp.int32),
            rewards=zeros((p,), jnp.float32),
            dones=zeros((p,), bool),
            team_achievements=zeros((), jnp.int32),
            team_reward=zeros((), jnp.float32),
            last=zeros((), bool),
            terminated=zeros((), bool),
        )

    # -- one step -------------------------------------------------------------------------
    def _step(self, lp: Loop, *, policy, world, max_steps, score_idx, log: bool):
        """One step of every slot, the output buffer's writes, then the refill ->
        (loop, this step's log row or None)."""
        params, use_mask, dyn = policy
        env = self.env
        c, done, sched = lp
        n = self.num_slots
        split = jax.vmap(lambda k: jax.random.split(k, 3))(c.key)  # act key unused: greedy
        key, env_key = split[:, 0], split[:, 2]
        mask = (
            None
            if self.mask_env is None
            else jax.vmap(self.mask_env.action_mask, (0, None))(c.state, dyn)
        )
        pcarry, actions, illegal = team_actions(
            self.policies,
            self.classes,
            params,
            use_mask,
            c.policy_carry,
            c.obs,
            c.dones,
            mask,
            episodes=self.slots,
            num_actions=env.statics.num_actions,
            step_keys=c.key,  # focal agents derive their keys from it (evaluate.agents)
            states=c.state,
        )
        out = jax.vmap(env.step, (0, 0, 0, None))(env_key, c.state, actions, dyn)
        live = c.alive
        t = c.t + live.astype(jnp.int32)
        ended = live & (out.done | (t >= self._cap(c.episode, max_steps)))
        key = _select(live, key, c.key)
        team_of = self.team_of
        team_reward = jnp.mean(out.reward, axis=-1)
        # The output buffer: every live step's reward (then, below, each episode that ended).
        at_team = jnp.where(live, team_of, self.num_teams)  # out of bounds -> dropped
        rewards = done.rewards.at[at_team, c.episode, c.t].set(team_reward, mode="drop")
        sched = sched._replace(  # (a recording's last call pads with steps nothing runs in)
            steps=sched.steps + jnp.any(live).astype(jnp.int32),
            finished=sched.finished
            + jnp.sum(ended.reshape(self.num_teams, self.slots), axis=1, dtype=jnp.int32),
            live_steps=sched.live_steps + jnp.sum(live, dtype=jnp.int32),
        )
        if illegal is not None:  # (focal JAX agents: keep each team and group's first)
            bad, action = illegal
            sched = sched._replace(
                illegal=sched.illegal | bad,
                illegal_action=jnp.where(sched.illegal, sched.illegal_action, action),
            )
        new = c._replace(
            t=t,
            alive=live & ~ended,
            key=key,
            state=out.state,
            obs=out.obs,
            policy_carry=pcarry,
            dones=out.agent_dones,
        )
        snapshot = self._snapshot(out.state, score_idx)
        end_team = jnp.where(ended, team_of, self.num_teams)

        def finish_and_refill(lp: Loop) -> Loop:
            def put(buf, value):
                return buf.at[end_team, c.episode].set(value, mode="drop")

            d = lp.done
            d = d._replace(
                length=put(d.length, t),
                terminated=put(d.terminated, out.done),
                snapshot=tuple(put(b, v) for b, v in zip(d.snapshot, snapshot, strict=True)),
                key=put(d.key, key),
            )
            return self._refill(lp._replace(done=d), world, ports=min(self.ports, n))

        loop = Loop(new, done._replace(rewards=rewards), sched)
        # Most steps no episode ends and no slot waits: skip the writes and the refill's
        # gathers (a few hundred small ops, one per env-state leaf) on those steps.
        pending = (world[0].shape[0] - sched.next_episode > 0)[team_of]
        busy = jnp.any(ended) | jnp.any(~new.alive & pending)
        if self.cond_refill:
            loop = jax.lax.cond(busy, finish_and_refill, lambda lp: lp, loop)
        else:
            loop = finish_and_refill(loop)
        if not log:
            return loop, None
        row = StepLog(
            live=live,
            episode=c.episode,
            t=c.t,
            key=c.key,
            observations=c.obs,
            legal_actions=mask if mask is not None else jnp.ones(actions.shape + (1,), bool),
            actions=actions,
            rewards=out.reward,
            dones=out.agent_dones,
            team_achievements=jax.vmap(env.team_achievements)(out.state),
            team_reward=team_reward,
            last=ended,
            terminated=out.done,
        )
        return loop, row

    # -- refill ---------------------------------------------------------------------------
    def _reset_carries(self, carries, take: jax.Array):
        """Zero the recurrent state of the roles of every slot that starts an episode."""
        out, start = [], 0
        for cls, role_carries in zip(self.classes, carries, strict=True):
            size = cls.size * self.slots
            fresh = take[start : start + size].reshape(cls.size, self.slots)
            out.append(
                tuple(
                    jax.tree_util.tree_map(
                        lambda x, f=fresh: jnp.where(
                            f.reshape(f.shape + (1,) * (x.ndim - 2)), 0, x
                        ),
                        rc,
                    )
                    for rc in role_carries
                )
            )
            start += size
        return tuple(out)

    def _refill(self, lp: Loop, world, *, ports: int) -> Loop:
        """Up to ``ports`` free slots (lowest index first) take their team's next pending
        episodes: its reset world, its key (``fast``), zero recurrent state."""
        world_obs, world_states, episode_keys = world
        c, done, sched = lp
        n_teams, slots, n = self.num_teams, self.slots, self.num_slots
        num_episodes = world_obs.shape[0]
        free = (~c.alive).reshape(n_teams, slots)
        rank = jnp.cumsum(free, axis=1) - 1  # among the team's free slots
        pending = num_episodes - sched.next_episode
        wants = (free & (rank < pending[:, None])).reshape(n)
        if ports >= n:
            sel = jnp.where(wants, jnp.arange(n), n)
        else:
            sel = jnp.nonzero(wants, size=ports, fill_value=n)[0]
        # Per selected slot (out of bounds n: nothing to take): team, episode.
        team = jnp.asarray(np.append(self.team_of, n_teams))[sel]
        episode = jnp.where(
            sel < n,
            sched.next_episode[jnp.clip(team, 0, n_teams - 1)]
            + rank.reshape(n)[jnp.clip(sel, 0, n - 1)],
            num_episodes,
        )
        idx = jnp.clip(episode, 0, num_episodes - 1)

        def put(x, value):
            return x.at[sel].set(value, mode="drop")

        fresh = put(jnp.zeros((n,), bool), True)
        c = SlotCarry(
            episode=put(c.episode, episode),
            t=put(c.t, 0),
            alive=put(c.alive, True),
            key=c.key if episode_keys is None else put(c.key, episode_keys[idx]),
            state=jax.tree_util.tree_map(lambda x, w: put(x, w[idx]), c.state, world_states),
            obs=put(c.obs, world_obs[idx]),
            policy_carry=self._reset_carries(c.policy_carry, fresh),
            dones=put(c.dones, False),
        )
        done = done._replace(start=done.start.at[team, episode].set(sched.steps, mode="drop"))
        sched = sched._replace(
            next_episode=sched.next_episode.at[team].add(1, mode="drop"),
        )
        return Loop(c, done, sched)
