"""``--dry-run`` of pull, score and crossplay (alem_eval.scoring.plan), and the one-line refusal of
a command that would take every Hub cell without being asked to ('*').

The Hub is the loopback server of tests/hub_server.py; the CLI runs in a subprocess (the
HF_* variables are read at import). Nothing here compiles or plays an episode.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from alem_eval.cli.app import main
from alem_eval.scoring.teams import compositions
from alem_eval.core.errors import SourceError
from alem_eval.hub.manifest import Cell
from alem_eval.scoring.plan import plan_crossplay, plan_pull, plan_score
from alem_eval.scoring.score import ScoreOptions, _plan
from alem_eval.hub.hubsource import HubSource
from alem_eval.hub.sources import open_source

from .clitools import cli_env, run_cli
from .conftest import FIXTURES
from .hub_server import HubServer

IPPO = ("tiny/ippo-rnn/easy/seed0", "tiny/ippo-rnn/hard/seed2")


@pytest.fixture
def hub():
    with HubServer(FIXTURES, include=("tiny/",)) as server:
        yield server


def files_in(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def strict_json(text: str):
    def refuse(token):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


# ----------------------------------------------------------------------------------------
# Library: plans
# ----------------------------------------------------------------------------------------
def test_hub_plan_takes_files_and_sizes_from_the_listing_and_downloads_nothing(hub, tmp_path):
    cache = tmp_path / "hf-cache"
    src = open_source("hub", cache_dir=cache, endpoint=hub.url, read_only=True)
    assert isinstance(src, HubSource)
    plan = plan_pull(src, src.select(["tiny/ippo-rnn"]))
    for row in plan.cells:
        listed = hub.files_under(row.cell)
        assert (row.files, row.bytes) == (len(listed), sum(listed.values()))
        assert (row.files_to_download, row.bytes_to_download) == (row.files, row.bytes)
    assert [r.cell for r in plan.cells] == list(IPPO)
    assert hub.file_requests("GET") == [] and files_in(cache) == []
    with pytest.raises(SourceError, match="read-only"):
        src.pull([Cell.from_id(IPPO[0])])
    assert hub.file_requests("GET") == [] and files_in(cache) == []

    # Once a cell is pulled, its files are no longer to download; the other's still are.
    open_source("hub", cache_dir=cache, endpoint=hub.url).pull([Cell.from_id(IPPO[0])])
    hub.clear()
    again = plan_pull(src, src.select(["tiny/ippo-rnn"]))
    assert [(r.files_to_download, r.bytes_to_download) for r in again.cells] == [
        (0, 0),
        (plan.cells[1].files, plan.cells[1].bytes),
    ]
    assert again.totals()["bytes_to_download"] == plan.cells[1].bytes
    assert hub.file_requests("GET") == []


@pytest.mark.parametrize("protocol", ["fast", "reference"])
def test_score_plan_has_the_episodes_and_cap_score_would_use(protocol):
    """The plan's eval difficulties, episodes and step cap per cell are those score_cells
    plans its jobs with; a local source has nothing to download."""
    src = open_source(str(FIXTURES))
    cells = src.select(["tiny"])
    options = ScoreOptions(protocol=protocol, max_steps=40 if protocol == "fast" else None)
    plan = plan_score(src, cells, options)
    jobs = _plan(src, cells, options)
    for row, cell in zip(plan.cells, cells, strict=True):
        mine = [j for j in jobs if j.cell == cell]
        assert row.eval_difficulties == tuple(j.eval_difficulty for j in mine)
        assert row.episodes == sum(j.num_episodes for j in mine)
        assert row.max_steps == mine[0].max_steps
        assert row.max_env_steps == sum(j.num_episodes * j.max_steps for j in mine)
        on_disk = files_in(FIXTURES / cell.id)
        assert (row.files, row.bytes) == (len(on_disk), sum(p.stat().st_size for p in on_disk))
        assert (row.files_to_download, row.bytes_to_download) == (0, 0)
    totals = plan.totals()
    assert totals["episodes"] == sum(j.num_episodes for j in jobs) == plan.episodes
    assert totals["max_env_steps"] == sum(j.num_episodes * j.max_steps for j in jobs)


def test_crossplay_plan_counts_the_scheme_teams():
    src = open_source(str(FIXTURES))
    cells = src.select(["tiny/ippo-rnn"])
    plan = plan_crossplay(src, cells, eval_difficulty="hard", num_episodes=3, max_steps=25)
    teams = compositions(cells, "pairs", num_slots=3)
    assert plan.teams == len(teams) and plan.episodes == 3 * len(teams)
    assert plan.max_env_steps == 3 * 25 * len(teams)
    assert [r.cell for r in plan.cells] == list(IPPO)
    with pytest.raises(Exception, match="different difficulties"):  # as run_crossplay says
        plan_crossplay(src, cells)


def test_scenario_plan_counts_its_teams_without_loading_the_agent(capsys):
    """Two populations of one cell each: per population its self-play, then per mode the
    focal in each of 3 slots and the other cell (the stranger) in the same 3; A visiting
    B is B resident with A, so the strangers' teams are 6, not 12 (each team plays
    once). The focal spec names a file that does not exist: the plan never loads it."""
    from alem_eval.scoring.plan import plan_scenario

    src = open_source(str(FIXTURES))
    cells = src.select(["tiny/ippo-rnn/easy/seed0", "tiny/pqn-vdn-rnn/easy/seed0"])
    plan = plan_scenario(src, cells, focal="nowhere.py:agent", num_episodes=2, max_steps=25)
    assert plan.command == "scenario" and plan.teams == 2 * (1 + 2 * 3) + 6
    assert plan.episodes == 2 * plan.teams and plan.max_env_steps == 25 * plan.episodes
    visitor = plan_scenario(src, cells, focal="x", mode="visitor", num_episodes=2)
    assert visitor.teams == 2 * (1 + 3 + 3)
    with pytest.raises(SystemExit) as exc:
        main(
            ["scenario", "--focal", "nowhere.py:agent", "tiny/*/easy", "--source", str(FIXTURES)]
            + ["--dry-run", "--format", "json", "--episodes", "2", "--max-steps", "25"]
        )
    assert exc.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == "scenario" and doc["totals"]["teams"] == plan.teams


# ----------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["score", "pull", "crossplay", "verify"])
def test_no_selector_on_the_hub_is_refused_naming_star(command, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main([command, "--cache-dir", str(tmp_path / "hf")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2
    assert len(err) == 1 and err[0].startswith(f"alem-eval: error: {command}: name the Hub")
    assert "'*'" in err[0]
    assert files_in(tmp_path) == []


@pytest.mark.slow
def test_cli_dry_runs_download_run_and_write_nothing(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    before = files_in(tmp_path)

    proc = run_cli(["score", "tiny/ippo-rnn", "--dry-run", "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    plan = strict_json(proc.stdout)
    assert plan["command"] == "score" and plan["dry_run"] is True
    assert [c["cell"] for c in plan["cells"]] == list(IPPO)
    listed = {cell: hub.files_under(cell) for cell in IPPO}
    assert [c["bytes_to_download"] for c in plan["cells"]] == [
        sum(listed[c].values()) for c in IPPO
    ]
    assert plan["totals"]["episodes"] == sum(c["episodes"] for c in plan["cells"])
    assert "nothing was downloaded, run or written" in proc.stderr

    proc = run_cli(["pull", "*", "--dry-run", "--format", "csv"], env)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "cell,files,bytes,files_to_download,bytes_to_download"
    assert len(lines) - 1 == len({"/".join(p.split("/")[:4]) for p in hub.files})

    proc = run_cli(
        ["crossplay", "tiny/ippo-rnn", "--eval-difficulty", "hard", "--dry-run", "--episodes", "2"],
        env,
    )
    assert proc.returncode == 0, proc.stderr
    teams = compositions([Cell.from_id(c) for c in IPPO], "pairs", num_slots=3)
    assert f"crossplay --dry-run: 2 cell(s) in {len(teams)} teams" in proc.stderr

    assert hub.file_requests("GET") == [] and hub.file_requests("HEAD") == []
    assert files_in(tmp_path) == before  # no cache, results store or output file


def test_cli_pull_json_is_the_pull_report(hub, tmp_path):
    env = cli_env(tmp_path, hub.url)
    proc = run_cli(["pull", IPPO[0], "--format", "json"], env)
    assert proc.returncode == 0, proc.stderr
    report = strict_json(proc.stdout)
    listed = hub.files_under(IPPO[0])
    assert report["commit"] == hub.commit
    assert (report["files_fetched"], report["bytes_total"]) == (
        len(listed),
        sum(listed.values()),
    )
    (row,) = report["cells"]
    assert row["cell"] == IPPO[0] and Path(row["path"], "config.json").is_file()

    proc = run_cli(["pull", IPPO[0], "--format", "csv"], env)  # now cached: nothing fetched
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["cell,path,commit", f"{IPPO[0]},{row['path']},{hub.commit}"]
    assert "0 file(s) fetched" in proc.stderr
