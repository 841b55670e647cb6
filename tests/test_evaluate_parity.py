"""PARITY: protocol 'reference' reproduces upstream's per-episode eval numbers exactly.

Every fixture cell's ``upstream_eval.json`` holds the numbers upstream's trainer logged
(``eval_ep/<difficulty>/...``: 418 compute_score keys, ``episode_return``,
``episode_length`` = true length - 1, ``done``, ``seed``). The comparison is ``==`` on
every key. One cell per algorithm runs by default; the full-size IPPO cell is slow.

The five tiny cells are scored in ONE reference stack (:func:`_parity_stack`): every test
here runs that stack, so the whole module compiles one rollout program for them (with the
full-size cell, two), where one checkpoint per call compiled one per algorithm. That each
cell, played beside the four others, still gives upstream's numbers of the cell played
alone is itself the check that stacking changes no member's numbers; the stack test adds
that a member's numbers follow neither its position nor its companions.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from alem_eval.evaluate.programs import _PROGRAMS
from alem_eval.evaluate.records import upstream_view
from alem_eval.evaluate.rollout import score_stack
from alem_eval.evaluate.settings import reference_key
from tests.eval_support import (
    PARITY_STACK,
    REFERENCE_GROUP,
    diff_records,
    load,
    programs_made,
    with_eval,
)

pytestmark = pytest.mark.xdist_group(REFERENCE_GROUP)

CELLS = [*PARITY_STACK, pytest.param("full/ippo-rnn/hard/seed1", marks=pytest.mark.slow)]


def _parity_stack(difficulty: str, cap: int, members=None, **kw):
    """``score_stack`` of the five tiny cells in :data:`PARITY_STACK`'s order, all on
    ``difficulty`` with step cap ``cap`` (one group, so one program whatever the cell under
    test). ``members[k]`` = (cfg, weights) replaces cell ``k``; the other cells play their
    own weights with their config moved to ``difficulty`` and ``cap``. Returns the
    records of every member."""
    members = dict(members or {})
    cfgs, weights = [], []
    for k, cell_id in enumerate(PARITY_STACK):
        cell = load(cell_id)
        cfg, w = members.get(
            k, (with_eval(cell.cfg, eval_difficulties=(difficulty,), max_steps=cap), cell.weights)
        )
        cfgs.append(cfg)
        weights.append(w)
    return score_stack(cfgs, weights, protocol="reference", eval_difficulty=difficulty, **kw)


def _assert_matches_upstream(records, expected_rows, where):
    assert len(records) == len(expected_rows), where
    for i, (rec, exp) in enumerate(zip(records, expected_rows)):
        got = upstream_view(rec, i)
        diffs = diff_records(got, exp)
        assert not diffs, f"{where} episode {i}: {len(diffs)} keys differ: {diffs[:6]}"


@pytest.mark.parametrize("cell_id", CELLS)
def test_reference_reproduces_upstream_exactly(cell_id):
    cell = load(cell_id)
    if cell_id in PARITY_STACK:  # unchanged, beside the four other tiny cells
        k = PARITY_STACK.index(cell_id)
        stacked = _parity_stack(
            cell.difficulty, cell.cfg.eval.max_steps, {k: (cell.cfg, cell.weights)}
        )
        assert len(stacked) == len(PARITY_STACK)
        records = [stacked[k]]
    else:
        records = score_stack(
            [cell.cfg], [cell.weights], protocol="reference", eval_difficulty=cell.difficulty
        )
    assert len(records) == 1
    _assert_matches_upstream(records[0], cell.upstream_episodes(), cell_id)
    # The CONTRACTS.md view: true length, terminated flag, every score key.
    for rec, exp in zip(records[0], cell.upstream_episodes()):
        assert rec["episode_length"] == exp["episode_length"] + 1
        assert rec["terminated"] == exp["done"]
        assert len(rec) == 418 + 3


def test_reference_key_depends_on_position_in_eval_difficulties():
    """The evaluated difficulty uses the key of its own position in EVAL_DIFFICULTIES."""
    cell = load("tiny/ippo-rnn/hard/seed2")
    first = with_eval(cell.cfg, eval_difficulties=("hard", "easy"))
    second = with_eval(cell.cfg, eval_difficulties=("easy", "hard"))
    k_first = np.asarray(reference_key(first, "hard"))
    k_second = np.asarray(reference_key(second, "hard"))
    # Independent derivation of the chain (SEED=2, VISUALIZE=False).
    root, eval_key = jax.random.split(jax.random.PRNGKey(2))
    chain, d0 = jax.random.split(eval_key)
    _, d1 = jax.random.split(chain)
    assert np.array_equal(k_first, np.asarray(d0))
    assert np.array_equal(k_second, np.asarray(d1))
    assert np.array_equal(np.asarray(reference_key(cell.cfg, "hard")), k_first)
    assert not np.array_equal(k_first, k_second)

    # Position first: upstream's numbers; position second: a different chain, other numbers
    # (the cell in the parity stack, as in test_reference_reproduces_upstream_exactly).
    k = PARITY_STACK.index("tiny/ippo-rnn/hard/seed2")
    cap = cell.cfg.eval.max_steps
    recs = [_parity_stack("hard", cap, {k: (c, cell.weights)})[k] for c in (first, second)]
    _assert_matches_upstream(recs[0], cell.upstream_episodes(), "hard first")
    assert recs[1] != recs[0]
    # Worlds depend only on EVAL_SEED + i: the start of every episode is the same world.
    lengths = [r["episode_length"] for r in recs[1]]
    assert all(1 <= n <= cell.cfg.eval.max_steps for n in lengths)


def test_visualize_consumes_one_split():
    cell = load("tiny/ippo-rnn/easy/seed0")
    off = reference_key(cell.cfg, "easy")
    on = reference_key(with_eval(cell.cfg, visualize=True), "easy")
    root, _ = jax.random.split(jax.random.PRNGKey(0))
    _, eval_key = jax.random.split(root)
    _, d0 = jax.random.split(eval_key)
    assert np.array_equal(np.asarray(on), np.asarray(d0))
    assert not np.array_equal(np.asarray(on), np.asarray(off))


def _stack_members():
    """The parity stack's five members, all on 'hard': tiny IPPO (hard) at both IPPO
    positions, the second with another key chain (seed 7: same weights, other numbers),
    and the other algorithms' cells (other networks)."""
    hard = load("tiny/ippo-rnn/hard/seed2")
    members = {
        k: (with_eval(load(c).cfg, eval_difficulties=("hard",)), load(c).weights)
        for k, c in enumerate(PARITY_STACK)
    }
    members[0], members[1] = (hard.cfg, hard.weights), (with_eval(hard.cfg, seed=7), hard.weights)
    return members


