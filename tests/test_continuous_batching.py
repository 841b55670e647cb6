"""CONTINUOUS BATCHING: batch slots fed from per-team episode queues inside the compiled loop;
a free slot takes its team's next episode right after a step."""

from __future__ import annotations

import itertools
import math

import pytest

from alem_eval.evaluate.machine import EpisodeResult, Loop, Machine, Schedule, SlotCarry
from alem_eval.evaluate.records import _row_pick
from alem_eval.evaluate.rollout import RolloutProgress, run_stack, run_teams
from alem_eval.evaluate.settings import (
    CHUNK,
    FLOOR_MAX_SLOTS,
    MIN_SLOTS_PER_TEAM,
    default_batch,
    slots_per_team,
)
from alem_eval.evaluate.teams import TeamClass
from alem_eval.core.errors import UsageError
from tests.eval_support import (
    EVALUATOR_GROUP,
    FAST_EPISODES,
    PAIR_BATCH,
    PAIR_CELLS,
    PAIR_TEAMS,
    diff_records,
    load,
)

# Tests that play share the evaluator group's programs (one worker: tests/eval_support.py);
# the others (plain functions, errors raised before anything compiles) run on any worker,
# in the fast lane.
PLAYS = pytest.mark.xdist_group(EVALUATOR_GROUP)

IPPO, PQN = PAIR_CELLS
STEPS = 1000  # the cap of the shared fast-protocol tests: these near-untrained teams die early
# The queue of most tests here. Team 0 has the lowest slots, so the batch's one refill port
# serves it first: its episodes start as in a two-slot queue of its own.
PAIR, TEAMS = PAIR_BATCH, PAIR_TEAMS


def _run(cell_ids, teams, batch, on_progress=None, episode_caps=None, on_team=None, chunk=CHUNK):
    cells = [load(c) for c in cell_ids]
    return run_teams(
        [c.cfg for c in cells],
        [c.weights for c in cells],
        teams,
        protocol="fast",
        eval_difficulty="easy",
        num_episodes=FAST_EPISODES,
        max_steps=STEPS,
        batch=batch,
        on_progress=on_progress,
        episode_caps=episode_caps,
        on_team=on_team,
        chunk=chunk,
    )


@PLAYS
def test_finished_episodes_are_reported_as_they_finish():
    """Four slots, eight episodes: the host hears of episodes while others still run, and
    the last report counts every episode and every live env step."""
    seen: list[RolloutProgress] = []
    res = _run([IPPO, PQN], TEAMS, **PAIR, on_progress=seen.append)
    done = [p.episodes_done for p in seen]
    assert done == sorted(done) and done[-1] == 2 * FAST_EPISODES
    assert any(0 < d < 2 * FAST_EPISODES for d in done), done
    assert {p.episodes_total for p in seen} == {2 * FAST_EPISODES}
    assert seen[-1].live_steps == res.live_steps
    assert all(a.elapsed_s <= b.elapsed_s for a, b in itertools.pairwise(seen))


@PLAYS
def test_a_team_is_handed_over_after_the_call_its_last_episode_ends_in_while_others_run():
    """Two teams of two slots, one step per call: each team's records reach ``on_team``
    once, right after the report of the call in which its last episode ended, equal to
    the returned ones. These near-untrained teams play episodes of the same lengths, but
    with one refill port the second team's refills start a step after the first's (lowest
    slot first), so the first team is handed over while the second still runs."""
    events: list[tuple] = []
    res = _run(
        [IPPO, PQN],
        TEAMS,
        **PAIR,
        on_progress=lambda p: events.append(("progress", p.episodes_done)),
        on_team=lambda i, recs: events.append(("team", i, recs)),
    )
    handed = [e for e in events if e[0] == "team"]
    assert [i for _, i, _ in handed] == [0, 1]
    for _, i, recs in handed:
        assert recs == res.records[i]
    ends = [
        max(int(s) + int(r["episode_length"]) for s, r in zip(res.starts[i], res.records[i]))
        for i in (0, 1)
    ]
    assert ends[0] < ends[1]
    # One report per call, one step per call: a team is handed over right after the
    # report of the call that ran its last step, and team 1 still ran when team 0 came.
    for (_, i, _), at in zip(handed, (events.index(h) for h in handed), strict=True):
        assert events[at - 1][0] == "progress"
        assert sum(e[0] == "progress" for e in events[:at]) == ends[i]
    assert FAST_EPISODES <= events[events.index(handed[0]) - 1][1] < 2 * FAST_EPISODES
    assert events[-2] == ("progress", 2 * FAST_EPISODES)


