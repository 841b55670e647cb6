"""A new way of playing is one file: a team builder over the one orchestration.

The way of playing below, "each cell with a scripted partner in one slot", is defined in
this file only: it draws its teams and hands them to
:func:`alem_eval.scoring.play.play_teams`, and gets back what every way of playing gets
(results-store rows, the public API's results, a recording as ``--record`` makes one, a
rerun read back) without a line of any other file (CONTRACTS.md, "Where a change goes").
"""

from __future__ import annotations

import pytest

from tests.eval_support import FAST_EPISODES

CELL = "demo/ippo-rnn/easy/seed0"
MAX_STEPS = 40  # short: this checks the plumbing, not the play

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("way-of-playing")]


# ----------------------------------------------------------------------------------------
# The way of playing: the whole of it
# ----------------------------------------------------------------------------------------
def partner_teams(cells, partner: str, num_slots: int):
    """Each cell in every slot but the first, the scripted partner there."""
    from alem_eval.scoring.teams import Team

    return [Team((partner,) + (c.id,) * (num_slots - 1)) for c in cells]


def play_with_a_partner(source, cells, *, store=None, record_dir=None):
    """Every cell with the scripted partner (a JAX agent) in slot 0, on the cells' own
    difficulty: the team builder and one call of the orchestration."""
    from alem_eval.evaluate.agent_spec import load_focal
    from alem_eval.evaluate.reference_agents import Scripted
    from alem_eval.scoring.play import play_teams, resolve_worlds

    partner = load_focal(Scripted())
    label = f"partner:{partner.identity}"
    worlds = resolve_worlds(source, cells, None, FAST_EPISODES, MAX_STEPS, "error")
    teams = partner_teams(cells, label, worlds.num_slots)
    play = play_teams(
        source, cells, teams, worlds, agents={label: partner}, store=store, record_dir=record_dir
    )
    return label, play


# ----------------------------------------------------------------------------------------
# What it gets
# ----------------------------------------------------------------------------------------
def test_a_team_builder_in_one_file_gets_store_rows_api_results_and_recordings(tmp_path):
    import alem_eval
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.datasets.reader import open_recording
    from alem_eval.hub.sources import open_source

    source = open_source("demo")
    cells = source.select([CELL])
    store = ResultsStore(tmp_path / "results")
    label, play = play_with_a_partner(source, cells, store=store, record_dir=tmp_path / "rec")

    [(team, score)] = play.scores.items()
    assert team.slots == (label, CELL, CELL) and not score.reused
    assert len(score.episodes) == FAST_EPISODES
    assert all(1 <= ep["episode_length"] <= MAX_STEPS for ep in score.episodes)
    # Store rows: the team under its anchor cell, never passed for the cell's own scores.
    [entry] = store.entries(teams=True)
    assert entry.key.cell == CELL and tuple(entry.key.team) == team.slots
    assert store.entries() == []
    # The public API reads them back, one row per episode.
    frame = alem_eval.results(store=tmp_path / "results", teams=True)
    assert len(frame) == FAST_EPISODES
    assert sorted(frame["episode_length"]) == sorted(ep["episode_length"] for ep in score.episodes)
    # A recording, as --record makes one: every episode, as long as scored, under the team.
    rec = open_recording(tmp_path / "rec")
    assert rec.incomplete == ()
    assert sorted(ep.episode for ep in rec.complete) == list(range(FAST_EPISODES))
    for ep in rec.complete:
        assert tuple(ep.team) == team.slots
        assert ep.length == score.episodes[ep.episode]["episode_length"]
    # A rerun reads the team back: stored and completely recorded.
    _, again = play_with_a_partner(source, cells, store=store, record_dir=tmp_path / "rec")
    [rerun] = again.scores.values()
    assert rerun.reused and rerun.episodes == score.episodes and again.live_steps == 0
