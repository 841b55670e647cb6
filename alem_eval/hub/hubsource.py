"""The released checkpoints on the Hugging Face Hub as a checkpoint source.

``open_source("hub")`` reads ``alem-world/alem-rl-baselines`` (endpoint from ``HF_ENDPOINT``,
cache in ``--cache-dir`` or the default Hugging Face cache). :class:`HubSource` lists the repo
once (one API call for the commit, one for the tree, which is then cached per commit:
:mod:`alem_eval.hub.listing`), downloads only the selected cells' files in parallel into the
standard Hugging Face cache and checks every file against the listing: its size, and its
content hash (the sha256 the Hub lists for every LFS file, the git blob id for the others;
:mod:`alem_eval.hub.transfer`). A short, empty or corrupted file is removed and fetched
again, never used. Completed files are kept, so an interrupted or killed pull resumes;
concurrent pulls into one cache share its per-file locks; a pull of cached cells makes no
request for files (a file's hash is recomputed only when its size, times or inode changed
since it was last checked; ``verify`` recomputes them all). With ``HF_HUB_OFFLINE=1`` or an
unreachable endpoint the cached listing is used, or, for a cache filled by other tools
(``hf download``, ``snapshot_download``), the files of its snapshot folder (their blob names
carry the hashes). Every failure is a one-line :class:`SourceError` / :class:`DownloadError`;
good cached files are never deleted. The commit each cell was pulled at is recorded next to
the verified markers (``list`` shows it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING

from alem_eval.core.errors import DownloadError, SelectorError, SourceError, UsageError, brief
from alem_eval.core.integrity import FileCheck
from alem_eval.core.version import __version__
from alem_eval.hub.client import (
    LIBRARY_NAME,
    Unreachable,
    check_hub_client,
    quiet_hub_logs,
    translate_error,
)
from alem_eval.hub.listing import Listing, ListingCache, RemoteFile, file_size, listed_file
from alem_eval.hub.manifest import (
    DEFAULT_REVISION,
    HUB_REPO,
    Cell,
    load_manifest,
    parse_seed_dir,
    sort_cells,
)
from alem_eval.hub.source_base import DEFAULT_WORKERS, CellState, PullReport, Source
from alem_eval.hub.state import STATE_DIRNAME, JsonStore, os_reason
from alem_eval.hub.transfer import CheckedFiles, Downloader, Todo

if TYPE_CHECKING:
    from alem_eval.hub.transfer import DownloadProgress


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
        on_download: DownloadProgress | None = None,
    ):
        super().__init__(on_download=on_download)
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
        self._listing_cache = ListingCache(self.storage, repo, revision)
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
    def listing(self) -> Listing:
        """The repo's files at the revision (from the Hub, else from the cache)."""
        with quiet_hub_logs():
            if self.offline_mode:
                problem = "offline mode is on (HF_HUB_OFFLINE)"
            else:
                try:
                    commit = self._remote_commit()
                except Unreachable as exc:
                    problem = str(exc)
                else:
                    files = self._listing_cache.read_tree(commit)
                    if files is None:
                        files = self._fetch_tree(commit)
                        self._best_effort(partial(self._listing_cache.write_tree, commit, files))
                    self._best_effort(partial(self._listing_cache.write_ref, commit))
                    return Listing(commit, files, online=True)
        return self._listing_cache.cached_listing(problem)

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
                f.path: listed_file(f)
                for f in self._api().list_repo_tree(self.repo, recursive=True, revision=commit)
                if isinstance(f, RepoFile)
            }
        except Exception as exc:
            err = self._translate(exc, f"the file list of {self.repo}@{self.revision}")
            raise (SourceError(str(err)) if isinstance(err, Unreachable) else err) from None

    def _translate(self, exc: BaseException, what: str) -> Exception:
        """A one-line error for a huggingface_hub / network exception (``Unreachable`` if the
        cache may still serve)."""
        return translate_error(
            exc,
            what,
            repo=self.repo,
            revision=self.revision,
            endpoint=self.endpoint,
            cache_dir=self.cache_dir,
        )

    def _best_effort(self, fn: Callable[[], None]) -> None:
        if self.read_only:
            return
        try:
            fn()
        except OSError as exc:
            self.warnings.append(f"cannot write to the cache at {self.cache_dir}: {os_reason(exc)}")

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

    def _nothing_cached(self, listing: Listing) -> SourceError:
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
        return [p for p, f in files.items() if file_size(snap / p) != f.size]

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
    def _markers(self) -> JsonStore:
        return JsonStore(self.storage / STATE_DIRNAME / "verified.json", "verified")

    @cached_property
    def _pulled(self) -> JsonStore:
        """``{cell folder: commit}`` of every completed pull."""
        return JsonStore(self.storage / STATE_DIRNAME / "pulled.json", "pulled")

    @cached_property
    def _checked(self) -> JsonStore:
        """``{blob path: "<digest> <stat stamp>"}`` for every file whose hash was checked."""
        return JsonStore(self.storage / STATE_DIRNAME / "checked.json", "checked")

    # -- pull ------------------------------------------------------------------------------
    def pull(
        self,
        cells: Sequence[Cell],
        *,
        workers: int = DEFAULT_WORKERS,
        on_download: DownloadProgress | None = None,
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
                f"cannot write to the cache at {self.cache_dir}: {os_reason(exc)}"
            ) from None
        checked = CheckedFiles(self._checked, rehash=rehash)
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
            downloader = self._downloader()
            if todo:
                downloader.sweep_partials()
            fetched_bytes, repaired = downloader.download(
                todo,
                checked,
                workers=max(1, workers),
                on_download=on_download or self.on_download,
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
        todo, _ = self._plan(files, CheckedFiles(self._checked, rehash=False))
        return {p: max(f.size, 0) for p, f in files.items()}, [p for p, _, _ in todo]

    def _plan(
        self, wanted: dict[str, RemoteFile], checked: CheckedFiles
    ) -> tuple[list[Todo], dict[str, str]]:
        """(path, file, what is wrong with the cached copy, None if there is none) for every
        file to fetch, and what is wrong with each bad cached copy."""
        snap = self._snapshot()
        todo: list[Todo] = []
        damaged: dict[str, str] = {}
        for path, f in sorted(wanted.items()):
            local = snap / path
            if not os.path.lexists(local):
                todo.append((path, f, None))
            elif problem := checked.problem(local, f):
                todo.append((path, f, problem))
                damaged[path] = problem
        return todo, damaged

    def _downloader(self) -> Downloader:
        assert self.listing.commit is not None
        return Downloader(
            repo=self.repo,
            commit=self.listing.commit,
            cache_dir=self.cache_dir,
            folder=self.folder,
            endpoint=self._explicit_endpoint,
            translate=self._translate,
        )


def _cell_key(cell: Cell) -> tuple[str, str, str, int]:
    return (cell.budget.lower(), cell.algorithm, cell.difficulty, cell.seed)