def test_slots_per_team_shares_the_batch_and_never_exceeds_the_episodes():
    assert slots_per_team(1, 20, 5) == 5
    assert slots_per_team(3, 20, 8) == 3  # ceil(8 / 3)
    assert slots_per_team(2, 4, 1000) == 4  # at most every episode at once
    assert slots_per_team(200, 20, 16) == 1  # at least one slot per team
    shared = math.ceil(default_batch() / 5)
    assert slots_per_team(5, 20, None) == min(20, max(MIN_SLOTS_PER_TEAM, shared))


def test_without_a_batch_every_team_gets_enough_slots_to_amortise_its_weights():
    """The default shares out default_batch(), but many teams each still get
    MIN_SLOTS_PER_TEAM slots (or all their episodes) up to FLOOR_MAX_SLOTS in all; an
    explicit batch is taken as is."""
    most = max(default_batch(), FLOOR_MAX_SLOTS)
    many = most // MIN_SLOTS_PER_TEAM
    assert slots_per_team(many, 20, None) == MIN_SLOTS_PER_TEAM
    assert slots_per_team(many, 3, None) == 3
    assert slots_per_team(many, 20, many) == 1
    assert slots_per_team(2 * many, 20, None) == MIN_SLOTS_PER_TEAM // 2
    assert slots_per_team(10 * most, 20, None) == 1


def test_handed_over_rows_are_padded_so_few_gather_shapes_ever_compile():
    """Teams hand over in groups of any size; the rows picked on the device are padded to
    a power of two (at most T) by repeating the last, so 40 teams compile at most 7
    gather lengths, and the asked rows come first, in order."""
    lengths = set()
    for n in range(1, 41):
        for rows in (list(range(n)), list(range(40 - n, 40))):
            pick = _row_pick(rows, 40)
            assert list(pick[:n]) == rows and set(pick[n:]) <= {rows[-1]}
            assert len(pick) < 2 * n
            lengths.add(len(pick))
    assert lengths == {1, 2, 4, 8, 16, 32, 40}


@PLAYS
def test_a_queue_longer_than_the_batch_runs_every_episode_once_with_the_same_records():
    """Two slots for four episodes, beside another team: episodes 2 and 3 start as
    refills after 0 and 1 end; their records equal those of a batch that runs all four
    at once and of one slot that runs each episode alone, one after another."""
    all_at_once = _run([IPPO], [(0, 0, 0)], batch=None)
    queued = _run([IPPO, PQN], TEAMS, **PAIR)
    alone = _run([IPPO], [(0, 0, 0)], batch=1)
    assert [len(r) for r in queued.records] == [FAST_EPISODES] * 2
    for i, (a, *others) in enumerate(
        zip(all_at_once.records[0], queued.records[0], alone.records[0], strict=True)
    ):
        for other in others:
            assert not diff_records(other, a), f"episode {i}: {diff_records(other, a)[:5]}"
    # The slots ran exactly the schedule of a two-slot queue refilled after every step:
    # each episode starts at the step after a slot's previous episode ended.
    lengths = [[int(r["episode_length"]) for r in recs] for recs in queued.records]
    assert list(queued.starts[0]) == queue_starts(lengths[0], slots=2, ports=1)
    assert queued.live_steps == sum(map(sum, lengths))
    ends = [s + n for t in (0, 1) for s, n in zip(queued.starts[t], lengths[t], strict=True)]
    assert queued.slot_steps == max(ends) * 4
    assert 0 < queued.utilisation <= 1
    # Alone: each episode starts the step after the previous one ended, no idle step.
    assert list(alone.starts[0]) == queue_starts(lengths[0], slots=1, ports=1)
    assert alone.slot_steps == alone.live_steps == sum(lengths[0])


