"""Run the ``alem-eval`` CLI as a user would: a subprocess with its own HF_* and cache env."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from .conftest import REPO


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def cli_env(tmp_path: Path, endpoint: str, *, offline: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    env.update(
        HF_HOME=str(tmp_path / "hf-home"),
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_TELEMETRY="1",
        ALEM_EVAL_CACHE=str(tmp_path / "alem-cache"),
        COLUMNS="200",
    )
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return env


def run_cli(
    args: list[str], env: dict[str, str], *, timeout: float = 120
) -> subprocess.CompletedProcess:
    code = "import sys; from alem_eval.cli.app import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alem-eval: error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
