"""A scenario's split table: focal - self per partner split (trained with / held out) and
the generalisation gap test - train, from made-up team scores (nothing plays)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from alem_eval.analysis.metrics import BASE, COORD, TOTAL
from alem_eval.scoring.scenario import ScenarioResult

from .synthetic import synthetic_scenario

A = "1B/ippo-rnn/hard/seed"
B = "1B/mappo-rnn/hard/seed"
CELLS = (A + "0", A + "1", A + "3", A + "4", B + "0", B + "4")
SPLITS = {A + "0": "train", A + "1": "train", A + "3": "val", A + "4": "test"}
SPLITS |= {B + "0": "train", B + "4": "test"}


def _by_label(result: ScenarioResult, mode: str = "visitor", metric: str = TOTAL) -> dict:
    return {r.label: r for r in result.split_rows if r.mode == mode and r.metric == metric}


def _focal_minus_self(result: ScenarioResult, mode: str, metric: str, cells) -> list[float]:
    """Each of the focal's teams with ``cells``: its mean over the worlds of focal - self."""
    selfs = {t.background: t.team for t in result.teams if t.kind == "self"}
    out = []
    for t in result.teams:
        if t.kind == "focal" and t.mode == mode and t.background in cells:
            d = result.scores[t.team].values(metric) - result.scores[selfs[t.background]].values(
                metric
            )
            out.append(float(d.mean()))
    return out


def test_the_release_splits_name_the_background_cells_split_and_leave_unassigned_ones_out():
    from alem_eval.hub.manifest import Cell
    from alem_eval.scoring.scenario_splits import background_splits

    cells = [Cell.from_id(c) for c in CELLS] + [Cell("mine", "ippo-rnn", "hard", 0)]
    assert background_splits(cells) == SPLITS  # seeds 0-2 train, 3 val, 4 test


@pytest.mark.parametrize("mode", ["visitor", "resident"])
def test_each_split_row_averages_exactly_the_focals_teams_with_that_splits_cells(mode):
    s = synthetic_scenario(5, cells=CELLS, cell_splits=SPLITS)
    for metric in (TOTAL, BASE, COORD):
        rows = _by_label(s, mode, metric)
        assert list(rows) == ["train", "val", "test", "gap (test - train)"]
        for split in ("train", "val", "test"):
            mine = tuple(c for c in CELLS if SPLITS[c] == split)
            want = _focal_minus_self(s, mode, metric, mine)
            assert rows[split].cells == mine and rows[split].split == split
            assert rows[split].n_teams == len(want) == 3 * len(mine)  # every slot position
            assert rows[split].diff.point == pytest.approx(np.mean(want), abs=1e-12)
            assert rows[split].diff.lo < rows[split].diff.point < rows[split].diff.hi
        gap = rows["gap (test - train)"]
        assert gap.split is None and gap.cells == (A + "4", B + "4")
        assert gap.versus == (A + "0", A + "1", B + "0")


def _shifted_scores(teams, num_worlds=6):
    """Self-play 0.5 on every world; the focal's teams score w_i on world i (made up),
    plus 0.1 with the test cells: focal - self is 0.1 higher on test, world by world."""
    from alem_eval.scoring.play import TeamScore

    world = np.random.default_rng(3).uniform(0.2, 0.8, num_worlds)
    out = {}
    for t in teams:
        if t.kind == "focal":
            values = world + (0.1 if SPLITS[t.background] == "test" else 0.0)
        else:
            values = np.full(num_worlds, 0.5)
        eps = tuple({BASE: v, COORD: v, TOTAL: v} for v in map(float, values))
        out.setdefault(
            t.team, TeamScore(t.team, hashlib.sha1(repr(t.team).encode()).hexdigest(), eps, False)
        )
    return out


def test_the_gap_row_is_test_minus_train_with_a_paired_interval_over_the_worlds():
    s = synthetic_scenario(6, cells=CELLS, cell_splits=SPLITS, scores=_shifted_scores)
    for mode in s.modes:
        rows = _by_label(s, mode)
        train, test, gap = rows["train"], rows["test"], rows["gap (test - train)"]
        assert gap.diff.point == test.diff.point - train.diff.point  # the same numbers
        assert gap.diff.point == pytest.approx(0.1)
        # Train alone varies with the worlds drawn; the gap does not, as both sides are
        # resampled on the same worlds (independent resamples would widen it).
        assert train.diff.hi - train.diff.lo > 0.05
        assert gap.diff.lo == pytest.approx(0.1, abs=1e-12)
        assert gap.diff.hi == pytest.approx(0.1, abs=1e-12)
    # Percentage points in the paper table, fractions in JSON.
    md = s.split_table(decimals=1).to_markdown()
    assert "| visitor | Total% | gap (test - train) | 2 vs 3 | 10.0†" in md
    assert "paired bootstrap" in md


