"""The command line's root: --version, and every command's --help renders."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from alem_eval.core.version import __version__
from alem_eval.cli.app import COMMAND_MODULES, _register, app, reflow_help

_register()
COMMANDS = sorted(c.name or c.callback.__name__ for c in app.registered_commands)


def test_version_prints_the_package_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == f"alem-eval {__version__}"


def test_every_command_module_registers_a_command():
    assert len(COMMANDS) >= len(COMMAND_MODULES)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_renders(command):
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and command in result.output


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_shows_an_example(command):
    """Each command's --help ends its description with a runnable example of itself."""
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output, f"`alem-eval {command} --help` shows no example"
    assert f"alem-eval {command} " in result.output.split("Example", 1)[1]

    # The examples keep their indentation under the "Example(s):" heading (typer dedented
    # them when that heading began the text after the first paragraph).
    examples = [ln for ln in result.output.split("Example", 1)[1].splitlines() if "alem-eval" in ln]
    assert examples and examples[0].startswith("   "), result.output


SUBCOMMANDS = [
    [g.name, c.name or c.callback.__name__]
    for g in app.registered_groups
    if g.typer_instance
    for c in g.typer_instance.registered_commands
]


@pytest.mark.parametrize("argv", [[c] for c in COMMANDS] + SUBCOMMANDS, ids=" ".join)
def test_no_help_text_is_cut_on_an_80_column_terminal(argv):
    """Rich cuts a word longer than its column with an ellipsis: a path pattern or a
    long list of choices in an option's help came out as 'BUDGET/ALGORITHM/DIFFICULTY/seed…'."""
    result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    cut = [ln for ln in result.output.splitlines() if "…" in ln]
    assert not cut, cut


@pytest.mark.parametrize("argv", [[c] for c in COMMANDS] + SUBCOMMANDS, ids=" ".join)
def test_every_example_line_fits_an_80_column_help(argv):
    """An example wider than the help panel wraps at column 1, which reads as a second
    command: each is at most 78 characters with its indent (a long one is continued
    with a backslash)."""
    group = next((g.typer_instance for g in app.registered_groups if g.name == argv[0]), None)
    commands = group.registered_commands if group and len(argv) > 1 else app.registered_commands
    [info] = [c for c in commands if (c.name or c.callback.__name__) == argv[-1]]
    examples = (info.help or "").partition("Example")[2]
    wide = [ln for ln in examples.splitlines() if len(ln) > 78]
    assert not wide, wide


def test_help_prose_is_reflowed_for_the_terminal_and_examples_keep_their_lines():
    doc = (
        "First line\nwraps here.\n\nMore prose\nhere.\n\nExamples:\n\n  alem-eval x\n  alem-eval y"
    )
    assert reflow_help(doc) == (
        "First line wraps here.\n\n\nMore prose here.\n\nExamples:\n\n  alem-eval x\n  alem-eval y"
    )
    assert reflow_help("One paragraph\nonly.") == "One paragraph only."
    # In the command list too: the demo's first paragraph is wrapped by the terminal only.
    listing = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"}).output
    [demo] = [ln for ln in listing.splitlines() if "│ demo" in ln]
    assert "trained on a CPU, easy difficulty" in demo


def test_ctrl_c_says_that_completed_work_is_kept(monkeypatch, capsys, fixtures_root):
    """typer turns Ctrl-C into a silent exit 130; the user is told what happened."""
    import os
    import signal

    import alem_eval.cli.app as cli
    from alem_eval.hub.local import LocalSource

    def interrupted(self):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the command works
        raise AssertionError("SIGINT did not interrupt")

    monkeypatch.setattr(LocalSource, "cells", interrupted)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["list", "--source", str(fixtures_root)])
    assert exit_.value.code == 130
    assert capsys.readouterr().err.strip() == cli.INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is before  # restored for the caller


_PROGRAM = (
    "import atexit, sys; atexit.register(lambda: print('atexit ran', file=sys.stderr)); "
    "from alem_eval.cli.app import run; run()"
)


@pytest.mark.parametrize(
    ("args", "status"),
    [(["list", "--source", "demo", "--format", "json"], 0), (["score", "x/y"], 2)],
)
def test_the_program_ends_with_the_commands_status_its_output_whole_and_atexit_run(
    args, status, tmp_path
):
    """``alem-eval`` (``cli.app.run``) skips the interpreter's teardown after the command,
    but not what a normal exit keeps: the exit status, everything written to the streams,
    the ``atexit`` handlers."""
    import json
    import subprocess
    import sys

    from .clitools import cli_env, closed_port_url

    proc = subprocess.run(
        [sys.executable, "-c", _PROGRAM, *args],
        env=cli_env(tmp_path, closed_port_url()),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == status, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "atexit ran"
    if status == 0:
        assert {row["cell"] for row in json.loads(proc.stdout)} >= {"demo/ippo-rnn/easy/seed0"}
    else:
        assert proc.stderr.startswith("alem-eval: error: selector 'x/y'"), proc.stderr


def test_a_profiled_program_ends_normally_so_the_profile_is_written(tmp_path):
    import subprocess
    import sys

    out = tmp_path / "cli.prof"
    proc = subprocess.run(
        [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "alem_eval", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("alem-eval ") and out.stat().st_size > 0
