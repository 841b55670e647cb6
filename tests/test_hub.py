"""Manifest, selectors, sources and the ``list``/``pull`` commands, against a loopback Hub.

The Hub is ``tests/hub_server.HubServer`` serving the fixture cells over real HTTP; the
huggingface_hub client is never mocked. CLI tests run ``alem-eval`` in a subprocess with
``HF_ENDPOINT``/``HF_HOME``/``HF_HUB_OFFLINE`` set, as a user would.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
from pathlib import Path

import pytest

from alem_eval.core.errors import DownloadError, SelectorError, SourceError
from alem_eval.hub.manifest import Cell, load_manifest
from alem_eval.hub.selectors import select_cells
from alem_eval.hub.hubsource import HubSource
from alem_eval.hub.local import LocalSource
from alem_eval.hub.sources import open_source

from .conftest import FIXTURES, REPO, TINY_CELLS
from .clitools import assert_one_line_error, cli_env, closed_port_url, run_cli
from .hub_server import HubServer

IPPO_EASY = "tiny/ippo-rnn/easy/seed0"
BIG_FILE = f"{IPPO_EASY}/checkpoint/ocdbt.process_0/d/ef7e5e68db6dd7d79fc1e28418cc7181"


# ----------------------------------------------------------------------------------------
# Fixtures and helpers
# ----------------------------------------------------------------------------------------
@pytest.fixture
def hub():
    with HubServer(FIXTURES, include=("tiny/",)) as server:
        yield server


@pytest.fixture
def cache(tmp_path) -> Path:
    return tmp_path / "hf-cache"


def hub_source(hub: HubServer, cache: Path, **kw) -> HubSource:
    src = open_source("hub", cache_dir=cache, endpoint=hub.url, **kw)
    assert isinstance(src, HubSource)
    return src


def cached_sizes(cache: Path, commit: str, cell_id: str) -> dict[str, int]:
    root = cache / "models--alem-world--alem-rl-baselines" / "snapshots" / commit
    return {
        p.relative_to(root).as_posix(): p.stat().st_size
        for p in (root / cell_id).rglob("*")
        if p.is_file()
    }


# ----------------------------------------------------------------------------------------
# Manifest
# ----------------------------------------------------------------------------------------
def test_manifest_has_every_released_cell():
    m = load_manifest()
    ids = [e.cell.id for e in m.entries]
    assert len(ids) == len(set(ids)) == 120
    assert {e.cell.budget for e in m.entries} == {"100M", "1B"}
    assert {e.cell.seed for e in m.entries} == set(range(5))
    families = {e.cell.algorithm: e.family for e in m.entries}
    assert families == {
        "ippo-rnn": "ppo",
        "mappo-rnn": "ppo-ctde",
        "hypermarl-rnn": "hypermarl",
        "pqn-vdn-rnn": "pqn",
    }
    e = m.entry(Cell("100m", "ippo-rnn", "hard", 3))  # budget spelling is case-insensitive
    assert e is not None and e.path == "100M/ippo-rnn/hard/seed3" and e.revision == "main"
    assert e.repo == "alem-world/alem-rl-baselines"
    assert {x.env_version for x in m.entries} == {"v0.13741-fix-construction-more-metrics"}


def test_manifest_param_counts_match_networks():
    from alem_eval.algorithms.config import build_run_config, resolve_values
    from alem_eval.model.networks import build_network

    expected = {e.cell.algorithm: e.expected_params for e in load_manifest().entries}
    assert expected == {
        "ippo-rnn": 2_589_885,
        "mappo-rnn": 7_508_797,
        "hypermarl-rnn": 25_614_013,
        "pqn-vdn-rnn": 18_462_800,
    }
    for algo, count in expected.items():
        values, _ = resolve_values(algo, overrides={"NUM_COMM_CHANNELS": 4})
        assert build_network(build_run_config(algo, values)).num_params() == count, algo


def test_manifest_file_is_generated():
    spec = importlib.util.spec_from_file_location(
        "manifest_generate", REPO / "manifests" / "generate.py"
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (REPO / "manifests" / "alem-rl-baselines.json").read_text() == gen.render()


def test_cell_id_round_trip():
    c = Cell("1B", "ippo-rnn", "hard", 0)
    assert c.id == "1B/ippo-rnn/hard/seed0" and Cell.from_id(c.id) == c
    with pytest.raises(SelectorError):
        Cell.from_id("1B/ippo-rnn/hard")


# ----------------------------------------------------------------------------------------
# Selectors
# ----------------------------------------------------------------------------------------
UNIVERSE = load_manifest().cells()


def ids(cells) -> list[str]:
    return [c.id for c in cells]


@pytest.mark.parametrize(
    "selector, count",
    [
        ("1B/ippo-rnn/hard", 5),
        ("*/*/hard", 40),
        ("100M", 60),
        ("1B/", 60),
        ("1B,100M/ippo-rnn,mappo-rnn/hard/seed0,seed3", 8),
        ("*/*/*/seed[0-1]", 48),
        ("1b/IPPO/Hard/3", 1),
        ("1B/pqn/easy/seed4", 1),
    ],
)
def test_selector_levels_lists_and_omitted_levels(selector, count):
    assert len(select_cells(UNIVERSE, [selector])) == count


def test_selector_budget_is_case_insensitive_and_keeps_listing_spelling():
    universe = [Cell("100m", "ippo-rnn", "easy", s) for s in range(5)]
    got = select_cells(universe, ["100M/ippo-rnn/easy/seed3"])
    assert ids(got) == ["100m/ippo-rnn/easy/seed3"]


def test_seed_level_accepts_number_and_name():
    by_number = select_cells(UNIVERSE, ["1B/ippo-rnn/hard/3"])
    assert by_number == select_cells(UNIVERSE, ["1B/ippo-rnn/hard/seed3"])


def test_selectors_union_is_sorted_and_deduplicated():
    got = select_cells(
        UNIVERSE, ["1B/ippo-rnn/hard/seed1", "1B/ippo-rnn/hard", "100M/ippo-rnn/hard/seed0"]
    )
    assert ids(got)[0] == "100M/ippo-rnn/hard/seed0" and len(got) == 6


def test_filters_narrow_selectors():
    got = select_cells(UNIVERSE, ["1B"], difficulties=["hard"], algorithms=["ippo-rnn,mappo-rnn"])
    assert len(got) == 10 and {c.difficulty for c in got} == {"hard"}
    assert len(select_cells(UNIVERSE, budgets=["100m"], seeds=[0])) == 12
    with pytest.raises(SelectorError, match=r"no difficulty 'hardest'.*did you mean hard"):
        select_cells(UNIVERSE, difficulties=["hardest"])
    with pytest.raises(SelectorError, match="no cell matches both"):
        select_cells(UNIVERSE, ["1B/*/easy"], difficulties=["hard"])


@pytest.mark.parametrize(
    "selector, message",
    [
        ("1B/ipo-rnn/hard", r"no algorithm 'ipo-rnn' \(did you mean ippo-rnn"),
        ("2B", r"no budget '2B' \(valid: 100M, 1B\)"),
        ("1B/ippo-rnn/hrad", r"no difficulty 'hrad' \(did you mean hard"),
        ("1B/ippo-rnn/hard/seed9", r"no seed 'seed9'"),
    ],
)
def test_unknown_selector_suggests_closest(selector, message):
    with pytest.raises(SelectorError, match=message) as err:
        select_cells(UNIVERSE, [selector])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "selector",
    [
        "../x",
        "1B/../../etc",
        "1B/ippo-rnn/..",
        "/etc/passwd",
        "1B\\ippo-rnn",
        "1B//hard",
        "C:/x",
        "1B/ippo-rnn/hard/seed0/extra",
        "",
        "1B/,ippo-rnn",
        ".hidden",
    ],
)
def test_selector_rejects_paths_and_empty_levels(selector):
    with pytest.raises(SelectorError):
        select_cells(UNIVERSE, [selector])


def test_combination_that_exists_nowhere_names_what_is_available():
    universe = [Cell.from_id(c) for c in TINY_CELLS]
    nowhere = r"no such difficulty under tiny/ippo-rnn \(available: easy, hard\)"
    with pytest.raises(SelectorError, match=nowhere):
        select_cells(universe, ["tiny/ippo-rnn/medium"])


# ----------------------------------------------------------------------------------------
# Local source
# ----------------------------------------------------------------------------------------
def test_local_source_discovers_the_layout(tmp_path):
    src = open_source(FIXTURES, cache_dir=tmp_path)
    assert isinstance(src, LocalSource)
    assert sorted(ids(src.cells())) == sorted([*TINY_CELLS, "full/ippo-rnn/hard/seed1"])
    cell = src.select(["TINY/ippo-rnn/easy"])[0]
    assert src.local_dir(cell) == FIXTURES.resolve() / IPPO_EASY
    assert src.state(cell) == "cached"
    report = src.pull([cell])
    n_files = sum(1 for p in (FIXTURES / IPPO_EASY).rglob("*") if p.is_file())
    assert report.files_fetched == 0 and report.files_skipped == n_files


def test_local_source_single_cell_dir_and_missing_path(tmp_path):
    src = open_source(FIXTURES / IPPO_EASY, cache_dir=tmp_path)
    assert ids(src.cells()) == [IPPO_EASY]
    with pytest.raises(SourceError, match="does not exist") as missing:
        open_source(tmp_path / "nope")
    assert missing.value.exit_code == 2  # the command line names no directory
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no cells under"):
        open_source(tmp_path / "empty").select([])


def test_verified_marker_is_void_when_a_file_changes(tmp_path, cell_copy):
    cell_dir = cell_copy(IPPO_EASY)
    src = open_source(tmp_path / "src", cache_dir=tmp_path / "cache")
    cell = src.select([IPPO_EASY])[0]
    assert src.state(cell) == "cached"
    assert src.mark_verified(cell, "abc123")
    assert src.state(cell) == "verified" and src.verified_hash(cell) == "abc123"
    with open(cell_dir / "config.json", "a") as f:
        f.write(" ")
    assert src.state(cell) == "cached" and src.verified_hash(cell) is None


# ----------------------------------------------------------------------------------------
# Hub source, in process
# ----------------------------------------------------------------------------------------
def test_pull_round_trip_fetches_only_the_cell_once(cache):
    with HubServer(FIXTURES, include=("tiny/",), page_size=7) as hub:  # paginated tree
        src = hub_source(hub, cache)
        cells = src.select(["tiny/ippo-rnn/easy"])
        assert ids(cells) == [IPPO_EASY] and src.state(cells[0]) == "remote"
        report = src.pull(cells, workers=4)
        expected = hub.files_under(IPPO_EASY)
        assert sorted(hub.file_requests("GET")) == sorted(expected)  # each file once, nothing else
        assert report.files_fetched == len(expected) and report.files_skipped == 0
        assert report.bytes_fetched == report.bytes_total == sum(expected.values())
        assert cached_sizes(cache, hub.commit, IPPO_EASY) == expected
        assert src.state(cells[0]) == "cached"
        assert src.local_dir(cells[0]) == report.root / IPPO_EASY
        assert (src.local_dir(cells[0]) / "checkpoint" / "_METADATA").is_file()

        hub.clear()
        again = hub_source(hub, cache)
        report2 = again.pull(again.select([IPPO_EASY]))
        assert report2.files_fetched == 0 and report2.files_skipped == len(expected)
        assert hub.file_requests("GET") == [] and hub.file_requests("HEAD") == []
        assert [r.url_path for r in hub.requests] == [
            "/api/models/alem-world/alem-rl-baselines/revision/main"
        ]  # the listing is cached


def test_truncated_download_is_detected_and_refetched(hub, cache):
    hub.truncate(BIG_FILE, keep=1000)  # short body, announced as complete
    src = hub_source(hub, cache)
    report = src.pull(src.select([IPPO_EASY]))
    assert report.files_repaired == 1
    assert hub.file_requests("GET").count(BIG_FILE) == 2
    assert (report.root / BIG_FILE).read_bytes() == (FIXTURES / BIG_FILE).read_bytes()


def test_truncated_cached_file_is_replaced(hub, cache):
    src = hub_source(hub, cache)
    cell = src.select([IPPO_EASY])[0]
    src.pull([cell])
    blob = (src.local_dir(cell) / BIG_FILE.split(IPPO_EASY + "/")[1]).resolve()
    blob.write_bytes(b"")  # an empty file left behind by a broken disk or tool
    assert src.state(cell) == "remote"
    hub.clear()
    report = hub_source(hub, cache).pull([cell])
    assert hub.file_requests("GET") == [BIG_FILE] and report.files_repaired == 1
    assert (report.root / BIG_FILE).read_bytes() == (FIXTURES / BIG_FILE).read_bytes()


def test_dropped_connection_resumes_with_range(cache):
    from huggingface_hub import constants

    big = "full/ippo-rnn/hard/seed1/checkpoint/ocdbt.process_0/d/b69eb60ea0434337ffa82deec9b67380"
    chunk = constants.DOWNLOAD_CHUNK_SIZE  # the client writes whole chunks before resuming
    with HubServer(FIXTURES, include=("full/",)) as hub:
        hub.cut(big, at=chunk + 1000)
        src = hub_source(hub, cache)
        report = src.pull(src.select(["full"]))
        gets = [r for r in hub.requests if r.repo_path == big and r.method == "GET"]
        assert [g.range for g in gets] == [None, f"bytes={chunk}-"]
        assert (report.root / big).read_bytes() == (FIXTURES / big).read_bytes()


def test_failed_file_is_reported_and_a_rerun_resumes(hub, cache):
    hub.fail(times=1, status=403, match=BIG_FILE)  # 403: the client does not retry
    src = hub_source(hub, cache)
    cells = src.select([IPPO_EASY])
    with pytest.raises(DownloadError, match="HTTP 403") as err:
        src.pull(cells, workers=2)
    assert "\n" not in str(err.value)
    fetched = set(hub.file_requests("GET"))  # the first failure stops new transfers
    assert BIG_FILE not in fetched and src.state(cells[0]) == "remote"
    hub.clear()
    report = hub_source(hub, cache).pull(cells)
    assert set(hub.file_requests("GET")) == set(hub.files_under(IPPO_EASY)) - fetched
    assert report.files_skipped == len(fetched)  # what completed before was kept


def test_budget_spelling_follows_the_listing(tmp_path, cache):
    import shutil

    shutil.copytree(FIXTURES / IPPO_EASY, tmp_path / "repo" / "100m/ippo-rnn/easy/seed0")
    with HubServer(tmp_path / "repo") as hub:
        src = hub_source(hub, cache)
        [cell] = src.select(["100M/ippo-rnn/easy"])
        assert cell.id == "100m/ippo-rnn/easy/seed0"
        assert src.expected_params(cell) == 2_589_885  # the manifest says 100M
        report = src.pull([cell])
        assert src.local_dir(cell) == report.root / "100m/ippo-rnn/easy/seed0"
        assert src.state(Cell("100M", "ippo-rnn", "easy", 0)) == "cached"


def test_unreachable_with_cached_listing_serves_cached_cells_only(hub, cache):
    hub_source(hub, cache).pull([Cell.from_id(IPPO_EASY)])
    dead = open_source("hub", cache_dir=cache, endpoint=closed_port_url())
    assert len(dead.select(["tiny"])) == len(TINY_CELLS)  # the cached listing
    report = dead.pull(dead.select([IPPO_EASY]))
    assert report.offline and report.files_fetched == 0
    with pytest.raises(DownloadError, match=r"cannot reach the Hub.*not cached"):
        dead.pull(dead.select(["tiny/mappo-rnn"]))


def test_huggingface_hub_reads_the_cache_pull_fills(hub, cache):
    """The cache is huggingface_hub's own: its scanner and local_files_only find the files."""
    from huggingface_hub import hf_hub_download, scan_cache_dir

    hub_source(hub, cache).pull([Cell.from_id(IPPO_EASY)])
    info = scan_cache_dir(cache)
    assert info.warnings == []
    (repo,) = info.repos
    assert (repo.repo_id, [r.commit_hash for r in repo.revisions]) == (hub.repo, [hub.commit])
    assert {ref for r in repo.revisions for ref in r.refs} == {"main"}
    assert repo.nb_files == len(hub.files_under(IPPO_EASY))
    path = hf_hub_download(
        hub.repo, f"{IPPO_EASY}/config.json", cache_dir=cache, local_files_only=True
    )
    assert Path(path).read_bytes() == (FIXTURES / IPPO_EASY / "config.json").read_bytes()
    refs = cache / "models--alem-world--alem-rl-baselines" / "refs"
    assert sorted(p.name for p in refs.iterdir()) == ["main"]  # no temp file, ever


