"""Shared test fixtures. Everything here is offline and fast."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# --- JAX compilation cache shared by the whole session ------------------------------------
# Compiling the Alem step dominates test time. In-process tests share jitted functions;
# other processes (CLI subprocesses, pytest-xdist workers, which inherit this environment
# from the controller) find the same programs in this persistent cache: one per test run,
# so no stale programs leak between runs. Whoever created it removes it at exit.
import atexit as _atexit_jax
import tempfile as _tmp_for_jax

if "ALEM_EVAL_JAX_CACHE" not in os.environ:
    os.environ["ALEM_EVAL_JAX_CACHE"] = _tmp_for_jax.mkdtemp(prefix="alem-eval-test-jax-")
    _atexit_jax.register(shutil.rmtree, os.environ["ALEM_EVAL_JAX_CACHE"], ignore_errors=True)
# Things built once per test run (this package's wheel, tests/wheelhouse.py) live here; the
# workers inherit the controller's directory, which removes it at exit.
if "ALEM_EVAL_TEST_RUN_DIR" not in os.environ:
    os.environ["ALEM_EVAL_TEST_RUN_DIR"] = _tmp_for_jax.mkdtemp(prefix="alem-eval-test-run-")
    _atexit_jax.register(shutil.rmtree, os.environ["ALEM_EVAL_TEST_RUN_DIR"], ignore_errors=True)
# ------------------------------------------------------------------------------------------
# The upstream-written fixture cells live in ../shared beside the repo (CI: same layout).
FIXTURES = Path(os.environ.get("ALEM_EVAL_FIXTURES", REPO.parent / "shared" / "fixtures" / "hub"))

TINY_CELLS = (
    "tiny/ippo-rnn/easy/seed0",
    "tiny/ippo-rnn/hard/seed2",
    "tiny/mappo-rnn/medium/seed0",
    "tiny/hypermarl-rnn/hard/seed0",
    "tiny/pqn-vdn-rnn/easy/seed0",
)
ALL_CELLS = TINY_CELLS + ("full/ippo-rnn/hard/seed1",)


@pytest.fixture(scope="session", autouse=True)
def _shared_compilation_cache():
    from alem_eval.core.runtime import enable_compilation_cache

    enable_compilation_cache()


@pytest.fixture(scope="session")
def fixtures_root() -> Path:
    if not FIXTURES.is_dir():
        pytest.fail(f"fixture checkpoints not found at {FIXTURES} (set ALEM_EVAL_FIXTURES)")
    return FIXTURES


@pytest.fixture(scope="session")
def built_wheel() -> Path:
    """This package's wheel, built once per test run whichever worker asks first (the
    packaging tests of test_install.py and test_demo.py share it)."""
    from tests.wheelhouse import build_once

    return build_once(REPO, Path(os.environ["ALEM_EVAL_TEST_RUN_DIR"]) / "wheel")


@pytest.fixture
def cell_copy(tmp_path, fixtures_root):
    """Copy one fixture cell (by id) into a writable tmp dir and return the copy's path."""

    def make(cell_id: str) -> Path:
        dst = tmp_path / "src" / cell_id
        shutil.copytree(fixtures_root / cell_id, dst)
        return dst

    return make


# --- xdist groups -------------------------------------------------------------------------
# Tests that share compiled programs (module fixtures, jit caches) carry an xdist_group mark:
# with --dist loadgroup one worker runs each group. pytest-xdist <= 3.8 marks a grouped test
# by rewriting its node id, which pytest 9.2 ignores (pytest-dev/pytest-xdist#1386): grouping
# silently stops and each worker compiles the group's programs again. Refuse that pairing.
def pytest_configure(config):
    if config.getoption("dist", "no") != "loadgroup" or hasattr(config, "workerinput"):
        return
    import xdist
    from packaging.version import Version

    if Version(pytest.__version__) >= Version("9.2") and Version(xdist.__version__) < Version(
        "3.9"
    ):
        raise pytest.UsageError(
            f"pytest {pytest.__version__} with pytest-xdist {xdist.__version__} ignores "
            "--dist loadgroup (pytest-dev/pytest-xdist#1386): install requirements-dev.lock"
        )


# --- The fast lane and the order: slow tests first ---------------------------------------
# A test in an xdist group shares compiled programs of the Alem step with its group: it is
# slow by definition (marked here, before `-m "not slow"` deselects), so the fast lane
# (`pytest -m "not slow"`) compiles no program of the Alem step in-process; tests that
# compile one on their own, or run the CLI end to end, carry an explicit `slow` mark.
#
# --dist loadgroup deals out work units to whichever worker runs short: groups first (most
# tests first), then single tests in collection order. A long single test collected late
# keeps one worker busy while the other has finished (the three one-test trainers, last in
# the collection, once ran back to back on one worker at the end). Slow single tests go
# first; a group keeps its order (its tests may rely on programs an earlier one compiled).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)

    def single_and_slow(item) -> bool:
        return bool(item.get_closest_marker("slow")) and not item.get_closest_marker("xdist_group")

    items.sort(key=lambda item: not single_and_slow(item))


