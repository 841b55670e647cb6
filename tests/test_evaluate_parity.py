"""PARITY: protocol 'reference' reproduces upstream's per-episode eval numbers exactly.

Every fixture cell's ``upstream_eval.json`` holds the numbers upstream's trainer logged
(``eval_ep/<difficulty>/...``: 418 compute_score keys, ``episode_return``,
``episode_length`` = true length - 1, ``done``, ``seed``). The comparison is ``==`` on
every key. One cell per algorithm runs by default; the full-size IPPO cell is slow.
Stacking checkpoints in one reference program changes no member's numbers.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from alem_eval.evaluate.records import upstream_view
from alem_eval.evaluate.rollout import score_stack
from alem_eval.evaluate.settings import reference_key
from tests.eval_support import REFERENCE_GROUP, diff_records, load, programs_made, with_eval

pytestmark = pytest.mark.xdist_group(REFERENCE_GROUP)

DEFAULT_CELLS = [
    "tiny/ippo-rnn/easy/seed0",
    "tiny/ippo-rnn/hard/seed2",  # 1000-step cap, non-zero achievements
    "tiny/mappo-rnn/medium/seed0",
    "tiny/hypermarl-rnn/hard/seed0",
    "tiny/pqn-vdn-rnn/easy/seed0",
]
CELLS = DEFAULT_CELLS + [pytest.param("full/ippo-rnn/hard/seed1", marks=pytest.mark.slow)]


def _assert_matches_upstream(records, expected_rows, where):
    assert len(records) == len(expected_rows), where
    for i, (rec, exp) in enumerate(zip(records, expected_rows)):
        got = upstream_view(rec, i)
        diffs = diff_records(got, exp)
        assert not diffs, f"{where} episode {i}: {len(diffs)} keys differ: {diffs[:6]}"


@pytest.mark.parametrize("cell_id", CELLS)
def test_reference_reproduces_upstream_exactly(cell_id):
    cell = load(cell_id)
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

    # Position first: upstream's numbers; position second: a different chain, other numbers.
    recs = [
        score_stack([c], [cell.weights], protocol="reference", eval_difficulty="hard")[0]
        for c in (first, second)
    ]
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
    """Three tiny-IPPO checkpoints with different weights and/or key chains, all scored
    on 'hard' with the same episode count and cap."""
    hard, easy = load("tiny/ippo-rnn/hard/seed2"), load("tiny/ippo-rnn/easy/seed0")
    return [
        (hard.cfg, hard.weights),
        (with_eval(easy.cfg, eval_difficulties=("hard",)), easy.weights),
        (with_eval(hard.cfg, seed=7), hard.weights),
    ]


def test_reference_stack_equals_each_alone_and_traces_once():
    members = _stack_members()
    cfgs = [c for c, _ in members]
    weights = [w for _, w in members]
    # Alone, each member is the tiny-IPPO parity program (3 episodes, one capacity bucket).
    kw = dict(protocol="reference", eval_difficulty="hard", num_episodes=3, max_steps=100)
    before = programs_made()
    stacked = score_stack(cfgs, weights, **kw)
    assert programs_made() - before == 1  # one trace/compile for the whole stack
    again = score_stack(cfgs, weights, **kw)
    assert programs_made() - before == 1  # and none for a repeat
    assert again == stacked
    for k, (cfg, w) in enumerate(members):
        alone = score_stack([cfg], [w], **kw)[0]
        for i, (a, b) in enumerate(zip(stacked[k], alone)):
            assert not diff_records(a, b), f"checkpoint {k} episode {i}: {diff_records(a, b)[:5]}"
    # The members really differ (weights or key chain), so the test is not vacuous.
    assert stacked[0] != stacked[1] and stacked[0] != stacked[2]
