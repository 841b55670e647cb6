"""Packaging: a built wheel works outside the checkout (alone with the runtime lock, in a fresh
virtual environment), and the declared dependencies match what the code imports and what
requirements.lock (runtime) and requirements-dev.lock (tests, lint, notebook) pin."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from alem_eval.algorithms.registry import ALGORITHMS
from alem_eval.hub.demo_cells import (
    demo_cell_id,
)
from alem_eval.core.extras import EXTRAS
from alem_eval.hub.manifest import MANIFEST_PATH

from .conftest import REPO
from .eval_support import DEMO_PROGRAMS
from .wheelhouse import lock_pins, wheelhouse

PACKAGES = ("alem_eval",)  # what the wheel ships: one top-level package
# Declared although possibly never imported by name, and why.
NOT_IMPORTED = {
    "jaxlib": "jax's compiled backend, pinned with jax",
    "flatbuffers": "jax.export's serialiser (the evaluator's warm start)",
}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
SELF = canonicalize_name(PYPROJECT["name"])
RUNTIME_LOCK, DEV_LOCK = REPO / "requirements.lock", REPO / "requirements-dev.lock"
# What only tests, lint and the notebook use: never in the runtime lock.
DEV_ONLY = {"pytest", "pytest-xdist", "mypy", "ruff", "ipykernel", "rliable", "nbclient"}


def _requirements(specs: list[str]) -> dict[str, list[Requirement]]:
    out: dict[str, list[Requirement]] = {}
    for spec in specs:
        req = Requirement(spec)
        out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


def _extra(name: str) -> list[str]:
    """The requirements of an extra, with the package's own extras it names spelled out."""
    out = []
    for spec in PYPROJECT["optional-dependencies"][name]:
        req = Requirement(spec)
        if canonicalize_name(req.name) == SELF:
            out += [s for extra in sorted(req.extras) for s in _extra(extra)]
        else:
            out.append(spec)
    return out


