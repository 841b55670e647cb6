"""``alem-eval train`` planning (``alem_eval.trainers.planning``): selectors, shards, groups and
``--group-size``, where hyperparameters come from (released config.json vs the yaml:
PQN's TOTAL_TIMESTEPS_DECAY), finished cells. Fast: nothing here compiles or imports a
trainer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alem_eval.algorithms.train_config import build_train_config, training_run_config
from alem_eval.core.errors import ConfigError, SelectorError, UsageError
from alem_eval.hub.manifest import Cell
from alem_eval.hub.selectors import parse_shard, shard_cells
from alem_eval.trainers.planning import (
    TrainOptions,
    budget_timesteps,
    cell_run_config,
    config_identity,
    expand_cells,
    parse_sets,
    plan_groups,
    plan_items,
    plan_training,
    released_configs,
)
from tests.conftest import FIXTURES

PQN_TINY_CELL = "tiny/pqn-vdn-rnn/easy/seed0"


def test_cell_expansion_shards_and_budgets():
    assert budget_timesteps("1B") == 10**9 and budget_timesteps("100M") == 10**8
    assert budget_timesteps("tiny") is None
    assert [c.id for c in expand_cells(["1B/ippo-rnn/hard/seed3"])] == ["1B/ippo-rnn/hard/seed3"]
    cells = expand_cells(["1b/ippo,pqn/*"])
    assert len(cells) == 2 * 3 * 5 and all(c.budget == "1B" for c in cells)
    assert [c.id for c in expand_cells(["tiny/ippo-rnn/easy/seed0,seed7"])] == [
        "tiny/ippo-rnn/easy/seed0",
        "tiny/ippo-rnn/easy/seed7",
    ]
    shares = [shard_cells(cells, (i, 4)) for i in range(4)]
    assert [c for share in shares for c in share] == cells and all(shares)
    with pytest.raises(UsageError):
        parse_shard("4/4")
    with pytest.raises(UsageError):
        parse_sets(["LR"])
    with pytest.raises(UsageError, match="--total-timesteps"):
        plan_items(expand_cells(["tiny/ippo-rnn/easy/seed0"]))


def test_groups_share_settings_and_respect_group_size():
    items = plan_items(
        expand_cells(["100M/mappo-rnn/easy", "100M/pqn/easy/seed0"]), overrides={"NUM_ENVS": "16"}
    )
    groups = plan_groups(items)
    assert [g.label for g in groups] == [
        "100M/mappo-rnn/easy seed0,1,2,3,4",
        "100M/pqn-vdn-rnn/easy seed0",
    ]
    assert groups[0].items[0].tcfg.total_timesteps == 10**8
    assert groups[0].items[0].tcfg.num_envs == 16
    capped = plan_groups(items, group_size=2)
    assert [len(g.items) for g in capped] == [2, 2, 1, 1]
    assert [c.seed for g in capped[:3] for c in g.cells] == [0, 1, 2, 3, 4]
    with pytest.raises(UsageError):
        plan_groups(items, group_size=0)
    # seeds whose settings differ (here: their config.json's LR) never share a program
    cells = expand_cells(["100M/ippo-rnn/easy/seed0,seed1"])
    configs = {c: ("x", {"config": {"LR": lr}}) for c, lr in zip(cells, (1e-4, 2e-4), strict=True)}
    assert len(plan_groups(plan_items(cells, configs=configs))) == 2


# ----------------------------------------------------------------------------------------
# Where hyperparameters come from
# ----------------------------------------------------------------------------------------
def _decay(run) -> int:
    return build_train_config(run).total_timesteps_decay


def test_pqn_decay_follows_the_yaml_without_a_released_config():
    """The yaml fixes TOTAL_TIMESTEPS_DECAY at 1e9: a 100M cell regenerated without its
    config.json keeps it (it used to follow TOTAL_TIMESTEPS, changing epsilon and LR)."""
    run = cell_run_config(Cell("100M", "pqn-vdn-rnn", "easy", 0))
    assert run.value("TOTAL_TIMESTEPS") == 10**8 and _decay(run) == 10**9
    assert _decay(cell_run_config(Cell("1B", "pqn-vdn-rnn", "hard", 2))) == 10**9
    assert (
        _decay(training_run_config("pqn", difficulty="easy", seed=0, total_timesteps=10**8))
        == 10**9
    )
    set_ = cell_run_config(
        Cell("100M", "pqn-vdn-rnn", "easy", 0), overrides={"TOTAL_TIMESTEPS_DECAY": "1e8"}
    )
    assert _decay(set_) == 10**8


def test_a_released_config_gives_every_hyperparameter():
    cell = Cell("100M", "pqn-vdn-rnn", "medium", 3)
    released = {
        "config": {
            "TOTAL_TIMESTEPS": 1e8,
            "TOTAL_TIMESTEPS_DECAY": 1e8,
            "LR": 1e-4,
            "NUM_ENVS": 256,
            "SEED": 0,
            "ALG_NAME": "pqn_vdn_rnn",
            "TRAINING_COORDINATION_DIFFICULTY": "easy",
        },
        "reload_overrides": {"HIDDEN_SIZE": 512, "NUM_COMM_CHANNELS": 4},
    }
    run = cell_run_config(cell, released=released)
    t = build_train_config(run)
    assert (t.total_timesteps, t.total_timesteps_decay, t.lr, t.num_envs) == (
        10**8,
        10**8,
        1e-4,
        256,
    )
    assert run.network.hidden_size == 512
    # the cell's identity wins over the file's; --set wins over both
    assert run.value("SEED") == 3 and run.env.training_difficulty == "medium"
    assert (
        build_train_config(cell_run_config(cell, released=released, overrides={"LR": "3e-4"})).lr
        == 3e-4
    )
    with pytest.raises(ConfigError, match="budget label 1B"):
        cell_run_config(Cell("1B", "pqn-vdn-rnn", "easy", 0), released=released)
    assert (
        cell_run_config(
            Cell("1B", "pqn-vdn-rnn", "easy", 0), released=released, total_timesteps=10**9
        ).value("TOTAL_TIMESTEPS")
        == 10**9
    )


def test_from_config_and_source_read_the_cells_config(tmp_path):
    if not (FIXTURES / PQN_TINY_CELL).is_dir():
        pytest.skip("fixture cells not available")
    cell = Cell.from_id(PQN_TINY_CELL)
    by_file = released_configs([cell], from_config=FIXTURES / PQN_TINY_CELL / "config.json")
    by_dir = released_configs([cell], from_config=FIXTURES / PQN_TINY_CELL)
    by_source = released_configs([cell], source=str(FIXTURES))
    assert by_file[cell][1] == by_dir[cell][1] == by_source[cell][1]
    run = cell_run_config(cell, released=by_source[cell][1])  # 'tiny': steps from the file
    t = build_train_config(run)
    assert (t.total_timesteps, t.total_timesteps_decay, t.num_envs, t.num_steps) == (
        512,
        512,
        16,
        16,
    )
    with pytest.raises(SelectorError):
        released_configs([Cell("tiny", "pqn-vdn-rnn", "hard", 0)], source=str(FIXTURES))
    with pytest.raises(UsageError):
        released_configs([cell], from_config=FIXTURES, source=str(FIXTURES))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON"):
        released_configs([cell], from_config=tmp_path / "bad.json")


def test_dry_run_shows_where_hyperparameters_come_from():
    if not (FIXTURES / PQN_TINY_CELL).is_dir():
        pytest.skip("fixture cells not available")
    from alem_eval.cli.app import _register, app

    _register()
    runner = CliRunner()
    res = runner.invoke(app, ["train", PQN_TINY_CELL, "--source", str(FIXTURES), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "512 steps = 2 updates of 16 envs x 16 steps" in res.output
    assert f"{PQN_TINY_CELL}/config.json" in res.output
    res = runner.invoke(app, ["train", "100M/ippo-rnn/hard", "--group-size", "2", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert [x.split(":")[0] for x in res.output.splitlines() if x.startswith("100M")] == [
        "100M/ippo-rnn/hard seed0,1",
        "100M/ippo-rnn/hard seed2,3",
        "100M/ippo-rnn/hard seed4",
    ]


# ----------------------------------------------------------------------------------------
# Finished cells
# ----------------------------------------------------------------------------------------
def _fake_finished(cell_dir: Path, identity: str) -> None:
    (cell_dir / "checkpoint").mkdir(parents=True)
    (cell_dir / "config.json").write_text(
        json.dumps({"training_summary": {"complete": True, "identity": identity}})
    )


def test_finished_cells_are_skipped_and_others_settings_are_not_overwritten(tmp_path):
    cells = expand_cells(["100M/ippo-rnn/easy/seed0,seed1"])
    items = plan_items(cells)
    _fake_finished(tmp_path / cells[0].id, config_identity(items[0].run, items[0].tcfg))
    plan = plan_training(["100M/ippo-rnn/easy/seed0,seed1"], TrainOptions(out=tmp_path))
    assert [c.id for c, _ in plan.skipped] == [cells[0].id]
    assert [g.cells for g in plan.groups] == [[cells[1]]]
    shutil.rmtree(tmp_path / cells[0].id)
    _fake_finished(tmp_path / cells[0].id, "another")
    with pytest.raises(ConfigError, match=r"other settings .*--force overwrites"):
        plan_training(["100M/ippo-rnn/easy/seed0"], TrainOptions(out=tmp_path))
    forced = plan_training(["100M/ippo-rnn/easy/seed0"], TrainOptions(out=tmp_path, force=True))
    assert forced.groups[0].cells == [cells[0]]
    # a downloaded released cell (no training summary) is not overwritten either
    (tmp_path / cells[0].id / "config.json").write_text(json.dumps({"algorithm": "x"}))
    with pytest.raises(ConfigError, match="not by alem-eval train"):
        plan_training(["100M/ippo-rnn/easy/seed0"], TrainOptions(out=tmp_path))
