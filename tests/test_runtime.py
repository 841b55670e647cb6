"""The persistent compilation cache: on before any command compiles (issue: demo's cache
directory stayed empty because it compiled its cells before turning the cache on), never
touched by the commands that do not compile, and an unusable directory is a warning, not
a traceback (issue: a read-only or full home ended every command, --help included, in
NotADirectoryError)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

# The demo command with run_demo replaced by one small compile: what a command that
# compiles does with the cache, without compiling the Alem step.
_DEMO_SCRIPT = textwrap.dedent("""
    import json, sys
    import alem_eval.api.demo
    from alem_eval.cli import app as cli
    from alem_eval.core.errors import AlemEvalError

    def first_compile(*args, **kwargs):
        from alem_eval.core.runtime import enable_compilation_cache
        enable_compilation_cache()  # again, as library code may: no second warning
        import jax, jax.numpy as jnp
        y = jax.jit(lambda x: x * 3 + 1)(jnp.ones(7))
        print(json.dumps({"dir": jax.config.jax_compilation_cache_dir, "sum": float(y.sum())}))
        raise AlemEvalError("stopped after the first compile")

    alem_eval.api.demo.run_demo = first_compile
    cli.main(["demo", "--out", sys.argv[1]])
""")


def _env(tmp_path, jax_cache) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(ALEM_EVAL_JAX_CACHE=str(jax_cache), ALEM_EVAL_CACHE=str(tmp_path / "cache"))
    return env


def _blocked_cache(tmp_path, where: str):
    """A file, and a cache path: absent (writable), the file, or below the file."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    return blocker, {"writable": tmp_path / "writable", "file": blocker}.get(
        where, blocker / "jax-cache"
    )


def _run_demo(tmp_path, cache) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _DEMO_SCRIPT, str(tmp_path / "demo")],
        cwd=REPO,
        env=_env(tmp_path, cache),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_demo_turns_the_cache_on_before_it_compiles(tmp_path):
    cache = tmp_path / "jax-cache"
    out = _run_demo(tmp_path, cache)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["dir"] == str(cache)
    assert os.listdir(cache), "the first compile of the process was not written to the cache"
    assert "warning" not in out.stderr, out.stderr


@pytest.mark.parametrize("where", ["file", "below-a-file"])
def test_an_unusable_cache_is_one_warning_and_the_work_goes_on(tmp_path, where):
    blocker, cache = _blocked_cache(tmp_path, where)
    out = _run_demo(tmp_path, cache)
    assert "Traceback" not in out.stderr, out.stderr
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report == {"dir": None, "sum": 28.0}  # compiled and ran, with the cache off
    warned = [ln for ln in out.stderr.splitlines() if "warning" in ln]
    assert len(warned) == 1, out.stderr
    assert (
        warned[0].startswith("alem-eval: warning: compilation cache off")
        and str(cache) in warned[0]
    )
    assert (
        out.stderr.strip().splitlines()[-1] == "alem-eval: error: stopped after the first compile"
    )
    assert blocker.read_text() == "x"


_QUICK_COMMANDS = textwrap.dedent("""
    import os, sys
    from alem_eval.cli import app as cli
    fixtures, results, out, *caches = sys.argv[1:]
    runs = [
        ["--help"],
        ["score", "--help"],
        ["list", "tiny/ippo-rnn", "--source", fixtures, "--format", "json"],
        ["report", "--results", results, "--out", out, "--reps", "50", "--jobs", "1"],
        ["leaderboard", "--results", results, "--reps", "50"],
    ]
    for cache in caches:  # the cache directory is looked up when it is used
        os.environ["ALEM_EVAL_JAX_CACHE"] = cache
        for args in runs:
            try:
                cli.main(args)
            except SystemExit as exc:
                print(f"{args[0]} exit {exc.code or 0}", file=sys.stderr)
""")


def test_commands_that_do_not_compile_never_touch_the_cache(tmp_path):
    from alem_eval.analysis.results import ResultsStore

    from .conftest import FIXTURES
    from .synthetic import fill_store

    store = ResultsStore(tmp_path / "results")
    fill_store(
        store, algorithms=["ippo-rnn"], budgets=["1B"], difficulties=["easy"], seeds=range(2)
    )
    caches = [_blocked_cache(tmp_path, w)[1] for w in ("writable", "below-a-file")]
    out = subprocess.run(
        [sys.executable, "-c", _QUICK_COMMANDS, str(FIXTURES), str(store.root)]
        + [str(tmp_path / "report"), *map(str, caches)],
        cwd=REPO,
        env=_env(tmp_path, caches[0]),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in out.stderr and "warning" not in out.stderr, out.stderr
    exits = [ln for ln in out.stderr.splitlines() if " exit " in ln]
    commands = ("--help", "score", "list", "report", "leaderboard")
    assert exits == [f"{c} exit 0" for c in commands] * len(caches), out.stderr
    assert not caches[0].exists() and (tmp_path / "not-a-dir").read_text() == "x"


def test_enable_compilation_cache_before_jax_import_sets_only_the_environment(tmp_path):
    script = textwrap.dedent("""
        import os, sys
        from alem_eval.core.runtime import enable_compilation_cache
        enable_compilation_cache(sys.argv[1])
        assert "jax" not in sys.modules, "the cache set-up imported JAX"
        print(os.environ["JAX_COMPILATION_CACHE_DIR"])
    """)
    out = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "c")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip() == str(tmp_path / "c")


def test_only_closed_loop_callbacks_are_silenced(monkeypatch):
    """After a failed orbax restore, tensorstore's late completions hit the closed asyncio
    loop (an unraisable RuntimeError printed as a traceback after the one-line error): the
    hook a failed restore installs drops exactly those and hands every other unraisable to
    the previous hook."""
    import sys
    import types

    from alem_eval.core.runtime import quiet_closed_loop_callbacks

    seen = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(u.exc_value))
    quiet_closed_loop_callbacks()
    quiet_closed_loop_callbacks()  # idempotent: one wrapper
    closed = RuntimeError("Event loop is closed")
    other = RuntimeError("something else")
    for value in (closed, other, ValueError("Event loop is closed")):
        sys.unraisablehook(types.SimpleNamespace(exc_value=value))
    assert [str(v) for v in seen] == ["something else", "Event loop is closed"]
    assert isinstance(seen[1], ValueError)
