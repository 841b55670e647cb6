"""Run the ``alem-eval`` CLI as a user would: a subprocess with its own HF_* and cache env
(:func:`run_cli`), or in this process through the same ``main`` (:func:`run_cli_in_process`).

A subprocess imports everything again (JAX, flax, alem: seconds each time on a loaded
2-core machine). Tests of what a command prints and how it exits on bad input run
in-process; a subprocess stays for what needs one: the process boundary itself (the exit
status and the streams of the real interpreter), a Hub endpoint or offline mode
(``huggingface_hub`` reads ``HF_*`` once, at import), a kill, or a fresh JAX.
"""

from __future__ import annotations

import contextlib
import io
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


# What the `alem-eval` program runs (pyproject's console script), for `python -c`.
CLI_CODE = "from alem_eval.cli.app import run; run()"


def run_cli(
    args: list[str], env: dict[str, str], *, timeout: float = 120
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CLI_CODE, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_cli_in_process(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """:func:`run_cli` without the subprocess: ``alem_eval.cli.app.main(args)`` with ``env``
    as the whole environment and its streams captured; the exit status is that of
    ``SystemExit`` (0 when ``main`` returns). For commands that neither compile nor reach a
    Hub: ``huggingface_hub`` keeps the endpoint and offline mode it read at import (the
    session's dead endpoint, tests/conftest.py)."""
    from alem_eval.cli.app import exit_status, main

    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    code: int | str | None = 0
    try:
        os.environ.clear()
        os.environ.update(env)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(list(args))
            except SystemExit as exc:
                code = exc.code
    finally:
        os.environ.clear()
        os.environ.update(saved)
    if not isinstance(code, int) and code is not None:  # sys.exit("text") prints it
        err.write(f"{code}\n")
    return subprocess.CompletedProcess(
        ["alem-eval", *args], exit_status(code), out.getvalue(), err.getvalue()
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("alem-eval: error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
