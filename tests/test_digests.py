"""Results and config digests, seals, and ``verify-results`` (synthetic stores, no JAX)."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from alem_eval.analysis.digests import (
    META_SEAL,
    canonical_json,
    leaf_hash,
    merkle_root,
    path_digests,
    store_digests,
)
from alem_eval.analysis.results import ResultsStore
from alem_eval.core.errors import UsageError
from alem_eval.analysis.verify_results import verify_results

from .synthetic import fill_store

SMALL = dict(budgets=("1B",), algorithms=("ippo-rnn", "mappo-rnn"), difficulties=("easy",))


def _store(tmp_path, name="results", **kw):
    store = ResultsStore(tmp_path / name)
    keys = fill_store(store, **{**SMALL, "seeds": range(2), "num_episodes": 5, **kw})
    return store, keys


def _rewrite(path, edit_table=None, edit_meta=None):
    """Edit a results file in place as a hand would: the table and/or its metadata, the
    rest (the seal included) kept."""
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    if edit_table is not None:
        table = edit_table(table)
    if edit_meta is not None:
        meta = edit_meta(meta)
    pq.write_table(table.replace_schema_metadata(meta), path)


def _set_value(column, episode, value):
    import pyarrow as pa

    def edit(table):
        values = table.column(column).to_pylist()
        episodes = table.column("episode").to_pylist()
        values[episodes.index(episode)] = value
        i = table.column_names.index(column)
        return table.set_column(i, column, pa.array(values, type=table.schema.field(i).type))

    return edit


def test_merkle_root_is_rfc6962s_tree_hash():
    import hashlib

    a, b, c = (leaf_hash(x) for x in (b"a", b"b", b"c"))

    def node(left, right):
        return hashlib.sha256(b"\x01" + left + right).digest()

    assert merkle_root([]) == hashlib.sha256(b"").digest()
    assert merkle_root([a]) == a
    assert merkle_root([a, b, c]) == node(node(a, b), c)
    assert canonical_json({"b": 1, "a": [1.5, None]}) == b'{"a":[1.5,null],"b":1}'


def test_results_digest_is_stable_and_insensitive_to_file_and_row_order(tmp_path):
    store, keys = _store(tmp_path)
    first = store_digests(store, keys, {"command": "t"})
    assert store_digests(store, list(reversed(keys)), {"command": "t"}) == first
    # The same records written again (another write time, another store, reversed rows).
    other, _ = _store(tmp_path, "again")
    again = store_digests(other, keys, {"command": "t"})
    assert (again.results, again.config) == (first.results, first.config)
    path = store.path_for(keys[0])
    table = pq.read_table(path)
    pq.write_table(table.take(list(range(table.num_rows))[::-1]), path)
    assert store_digests(store, keys, {"command": "t"}).results == first.results
    assert verify_results(path).ok  # its rows, in another order, still match its seal
    # Another setting of the output changes the config digest only.
    changed = store_digests(store, keys, {"command": "t", "reps": 2})
    assert changed.results == first.results and changed.config != first.config
    assert len(first.results) == len(first.config) == 64


def test_a_store_whose_files_match_their_seals_verifies_in_one_line(tmp_path):
    store, keys = _store(tmp_path)
    report = verify_results(store.root)
    assert report.ok and report.first_difference is None
    assert report.summary() == f"{store.root}: 4 results files, 20 episodes match their digests"
    assert list(report.to_frame()["status"]) == ["ok"] * 4
    seal = json.loads(pq.read_metadata(store.path_for(keys[0])).metadata[META_SEAL])
    assert seal["algorithm"] == "sha256-merkle-v1" and len(seal["episodes"]) == 5


def test_one_edited_value_is_named_by_file_episode_and_column(tmp_path):
    store, keys = _store(tmp_path)
    path = store.path_for(keys[1])
    _rewrite(path, _set_value("Team/reward_pct_of_max", 3, 0.99))
    report = verify_results(store.root)
    assert not report.ok
    d = report.first_difference
    assert (d.episode, d.column) == (3, "Team/reward_pct_of_max")
    assert keys[1].cell in d.where and keys[1].relpath.as_posix() in d.where
    assert "episode 3, column Team/reward_pct_of_max differs" in report.summary()
    frame = report.to_frame().set_index("path")
    rel = keys[1].relpath.as_posix()
    assert frame.loc[rel, "status"] == "differs" and "episode 3" in frame.loc[rel, "difference"]
    assert (frame.drop(index=rel)["status"] == "ok").all()
    # The file alone says the same.
    alone = verify_results(path).first_difference
    assert (alone.episode, alone.column) == (3, "Team/reward_pct_of_max")


def test_a_key_setting_changed_in_place_is_named(tmp_path):
    store, keys = _store(tmp_path)
    path = store.path_for(keys[0])

    def more_steps(meta):
        key = json.loads(meta[b"alem_eval.result_key"])
        key["max_steps"] = 20000
        return {**meta, b"alem_eval.result_key": json.dumps(key, sort_keys=True).encode()}

    _rewrite(path, edit_meta=more_steps)
    d = verify_results(path).first_difference
    assert d.setting == "max_steps"
    assert "key setting max_steps is 20000, sealed as 10000" in d.what
    # In its store: named first, then the file's key no longer matching its path.
    store_report = verify_results(store.root)
    assert [x.setting for x in store_report.differences] == ["max_steps", "path"]


def test_files_written_before_seals_are_reported_unsealed_not_failed(tmp_path):
    store, keys = _store(tmp_path)
    sealed = store_digests(store, keys, {})

    def unseal(meta):
        return {k: v for k, v in meta.items() if k != META_SEAL}

    _rewrite(store.path_for(keys[0]), edit_meta=unseal)
    report = verify_results(store.root)
    assert report.ok and report.unsealed == (keys[0].relpath.as_posix(),)
    assert "1 unsealed" in report.summary()
    # Its records enter an output's digests all the same, computed from its rows.
    unsealed = store_digests(store, keys, {})
    assert (unsealed.results, unsealed.config) == (sealed.results, sealed.config)


def _output(tmp_path, store, keys, settings=None):
    digests = store_digests(store, keys, settings or {"command": "t", "reps": 10})
    out = tmp_path / "out.json"
    out.write_text(json.dumps({"numbers": [1, 2], "digests": digests.as_json()}))
    return out, digests


def test_an_output_json_verifies_against_the_store_it_names(tmp_path):
    store, keys = _store(tmp_path)
    out, digests = _output(tmp_path, store, keys)
    report = verify_results(out)
    assert report.ok, report.summary()
    assert report.kind == "output" and len(report.files) == 4
    assert report.digests[0] == {"results": digests.results, "config": digests.config}
    # A moved store: pointed at with store=.
    moved = tmp_path / "moved"
    shutil.move(store.root, moved)
    assert not verify_results(out).ok
    assert verify_results(out, store=moved).ok


def test_an_output_json_names_an_edited_episode_and_a_changed_setting(tmp_path):
    store, keys = _store(tmp_path)
    out, _ = _output(tmp_path, store, keys)
    doc = json.loads(out.read_text())
    doc["digests"]["config_document"]["runs"][2]["max_steps"] = 60
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    d = verify_results(edited).first_difference
    assert d.where == "config" and d.setting.endswith(".max_steps")
    assert "60 in the output, 10000 in the store" in d.what

    _rewrite(store.path_for(keys[2]), _set_value("episode_return", 0, -1.0))
    d = verify_results(out).first_difference
    assert (d.episode, d.column) == (0, "episode_return")


def test_a_file_scored_again_differs_from_the_output_that_used_the_first(tmp_path):
    store, keys = _store(tmp_path)
    out, _ = _output(tmp_path, store, keys)
    fill_store(store, **SMALL, seeds=range(1), num_episodes=5, rng_seed=7)  # new records
    report = verify_results(out)
    assert not report.ok
    assert "records differ from the output's: the file was written again" in report.summary()


def test_score_records_carry_their_own_digests(tmp_path):
    """A list output (``score --format json``): each record's ``digests`` is checked."""
    store, keys = _store(tmp_path)
    records = [
        {"cell": k.cell, "digests": path_digests(store.root, [store.path_for(k)], {}).as_json()}
        for k in keys
    ]
    out = tmp_path / "score.json"
    out.write_text(json.dumps(records))
    report = verify_results(out)
    assert report.ok and report.outputs == 4
    records[1]["digests"]["results"] = "0" * 64
    out.write_text(json.dumps(records))
    d = verify_results(out).first_difference
    assert d.where == f"[1] {keys[1].cell} results"


