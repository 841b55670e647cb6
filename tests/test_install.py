"""Packaging: a built wheel works outside the checkout, and the declared dependencies match
what the code imports and what requirements.lock pins."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from alem_eval.manifest import MANIFEST_PATH

from .conftest import REPO

PACKAGES = ("alem_eval", "alem_env", "trainers")  # what the wheel ships
# Declared although possibly never imported by name, and why.
NOT_IMPORTED = {
    "jaxlib": "jax's compiled backend, pinned with jax",
    "flatbuffers": "jax.export's serialiser (the evaluator's warm start)",
}
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def _requirements(specs: list[str]) -> dict[str, list[Requirement]]:
    out: dict[str, list[Requirement]] = {}
    for spec in specs:
        req = Requirement(spec)
        out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


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


def test_built_wheel_lists_cells_outside_the_checkout(tmp_path):
    """``pip wheel`` a copy of the sources, install the wheel into a bare folder, run ``list``
    from elsewhere: the installed copy, not the editable checkout, must answer."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, src / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run(
        [
            *pip,
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            str(src),
            "-w",
            str(tmp_path / "dist"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert built.returncode == 0, built.stderr
    [wheel] = (tmp_path / "dist").glob("alem_eval-*.whl")
    site = tmp_path / "site"
    installed = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert installed.returncode == 0, installed.stderr

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "PYTHON"))}
    env.update(
        PYTHONPATH=str(site),
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_OFFLINE="1",
        ALEM_EVAL_CACHE=str(tmp_path / "alem-cache"),
    )
    where = subprocess.run(
        [sys.executable, "-c", "import alem_eval; print(alem_eval.__file__)"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert Path(where.stdout.strip()).parent == site / "alem_eval", where.stderr
    assert (site / "alem_eval" / "py.typed").is_file()  # PEP 561: typed for its users
    proc = subprocess.run(
        [sys.executable, "-m", "alem_eval", "list", "1B/ippo-rnn/hard", "--format", "json"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["cell"] for r in rows] == [f"1B/ippo-rnn/hard/seed{s}" for s in range(5)]
    assert {r["expected_params"] for r in rows} == {2_589_885}


# ----------------------------------------------------------------------------------------
# Declared dependencies
# ----------------------------------------------------------------------------------------
def test_every_package_the_library_imports_is_declared():
    declared = set(_requirements(PYPROJECT["dependencies"]))
    imported = _distributions(_imported_top_levels([REPO / p for p in PACKAGES]))
    assert imported - declared == set()


def test_every_declared_dependency_is_imported():
    declared = set(_requirements(PYPROJECT["dependencies"]))
    imported = _distributions(_imported_top_levels([REPO / p for p in PACKAGES]))
    assert declared - imported <= set(NOT_IMPORTED), declared - imported - set(NOT_IMPORTED)


def test_test_only_packages_are_in_the_test_extra():
    main = set(_requirements(PYPROJECT["dependencies"]))
    test = set(_requirements(PYPROJECT["optional-dependencies"]["test"]))
    used = _distributions(_imported_top_levels([REPO / "tests", REPO / "bench"]))
    assert used - main <= test, f"imported by tests/bench only, not declared: {used - main - test}"
    assert "rliable" in test and "rliable" not in main


def test_lock_pins_every_declared_dependency_within_its_range():
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    specs = PYPROJECT["dependencies"] + PYPROJECT["optional-dependencies"]["test"]
    for name, reqs in _requirements(specs).items():
        assert name in pins, f"{name} is declared but not pinned in requirements.lock"
        for req in reqs:
            ok = req.specifier.contains(pins[name], prereleases=True)
            assert ok, f"{name}=={pins[name]} does not satisfy {req}"
