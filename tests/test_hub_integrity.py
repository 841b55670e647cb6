"""Integrity of Hub downloads: content hashes from the listing, the commit a cell was pulled
at, what the client is told about alem-eval, and the huggingface_hub API floor.

Against the loopback Hub (tests/hub_server.py); the huggingface_hub client is never mocked.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import logging
import re
import threading
import time
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

import alem_eval
from alem_eval.core.errors import DownloadError, SourceError
from alem_eval.hub.manifest import Cell
from alem_eval.hub.client import HF_HUB_MIN_VERSION, check_hub_client
from alem_eval.hub.hubsource import HubSource
from alem_eval.hub.listing import RemoteFile
from alem_eval.hub.sources import open_source
from alem_eval.hub.transfer import ByteProgress

from .clitools import cli_env, run_cli
from .conftest import FIXTURES, REPO
from .hub_server import HubServer

IPPO_EASY = "tiny/ippo-rnn/easy/seed0"
BIG_FILE = f"{IPPO_EASY}/checkpoint/ocdbt.process_0/d/ef7e5e68db6dd7d79fc1e28418cc7181"
CONFIG = f"{IPPO_EASY}/config.json"


@pytest.fixture
def hub():
    with HubServer(FIXTURES, include=("tiny/",)) as server:
        yield server


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hf-cache"


def hub_source(hub: HubServer, cache: Path) -> HubSource:
    src = open_source("hub", cache_dir=cache, endpoint=hub.url)
    assert isinstance(src, HubSource)
    return src


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damage_in_place(path: Path) -> None:
    """Flip the last byte: same size, different content (what a size check cannot see)."""
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


# ----------------------------------------------------------------------------------------
# The listing carries the hashes (and the loopback Hub serves them as huggingface.co does)
# ----------------------------------------------------------------------------------------
def test_loopback_hub_lists_lfs_sha256_in_tree_and_paths_info(hub):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.url)
    [tree_entry] = [f for f in api.list_repo_tree(hub.repo, recursive=True) if f.path == BIG_FILE]
    [info_entry, small] = api.get_paths_info(hub.repo, [BIG_FILE, CONFIG])
    for entry in (tree_entry, info_entry):
        assert entry.lfs is not None
        assert entry.lfs.sha256 == sha256(FIXTURES / BIG_FILE)
        assert entry.lfs.size == entry.size == (FIXTURES / BIG_FILE).stat().st_size
        data = (FIXTURES / BIG_FILE).read_bytes()  # an LFS file's oid is its pointer's
        assert entry.blob_id != hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert small.lfs is None
    data = (FIXTURES / CONFIG).read_bytes()
    assert small.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_listing_records_sha256_for_lfs_files_and_git_ids_for_others(hub, cache):
    files = hub_source(hub, cache).listing.files
    assert files[BIG_FILE] == RemoteFile(
        (FIXTURES / BIG_FILE).stat().st_size, sha256=sha256(FIXTURES / BIG_FILE)
    )
    assert files[CONFIG].sha256 is None and files[CONFIG].git_oid == hub.files[CONFIG].git_oid
    assert all(f.digest for f in files.values())


# ----------------------------------------------------------------------------------------
# Same-size corruption is caught and fetched again
# ----------------------------------------------------------------------------------------
def test_same_size_corrupted_download_is_refetched(hub, cache):
    hub.corrupt(BIG_FILE)  # right length, wrong bytes
    src = hub_source(hub, cache)
    report = src.pull(src.select([IPPO_EASY]))
    assert report.files_repaired == 1
    assert hub.file_requests("GET").count(BIG_FILE) == 2
    assert (report.root / BIG_FILE).read_bytes() == (FIXTURES / BIG_FILE).read_bytes()


def test_same_size_corruption_in_the_cache_is_refetched_by_pull(hub, cache):
    src = hub_source(hub, cache)
    report = src.pull(src.select([IPPO_EASY]))
    damage_in_place((report.root / BIG_FILE).resolve())
    hub.clear()
    again = hub_source(hub, cache)
    report = again.pull(again.select([IPPO_EASY]))
    assert hub.file_requests("GET") == [BIG_FILE]
    assert report.files_repaired == 1 and report.files_fetched == 1
    assert (report.root / BIG_FILE).read_bytes() == (FIXTURES / BIG_FILE).read_bytes()


def test_file_corrupt_on_every_download_is_removed_with_a_one_line_error(hub, cache):
    hub.corrupt(BIG_FILE, times=2)
    src = hub_source(hub, cache)
    with pytest.raises(DownloadError, match=r"sha256 \w+… but the listing says \w+…") as err:
        src.pull(src.select([IPPO_EASY]))
    assert "\n" not in str(err.value) and BIG_FILE in str(err.value)
    snapshot = cache / "models--alem-world--alem-rl-baselines" / "snapshots" / hub.commit
    assert not (snapshot / BIG_FILE).exists()
    # Files not yet started when the failure came are not started; files that finished are
    # kept. So the next pull fetches the bad file and only what was never written.
    kept = {p.relative_to(snapshot).as_posix() for p in snapshot.rglob("*") if p.is_file()}
    hub.clear()
    report = hub_source(hub, cache).pull([Cell.from_id(IPPO_EASY)])
    fetched = hub.file_requests("GET")
    assert BIG_FILE in fetched and not kept & set(fetched)
    assert len(fetched) == len(set(fetched))
    assert (report.root / BIG_FILE).read_bytes() == (FIXTURES / BIG_FILE).read_bytes()


def test_unchanged_cached_files_are_not_read_again_unless_rehash(hub, cache, monkeypatch):
    src = hub_source(hub, cache)
    cell = src.select([IPPO_EASY])[0]
    src.pull([cell])
    hashed: list[Path] = []
    real_hash_of = RemoteFile.hash_of
    monkeypatch.setattr(
        RemoteFile, "hash_of", lambda self, p: hashed.append(p) or real_hash_of(self, p)
    )
    hub_source(hub, cache).pull([cell])
    assert hashed == []
    hub_source(hub, cache).pull([cell], rehash=True)
    assert len(hashed) == len(hub.files_under(IPPO_EASY))


def test_rehash_catches_corruption_that_the_stat_stamp_misses(hub, cache):
    src = hub_source(hub, cache)
    cell = src.select([IPPO_EASY])[0]
    cell_dir = src.local_dir(cell)
    blob = (cell_dir / BIG_FILE.removeprefix(IPPO_EASY + "/")).resolve()
    damage_in_place(blob)
    # Bit rot leaves size and times alone: make the record of the last check match the
    # damaged file, as if it had rotted in place since.
    checked = cache / "models--alem-world--alem-rl-baselines" / "alem-eval" / "checked.json"
    data = json.loads(checked.read_text())
    st = blob.stat()
    data["checked"][str(blob)] = (
        f"{sha256(FIXTURES / BIG_FILE)} {st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"
    )
    checked.write_text(json.dumps(data))
    hub.clear()
    hub_source(hub, cache).local_dir(cell)
    assert hub.file_requests("GET") == []  # trusted the record
    hub_source(hub, cache).local_dir(cell, rehash=True)  # what `verify` asks for
    assert hub.file_requests("GET") == [BIG_FILE]
    assert sha256(cell_dir / BIG_FILE.removeprefix(IPPO_EASY + "/")) == sha256(FIXTURES / BIG_FILE)


@pytest.mark.slow
def test_cli_verify_refetches_a_damaged_file_and_names_it(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    assert run_cli(["pull", IPPO_EASY], env).returncode == 0
    repo_cache = tmp_path / "hf-home" / "hub" / "models--alem-world--alem-rl-baselines"
    snap = repo_cache / "snapshots" / hub.commit
    damage_in_place((snap / BIG_FILE).resolve())
    hub.clear()
    proc = run_cli(["verify", IPPO_EASY], env)
    assert proc.returncode == 0, proc.stderr
    [line] = proc.stdout.strip().splitlines()
    assert line.startswith(f"OK    {IPPO_EASY}")
    in_cell = BIG_FILE.removeprefix(IPPO_EASY + "/")
    assert f"re-fetched {in_cell} (cached copy: sha256 " in line, line
    assert "sizes only" not in line
    assert hub.file_requests("GET") == [BIG_FILE]
    assert sha256(snap / BIG_FILE) == sha256(FIXTURES / BIG_FILE)
    damage_in_place((snap / BIG_FILE).resolve())
    proc = run_cli(["verify", IPPO_EASY, "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["status"] == "OK" and row["checked"] == "hash"
    assert row["repaired"] == [in_cell] and in_cell in row["message"]
    proc = run_cli(["verify", IPPO_EASY, "--format", "csv"], env)  # nothing to repair now
    assert proc.returncode == 0, proc.stderr
    header, values = proc.stdout.strip().splitlines()
    assert "checked" in header.split(",") and "repaired" in header.split(",")
    assert ",hash," in values


# ----------------------------------------------------------------------------------------
# The commit a cell was pulled at
# ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_list_shows_the_commit_each_cell_was_pulled_at(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    assert run_cli(["pull", IPPO_EASY], env).returncode == 0
    proc = run_cli(["list", "tiny/ippo-rnn", "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    commits = {r["cell"]: r["commit"] for r in json.loads(proc.stdout)}
    assert commits == {IPPO_EASY: hub.commit, "tiny/ippo-rnn/hard/seed2": None}
    proc = run_cli(["list", "tiny/ippo-rnn"], env)
    assert proc.returncode == 0 and "commit" in proc.stdout and hub.commit in proc.stdout


def test_pulled_commit_is_kept_when_the_revision_moves(hub, tmp_path, cache):
    src = hub_source(hub, cache)
    src.pull(src.select([IPPO_EASY]))
    old = hub.commit
    import shutil

    moved = tmp_path / "moved"
    shutil.copytree(FIXTURES / "tiny", moved / "tiny")
    (moved / "tiny" / "NEWS.md").write_text("a new commit")
    with HubServer(moved) as newer:
        assert newer.commit != old
        now = hub_source(newer, cache)
        [cell] = now.select([IPPO_EASY])
        assert now.state(cell) == "remote" and now.commit(cell) == old


# ----------------------------------------------------------------------------------------
# What the Hub is told, and which huggingface_hub the calls need
# ----------------------------------------------------------------------------------------
def test_hub_requests_name_alem_eval_and_its_version(hub, cache):
    src = hub_source(hub, cache)
    src.pull(src.select([IPPO_EASY]))
    agents = {r.user_agent for r in hub.requests}
    assert agents and all(f"alem-eval/{alem_eval.__version__}" in a for a in agents), agents


def _pyproject_floor(name: str) -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    [spec] = [d for d in deps if re.split(r"[<>=!~ ;\[]", d, maxsplit=1)[0].lower() == name]
    m = re.search(r">=\s*([\w.]+)", spec)
    assert m, f"{spec!r} declares no floor"
    return m.group(1)


def test_pyproject_declares_the_hub_client_floor_the_code_declares():
    assert _pyproject_floor("huggingface-hub") == HF_HUB_MIN_VERSION


HUB_FUNCTIONS = {"hf_hub_download", "HfApi", "repo_info", "list_repo_tree", "repo_folder_name"}


def _hub_calls() -> dict[str, set[str]]:
    """Keyword arguments the alem_eval.hub modules pass to each huggingface_hub function they
    call."""
    calls: dict[str, set[str]] = {}
    hub_dir = Path(inspect.getfile(HubSource)).parent
    nodes = (n for p in sorted(hub_dir.glob("*.py")) for n in ast.walk(ast.parse(p.read_text())))
    for node in nodes:
        if isinstance(node, ast.Call):
            fn = node.func
            name = getattr(fn, "id", None) or getattr(fn, "attr", "")
            if name in HUB_FUNCTIONS:
                calls.setdefault(name, set()).update(k.arg for k in node.keywords if k.arg)
    return calls


def test_the_installed_client_has_every_parameter_the_code_passes():
    from huggingface_hub import HfApi, hf_hub_download
    from huggingface_hub.file_download import repo_folder_name

    functions = {
        "hf_hub_download": hf_hub_download,
        "HfApi": HfApi.__init__,
        "repo_info": HfApi.repo_info,
        "list_repo_tree": HfApi.list_repo_tree,
        "repo_folder_name": repo_folder_name,
    }
    calls = _hub_calls()
    assert set(calls) == set(functions), calls
    assert {"tqdm_class", "library_name", "library_version"} <= calls["hf_hub_download"]
    for name, kwargs in calls.items():
        params = inspect.signature(functions[name]).parameters
        assert kwargs <= set(params), f"{name} lacks {kwargs - set(params)}"


def test_an_older_hub_client_is_a_one_line_error(monkeypatch):
    import importlib.metadata

    check_hub_client()  # the installed one is new enough
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "1.0.1")
    too_old = rf"huggingface_hub 1.0.1 is too old: .*>={HF_HUB_MIN_VERSION}"
    with pytest.raises(SourceError, match=too_old):
        check_hub_client()


# ----------------------------------------------------------------------------------------
# Byte counting (HTTP and Xet progress reports)
# ----------------------------------------------------------------------------------------
def test_progress_adapter_is_a_class_that_takes_xet_transfer_reports():
    seen: list[int] = []
    cls = ByteProgress.bound(seen.append, threading.Event())
    assert isinstance(cls, type) and callable(getattr(cls, "update_transfer", None))
    bar = cls(total=10, desc="x", unit="B", disable=None, name="huggingface_hub.http_get")
    with bar:
        bar.update(6)
        bar.update_transfer(6)
        bar.update(4)
    assert seen == [6, 4]


def test_xet_download_reporter_counts_each_file_byte_once():
    """Drive huggingface_hub's own Xet reporter with the adapter, as ``xet_get`` does."""
    reporting = pytest.importorskip("huggingface_hub.utils._xet_progress_reporting")
    seen: list[int] = []
    cls = ByteProgress.bound(seen.append, threading.Event())
    size = 5_000_000
    with reporting.XetDownloadProgressReporter(
        reconstruction_desc="f: reconstructing",
        transfer_desc="f: downloading",
        total=size,
        log_level=logging.INFO,
        name="huggingface_hub.xet_get",
        tqdm_class=cls,
    ) as reporter:
        for done, received in ((1_000_000, 700_000), (3_000_000, 2_100_000), (size, 3_500_000)):
            reporter.update_progress(
                SimpleNamespace(
                    total_bytes=size,
                    total_bytes_completed=done,
                    total_bytes_completion_rate=1e6,
                    total_transfer_bytes=3_500_000,
                    total_transfer_bytes_completed=received,
                    total_transfer_bytes_completion_rate=7e5,
                ),
                {},
            )
    assert sum(seen) == size  # file bytes only, counted once (not + the 3.5 MB transferred)


