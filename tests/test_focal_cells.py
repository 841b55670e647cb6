"""A released cell as a scenario's focal (`scenario --focal PATH`, `scenario(cells, load_policy(cell))`):
its greedy policy plays exactly as in cross-play, keyed by its checkpoint and config hashes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from alem_eval.core.errors import AlemEvalError, ConfigError, UsageError

from .clitools import assert_one_line_error, cli_env, closed_port_url, run_cli_in_process
from .eval_support import FAST_EPISODES, programs_made

BACKGROUND = "demo/ippo-rnn/easy/seed0"
FOCAL = "demo/mappo-rnn/easy/seed0"
SETTINGS = dict(num_episodes=FAST_EPISODES, max_steps=40)


def _cell_dir(cell_id: str) -> Path:
    from alem_eval.hub.demo_cells import demo_root

    return demo_root() / cell_id


# ----------------------------------------------------------------------------------------
# Resolution and identity (no rollout)
# ----------------------------------------------------------------------------------------
def test_a_cell_directory_is_its_released_policy_keyed_by_its_checkpoint_and_config_hashes(
    tmp_path,
):
    from alem_eval.evaluate.actors import ReleasedPolicy
    from alem_eval.model.checkpoint import checkpoint_hash
    from alem_eval.model.loader import cell_checkpoint_dir, resolve_cell
    from alem_eval.scoring.focal_cell import resolve_focal

    here = _cell_dir(FOCAL)
    actor = resolve_focal(str(here))
    cfg, _ = resolve_cell(here)
    assert isinstance(actor, ReleasedPolicy) and actor.label == str(here)
    assert actor.identity == (
        f"mappo-rnn@{checkpoint_hash(cell_checkpoint_dir(here))[:16]}+{cfg.config_hash}"
    )
    # The same cell elsewhere (a copy, a Path) is the same focal; another cell is not.
    copy = tmp_path / "my-cell"
    shutil.copytree(here, copy)
    assert resolve_focal(copy).identity == actor.identity
    assert resolve_focal(str(_cell_dir(BACKGROUND))).identity.startswith("ippo-rnn@")
    assert resolve_focal(str(_cell_dir(BACKGROUND))).identity != actor.identity


def test_a_loaded_policy_is_that_cells_focal_as_it_is():
    import alem_eval
    from alem_eval.scoring.focal_cell import resolve_focal

    policy = alem_eval.load_policy(FOCAL, source="demo")
    actor = resolve_focal(policy)
    assert actor is policy.actor and actor.label == FOCAL
    assert actor.identity == resolve_focal(str(_cell_dir(FOCAL))).identity
    with pytest.raises(UsageError, match="focal arguments go with a SPEC string"):
        resolve_focal(policy, {"temperature": 0.5})


def test_a_cell_trained_with_partners_carries_their_ids_and_a_bad_record_is_one_line(tmp_path):
    """What `train --partners` writes under config.json's "partners" tells a scenario
    which background cells the focal trained with (a self-play cell records none)."""
    import json

    from alem_eval.scoring.focal_cell import resolve_focal

    assert resolve_focal(str(_cell_dir(FOCAL))).trained_with is None
    cell = tmp_path / "trained"
    shutil.copytree(_cell_dir(FOCAL), cell)
    config = json.loads((cell / "config.json").read_text())
    partners = ["demo/ippo-rnn/easy/seed0", "demo/pqn-vdn-rnn/easy/seed0"]
    config["partners"] = {"cells": partners, "split": "train", "focal_slots": 1}
    (cell / "config.json").write_text(json.dumps(config))
    assert resolve_focal(str(cell)).trained_with == tuple(partners)
    config["partners"] = {"cells": "demo/*"}
    (cell / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=r"^focal .*trained: config.json's 'partners' has no"):
        resolve_focal(str(cell))


def _corrupt(tmp_path: Path, what: str) -> Path:
    cell = tmp_path / what
    shutil.copytree(_cell_dir(FOCAL), cell)
    if what == "no-config":
        (cell / "config.json").unlink()
    elif what == "bad-config":
        (cell / "config.json").write_text("{not json")
    else:  # no checkpoint
        shutil.rmtree(cell / "checkpoint")
    return cell


@pytest.mark.parametrize(
    ("what", "error", "message"),
    [
        ("missing", UsageError, "no such cell directory"),
        ("no-config", ConfigError, "not a cell directory (no config.json"),
        ("bad-config", ConfigError, ""),
        ("no-checkpoint", AlemEvalError, ""),
    ],
)
def test_a_bad_cell_directory_is_one_line_naming_it(tmp_path, what, error, message):
    from alem_eval.scoring.focal_cell import resolve_focal

    path = tmp_path / "nowhere" if what == "missing" else _corrupt(tmp_path, what)
    with pytest.raises(error) as err:
        resolve_focal(str(path))
    assert str(err.value).startswith(f"focal {path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_scenario_with_a_bad_cell_directory_is_one_line_and_a_non_zero_exit(tmp_path):
    cell = _corrupt(tmp_path, "no-config")
    env = cli_env(tmp_path, closed_port_url())
    args = ["scenario", "--focal", str(cell), BACKGROUND, "--source", "demo"]
    proc = run_cli_in_process([*args, "--results", str(tmp_path / "r")], env)
    assert_one_line_error(proc, f"focal {cell}: not a cell directory (no config.json")
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").rglob("*.parquet"))


class _Worlds:
    def __init__(self, statics):
        self.statics = statics


def test_a_cell_needing_another_env_than_the_background_is_one_line(tmp_path):
    import dataclasses

    from alem_eval.evaluate.settings import eval_statics
    from alem_eval.scoring.focal_cell import check_focal_world, resolve_focal

    actor = resolve_focal(str(_cell_dir(FOCAL)))
    statics = eval_statics(actor.cfg)
    check_focal_world(actor, _Worlds({"bg": statics}), "error")  # its own world: fine
    other = dataclasses.replace(statics, num_comm_channels=statics.num_comm_channels + 1)
    with pytest.raises(UsageError) as err:
        check_focal_world(actor, _Worlds({"bg": other}), "error")
    assert str(err.value).startswith(f"focal {actor.label}: needs another env configuration")
    assert "num_comm_channels" in str(err.value)


# ----------------------------------------------------------------------------------------
# The play: the focal cell's teams are its cross-play teams
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo():
    from alem_eval.hub.sources import open_source

    src = open_source("demo")
    return src, {c.id: c for c in src.select([BACKGROUND, FOCAL])}


@pytest.fixture(scope="module")
def focal_scenario(demo):
    from alem_eval.scoring.scenario import run_scenario

    src, cells = demo
    return run_scenario(src, [cells[BACKGROUND]], str(_cell_dir(FOCAL)), mode="visitor", **SETTINGS)


@pytest.mark.xdist_group("focal-cells")
def test_a_focal_cell_gives_the_records_of_its_cross_play_teams_in_the_same_slots(
    demo, focal_scenario
):
    from alem_eval.scoring.play import play_teams, resolve_worlds
    from alem_eval.scoring.teams import Team

    src, cells = demo
    label = "focal:" + focal_scenario.identity
    focal_teams = [t.team for t in focal_scenario.teams if t.kind == "focal"]
    assert len(focal_teams) == 3 and all(t.slots.count(label) == 1 for t in focal_teams)
    # The same teams with the cell itself in the focal's slot, as cross-play plays them
    # (in the scenario's order: one compiled program for both).
    cross = [
        Team(tuple(FOCAL if c == label else c for c in t.team.slots)) for t in focal_scenario.teams
    ]
    both = [cells[BACKGROUND], cells[FOCAL]]
    worlds = resolve_worlds(src, both, None, on_env_mismatch="error", **SETTINGS)
    made = programs_made()
    scores = play_teams(src, both, cross, worlds).scores
    # the focal cell and the cross-play member are one actor: the scenario's program serves
    assert programs_made() == made
    for t, c in zip(focal_scenario.teams, cross, strict=True):
        got, want = focal_scenario.scores[t.team].episodes, scores[c].episodes
        assert len(got) == FAST_EPISODES and list(got) == list(want), t.team.slots


@pytest.mark.xdist_group("focal-cells")
def test_a_loaded_policy_as_the_focal_plays_as_its_cell_directory(demo, focal_scenario):
    import alem_eval
    from alem_eval.scoring.scenario import run_scenario

    src, cells = demo
    policy = alem_eval.load_policy(FOCAL, source="demo")
    again = run_scenario(src, [cells[BACKGROUND]], policy, mode="visitor", **SETTINGS)
    assert again.identity == focal_scenario.identity and again.focal == FOCAL
    assert [s.episodes for s in again.scores.values()] == [
        s.episodes for s in focal_scenario.scores.values()
    ]