def test_the_command_exits_non_zero_with_one_line(tmp_path, capsys):
    from alem_eval.cli.app import main

    store, keys = _store(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(["verify-results", str(store.root)])
    out = capsys.readouterr()
    assert (exc.value.code or 0) == 0, out.err
    assert out.out.strip().endswith("20 episodes match their digests")

    _rewrite(store.path_for(keys[0]), _set_value("Team/achievement_pct", 4, 0.5))
    with pytest.raises(SystemExit) as exc:
        main(["verify-results", str(store.root)])
    out = capsys.readouterr()
    assert exc.value.code == 1 and out.out == ""
    [line] = out.err.splitlines()
    assert line.startswith("alem-eval: error: ")
    assert "episode 4, column Team/achievement_pct" in line

    with pytest.raises(SystemExit) as exc:
        main(["verify-results", str(tmp_path / "nothing.json")])
    assert exc.value.code == 2 and len(capsys.readouterr().err.splitlines()) == 1


def test_leaderboard_and_report_name_the_digests_of_the_records_they_used(tmp_path):
    from alem_eval.analysis.bootstrap import BootstrapSettings
    from alem_eval.reporting.leaderboard import build_leaderboard
    from alem_eval.reporting.report import build_report

    store, keys = _store(tmp_path, seeds=range(3))
    # A cross-difficulty file: in the store, not in the numbers (nor in their digest).
    from .synthetic import key_for, synthetic_records
    from alem_eval.analysis.result_keys import build_rows

    cross = key_for("1B", "ippo-rnn", "easy", 0, num_episodes=5, eval_difficulty="hard")
    store.write(
        build_rows(cross, synthetic_records("1B", "ippo-rnn", "easy", 0, num_episodes=5)), cross
    )
    settings = BootstrapSettings(reps=200)
    lb = build_leaderboard(store, settings=settings)
    used = store_digests(store, keys, {})
    assert lb.digests.results == used.results
    assert f"Results digest {used.results}" in lb.to_markdown()
    assert f"Results digest {used.results}" in lb.to_latex()
    assert all(used.results in e["config"] for e in json.loads(lb.to_json()))
    entries = tmp_path / "leaderboard.json"
    entries.write_text(lb.to_json())
    with pytest.raises(UsageError, match="digests in their config text"):
        verify_results(entries)

    res = build_report(store, tmp_path / "report", settings=settings, jobs=1)
    stats = json.loads(res.stats_json.read_text())
    assert stats["digests"]["results"] == used.results
    assert f"Results digest {used.results}" in res.markdown.read_text()
    assert verify_results(res.stats_json).ok


def test_a_crossplay_json_names_the_digests_of_its_teams_and_verifies(tmp_path, monkeypatch):
    """``run_teams`` faked (no compile): the teams' records go to the store, crossplay.json
    names their digests, and verify-results checks it against that store."""
    from alem_eval.evaluate import rollout
    from alem_eval.evaluate.rollout import StackResult
    from alem_eval.evaluate.settings import CHUNK
    from alem_eval.hub.sources import open_source
    from alem_eval.scoring.crossplay import GAP_METRICS, run_crossplay
    from alem_eval.scoring.crossplay_outputs import write_outputs

    from .conftest import FIXTURES

    def run_teams(cfgs, weights, teams, *, num_episodes, on_team=None, **_):
        records = [
            [
                {**dict.fromkeys(GAP_METRICS, 0.1 * i + 0.01 * e), "episode_length": 4.0}
                for e in range(num_episodes)
            ]
            for i in range(len(teams))
        ]
        for i, recs in enumerate(records):
            on_team(i, recs)
        return StackResult(records, [], "fast", "hard", CHUNK)

    monkeypatch.setattr(rollout, "run_teams", run_teams)
    source = open_source(str(FIXTURES))
    store = ResultsStore(tmp_path / "results")
    result = run_crossplay(
        source,
        source.select(["tiny/ippo-rnn"]),
        eval_difficulty="hard",
        num_episodes=2,
        max_steps=32,
        reps=10,
        store=store,
    )
    keys = [t.result_key for t in result.teams]
    expected = store_digests(store, keys, {})
    assert result.digests.results == expected.results and len(result.digests.files) == 8
    assert result.digests.document["settings"]["scheme"] == "pairs"
    paths = write_outputs(result, tmp_path / "out")
    doc = json.loads(paths[-1].read_text())
    assert doc["digests"]["results"] == expected.results
    assert verify_results(paths[-1]).ok
    _rewrite(store.path_for(keys[3]), _set_value("episode_length", 1, 5.0))
    d = verify_results(paths[-1]).first_difference
    assert (d.episode, d.column) == (1, "episode_length") and "team " in d.where


def test_the_documented_recipe_recomputes_the_results_digest_without_alem_eval(tmp_path):
    """docs/results-digests.md's Python (pyarrow and the standard library only) gives the
    digest alem-eval computes, NaN metrics included."""
    import math
    import re

    from alem_eval.analysis.result_keys import build_rows

    from .conftest import REPO
    from .synthetic import key_for, synthetic_records

    text = (REPO / "docs" / "results-digests.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    recipe: dict = {}
    exec(code, recipe)
    store, keys = _store(tmp_path)
    key = key_for("1B", "pqn-vdn-rnn", "easy", 0, num_episodes=3)
    records = synthetic_records("1B", "pqn-vdn-rnn", "easy", 0, num_episodes=3)
    records[1]["Team/achievement_pct"] = math.nan
    store.write(build_rows(key, records), key)
    keys.append(key)
    paths = [store.path_for(k) for k in keys]
    assert recipe["results_digest"](paths) == store_digests(store, keys, {}).results


def test_scenario_and_crossplay_paper_tables_carry_the_digest_line():
    """The LaTeX and Markdown tables of a scenario and a cross-play result name the
    digests of the records behind them, like the leaderboard's footer."""
    from dataclasses import replace

    from alem_eval.analysis.digests import Digests, footer_digest_line

    from .synthetic import synthetic_crossplay, synthetic_scenario

    d = Digests(results="ab" * 32, config="cd" * 32, store=None, files=(), document={})
    for result in (synthetic_scenario(), synthetic_crossplay()):
        assert footer_digest_line(d) not in result.to_markdown()
        sealed = replace(result, digests=d)
        assert footer_digest_line(d) in sealed.to_markdown()
        assert "ab" * 32 in sealed.to_latex()
