"""A fifth algorithm = a registry record + a network + a trainer, registered from outside
the package (``tests/toy_algorithm.py``): every module asks the registry, so nothing else
changes for it to be configured, trained, verified and scored."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math

import pytest

import alem_eval.algorithms.registry as registry
from alem_eval.algorithms.registry import (
    algorithm_names,
    all_algorithms,
    canonical_algorithm,
    get_algorithm,
    register,
    unregister,
)
from alem_eval.algorithms.config import COMMON_KEYS, key_table, parse_config_json
from alem_eval.core.errors import ConfigError

from . import toy_algorithm as toy
from .conftest import REPO
from .eval_support import FAST_EPISODES


@pytest.fixture
def toy_registered():
    record = register(toy.RECORD)
    yield record
    if canonical_algorithm(toy.NAME) is not None:  # a test may have unregistered it
        unregister(toy.NAME)


def test_a_registered_algorithm_is_known_by_every_module_until_unregistered(toy_registered):
    from alem_eval.hub.demo_cells import (
        DEMO_RECIPE,
        ensure_demo_source,
    )
    from alem_eval.trainers.planning import expand_cells

    spec = importlib.util.spec_from_file_location("generate", REPO / "manifests" / "generate.py")
    generate = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generate)

    assert get_algorithm("TOY") is toy_registered and canonical_algorithm("toy_ff") == toy.NAME
    assert algorithm_names()[-1] == toy.NAME and algorithm_names() == registry.ALGORITHMS
    assert set(key_table(toy.NAME)) == set(COMMON_KEYS) | {"TOY_HIDDEN"}
    cfg = parse_config_json({"algorithm": "toy", "reload_overrides": {"TOY_HIDDEN": "16"}})
    assert cfg.algorithm == toy.NAME and cfg.network == toy.ToyNetConfig(16)
    assert [c.id for c in expand_cells(["tiny/toy/easy/seed0"])] == [f"tiny/{toy.NAME}/easy/seed0"]
    # No bundled demo cell and no Hub release: the demo and the manifest go on without it.
    assert toy.NAME not in DEMO_RECIPE and ensure_demo_source()
    assert toy.NAME not in {c["algorithm"] for c in generate.manifest_data()["cells"]}

    unregister("toy")
    assert canonical_algorithm("toy") is None and toy.NAME not in algorithm_names()
    with pytest.raises(ConfigError, match="algorithm='toy-ff' is not one of ippo-rnn, "):
        parse_config_json({"algorithm": toy.NAME})


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(), "'toy-ff' is already registered"),
        (dict(name="toy2", aliases=("ippo",)), "'ippo' already names the algorithm 'ippo-rnn'"),
        (dict(name="toy2", aliases=("TOY",)), "'toy' already names the algorithm 'toy-ff'"),
        (dict(name="Toy_2"), "must be lower case with hyphens"),
        (dict(name="toy/2"), "must be lower case with hyphens"),
    ],
)
def test_a_name_or_alias_already_taken_or_unfit_for_a_cell_id_is_refused(
    toy_registered, change, message
):
    before = all_algorithms()
    with pytest.raises(ConfigError, match=message):
        register(dataclasses.replace(toy.RECORD, **change))
    assert all_algorithms() == before


def test_replace_swaps_the_record_of_the_same_name(toy_registered):
    other = register(dataclasses.replace(toy.RECORD, aliases=("toy-two",)), replace=True)
    assert get_algorithm("toy-two") is other and canonical_algorithm("toy") is None


@pytest.mark.slow
def test_a_fifth_algorithm_registered_from_outside_trains_verifies_and_scores(
    toy_registered, tmp_path
):
    """train -> verify -> score through the library, at tiny sizes: 2 updates of 4 envs x 8
    steps, then the evaluator tests' FAST_EPISODES greedy episodes (its world programs are
    theirs) of at most 8 steps."""
    from alem_eval.envs.spaces import num_actions, obs_dim
    from alem_eval.analysis.results import open_store
    from alem_eval.scoring.score import ScoreOptions, score_cells
    from alem_eval.hub.sources import open_source
    from alem_eval.trainers.planning import TrainOptions, train
    from alem_eval.model.verify import verify_cells

    cell_id = f"tiny/{toy.NAME}/easy/seed0"
    options = TrainOptions(
        out=tmp_path / "runs",
        total_timesteps=2 * 4 * 8,
        overrides={"NUM_ENVS": 4, "NUM_STEPS": 8, "TOY_HIDDEN": 8},
    )
    [outcome] = train(["tiny/toy/easy/seed0"], options)
    [result] = outcome.results
    assert result.cell_dir == options.out / cell_id
    assert result.summary["complete"] and result.summary["num_updates"] == 2
    # config.json as the record says: its reload keys, its trainer module
    written = json.loads((result.cell_dir / "config.json").read_text())
    assert written["algorithm"] == toy.NAME and written["reload_overrides"]["TOY_HIDDEN"] == 8
    assert written["training_summary"]["trainer"] == "alem-eval tests/toy_algorithm.py"

    src = open_source(str(options.out))
    cells = src.select([cell_id])
    [verified] = verify_cells(src, cells)
    assert verified.ok, verified.message
    # Dense_0 and Dense_1 of the 3-player env with the regenerated cells' 4 comm channels
    obs, actions = obs_dim(3, 4), num_actions(3, 4)
    assert verified.num_params == (obs + 1) * 8 + (8 + 1) * actions

    [score] = score_cells(
        src,
        cells,
        options=ScoreOptions(num_episodes=FAST_EPISODES, max_steps=8),
        store=open_store(tmp_path / "results"),
    )
    assert score.cell.algorithm == toy.NAME and len(score.episodes) == FAST_EPISODES
    assert all(0 < ep["episode_length"] <= 8 for ep in score.episodes)
    assert math.isfinite(score.aggregate["episode_return"])
