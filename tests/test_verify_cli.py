"""`alem-eval verify`: one line per cell, exit 0/1/2, never a traceback (through the CLI's
`main` in-process: nothing here compiles or reaches a Hub)."""

import json
import shutil

from .clitools import assert_one_line_error, cli_env, closed_port_url, run_cli_in_process
from .conftest import TINY_CELLS


def test_verify_fixture_cells_prints_five_ok_lines_with_counts(tmp_path, fixtures_root):
    proc = run_cli_in_process(
        ["verify", "tiny/*/*/*", "--source", str(fixtures_root)],
        cli_env(tmp_path, closed_port_url()),
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(TINY_CELLS)
    assert all(line.startswith("OK ") for line in lines)
    assert "tiny/ippo-rnn/easy/seed0  340,253 params" in proc.stdout
    assert "tiny/pqn-vdn-rnn/easy/seed0  698,960 params" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_verify_reports_a_contradicting_config_and_exits_1(tmp_path, fixtures_root):
    src = tmp_path / "runs"
    for cell in ("tiny/ippo-rnn/easy/seed0", "tiny/hypermarl-rnn/hard/seed0"):
        shutil.copytree(fixtures_root / cell, src / cell)
    cfg_path = src / "tiny/hypermarl-rnn/hard/seed0/config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["reload_overrides"]["HYPERNET_HIDDEN_DIMS"] = [32]
    cfg_path.write_text(json.dumps(cfg))
    proc = run_cli_in_process(
        ["verify", "--source", str(src), "--format", "json"],  # every cell of the directory
        cli_env(tmp_path, closed_port_url()),
    )
    assert proc.returncode == 1, proc.stderr
    rows = {r["cell"]: r for r in json.loads(proc.stdout)}
    assert rows["tiny/ippo-rnn/easy/seed0"]["status"] == "OK"
    # a local directory has no listing: nothing to check the files against, nothing repaired
    assert rows["tiny/ippo-rnn/easy/seed0"]["checked"] is None
    assert rows["tiny/ippo-rnn/easy/seed0"]["repaired"] == []
    bad = rows["tiny/hypermarl-rnn/hard/seed0"]
    assert bad["status"] == "FAIL" and "HYPERNET_HIDDEN_DIMS" in bad["message"]
    assert "actor_hypernet/Dense_0/kernel: expected [8, 32], found [8, 16]" in bad["message"]
    assert "Traceback" not in proc.stderr
    assert cfg_path.exists()  # nothing of the user's is removed


def test_verify_non_json_config_is_one_fail_line(tmp_path, fixtures_root):
    src = tmp_path / "runs"
    shutil.copytree(fixtures_root / "tiny/ippo-rnn/easy/seed0", src / "x/ippo-rnn/easy/seed0")
    (src / "x/ippo-rnn/easy/seed0/config.json").write_text("{ oops")
    proc = run_cli_in_process(
        ["verify", "x", "--source", str(src)], cli_env(tmp_path, closed_port_url())
    )
    assert proc.returncode == 1
    [line] = proc.stdout.strip().splitlines()
    assert line.startswith("FAIL") and "not valid JSON" in line


def test_verify_usage_errors_exit_2(tmp_path, fixtures_root):
    env = cli_env(tmp_path, closed_port_url())
    proc = run_cli_in_process(["verify", "../etc", "--source", str(fixtures_root)], env)
    assert_one_line_error(proc)
    assert proc.returncode == 2
    proc = run_cli_in_process(
        ["verify", "tiny/ippo-rnn/easy/seed9", "--source", str(fixtures_root)], env
    )
    assert_one_line_error(proc, "seed9")
    assert proc.returncode == 2
    proc = run_cli_in_process(["verify", "tiny", "--source", str(tmp_path / "nowhere")], env)
    assert_one_line_error(proc, "does not exist")
    assert proc.returncode == 2  # a wrong --source is a usage error like a wrong selector
    proc = run_cli_in_process(["verify"], env)  # the whole Hub release: never without asking
    assert_one_line_error(proc, "name the Hub cells")
    assert proc.returncode == 2


def test_a_cell_the_source_cannot_provide_fails_naming_it_once(fixtures_root):
    from alem_eval.hub.manifest import Cell
    from alem_eval.hub.sources import open_source
    from alem_eval.model.verify import verify_cells

    missing = Cell("tiny", "ippo-rnn", "easy", 7)
    [result] = verify_cells(open_source(str(fixtures_root)), [missing])
    assert not result.ok and result.cell == missing.id
    assert result.message.startswith("no such cell under ")  # the id is in result.cell
