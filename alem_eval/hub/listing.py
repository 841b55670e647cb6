"""The Hub repo's file listing: what each file is, and the listing's cache on disk.

A :class:`RemoteFile` is one listed file (its size and, where the Hub gives one, its content
hash: the sha256 of an LFS file, the git blob id of another) and tells whether a file on disk
is it (:meth:`RemoteFile.mismatch`). A :class:`Listing` is the repo's files at one commit.
:class:`ListingCache` keeps, inside the repo's Hugging Face cache folder, the listing per
commit and the revision -> commit ref (the cache's own ``refs/``) so that offline runs can list
and check what is there, and rebuilds a listing from the cache's snapshot folder for a cache
filled by other tools (its blob names carry the hashes).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from alem_eval.hub.state import STATE_DIRNAME, os_reason, write_text

_LISTING_FORMAT = 2  # 1 held sizes only
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_GIT_OID = re.compile(r"^[0-9a-f]{40}$")


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
        have = file_size(path)
        if have is None:
            return "no file"
        if have != self.size:
            return f"{have} bytes but the listing says {self.size}"
        if self.digest is None:
            return None
        try:
            got = self.hash_of(path)
        except OSError as exc:
            return f"unreadable ({os_reason(exc)})"
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


@dataclass(frozen=True)
class Listing:
    """The repo's files at one commit, or (commit None) nothing known."""

    commit: str | None
    files: dict[str, RemoteFile] = field(default_factory=dict)
    online: bool = False  # the endpoint answered
    problem: str | None = None  # why it did not, if it did not
    from_snapshot: bool = False  # rebuilt from the cache's snapshot folder (no listing cached)


def listed_file(f: Any) -> RemoteFile:
    """A RepoFile of the Hub's tree listing: LFS files carry the content's sha256; the others'
    ``oid`` is their git blob id (an LFS file's ``oid`` is its pointer's, not its content's)."""
    lfs = getattr(f, "lfs", None)
    if lfs is not None:
        sha = getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)
        return RemoteFile.of(int(f.size), sha256=sha)
    return RemoteFile.of(int(f.size), git_oid=getattr(f, "blob_id", None))


def cached_entry(pointer: Path) -> RemoteFile:
    """A snapshot entry of a Hugging Face cache: a link to ``blobs/<etag>``, where the etag is
    the sha256 of an LFS file or the git blob id of another."""
    size = file_size(pointer)
    try:
        etag = Path(os.readlink(pointer)).name if pointer.is_symlink() else ""
    except OSError:
        etag = ""
    return RemoteFile.of(
        -1 if size is None else size,
        sha256=etag if _SHA256.match(etag) else None,
        git_oid=etag if _GIT_OID.match(etag) else None,
    )


def stat_stamp(path: Path) -> tuple[str, str] | None:
    """(the blob's real path, its size/mtime/ctime/inode): a file whose stamp is unchanged since
    its hash was checked need not be read again."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return None
    return real, f"{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_ino}"


def file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def is_commit(rev: str) -> bool:
    return len(rev) == 40 and all(c in "0123456789abcdef" for c in rev)


class ListingCache:
    """The listing per commit and the revision -> commit ref of one repo, in its Hugging Face
    cache folder ``storage`` (``<cache>/models--<owner>--<name>``)."""

    def __init__(self, storage: Path, repo: str, revision: str):
        self.storage = storage
        self.repo = repo
        self.revision = revision

    def _tree_path(self, commit: str) -> Path:
        return self.storage / STATE_DIRNAME / "trees" / f"{commit}.json"

    def read_tree(self, commit: str) -> dict[str, RemoteFile] | None:
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

    def write_tree(self, commit: str, files: dict[str, RemoteFile]) -> None:
        write_text(
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

    def read_ref(self) -> str | None:
        if is_commit(self.revision):
            return self.revision
        try:
            commit = self._ref_path().read_text(encoding="utf-8").strip()
        except OSError:
            return None
        return commit if is_commit(commit) else None

    def write_ref(self, commit: str) -> None:
        if not is_commit(self.revision) and self.read_ref() != commit:
            # Staged outside refs/: huggingface_hub reads every file there as a ref (a temp
            # file left by a kill would make scan_cache_dir call the repo corrupted).
            write_text(self._ref_path(), commit, tmp_dir=self.storage / STATE_DIRNAME)

    def snapshot_files(self, commit: str) -> dict[str, RemoteFile]:
        """The files of the cache's snapshot folder at ``commit`` (what ``hf download`` left)."""
        root = self.storage / "snapshots" / commit
        files: dict[str, RemoteFile] = {}
        for dirpath, _, names in os.walk(root):
            for name in names:
                p = Path(dirpath, name)
                files[p.relative_to(root).as_posix()] = cached_entry(p)
        return files

    def cached_listing(self, problem: str) -> Listing:
        """The listing cached for the revision's commit, else one rebuilt from the files of
        the cache's snapshot folder (a cache filled by ``hf download`` or ``snapshot_download``)."""
        commit = self.read_ref()
        if commit is None:
            return Listing(None, {}, problem=problem)
        files = self.read_tree(commit)
        if files is not None:
            return Listing(commit, files, problem=problem)
        files = self.snapshot_files(commit)
        if files:
            return Listing(commit, files, problem=problem, from_snapshot=True)
        return Listing(None, {}, problem=problem)
