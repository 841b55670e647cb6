"""Offline (``HF_HUB_OFFLINE=1``) from a cache that alem-eval did not fill: one written by
huggingface_hub's own ``snapshot_download`` (what ``hf download`` runs) against the loopback
Hub. The CLI runs in a subprocess, as offline mode is read when huggingface_hub is imported.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from .clitools import cli_env, run_cli
from .conftest import FIXTURES
from .hub_server import HubServer

IPPO_EASY = "tiny/ippo-rnn/easy/seed0"
PQN_EASY = "tiny/pqn-vdn-rnn/easy/seed0"
BIG_FILE = f"{IPPO_EASY}/checkpoint/ocdbt.process_0/d/ef7e5e68db6dd7d79fc1e28418cc7181"


@pytest.fixture
def hub():
    with HubServer(FIXTURES, include=("tiny/",)) as server:
        yield server


def fill_with_snapshot_download(hub: HubServer, tmp_path: Path, *cells: str) -> Path:
    """The cache the CLI will use (``$HF_HOME/hub``), filled by huggingface_hub alone."""
    from huggingface_hub import snapshot_download

    cache = tmp_path / "hf-home" / "hub"
    snapshot_download(
        hub.repo, cache_dir=cache, endpoint=hub.url, allow_patterns=[f"{c}/*" for c in cells]
    )
    assert not (cache / "models--alem-world--alem-rl-baselines" / "alem-eval").exists()
    return cache / "models--alem-world--alem-rl-baselines" / "snapshots" / hub.commit


def test_offline_list_reads_a_cache_filled_by_snapshot_download(hub, tmp_path):
    snap = fill_with_snapshot_download(hub, tmp_path, IPPO_EASY, PQN_EASY)
    assert (snap / BIG_FILE).is_file()
    hub.clear()
    proc = run_cli(["list", "tiny", "--format", "json"], cli_env(tmp_path, hub.url, offline=True))
    assert proc.returncode == 0, proc.stderr
    rows = {r["cell"]: r for r in json.loads(proc.stdout)}
    assert sorted(rows) == [IPPO_EASY, PQN_EASY]
    assert {r["state"] for r in rows.values()} == {"cached"}
    assert {r["commit"] for r in rows.values()} == {hub.commit}
    assert rows[IPPO_EASY]["size_mb"] == round(sum(hub.files_under(IPPO_EASY).values()) / 1e6, 1)
    assert "nothing cached" not in proc.stderr and "using the files cached in" in proc.stderr
    assert hub.requests == []


@pytest.mark.slow
def test_offline_pull_and_verify_from_a_cache_filled_by_snapshot_download(hub, tmp_path):
    fill_with_snapshot_download(hub, tmp_path, IPPO_EASY)
    hub.clear()
    env = cli_env(tmp_path, hub.url, offline=True)
    proc = run_cli(["pull", IPPO_EASY], env)
    assert proc.returncode == 0, proc.stderr
    assert f"0 file(s) fetched, {len(hub.files_under(IPPO_EASY))} skipped" in proc.stderr
    proc = run_cli(["verify", IPPO_EASY], env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"OK    {IPPO_EASY}")
    assert "sizes only" not in proc.stdout  # the blob names carry the hashes
    assert hub.requests == []


@pytest.mark.slow
def test_offline_verify_of_a_snapshot_of_plain_files_says_it_checked_sizes_only(hub, tmp_path):
    """A snapshot folder of plain files (a cache copied with ``cp -L``, or written where links
    cannot be made) carries no hashes: offline, only the sizes can be checked, and verify says so."""
    snap = fill_with_snapshot_download(hub, tmp_path, IPPO_EASY)
    for link in [p for p in snap.rglob("*") if p.is_symlink()]:
        data = link.read_bytes()
        link.unlink()
        link.write_bytes(data)
    hub.clear()
    env = cli_env(tmp_path, hub.url, offline=True)
    proc = run_cli(["verify", IPPO_EASY], env)
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.strip().splitlines()
    assert line.startswith(f"OK    {IPPO_EASY}") and "; sizes only: " in line, line
    assert "plain files" in line
    proc = run_cli(["verify", IPPO_EASY, "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["status"] == "OK" and row["checked"] == "size" and row["repaired"] == []
    assert "sizes only" in row["message"]
    assert hub.requests == []


def test_offline_verify_catches_a_damaged_blob_of_a_foreign_cache(hub, tmp_path):
    """The blob names of an HF cache are the sha256 of LFS files: enough to check them offline."""
    snap = fill_with_snapshot_download(hub, tmp_path, IPPO_EASY)
    blob = (snap / BIG_FILE).resolve()
    assert blob.name == hashlib.sha256((FIXTURES / BIG_FILE).read_bytes()).hexdigest()
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF  # same size
    blob.write_bytes(bytes(data))
    hub.clear()
    proc = run_cli(["verify", IPPO_EASY], cli_env(tmp_path, hub.url, offline=True))
    assert proc.returncode == 1
    [line] = proc.stdout.strip().splitlines()
    assert line.startswith(f"FAIL  {IPPO_EASY}  ")
    assert not line.startswith(f"FAIL  {IPPO_EASY}  {IPPO_EASY}:")  # the id once
    assert "0 file(s) not cached, 1 damaged" in line and f"{BIG_FILE}: sha256 " in line
    assert blob.read_bytes() == bytes(data)  # offline, nothing is deleted
    assert hub.requests == []
