"""`alem-eval score` end to end: loopback Hub, results store, resume after a kill."""

import json
import re
import signal
import subprocess
import sys
import threading

import pytest

from alem_eval.analysis.results import _TMP_PREFIX

from .clitools import (
    CLI_CODE,
    assert_one_line_error,
    cli_env,
    closed_port_url,
    run_cli,
    run_cli_in_process,
)
from .conftest import FIXTURES, REPO
from .eval_support import FAST_EPISODES
from .hub_server import HubServer

QUICK = ["--episodes", str(FAST_EPISODES), "--max-steps", "12"]


@pytest.mark.slow
def test_score_difficulty_hard_from_a_loopback_hub(tmp_path):
    with HubServer(FIXTURES, include=("tiny/",)) as hub:
        env = cli_env(tmp_path, hub.url)
        proc = run_cli(
            ["score", "--difficulty", "hard", *QUICK, "--format", "json"], env, timeout=900
        )
        assert proc.returncode == 0, proc.stderr
        records = json.loads(proc.stdout)
        assert sorted(r["cell"] for r in records) == [
            "tiny/hypermarl-rnn/hard/seed0",
            "tiny/ippo-rnn/hard/seed2",
        ]
        for r in records:
            assert r["protocol"] == "fast" and r["eval_difficulty"] == "hard"
            assert len(r["episodes"]) == FAST_EPISODES
            ep = r["episodes"][0]
            assert 1 <= ep["episode_length"] <= 12
            assert {"Team/achievement_pct", "Team/reward_pct_of_max", "terminated"} <= set(ep)
            assert (
                r["aggregate"]["episode_length"]
                == sum(e["episode_length"] for e in r["episodes"]) / FAST_EPISODES
            )
        fetched = {p.split("/")[1] for p in hub.file_requests("GET")}
        assert fetched == {"hypermarl-rnn", "ippo-rnn"}  # only the selected cells came down
        # Not a terminal: the episode progress ends with one plain line in the log (its
        # rate only once a report follows the first, compiling call: one call here).
        total = 2 * FAST_EPISODES
        line = rf"episodes {total}/{total}, [\d,]+ env steps( \([\d,]+/s\))?, \d+s"
        assert re.search(line, proc.stderr), proc.stderr

        # A second run reads everything back from the store: no file request, no compute.
        hub.clear()
        again = run_cli(
            ["score", "--difficulty", "hard", *QUICK, "--format", "json"], env, timeout=300
        )
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == records
        assert "scored" not in again.stderr and hub.file_requests("GET") == []


def _stored(results):
    """Completed results files (a killed writer may leave its temp file, which the store
    ignores and sweeps once stale)."""
    return [p for p in results.rglob("*.parquet") if not p.name.startswith(_TMP_PREFIX)]


def _temps(results):
    return {p for p in results.rglob("*") if p.name.startswith(_TMP_PREFIX)}


@pytest.mark.slow
def test_killed_score_resumes_with_only_the_missing_cells(tmp_path):
    env = cli_env(tmp_path, closed_port_url())
    results = tmp_path / "results"
    args = [
        "score",
        "tiny/ippo-rnn",
        "--source",
        str(FIXTURES),
        "--results",
        str(results),
        "--stack",
        "1",
        *QUICK,
    ]
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI_CODE, *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Killed the moment it says the first cell is scored (it says so once the cell is
    # stored). Polling the store every 0.2 s instead once let the second cell, whose
    # program was already compiled, be stored too before the kill.
    first_scored = threading.Event()

    def watch(stream):
        for line in stream:
            if "scored tiny/" in line:
                first_scored.set()
                return

    threading.Thread(target=watch, args=(proc.stderr,), daemon=True).start()
    first_scored.wait(timeout=900)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(_stored(results)) == 1, "the first cell should have been stored before the kill"
    left_by_kill = _temps(results)

    rerun = run_cli(args + ["--format", "json"], env, timeout=900)
    assert rerun.returncode == 0, rerun.stderr
    assert "[1/2] reused from the results store" in rerun.stderr
    assert rerun.stderr.count("scored tiny/") == 1
    assert len(json.loads(rerun.stdout)) == 2
    assert len(_stored(results)) == 2
    assert _temps(results) <= left_by_kill  # the rerun's own writes leave no temp file


@pytest.mark.parametrize(
    "extra,fragment",
    [
        (["--episodes", "0"], "--episodes"),
        (["--max-steps", "-5"], "--max-steps"),
        (["--protocol", "slow"], "unknown protocol"),
        (["--devices", "0"], "--devices"),
        (["--devices", "many"], "--devices"),
    ],
)
def test_bad_score_options_are_one_line_usage_errors(tmp_path, extra, fragment):
    proc = run_cli_in_process(
        ["score", "tiny/ippo-rnn/easy", "--source", str(FIXTURES), *extra],
        cli_env(tmp_path, closed_port_url()),
    )
    assert_one_line_error(proc, fragment)
    assert proc.returncode == 2