def test_reference_stack_traces_once_and_a_members_numbers_follow_only_itself():
    members = _stack_members()
    kw = dict(num_episodes=3, max_steps=100)  # short; the parity stack's program all the same
    before, keys = programs_made(), set(_PROGRAMS)
    stacked = _parity_stack("hard", 100, members, **kw)
    # one program for the whole stack (none when a parity test of this module made it)
    assert programs_made() - before <= 1
    [key] = [
        k for k in _PROGRAMS if k.protocol == "reference" and sum(c.size for c in k.classes) == 5
    ]
    assert set(_PROGRAMS) - keys <= {key}
    again = _parity_stack("hard", 100, members, **kw)
    assert programs_made() - before <= 1 and set(_PROGRAMS) - keys <= {key}  # none for a repeat
    assert again == stacked
    # Other positions (the two IPPO members swapped) and other companions (the other
    # algorithms' cells on other key chains): each IPPO member's numbers are unchanged.
    moved = {0: members[1], 1: members[0]}
    moved |= {k: (with_eval(cfg, seed=11), w) for k, (cfg, w) in members.items() if k > 1}
    other = _parity_stack("hard", 100, moved, **kw)
    for k, j in ((0, 1), (1, 0)):
        for i, (a, b) in enumerate(zip(stacked[k], other[j])):
            assert not diff_records(a, b), f"checkpoint {k} episode {i}: {diff_records(a, b)[:5]}"
    # The members really differ (key chain, network), so the test is not vacuous; so do
    # the companions between the two stacks.
    assert stacked[0] != stacked[1] and stacked[0] != stacked[2]
    assert any(stacked[k] != other[k] for k in range(2, len(PARITY_STACK)))
    assert programs_made() - before <= 1
