"""MIXED TEAMS: any checkpoint in any agent slot, every algorithm in one compiled rollout."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from alem_eval.evaluate.programs import _PROGRAMS
from alem_eval.evaluate.actors import RoleStep, released_policy
from alem_eval.evaluate.rollout import policy_variables, run_stack, run_teams
from alem_eval.evaluate.teams import (
    Role,
    TeamClass,
    batch_structure,
    init_team_carries,
    team_actions,
    team_roles,
)
from alem_eval.algorithms.registry import all_algorithms
from alem_eval.core.errors import EvaluationError
from alem_eval.model.networks import build_network
from alem_eval.model.policies import make_policy
from tests.eval_support import (
    EVALUATOR_GROUP,
    MIXED_CELLS,
    MIXED_RUN,
    MIXED_TEAMS,
    PAIR_BATCH,
    PAIR_CELLS,
    PAIR_TEAMS,
    diff_records,
    load,
    programs_made,
    with_eval,
)

# Tests that play share the evaluator group's programs (one worker: tests/eval_support.py);
# the others (plain functions, errors raised before anything compiles) run on any worker,
# in the fast lane.
PLAYS = pytest.mark.xdist_group(EVALUATOR_GROUP)

IPPO, MAPPO, HYPER, PQN, IPPO_2 = MIXED_CELLS


def _members(*cell_ids):
    cells = [load(c) for c in cell_ids]
    return [c.cfg for c in cells], [c.weights for c in cells]


def test_team_roles_lists_members_in_order_with_their_slots():
    assert team_roles((4, 4, 7)) == ((4, 7), ((0, 1), (2,)))
    assert team_roles((2, 5, 2)) == ((2, 5), ((0, 2), (1,)))
    assert team_roles((1, 1, 1)) == ((1,), ((0, 1, 2),))


@PLAYS
def test_every_algorithm_is_scored_by_one_program_and_identical_teams_equal_self_play():
    cfgs, weights = _members(*MIXED_CELLS)
    teams = MIXED_TEAMS
    made, programs = programs_made(), len(_PROGRAMS)
    mixed = run_teams(cfgs, weights, teams, **MIXED_RUN)
    # One program, one trace of the rollout (hence of the Alem step), for the four
    # algorithms' seven teams. (test_recording, in the same worker, may have made it
    # already: its unrecorded run is this batch.)
    assert programs_made() - made <= 1 and len(_PROGRAMS) - programs <= 1
    actors = {m: released_policy(c, build_network(c), "test") for m, c in enumerate(cfgs)}
    networks, _, classes, _ = batch_structure(teams, actors)
    released = {a.name for a in all_algorithms() if a.release is not None}  # fixture cells
    assert {c.algorithm for c in cfgs} == released and len(networks) >= len(released)
    assert sum(c.size for c in classes) == len(teams)
    same = [k for k in _PROGRAMS if (k.network_keys, k.classes) == (networks, classes)]
    assert len([k for k in same if not k.record]) == 1
    assert all(len(r) == MIXED_RUN["num_episodes"] for r in mixed.records)
    # A team whose three slots are one checkpoint gives exactly that cell's self-play
    # records, whatever else is in the batch: IPPO's alone (every episode at once), PQN's
    # beside IPPO's self-play (the continuous-batching tests' pair, which they check
    # against IPPO alone).
    assert (IPPO, PQN) == PAIR_CELLS
    ippo = load(IPPO)
    pair = run_teams(*_members(*PAIR_CELLS), PAIR_TEAMS, **{**MIXED_RUN, **PAIR_BATCH})
    selfplay = {
        (0, 0, 0): run_stack([ippo.cfg], [ippo.weights], **MIXED_RUN).records[0],
        (3, 3, 3): pair.records[PAIR_TEAMS.index((1, 1, 1))],
    }
    for team, alone in selfplay.items():
        got = mixed.records[teams.index(team)]
        for i, (a, b) in enumerate(zip(got, alone, strict=True)):
            assert not diff_records(a, b), f"{team} episode {i}: {diff_records(a, b)[:5]}"
    # The partners matter: a mixed team plays differently from either member's self-play.
    assert mixed.records[teams.index((0, 1, 2))] != mixed.records[teams.index((0, 0, 0))]


@PLAYS
def test_each_slot_acts_as_its_own_policy_would_alone():
    """The combined step of a mixed batch gives every slot the action (and carry) its own
    checkpoint's policy computes alone on that slot's observation and carry."""
    cfgs, weights = _members(IPPO, MAPPO, HYPER, PQN)
    specs = [build_network(c) for c in cfgs]
    policies = [make_policy(s) for s in specs]
    actors = [released_policy(c, s, "test") for c, s in zip(cfgs, specs, strict=True)]
    classes = (
        TeamClass((Role(0, (0,)), Role(1, (1,)), Role(2, (2,))), 1),
        TeamClass((Role(3, (0, 1)), Role(0, (2,))), 1),
    )
    member_of = [(0, 1, 2), (3, 0)]
    variables = [policy_variables(s, w, "test") for s, w in zip(specs, weights, strict=True)]
    params = tuple(
        tuple(
            jax.tree_util.tree_map(lambda x: x[None], policies[m].prepare(variables[m])) for m in ms
        )
        for ms in member_of
    )
    use_mask = tuple(tuple(np.array([True]) for _ in ms) for ms in member_of)
    rng = np.random.default_rng(0)
    p, d, a = 3, specs[0].obs_dim, specs[0].num_actions
    raw = jnp.asarray(rng.random((2, p, d), np.float32))  # N = 2 teams x 1 episode
    dones = jnp.zeros((2, p), bool)
    mask = jnp.asarray(rng.random((2, p, a)) < 0.7).at[:, :, 0].set(True)
    carries = init_team_carries(actors, classes, 1)
    # Perturb the carries so that a slot's own recurrent state matters.
    carries = jax.tree_util.tree_map(
        lambda x: x + 0.1 * jnp.arange(x.size).reshape(x.shape) / x.size, carries
    )
    new, actions, illegal = team_actions(
        actors, classes, params, use_mask, carries, raw, dones, mask, episodes=1, num_actions=a
    )
    assert illegal is None  # (no focal agent)
    for c, cls in enumerate(classes):
        for r, role in enumerate(cls.roles):
            m = member_of[c][r]
            prepared = policies[m].prepare(variables[m])
            own_carry = jax.tree_util.tree_map(lambda x: x[0, 0], carries[c][r])
            alone_carry, alone = policies[m].act(
                prepared, own_carry, policies[m].policy_input(raw[c]), dones[c], mask[c]
            )
            for s in role.slots:
                assert int(actions[c, s]) == int(alone[s]), (c, r, s)
            for got, exp in zip(
                jax.tree_util.tree_leaves(new[c][r]),
                jax.tree_util.tree_leaves(alone_carry),
                strict=True,
            ):
                np.testing.assert_array_equal(np.asarray(got)[0, 0], np.asarray(exp))


class _Fixed:
    """A toy actor (evaluate.actors.Actor) of neither of the library's classes: action
    ``a`` on every slot it drives, its carry a step count. With ``wait`` its roles come
    back pending, and each step it is asked once, for all of them (``asked``)."""

    label, algorithm, host, masked = "toy", "toy", False, True

    def __init__(self, a, wait=False, key="toy"):
        self.a, self.wait, self.key = a, wait, key
        self.asked: list[int] = []

    def variables(self, weights):
        return np.zeros((1,), np.float32)

    def prepare(self, variables):
        return variables

    def init(self, num_slots):
        return jnp.zeros((), jnp.int32)

    def act(self, params, carry, inp):
        actions = jnp.full(inp.obs.shape[:3], self.a, jnp.int32)
        if self.wait:  # (as a host agent's rows wait for the step's callback)
            return RoleStep(carry + 1, jnp.zeros_like(actions), None, pending=actions)
        return RoleStep(carry + 1, actions)

    def resolve(self, pending):
        self.asked.append(len(pending))
        return list(pending)

    def checked(self, obs_dim, num_actions, batches):
        return self

    def probe(self, first, batch):
        return None

    def ready(self):
        return None


def test_any_actor_drives_its_slots_through_the_one_interface():
    """The step asks nothing of an actor but the interface: a toy actor beside a
    checkpoint's greedy policy in one team gets its own slots, the policy keeps its actions
    (computed on all P slots, as alone) on the others."""
    from alem_eval.evaluate.actors import Actor

    cfgs, weights = _members(IPPO)
    spec = build_network(cfgs[0])
    actors = [released_policy(cfgs[0], spec, "ippo"), _Fixed(7)]
    assert all(isinstance(a, Actor) for a in actors)
    classes = (TeamClass((Role(0, (0, 2)), Role(1, (1,))), 1),)
    variables = [a.variables(w) for a, w in zip(actors, [weights[0], None], strict=True)]
    params = (
        (
            tuple(
                jax.tree_util.tree_map(lambda x: x[None], a.prepare(v))
                for a, v in zip(actors, variables, strict=True)
            )
        ),
    )
    use_mask = ((np.array([True]), np.array([True])),)
    rng = np.random.default_rng(1)
    p, d, a = 3, spec.obs_dim, spec.num_actions
    raw = jnp.asarray(rng.random((1, p, d), np.float32))
    dones, mask = jnp.zeros((1, p), bool), jnp.ones((1, p, a), bool)
    carries = init_team_carries(actors, classes, 1)
    new, actions, illegal = team_actions(
        actors, classes, params, use_mask, carries, raw, dones, mask, episodes=1, num_actions=a
    )
    policy = make_policy(spec)
    prepared = policy.prepare(variables[0])
    _, alone = policy.act(
        prepared, policy.init_carry(), policy.policy_input(raw[0]), dones[0], mask[0]
    )
    assert illegal is None and int(actions[0, 1]) == 7
    assert [int(actions[0, s]) for s in (0, 2)] == [int(alone[0]), int(alone[2])]
    assert int(new[0][1][0, 0]) == 1  # the toy's carry, stepped once


def test_the_step_asks_an_actor_once_for_every_role_it_left_pending():
    """Two classes, the waiting toy in slot 0 of one and slots 1 and 2 of the other: the
    step hands both roles back to it in ONE ``resolve`` (a host agent: one callback) and
    keeps what it answers for its slots."""
    from alem_eval.evaluate.actors import Actor

    waits, plays = _Fixed(3, wait=True, key="waits"), _Fixed(1, key="plays")
    actors = [waits, plays]
    assert all(isinstance(a, Actor) for a in actors)
    classes = (
        TeamClass((Role(0, (0,)), Role(1, (1, 2))), 1),
        TeamClass((Role(1, (0,)), Role(0, (1, 2))), 1),
    )
    params = tuple(tuple(np.zeros((1, 1), np.float32) for _ in c.roles) for c in classes)
    use_mask = tuple(tuple(np.ones(1, bool) for _ in c.roles) for c in classes)
    n, p = 2, 3  # two teams x one episode, three slots
    _, actions, illegal = team_actions(
        actors,
        classes,
        params,
        use_mask,
        init_team_carries(actors, classes, 1),
        jnp.zeros((n, p, 5)),
        jnp.zeros((n, p), bool),
        None,
        episodes=1,
        num_actions=4,
    )
    assert np.asarray(actions).tolist() == [[3, 1, 1], [1, 3, 3]]
    assert waits.asked == [2] and plays.asked == [] and illegal is None


def test_team_of_cells_needing_different_envs_is_a_clear_error():
    cfgs, weights = _members(IPPO, PQN)
    other = with_eval(cfgs[1])
    import dataclasses

    other = dataclasses.replace(other, env=dataclasses.replace(other.env, num_comm_channels=0))
    with pytest.raises(EvaluationError, match=r"different env configurations.*num_comm_channels"):
        run_teams(
            [cfgs[0], other],
            weights,
            [(0, 0, 1)],
            protocol="fast",
            eval_difficulty="easy",
            num_episodes=1,
            max_steps=4,
        )


@pytest.mark.parametrize(
    "teams, message",
    [
        ([(0, 0, 5)], "not in the stack"),
        ([(0, 0)], "2 slots but the env has 3 agents"),
    ],
)
def test_team_naming_a_missing_slot_or_cell_is_a_clear_error(teams, message):
    cfgs, weights = _members(IPPO, PQN)
    with pytest.raises(EvaluationError, match=message):
        run_teams(
            cfgs,
            weights,
            teams,
            protocol="fast",
            eval_difficulty="easy",
            num_episodes=1,
            max_steps=4,
        )


def test_reference_protocol_refuses_mixed_teams():
    cfgs, weights = _members(IPPO, IPPO_2)
    with pytest.raises(EvaluationError, match="self-play"):
        run_teams(
            cfgs,
            weights,
            [(0, 1, 1)],
            protocol="reference",
            eval_difficulty="hard",
            num_episodes=1,
            max_steps=4,
        )
