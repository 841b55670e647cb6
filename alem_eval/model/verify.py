"""Verify cells from any source: materialise, resolve, validate, restore."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from alem_eval.core.errors import AlemEvalError
from alem_eval.core.integrity import FileCheck
from alem_eval.model.loader import VerifyResult, verify_cell


def verify_cells(source, cells: Sequence) -> list[VerifyResult]:
    """One result per cell; a cell that fails never stops the others. A cell that passes
    is marked verified in the source (best effort: a marker that cannot be written is a
    line in ``source.warnings``). Each result says how the files were checked against the
    source's listing and which were fetched again (``checked``, ``repaired``, ``notes``)."""
    out = []
    for cell in cells:
        try:
            # re-check every file's hash (a Hub source fetches a damaged file again)
            cell_dir, check = source.checked_dir(cell, rehash=True)
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
        out.append(_with_check(result, check))
    return out


def _with_check(result: VerifyResult, check: FileCheck) -> VerifyResult:
    return dataclasses.replace(
        result, checked=check.checked, repaired=tuple(check.repaired), notes=tuple(check.notes())
    )
