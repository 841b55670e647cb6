"""Pulls as separate processes sharing one cache: two at once, and one killed mid-file.

Real ``alem-eval pull`` subprocesses against the loopback Hub; the server holds one file's
body part-way (``HubServer.hold``) so that "at once" and "mid-file" are certain, not timing
luck. Each test takes a few seconds.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .clitools import CLI_CODE, cli_env, run_cli
from .conftest import FIXTURES, REPO
from .hub_server import HubServer

IPPO_EASY = "tiny/ippo-rnn/easy/seed0"
BIG_FILE = f"{IPPO_EASY}/checkpoint/ocdbt.process_0/d/ef7e5e68db6dd7d79fc1e28418cc7181"
TIMEOUT = 60  # per subprocess; each finishes in seconds


@pytest.fixture
def hub():
    with HubServer(FIXTURES, include=("tiny/",)) as server:
        yield server


def start_pull(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLI_CODE, "pull", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def snapshot(tmp_path: Path, hub: HubServer) -> Path:
    repo_cache = tmp_path / "hf-home" / "hub" / "models--alem-world--alem-rl-baselines"
    return repo_cache / "snapshots" / hub.commit


def assert_intact(snap: Path, files: dict[str, int]) -> None:
    for path in files:
        got = hashlib.sha256((snap / path).read_bytes()).hexdigest()
        assert got == hashlib.sha256((FIXTURES / path).read_bytes()).hexdigest(), path


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.slow
def test_two_pulls_of_overlapping_cells_at_once_both_succeed_and_share_files(hub, tmp_path):
    # The first GET of the shared big file stalls until both processes have asked for it
    # (its HEAD): from then on one downloads it while the other waits on the cache's lock.
    hub.hold(BIG_FILE, after=200_000, until_heads=2, timeout=TIMEOUT)
    env = cli_env(tmp_path, hub.url)
    started = time.monotonic()
    a = start_pull(["tiny/ippo-rnn", "--workers", "4"], env)  # ippo easy0 + hard2
    b = start_pull(["tiny/*/easy", "--workers", "4"], env)  # ippo easy0 + pqn easy0
    out_a, err_a = a.communicate(timeout=TIMEOUT)
    out_b, err_b = b.communicate(timeout=TIMEOUT)
    assert a.returncode == 0, err_a
    assert b.returncode == 0, err_b
    assert time.monotonic() - started < TIMEOUT / 2  # released by the second HEAD, not the timeout
    assert hub.count("HEAD", BIG_FILE) >= 2
    wanted = {
        **hub.files_under(IPPO_EASY),
        **hub.files_under("tiny/ippo-rnn/hard/seed2"),
        **hub.files_under("tiny/pqn-vdn-rnn/easy/seed0"),
    }
    # Every content fetched once, by one of the two (files with equal content share a blob).
    gets = [hub.files[p].etag for p in hub.file_requests("GET")]
    assert sorted(gets) == sorted({hub.files[p].etag for p in wanted})
    assert_intact(snapshot(tmp_path, hub), wanted)
    assert IPPO_EASY in out_a and IPPO_EASY in out_b
    proc = run_cli(["list", "tiny", "--format", "csv"], env)
    assert proc.stdout.count(",cached,") == 3, proc.stdout


def test_pull_killed_mid_file_resumes_without_refetching_complete_files(hub, tmp_path):
    files = hub.files_under(IPPO_EASY)
    others = [p for p in files if p != BIG_FILE]
    hub.hold(BIG_FILE, after=300_000, timeout=TIMEOUT)  # the body stops part-way
    env = cli_env(tmp_path, hub.url)
    snap = snapshot(tmp_path, hub)
    proc = start_pull([IPPO_EASY, "--workers", "4"], env)
    try:
        assert hub.wait_held(BIG_FILE, timeout=TIMEOUT)
        wait_for(lambda: all((snap / p).is_file() for p in others), TIMEOUT, "the other files")
    finally:
        proc.kill()  # SIGKILL: no cleanup of any kind in the killed process
        proc.communicate(timeout=TIMEOUT)
        hub.release()
    blobs = snap.parents[1] / "blobs"
    assert not (snap / BIG_FILE).exists()
    assert list(blobs.glob("*.incomplete")), "the kill should leave a partial download"

    hub.clear()
    rerun = run_cli(["pull", IPPO_EASY], env, timeout=TIMEOUT)
    assert rerun.returncode == 0, rerun.stderr
    assert hub.file_requests("GET") == [BIG_FILE]
    assert f"1 file(s) fetched, {len(others)} skipped" in rerun.stderr
    assert_intact(snap, files)
    assert list(blobs.glob("*.incomplete")) == []  # the killed pull's partial is swept
