"""Frozen partner splits (alem_eval.hub.splits): the release's, shipped beside the manifest
with a pinned digest, a user's own file, and ``--split`` / ``split=`` wherever cells are
selected. Nothing here compiles: the commands stop at a dry run or at the selection."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from alem_eval.core.errors import ConfigError, SelectorError, UsageError
from alem_eval.hub.demo_cells import demo_algorithms, demo_cell_id
from alem_eval.hub.manifest import Cell, load_manifest
from alem_eval.hub.splits import (
    SPLITS,
    SPLITS_PATH,
    Splits,
    load_splits,
    parse_splits,
    select_split,
    split_of,
)

from .clitools import assert_one_line_error, run_cli_in_process
from .conftest import REPO

# The release's assignment, pinned: changing which partner is held out changes this.
RELEASE_DIGEST = "sha256:1e963e17b8e3b9741a3f1dd09a00226bb77645095b08aedb60dadbc8fbf2aede"


def _cli(*args: str):
    return run_cli_in_process(list(args), dict(os.environ, COLUMNS="200"))


def _write(tmp_path, data, name="mine.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


MINE = {
    "schema_version": 1,
    "name": "mine",
    "populations": [
        {"population": "demo/ippo-rnn/easy", "test": [0]},
        {"population": "demo/mappo-rnn/easy", "train": [0]},
        {"population": "demo/pqn/easy", "train": [0]},
    ],
}


# ----------------------------------------------------------------------------------------
# The release's splits
# ----------------------------------------------------------------------------------------
def test_release_splits_are_disjoint_and_cover_every_released_seed():
    splits = load_splits()
    by_split = {s: set(splits.cells(s)) for s in SPLITS}
    assert not by_split["train"] & by_split["val"]
    assert not by_split["train"] & by_split["test"]
    assert not by_split["val"] & by_split["test"]
    released = set(load_manifest().cells())
    assert released <= set(splits.cells())
    for cell in released:
        expected = {0: "train", 1: "train", 2: "train", 3: "val", 4: "test"}[cell.seed]
        assert split_of(cell, splits) == expected, cell
    assert len(by_split["train"] & released) == 72 and len(by_split["test"] & released) == 24


def test_release_splits_are_stable_their_digest_pinned_in_file_and_manifest():
    splits = load_splits()
    assert splits.digest == RELEASE_DIGEST
    assert json.loads(SPLITS_PATH.read_text())["digest"] == RELEASE_DIGEST
    assert load_manifest().splits_digest == RELEASE_DIGEST
    copy = REPO / "manifests" / SPLITS_PATH.name
    assert SPLITS_PATH.read_bytes() == copy.read_bytes()
    spec = importlib.util.spec_from_file_location("gen", REPO / "manifests" / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert copy.read_text() == gen.render_splits()


def test_demo_cells_split_three_algorithms_train_one_test():
    splits = load_splits()
    got = {a.name: split_of(Cell.from_id(demo_cell_id(a.name)), splits) for a in demo_algorithms()}
    assert sorted(got.values()) == ["test", "train", "train", "train"]
    assert got["hypermarl-rnn"] == "test"


def test_the_digest_is_of_the_assignment_only():
    a = Splits({("1B", "ippo-rnn", "hard"): {0: "train", 1: "test"}}, name="a")
    b = Splits({("1b", "ippo-rnn", "hard"): {1: "test", 0: "train"}}, name="b")
    c = Splits({("1B", "ippo-rnn", "hard"): {0: "test", 1: "train"}}, name="a")
    assert a.digest == b.digest != c.digest
    assert parse_splits(a.to_json()).digest == a.digest


# ----------------------------------------------------------------------------------------
# Selecting by split
# ----------------------------------------------------------------------------------------
def test_select_split_keeps_order_and_none_keeps_everything():
    cells = [Cell("1B", "pqn-vdn-rnn", "hard", s) for s in (4, 0, 3, 1)]
    assert select_split(cells, None) == cells
    assert [c.seed for c in select_split(cells, "train")] == [0, 1]
    assert select_split(cells, "test") == [cells[0]]


def test_an_unknown_split_is_a_usage_error_and_an_empty_one_a_selector_error():
    with pytest.raises(UsageError, match="unknown split 'dev': must be one of train, val, test"):
        select_split([Cell("1B", "ippo-rnn", "hard", 0)], "dev")
    with pytest.raises(SelectorError, match="none of the 1 selected cell"):
        select_split([Cell("1B", "ippo-rnn", "hard", 0)], "test")
    with pytest.raises(SelectorError, match="has no split"):
        split_of(Cell("runs", "ippo-rnn", "hard", 0))


def test_a_users_split_file_works_in_the_library_and_the_api(tmp_path):
    import alem_eval

    path = _write(tmp_path, MINE)
    mine = load_splits(path)
    assert mine.name == "mine" and split_of(Cell("demo", "ippo-rnn", "easy", 0), mine) == "test"
    assert [c.id for c in alem_eval.select("demo/*", source="demo", split="test")] == [
        "demo/hypermarl-rnn/easy/seed0"
    ]
    got = alem_eval.select("demo/*", source="demo", split="test", splits=path)
    assert [c.id for c in got] == ["demo/ippo-rnn/easy/seed0"]
    assert all(c.source is not None for c in got)


@pytest.mark.parametrize(
    "data, fragment",
    [
        ("{not json", "cannot read the split file as JSON"),
        ({"populations": "x"}, "expected a JSON object with a 'populations' list"),
        ({"populations": [{"population": "demo/ippo-rnn"}]}, "is not BUDGET/ALGORITHM/DIFFICULTY"),
        (
            {"populations": [{"population": "demo/ippo-rnn/easy", "train": [0], "test": [0]}]},
            "seed 0 of demo/ippo-rnn/easy is in both 'train' and 'test'",
        ),
        (
            {"populations": [{"population": "demo/ippo-rnn/easy", "dev": [0]}]},
            "unknown key(s) 'dev'",
        ),
        (
            {"populations": [{"population": "demo/ippo-rnn/easy", "train": ["0"]}]},
            "'train' must be a list of seeds",
        ),
        (
            {"populations": [{"population": "d/ippo/easy", "train": [0]}] * 2},
            "population d/ippo-rnn/easy is listed twice",
        ),
        ({**MINE, "digest": "sha256:00"}, "does not match the assignment"),
    ],
)
def test_a_bad_split_file_is_one_line_and_a_non_zero_exit(tmp_path, data, fragment):
    path = _write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_splits(path)
    assert fragment in str(exc.value) and "\n" not in str(exc.value)
    proc = _cli("list", "--source", "demo", "--splits", str(path))
    assert_one_line_error(proc, fragment)


def test_a_missing_split_file_is_a_usage_error(tmp_path):
    proc = _cli(
        "list", "--source", "demo", "--splits", str(tmp_path / "nope.json"), "--split", "train"
    )
    assert proc.returncode == 2
    assert_one_line_error(proc, "split file", "not found")


# ----------------------------------------------------------------------------------------
# --split on the commands that select cells
# ----------------------------------------------------------------------------------------
def test_list_split_test_lists_the_held_out_demo_cell():
    proc = _cli("list", "--source", "demo", "--split", "test", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert [r["cell"] for r in json.loads(proc.stdout)] == ["demo/hypermarl-rnn/easy/seed0"]


@pytest.mark.parametrize("command", ["score", "crossplay"])
def test_a_dry_run_plans_only_the_split(command, tmp_path):
    proc = _cli(
        command, "demo/*", "--source", "demo", "--split", "train", "--dry-run", "--format", "json"
    )
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    cells = {c["cell"] for c in plan["cells"]} if "cells" in plan else set()
    assert "demo/hypermarl-rnn/easy/seed0" not in json.dumps(plan)
    assert "demo/ippo-rnn/easy/seed0" in json.dumps(plan)
    assert cells <= {demo_cell_id(a.name) for a in demo_algorithms()}
    mine = _write(tmp_path, MINE)
    proc = _cli(
        command,
        "demo/*",
        "--source",
        "demo",
        "--splits",
        str(mine),
        "--split",
        "train",
        "--dry-run",
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    assert "demo/ippo-rnn" not in proc.stdout and "demo/hypermarl-rnn" not in proc.stdout
    assert "demo/mappo-rnn/easy/seed0" in proc.stdout and "demo/pqn-vdn-rnn" in proc.stdout


@pytest.mark.parametrize("command", ["list", "score", "crossplay", "scenario"])
def test_an_unknown_split_is_a_one_line_usage_error(command):
    args = [command, "demo/*", "--source", "demo", "--split", "dev"]
    if command == "scenario":
        args += ["--focal", "random-legal"]
    proc = _cli(*args)
    assert proc.returncode == 2
    assert_one_line_error(proc, "unknown split 'dev': --split must be one of train, val, test")


def test_scenario_refuses_a_split_with_no_selected_cell_before_playing():
    proc = _cli(
        "scenario", "demo/*", "--source", "demo", "--split", "val", "--focal", "random-legal"
    )
    assert_one_line_error(proc, "none of the 4 selected cell(s) is in split 'val'")
