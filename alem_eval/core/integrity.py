"""How a source checked one cell's files, and what it fetched again (``verify`` shows it).

A Hub source checks every file against its listing: the size, then the content hash (the
sha256 of an LFS file, the git blob id of another). A file whose hash is unknown (offline,
from a cache whose snapshot folder holds plain files rather than links to blobs named by
their hashes) can only be checked by its size; a cached or downloaded copy that did not match
was removed and fetched again. A local directory has no listing: nothing to check against.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

CheckedBy = Literal["hash", "size"]


@dataclass(frozen=True)
class FileCheck:
    """``checked``: ``"hash"`` (every file's content hash matched the listing), ``"size"``
    (some files had no hash to check: ``reason`` says why) or None (nothing to check against).
    ``repaired``: file (relative to the cell's folder) -> what was wrong with it, for every
    file fetched again because its copy did not match the listing."""

    checked: CheckedBy | None = None
    repaired: Mapping[str, str] = field(default_factory=dict)
    unhashed: int = 0  # files checked by size only
    total: int = 0
    reason: str | None = None

    @classmethod
    def of_cell(
        cls,
        cell_dir: str,
        digests: Mapping[str, str | None],
        repaired: Mapping[str, str],
        *,
        no_hash_reason: str,
    ) -> FileCheck:
        """``digests``: every file of the cell (its path in the repo) -> its listed content
        hash or None; ``repaired``: repo path -> problem, for the whole pull."""
        prefix = cell_dir.rstrip("/") + "/"
        unhashed = sum(d is None for d in digests.values())
        return cls(
            checked="size" if unhashed else "hash",
            repaired={
                p.removeprefix(prefix): why for p, why in sorted(repaired.items()) if p in digests
            },
            unhashed=unhashed,
            total=len(digests),
            reason=no_hash_reason if unhashed else None,
        )

    def notes(self) -> list[str]:
        """What a user should be told (empty when all was as expected)."""
        out = [f"re-fetched {path} ({why})" for path, why in self.repaired.items()]
        if self.checked == "size":
            which = (
                "no file has"
                if self.unhashed == self.total
                else f"{self.unhashed} of {self.total} files have"
            )
            out.append(f"sizes only: {which} a content hash to check against ({self.reason})")
        return out
