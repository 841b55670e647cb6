"""One group of teams (one world and settings) in one compiled program.

:func:`run_group` sizes the batch, picks the group's compiled
:class:`~alem_eval.evaluate.programs.Program`, stacks each role's weights over its teams,
resets the worlds and drives the :class:`~alem_eval.evaluate.machine.Machine` call after
call (:func:`_drive`: the next call is queued before the host reads the last one's
status) until every queue is empty. A team's records are made as soon as its last episode
ends, from the same output buffer and score program as at the end.
"""

from __future__ import annotations

import math
import time
from typing import Any
from collections.abc import Callable, Collection, Mapping, Sequence

import jax
import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.evaluate.actors import illegal_message
from alem_eval.evaluate.machine import EpisodeResult, Loop, Status
from alem_eval.evaluate.programs import Program, ProgramKey, compile_options_for, program
from alem_eval.evaluate.records import RecordSink, RecordTo, team_records
from alem_eval.evaluate.settings import (
    CAPACITY_BUCKET,
    RECORD_CHUNK,
    RECORD_LOG_BYTES,
    default_batch,
    fast_keys,
    reference_key,
    slots_per_team,
)
from alem_eval.evaluate.teams import TeamClass, batch_structure, team_roles
from alem_eval.evaluate.worlds import fixed_worlds

# Wall-clock split of the last evaluated group (s): resets, rollout, scores, records.
LAST_TIMINGS: dict[str, float] = {}


def _capacity(max_steps: int) -> int:
    return int(math.ceil(max_steps / CAPACITY_BUCKET) * CAPACITY_BUCKET)


