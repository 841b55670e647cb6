"""The checkpoint source interface: what every source offers.

:class:`Source` is the interface the source kinds share (:mod:`alem_eval.hub.hubsource`,
:mod:`alem_eval.hub.local`; opened by name in :mod:`alem_eval.hub.sources`): selecting cells,
a local directory per cell (fetched if needed), :meth:`Source.pull` (a :class:`PullReport`),
and the per-cell "verified" markers (set by ``verify`` through :meth:`Source.mark_verified`,
in a small JSON file under the cache: :mod:`alem_eval.hub.state`), void as soon as a file of
the cell changes. The implementations import this module only, never the registry.

Sources draw nothing: a pull reports its downloads to the
:class:`~alem_eval.hub.transfer.DownloadProgress` given to
:func:`~alem_eval.hub.sources.open_source` or to :meth:`Source.pull` (the commands pass
:class:`alem_eval.core.progress.DownloadBar`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from alem_eval.core.errors import SourceError
from alem_eval.core.integrity import FileCheck
from alem_eval.core.units import format_bytes
from alem_eval.hub.manifest import Cell, load_manifest
from alem_eval.hub.selectors import select_cells
from alem_eval.hub.state import JsonStore, files_fingerprint, os_reason

if TYPE_CHECKING:
    from alem_eval.hub.transfer import DownloadProgress

CellState = Literal["remote", "cached", "verified"]
DEFAULT_WORKERS = 8


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


# ----------------------------------------------------------------------------------------
# The interface
# ----------------------------------------------------------------------------------------
class Source(ABC):
    """Where checkpoint cells come from."""

    description: str
    # Taking every cell by default would download the whole release: commands that fetch
    # ask for an explicit selection ('*' for all; selectors.require_selection).
    selection_required: bool = False

    def __init__(self, *, on_download: DownloadProgress | None = None) -> None:
        self.warnings: list[str] = []  # worth telling the user (shown by the commands)
        # Told what every pull downloads, the implicit ones of local_dir included, unless a
        # pull is given its own (sources draw nothing themselves).
        self.on_download = on_download

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
        on_download: DownloadProgress | None = None,
        rehash: bool = False,
    ) -> PullReport:
        """Make the cells available locally (``rehash``: as for :meth:`local_dir`).

        ``on_download``: told what is downloaded (None: :attr:`on_download`, the one the
        source was opened with).
        """

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
    def _markers(self) -> JsonStore: ...

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
                f"cannot record the verified state in {self._markers.path}: {os_reason(exc)}"
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