@PLAYS
def test_episodes_end_at_their_own_caps_and_the_episodes_they_do_not_cut_keep_their_records():
    """A queue ragged by design: each episode runs min(its natural length, its cap) steps,
    the slots it frees take the next episodes, and an episode its cap does not reach is
    the same episode as in the uncapped run."""
    natural = _run([IPPO, PQN], TEAMS, **PAIR)
    lengths = [int(r["episode_length"]) for r in natural.records[0]]
    caps = [max(1, lengths[0] // 3), STEPS, 1, STEPS]
    capped = _run([IPPO, PQN], TEAMS, **PAIR, episode_caps=caps)
    got = [[int(r["episode_length"]) for r in recs] for recs in capped.records]
    assert got[0] == [min(n, c) for n, c in zip(lengths, caps, strict=True)]
    assert capped.live_steps == sum(map(sum, got))
    for e in (1, 3):
        assert not diff_records(capped.records[0][e], natural.records[0][e])
    with pytest.raises(UsageError, match="episode_caps"):
        _run([IPPO], [(0, 0, 0)], batch=2, episode_caps=[STEPS + 1] * FAST_EPISODES)


def queue_starts(lengths: list[int], *, slots: int, ports: int) -> list[int]:
    """The step each episode of a queue (in order) starts at when ``slots`` slots serve
    it: every slot starts an episode at step 0; after each step, up to ``ports`` free
    slots (lowest index first) take the next episodes."""
    free_at, starts, t = [0] * slots, [], 0  # free_at: the step a slot is free from
    while len(starts) < len(lengths):
        budget = slots if t == 0 else ports
        for s in range(slots):
            if budget and len(starts) < len(lengths) and free_at[s] <= t:
                free_at[s] = t + lengths[len(starts)]
                starts.append(t)
                budget -= 1
        t += 1
    return starts


def test_batch_must_be_a_positive_count():
    c = load(IPPO)
    with pytest.raises(UsageError, match="--batch"):
        run_stack(
            [c.cfg],
            [c.weights],
            protocol="fast",
            eval_difficulty="easy",
            num_episodes=1,
            max_steps=4,
            batch=0,
        )


def _two_team_loop(alive: list[bool], next_episode: list[int], *, steps: int = 5):
    """A Machine of 2 teams x 3 slots over a toy world (no env, no policies) and its loop:
    episode ``e``'s world is ``x = 10 e``, its key ``[e, e]``."""
    import jax.numpy as jnp

    m = Machine(
        env=None,
        mask_env=None,
        policies=(),
        classes=(TeamClass((), 2),),
        slots=3,
        chunk=1,
        capacity=4,
        record=False,
    )
    e = 4
    world = (
        jnp.arange(e, dtype=jnp.float32).reshape(e, 1, 1),  # obs [E, P, D]
        {"x": jnp.arange(e) * 10},  # states
        jnp.stack([jnp.full((2,), i, jnp.uint32) for i in range(e)]),  # keys
    )
    n, te = 6, (2, e)
    slots = SlotCarry(
        episode=jnp.where(jnp.array(alive), 0, e).astype(jnp.int32),
        t=jnp.full((n,), 7, jnp.int32),
        alive=jnp.array(alive),
        key=jnp.full((n, 2), 99, jnp.uint32),
        state={"x": jnp.full((n,), -1)},
        obs=jnp.full((n, 1, 1), -1.0),
        policy_carry=((),),
        dones=jnp.ones((n, 1), bool),
    )
    done = EpisodeResult(
        length=jnp.zeros(te, jnp.int32),
        terminated=jnp.zeros(te, bool),
        start=jnp.full(te, -1, jnp.int32),
        rewards=jnp.zeros(te + (4,), jnp.float32),
        snapshot=(),
        key=jnp.zeros(te + (2,), jnp.uint32),
    )
    zero = jnp.zeros((), jnp.int32)
    sched = Schedule(
        jnp.int32(steps),
        jnp.array(next_episode, jnp.int32),
        jnp.zeros(len(next_episode), jnp.int32),
        zero,
        jnp.zeros((len(next_episode), len(m.policies)), bool),
        jnp.zeros((len(next_episode), len(m.policies)), jnp.int32),
    )
    return m, Loop(slots, done, sched), world


@pytest.mark.parametrize("ports", [1, 3])
def test_free_slots_take_their_teams_next_episodes_lowest_index_first_up_to_the_ports(ports):
    """Team 0 (slots 0-2) has episodes 2 and 3 pending and slots 1, 2 free; team 1 (slots
    3-5) has none left, so its free slots stay idle. One port: slot 1 takes episode 2;
    three ports: slots 1 and 2 take episodes 2 and 3, each with its world, its key, a
    fresh step count and reset flags, and the step it starts at."""
    import numpy as np

    m, loop, world = _two_team_loop([True, False, False, False, False, True], [2, 4])
    out = m._refill(loop, world, ports=ports)
    took = {1: 2} if ports == 1 else {1: 2, 2: 3}
    c = out.slots
    for s in range(6):
        if s in took:
            ep = took[s]
            assert int(c.episode[s]) == ep and bool(c.alive[s]) and int(c.t[s]) == 0
            assert int(c.state["x"][s]) == 10 * ep and float(c.obs[s, 0, 0]) == ep
            assert list(np.asarray(c.key[s])) == [ep, ep] and not bool(c.dones[s, 0])
        else:  # untouched
            assert int(c.episode[s]) == int(loop.slots.episode[s])
            assert bool(c.alive[s]) == bool(loop.slots.alive[s])
            assert int(c.state["x"][s]) == -1 and int(c.t[s]) == 7
    assert list(np.asarray(out.sched.next_episode)) == [2 + len(took), 4]
    starts = np.asarray(out.done.start)
    assert [int(starts[0, ep]) for ep in took.values()] == [5] * len(took)
    assert (starts == 5).sum() == len(took)  # nothing else was written
