"""marl-eval export and merging another alem-eval results directory."""

from __future__ import annotations

import json
import re

import pytest

from alem_eval.analysis.aggregate import prepare
from alem_eval.cli.app import main
from alem_eval.core.errors import UsageError
from alem_eval.analysis.interop import (
    export_marl_eval,
    marl_eval_metric_name,
    merge_results,
    to_marl_eval,
)
from alem_eval.analysis.results import ResultsStore
from alem_eval.analysis.result_keys import ResultKey, build_rows

from .synthetic import fill_store, key_for, synthetic_records

SMALL = dict(
    budgets=["100M", "1B"],
    algorithms=["ippo-rnn"],
    difficulties=["easy", "hard"],
    seeds=range(2),
    num_episodes=3,
)


def test_marl_eval_layout(tmp_path):
    store = ResultsStore(tmp_path / "res")
    fill_store(store, **SMALL)
    text, prepared = export_marl_eval(store, tmp_path / "m.json")
    data = json.loads((tmp_path / "m.json").read_text())
    assert json.loads(text) == data and list(data) == ["alem"]
    assert set(data["alem"]) == {"easy", "hard"}
    task = data["alem"]["hard"]
    assert set(task) == {"ippo-rnn_100m", "ippo-rnn_1b"}
    run = task["ippo-rnn_1b"]["seed_1"]
    assert list(run) == ["step_0", "absolute_metrics"]
    assert run["step_0"]["step_count"] == 1_000_000_000
    assert "team_reward_pct_of_max" in run["absolute_metrics"]
    df = store.load(["1B/ippo-rnn/hard/seed1"])
    assert run["absolute_metrics"]["team_reward_pct_of_max"] == pytest.approx(
        df.sort_values("episode")["Team/reward_pct_of_max"].tolist()
    )
    assert len(run["step_0"]["team_achievement_pct"]) == 3
    assert marl_eval_metric_name("Team/coord_reward_pct_of_max") == "team_coord_reward_pct_of_max"


def test_marl_eval_export_of_chosen_metrics_and_collisions(tmp_path):
    store = ResultsStore(tmp_path / "res")
    fill_store(store, **SMALL)
    text, _ = export_marl_eval(store, None, metrics=["episode_return"])
    run = json.loads(text)["alem"]["easy"]["ippo-rnn_100m"]["seed_0"]
    assert set(run["absolute_metrics"]) == {"episode_return"}
    prepared = prepare(store, metrics=["Team/reward_pct_of_max"])
    with pytest.raises(UsageError, match="collide"):
        to_marl_eval(prepared, ["Team/reward_pct_of_max", "team/reward_pct_of_max"])


def _concatenate_like_marl_eval(directory):
    """What marl-eval's ``json_tools.concatenate_json_files`` does with the files of a
    directory (instadeepai/marl-eval ``marl_eval/json_tools/json_utils.py``; id-marl-eval
    0.0.4 pins pandas 1.4.4 and imports neptune, so it is not installed here): the runs of
    each environment / task / algorithm are pooled, and a run key already taken is renamed
    to the next free number, which works only for a key that is all digits or exactly one
    ``<name>_<number>`` (anything else, e.g. ``seed0``, is a ValueError)."""

    def next_key(key):
        if key.isdigit():
            return str(int(key) + 1)
        name, number = key.split("_")  # ValueError unless exactly one "_"
        return f"{name}_{int(number) + 1}"

    pooled: dict = {}
    for path in sorted(directory.rglob("*.json")):
        for env, tasks in json.loads(path.read_text()).items():
            for task, algos in tasks.items():
                for algo, runs in algos.items():
                    into = pooled.setdefault(env, {}).setdefault(task, {}).setdefault(algo, {})
                    for key, run in runs.items():
                        while key in into:
                            key = next_key(key)
                        into[key] = run
    return pooled


def test_marl_eval_runs_are_keyed_like_its_logger_and_exports_concatenate(tmp_path):
    """Runs are ``seed_<N>`` (marl-eval's JsonLogger key): shards of disjoint seeds pool
    under their own seeds, and overlapping exports are renumbered, not an error."""
    shards = [ResultsStore(tmp_path / f"shard{i}") for i in range(2)]
    for i, store in enumerate(shards):
        fill_store(store, **{**SMALL, "budgets": ["1B"], "seeds": range(2 * i, 2 * i + 2)})
    out = tmp_path / "exports"
    runs_of = []
    for i, store in enumerate(shards):
        text, _ = export_marl_eval(store, out / f"shard{i}.json")
        runs_of.append(json.loads(text)["alem"]["hard"]["ippo-rnn_1b"])
    assert all(re.fullmatch(r"seed_\d+", k) for runs in runs_of for k in runs)
    pooled = _concatenate_like_marl_eval(out)["alem"]["hard"]["ippo-rnn_1b"]
    assert pooled == {**runs_of[0], **runs_of[1]}
    assert sorted(pooled) == [f"seed_{s}" for s in range(4)]

    export_marl_eval(shards[0], out / "again" / "shard0.json")  # the same runs once more
    pooled = _concatenate_like_marl_eval(out)["alem"]["hard"]["ippo-rnn_1b"]
    assert len(pooled) == 6 and all(re.fullmatch(r"seed_\d+", k) for k in pooled)