def test_cancelled_transfer_stops_at_the_next_byte_report():
    cancel = threading.Event()
    bar = ByteProgress.bound(lambda n: None, cancel)()
    bar.update(1)
    cancel.set()
    with pytest.raises(Exception) as err:
        bar.update(1)
    assert type(err.value).__name__ == "_Cancelled"


# ----------------------------------------------------------------------------------------
# What a pull tells its caller (sources draw nothing themselves)
# ----------------------------------------------------------------------------------------
class RecordedDownloads:
    """A ``DownloadProgress`` keeping every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def start(self, total_bytes: int, files_total: int) -> None:
        self.calls.append(("start", total_bytes, files_total))

    def update(self, done_bytes: int, files_done: int) -> None:
        self.calls.append(("update", done_bytes, files_done))

    def stop(self) -> None:
        self.calls.append(("stop",))

    def updates(self) -> list[tuple[int, int]]:
        return [c[1:] for c in self.calls if c[0] == "update"]


def test_a_pull_reports_monotone_byte_progress_ending_at_the_total(hub, cache):
    src = hub_source(hub, cache)
    downloads = RecordedDownloads()
    report = src.pull(src.select([IPPO_EASY]), workers=4, on_download=downloads)
    files = hub.files_under(IPPO_EASY)
    total = sum(files.values())
    assert downloads.calls[0] == ("start", total, len(files))
    assert downloads.calls[-1] == ("stop",) and downloads.calls.count(("stop",)) == 1
    updates = downloads.updates()
    assert len(updates) == len(downloads.calls) - 2  # nothing else in between
    assert updates == sorted(updates)  # bytes and files done never go back
    assert updates[-1] == (total, len(files)) == (report.bytes_fetched, report.files_fetched)

    downloads.calls.clear()
    assert src.pull(src.select([IPPO_EASY]), on_download=downloads).files_fetched == 0
    assert downloads.calls == []  # nothing downloaded, nothing told


def test_a_download_for_local_dir_reports_to_the_sources_callback(hub, cache):
    downloads = RecordedDownloads()
    src = open_source("hub", cache_dir=cache, endpoint=hub.url, on_download=downloads)
    src.local_dir(Cell.from_id(IPPO_EASY))  # what score, compare, crossplay and render call
    total = sum(hub.files_under(IPPO_EASY).values())
    assert downloads.calls[0][:2] == ("start", total) and downloads.calls[-1] == ("stop",)
    assert downloads.updates()[-1][0] == total


def test_ctrl_c_during_a_pull_abandons_the_file_in_flight_and_stops_the_progress(
    hub, cache, monkeypatch
):
    """Ctrl-C while the main thread waits for the download threads: the transfer in flight is
    cancelled at its next byte report, ``stop`` is told, whole files are kept and a rerun
    fetches only the abandoned file."""
    import alem_eval.hub.transfer as transfer

    files = hub.files_under(IPPO_EASY)
    hub.hold(BIG_FILE, after=300_000)
    src = hub_source(hub, cache)
    snap = src.storage / "snapshots" / hub.commit

    def whole(path: str) -> bool:
        return (snap / path).is_file() and (snap / path).stat().st_size == files[path]

    def interrupted_wait(futures, return_when):  # Ctrl-C once only the held file is left
        assert hub.wait_held(BIG_FILE)
        deadline = time.monotonic() + 30
        while not all(whole(p) for p in files if p != BIG_FILE) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise KeyboardInterrupt

    monkeypatch.setattr(transfer, "wait", interrupted_wait)
    downloads = RecordedDownloads()
    with pytest.raises(KeyboardInterrupt):
        src.pull(src.select([IPPO_EASY]), workers=len(files), on_download=downloads)
    assert downloads.calls[-1] == ("stop",)
    hub.release()  # the held transfer reports its next bytes and is abandoned
    for t in threading.enumerate():
        if t.name.startswith("alem-pull"):
            t.join(timeout=30)
    assert not (snap / BIG_FILE).exists()
    assert all(whole(p) for p in files if p != BIG_FILE)

    monkeypatch.undo()
    hub.clear()
    rerun = hub_source(hub, cache).pull([Cell.from_id(IPPO_EASY)])
    assert hub.file_requests("GET") == [BIG_FILE] and rerun.files_fetched == 1


def test_the_download_bar_draws_what_a_pull_reports():
    """``DownloadBar`` (core.progress) is what the commands pass: the label, files done and
    bytes of the total; ``download_bar`` makes none when it is not to be shown."""
    from alem_eval.core.progress import DownloadBar, download_bar, err_console

    assert download_bar(False) is None and isinstance(download_bar(True), DownloadBar)
    with err_console.capture() as cap:
        bar = DownloadBar()
        bar.start(2_000_000, 3)
        bar.update(1_000_000, 1)
        bar.update(2_000_000, 3)
        bar.stop()
    shown = cap.get()
    assert shown.startswith("pull ") and "3/3 files" in shown and "2.0 MB/2.0 MB" in shown
    with err_console.capture() as cap:  # in a batch log: lines, the last one always
        bar = DownloadBar(live=False)
        bar.start(2_000_000, 3)
        bar.update(1_000_000, 1)
        bar.update(2_000_000, 3)
        bar.stop()
    assert cap.get().splitlines()[-1].startswith("pull: 3/3 files, 2.0 MB/2.0 MB")
