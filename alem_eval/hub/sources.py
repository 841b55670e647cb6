"""Checkpoint sources: the Hugging Face Hub release, or a local directory in its layout.

``open_source("hub")`` reads ``alem-world/alem-rl-baselines`` (endpoint from ``HF_ENDPOINT``,
cache in ``--cache-dir`` or the default Hugging Face cache); ``open_source(PATH)`` reads a
directory laid out as ``<budget>/<algorithm>/<difficulty>/seed<N>/{checkpoint/,config.json}``.

The Hub source lists the repo once (one API call for the commit, one for the tree, which is
then cached per commit), downloads only the selected cells' files in parallel into the
standard Hugging Face cache and checks every file against the listing: its size, and its
content hash (the sha256 the Hub lists for every LFS file, the git blob id for the others).
A short, empty or corrupted file is removed and fetched again, never used. Completed files
are kept, so an interrupted or killed pull resumes; concurrent pulls into one cache share
its per-file locks; a pull of cached cells makes no request for files (a file's hash is
recomputed only when its size, times or inode changed since it was last checked; ``verify``
recomputes them all). With ``HF_HUB_OFFLINE=1`` or an unreachable endpoint the cached
listing is used, or, for a cache filled by other tools (``hf download``,
``snapshot_download``), the files of its snapshot folder (their blob names carry the hashes).
Every failure is a one-line :class:`SourceError` / :class:`DownloadError`; good cached
files are never deleted.

Per-cell "verified" markers (set by ``verify`` through :meth:`Source.mark_verified`) live in
a small JSON file under the cache and are void as soon as a file of the cell changes; the
commit each cell was pulled at is recorded next to them (``list`` shows it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import threading
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar, Literal
from collections.abc import Callable, Iterator, Mapping, Sequence

from alem_eval.core.version import __version__
from alem_eval.core.fsutil import atomic_write
from alem_eval.core.integrity import FileCheck
from alem_eval.hub.layout import is_cell_dir
from alem_eval.core.errors import (
    DownloadError,
    SelectorError,
    SourceError,
    SourceUsageError,
    UsageError,
    brief,
)
from alem_eval.hub.manifest import (
    DEFAULT_REVISION,
    HUB_REPO,
    Cell,
    load_manifest,
    parse_seed_dir,
    sort_cells,
)
from alem_eval.hub.selectors import select_cells

CellState = Literal["remote", "cached", "verified"]
HUB_SPEC = "hub"
DEMO_SPEC = "demo"
DEFAULT_WORKERS = 8
_STATE_DIRNAME = "alem-eval"  # inside the repo's cache folder, next to blobs/ and snapshots/
_LISTING_FORMAT = 2  # 1 held sizes only
# The oldest huggingface_hub whose API matches the calls below: ``hf_hub_download`` takes
# ``tqdm_class`` from 1.1.0 on. pyproject.toml declares the same floor (a test checks both).
HF_HUB_MIN_VERSION = "1.1.0"
LIBRARY_NAME = "alem-eval"  # sent with every Hub request (user agent), with __version__


@dataclass(frozen=True)
class PullReport:
    """What a pull did."""

    cells: tuple[Cell, ...]
    files_fetched: int  # downloaded (or re-linked from a blob already in the cache)
    files_skipped: int  # already cached with the listed size and content hash
    files_repaired: int  # cached or received with a wrong size or hash, removed and fetched again
    bytes_fetched: int  # bytes received from the network
    bytes_total: int  # size of all files of the selected cells
    root: Path  # directory holding ``<cell.id>/`` for every pulled cell
    commit: str | None = None  # the Hub commit the files belong to
    offline: bool = False  # the endpoint was not contacted (offline mode or unreachable)
    checks: Mapping[str, FileCheck] = field(default_factory=dict)  # per cell id

    def rows(self) -> list[dict[str, Any]]:
        """One row per cell: its id and local directory (``pull --format csv|table``)."""
        return [
            {"cell": c.id, "path": str(self.root / c.id), "commit": self.commit} for c in self.cells
        ]

    def as_json(self) -> dict[str, Any]:
        """The whole report as plain JSON types (``pull --format json``)."""
        return {
            "cells": self.rows(),
            "files_fetched": self.files_fetched,
            "files_skipped": self.files_skipped,
            "files_repaired": self.files_repaired,
            "bytes_fetched": self.bytes_fetched,
            "bytes_total": self.bytes_total,
            "root": str(self.root),
            "commit": self.commit,
            "offline": self.offline,
        }

    def summary(self) -> str:
        where = f" at {self.commit[:12]}" if self.commit else ""
        mode = " (offline, from cache)" if self.offline else ""
        repaired = f", {self.files_repaired} repaired" if self.files_repaired else ""
        return (
            f"{len(self.cells)} cell(s){where}{mode}: {self.files_fetched} file(s) fetched, "
            f"{self.files_skipped} skipped{repaired}, {format_bytes(self.bytes_fetched)} "
            f"downloaded of {format_bytes(self.bytes_total)}"
        )


def format_bytes(count: int) -> str:
    n = float(count)
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"  # pragma: no cover


# ----------------------------------------------------------------------------------------
# Verified markers
# ----------------------------------------------------------------------------------------
def files_fingerprint(paths: Sequence[Path], base: Path) -> str | None:
    """Hash of (relative path, size, mtime) of every file; None if one is missing."""
    h = hashlib.sha256()
    for p in sorted(paths):
        try:
            st = p.stat()  # follows the cache's symlinks to the blobs
        except OSError:
            return None
        h.update(f"{p.relative_to(base).as_posix()}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


class _JsonStore:
    """``{section: {key: value}}`` in one JSON file, shared by threads and processes."""

    def __init__(self, path: Path, section: str):
        self.path = path
        self.section = section
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def all(self) -> dict[str, Any]:
        recs = self._read().get(self.section)
        return recs if isinstance(recs, dict) else {}

    def get(self, key: str) -> Any:
        return self.all().get(key)

    def put(self, key: str, value: Any) -> None:
        self.update({key: value})

    def update(self, values: Mapping[str, Any]) -> None:
        """Raises OSError when the file cannot be written."""
        from filelock import FileLock

        current = self.all()
        values = {k: v for k, v in values.items() if current.get(k) != v}
        if not values:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, FileLock(str(self.path) + ".lock"):
            data = self._read()
            recs = data.get(self.section)
            data[self.section] = {**(recs if isinstance(recs, dict) else {}), **values}
            _atomic_write(self.path, json.dumps(data, indent=1, sort_keys=True))


def _atomic_write(path: Path, text: str, tmp_dir: Path | None = None) -> None:
    """The one atomic writer (:mod:`alem_eval.core.fsutil`), temp files named ``.NAME.*.tmp``
    (beside ``path``, or in ``tmp_dir``)."""
    atomic_write(
        path,
        lambda fh: fh.write(text),
        binary=False,
        prefix=f".{path.name}.",
        suffix=".tmp",
        tmp_dir=tmp_dir,
    )


def _os_reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


# ----------------------------------------------------------------------------------------
# The interface
# ----------------------------------------------------------------------------------------
class Source(ABC):
    """Where checkpoint cells come from."""

    description: str
    # Taking every cell by default would download the whole release: commands that fetch
    # ask for an explicit selection ('*' for all; selectors.require_selection).
    selection_required: bool = False

    def __init__(self) -> None:
        self.warnings: list[str] = []  # worth telling the user (shown by the commands)

    @abstractmethod
    def cells(self) -> list[Cell]:
        """Every cell the source holds (or, for an unreachable Hub, the manifest's)."""

    def select(
        self,
        selectors: Sequence[str] = (),
        *,
        budgets: Sequence[str] | None = None,
        algorithms: Sequence[str] | None = None,
        difficulties: Sequence[str] | None = None,
        seeds: Sequence[str | int] | None = None,
    ) -> list[Cell]:
        """Cells matched by the selectors (all if none) and the filters; see :mod:`.selectors`."""
        return select_cells(
            self.cells(),
            selectors,
            budgets=budgets,
            algorithms=algorithms,
            difficulties=difficulties,
            seeds=seeds,
        )

    @abstractmethod
    def local_dir(self, cell: Cell, *, rehash: bool = False) -> Path:
        """A directory holding the cell's ``checkpoint/`` and ``config.json`` (fetched if needed).

        ``rehash``: recompute every file's content hash and compare it with the source's
        listing (a Hub source fetches a damaged file again); ``verify`` asks for it.
        """

    def checked_dir(self, cell: Cell, *, rehash: bool = False) -> tuple[Path, FileCheck]:
        """:meth:`local_dir`, and how the cell's files were checked and what was fetched
        again (here: nothing to check them against)."""
        return self.local_dir(cell, rehash=rehash), FileCheck()

    @abstractmethod
    def pull(
        self,
        cells: Sequence[Cell],
        *,
        workers: int = DEFAULT_WORKERS,
        progress: bool | None = None,
        rehash: bool = False,
    ) -> PullReport:
        """Make the cells available locally (``rehash``: as for :meth:`local_dir`)."""

    @abstractmethod
    def state(self, cell: Cell) -> CellState:
        """``remote`` (not complete locally), ``cached`` or ``verified``."""

    def cached_dir(self, cell: Cell) -> Path | None:
        """The cell's directory if it is complete locally, else None (nothing is fetched)."""
        target = self._marker_target(cell)
        return None if target is None else target[1]

    @abstractmethod
    def files_to_fetch(self, cell: Cell) -> tuple[dict[str, int], list[str]]:
        """``({path: size in bytes} of the cell's files, the paths a pull would download)``;
        nothing is fetched or written (``--dry-run``)."""

    @abstractmethod
    def _marker_target(self, cell: Cell) -> tuple[str, Path, list[Path]] | None:
        """(marker key, cell dir, files) for a locally complete cell, else None."""

    @property
    @abstractmethod
    def _markers(self) -> _JsonStore: ...

    def mark_verified(self, cell: Cell, content_hash: str | None = None) -> bool:
        """Record that ``verify`` passed for the cell's current files.

        Best effort: returns False (with a warning in :attr:`warnings`) if the marker cannot
        be written; raises SourceError only if the cell is not available locally.
        """
        target = self._marker_target(cell)
        if target is None:
            raise SourceError(
                f"{cell.id}: not available locally; pull it before marking it verified"
            )
        key, base, files = target
        try:
            self._markers.put(
                key, {"content_hash": content_hash, "fingerprint": files_fingerprint(files, base)}
            )
        except OSError as exc:
            self.warnings.append(
                f"cannot record the verified state in {self._markers.path}: {_os_reason(exc)}"
            )
            return False
        return True

    def verified_hash(self, cell: Cell) -> str | None:
        """The content hash recorded by :meth:`mark_verified`, if the marker still holds."""
        rec = self._verified_record(cell)
        return rec.get("content_hash") if rec else None

    def _verified_record(self, cell: Cell) -> dict[str, Any] | None:
        target = self._marker_target(cell)
        if target is None:
            return None
        key, base, files = target
        rec = self._markers.get(key)
        if not isinstance(rec, dict) or rec.get("fingerprint") != files_fingerprint(files, base):
            return None
        return rec

    def expected_params(self, cell: Cell) -> int | None:
        """Parameter count at the released sizes, from the manifest (None for other cells)."""
        return load_manifest().expected_params(cell)

    def size_bytes(self, cell: Cell) -> int | None:
        return None

    def commit(self, cell: Cell) -> str | None:
        """The Hub commit the cell's local copy was pulled at (None for local directories)."""
        return None

    def records(self, cells: Sequence[Cell]) -> list[dict[str, Any]]:
        """One row per cell for ``list``."""
        rows = []
        for c in cells:
            size = self.size_bytes(c)
            rows.append(
                {
                    "cell": c.id,
                    "budget": c.budget,
                    "algorithm": c.algorithm,
                    "difficulty": c.difficulty,
                    "seed": c.seed,
                    "state": self.state(c),
                    "expected_params": self.expected_params(c),
                    "size_mb": None if size is None else round(size / 1e6, 1),
                    "commit": self.commit(c),
                }
            )
        return rows


def open_source(
    spec: str | Path = HUB_SPEC,
    *,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    endpoint: str | None = None,
    read_only: bool = False,
) -> Source:
    """``"hub"`` (the default), ``"demo"`` (the small trained cells bundled with the package,
    :mod:`alem_eval.api.demo`) or a local directory in the released layout (``./hub`` for a
    directory named ``hub``). ``read_only``: a Hub source never writes to its cache nor
    downloads (local directories are only read anyway)."""
    name = str(spec).strip().lower()
    if name == HUB_SPEC:
        return HubSource(
            repo=repo or HUB_REPO,
            revision=revision or DEFAULT_REVISION,
            cache_dir=cache_dir,
            endpoint=endpoint,
            read_only=read_only,
        )
    if repo is not None or revision is not None:
        raise UsageError(
            "--repo and --revision apply to the Hub source only, not to a local --source"
        )
    if name == DEMO_SPEC:
        from alem_eval.hub.demo_cells import ensure_demo_source

        return LocalSource(ensure_demo_source(), cache_dir=cache_dir)
    return LocalSource(Path(spec), cache_dir=cache_dir)


# ----------------------------------------------------------------------------------------
# Local directory
# ----------------------------------------------------------------------------------------
_is_cell_dir = is_cell_dir  # the layout module's test


class LocalSource(Source):
    """A directory in the released layout (budget labels free-form, e.g. ``tiny/``).

    ``PATH`` may also be a single cell directory; the source then holds only that cell.
    """

    def __init__(self, root: Path, *, cache_dir: str | Path | None = None):
        super().__init__()
        path = Path(root).expanduser()
        if not path.exists():
            raise SourceUsageError(
                f"source {str(root)!r} does not exist (give 'hub' or a directory "
                "laid out as BUDGET/ALGORITHM/DIFFICULTY/seedN/)"
            )
        if not path.is_dir():
            raise SourceUsageError(f"source {str(root)!r} is not a directory")
        path = path.resolve()
        self._only: Cell | None = None
        seed = parse_seed_dir(path.name)
        if _is_cell_dir(path) and seed is not None and len(path.parents) >= 4:
            self._only = Cell(path.parents[2].name, path.parents[1].name, path.parent.name, seed)
            path = path.parents[3]
        self.root = path
        self.description = str(self.root)
        self._cache_dir = Path(cache_dir).expanduser() if cache_dir else None

    @cached_property
    def _all_cells(self) -> list[Cell]:
        if self._only is not None:
            return [self._only]
        found = []
        for d in self.root.glob("*/*/*/seed*"):
            seed = parse_seed_dir(d.name)
            rel = d.relative_to(self.root).parts
            if seed is None or any(p.startswith(".") for p in rel) or not _is_cell_dir(d):
                continue
            found.append(Cell(rel[0], rel[1], rel[2], seed))
        return sort_cells(found)

    def cells(self) -> list[Cell]:
        if not self._all_cells:
            raise SourceError(
                f"no cells under {self.root} "
                "(expected BUDGET/ALGORITHM/DIFFICULTY/seedN/ "
                "directories holding config.json and checkpoint/)"
            )
        return list(self._all_cells)

    def _find(self, cell: Cell) -> Cell | None:
        key = (cell.budget.lower(), cell.algorithm, cell.difficulty, cell.seed)
        return next(
            (
                c
                for c in self._all_cells
                if (c.budget.lower(), c.algorithm, c.difficulty, c.seed) == key
            ),
            None,
        )

    def local_dir(self, cell: Cell, *, rehash: bool = False) -> Path:
        """(``rehash`` has nothing to compare with here: a local directory has no listing.)"""
        found = self._find(cell)
        if found is None:
            raise SourceError(f"{cell.id}: no such cell under {self.root}")
        return self.root / found.id

    def pull(
        self,
        cells: Sequence[Cell],
        *,
        workers: int = DEFAULT_WORKERS,
        progress: bool | None = None,
        rehash: bool = False,
    ) -> PullReport:
        files = [p for c in cells for p in self._files(self.local_dir(c))]
        return PullReport(
            cells=tuple(cells),
            files_fetched=0,
            files_skipped=len(files),
            files_repaired=0,
            bytes_fetched=0,
            bytes_total=sum(p.stat().st_size for p in files),
            root=self.root,
        )

    @staticmethod
    def _files(d: Path) -> list[Path]:
        return sorted(p for p in d.rglob("*") if p.is_file())

    def files_to_fetch(self, cell: Cell) -> tuple[dict[str, int], list[str]]:
        d = self.local_dir(cell)
        return {p.relative_to(self.root).as_posix(): p.stat().st_size for p in self._files(d)}, []

    def state(self, cell: Cell) -> CellState:
        self.local_dir(cell)
        return "verified" if self._verified_record(cell) else "cached"

    def size_bytes(self, cell: Cell) -> int | None:
        return sum(p.stat().st_size for p in self._files(self.local_dir(cell)))

    def _marker_target(self, cell: Cell) -> tuple[str, Path, list[Path]] | None:
        d = self.local_dir(cell)
        return str(d), d, self._files(d)

    @cached_property
    def _markers(self) -> _JsonStore:
        if self._cache_dir is not None:
            path = self._cache_dir / f".{_STATE_DIRNAME}" / "local-verified.json"
            return _JsonStore(path, "verified")
        from alem_eval.core.paths import user_cache_dir

        return _JsonStore(user_cache_dir() / "local-verified.json", "verified")


# ----------------------------------------------------------------------------------------
# File integrity: what the listing says a file is, and whether a file on disk is it
# ----------------------------------------------------------------------------------------
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_OID = re.compile(r"^[0-9a-f]{40}$")
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class RemoteFile:
    """One file of the repo listing: its size and, where the Hub gives one, its content hash.

    ``sha256`` is the LFS object id the Hub lists for large files (the weights); ``git_oid``
    the git blob id of the others (sha1 of ``b"blob <size>\\0" + content``). A listing rebuilt
    from a cache's snapshot folder may know neither (``size`` is then the file's own, or -1
    for a dangling link).
    """

    size: int
    sha256: str | None = None
    git_oid: str | None = None

    @classmethod
    def of(cls, size: int, sha256: str | None = None, git_oid: str | None = None) -> RemoteFile:
        """Ignores hashes that are not lower-case hex of the right length."""
        sha = str(sha256).lower() if sha256 else None
        oid = str(git_oid).lower() if git_oid else None
        return cls(
            int(size),
            sha if sha and _SHA256.match(sha) else None,
            oid if oid and _GIT_OID.match(oid) else None,
        )

    @property
    def digest(self) -> str | None:
        return self.sha256 or self.git_oid

    def hash_of(self, path: Path) -> str:
        """The content hash of ``path`` in this file's scheme (raises OSError)."""
        with open(path, "rb") as fh:
            if self.sha256:
                return hashlib.file_digest(fh, "sha256").hexdigest()
            header = b"blob %d\0" % os.fstat(fh.fileno()).st_size
            return hashlib.file_digest(fh, lambda: hashlib.sha1(header)).hexdigest()

    def mismatch(self, path: Path) -> str | None:
        """Why the file at ``path`` is not this file (size, then content hash); None if it is."""
        have = _size(path)
        if have is None:
            return "no file"
        if have != self.size:
            return f"{have} bytes but the listing says {self.size}"
        if self.digest is None:
            return None
        try:
            got = self.hash_of(path)
        except OSError as exc:
            return f"unreadable ({_os_reason(exc)})"
        if got != self.digest:
            kind = "sha256" if self.sha256 else "git blob id"
            return f"{kind} {got[:12]}… but the listing says {self.digest[:12]}…"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (("size", self.size), ("sha256", self.sha256), ("git_oid", self.git_oid))
            if v is not None
        }


