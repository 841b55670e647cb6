"""``score --record`` over stacks padded to one structure: the padding copies of a cell run
in the compiled batch but are invisible to everything that reads the stack (the
recording, the scores, the progress), so each episode is recorded once, under its cell.

Cells are copies of the tiny fixture cells (one network shape per algorithm); episodes
are longer than one recording call, so a padding copy running beside its cell would
hand the recorder the same episode twice, interleaved.
"""

from __future__ import annotations

import shutil

import pytest

from alem_eval.evaluate.rollout import RolloutProgress
from alem_eval.evaluate.settings import RECORD_CHUNK
from alem_eval.datasets.reader import open_recording
from alem_eval.analysis.results import ResultsStore
from alem_eval.scoring.score import ScoreOptions, score_cells
from alem_eval.hub.sources import open_source

# Programs of their own (stack structures no other test scores): one group, one worker.
pytestmark = pytest.mark.xdist_group("recording-stacks")

IPPO, PQN = "tiny/ippo-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0"
OPTIONS = ScoreOptions(num_episodes=2, max_steps=40)


@pytest.fixture(scope="module")
def source(tmp_path_factory, fixtures_root):
    """Seven IPPO cells (copies of one) and one PQN cell."""
    root = tmp_path_factory.mktemp("runs")
    for s in range(7):
        shutil.copytree(fixtures_root / IPPO, root / f"tiny/ippo-rnn/easy/seed{s}")
    shutil.copytree(fixtures_root / PQN, root / PQN)
    return open_source(root)


def score(source, cells, tmp_path, seen=None):
    return score_cells(
        source,
        cells,
        options=OPTIONS,
        store=ResultsStore(tmp_path / "results"),
        on_episodes=None if seen is None else seen.append,
        record_dir=tmp_path / "rec",
    )


def assert_each_episode_recorded_once(record_dir, scores) -> None:
    """The recording holds exactly the scored episodes, each as long as scored."""
    rec = open_recording(record_dir)
    assert rec.incomplete == ()
    assert all(set(ep.team) == {ep.team[0]} for ep in rec.complete)  # self-play teams
    got = {(ep.team[0], ep.episode): ep for ep in rec.complete}
    want = {(s.cell.id, e): scored for s in scores for e, scored in enumerate(s.episodes)}
    assert len(got) == len(rec.complete) and sorted(got) == sorted(want)
    for key, ep in got.items():
        assert ep.length == want[key]["episode_length"]
        assert ep.meta["episode_return"] == want[key]["episode_return"]
    # Longer than one recording call: a copy beside its cell would interleave.
    assert max(ep.length for ep in rec.complete) > RECORD_CHUNK


def test_seven_cells_of_one_algorithm_record_each_episode_once_and_a_rerun_reuses_them(
    source, tmp_path
):
    """Stacks of 5: the second holds 2 cells and 3 padding copies of the last."""
    cells = source.select(["tiny/ippo-rnn/*"])
    assert len(cells) == 7
    seen: list[RolloutProgress] = []
    scores = score(source, cells, tmp_path, seen)
    assert [s.cell.id for s in scores] == [c.id for c in cells]
    assert_each_episode_recorded_once(tmp_path / "rec", scores)
    # The progress counts the cells' episodes, not the padding's.
    total = len(cells) * OPTIONS.num_episodes
    assert (seen[-1].episodes_done, seen[-1].episodes_total) == (total, total)

    seen.clear()
    again = score(source, cells, tmp_path, seen)  # every cell stored and recorded: reused
    assert all(s.reused for s in again) and seen == []
    assert [s.episodes for s in again] == [s.episodes for s in scores]


def test_three_cells_and_one_of_another_algorithm_record_each_episode_once(source, tmp_path):
    """Two per shape and stack: IPPO, IPPO, PQN + a PQN copy; then IPPO + an IPPO copy and
    two PQN copies (a stack whose only PQN slots are padding)."""
    cells = source.select([f"tiny/ippo-rnn/easy/seed{s}" for s in range(3)] + [PQN])
    assert len(cells) == 4
    scores = score(source, cells, tmp_path)
    assert_each_episode_recorded_once(tmp_path / "rec", scores)
