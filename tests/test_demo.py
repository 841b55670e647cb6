"""``alem-eval demo`` and the demo cells bundled with the package."""

from __future__ import annotations

import csv
import io
import json
import zipfile

import pytest

from alem_eval.cli.app import main
from alem_eval.hub.demo_cells import (
    CARD,
    DEMO_RECIPE,
    demo_algorithms,
    demo_cell_id,
    demo_root,
    ensure_demo_source,
    train_args,
)
from alem_eval.hub.layout import CHECKPOINT_DIR, CONFIG_FILE

from .conftest import REPO
from .eval_support import DEMO_PROGRAMS

MAX_BYTES = 20_000_000  # the bundled cells, all together
# The algorithms whose registry record has a demo (an algorithm may have none).
DEMO_ALGORITHMS = [a.name for a in demo_algorithms()]


def test_every_algorithm_with_a_demo_has_a_bundled_cell_within_the_size_budget():
    root = ensure_demo_source()
    assert root == demo_root() and root.is_relative_to(REPO / "alem_eval")
    assert set(DEMO_RECIPE) == set(DEMO_ALGORITHMS) and DEMO_ALGORITHMS
    files = [p for p in root.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= MAX_BYTES
    card = (root / CARD).read_text()
    for algorithm in DEMO_ALGORITHMS:
        cell = root / demo_cell_id(algorithm)
        assert (cell / CONFIG_FILE).is_file() and (cell / CHECKPOINT_DIR).is_dir()
        assert algorithm in card
    # only checkpoint/ and config.json per cell (no resume state, no logs), and the card
    assert {p.relative_to(root).parts[4] for p in files if p.name != CARD} == {
        CHECKPOINT_DIR,
        CONFIG_FILE,
    }


@pytest.mark.parametrize("algorithm", DEMO_ALGORITHMS)
def test_bundled_cell_is_what_its_recipe_trains(algorithm):
    """`alem-eval train` with the recipe's arguments would find the cell already trained
    with exactly these settings (the recipe in code and the committed cell agree)."""
    from alem_eval.trainers.planning import TrainOptions, parse_sets, plan_training

    args = train_args(algorithm)
    sets = [args[i + 1] for i, a in enumerate(args) if a == "--set"]
    flag = {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and a != "--set"}
    overrides = parse_sets(sets)
    overrides.update(NUM_ENVS=flag["--num-envs"], NUM_STEPS=flag["--num-steps"])
    plan = plan_training(
        [args[0]],
        TrainOptions(
            out=demo_root(),
            total_timesteps=int(flag["--total-timesteps"]),
            overrides=overrides,
            dry_run=True,
        ),
    )
    assert [c.id for c, _ in plan.skipped] == [demo_cell_id(algorithm)] and not plan.groups
    config = json.loads((demo_root() / demo_cell_id(algorithm) / CONFIG_FILE).read_text())
    summary = config["training_summary"]
    assert summary["complete"] and summary["trainer"].endswith(f"{algorithm.replace('-', '_')}.py")
    assert summary["total_timesteps"] == DEMO_RECIPE[algorithm].total_timesteps


# The command's own episodes and step cap (8 x 300), which notebooks/quickstart.ipynb scores
# too: in one worker, before the notebook (same group), its kernel finds these programs in
# the test run's compilation cache.
@pytest.mark.xdist_group(DEMO_PROGRAMS)
def test_demo_runs_end_to_end_on_the_bundled_cells(tmp_path, capsys):
    out, results = tmp_path / "demo", tmp_path / "results"
    args = ["demo", "--reps", "200", "--out", str(out)]
    args += ["--results", str(results)]
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    assert (exc.value.code or 0) == 0, captured.err
    # the score table (one row per bundled cell) and the leaderboard table, on stdout
    for algorithm in DEMO_ALGORITHMS:
        assert demo_cell_id(algorithm) in captured.out
    assert "| Budget | Algorithm | easy Base% |" in captured.out
    # everything written where the command says
    report = out / "report" / "report.md"
    for path in (results, report, out / "leaderboard.md", demo_root()):
        assert str(path) in captured.err.replace("\n", "")
    pngs = sorted(p.name for p in (out / "report" / "figures").iterdir())
    assert pngs == [
        "team_reward_pct_of_max_interval_estimates.png",
        "team_reward_pct_of_max_performance_profiles.png",
        "team_reward_pct_of_max_probability_of_improvement.png",
    ]  # one budget: no budget comparison; PNG only
    md = report.read_text()
    assert (
        "Runs: episodes" in md and "](figures/team_reward_pct_of_max_interval_estimates.png)" in md
    )
    assert (out / "leaderboard.md").read_text() in captured.out
    stats = json.loads((out / "report" / "stats.json").read_text())
    rows = [r for r in stats["metrics"][0]["aggregates"]]
    assert sorted(r["algorithm"] for r in rows) == sorted(DEMO_ALGORITHMS)
    assert all(r["n_runs"] == 8 and 0.0 <= r["mean"][0] <= 1.0 for r in rows)

    # A rerun reads the scores back from the results store instead of evaluating again.
    with pytest.raises(SystemExit) as exc:
        main([*args, "--format", "csv"])
    captured = capsys.readouterr()
    assert (exc.value.code or 0) == 0, captured.err
    rows = list(csv.DictReader(io.StringIO(captured.out)))
    assert sorted(r["cell"] for r in rows) == sorted(demo_cell_id(a) for a in DEMO_ALGORITHMS)
    assert {r["reused"] for r in rows} == {"yes"}


def test_wheel_ships_the_demo_cells(built_wheel):
    """The demo cells are package data: a wheel built from the sources holds every file
    (the test run's one wheel: tests/conftest.py)."""
    names = set(zipfile.ZipFile(built_wheel).namelist())
    bundled = {p.relative_to(REPO).as_posix() for p in demo_root().rglob("*") if p.is_file()}
    assert bundled and bundled <= names, sorted(bundled - names)[:5]