def stack_trees(trees: Sequence[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *xs: np.stack(xs), *trees)


def _devices_for(n: int) -> int:
    """How many local devices to split an axis of length n over (all of them, if n > 1)."""
    return max(1, min(jax.local_device_count(), n))


def reset_worlds(world, dyn, keys: Sequence[Any]) -> tuple[jax.Array, Any]:
    """The reset worlds of ``keys``, stacked on axis 0: reset once, then kept as data
    (:func:`~alem_eval.evaluate.worlds.fixed_worlds`)."""
    return fixed_worlds(world, dyn, keys)


# Array plumbing between the compiled programs, jitted as a whole (run eagerly, every leaf
# of the Alem state, ~130, would compile its own tiny program on first use).
@jax.jit
def _first(tree: Any) -> Any:
    """Row 0 of every leaf."""
    return jax.tree_util.tree_map(lambda x: x[0], tree)


def run_group(
    teams,
    cfgs,
    actors: Mapping[int, Any],
    statics,
    variables,
    protocol,
    eval_difficulty,
    num_episodes,
    caps: np.ndarray,
    chunk,
    batch,
    on_status: Callable[[Status], None],
    record: RecordTo | None = None,
    on_team: Callable[[int, list[dict[str, float]]], None] | None = None,
    padding: Collection[int] = (),
    first_episode: int = 0,
):
    """Evaluate one group of teams (one world and settings) in one program -> (records,
    starts, slot-steps, live env-steps, recording error), per team in the group's order.
    A team's records are made as soon as its last episode ends (``on_team(i, records)``,
    ``i`` its index in ``teams``), from the same output buffer and score program as at the
    end. The teams in ``padding`` (indices into ``teams``) run unreported (:func:`run_teams`).
    ``actors[m]``: what drives member ``m`` (:class:`~alem_eval.evaluate.actors.Actor`).
    ``first_episode`` (``fast``): the group's episode ``e`` is the protocol's episode
    ``first_episode + e``. A recording with ``states`` (:class:`RecordTo`) plays its one
    team on one slot, one step per call."""
    keys, group_actors, classes, order = batch_structure(teams, actors)
    batch_teams = [teams[i] for i in order]  # class by class
    t = len(batch_teams)
    wanted = [j for j in range(t) if order[j] not in padding]  # batch rows to report
    world = statics[batch_teams[0][0]].world
    masking = any(actors[m].masked for team in batch_teams for m in team)
    capacity = _capacity(int(caps.max()))
    states = record is not None and record.states
    if states:  # every step's state: one team on one slot, one step per call
        if len(teams) != 1:
            raise UsageError(f"a recording of env states plays one team, not {len(teams)}")
        chunk, batch = 1, 1
    if record is not None:
        chunk = min(chunk, RECORD_CHUNK)  # a short log per call: the last call pads it
        if batch is None:  # bound what one call hands the host
            world_dims = statics[batch_teams[0][0]]
            per_slot = (
                chunk * world_dims.num_agents * (world_dims.obs_dim + world_dims.num_actions) * 4
            )
            batch = min(default_batch(), max(1, RECORD_LOG_BYTES // per_slot))
    # A host actor's callback gets all of its rows in one call per step: one device.
    host = any(actors[m].host for team in batch_teams for m in team)
    if protocol == "fast":
        n_dev = 1 if host else _devices_for(num_episodes)
        padded = num_episodes + (-num_episodes) % n_dev
        slots = slots_per_team(t, padded // n_dev, None if batch is None else -(-batch // n_dev))
    else:  # one slot per team; teams of one class split over the devices
        n_dev = _devices_for(t) if len(classes) == 1 and not host else 1
        pad = (-t) % n_dev
        batch_teams += [batch_teams[-1]] * pad
        classes = (TeamClass(classes[0].roles, t + pad),) if pad else classes
        slots = 1
    steps = np.pad(caps, (0, padded - num_episodes), mode="edge") if protocol == "fast" else caps
    prog = program(
        ProgramKey(
            protocol,
            keys,
            classes,
            world,
            masking,
            slots,
            chunk,
            capacity,
            n_dev,
            record=record is not None,
            # a short run (every team's episodes, each to its cap) compiles quicker XLA
            compile_options=compile_options_for(len(batch_teams) * int(np.sum(steps))),
        ),
        group_actors,
    )
    # Per class, per role: the members' variables and masking flags, stacked over teams.
    role_vars, role_mask, start = [], [], 0
    for cls in classes:
        members = [team_roles(team)[0] for team in batch_teams[start : start + cls.size]]
        role_vars.append(
            tuple(stack_trees([variables[m[r]] for m in members]) for r in range(len(cls.roles)))
        )
        role_mask.append(
            tuple(np.array([actors[m[r]].masked for m in members]) for r in range(len(cls.roles)))
        )
        start += cls.size
    dyn = prog.env.difficulty_params(eval_difficulty)
    clock = time.perf_counter()
    worlds: list[Any]
    if protocol == "reference":
        chain = np.stack(
            [np.asarray(reference_key(cfgs[team[0]], eval_difficulty)) for team in batch_teams]
        )
        seeds = cfgs[batch_teams[0][0]].eval.eval_seed + np.arange(num_episodes)
        worlds = [jax.random.PRNGKey(int(s)) for s in seeds]
    else:
        world_keys, chain_keys = fast_keys(padded, first_episode)
        worlds, chain = list(world_keys), np.asarray(chain_keys)
    obs0, state0 = jax.block_until_ready(reset_worlds(world, dyn, worlds))
    t_reset = time.perf_counter()
    shared = (tuple(role_vars), tuple(role_mask), dyn)
    keys_arg = () if protocol == "reference" else (chain,)  # fast threads per-episode keys
    loop = prog.start(chain, obs0, state0, steps)
    sink = (
        None
        if record is None
        else RecordSink(
            record,
            prog,
            [team if j in wanted else None for j, team in enumerate(batch_teams[:t])],
            np.stack(worlds),
            num_episodes,
        )
    )
    template = _first(state0)
    queue = len(steps)  # a team's queue (fast: with the episodes padding it to the devices)
    made: dict[int, list[dict[str, float]]] = {}  # batch row -> its episodes' records
    scoring = {"s": 0.0}

    def make_records(rows: list[int], done: EpisodeResult) -> None:
        t0 = time.perf_counter()
        res = jax.tree_util.tree_map(lambda x: x[:t, :num_episodes], prog.merge(done))
        for j, recs in zip(rows, team_records(protocol, world, res, template, rows), strict=True):
            made[j] = recs
            if on_team is not None:
                on_team(order[j], recs)
        scoring["s"] += time.perf_counter() - t0

    def status(st: Status, done: EpisodeResult) -> None:
        _raise_illegal(st, batch_teams[:t], keys, actors)
        finished = np.minimum(st.team_finished[wanted], num_episodes)  # padding's uncounted
        on_status(st._replace(finished=finished.sum()))
        rows = [j for j in wanted if j not in made and st.team_finished[j] >= queue]
        if rows:
            make_records(rows, done)

    done, slot_steps = _drive(
        prog, loop, (*shared, *keys_arg, obs0, state0, steps), status, sink, states=states
    )
    t_roll, in_roll = time.perf_counter(), scoring["s"]
    rest = [j for j in wanted if j not in made]
    if rest:  # (every team's last status came with its records: none, unless cut short)
        make_records(rest, done)
    starts = np.asarray(prog.merge(done.start))[:t, :num_episodes]
    lengths = np.asarray(prog.merge(done.length))[:t, :num_episodes]
    LAST_TIMINGS.clear()
    LAST_TIMINGS.update(
        resets_s=t_reset - clock,
        rollout_s=t_roll - t_reset - in_roll,
        records_s=scoring["s"],  # scores and records, also those made during the rollout
    )
    out_records: list[Any] = [None] * t
    out_starts: list[Any] = [None] * t
    for j, i in enumerate(order):
        out_records[i], out_starts[i] = made.get(j, []), starts[j] if j in made else starts[j, :0]
    live_steps = int(lengths.sum())  # every team's, the padding's too: the work the batch ran
    error = None if sink is None else sink.error
    return out_records, out_starts, slot_steps, live_steps, error


def _raise_illegal(st: Status, batch_teams, keys: Sequence[str], actors: Mapping[int, Any]):
    """The first illegal action the call's :class:`Status` reports (per batch row and
    network group: a focal JAX agent's) -> one :class:`EvaluationError` naming the actor
    that chose it, before any record of this call reaches the caller."""
    if st.illegal is None or not np.any(st.illegal):
        return
    for j, team in enumerate(batch_teams):
        for g in np.flatnonzero(st.illegal[j]):
            label = next(actors[m].label for m in team if actors[m].key == keys[int(g)])
            raise EvaluationError(illegal_message(label, int(st.illegal_action[j, g])))


def _drive(
    prog: Program,
    loop: Loop,
    call_args: tuple,
    on_status: Callable[[Status, EpisodeResult], None],
    on_log: Callable[..., None] | None = None,
    *,
    states: bool = False,
):
    """Call ``prog.advance`` until no slot runs -> (output buffer, slot-steps run).

    The next call is queued before the host reads the last call's :class:`Status` and
    :class:`StepLog` (the loop state never leaves the device, its buffers are donated call
    to call), so the device computes while the host reports and records; the one call
    queued after the end changes nothing. ``on_status`` also gets the queued call's output
    buffer (device arrays: every episode the status counts as finished is final in it).
    When ``on_status`` raises (an agent's fault), the queued call ends before the error
    leaves: nothing of it runs on after its caller has moved on. ``on_log(log, state)``:
    ``state`` is the env state of slot 0 after the call with ``states`` (taken before the
    next call donates the loop's buffers), else None.
    """
    pending = prog.advance(loop, *call_args)
    while True:
        loop, status, log = pending
        state = _first(loop.slots.state) if states else None  # before it is donated
        pending = prog.advance(loop, *call_args)
        st = prog.host_status(jax.device_get(status))
        try:
            if on_log is not None and log is not None:
                on_log(jax.device_get(log), state)
            on_status(st, pending[0].done)
        except BaseException:  # (e.g. an agent's fault): the queued call ends first
            jax.block_until_ready(pending)
            raise
        if st.running == 0:
            return pending[0].done, int(st.slot_steps)
