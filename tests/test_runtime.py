"""The persistent compilation cache is on before any command compiles (issue: demo's cache
directory stayed empty because it compiled its cells before turning the cache on)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.conftest import REPO

_SCRIPT = textwrap.dedent("""
    import json, os, sys
    from alem_eval import cli
    try:
        cli.main(["list", "tiny/ippo-rnn/*/*", "--source", sys.argv[1], "--format", "json"])
    except SystemExit:
        pass
    import jax, jax.numpy as jnp
    jax.jit(lambda x: x * 3 + 1)(jnp.ones(7)).block_until_ready()  # the first compile
    print(json.dumps({"dir": jax.config.jax_compilation_cache_dir,
                      "files": sorted(os.listdir(os.environ["ALEM_EVAL_JAX_CACHE"]))}))
""")


def test_cli_turns_the_cache_on_before_the_first_compile(tmp_path):
    from tests.conftest import FIXTURES

    cache = tmp_path / "jax-cache"
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("JAX_")}
    env.update(ALEM_EVAL_JAX_CACHE=str(cache), ALEM_EVAL_CACHE=str(tmp_path / "cache"))
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(FIXTURES)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["dir"] == str(cache)
    assert report["files"], "the first compile of the process was not written to the cache"


def test_enable_compilation_cache_before_jax_import_sets_only_the_environment(tmp_path):
    script = textwrap.dedent("""
        import os, sys
        from alem_eval.runtime import enable_compilation_cache
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

    from alem_eval.runtime import quiet_closed_loop_callbacks

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