def _closure(specs: list[str]) -> set[str]:
    """Canonical names of ``specs`` and everything they need, from the installed metadata
    (a distribution that is not installed counts with no dependencies of its own)."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [Requirement(s) for s in specs]
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = distribution(req.name).requires or []
        except PackageNotFoundError:
            continue
        for spec in map(Requirement, requires):
            extras = [""] + sorted(req.extras)
            if spec.marker is None or any(spec.marker.evaluate({"extra": e}) for e in extras):
                todo.append(spec)
    return {name for name, _ in seen}


def _imported_top_levels(roots: list[Path]) -> set[str]:
    """Top-level module names imported (absolutely) anywhere under ``roots``."""
    names: set[str] = set()
    local = {f.stem for root in roots for f in root.glob("*.py")}  # scripts' sibling modules
    for root in roots:
        for f in root.rglob("*.py"):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - set(PACKAGES) - local - {"tests", "__future__"}


def _distributions(modules: set[str]) -> set[str]:
    dists = packages_distributions()
    # an extra's module need not be installed here: its distribution is known
    dists.update({m: [dist] for m, (dist, _) in EXTRAS.items() if m not in dists})
    missing = sorted(m for m in modules if m not in dists)
    assert not missing, f"imported but not installed: {missing}"
    return {canonicalize_name(d) for m in modules for d in dists[m]}


# ----------------------------------------------------------------------------------------
# The manifest is package data
# ----------------------------------------------------------------------------------------
def test_packaged_manifest_is_identical_to_the_human_facing_copy():
    assert MANIFEST_PATH.parent == REPO / "alem_eval" / "data"
    copy = REPO / "manifests" / MANIFEST_PATH.name
    assert MANIFEST_PATH.read_bytes() == copy.read_bytes()
    proc = subprocess.run(
        [sys.executable, str(REPO / "manifests" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr


PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


def _user_run(argv: list[str], tmp_path: Path, env: dict[str, str], timeout: float = 120):
    """Run ``argv`` as a user would: from an empty directory, offline, with its own Hugging
    Face home and alem-eval cache (under ``tmp_path``)."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    env = {
        **env,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_OFFLINE": "1",
        "ALEM_EVAL_CACHE": str(tmp_path / "alem-cache"),
        "COLUMNS": "200",
    }
    return subprocess.run(
        argv, env=env, cwd=elsewhere, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_built_wheel_lists_cells_outside_the_checkout(built_wheel, tmp_path):
    """Install the wheel into a bare folder, run ``list`` from elsewhere: the installed
    copy, not the editable checkout, must answer."""
    site = tmp_path / "site"
    installed = subprocess.run(
        [*PIP, "install", "--no-deps", "--target", str(site), str(built_wheel)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stderr

    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHON"))}
    env["PYTHONPATH"] = str(site)
    code = "import alem_eval; print(alem_eval.__file__)"
    where = _user_run([sys.executable, "-c", code], tmp_path, env)
    assert Path(where.stdout.strip()).parent == site / "alem_eval", where.stderr
    assert (site / "alem_eval" / "py.typed").is_file()  # PEP 561: typed for its users
    argv = [sys.executable, "-m", "alem_eval", "list", "1B/ippo-rnn/hard", "--format", "json"]
    proc = _user_run(argv, tmp_path, env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["cell"] for r in rows] == [f"1B/ippo-rnn/hard/seed{s}" for s in range(5)]
    assert {r["expected_params"] for r in rows} == {2_589_885}


def test_wheel_holds_one_top_level_package_with_its_layers_and_data(built_wheel):
    """The wheel installs ``alem_eval`` and nothing beside it (no ``alem_env`` to confuse
    with alem-env's ``alem``, no ``trainers`` to collide with), every layer package of the
    source tree included, with the manifest and the demo cells."""
    import zipfile

    names = zipfile.ZipFile(built_wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"alem_eval"}
    source_packages = {
        str(p.parent.relative_to(REPO)) for p in (REPO / "alem_eval").rglob("__init__.py")
    }
    assert {p for p in source_packages if f"{p}/__init__.py" in names} == source_packages
    assert "alem_eval/data/alem-rl-baselines.json" in names
    assert "alem_eval/data/alem-rl-baselines-splits.json" in names
    assert any(n.startswith("alem_eval/data/demo-cells/demo/") for n in names)
    assert any(n.startswith("alem_eval/data/worlds/") and n.endswith(".worlds") for n in names)


# ----------------------------------------------------------------------------------------
# Declared dependencies
# ----------------------------------------------------------------------------------------
def test_every_package_the_library_imports_is_declared():
    """Every import is a runtime dependency, or (imported where it is used, through
    ``alem_eval.core.extras``) one of the optional extras."""
    declared = set(_requirements(PYPROJECT["dependencies"]))
    optional = set(_requirements(_extra("datasets") + _extra("video") + _extra("pettingzoo")))
    imported = _distributions(_imported_top_levels([REPO / p for p in PACKAGES]))
    assert imported - declared - optional == set()


def test_every_declared_dependency_is_imported():
    declared = set(_requirements(PYPROJECT["dependencies"]))
    imported = _distributions(_imported_top_levels([REPO / p for p in PACKAGES]))
    assert declared - imported <= set(NOT_IMPORTED), declared - imported - set(NOT_IMPORTED)


def test_each_optional_module_is_its_extra_and_not_a_runtime_dependency():
    runtime = set(_requirements(PYPROJECT["dependencies"]))
    for module, (dist, extra) in EXTRAS.items():
        assert canonicalize_name(dist) in _requirements(_extra(extra)), (module, extra)
        assert canonicalize_name(dist) not in runtime, f"{dist} is a runtime dependency"


@pytest.mark.slow
def test_test_only_packages_are_in_the_dev_extra():
    main = set(_requirements(PYPROJECT["dependencies"]))
    dev = set(_requirements(_extra("dev")))
    used = _distributions(_imported_top_levels([REPO / "tests", REPO / "bench"]))
    assert used - main <= dev, f"imported by tests/bench only, not declared: {used - main - dev}"
    assert dev >= DEV_ONLY and not DEV_ONLY & main
    assert {"flashbax", "imageio-ffmpeg"} <= dev  # the extras the tests exercise


def test_runtime_lock_is_exactly_what_the_runtime_dependencies_need():
    """requirements.lock, which users install into their own environment, holds the
    dependency closure of ``dependencies`` (from the installed metadata), each within its
    declared range, and nothing else: no extra, no test or lint tool."""
    pins = lock_pins(RUNTIME_LOCK)
    assert set(pins) == _closure(PYPROJECT["dependencies"]), "regenerate requirements.lock"
    assert not DEV_ONLY & set(pins) and "flashbax" not in pins
    for name, reqs in _requirements(PYPROJECT["dependencies"]).items():
        for req in reqs:
            assert req.specifier.contains(pins[name], prereleases=True), (pins[name], req)


def test_dev_lock_adds_the_extras_and_the_tools_to_the_runtime_lock():
    """requirements-dev.lock includes the runtime lock, pins the rest of the closure of the
    ``dev`` extra (which holds ``datasets`` and ``video``) within its ranges, and pins no
    package twice."""
    lines = [ln for ln in DEV_LOCK.read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "-r requirements.lock"
    runtime, everything = lock_pins(RUNTIME_LOCK), lock_pins(DEV_LOCK)
    assert len(lines) - 1 + len(runtime) == len(everything), "a package is pinned twice"
    assert set(everything) == _closure([*PYPROJECT["dependencies"], *_extra("dev")])
    for name, reqs in _requirements(_extra("dev")).items():
        for req in reqs:
            assert req.specifier.contains(everything[name], prereleases=True), (name, req)


@pytest.mark.slow
@pytest.mark.xdist_group(DEMO_PROGRAMS)  # after test_demo: its programs are in the cache
def test_wheel_with_the_runtime_lock_alone_runs_the_demo_in_a_fresh_venv(built_wheel, tmp_path):
    """What a user does: a new virtual environment, ``pip install -r requirements.lock`` and
    the wheel, then ``alem-eval demo``. Offline: pip may use only wheels of the locked
    versions (made from this environment's installed copies), so it fails if the lock misses
    a dependency or contradicts a declared range; flashbax and the test tools stay out."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    # pip's own configuration (extra indexes, find-links) is ignored: only the wheelhouse
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    installed = subprocess.run(
        [*PIP, "--python", str(python), "install", "--no-index", "--no-compile"]
        + ["--find-links", str(wheelhouse(RUNTIME_LOCK, tmp_path / "wheels"))]
        + ["-r", str(RUNTIME_LOCK), str(built_wheel)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    shutil.rmtree(tmp_path / "wheels")
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    site_packages = Path(site.stdout.strip())
    present = {canonicalize_name(p.name.split("-")[0]) for p in site_packages.glob("*.dist-info")}
    assert present == set(lock_pins(RUNTIME_LOCK)) | {SELF}
    # alem-env's texture cache (built on its first import, minutes) sits beside the package
    cache = Path(distribution("alem-env").locate_file("alem/alem_coop/assets/texture_cache.pbz2"))
    if cache.is_file():
        shutil.copy2(cache, site_packages / "alem" / "alem_coop" / "assets" / cache.name)

    cli = str(venv / "bin" / "alem-eval")
    out = tmp_path / "demo"
    proc = _user_run([cli, "demo", "--reps", "200", "--out", str(out)], tmp_path, env, 600)
    assert proc.returncode == 0, proc.stderr
    for algorithm in ALGORITHMS:
        assert demo_cell_id(algorithm) in proc.stdout
    assert "| Budget | Algorithm | easy Base% |" in proc.stdout
    assert (out / "leaderboard.md").read_text() in proc.stdout
    assert str(site_packages / "alem_eval" / "data" / "demo-cells") in proc.stderr.replace("\n", "")
    # the datasets extra is not installed: its command says how to get it, in one line
    proc = _user_run([cli, "dataset", "export", str(tmp_path), "--out", str(out)], tmp_path, env)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert proc.stderr.strip().endswith("pip install 'alem-eval[datasets]'"), proc.stderr