def test_a_background_within_one_split_has_no_split_table_and_prints_nothing_more(capsys):
    from alem_eval.api.scenario import Scenario
    from alem_eval.cli.commands.scenario import _print_result
    from alem_eval.cli.options import PaperFormat

    train_only = {c: "train" for c in CELLS}
    for splits in (train_only, {}):
        s = synthetic_scenario(4, cells=CELLS, cell_splits=splits)
        assert s.split_rows == () and s.split_table() is None and s.split_table_rows() == []
        assert s.as_json()["split_rows"] == [] and Scenario(s).by_split.empty
        for fmt in (PaperFormat.table, PaperFormat.md):
            _print_result(s, fmt, [])
            out = capsys.readouterr().out
            assert "Focal - self" in out or "focal - self" in out  # the main table
            assert "partner split" not in out and "Partners" not in out


def test_a_focal_that_records_its_partners_labels_trained_with_and_held_out():
    trained = (A + "0", A + "1")  # B's train seed is one it never met
    s = synthetic_scenario(4, cells=CELLS, cell_splits=SPLITS, trained_with=trained)
    rows = _by_label(s)
    assert list(rows) == [
        "trained with (train)",
        "held out (train)",
        "held out (val)",
        "held out (test)",
        "gap (held out test - trained with)",
    ]
    assert rows["trained with (train)"].cells == trained
    assert rows["held out (train)"].cells == (B + "0",)
    assert rows["held out (train)"].role == "held out" and rows["held out (train)"].split == "train"
    gap = rows["gap (held out test - trained with)"]
    assert gap.versus == trained and gap.cells == (A + "4", B + "4")
    assert (
        gap.diff.point
        == rows["held out (test)"].diff.point - rows["trained with (train)"].diff.point
    )
    teams = {(r["background"], r["trained_with"], r["split"]) for r in s.team_rows()}
    assert (A + "0", True, "train") in teams and (B + "0", False, "train") in teams
    md = s.split_table().to_markdown()
    assert "Trained with: the partners the focal's config.json records" in md
    # Partners none of which is in the background: the gap falls back to the train cells.
    other = synthetic_scenario(4, cells=CELLS, cell_splits=SPLITS, trained_with=("x/y/z/seed0",))
    assert "gap (held out test - train)" in _by_label(other)


def test_the_split_table_round_trips_through_json_and_the_cli_json(capsys):
    from alem_eval.api.scenario import Scenario
    from alem_eval.cli.commands.scenario import _print_result
    from alem_eval.cli.options import PaperFormat

    s = synthetic_scenario(4, cells=CELLS, cell_splits=SPLITS, trained_with=(A + "0",))
    doc = json.loads(json.dumps(s.as_json()))
    assert doc["cell_splits"] == SPLITS and doc["trained_with"] == [A + "0"]
    assert doc["split_rows"] == [r.as_json() for r in s.split_rows]
    first = doc["split_rows"][0]
    assert (first["row"], first["split"], first["role"]) == (
        "trained with (train)",
        "train",
        "trained with",
    )
    assert first["focal_minus_self"]["point"] == s.split_rows[0].diff.point
    _print_result(s, PaperFormat.json, [])
    assert json.loads(capsys.readouterr().out)["split_rows"] == doc["split_rows"]
    _print_result(s, PaperFormat.md, [])  # the main table, then the split table
    md = capsys.readouterr().out
    assert md.index("| Population | Mode |") < md.index("| Mode | Metric | Partners |")
    assert "| visitor | Total% | held out (test) | 2 |" in md
    api = Scenario(s)
    assert api.by_split.to_dict("records") == [r.flat() for r in s.split_rows]
    assert api.by_split.attrs["units"] == "fraction"
    assert set(api.to_frame()["split"]) == {"train", "val", "test"}
    assert api.split_table().to_markdown() == s.split_table().to_markdown()


def test_a_cell_that_names_no_population_has_no_split():
    """A source cell without the released layout (no budget, algorithm, difficulty, seed)
    is left out of the split table instead of failing the scenario."""
    from types import SimpleNamespace

    from alem_eval.hub.manifest import Cell
    from alem_eval.scoring.scenario_splits import background_splits

    released = Cell.from_id("1B/ippo-rnn/easy/seed4")
    bare = SimpleNamespace(id="my-runs/agent-a")
    assert background_splits([released, bare]) == {released.id: "test"}