def test_a_revision_removed_from_the_cache_is_not_named_as_the_cells_commit(hub, cache):
    import shutil

    cell = Cell.from_id(IPPO_EASY)
    hub_source(hub, cache).pull([cell])
    storage = cache / "models--alem-world--alem-rl-baselines"
    shutil.rmtree(storage / "snapshots" / hub.commit)  # what `hf cache rm <commit>` does
    (storage / "refs" / "main").unlink()
    dead = open_source("hub", cache_dir=cache, endpoint=closed_port_url())
    assert dead.commit(cell) is None and dead.state(cell) == "remote"


def test_another_repo_with_nothing_cached_says_so_not_that_the_manifest_lacks_it(cache):
    src = open_source("hub", repo="me/my-runs", cache_dir=cache, endpoint=closed_port_url())
    with pytest.raises(SourceError, match=r"nothing is cached for me/my-runs@main"):
        src.select(["mine/ippo/easy/0"])


def test_unknown_repo_and_revision_are_one_line_errors(hub, cache):
    with pytest.raises(SourceError, match="Hub repo 'nobody/nothing' not found"):
        hub_source(hub, cache, repo="nobody/nothing").select([])
    with pytest.raises(SourceError, match="revision 'v9' not found"):
        hub_source(hub, cache, revision="v9").select([])