# --- Hub / sources (tests/test_hub.py) ---------------------------------------------------
# huggingface_hub reads HF_* variables once, at import. Before anything imports it, point it
# at an isolated home and at a dead local endpoint, so no test can reach the real Hub or the
# user's cache by accident. Tests that need a Hub start tests/hub_server.HubServer and pass
# its URL explicitly (in-process) or through HF_ENDPOINT (CLI subprocesses).
import atexit as _atexit
import tempfile as _tempfile

_HF_HOME = os.environ["HF_HOME"] = _tempfile.mkdtemp(prefix="alem-eval-test-hf-")
# The user's alem-eval cache (results, compare store, verified markers) likewise: a test
# that falls back on a default location writes here, never into ~/.cache/alem-eval.
_USER_CACHE = os.environ["ALEM_EVAL_CACHE"] = _tempfile.mkdtemp(prefix="alem-eval-test-cache-")
for _own in (_HF_HOME, _USER_CACHE):
    _atexit.register(shutil.rmtree, _own, ignore_errors=True)


def pytest_unconfigure(config):
    for own in (_HF_HOME, _USER_CACHE):  # xdist workers end without running atexit
        shutil.rmtree(own, ignore_errors=True)


os.environ.pop("HF_TOKEN", None)
os.environ.pop("HF_HUB_CACHE", None)
os.environ.pop("HUGGINGFACE_HUB_CACHE", None)
os.environ.pop("HF_HUB_OFFLINE", None)
os.environ["HF_ENDPOINT"] = "http://127.0.0.1:9"  # discard port: nothing listens
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
# --- end Hub / sources --------------------------------------------------------------------


# --- A worker's memory: programs are released where their group ends ----------------------
# A compiled program of the Alem step holds ~0.6 GB of host memory (a trainer ~1 GB), and
# the library keeps the few most recently used (core.boundedcache). Programs are shared
# within an xdist group only, so when a worker's next test belongs to another group (or to
# none), the in-memory programs of this process are dropped: the next group compiles its
# own, or loads them from the run's persistent compilation cache and warm-start store,
# which are kept. Without this a worker grew past 10 GB by the end of the suite, and two
# of them with the CLI subprocesses beside them exhausted CI's 24 GiB machine.
def _group_of(item) -> str | None:
    mark = item.get_closest_marker("xdist_group") if item is not None else None
    if mark is None:
        return None
    return mark.args[0] if mark.args else mark.kwargs.get("name")


_PROCESS_CACHES = (  # module -> its function that drops the programs it holds
    ("alem_eval.evaluate.programs", "clear_program_cache"),
    ("alem_eval.trainers.common", "clear_trainer_cache"),
)


def pytest_runtest_teardown(item, nextitem):
    group = _group_of(item)
    if group is not None and nextitem is not None and _group_of(nextitem) == group:
        return
    import gc
    import sys

    dropped = 0
    for module, clear in _PROCESS_CACHES:
        if module in sys.modules:
            dropped += getattr(sys.modules[module], clear)()
    if dropped:
        gc.collect()


# --- Where the suite's time goes (ALEM_EVAL_TEST_COMPILE_LOG=DIR) --------------------------
# Each worker writes DIR/<worker>.json: per test, its XLA compiles (count, seconds) in this
# process (CLI subprocesses are not seen) and its duration. For keeping the suite short:
# most of its time is compiling the Alem step, once per distinct program shape.
_COMPILE_LOG = os.environ.get("ALEM_EVAL_TEST_COMPILE_LOG")
if _COMPILE_LOG:
    import json as _json
    import time as _time

    _per_test: dict[str, dict[str, float]] = {}
    _current = {"test": "<collection>"}

    def _on_duration(event: str, duration: float, **_: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            row = _per_test.setdefault(_current["test"], {"compiles": 0, "compile_s": 0.0})
            row["compiles"] += 1
            row["compile_s"] += duration

    import ctypes as _ctypes

    def _rss_gib() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30

    def _trim_and_rss() -> float:
        _ctypes.CDLL("libc.so.6").malloc_trim(0)
        return _rss_gib()

    import jax as _jax

    _jax.monitoring.register_event_duration_secs_listener(_on_duration)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        # The whole protocol: a module fixture's set-up (often the test's compile) and
        # teardown count for the test that triggers them.
        _current["test"] = item.nodeid
        t0 = _time.perf_counter()
        yield
        row = _per_test.setdefault(item.nodeid, {"compiles": 0, "compile_s": 0.0})
        row["wall_s"] = _time.perf_counter() - t0
        row["order"] = len(_per_test)
        row["rss_gib"] = _rss_gib()
        row["rss_after_trim_gib"] = _trim_and_rss()

    def pytest_sessionfinish(session):
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(_COMPILE_LOG).mkdir(parents=True, exist_ok=True)
        (Path(_COMPILE_LOG) / f"{worker}.json").write_text(_json.dumps(_per_test, indent=1))
