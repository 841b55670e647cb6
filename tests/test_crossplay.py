"""Cross-play: team compositions, the gap statistic (no JAX) and `alem-eval crossplay` end
to end (one compiled rollout, team rows in the results store, resume, one-line errors)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import shutil
import warnings
from collections import Counter

import numpy as np
import pytest

from alem_eval.scoring import crossplay as crossplay_module
from alem_eval.scoring.crossplay import pair_matrix
from alem_eval.scoring.teams import Team, compositions
from alem_eval.hub.demo_cells import (
    demo_root,
)
from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.hub.manifest import Cell

from .clitools import (
    assert_one_line_error,
    cli_env,
    closed_port_url,
    run_cli,
    run_cli_in_process,
)
from .conftest import FIXTURES
from .eval_support import DEMO_PROGRAMS

IPPO = [Cell.from_id(f"1B/ippo-rnn/hard/seed{s}") for s in range(3)]
MIXED = [*IPPO, Cell.from_id("1B/mappo-rnn/hard/seed0"), Cell.from_id("1B/pqn-vdn-rnn/hard/seed0")]


# ----------------------------------------------------------------------------------------
# Compositions
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 5])
def test_pairs_are_every_ordered_pair_in_every_slot_plus_each_self_play(n):
    cells = MIXED[:n]
    ids = [c.id for c in cells]
    teams = compositions(cells, "pairs")
    assert len(teams) == n * (n - 1) * 3 + n
    assert len(set(teams)) == len(teams)
    assert teams[:n] == [Team((c,) * 3) for c in ids]  # self-play first, in order
    pairs = Counter(t.pair for t in teams[n:])
    assert set(pairs) == {
        (a, b, pos) for a, b in itertools.permutations(ids, 2) for pos in range(3)
    }
    assert set(pairs.values()) == {1}
    for t in teams[n:]:
        a, b, pos = t.pair
        assert t.slots[pos] == b and t.slots.count(a) == 2 and t.anchor == a


def test_distinct_teams_are_all_of_them_under_the_cap_and_a_seeded_sample_over_it():
    ids = [c.id for c in MIXED]
    every = {Team(p) for p in itertools.permutations(ids, 3)}  # 5 * 4 * 3 = 60
    exact = compositions(MIXED, "distinct", max_teams=60, seed=3)
    assert exact[:5] == [Team((c,) * 3) for c in ids]
    assert set(exact[5:]) == every and len(exact) == 65

    sample = compositions(MIXED, "distinct", max_teams=7, seed=3)
    assert len(sample) == 5 + 7 and set(sample[5:]) <= every
    assert all(t.shape == "distinct" for t in sample[5:])
    assert compositions(MIXED, "distinct", max_teams=7, seed=3) == sample  # seeded
    others = {tuple(compositions(MIXED, "distinct", max_teams=7, seed=s)) for s in range(4, 9)}
    assert tuple(sample) not in others  # another seed, another sample


def test_mixed_teams_span_several_algorithms_and_need_two():
    teams = compositions(MIXED, "mixed", max_teams=1000)[5:]
    assert teams and all(len({t.split("/")[1] for t in team.slots}) > 1 for team in teams)
    # The one all-IPPO composition family (3 IPPO seeds, 6 orders) is left out.
    assert len(teams) == 60 - 6
    with pytest.raises(UsageError, match="at least two algorithms"):
        compositions(IPPO, "mixed")


def test_all_is_pairs_distinct_and_mixed_once_each():
    teams = compositions(MIXED, "all", max_teams=1000)
    assert len(teams) == len(set(teams)) == 5 + 5 * 4 * 3 + 60


@pytest.mark.parametrize(
    "cells, scheme, message",
    [
        (IPPO[:1], "pairs", "at least two cells"),
        (IPPO[:2], "distinct", "at least 3 cells"),
        (IPPO, "triples", "--scheme must be one of"),
    ],
)
def test_compositions_that_cannot_be_formed_are_usage_errors(cells, scheme, message):
    with pytest.raises(UsageError, match=message):
        compositions(cells, scheme)


# ----------------------------------------------------------------------------------------
# The pair matrix (the gap statistic: test_crossplay_stats.py)
# ----------------------------------------------------------------------------------------
def test_pair_matrix_pools_positions_and_puts_self_play_on_the_diagonal():
    a, b = "1B/ippo-rnn/hard/seed0", "1B/mappo-rnn/hard/seed0"
    scores = {
        Team((a, a, a)): [0.5, 0.7],
        Team((b, b, b)): [0.2, 0.2],
        Team((b, a, a)): [0.1, 0.1],
        Team((a, b, a)): [0.2, 0.2],
        Team((a, a, b)): [0.3, 0.3],  # row a, column b: mean 0.2
        Team((b, b, a)): [0.4, 0.4],
    }  # row b, column a (one position only)
    m = pair_matrix([a, b], scores)
    np.testing.assert_allclose(m.values, [[0.6, 0.2], [0.4, 0.2]])
    doc = m.as_json()
    assert doc["rows"] == doc["cols"] == [a, b] and doc["label"] == "Total"
    assert pair_matrix([a, b], {Team((a, a, a)): [0.5]}).as_json()["values"] == [
        [0.5, None],
        [None, None],
    ]


# ----------------------------------------------------------------------------------------
# Bad input before anything is compiled
# ----------------------------------------------------------------------------------------
def _copy_cells(tmp_path, *cell_ids, root=FIXTURES):
    src = tmp_path / "src"
    for cell_id in cell_ids:
        shutil.copytree(root / cell_id, src / cell_id)
    for p in src.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)  # the fixtures are read-only
    return src


def test_cells_needing_different_env_configurations_are_one_clear_error(tmp_path):
    from alem_eval.scoring.crossplay import run_crossplay
    from alem_eval.hub.sources import open_source

    src = _copy_cells(tmp_path, "tiny/ippo-rnn/easy/seed0", "tiny/ippo-rnn/hard/seed2")
    path = src / "tiny/ippo-rnn/hard/seed2/config.json"
    doc = json.loads(path.read_text())
    doc["config"]["NUM_COMM_CHANNELS"] = doc["reload_overrides"]["NUM_COMM_CHANNELS"] = 2
    path.write_text(json.dumps(doc))
    source = open_source(str(src))
    with pytest.raises(
        EvaluationError,
        match=r"tiny/ippo-rnn/easy/seed0 and "
        r"tiny/ippo-rnn/hard/seed2 need different env configurations "
        r"\(num_comm_channels 4 vs 2\)",
    ):
        run_crossplay(
            source,
            source.select(["tiny/ippo-rnn"]),
            eval_difficulty="hard",
            num_episodes=1,
            max_steps=32,
        )


def test_cells_of_different_difficulties_need_an_explicit_one(tmp_path):
    from alem_eval.scoring.crossplay import run_crossplay
    from alem_eval.hub.sources import open_source

    source = open_source(str(FIXTURES))
    with pytest.raises(
        UsageError,
        match=r"different difficulties \(easy, hard\); pass "
        r"--eval-difficulty to play them together on one difficulty's worlds, or "
        r"--difficulty to keep the cells of one",
    ):
        run_crossplay(source, source.select(["tiny/ippo-rnn"]), num_episodes=1, max_steps=32)


def test_cli_difficulty_selects_the_cells_and_eval_difficulty_the_worlds(tmp_path, monkeypatch):
    """``crossplay tiny/ippo-rnn --difficulty easy --eval-difficulty hard`` pairs the easy
    cells only, on hard worlds (the library call is stubbed: no compile)."""
    from typer.testing import CliRunner

    import alem_eval.core.runtime as runtime
    from alem_eval.cli.app import _register, app

    seen = {}

    class Stop(Exception):
        pass

    def run_crossplay(source, cells, *, eval_difficulty, **_):
        seen.update(cells=[c.id for c in cells], eval_difficulty=eval_difficulty)
        raise Stop

    monkeypatch.setattr(crossplay_module, "run_crossplay", run_crossplay)
    monkeypatch.setattr(runtime, "enable_compilation_cache", lambda *a, **k: None)
    _register()
    args = ["crossplay", "tiny/ippo-rnn", "--source", str(FIXTURES), "--difficulty", "easy"]
    with pytest.raises(Stop):
        CliRunner().invoke(app, [*args, "--eval-difficulty", "hard"], catch_exceptions=False)
    assert seen == {"cells": ["tiny/ippo-rnn/easy/seed0"], "eval_difficulty": "hard"}


def test_the_command_is_one_call_to_alem_eval_crossplay_and_prints_what_it_returns(
    tmp_path, monkeypatch
):
    """``alem-eval crossplay`` hands its options to ``alem_eval.crossplay`` as keywords and
    prints the result it returns (stubbed with a canned one: nothing plays); --dry-run is
    the same call with ``dry_run=True``, its plan printed."""
    from alem_eval.api import crossplay as api
    from alem_eval.core.jsonout import json_text
    from alem_eval.scoring.plan import RunPlan

    from .synthetic import synthetic_crossplay

    out = tmp_path / "xplay"
    canned = api.CrossPlay(synthetic_crossplay(), (out / "crossplay.json",))
    plan = RunPlan("crossplay", "somewhere", (), episodes=6, teams=3)
    calls = []

    def crossplay(cells, **kwargs):
        calls.append((cells, kwargs))
        return plan if kwargs.get("dry_run") else canned

    monkeypatch.setattr(api, "crossplay", crossplay)
    env = cli_env(tmp_path, closed_port_url())
    args = ["crossplay", "tiny/ippo-rnn", "tiny/pqn", "--source", str(FIXTURES)]
    args += ["--difficulty", "easy,hard", "--split", "train", "--scheme", "distinct"]
    args += ["--episodes", "3", "--max-steps", "50", "--max-teams", "5", "--seed", "7"]
    args += ["--reps", "100", "--runs", "episodes", "--results", str(tmp_path / "store")]
    args += ["--out", str(out), "--on-env-mismatch", "warn", "--batch", "4"]
    args += ["--devices", "2", "--record", str(tmp_path / "rec"), "--format", "json"]
    proc = run_cli_in_process(args, env)
    assert proc.returncode == 0, proc.stderr
    assert calls == [
        (
            ["tiny/ippo-rnn", "tiny/pqn"],
            {
                "scheme": "distinct",
                "eval_difficulty": None,
                "episodes": 3,
                "max_steps": 50,
                "max_teams": 5,
                "seed": 7,
                "reps": 100,
                "runs": "episodes",
                "store": tmp_path / "store",
                "out": out,
                "source": str(FIXTURES),
                "repo": None,
                "revision": None,
                "cache_dir": None,
                "difficulty": ["easy", "hard"],
                "split": "train",
                "splits": None,
                "on_env_mismatch": "warn",
                "batch": 4,
                "devices": "2",
                "record": tmp_path / "rec",
                "progress": True,
            },
        )
    ]
    doc = {**canned.result.as_json(), "outputs": [str(out / "crossplay.json")]}
    assert proc.stdout == json_text(doc) + "\n"
    result = canned.result
    assert f"{len(result.teams)} teams ({result.teams_scored} scored" in proc.stderr
    dry = run_cli_in_process([*args, "--dry-run"], env)
    assert dry.returncode == 0, dry.stderr
    assert calls[-1][1]["dry_run"] is True and len(calls) == 2
    assert dry.stdout == json_text(plan.as_json()) + "\n"
    # (the console may wrap the line at its width, even inside a word: compare the text)
    assert "".join(dry.stderr.split()).endswith("".join(plan.summary().split()))


def test_a_selector_matching_nothing_is_a_one_line_error(tmp_path):
    env = cli_env(tmp_path, closed_port_url())
    proc = run_cli(
        ["crossplay", "tiny/nothing", "--source", str(FIXTURES), "--format", "json"], env
    )
    assert_one_line_error(proc, "tiny/nothing", "matches no cell")
    assert proc.returncode == 2 and proc.stdout == ""


def test_a_team_is_stored_when_its_episodes_end_so_a_kill_mid_run_keeps_it(tmp_path, monkeypatch):
    from alem_eval.evaluate import rollout
    from alem_eval.evaluate.rollout import StackResult
    from alem_eval.evaluate.settings import CHUNK
    from alem_eval.scoring.crossplay import GAP_METRICS, run_crossplay
    from alem_eval.analysis.results import ResultsStore
    from alem_eval.hub.sources import open_source

    calls: list[list[tuple[int, ...]]] = []
    kill_after: list[int | None] = [0]

    def run_teams(cfgs, weights, teams, *, num_episodes, on_team=None, **_):
        """``run_teams`` without the compile: team i's episodes end i-th; a kill after
        ``kill_after`` teams."""
        calls.append(list(teams))
        records = [
            [{**dict.fromkeys(GAP_METRICS, 0.1 * i), "episode_length": 4.0}] * num_episodes
            for i in range(len(teams))
        ]
        for i, recs in enumerate(records):
            on_team(i, recs)
            if kill_after[0] == i:
                raise KeyboardInterrupt
        return StackResult(records, [], "fast", "hard", CHUNK)

    monkeypatch.setattr(rollout, "run_teams", run_teams)
    source = open_source(str(FIXTURES))
    store = ResultsStore(tmp_path / "results")

    def run(seen):
        return run_crossplay(
            source,
            source.select(["tiny/ippo-rnn"]),
            eval_difficulty="hard",
            num_episodes=2,
            max_steps=32,
            reps=10,
            store=store,
            on_progress=seen.append,
        )

    seen: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        run(seen)
    assert len(calls[0]) == 8 and len(seen) == 1  # the teams to play: no line per team
    assert len(store.entries(teams=True)) == 1  # the first team, stored before the kill
    assert store.entries() == []  # team rows never pass for a cell's own scores

    kill_after[0] = None
    seen.clear()
    result = run(seen)
    assert calls[1] == calls[0][1:]  # only the missing teams ran
    assert seen[0].endswith("1 read back from the results store, 7 to score")
    assert result.teams_reused == 1 and result.teams_scored == 7
    assert len(store.entries(teams=True)) == 8 and [
        m.split(" in ")[0] for m in seen if m.startswith("scored ")
    ] == ["scored 7 teams"]
    first = next(t for t in result.teams if t.reused)
    assert first.episodes == ({**dict.fromkeys(GAP_METRICS, 0.0), "episode_length": 4.0},) * 2


# ----------------------------------------------------------------------------------------
# End to end: one compiled rollout, then everything read back
# ----------------------------------------------------------------------------------------
# Two algorithms of the bundled demo cells, paired at the notebook's episodes and step cap:
# notebooks/quickstart.ipynb runs this same cross-play after these tests (one group), and
# its kernel loads the compiled rollout from the test run's compilation cache.
ARGS = [
    "crossplay",
    "demo/ippo-rnn,pqn-vdn-rnn",
    "--source",
    "demo",
    "--episodes",
    "8",
    "--max-steps",
    "300",
]
CELLS = ["demo/ippo-rnn/easy/seed0", "demo/pqn-vdn-rnn/easy/seed0"]


# The three tests below share one scored store: one xdist worker runs them all.
@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """One `alem-eval crossplay --format json` run of the two tiny IPPO cells (8 teams)."""
    root = tmp_path_factory.mktemp("crossplay")
    env = cli_env(root, closed_port_url())
    results = root / "results"
    proc = run_cli(
        [*ARGS, "--results", str(results), "--out", str(root / "out"), "--format", "json"],
        env,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr
    return root, env, results, proc


@pytest.mark.xdist_group(DEMO_PROGRAMS)
def test_cli_json_has_the_pair_matrix_the_gaps_and_the_heatmap(scored):
    root, _, _, proc = scored
    doc = json.loads(proc.stdout)  # stdout holds only the JSON document
    assert doc["cells"] == CELLS and doc["eval_difficulty"] == "easy"
    assert doc["protocol"] == "fast" and doc["scheme"] == "pairs"
    assert doc["teams_total"] == doc["teams_scored"] == 2 * 1 * 3 + 2
    assert doc["teams_reused"] == 0
    m = doc["pair_matrix"]
    assert m["metric"] == "Team/reward_pct_of_max" and m["rows"] == m["cols"] == CELLS
    assert all(v is not None and 0.0 <= v <= 1.0 for row in m["values"] for v in row)
    assert [g["label"] for g in doc["gaps"]] == ["Total", "Base", "Coord"]
    for g in doc["gaps"]:
        assert g["n_teams"] == 6 and g["n_worlds"] == 8
        eps = 1e-12  # a bound can equal the gap, up to summation order
        assert g["lo"] - eps <= g["gap"] <= g["hi"] + eps
        assert g["gap"] == pytest.approx(g["self"] - g["cross"])
    # The diagonal is self-play, read from the self-play teams.
    by_slots = {tuple(t[f"slot{s}"] for s in range(3)): t for t in doc["teams"]}
    for i, c in enumerate(CELLS):
        assert m["values"][i][i] == pytest.approx(by_slots[(c,) * 3]["Team/reward_pct_of_max"])
    for t in doc["teams"]:
        assert t["episodes"] == 8 and 1 <= t["episode_length"] <= 300
    png = root / "out" / "pair_matrix.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (root / "out" / "pair_matrix.pdf").read_bytes()[:5] == b"%PDF-"
    assert json.loads((root / "out" / "crossplay.json").read_text())["gaps"] == doc["gaps"]
    assert str(png) in doc["outputs"]
    from alem_eval.analysis.verify_results import verify_results

    assert len(doc["digests"]["files"]) == doc["teams_total"]
    assert verify_results(root / "out" / "crossplay.json").ok


@pytest.mark.xdist_group(DEMO_PROGRAMS)
def test_cli_rerun_reads_every_team_back_from_team_rows_the_cells_scores_never_show(scored):
    root, env, results, first = scored
    again = run_cli(
        [*ARGS, "--results", str(results), "--out", str(root / "again"), "--format", "json"],
        env,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr
    doc, before = json.loads(again.stdout), json.loads(first.stdout)
    assert doc["teams_scored"] == 0 and doc["teams_reused"] == 8
    assert doc["gaps"] == before["gaps"] and doc["pair_matrix"] == before["pair_matrix"]
    # Cross-play teams are rows of the results store, keyed by their composition; the
    # cells' own scores (report, leaderboard) see no entry of them and warn about nothing.
    from alem_eval.analysis.results import ResultsStore

    store = ResultsStore(results)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.entries() == []
        teams = store.entries(teams=True)
    assert len(teams) == 8 and {e.key.eval_difficulty for e in teams} == {"easy"}
    assert {e.key.team_hash for e in teams} == {t["team_key"] for t in doc["teams"]}
    frame = store.load(teams=True)
    slots = [[v for k, v in t.items() if k.startswith("slot")] for t in doc["teams"]]
    assert sorted(set(frame["team"])) == sorted(",".join(s) for s in slots)

    table = run_cli(
        [*ARGS, "--results", str(results), "--out", str(root / "csv"), "--format", "csv"],
        env,
        timeout=600,
    )
    assert table.returncode == 0, table.stderr
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(rows) == 8 and {r["shape"] for r in rows} == {"self", "pair"}
    assert {r["reused"] for r in rows} == {"True"}


@pytest.mark.xdist_group(DEMO_PROGRAMS)
def test_cli_cell_that_cannot_be_loaded_is_one_line_and_keeps_stored_teams(scored, tmp_path):
    _, env, results, _ = scored
    stored = {p: p.read_bytes() for p in results.rglob("*.parquet")}
    src = _copy_cells(tmp_path, *CELLS, root=demo_root())
    for f in (src / CELLS[1] / "checkpoint" / "ocdbt.process_0" / "d").iterdir():
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])  # a truncated download
    proc = run_cli(
        [
            *ARGS[:2],
            "--source",
            str(src),
            *ARGS[4:],
            "--results",
            str(results),
            "--out",
            str(tmp_path / "out"),
            "--format",
            "json",
        ],
        env,
        timeout=600,
    )
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr
    # The plan's progress line, then the error on one line.
    *_, last = proc.stderr.strip().splitlines()
    assert last.startswith(f"alem-eval: error: {CELLS[1]}: ") and "corrupt" in last
    assert "1 read back from the results store, 7 to score" in proc.stderr
    assert {p: p.read_bytes() for p in results.rglob("*.parquet")} == stored


def test_command_choices_are_what_the_library_accepts():
    from alem_eval.cli.commands.crossplay import Scheme
    from alem_eval.cli.options import TeamRuns
    from alem_eval.scoring.crossplay import RUNS_MODES
    from alem_eval.scoring.teams import SCHEMES

    assert tuple(m.value for m in Scheme) == SCHEMES
    assert tuple(m.value for m in TeamRuns) == RUNS_MODES
