"""Downloading a Hub source's files into the Hugging Face cache, checked against the listing.

:class:`Downloader` fetches files in parallel with ``hf_hub_download``, checks each against
the listing (size and content hash, :meth:`~alem_eval.hub.listing.RemoteFile.mismatch`),
removes a bad copy and fetches it once more, and stops at the first failure (files in flight
finish and are kept) or at Ctrl-C (files in flight are abandoned; whole files are kept). It
draws nothing: what it downloads is reported to a :class:`DownloadProgress` the caller passes
(:class:`alem_eval.core.progress.DownloadBar` is the stderr bar). :class:`ByteProgress` is the
``tqdm_class`` handed to the client to count file bytes and to cancel a transfer;
:class:`CheckedFiles` remembers which cached files were hashed and found good.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, ClassVar, Protocol

from alem_eval.core.errors import DownloadError
from alem_eval.core.version import __version__
from alem_eval.hub.client import LIBRARY_NAME, Unreachable, quiet_hub_logs
from alem_eval.hub.listing import RemoteFile, stat_stamp
from alem_eval.hub.state import JsonStore

# (path in the repo, its listing, what is wrong with the cached copy or None if there is none)
Todo = tuple[str, RemoteFile, str | None]


class DownloadProgress(Protocol):
    """What a pull tells about its downloads; sources draw nothing, the caller shows it
    (:class:`alem_eval.core.progress.DownloadBar` on stderr, or any object with these methods).

    For a pull that downloads anything: ``start(total_bytes, files_total)`` once, then
    ``update(done_bytes, files_done)`` as bytes arrive and files complete (one call at a time,
    from the download threads), then ``stop()`` once, whether the pull completed, failed or
    was cancelled. ``done_bytes`` counts the bytes received so far: it never decreases (unless
    the client restarts a transfer from its start) and ends at ``total_bytes`` when every file
    came whole at the first try (a file fetched again counts twice). A pull with nothing to
    download calls nothing.
    """

    def start(self, total_bytes: int, files_total: int) -> None: ...

    def update(self, done_bytes: int, files_done: int) -> None: ...

    def stop(self) -> None: ...


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


class CheckedFiles:
    """Which cached files were hashed and found good, and with which stat stamp: a file whose
    stamp has not changed since is not read again (unless ``rehash``)."""

    def __init__(self, store: JsonStore, *, rehash: bool):
        self._store = store
        self._known: dict[str, Any] = {} if rehash else store.all()
        self._new: dict[str, str] = {}
        self._lock = threading.Lock()

    def problem(self, path: Path, f: RemoteFile) -> str | None:
        """What is wrong with ``path`` as a copy of ``f`` (None: nothing; the file is hashed
        unless its stamp says it was checked)."""
        stamp = stat_stamp(path)
        if stamp is not None and f.digest and self._known.get(stamp[0]) == f"{f.digest} {stamp[1]}":
            return None
        problem = f.mismatch(path)
        if problem is None:
            self.good(path, f)
        return problem

    def good(self, path: Path, f: RemoteFile) -> None:
        stamp = stat_stamp(path)
        if stamp is not None and f.digest:
            with self._lock:
                self._new[stamp[0]] = f"{f.digest} {stamp[1]}"

    def save(self) -> None:
        with self._lock:
            new, self._new = self._new, {}
        self._store.update(new)


def _is_size_mismatch(exc: OSError) -> bool:
    return exc.errno is None and "consistency check failed" in str(exc).lower()


class Downloader:
    """Fetches files of ``repo`` at ``commit`` into the Hugging Face cache ``cache_dir``
    (the repo's folder there: ``storage``, named ``folder``). ``translate`` turns a client
    exception about a file into a one-line error (:func:`alem_eval.hub.client.translate_error`)."""

    def __init__(
        self,
        *,
        repo: str,
        commit: str,
        cache_dir: Path,
        folder: str,
        endpoint: str | None,
        translate: Callable[[BaseException, str], Exception],
    ):
        self.repo = repo
        self.commit = commit
        self.cache_dir = cache_dir
        self.folder = folder
        self.storage = cache_dir / folder
        self.snapshot = self.storage / "snapshots" / commit
        self.endpoint = endpoint
        self.translate = translate

    def sweep_partials(self) -> None:
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

    def download(
        self,
        todo: list[Todo],
        checked: CheckedFiles,
        *,
        workers: int,
        on_download: DownloadProgress | None = None,
    ) -> tuple[int, dict[str, str]]:
        """Fetch ``todo`` in parallel; returns (bytes received, {path: what was wrong} for
        every file fetched again because a cached or downloaded copy did not match)."""
        if not todo:
            return 0, {}
        lock = threading.Lock()
        cancel = threading.Event()
        totals = {"bytes": 0, "done": 0}
        repaired: dict[str, str] = {}

        def report() -> None:  # under ``lock``: one report at a time, in order
            if on_download is not None:
                on_download.update(totals["bytes"], totals["done"])

        def on_bytes(n: int) -> None:
            with lock:
                totals["bytes"] += n
                report()

        counter = ByteProgress.bound(on_bytes, cancel)

        def fetch(path: str, f: RemoteFile, bad_in_cache: str | None) -> None:
            bad_download = self._fetch_checked(path, f, bad_in_cache is not None, counter, checked)
            with lock:
                if bad_in_cache is not None:
                    repaired[path] = f"cached copy: {bad_in_cache}"
                elif bad_download is not None:
                    repaired[path] = f"download: {bad_download}"
                totals["done"] += 1
                report()

        pool = ThreadPoolExecutor(
            max_workers=min(workers, len(todo)), thread_name_prefix="alem-pull"
        )
        if on_download is not None:
            on_download.start(sum(f.size for _, f, _ in todo), len(todo))
        try:
            with quiet_hub_logs():
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
        finally:
            if on_download is not None:
                on_download.stop()
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
        checked: CheckedFiles,
    ) -> str | None:
        """Fetch one file and check it against the listing; a bad copy is removed and fetched
        once more. Returns what was wrong with the first copy if that was needed."""
        pointer = self.snapshot / path
        self._fetch_file(path, force, counter)
        first = f.mismatch(pointer)
        if first is None:
            checked.good(pointer, f)
            return None
        self.discard(pointer)
        self._fetch_file(path, True, counter)
        problem = f.mismatch(pointer)
        if problem is not None:
            self.discard(pointer)
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
                revision=self.commit,
                cache_dir=str(self.cache_dir),
                endpoint=self.endpoint,
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
        err = self.translate(exc, path)
        if isinstance(err, Unreachable):
            return DownloadError(
                f"cannot download {path}: {err}; files already fetched are kept, "
                "run pull again to resume"
            )
        return err

    def discard(self, pointer: Path) -> None:
        """Remove a bad cached file (the snapshot entry and the blob it points to)."""
        blobs = (self.storage / "blobs").resolve()
        target = Path(os.path.realpath(pointer))
        with contextlib.suppress(FileNotFoundError):
            if blobs in target.parents:
                target.unlink()
        with contextlib.suppress(FileNotFoundError):
            pointer.unlink()