def test_server_error_without_cache_is_a_source_error(hub, cache):
    hub.fail(times=1, status=503, match="/api/models/")
    src = hub_source(hub, cache)
    cells = src.select([])  # falls back to the manifest for display ...
    assert len(cells) == 120 and any("503" in w for w in src.warnings)
    assert {src.state(c) for c in cells} == {"remote"}
    with pytest.raises(SourceError, match=r"503.*nothing is cached"):
        src.pull(src.select(["100M/ippo-rnn/easy/seed0"]))


def test_mark_verified_on_hub_cells(hub, cache):
    src = hub_source(hub, cache)
    cell = src.select([IPPO_EASY])[0]
    with pytest.raises(SourceError, match="not available locally"):
        src.mark_verified(cell)
    src.pull([cell])
    src.mark_verified(cell, "h1")
    assert hub_source(hub, cache).state(cell) == "verified"


# ----------------------------------------------------------------------------------------
# CLI (subprocess: real environment variables, real exit codes and stderr)
# ----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_cli_pull_then_offline(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    proc = run_cli(["pull", "tiny/ippo-rnn/easy", "--workers", "3"], env)
    assert proc.returncode == 0, proc.stderr
    cell_id, path = proc.stdout.strip().split("\t")
    assert cell_id == IPPO_EASY and Path(path, "config.json").is_file()
    assert f"{len(hub.files_under(IPPO_EASY))} file(s) fetched, 0 skipped" in proc.stderr
    assert sorted(hub.file_requests("GET")) == sorted(hub.files_under(IPPO_EASY))

    hub.clear()
    offline = cli_env(tmp_path, hub.url, offline=True)
    proc = run_cli(["pull", IPPO_EASY], offline)
    assert proc.returncode == 0, proc.stderr
    assert "offline" in proc.stderr and hub.requests == []
    proc = run_cli(["list", "tiny", "--format", "json"], offline)
    assert proc.returncode == 0, proc.stderr
    states = {r["cell"]: r["state"] for r in json.loads(proc.stdout)}
    assert states[IPPO_EASY] == "cached" and states["tiny/mappo-rnn/medium/seed0"] == "remote"
    assert hub.requests == []