def test_marl_eval_export_of_several_difficulties_warns_they_are_separate_tasks(tmp_path, capsys):
    """Difficulties are the benchmark's separate tasks, never averaged: exporting several
    warns (an attribute, and one stderr line), and --difficulty exports one."""
    store = ResultsStore(tmp_path / "res")
    fill_store(store, **SMALL)
    both = export_marl_eval(store, None)
    assert both.tasks == ("easy", "hard") and set(json.loads(both.text)["alem"]) == {"easy", "hard"}
    assert both.warning and "separate marl-eval tasks" in both.warning
    assert "never average" in both.warning
    one = export_marl_eval(store, None, difficulty="hard")
    assert one.tasks == ("hard",) and one.warning is None
    assert list(json.loads(one.text)["alem"]) == ["hard"]
    with pytest.raises(UsageError, match=r"--difficulty medium: .*present: easy, hard"):
        export_marl_eval(store, None, difficulty="medium")

    code, _, err = run(["export", "--results", str(store.root)], capsys)
    warned = [line for line in err.splitlines() if line.startswith("warning")]
    assert code == 0 and warned == [f"warning {both.warning}"]
    code, out, err = run(["export", "--results", str(store.root), "--difficulty", "hard"], capsys)
    assert code == 0 and "warning" not in err and list(json.loads(out)["alem"]) == ["hard"]
    code, _, err = run(["export", "--results", str(store.root), "--difficulty", "medium"], capsys)
    assert code == 2 and err.startswith("alem-eval: error: --difficulty medium")
    assert len(err.strip().splitlines()) == 1


def _write_cell(store, budget, seed, edit=lambda recs: recs):
    recs = edit(synthetic_records(budget, "ippo-rnn", "easy", seed, num_episodes=3))
    key = key_for(budget, "ippo-rnn", "easy", seed, num_episodes=3)
    store.write(build_rows(key, recs, jax_version="0.4.38"), key)


def test_marl_eval_never_gets_an_empty_or_silently_short_list(tmp_path):
    """marl-eval averages each run's list: an empty one becomes NaN in its matrices."""
    store = ResultsStore(tmp_path / "res")

    def older(recs):  # scored before the metric existed: no value of it at all
        return [{k: v for k, v in r.items() if k != "Team/achievement_pct"} for r in recs]

    def one_nan(recs):
        recs[1]["Team/reward_pct_of_max"] = float("nan")
        return recs

    _write_cell(store, "1B", 0, older)
    _write_cell(store, "1B", 1, one_nan)
    text, prepared = export_marl_eval(store, None)
    runs = json.loads(text)["alem"]["easy"]["ippo-rnn_1b"]
    for run in runs.values():
        assert "team_achievement_pct" not in run["absolute_metrics"]
        assert all(len(v) > 0 for v in run["absolute_metrics"].values())
    assert len(runs["seed_1"]["absolute_metrics"]["team_reward_pct_of_max"]) == 2
    assert len(runs["seed_0"]["absolute_metrics"]["team_reward_pct_of_max"]) == 3
    notes = " | ".join(prepared.notes)
    assert "left out team_achievement_pct" in notes and "1 non-finite value" in notes


def test_marl_eval_names_that_coincide_once_lower_cased_are_an_error(tmp_path):
    store = ResultsStore(tmp_path / "res")
    _write_cell(store, "tiny", 0)
    _write_cell(store, "Tiny", 0)  # marl-eval would keep one of the two ippo-rnn_tiny
    with pytest.raises(UsageError, match="collide once lower-cased"):
        export_marl_eval(store, None)


def test_marl_eval_export_notes_one_seed(tmp_path):
    store = ResultsStore(tmp_path / "res")
    _write_cell(store, "1B", 0)
    _, prepared = export_marl_eval(store, None)
    assert any("zero width" in n for n in prepared.notes)


