"""The ``alem-eval`` command line: thin typer commands over the library API.

Each command lives in ``alem_eval/cli/commands/<name>.py``, parses its options, calls one
library function and renders the result (data on stdout, humans on stderr via rich).
Options that several commands share are declared once, in :mod:`alem_eval.cli.options`.
Every :class:`~alem_eval.core.errors.AlemEvalError` becomes one line on stderr and a non-zero
exit code; tracebacks are shown only with ``ALEM_EVAL_DEBUG=1``.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import warnings

from typing import Annotated, NoReturn

import typer

from alem_eval.core.errors import AlemEvalError

app = typer.Typer(
    name="alem-eval",
    help="Get, verify, score and compare the released Alem RL baselines.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from alem_eval.core.version import __version__

        print(f"alem-eval {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Get, verify, score and compare the released Alem RL baselines."""


# Command modules register themselves on `app` when imported.
COMMAND_MODULES = (
    "list_",
    "pull",
    "verify",
    "verify_results",
    "score",
    "demo",
    "report",
    "leaderboard",
    "export",
    "train",
    "compare",
    "crossplay",
    "scenario",
    "render",
    "dataset",
)


def _register() -> None:
    for name in COMMAND_MODULES:
        try:
            importlib.import_module(f"alem_eval.cli.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"alem_eval.cli.commands.{name}":
                raise
    groups = [app, *(g.typer_instance for g in app.registered_groups if g.typer_instance)]
    for info in (c for group in groups for c in group.registered_commands):
        if info.help is None and info.callback is not None:
            info.help = reflow_help(inspect.getdoc(info.callback) or "")


def reflow_help(doc: str) -> str:
    """A command's docstring as ``--help`` shows it: typer's rich help keeps every line
    break, so the docstring's wrapping at 100 columns came out ragged on a terminal.
    Prose paragraphs become one line each (the terminal wraps them); a paragraph with
    indented lines (the examples) keeps its lines.

    The first paragraph is followed by three line breaks, not two: typer dedents the text
    after it as a docstring (``inspect.cleandoc``, which measures the indentation from its
    second line on), so when that text began with "Examples:" the examples lost their
    indentation; with a blank first line, "Examples:" counts."""
    out = []
    for para in doc.split("\n\n"):
        lines = para.split("\n")
        prose = all(ln and not ln[0].isspace() and not ln.startswith("- ") for ln in lines)
        out.append(" ".join(lines) if prose else para)
    first, *rest = out
    return "\n\n\n".join([first, "\n\n".join(rest)]) if rest else first


INTERRUPTED = "alem-eval: interrupted; completed work is kept and a rerun resumes it"


class _CtrlC:
    """Ctrl-C while a command runs: typer turns the KeyboardInterrupt into a silent exit
    130, so whether SIGINT arrived is noted here (the handler then raises as Python's own
    does) and said once on the way out. ``train`` installs its own handler and says what
    it saved instead."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: object = None

    def _handler(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def __enter__(self) -> _CtrlC:
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import signal

        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)  # type: ignore[arg-type]


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """alem-eval's own warnings (``alem_eval.*`` categories) as one line, like its errors;
    any other warning as Python shows it."""
    if category.__module__.startswith("alem_eval."):
        print(f"alem-eval: warning: {' '.join(str(message).split())}", file=file or sys.stderr)
    else:
        _python_showwarning(message, category, filename, lineno, file, line)


_python_showwarning = warnings.showwarning


def main(argv: list[str] | None = None) -> None:
    # The JAX compilation cache is not touched here: each command that compiles turns it
    # on first (runtime.enable_compilation_cache), so --help, list, report and leaderboard
    # work whatever state the cache directory is in.
    _register()
    with warnings.catch_warnings(), _CtrlC() as ctrl_c:
        warnings.showwarning = _show_warning
        try:
            app(args=argv, standalone_mode=True)
        except AlemEvalError as err:
            if os.environ.get("ALEM_EVAL_DEBUG"):
                raise
            print(f"alem-eval: error: {err}", file=sys.stderr)
            sys.exit(err.exit_code)
        except KeyboardInterrupt:
            print(INTERRUPTED, file=sys.stderr)
            sys.exit(130)
        except SystemExit as exc:
            if exc.code == 130 and ctrl_c.seen:
                print(INTERRUPTED, file=sys.stderr)
            raise


def run(argv: list[str] | None = None) -> NoReturn:
    """The ``alem-eval`` program: :func:`main`, then :func:`end_process` with its status.

    :func:`main` raises ``SystemExit`` like any click program and leaves the process to
    its caller: call it from Python and tests."""
    try:
        main(argv)
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    end_process(code)


def end_process(code: object) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's teardown.

    After a command, a normal exit spends about a second (2-core CPU) freeing compiled XLA
    programs and modules the ending process no longer needs. Here, when no other
    (non-daemon) thread is running and no profiler or tracer watches the process (they
    write their results as it ends normally), the ``atexit`` handlers run (temporary
    directories, logging, libraries' own clean-ups), the streams are flushed, and the
    process ends at once with the status ``sys.exit`` would give; otherwise it is
    ``sys.exit(code)``."""
    import threading

    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    observed = sys.getprofile() is not None or sys.gettrace() is not None
    if observed or any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)  # type: ignore[arg-type]
    if not isinstance(code, int) and code is not None:  # sys.exit("text") prints it
        print(code, file=sys.stderr)
    status = exit_status(code)
    import atexit
    import contextlib

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to flush
            stream.flush()
    os._exit(status)


def exit_status(code: object) -> int:
    """The status a process ends with after ``sys.exit(code)``: 0 for None, an int as
    is, 1 for anything else (Python prints that)."""
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


if __name__ == "__main__":  # `python -m alem_eval.cli.app`: use the registered module's app
    from alem_eval.cli.app import run as _run

    _run()