def _cached_entry(pointer: Path) -> RemoteFile:
    """A snapshot entry of a Hugging Face cache: a link to ``blobs/<etag>``, where the etag is
    the sha256 of an LFS file or the git blob id of another."""
    size = _size(pointer)
    try:
        etag = Path(os.readlink(pointer)).name if pointer.is_symlink() else ""
    except OSError:
        etag = ""
    return RemoteFile.of(
        -1 if size is None else size,
        sha256=etag if _SHA256.match(etag) else None,
        git_oid=etag if _GIT_OID.match(etag) else None,
    )


def _stat_stamp(path: Path) -> tuple[str, str] | None:
    """(the blob's real path, its size/mtime/ctime/inode): a file whose stamp is unchanged since
    its hash was checked need not be read again."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return real, f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


# ----------------------------------------------------------------------------------------
# Hugging Face Hub
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Listing:
    """The repo's files at one commit, or (commit None) nothing known."""

    commit: str | None
    files: dict[str, RemoteFile] = field(default_factory=dict)
    online: bool = False  # the endpoint answered
    problem: str | None = None  # why it did not, if it did not
    from_snapshot: bool = False  # rebuilt from the cache's snapshot folder (no listing cached)


def _network_errors() -> tuple[type[BaseException], ...]:
    types: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for mod, names in (
        ("httpx2", ("TransportError",)),
        ("httpx", ("TransportError",)),
        ("requests.exceptions", ("ConnectionError", "Timeout")),
    ):
        try:
            m = __import__(mod, fromlist=list(names))
        except ImportError:
            continue
        types += [getattr(m, n) for n in names if hasattr(m, n)]
    return tuple(types)