def test_merge_copies_skips_and_reports_conflicts(tmp_path):
    ours, theirs = ResultsStore(tmp_path / "ours"), ResultsStore(tmp_path / "theirs")
    fill_store(ours, **{**SMALL, "budgets": ["1B"]})
    fill_store(theirs, **SMALL)
    rep = merge_results(ours, theirs, dry_run=True)
    assert len(rep.copied) == 4 and len(rep.identical) == 4 and not ours.has(rep.copied[0])
    rep = merge_results(ours, theirs)
    assert len(rep.copied) == 4 and len(rep.identical) == 4 and not rep.conflicts
    assert len(ours.entries()) == 8
    assert merge_results(ours, theirs).copied == ()  # idempotent

    # Same key, different numbers: a content conflict; ours kept unless told otherwise.
    key = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=3)
    rows = build_rows(
        key, synthetic_records("1B", "ippo-rnn", "hard", 0, num_episodes=3, rng_seed=99)
    )
    theirs.write(rows, key)
    rep = merge_results(ours, theirs)
    (c,) = rep.conflicts
    assert c.kind == "content" and c.resolution == "kept ours" and c.cell == key.cell
    rep = merge_results(ours, theirs, prefer="theirs")
    assert rep.replaced == (key,)
    assert ours.get(key)["Team/reward_pct_of_max"].tolist() == pytest.approx(
        [r["Team/reward_pct_of_max"] for r in rows]
    )

    # The same cell scored from other weights: a provenance conflict; both kept.
    other = ResultKey(
        key.cell,
        key.eval_difficulty,
        key.protocol,
        "different-weights",
        key.config_hash,
        key.env_version,
        3,
        key.max_steps,
    )
    theirs.write(
        build_rows(other, synthetic_records("1B", "ippo-rnn", "hard", 0, num_episodes=3)), other
    )
    rep = merge_results(ours, theirs)
    (c,) = rep.conflicts
    assert c.kind == "provenance" and "checkpoint_hash" in c.detail and rep.copied == (other,)
    assert ours.has(key) and ours.has(other)


def test_merge_bad_input(tmp_path):
    store = ResultsStore(tmp_path / "ours")
    with pytest.raises(UsageError, match="into itself"):
        merge_results(store, ResultsStore(tmp_path / "ours"))
    with pytest.raises(UsageError, match="--prefer"):
        merge_results(store, ResultsStore(tmp_path / "x"), prefer="mine")


def run(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    return exc.value.code or 0, out.out, out.err


def test_export_and_merge_commands(tmp_path, capsys):
    src, dst = ResultsStore(tmp_path / "a"), ResultsStore(tmp_path / "b")
    fill_store(src, **SMALL)
    code, out, err = run(
        ["merge", str(src.root), "--results", str(dst.root), "--format", "json"], capsys
    )
    assert code == 0, err
    assert json.loads(out) == [] and "copied 8 new" in err
    code, out, err = run(["export", "--results", str(dst.root), "--metric", "total"], capsys)
    assert code == 0, err
    assert set(json.loads(out)["alem"]["easy"]["ippo-rnn_1b"]["seed_0"]["absolute_metrics"]) == {
        "team_reward_pct_of_max"
    }
    code, out, err = run(["merge", str(tmp_path / "none"), "--results", str(dst.root)], capsys)
    assert code == 1 and "no results directory" in err


def test_marl_eval_export_refuses_a_grid_with_missing_runs(tmp_path):
    """marl-eval indexes every algorithm by the first one's run names: a missing seed
    would break it or misalign silently, so it is a one-line error naming the gap."""
    store = ResultsStore(tmp_path / "res")
    fill_store(
        store,
        budgets=["1B"],
        algorithms=["ippo-rnn"],
        difficulties=["hard"],
        seeds=range(3),
        num_episodes=2,
    )
    fill_store(
        store,
        budgets=["1B"],
        algorithms=["mappo-rnn"],
        difficulties=["hard"],
        seeds=range(2),
        num_episodes=2,
    )
    with pytest.raises(UsageError, match=r"missing: 1B/mappo-rnn/hard/seed2 \(") as err:
        export_marl_eval(store, None)
    assert "\n" not in str(err.value)
    text, prepared = export_marl_eval(store, None, complete_subgrid=True)
    task = json.loads(text)["alem"]["hard"]
    assert {a: sorted(runs) for a, runs in task.items()} == {
        "ippo-rnn_1b": ["seed_0", "seed_1"],
        "mappo-rnn_1b": ["seed_0", "seed_1"],
    }
    assert any("1 scored runs left out" in n for n in prepared.notes)


def test_largest_complete_grid_drops_what_costs_least():
    from alem_eval.analysis.interop import largest_complete_grid

    a, b = ("1B", "ippo-rnn"), ("1B", "mappo-rnn")
    present = {("hard", a, s) for s in range(5)} | {("hard", b, 0)}
    # keeping both entries leaves 1 seed (2 runs); dropping b keeps 5 seeds (5 runs)
    assert largest_complete_grid(present) == (("hard",), (a,), (0, 1, 2, 3, 4))


def test_merge_brings_the_teams_along_and_keeps_them_apart(tmp_path):
    import dataclasses

    ours, theirs = ResultsStore(tmp_path / "ours"), ResultsStore(tmp_path / "theirs")
    fill_store(theirs, **SMALL)
    cell = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=3)
    team = dataclasses.replace(
        cell, team=(cell.cell, cell.cell, "1B/ippo-rnn/hard/seed1"), team_hash="0" * 16
    )
    records = synthetic_records("1B", "ippo-rnn", "hard", 0, num_episodes=3)
    theirs.write(build_rows(team, records), team)
    rep = merge_results(ours, theirs)
    assert team in rep.copied and len(rep.copied) == len(theirs.entries()) + 1
    assert [e.key for e in ours.entries(teams=True)] == [team]  # the team came along
    assert team not in {e.key for e in ours.entries()}  # and stays out of cell scores
    assert merge_results(ours, theirs).copied == ()  # idempotent, teams too
