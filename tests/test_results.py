"""The results store: Parquet round trip, atomic writes, resume, corrupt files, selection."""

from __future__ import annotations

import os
import time
import warnings

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from alem_eval.analysis import results as R
from alem_eval.core.errors import AlemEvalError, SelectorError
from alem_eval.analysis.results import ResultsStore, ResultsWarning, collect_warnings
from alem_eval.analysis.result_keys import (
    NON_METRIC_COLUMNS,
    ResultKey,
    ResultsError,
    build_rows,
    metric_columns,
    parse_cell_id,
)

from .synthetic import fill_store, key_for, synthetic_records


def _rows(key: ResultKey, n: int | None = None):
    b, a, d, s = parse_cell_id(key.cell)
    return build_rows(key, synthetic_records(b, a, d, s, num_episodes=n or key.num_episodes))


def test_round_trip_keeps_slash_columns_and_types(tmp_path):
    store = ResultsStore(tmp_path)
    key = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=4)
    rows = _rows(key)
    path = store.write(rows, key, extra={"num_params": 42})
    assert path == tmp_path / "1B/ippo-rnn/hard/seed0/hard" / f"synthetic-{key.digest}.parquet"
    assert store.has(key)
    df = store.get(key)
    assert list(df.columns[: len(NON_METRIC_COLUMNS)]) == list(NON_METRIC_COLUMNS)
    for name in ("Team/achievement_pct", "Team/reward_pct_of_max", "Achievements/collect_wood"):
        assert name in df.columns
        np.testing.assert_array_equal(df[name].to_numpy(), [r[name] for r in rows])
    assert df["seed"].dtype == np.int64 and df["episode"].tolist() == [0, 1, 2, 3]
    assert df["cell"].unique().tolist() == ["1B/ippo-rnn/hard/seed0"]
    assert df["alem_eval_version"].iloc[0] and df["jax_version"].iloc[0] is not None
    # The Parquet schema itself carries the verbatim names.
    assert "Team/achievement_pct" in pq.read_schema(path).names
    (entry,) = store.entries()
    assert entry.key == key and entry.extra == {"num_params": 42} and entry.num_rows == 4


def test_key_is_validated_and_stable():
    k1 = key_for("1B", "ippo-rnn", "hard", 0)
    k2 = key_for("1B", "ippo-rnn", "hard", 0)
    assert k1 == k2 and k1.digest == k2.digest and ResultKey.from_json(k1.to_json()) == k1
    assert key_for("1B", "ippo-rnn", "hard", 1).digest != k1.digest
    with pytest.raises(ResultsError):
        ResultKey("../etc/x/seed0", "hard", "fast", "h", "c", None, 20, 10000)
    with pytest.raises(ResultsError):
        ResultKey("1B/ippo-rnn/hard/seed0", "hard", "fast", "h", "c", None, 0, 10000)
    with pytest.raises(ResultsError):
        ResultKey("1B/ippo-rnn/hard/s0", "hard", "fast", "h", "c", None, 20, 10000)


def test_write_refuses_partial_or_mismatched_rows(tmp_path):
    store = ResultsStore(tmp_path)
    key = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=4)
    with pytest.raises(ResultsError, match="partial"):
        store.write(_rows(key)[:3], key)
    other = key_for("1B", "ippo-rnn", "hard", 1, num_episodes=4)
    with pytest.raises(ResultsError, match="does not match"):
        store.write(_rows(other), key)
    rows = _rows(key)
    rows[0]["Team/achievement_pct"] = "lots"
    with pytest.raises(ResultsError, match="non-numeric"):
        store.write(rows, key)
    assert not store.has(key) and store.entries() == []


def test_interrupted_write_leaves_nothing_and_a_stale_temp_is_ignored(tmp_path, monkeypatch):
    store = ResultsStore(tmp_path)
    key = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=4)
    real = pq.write_table

    def crash(table, fh, **kw):
        fh.write(b"PAR1 half a file")
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", crash)
    with pytest.raises(KeyboardInterrupt):
        store.write(_rows(key), key)
    monkeypatch.setattr(pq, "write_table", real)
    cell_dir = store.path_for(key).parent
    assert list(cell_dir.iterdir()) == []  # no final file, temp removed
    # A process killed outright leaves its temp file behind: it is never read.
    (cell_dir / ".tmp-abc123.parquet").write_bytes(b"PAR1 truncated")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a warning: temps are not results
        assert store.entries() == [] and not store.has(key)
    store.write(_rows(key), key)
    assert store.has(key) and len(store.load()) == 4


def test_resume_scores_only_missing_keys(tmp_path):
    store = ResultsStore(tmp_path)
    keys = [key_for("1B", "ippo-rnn", "hard", s, num_episodes=3) for s in range(5)]
    for k in keys[:2]:  # the first run was interrupted after two cells
        store.write(_rows(k), k)
    todo = [k for k in keys if not store.has(k)]
    assert todo == keys[2:]
    for k in todo:
        store.write(_rows(k), k)
    assert all(store.has(k) for k in keys) and len(store.load()) == 15


