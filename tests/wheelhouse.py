"""Wheels for the packaging tests: this package's own, built once per test run
(:func:`build_once`), and those of installed distributions, for installing a lock offline
(tests/test_install.py).

pip installs only from wheels or sdists; an offline test has neither, but the test
environment holds every locked distribution, installed from a wheel. :func:`repack` zips one
back into a wheel: its files as listed in its RECORD (bytecode and console scripts left out:
pip writes those again), its metadata unchanged, a new RECORD. :func:`wheelhouse` does it
for every pin of a lock file, so that ``pip install --no-index --find-links DIR -r LOCK``
must find the lock complete and consistent with nothing but itself.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.tags import sys_tags
from packaging.utils import canonicalize_name

# pip writes these when it installs; a wheel does not hold them
INSTALLER_FILES = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}
SUPPORTED = {str(t) for t in sys_tags()}


def build_once(repo: Path, where: Path) -> Path:
    """The wheel of the sources at ``repo``, built in ``where`` by the first process of the
    test run that asks (``pip wheel`` of a copy of the sources; offline: no build isolation,
    no deps); the others wait for it under a lock and reuse it (tests/conftest.py:
    ``built_wheel``). A failed build leaves nothing behind: the next caller tries again."""
    where.mkdir(parents=True, exist_ok=True)
    dist = where / "dist"
    with open(where / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dist.is_dir():
            tmp = where / f"build-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            src = tmp / "src"
            src.mkdir(parents=True)
            for name in ("pyproject.toml", "README.md", "LICENSE"):
                shutil.copy2(repo / name, src / name)
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(repo / "alem_eval", src / "alem_eval", ignore=ignore)
            built = subprocess.run(
                [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", "wheel"]
                + ["--no-deps", "--no-build-isolation", str(src), "-w", str(tmp / "dist")],
                capture_output=True,
                text=True,
                cwd=tmp,
            )
            assert built.returncode == 0, built.stderr
            (tmp / "dist").rename(dist)
            shutil.rmtree(tmp)
        [wheel] = dist.glob("alem_eval-*.whl")
    return wheel


def lock_pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a lock file, following ``-r`` includes."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r"):
            pins.update(lock_pins(path.parent / line[2:].strip()))
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{path.name}: not an exact pin: {raw!r}"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def repack(name: str, version: str, out: Path) -> Path:
    """The installed distribution ``name`` (which must be at ``version``) as a wheel in
    ``out``."""
    try:
        dist = distribution(name)
    except PackageNotFoundError:
        raise AssertionError(f"{name}=={version} is locked but not installed") from None
    assert dist.version == version, f"{name} {dist.version} is installed, the lock says {version}"
    wheel_text = dist.read_text("WHEEL")
    assert wheel_text and dist.files, f"{name} was not installed from a wheel"
    tags = Parser().parsestr(wheel_text).get_all("Tag") or []
    tag = next((t for t in tags if t in SUPPORTED), None)  # e.g. py3 of py2.py3
    assert tag, f"{name}: none of its wheel tags {tags} fits this interpreter"
    info_dir = next(f.parts[0] for f in dist.files if f.parts[0].endswith(".dist-info"))
    project = info_dir[: -len(f"-{version}.dist-info")]
    path = out / f"{project}-{version}-{tag}.whl"
    record = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as whl:
        for f in dist.files:
            if (
                f.parts[0] == ".."
                or "__pycache__" in f.parts
                or (f.parts[0] == info_dir and f.name in INSTALLER_FILES)
            ):
                continue
            data = Path(dist.locate_file(f)).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{f.as_posix()},sha256={digest.decode()},{len(data)}")
            whl.writestr(f.as_posix(), data)
        record.append(f"{info_dir}/RECORD,,")
        whl.writestr(f"{info_dir}/RECORD", "\n".join(record) + "\n")
    return path


def wheelhouse(lock: Path, out: Path) -> Path:
    """A wheel for every pin of ``lock`` (and the locks it includes), in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    for name, version in lock_pins(lock).items():
        repack(name, version, out)
    return out
