"""Verify cells from any source: materialise, resolve, validate, restore."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import AlemEvalError
from .loader import VerifyResult, verify_cell


def verify_cells(source, cells: Sequence) -> list[VerifyResult]:
    """One result per cell; a cell that fails never stops the others. A cell that passes
    is marked verified in the source (best effort: a marker that cannot be written is a
    line in ``source.warnings``)."""
    out = []
    for cell in cells:
        try:
            cell_dir = source.local_dir(cell, rehash=True)  # re-check every file's hash
        except AlemEvalError as err:
            out.append(VerifyResult.failed(cell.id, err))
            continue
        result = verify_cell(
            cell_dir,
            cell_id=cell.id,
            algorithm=cell.algorithm,
            difficulty=cell.difficulty,
            seed=cell.seed,
        )
        if result.ok:
            source.mark_verified(cell)
        out.append(result)
    return out
