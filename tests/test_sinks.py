"""One sink interface: what a run hands out goes to its sinks (the results store, the
recording, progress) and to any sink a caller adds, which gets every finished match with
its episodes without a line of any other file (``scoring.orchestration.Sink``). The play
core is the fake of tests/test_scoring.py: nothing compiles."""

from __future__ import annotations

import pytest

from alem_eval.scoring.orchestration import Sink
from alem_eval.scoring.score import ScoreOptions, score_cells
from tests.test_scoring import _source, fake_evaluator  # noqa: F401 (the fixture)

pytestmark = pytest.mark.usefixtures("fake_evaluator")

CELLS = ["tiny/ippo-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0"]
OPTIONS = ScoreOptions(num_episodes=2, max_steps=4, max_stack=2)


class Collect(Sink):
    """A caller's sink: what it is handed, in order (the rest: Sink's no-ops)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def begin(self, lineup) -> None:
        to_play = [m.name for m in lineup.to_play]
        self.calls.append(("begin", [m.name for m in lineup.matches], to_play))

    def match_done(self, match, episodes) -> None:
        self.calls.append(("done", match.name, episodes))

    def end(self) -> None:
        self.calls.append(("end",))


def _two_cells(cell_copy):
    cell_copy(CELLS[1])
    src, _ = _source(cell_copy)
    return src, src.select(CELLS)


def test_a_callers_sink_gets_every_scored_cell_with_its_episodes_and_a_rerun_none(
    cell_copy, tmp_path
):
    from alem_eval.analysis.results import ResultsStore

    src, cells = _two_cells(cell_copy)
    store = ResultsStore(tmp_path / "res")
    sink = Collect()
    scores = score_cells(src, cells, options=OPTIONS, store=store, sinks=[sink])
    assert sink.calls[0] == ("begin", CELLS, CELLS)
    assert sink.calls[1:3] == [("done", s.cell.id, s.episodes) for s in scores]
    assert sink.calls[3:] == [("end",)] and len(scores[0].episodes) == 2
    assert len(store.entries()) == 2  # the store's own sink wrote beside it

    again = Collect()
    score_cells(src, cells, options=OPTIONS, store=store, sinks=[again])
    assert again.calls == [("begin", CELLS, []), ("end",)]  # read back: nothing played


def test_a_team_builders_sink_gets_every_team_it_played(cell_copy, tmp_path):
    """A builder of self-play teams over ``play_teams`` (the fake plays self-play only)
    hands its own sink to the one orchestration."""
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.scoring.play import play_teams, resolve_worlds
    from alem_eval.scoring.teams import Team

    src, cells = _two_cells(cell_copy)
    worlds = resolve_worlds(src, cells, None, 2, 4, "error")
    teams = [Team((c.id,) * worlds.num_slots) for c in cells]
    store = ResultsStore(tmp_path / "res")
    sink = Collect()
    play = play_teams(src, cells, teams, worlds, store=store, sinks=[sink])
    done = {c[1]: c[2] for c in sink.calls if c[0] == "done"}
    assert done == {t.slots[0]: play.scores[t].episodes for t in teams}
    assert sink.calls[0][0] == "begin" and sink.calls[-1] == ("end",)
    assert len(store.entries(teams=True)) == 2


def test_a_sinks_recorder_gets_every_step_beside_the_recording(cell_copy, tmp_path):
    """Two sinks record: the recording (``record_dir``) and a caller's, each every call."""
    from alem_eval.datasets.reader import open_recording

    class Steps(Sink):
        def __init__(self) -> None:
            self.finished: list[tuple] = []
            self.steps = 0

        def recorder(self, eval_difficulty):
            return self

        def add_steps(self, team, episode, t0, arrays) -> None:
            self.steps += len(arrays["actions"])

        def finish_episode(self, team, episode, meta) -> None:
            self.finished.append((team[0], episode, meta["length"]))

    src, cells = _two_cells(cell_copy)
    sink = Steps()
    score_cells(src, cells, options=OPTIONS, record_dir=tmp_path / "rec", sinks=[sink])
    assert sorted(sink.finished) == [(c, e, 4) for c in CELLS for e in range(2)]
    assert sink.steps == 4 * 2 * len(CELLS)
    recording = open_recording(tmp_path / "rec")
    assert recording.incomplete == () and len(recording.complete) == 4
