"""One unit convention in every machine output: fractions in [0, 1], the unit named
(``units`` in JSON documents, ``.attrs["units"]`` on DataFrames), no ``%`` label over a
fraction; the upstream leaderboard JSON alone is in percent (its schema's scale). Walks
``score --format json/csv``, the leaderboard's JSON / CSV / DataFrame, the report's
``stats.json``, and the cross-play and scenario JSON, CSV and DataFrames (no JAX)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest

from alem_eval.analysis.bootstrap import BootstrapSettings
from alem_eval.analysis.metrics import UNITS, metric_info
from alem_eval.analysis.results import ResultsStore
from alem_eval.api.crossplay import CrossPlay
from alem_eval.api.scenario import Scenario
from alem_eval.cli.app import main
from alem_eval.reporting.leaderboard import PERCENT, build_leaderboard
from alem_eval.reporting.report import build_report
from alem_eval.scoring.crossplay_outputs import write_outputs
from alem_eval.scoring.score import CellScore

from .synthetic import fill_store, synthetic_crossplay, synthetic_records, synthetic_scenario


def _entries(doc: Any, path: str = "$") -> Iterator[tuple[str, str, Any]]:
    """Every (path, key, value) of a JSON document, list items under the key ``[i]``."""
    items = (
        doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    )
    for k, v in items:
        key = str(k) if isinstance(doc, dict) else f"[{k}]"
        yield path, key, v
        yield from _entries(v, f"{path}.{key}")


def _numbers(v: Any) -> list[float]:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return []
    if isinstance(v, (int, float)):
        return [float(v)] if math.isfinite(v) else []
    if isinstance(v, dict):
        return [x for k, u in v.items() if not str(k).startswith("n_") for x in _numbers(u)]
    return [x for u in v for x in _numbers(u)]


def assert_fractions(doc: Any, *, named: bool = True) -> int:
    """No key and no metric label carries a ``%``; a fraction metric's values (under its
    key) lie in [0, 1], and a row about one (its ``metric``) holds numbers in [-1, 1]
    (differences, intervals; counts ``n_*`` aside); ``named``: the top level names the
    unit. Returns how many values were checked."""
    if named:
        assert doc["units"] == UNITS and "fraction" in doc["units_note"]
    checked = 0
    for path, key, value in _entries(doc):
        assert "%" not in key, f"{path}.{key}"
        if key in ("label", "metric") and isinstance(value, str):
            assert "%" not in value, f"{path}.{key} = {value!r}"
        if metric_info(key).fraction:
            for x in _numbers(value):
                assert 0.0 <= x <= 1.0, f"{path}.{key}: {x} is not a fraction"
                checked += 1
        elif isinstance(value, dict) and metric_info(str(value.get("metric"))).fraction:
            for x in _numbers(value):
                assert -1.0 <= x <= 1.0, f"{path}.{key}: {x} is not on the fraction scale"
                checked += 1
    return checked


def assert_frame_fractions(df: pd.DataFrame, columns) -> None:
    assert df.attrs.get("units") == UNITS
    assert not [c for c in df.columns if "%" in str(c)]
    assert not [v for v in df.get("metric", pd.Series(dtype=str)) if "%" in str(v)]
    values = df[list(columns)].to_numpy(dtype=float)
    values = values[~pd.isna(values)]
    assert values.size and (values >= -1).all() and (values <= 1).all()


# ----------------------------------------------------------------------------------------
# score --format json / csv (the scoring stubbed: synthetic episodes)
# ----------------------------------------------------------------------------------------
@pytest.fixture
def stub_score(monkeypatch):
    import alem_eval.core.runtime as runtime
    import alem_eval.scoring.score as score_module

    def score_cells(src, cells, **_):
        return [
            CellScore(
                c,
                c.difficulty,
                "fast",
                tuple(synthetic_records("1B", "ippo-rnn", "easy", 0, num_episodes=3)),
            )
            for c in cells
        ]

    monkeypatch.setattr(score_module, "score_cells", score_cells)
    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda *a, **k: None)


def _cli(args, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    assert exc.value.code in (0, None), out.err
    return out.out


def test_score_json_and_csv_hold_fractions_and_name_their_unit(stub_score, tmp_path, capsys):
    args = ["score", "--source", "demo", "--results", str(tmp_path / "r")]
    records = json.loads(_cli([*args, "--format", "json"], capsys))
    assert records and all(assert_fractions(r) >= 4 * 3 for r in records)
    rows = list(csv.DictReader(io.StringIO(_cli([*args, "--format", "csv"], capsys))))
    assert rows and not [c for c in rows[0] if "%" in c]
    for r in rows:
        for k, v in r.items():
            if metric_info(k).fraction and v != "":
                assert 0.0 <= float(v) <= 1.0, (k, v)


# ----------------------------------------------------------------------------------------
# The leaderboard and the report
# ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = ResultsStore(tmp_path_factory.mktemp("results"))
    fill_store(
        s,
        algorithms=["ippo-rnn", "mappo-rnn"],
        difficulties=["easy"],
        seeds=range(2),
        num_episodes=3,
    )
    return s


def test_leaderboard_frame_and_csv_are_fractions_its_upstream_json_percent(store):
    lb = build_leaderboard(store, settings=BootstrapSettings(reps=200))
    df = lb.to_frame()
    scores = [c for c in df.columns if c.startswith("easy_") and not c.endswith("_seeds")]
    assert len(scores) == 9
    assert_frame_fractions(df, scores)
    rows = list(csv.DictReader(io.StringIO(lb.to_csv())))
    assert [float(r["easy_total"]) for r in rows] == pytest.approx(
        df["easy_total"].tolist(), abs=1e-6
    )
    # The one exception: upstream's leaderboard entry schema publishes percent.
    entries = json.loads(lb.to_json())
    for e, (_, r) in zip(entries, df.iterrows(), strict=True):
        assert e["scores"]["easy"]["total"] == [
            round(PERCENT * r[f"easy_total{s}"], 2) for s in ("", "_lo", "_hi")
        ]
    assert "in percent" in lb.to_markdown() and "in percent" in lb.to_latex()


def test_report_stats_json_holds_fractions_and_names_its_unit(store, tmp_path):
    res = build_report(
        store, tmp_path / "rep", settings=BootstrapSettings(reps=200), metrics=["total"]
    )
    doc = json.loads(res.stats_json.read_text())
    assert assert_fractions(doc) > 0
    means = [h["mean"] for h in doc["headline"]]
    assert means and all(0 <= x <= 1 for m in means for x in m)


# ----------------------------------------------------------------------------------------
# Cross-play and scenario
# ----------------------------------------------------------------------------------------
def test_crossplay_json_csv_and_frames_hold_fractions(tmp_path):
    result = synthetic_crossplay(4)
    doc = result.as_json()
    assert assert_fractions(doc) > 0
    assert [g["label"] for g in doc["gaps"]] == ["Total", "Base", "Coord"]
    paths = write_outputs(result, tmp_path)
    assert assert_fractions(json.loads(paths[-1].read_text())) > 0
    teams = list(csv.DictReader(io.StringIO((tmp_path / "teams.csv").read_text())))
    assert teams and not [c for c in teams[0] if "%" in c]
    assert all(0 <= float(t["Team/reward_pct_of_max"]) <= 1 for t in teams)
    api = CrossPlay(result)
    assert_frame_fractions(api.gap, ["self", "cross", "gap", "lo", "hi"])
    assert_frame_fractions(api.matrix, list(api.matrix.columns))
    assert_frame_fractions(
        api.to_frame(), ["Team/reward_pct_of_max", "Team/coord_reward_pct_of_max"]
    )


def test_scenario_json_and_table_hold_fractions_named_without_percent():
    s = Scenario(synthetic_scenario(4))
    doc = s.to_json()
    assert assert_fractions(doc) > 0
    assert {r["label"] for r in doc["rows"]} == {"Total", "Base", "Coord"}
    table = s.table
    assert set(table["metric"]) == {"Total", "Base", "Coord"}
    assert table.loc[0, "focal"] < 0.1  # the fraction, not 2.2 (percent) under "Total%"
    assert_frame_fractions(
        table, [c for c in table.columns if c.split("_")[0] in ("focal", "self", "cross")]
    )
    assert_frame_fractions(s.teams, ["Team/reward_pct_of_max", "Team/coord_reward_pct_of_max"])
