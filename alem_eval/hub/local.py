"""A local directory in the released layout as a checkpoint source.

``open_source(PATH)`` reads ``PATH/<budget>/<algorithm>/<difficulty>/seed<N>/`` (each holding
``checkpoint/`` and ``config.json``; budget labels free-form, e.g. ``tiny/``), or a single cell
directory. Nothing is fetched or checked against a listing: ``pull`` only counts the files.
Its "verified" markers live in the user cache (or under ``--cache-dir``), keyed by the cell's
absolute path.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from alem_eval.core.errors import SourceError, SourceUsageError
from alem_eval.hub.layout import is_cell_dir
from alem_eval.hub.manifest import Cell, parse_seed_dir, sort_cells
from alem_eval.hub.source_base import DEFAULT_WORKERS, CellState, PullReport, Source
from alem_eval.hub.state import STATE_DIRNAME, JsonStore

if TYPE_CHECKING:
    from alem_eval.hub.transfer import DownloadProgress


class LocalSource(Source):
    """A directory in the released layout (budget labels free-form, e.g. ``tiny/``).

    ``PATH`` may also be a single cell directory; the source then holds only that cell.
    """

    def __init__(
        self,
        root: Path,
        *,
        cache_dir: str | Path | None = None,
        on_download: DownloadProgress | None = None,
    ):
        super().__init__(on_download=on_download)  # (nothing is ever downloaded here)
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
        if is_cell_dir(path) and seed is not None and len(path.parents) >= 4:
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
            if seed is None or any(p.startswith(".") for p in rel) or not is_cell_dir(d):
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
        on_download: DownloadProgress | None = None,
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
    def _markers(self) -> JsonStore:
        if self._cache_dir is not None:
            path = self._cache_dir / f".{STATE_DIRNAME}" / "local-verified.json"
            return JsonStore(path, "verified")
        from alem_eval.core.paths import user_cache_dir

        return JsonStore(user_cache_dir() / "local-verified.json", "verified")