@pytest.mark.slow
def test_cli_unreachable_endpoint_keeps_the_cache(hub, tmp_path):
    hub_source(hub, tmp_path / "hf-home" / "hub").pull([Cell.from_id(IPPO_EASY)])
    before = cached_sizes(tmp_path / "hf-home" / "hub", hub.commit, IPPO_EASY)

    dead = cli_env(tmp_path, closed_port_url())
    proc = run_cli(["pull", "tiny/mappo-rnn/medium"], dead)
    assert_one_line_error(proc, "cannot reach the Hub")
    assert cached_sizes(tmp_path / "hf-home" / "hub", hub.commit, IPPO_EASY) == before
    proc = run_cli(["pull", IPPO_EASY], dead)  # what is cached still serves
    assert proc.returncode == 0, proc.stderr


def test_cli_offline_or_unreachable_with_nothing_cached(tmp_path):
    proc = run_cli(["pull", "1B/ippo-rnn/hard"], cli_env(tmp_path, closed_port_url(), offline=True))
    assert_one_line_error(proc, "offline mode is on", "nothing is cached")
    proc = run_cli(["pull", "1B/ippo-rnn/hard"], cli_env(tmp_path, closed_port_url()))
    assert_one_line_error(proc, "cannot reach the Hub", "nothing is cached")


def test_cli_list_json_and_csv(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    proc = run_cli(["list", "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert sorted(r["cell"] for r in rows) == sorted(TINY_CELLS)
    assert set(rows[0]) >= {
        "cell",
        "budget",
        "algorithm",
        "difficulty",
        "seed",
        "state",
        "expected_params",
        "commit",
    }
    assert {r["state"] for r in rows} == {"remote"}

    proc = run_cli(["list", "tiny/ippo-rnn", "--format", "csv"], env)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert [r["cell"] for r in rows] == [IPPO_EASY, "tiny/ippo-rnn/hard/seed2"]
    assert rows[0]["seed"] == "0" and rows[0]["state"] == "remote"


def test_cli_selector_and_source_errors(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    proc = run_cli(["pull", "tiny/ipo-rnn"], env)
    assert_one_line_error(proc, "did you mean ippo-rnn")
    assert proc.returncode == 2
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    proc = run_cli(["pull", IPPO_EASY, "--cache-dir", str(not_a_dir)], env)
    assert_one_line_error(proc, "cannot write")
    assert not_a_dir.read_text() == "x"