@contextlib.contextmanager
def _quiet_hub_logs() -> Iterator[None]:
    """huggingface_hub logs retries and fallbacks as warnings; our errors say it in one line."""
    logger = logging.getLogger("huggingface_hub")
    if os.environ.get("ALEM_EVAL_DEBUG"):
        yield
        return
    old = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(old)


def check_hub_client() -> None:
    """Raise SourceError if the installed huggingface_hub is older than the API used here."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("huggingface_hub")
    except PackageNotFoundError:
        raise SourceError(
            "huggingface_hub is not installed; install alem-eval with its dependencies"
        ) from None
    if _release(have) < _release(HF_HUB_MIN_VERSION):
        raise SourceError(
            f"huggingface_hub {have} is too old: alem-eval needs "
            f">={HF_HUB_MIN_VERSION} "
            f"(pip install 'huggingface-hub>={HF_HUB_MIN_VERSION}')"
        )


def _release(version: str) -> tuple[int, ...]:
    """``"1.1.0rc1"`` -> (1, 1, 0): the release numbers, enough to compare with a floor."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0])[:3])


class _Cancelled(Exception):
    """Raised inside a download thread to abandon its file (the client removes the partial)."""


class ByteProgress:
    """The progress-bar class handed to ``hf_hub_download`` as ``tqdm_class``.

    It counts the bytes written to the file (``update``) and aborts the transfer once
    ``cancel`` is set. huggingface_hub builds it with tqdm's keyword arguments and, on an Xet
    transfer, also reports network bytes through ``update_transfer``; it looks that method up
    *on the class*, and without it creates a second bar for the network bytes, which would
    count the same file twice. So this is a real class (:meth:`bound` makes one per pull),
    not a ``functools.partial``, and network bytes are not counted as file bytes.
    """

    on_bytes: ClassVar[Callable[[int], None]] = staticmethod(lambda n: None)
    cancel: ClassVar[threading.Event | None] = None

    @classmethod
    def bound(cls, on_bytes: Callable[[int], None], cancel: threading.Event) -> type[ByteProgress]:
        return type(
            "BoundByteProgress", (cls,), {"on_bytes": staticmethod(on_bytes), "cancel": cancel}
        )

    def __init__(self, *args: Any, **kwargs: Any):
        self.n = int(kwargs.get("initial") or 0)  # counted by an earlier bar, if any
        self.total: int | None = kwargs.get("total")
        self.transfer_n = 0
        self.disable = True

    def _check(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise _Cancelled()

    def update(self, n: int | float | None = 1) -> None:
        """File bytes written (negative when a transfer restarts from 0)."""
        self._check()
        self.n += int(n or 0)
        type(self).on_bytes(int(n or 0))

    def update_transfer(self, n: int | float | None = 1) -> None:
        """Network bytes (Xet: compressed, deduplicated); not file bytes."""
        self._check()
        self.transfer_n += int(n or 0)

    @property
    def format_dict(self) -> dict[str, Any]:
        return {"n": self.n, "total": self.total, "rate": None}

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_transfer_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        pass

    def set_description(self, *args: Any, **kwargs: Any) -> None:
        pass

    def refresh(self, *args: Any, **kwargs: Any) -> None:
        pass

    def reset(self, total: int | None = None) -> None:
        self.n, self.total = 0, total

    def clear(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> ByteProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


class HubSource(Source):
    """The released checkpoints on the Hugging Face Hub, through the standard HF cache."""

    selection_required = True

    def __init__(
        self,
        repo: str = HUB_REPO,
        revision: str = DEFAULT_REVISION,
        *,
        cache_dir: str | Path | None = None,
        endpoint: str | None = None,
        read_only: bool = False,
    ):
        super().__init__()
        check_hub_client()
        # read_only: never write to the cache (the listing is not kept) nor download
        # (pull and local_dir raise SourceError): what --dry-run reads a plan from.
        self.read_only = read_only
        from huggingface_hub import constants
        from huggingface_hub.file_download import repo_folder_name

        if not revision or ".." in revision.split("/") or revision.startswith("/"):
            raise UsageError(f"invalid revision {revision!r}")
        self.repo = repo
        self.revision = revision
        self.endpoint = (endpoint or constants.ENDPOINT).rstrip("/")
        self._explicit_endpoint = endpoint
        self.cache_dir = Path(cache_dir or constants.HF_HUB_CACHE).expanduser().resolve()
        try:
            self.folder = repo_folder_name(repo_id=repo, repo_type="model")
        except Exception as exc:  # HFValidationError for a malformed repo id
            raise UsageError(f"invalid repo id {repo!r}: {brief(exc)}") from None
        self.storage = self.cache_dir / self.folder
        self.description = f"{repo}@{revision} ({self.endpoint})"

    # -- listing -------------------------------------------------------------------------
    @property
    def offline_mode(self) -> bool:
        from huggingface_hub import constants

        check = getattr(constants, "is_offline_mode", None)
        return bool(check() if callable(check) else constants.HF_HUB_OFFLINE)

    def _api(self):
        from huggingface_hub import HfApi

        return HfApi(
            endpoint=self._explicit_endpoint, library_name=LIBRARY_NAME, library_version=__version__
        )

    @cached_property
    def listing(self) -> _Listing:
        """The repo's files at the revision (from the Hub, else from the cache)."""
        with _quiet_hub_logs():
            if self.offline_mode:
                problem = "offline mode is on (HF_HUB_OFFLINE)"
            else:
                try:
                    commit = self._remote_commit()
                except _Unreachable as exc:
                    problem = str(exc)
                else:
                    files = self._read_tree(commit)
                    if files is None:
                        files = self._fetch_tree(commit)
                        self._best_effort(lambda: self._write_tree(commit, files))
                    self._best_effort(lambda: self._write_ref(commit))
                    return _Listing(commit, files, online=True)
        return self._cached_listing(problem)

    def _cached_listing(self, problem: str) -> _Listing:
        """The listing cached for the revision's commit, else one rebuilt from the files of
        the cache's snapshot folder (a cache filled by ``hf download`` or ``snapshot_download``)."""
        commit = self._read_ref()
        if commit is None:
            return _Listing(None, {}, problem=problem)
        files = self._read_tree(commit)
        if files is not None:
            return _Listing(commit, files, problem=problem)
        files = self._snapshot_files(commit)
        if files:
            return _Listing(commit, files, problem=problem, from_snapshot=True)
        return _Listing(None, {}, problem=problem)

    def _snapshot_files(self, commit: str) -> dict[str, RemoteFile]:
        root = self.storage / "snapshots" / commit
        files: dict[str, RemoteFile] = {}
        for dirpath, _, names in os.walk(root):
            for name in names:
                p = Path(dirpath, name)
                files[p.relative_to(root).as_posix()] = _cached_entry(p)
        return files

    def _remote_commit(self) -> str:
        from huggingface_hub import constants

        try:
            info = self._api().repo_info(
                self.repo, revision=self.revision, timeout=constants.HF_HUB_ETAG_TIMEOUT
            )
        except Exception as exc:
            raise self._translate(exc, f"{self.repo}@{self.revision}") from None
        if not getattr(info, "sha", None):
            raise SourceError(
                f"{self.endpoint} returned no commit for "
                f"{self.repo}@{self.revision}; "
                "is HF_ENDPOINT a Hugging Face Hub?"
            )
        return str(info.sha)

    def _fetch_tree(self, commit: str) -> dict[str, RemoteFile]:
        from huggingface_hub.hf_api import RepoFile

        try:
            return {
                f.path: _listed_file(f)
                for f in self._api().list_repo_tree(self.repo, recursive=True, revision=commit)
                if isinstance(f, RepoFile)
            }
        except Exception as exc:
            err = self._translate(exc, f"the file list of {self.repo}@{self.revision}")
            raise (SourceError(str(err)) if isinstance(err, _Unreachable) else err) from None

    def _translate(self, exc: BaseException, what: str) -> Exception:
        """A one-line error for a huggingface_hub / network exception (``_Unreachable`` if the
        cache may still serve)."""
        from huggingface_hub import errors as hf_errors
        from huggingface_hub.utils import OfflineModeIsEnabled

        cause = exc.__cause__ if isinstance(exc, ValueError) and exc.__cause__ else exc
        if isinstance(cause, OfflineModeIsEnabled):
            return _Unreachable("offline mode is on (HF_HUB_OFFLINE)")
        if isinstance(cause, hf_errors.RevisionNotFoundError):
            return SourceError(
                f"revision {self.revision!r} not found in Hub repo {self.repo!r} at {self.endpoint}"
            )
        if isinstance(cause, hf_errors.RepositoryNotFoundError):
            return SourceError(
                f"Hub repo {self.repo!r} not found at {self.endpoint} "
                "(or it is private or gated and no valid token was given)"
            )
        if isinstance(cause, hf_errors.LocalEntryNotFoundError):  # the client's "and not cached"
            inner = cause.__cause__
            if inner is not None and inner is not cause:
                return self._translate(inner, what)
            return _Unreachable(f"cannot reach the Hub at {self.endpoint}")
        if isinstance(cause, getattr(hf_errors, "EntryNotFoundError", ())):
            return DownloadError(f"{what}: not found in {self.repo}@{self.revision}")
        if isinstance(cause, hf_errors.HfHubHTTPError):
            status = getattr(getattr(cause, "response", None), "status_code", None)
            if status is not None and status >= 500:
                return _Unreachable(f"the Hub at {self.endpoint} answered HTTP {status}")
            return DownloadError(f"{what}: HTTP {status} from {self.endpoint} ({brief(cause)})")
        if isinstance(cause, _network_errors()):
            return _Unreachable(f"cannot reach the Hub at {self.endpoint} ({brief(cause)})")
        if isinstance(cause, OSError) and cause.errno is not None:
            return DownloadError(
                f"cannot write {what} to the cache at {self.cache_dir}: {_os_reason(cause)}"
            )
        return DownloadError(f"{what}: {type(cause).__name__}: {brief(cause)}")

    # The listing per commit and the revision -> commit ref are cached on disk so that
    # offline runs can list and check what is there.
    def _tree_path(self, commit: str) -> Path:
        return self.storage / _STATE_DIRNAME / "trees" / f"{commit}.json"

    def _read_tree(self, commit: str) -> dict[str, RemoteFile] | None:
        try:
            data = json.loads(self._tree_path(commit).read_text(encoding="utf-8"))
            if data.get("format") != _LISTING_FORMAT:
                return None
            return {
                str(k): RemoteFile.of(v["size"], v.get("sha256"), v.get("git_oid"))
                for k, v in data["files"].items()
            }
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def _write_tree(self, commit: str, files: dict[str, RemoteFile]) -> None:
        _atomic_write(
            self._tree_path(commit),
            json.dumps(
                {
                    "format": _LISTING_FORMAT,
                    "repo": self.repo,
                    "commit": commit,
                    "files": {p: f.to_json() for p, f in sorted(files.items())},
                },
                indent=0,
            ),
        )

    def _ref_path(self) -> Path:
        return self.storage / "refs" / self.revision  # the HF cache's own layout

    def _is_commit(self, rev: str) -> bool:
        return len(rev) == 40 and all(c in "0123456789abcdef" for c in rev)

    def _read_ref(self) -> str | None:
        if self._is_commit(self.revision):
            return self.revision
        try:
            commit = self._ref_path().read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return commit if self._is_commit(commit) else None

    def _write_ref(self, commit: str) -> None:
        if not self._is_commit(self.revision) and self._read_ref() != commit:
            # Staged outside refs/: huggingface_hub reads every file there as a ref (a temp
            # file left by a kill would make scan_cache_dir call the repo corrupted).
            _atomic_write(self._ref_path(), commit, tmp_dir=self.storage / _STATE_DIRNAME)

    def _best_effort(self, fn: Callable[[], None]) -> None:
        if self.read_only:
            return
        try:
            fn()
        except OSError as exc:
            self.warnings.append(
                f"cannot write to the cache at {self.cache_dir}: {_os_reason(exc)}"
            )

    # -- cells -----------------------------------------------------------------------------
    @cached_property
    def _cell_files(self) -> dict[Cell, dict[str, RemoteFile]]:
        by_cell: dict[Cell, dict[str, RemoteFile]] = {}
        for path, f in self.listing.files.items():
            parts = path.split("/")
            if any(p in ("", ".", "..") for p in parts) or "\\" in path:
                continue  # never let a listing name a path outside the snapshot
            seed = parse_seed_dir(parts[3]) if len(parts) >= 5 else None
            if seed is not None:
                cell = Cell(parts[0], parts[1], parts[2], seed)
                by_cell.setdefault(cell, {})[path] = f
        return by_cell

    def cells(self) -> list[Cell]:
        listing = self.listing
        if listing.commit is None:
            if self.repo != HUB_REPO:  # the manifest knows the release, not this repo
                raise self._nothing_cached(listing)
            self._note(
                f"{listing.problem}; nothing cached for {self.repo}@{self.revision}: "
                "showing the released cells from the manifest"
            )
            return load_manifest().cells()
        if listing.from_snapshot:
            self._note(
                f"{listing.problem}; using the files cached in "
                f"{self.storage / 'snapshots' / listing.commit}"
            )
        elif not listing.online and listing.problem:
            self._note(
                f"{listing.problem}; using the cached listing of {self.repo}@{self.revision}"
            )
        return sort_cells(self._cell_files)

    def _nothing_cached(self, listing: _Listing) -> SourceError:
        """The Hub did not answer (``listing.problem``) and the cache holds nothing of the
        repo at this revision."""
        return SourceError(
            f"{listing.problem}; nothing is cached for {self.repo}@{self.revision}"
            + (f" in {self.cache_dir}" if not self.offline_mode else "")
        )

    def _note(self, text: str) -> None:
        if text not in self.warnings:
            self.warnings.append(text)

    def _files_of(self, cell: Cell) -> dict[str, RemoteFile]:
        files = self._cell_files.get(cell)
        if files is None:  # budget spelling differs from the listing's: match case-insensitively
            key = (cell.budget.lower(), cell.algorithm, cell.difficulty, cell.seed)
            files = next(
                (
                    f
                    for c, f in self._cell_files.items()
                    if (c.budget.lower(), c.algorithm, c.difficulty, c.seed) == key
                ),
                None,
            )
        if files is None:
            raise SourceError(f"{cell.id}: no such cell in {self.repo}@{self.revision}")
        return files

    def _snapshot(self) -> Path:
        assert self.listing.commit is not None
        return self.storage / "snapshots" / self.listing.commit

    def _cell_id(self, cell: Cell) -> str:
        """The cell's folder with the listing's spelling."""
        return "/".join(next(iter(self._files_of(cell))).split("/")[:4])

    def _missing(self, files: dict[str, RemoteFile]) -> list[str]:
        snap = self._snapshot()
        return [p for p, f in files.items() if _size(snap / p) != f.size]

    def state(self, cell: Cell) -> CellState:
        if self.listing.commit is None:
            return "remote"
        try:
            files = self._files_of(cell)
        except SourceError:
            return "remote"
        if self._missing(files):
            return "remote"
        return "verified" if self._verified_record(cell) else "cached"

    def size_bytes(self, cell: Cell) -> int | None:
        if self.listing.commit is None:
            entry = load_manifest().entry(cell)
            return entry.approx_size_mb * 10**6 if entry and entry.approx_size_mb else None
        return sum(max(f.size, 0) for f in self._files_of(cell).values())

    def commit(self, cell: Cell) -> str | None:
        """The commit recorded when the cell was last pulled, else (a cache filled by another
        tool) the listing's commit if the cell is complete there."""
        want = _cell_key(cell)
        for cell_id, commit in self._pulled.all().items():
            with contextlib.suppress(SelectorError):
                if (
                    isinstance(commit, str)
                    and _cell_key(Cell.from_id(cell_id)) == want
                    # still there: a revision removed from the cache (`hf cache rm`) is not
                    and (self.storage / "snapshots" / commit / cell_id).is_dir()
                ):
                    return commit
        return self.listing.commit if self.state(cell) != "remote" else None

    def local_dir(self, cell: Cell, *, rehash: bool = False) -> Path:
        return self.checked_dir(cell, rehash=rehash)[0]

    def checked_dir(self, cell: Cell, *, rehash: bool = False) -> tuple[Path, FileCheck]:
        report = self.pull([cell], rehash=rehash)  # fetches what is missing or damaged
        return self._snapshot() / self._cell_id(cell), report.checks[cell.id]

    def _marker_target(self, cell: Cell) -> tuple[str, Path, list[Path]] | None:
        if self.listing.commit is None or self._missing(self._files_of(cell)):
            return None
        d = self._snapshot() / self._cell_id(cell)
        files = [self._snapshot() / p for p in self._files_of(cell)]
        return f"{self.listing.commit}/{self._cell_id(cell)}", d, files

    @cached_property
    def _markers(self) -> _JsonStore:
        return _JsonStore(self.storage / _STATE_DIRNAME / "verified.json", "verified")

    @cached_property
    def _pulled(self) -> _JsonStore:
        """``{cell folder: commit}`` of every completed pull."""
        return _JsonStore(self.storage / _STATE_DIRNAME / "pulled.json", "pulled")

    @cached_property
    def _checked(self) -> _JsonStore:
        """``{blob path: "<digest> <stat stamp>"}`` for every file whose hash was checked."""
        return _JsonStore(self.storage / _STATE_DIRNAME / "checked.json", "checked")

    # -- pull ------------------------------------------------------------------------------
    def pull(
        self,
        cells: Sequence[Cell],
        *,
        workers: int = DEFAULT_WORKERS,
        progress: bool | None = None,
        rehash: bool = False,
    ) -> PullReport:
        if self.read_only:
            raise SourceError(f"{self.description}: opened read-only, nothing is downloaded")
        listing = self.listing
        if listing.commit is None:
            raise self._nothing_cached(listing)
        wanted: dict[str, RemoteFile] = {}
        for cell in cells:
            wanted.update(self._files_of(cell))
        try:
            self.storage.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DownloadError(
                f"cannot write to the cache at {self.cache_dir}: {_os_reason(exc)}"
            ) from None
        checked = _CheckedFiles(self._checked, rehash=rehash)
        try:
            todo, damaged = self._plan(wanted, checked)
            if todo and not listing.online:
                names = ", ".join(sorted({"/".join(p.split("/")[:4]) for p, _, _ in todo})[:3])
                bad = next(iter(damaged.items()), None)
                why = f"; {bad[0]}: {bad[1]}" if bad else ""
                raise DownloadError(
                    f"{listing.problem}; {len(todo) - len(damaged)} file(s) not "
                    f"cached, {len(damaged)} damaged (cells: {names}{why}). "
                    "Pull them with network access first"
                )
            if todo:
                self._sweep_partials()
            fetched_bytes, repaired = self._download(
                todo, checked, workers=max(1, workers), progress=progress
            )
        finally:
            with contextlib.suppress(OSError):  # bookkeeping: a read-only cache still serves
                checked.save()
        with contextlib.suppress(OSError):
            self._pulled.update({self._cell_id(c): listing.commit for c in cells})
        return PullReport(
            cells=tuple(cells),
            files_fetched=len(todo),
            files_skipped=len(wanted) - len(todo),
            files_repaired=len(repaired),
            bytes_fetched=fetched_bytes,
            bytes_total=sum(f.size for f in wanted.values()),
            root=self._snapshot(),
            commit=listing.commit,
            offline=not listing.online,
            checks={c.id: self._file_check(c, repaired) for c in cells},
        )

    def _file_check(self, cell: Cell, repaired: Mapping[str, str]) -> FileCheck:
        why = (
            "offline, and the cached snapshot holds plain files, not links to blobs named by "
            "their hashes"
            if self.listing.from_snapshot
            else "the listing gives no hash for them"
        )
        digests = {p: f.digest for p, f in self._files_of(cell).items()}
        return FileCheck.of_cell(self._cell_id(cell), digests, repaired, no_hash_reason=why)

    def files_to_fetch(self, cell: Cell) -> tuple[dict[str, int], list[str]]:
        """Sizes from the Hub listing; a cached file counts as fetched when its size and hash
        match (as :meth:`pull` checks it, reading only)."""
        if self.listing.commit is None:
            raise self._nothing_cached(self.listing)
        files = self._files_of(cell)
        todo, _ = self._plan(files, _CheckedFiles(self._checked, rehash=False))
        return {p: max(f.size, 0) for p, f in files.items()}, [p for p, _, _ in todo]

    def _plan(
        self, wanted: dict[str, RemoteFile], checked: _CheckedFiles
    ) -> tuple[list[tuple[str, RemoteFile, str | None]], dict[str, str]]:
        """(path, file, what is wrong with the cached copy, None if there is none) for every
        file to fetch, and what is wrong with each bad cached copy."""
        snap = self._snapshot()
        todo: list[tuple[str, RemoteFile, str | None]] = []
        damaged: dict[str, str] = {}
        for path, f in sorted(wanted.items()):
            local = snap / path
            if not os.path.lexists(local):
                todo.append((path, f, None))
            elif problem := checked.problem(local, f):
                todo.append((path, f, problem))
                damaged[path] = problem
        return todo, damaged

    def _sweep_partials(self) -> None:
        """Remove partial downloads left by a killed process: ``blobs/<etag>.<id>.incomplete``
        whose per-file lock (held by huggingface_hub while it writes one) is free."""
        from filelock import FileLock, Timeout

        locks = self.cache_dir / ".locks" / self.folder
        for part in sorted((self.storage / "blobs").glob("*.incomplete")):
            lock = FileLock(str(locks / f"{part.name.split('.')[0]}.lock"))
            try:
                with lock.acquire(timeout=0):
                    part.unlink(missing_ok=True)
            except (Timeout, OSError, NotImplementedError):
                continue  # being written (or the lock is unusable here): leave it

    def _download(
        self,
        todo: list[tuple[str, RemoteFile, str | None]],
        checked: _CheckedFiles,
        *,
        workers: int,
        progress: bool | None,
    ) -> tuple[int, dict[str, str]]:
        """Fetch ``todo`` in parallel; returns (bytes received, {path: what was wrong} for
        every file fetched again because a cached or downloaded copy did not match)."""
        if not todo:
            return 0, {}
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        from alem_eval.core.progress import err_console

        show = err_console.is_terminal if progress is None else progress
        lock = threading.Lock()
        cancel = threading.Event()
        totals = {"bytes": 0, "done": 0}
        repaired: dict[str, str] = {}
        bar = Progress(
            TextColumn("[bold]pull[/] {task.fields[files]}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=err_console,
            disable=not show,
            transient=False,
        )
        task = bar.add_task(
            "pull", total=sum(f.size for _, f, _ in todo), files=f"0/{len(todo)} files"
        )

        def on_bytes(n: int) -> None:
            with lock:
                totals["bytes"] += n
            bar.update(task, advance=n)

        counter = ByteProgress.bound(on_bytes, cancel)

        def fetch(path: str, f: RemoteFile, bad_in_cache: str | None) -> None:
            bad_download = self._fetch_checked(path, f, bad_in_cache is not None, counter, checked)
            with lock:
                if bad_in_cache is not None:
                    repaired[path] = f"cached copy: {bad_in_cache}"
                elif bad_download is not None:
                    repaired[path] = f"download: {bad_download}"
                totals["done"] += 1
            bar.update(task, files=f"{totals['done']}/{len(todo)} files")

        pool = ThreadPoolExecutor(
            max_workers=min(workers, len(todo)), thread_name_prefix="alem-pull"
        )
        with bar, _quiet_hub_logs():
            try:
                futures = [pool.submit(fetch, *item) for item in todo]
                wait(futures, return_when=FIRST_EXCEPTION)
                # On the first failure: start nothing new, let the files in flight finish
                # (they are kept), then report that failure.
                pool.shutdown(wait=True, cancel_futures=True)
            except BaseException:  # Ctrl-C: abandon the files in flight; whole files are kept
                cancel.set()
                pool.shutdown(wait=False, cancel_futures=True)
                raise
            for fut in futures:
                if not fut.cancelled() and fut.exception() is not None:
                    raise fut.exception()  # type: ignore[misc]
        return totals["bytes"], repaired

    def _fetch_checked(
        self,
        path: str,
        f: RemoteFile,
        force: bool,
        counter: type[ByteProgress],
        checked: _CheckedFiles,
    ) -> str | None:
        """Fetch one file and check it against the listing; a bad copy is removed and fetched
        once more. Returns what was wrong with the first copy if that was needed."""
        pointer = self._snapshot() / path
        self._fetch_file(path, force, counter)
        first = f.mismatch(pointer)
        if first is None:
            checked.good(pointer, f)
            return None
        self._discard(pointer)
        self._fetch_file(path, True, counter)
        problem = f.mismatch(pointer)
        if problem is not None:
            self._discard(pointer)
            raise DownloadError(
                f"{path}: {problem}, after two downloads; the file was removed, run pull again"
            )
        checked.good(pointer, f)
        return first

    def _fetch_file(self, path: str, force: bool, counter: type[ByteProgress]) -> None:
        """Download one file into the cache (a transfer the client finds short is left out)."""
        from huggingface_hub import constants, hf_hub_download

        try:
            hf_hub_download(
                self.repo,
                path,
                revision=self.listing.commit,
                cache_dir=str(self.cache_dir),
                endpoint=self._explicit_endpoint,
                force_download=force,
                etag_timeout=constants.HF_HUB_ETAG_TIMEOUT,
                library_name=LIBRARY_NAME,
                library_version=__version__,
                tqdm_class=counter,
            )  # type: ignore[arg-type]
        except _Cancelled:
            raise
        except OSError as exc:
            if _is_size_mismatch(exc):  # the client's own length check: a short transfer
                return
            raise self._as_download_error(exc, path) from None
        except Exception as exc:
            raise self._as_download_error(exc, path) from None

    def _as_download_error(self, exc: BaseException, path: str) -> Exception:
        err = self._translate(exc, path)
        if isinstance(err, _Unreachable):
            return DownloadError(
                f"cannot download {path}: {err}; files already fetched are kept, "
                "run pull again to resume"
            )
        return err

    def _discard(self, pointer: Path) -> None:
        """Remove a bad cached file (the snapshot entry and the blob it points to)."""
        blobs = (self.storage / "blobs").resolve()
        target = Path(os.path.realpath(pointer))
        with contextlib.suppress(FileNotFoundError):
            if blobs in target.parents:
                target.unlink()
        with contextlib.suppress(FileNotFoundError):
            pointer.unlink()


class _CheckedFiles:
    """Which cached files were hashed and found good, and with which stat stamp: a file whose
    stamp has not changed since is not read again (unless ``rehash``)."""

    def __init__(self, store: _JsonStore, *, rehash: bool):
        self._store = store
        self._known: dict[str, Any] = {} if rehash else store.all()
        self._new: dict[str, str] = {}
        self._lock = threading.Lock()

    def problem(self, path: Path, f: RemoteFile) -> str | None:
        """What is wrong with ``path`` as a copy of ``f`` (None: nothing; the file is hashed
        unless its stamp says it was checked)."""
        stamp = _stat_stamp(path)
        if stamp is not None and f.digest and self._known.get(stamp[0]) == f"{f.digest} {stamp[1]}":
            return None
        problem = f.mismatch(path)
        if problem is None:
            self.good(path, f)
        return problem

    def good(self, path: Path, f: RemoteFile) -> None:
        stamp = _stat_stamp(path)
        if stamp is not None and f.digest:
            with self._lock:
                self._new[stamp[0]] = f"{f.digest} {stamp[1]}"

    def save(self) -> None:
        with self._lock:
            new, self._new = self._new, {}
        self._store.update(new)


def _listed_file(f: Any) -> RemoteFile:
    """A RepoFile of the Hub's tree listing: LFS files carry the content's sha256; the others'
    ``oid`` is their git blob id (an LFS file's ``oid`` is its pointer's, not its content's)."""
    lfs = getattr(f, "lfs", None)
    if lfs is not None:
        sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
        return RemoteFile.of(int(f.size), sha256=sha)
    return RemoteFile.of(int(f.size), git_oid=getattr(f, "blob_id", None))


def _cell_key(cell: Cell) -> tuple[str, str, str, int]:
    return (cell.budget.lower(), cell.algorithm, cell.difficulty, cell.seed)


class _Unreachable(SourceError):
    """The endpoint cannot be used right now; the cache may still serve."""


def _is_size_mismatch(exc: OSError) -> bool:
    return exc.errno is None and "consistency check failed" in str(exc).lower()


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None