def test_corrupt_and_foreign_files_are_skipped_with_a_warning(tmp_path):
    store = ResultsStore(tmp_path)
    keys = fill_store(
        store,
        budgets=["1B"],
        algorithms=["ippo-rnn"],
        difficulties=["hard"],
        seeds=range(3),
        num_episodes=2,
    )
    victim = store.path_for(keys[0])
    victim.write_bytes(victim.read_bytes()[:100])  # truncated
    pd.DataFrame({"a": [1.0]}).to_parquet(tmp_path / "foreign.parquet")
    moved = tmp_path / "1B/ippo-rnn/hard/seed2/hard/elsewhere.parquet"
    store.path_for(keys[2]).rename(moved)  # right content, wrong place
    with pytest.warns(ResultsWarning) as rec:
        df = store.load()
    text = " ".join(str(w.message) for w in rec)
    assert "foreign.parquet" in text and victim.name in text and "elsewhere" in text
    assert df["cell"].unique().tolist() == ["1B/ippo-rnn/hard/seed1"]
    with pytest.warns(ResultsWarning):
        assert not store.has(keys[0]) and store.get(keys[0]) is None
    with collect_warnings() as notes:
        store.entries()
    assert len(notes) == 3


def test_load_selects_filters_and_reads_only_requested_metrics(tmp_path):
    store = ResultsStore(tmp_path)
    fill_store(
        store,
        budgets=["100M", "1B"],
        algorithms=["ippo-rnn", "pqn-vdn-rnn"],
        difficulties=["easy", "hard"],
        seeds=range(2),
        num_episodes=2,
    )
    df = store.load(["1B/ippo/hard"], metrics=["Team/reward_pct_of_max"])
    assert set(df["cell"]) == {"1B/ippo-rnn/hard/seed0", "1B/ippo-rnn/hard/seed1"}
    assert metric_columns(df) == ["Team/reward_pct_of_max"]
    assert len(store.load(["*/pqn-vdn-rnn", "100M/ippo-rnn/easy/seed1"])) == 2 * 2 * 2 * 2 + 2
    with pytest.raises(SelectorError, match="1B"):
        store.load(["1b0"])
    with pytest.raises(SelectorError):
        store.load(["../x"])
    with pytest.raises(ResultsError, match="no scored results"):
        ResultsStore(tmp_path / "empty").load()


def test_newest_provenance_wins_and_is_reported(tmp_path):
    store = ResultsStore(tmp_path)
    old = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=2)
    new = ResultKey(
        old.cell,
        old.eval_difficulty,
        old.protocol,
        "other-weights",
        old.config_hash,
        old.env_version,
        2,
        old.max_steps,
    )
    store.write(_rows(old), old)
    time.sleep(0.01)
    rows = _rows(new)
    for r in rows:
        r["Team/reward_pct_of_max"] = 0.99
    store.write(rows, new)
    with pytest.warns(ResultsWarning, match="checkpoint_hash='.*'"):
        df = store.load()
    assert (df["Team/reward_pct_of_max"] == 0.99).all() and len(df) == 2
    assert len(store.load(all_versions=True)) == 4


def test_default_location_honours_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("ALEM_EVAL_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert R.default_results_dir() == tmp_path / "alem-eval" / "results"
    assert R.open_store(None).root == tmp_path / "alem-eval" / "results"
    assert R.open_store(tmp_path / "mine").root == tmp_path / "mine"


def test_errors_are_one_line_alem_eval_errors(tmp_path):
    err = ResultsError("bad\n  thing")
    assert isinstance(err, AlemEvalError) and str(err) == "bad thing"


def test_build_rows_rejects_reserved_names():
    key = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=1)
    with pytest.raises(ResultsError, match="reserved"):
        build_rows(key, [{"seed": 3.0}])


def test_write_is_durable_file_replace(tmp_path):
    """A rewrite of the same key replaces the file in place (os.replace), never appends."""
    store = ResultsStore(tmp_path)
    key = key_for("1B", "ippo-rnn", "hard", 0, num_episodes=2)
    store.write(_rows(key), key)
    inode = os.stat(store.path_for(key)).st_ino
    store.write(_rows(key), key)
    assert os.stat(store.path_for(key)).st_ino != inode
    assert len(store.load()) == 2


def test_a_cells_key_keeps_its_digest_and_a_team_key_names_its_composition(tmp_path):
    import dataclasses
    import hashlib
    import json

    k = key_for("1B", "ippo-rnn", "hard", 0)
    # A cell's own key: the fields (and so the digest and file name) it always had.
    old = {f.name: getattr(k, f.name) for f in dataclasses.fields(k) if f.name[:4] != "team"}
    assert k.digest == hashlib.sha256(json.dumps(old, sort_keys=True).encode()).hexdigest()[:16]
    assert ResultKey.from_json(json.dumps(old)) == k

    members = ("1B/ippo-rnn/hard/seed0", "1B/ippo-rnn/hard/seed0", "1B/ippo-rnn/hard/seed1")
    team = dataclasses.replace(k, team=members, team_hash="0123456789abcdef")
    assert team.digest != k.digest and ResultKey.from_json(team.to_json()) == team
    assert team.relpath.name == f"synthetic-team-{team.digest}.parquet"
    with pytest.raises(ResultsError, match="both or neither"):
        dataclasses.replace(k, team=members)
    with pytest.raises(ResultsError, match="must be one of its members"):
        dataclasses.replace(team, team=members[2:] * 3)

    store = ResultsStore(tmp_path)
    store.write(_rows(k), k)
    store.write(build_rows(team, synthetic_records("1B", "ippo-rnn", "hard", 0)), team)
    # The cells' own scores (report, leaderboard, export) never see the team's rows.
    assert [e.key for e in store.entries()] == [k]
    assert "team" not in store.load().columns
    assert [e.key for e in store.entries(teams=True)] == [team]
    frame = store.load(teams=True)
    assert set(frame["team"]) == {",".join(members)} and len(frame) == team.num_episodes
    assert store.get(team) is not None and store.get(team)["team"].iloc[0] == ",".join(members)
