"""Check results against their digests: ``alem-eval verify-results PATH`` and
``alem_eval.verify_results(PATH)``.

``PATH`` is one of:

* a results store (a directory): every results file in it is checked against the seal it
  was written with (:func:`alem_eval.analysis.digests.seal_table`): its key and every
  episode's record. A file edited since is named with its first differing episode and the
  columns that differ; a key setting changed in place (``max_steps`` ...) is named too. A
  file written before seals existed is *unsealed*: reported, never failed (there is
  nothing to check it against); score it again to seal it;
* one results file (``.parquet``): the same check on that file;
* an output JSON that names digests (``crossplay.json``, ``scenario.json``, a report's
  ``stats.json``, ``score --format json``, each with a ``digests`` object): the files it
  lists are read again from the store it names (or ``store=``), checked against their
  seals and against the records root the output recorded; the results digest and the
  config document (:func:`~alem_eval.analysis.digests.config_document`) are recomputed
  and compared, the first differing setting named.

The report (:class:`VerifyReport`) is data; the command prints its summary line or its
first difference and exits non-zero when anything differs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.analysis.digests import (
    ALGORITHM,
    FileRecords,
    config_digest,
    config_document,
    read_file_records,
    results_digest,
)
from alem_eval.analysis.result_keys import ResultKey, ResultsError
from alem_eval.core.errors import UsageError, brief
from alem_eval.core.fsutil import TMP_PREFIX

if TYPE_CHECKING:
    import pandas as pd


class DigestMismatchError(ResultsError):
    """Results that differ from their digests (the message names the first difference)."""


@dataclass(frozen=True)
class Difference:
    """One thing that differs: ``where`` (a results file, or ``config`` / ``results`` of an
    output) and what; ``episode`` / ``column`` / ``setting`` when known."""

    where: str
    what: str
    episode: int | None = None
    column: str | None = None
    setting: str | None = None
    path: str | None = None  # the results file (relative to its store), when one differs

    def describe(self) -> str:
        return f"{self.where}: {self.what}"


@dataclass(frozen=True)
class FileStatus:
    """One results file checked: ``status`` is ok | unsealed | differs | missing | unreadable."""

    path: str
    status: str
    episodes: int = 0
    records: str | None = None  # its records root as read now


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify_results` found. ``ok`` when nothing differs (unsealed files are
    listed, not failed)."""

    path: Path
    kind: str  # store | file | output
    files: tuple[FileStatus, ...]
    differences: tuple[Difference, ...]
    outputs: int = 0  # digest objects checked (an output JSON)
    digests: tuple[Mapping[str, str], ...] = field(default=(), hash=False)  # recomputed

    @property
    def ok(self) -> bool:
        return not self.differences

    @property
    def first_difference(self) -> Difference | None:
        return self.differences[0] if self.differences else None

    @property
    def unsealed(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files if f.status == "unsealed")

    def summary(self) -> str:
        """One line: what was checked and how it ended."""
        episodes = sum(f.episodes for f in self.files)
        what = f"{len(self.files)} results file{'s' if len(self.files) != 1 else ''}"
        what += f", {episodes:,} episodes"
        if self.kind == "output":
            what = f"{self.outputs} digest set{'s' if self.outputs != 1 else ''} ({what})"
        unsealed = (
            f"; {len(self.unsealed)} unsealed (written before seals: nothing to check them "
            "against; score them again to seal them)"
            if self.unsealed
            else ""
        )
        if self.ok:
            return f"{self.path}: {what} match their digests{unsealed}"
        first = self.differences[0].describe()
        more = len(self.differences) - 1
        tail = f" (and {more} more difference{'s' if more != 1 else ''})" if more else ""
        return f"{self.path}: {first}{tail}"

    def to_frame(self) -> pd.DataFrame:
        """One row per file checked: ``path, status, episodes, records`` and the first
        difference found in it (``difference``, empty when none)."""
        import pandas as pd

        first: dict[str, str] = {}
        for d in self.differences:
            if d.path is not None:
                first.setdefault(d.path, d.what)
        rows = [
            {
                "path": f.path,
                "status": f.status,
                "episodes": f.episodes,
                "records": f.records,
                "difference": first.get(f.path, ""),
            }
            for f in self.files
        ]
        return pd.DataFrame(rows, columns=["path", "status", "episodes", "records", "difference"])

    def to_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "ok": self.ok,
            "summary": self.summary(),
            "files": [vars(f).copy() for f in self.files],
            "differences": [{**vars(d), "message": d.describe()} for d in self.differences],
            "digests": [dict(d) for d in self.digests],
        }


def verify_results(path: str | Path, *, store: str | Path | None = None) -> VerifyReport:
    """Check a results store, a results file or an output JSON (see the module docstring).
    ``store``: where an output JSON's files are (default: the store it names)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return _verify_store(p)
    if not p.is_file():
        raise UsageError(f"{p}: no such results store, results file or output JSON")
    if p.suffix == ".parquet":
        status, diffs, _ = check_file(p, p.name)
        return VerifyReport(p, "file", (status,), tuple(diffs))
    if p.suffix == ".json":
        return _verify_output(p, store)
    raise UsageError(f"{p}: expected a results store (directory), a .parquet or a .json file")


# ----------------------------------------------------------------------------------------
# Files against their seals
# ----------------------------------------------------------------------------------------
def _where(rel: str, key: Mapping[str, Any]) -> str:
    team = key.get("team") or ()
    who = f"team {','.join(team)}" if team else str(key.get("cell"))
    return f"{rel} ({who}, {key.get('eval_difficulty')})"


def check_file(
    path: Path, rel: str, *, root: Path | None = None
) -> tuple[FileStatus, list[Difference], FileRecords | None]:
    """One results file against its seal (and, in a store ``root``, its location)."""
    try:
        records, seal = read_file_records(path)
    except Exception as exc:
        return (
            FileStatus(rel, "unreadable"),
            [Difference(rel, f"unreadable results file ({brief(exc, 200)})", path=rel)],
            None,
        )
    where = _where(rel, records.key)
    diffs = [] if seal is None else _against_seal(where, records, seal)
    if root is not None:
        try:
            belongs = ResultKey.from_json(json.dumps(dict(records.key))).relpath.as_posix()
        except ResultsError as exc:
            belongs = f"nowhere ({exc})"
        if belongs != rel:
            diffs.append(Difference(where, f"its key belongs at {belongs}", setting="path"))
    diffs = [dataclasses.replace(d, path=rel) for d in diffs]
    status = "differs" if diffs else ("unsealed" if seal is None else "ok")
    return FileStatus(rel, status, len(records.leaves), records.records_root), diffs, records


def _against_seal(where: str, records: FileRecords, seal: Mapping[str, Any]) -> list[Difference]:
    if seal.get("algorithm") != ALGORITHM:
        return [Difference(where, f"sealed with an unknown algorithm {seal.get('algorithm')!r}")]
    diffs = []
    sealed_key = seal.get("key") or {}
    for name in sorted(set(sealed_key) | set(records.key)):
        if sealed_key.get(name) != records.key.get(name):
            diffs.append(
                Difference(
                    where,
                    f"key setting {name} is {records.key.get(name)!r}, sealed as "
                    f"{sealed_key.get(name)!r}",
                    setting=name,
                )
            )
            break
    if seal.get("records") == records.records_root:
        return diffs
    sealed_leaves = list(seal.get("episodes") or [])
    now = [h.hex() for h in records.leaves]
    index = next(
        (i for i, (a, b) in enumerate(zip(sealed_leaves, now, strict=False)) if a != b),
        min(len(sealed_leaves), len(now)),
    )
    episode = records.episodes[index] if index < len(records.episodes) else index
    sealed_cols = dict(seal.get("columns") or {})
    names = [*records.columns, *(c for c in sealed_cols if c not in records.column_hashes)]
    changed = [c for c in names if sealed_cols.get(c) != records.column_hashes.get(c)]
    if len(sealed_leaves) != len(now):
        what = f"{len(now)} episodes, sealed with {len(sealed_leaves)}"
    else:
        what = f"episode {episode}"
    if changed:
        what += f", column {changed[0]}"
        if len(changed) > 1:
            more = ", ..." if len(changed) > 5 else ""
            what += f" (columns differing: {', '.join(changed[:5])}{more})"
    what += " differs from the record sealed when the file was written"
    diffs.append(Difference(where, what, episode=episode, column=changed[0] if changed else None))
    return diffs


def _verify_store(root: Path) -> VerifyReport:
    paths = sorted(
        p for p in root.rglob("*.parquet") if p.is_file() and not p.name.startswith(TMP_PREFIX)
    )
    if not paths:
        raise ResultsError(f"{root}: no results files to check")
    statuses, diffs = [], []
    for p in paths:
        status, found, _ = check_file(p, p.relative_to(root).as_posix(), root=root)
        statuses.append(status)
        diffs += found
    return VerifyReport(root, "store", tuple(statuses), tuple(diffs))


# ----------------------------------------------------------------------------------------
# An output JSON against its store
# ----------------------------------------------------------------------------------------
def digest_objects(doc: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The ``digests`` objects of an output: the document's own, or each record's (a list
    output such as ``score --format json``), labelled for messages."""
    if isinstance(doc, Mapping) and isinstance(doc.get("digests"), Mapping):
        return [("", doc["digests"])]
    if isinstance(doc, list):
        found = []
        for i, rec in enumerate(doc):
            if isinstance(rec, Mapping) and isinstance(rec.get("digests"), Mapping):
                label = f"[{i}]" + (f" {rec['cell']}" if isinstance(rec.get("cell"), str) else "")
                found.append((label, rec["digests"]))
        return found
    return []


def _verify_output(path: Path, store: str | Path | None) -> VerifyReport:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not a readable JSON file ({brief(exc)})") from None
    found = digest_objects(doc)
    if not found and _leaderboard_entries(doc):
        raise UsageError(
            f"{path}: leaderboard entries carry their digests in their config text, not the "
            "files they were computed from: check the store with `alem-eval verify-results "
            "STORE` and compare the digests with a `leaderboard` of it"
        )
    if not found:
        raise UsageError(
            f"{path}: names no digests (a crossplay, scenario, report stats.json or score "
            "--format json output has a 'digests' object)"
        )
    statuses: dict[str, FileStatus] = {}
    diffs: list[Difference] = []
    recomputed = []
    for label, digests in found:
        d, s, r = _check_digests(label, digests, store)
        diffs += d
        statuses.update({st.path: st for st in s})
        recomputed.append(r)
    return VerifyReport(
        path, "output", tuple(statuses.values()), tuple(diffs), len(found), tuple(recomputed)
    )


def _leaderboard_entries(doc: Any) -> bool:
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(isinstance(e, Mapping) and "results digest" in str(e.get("config")) for e in doc)
    )


def _check_digests(
    label: str, digests: Mapping[str, Any], store: str | Path | None
) -> tuple[list[Difference], list[FileStatus], dict[str, str]]:
    prefix = f"{label} " if label else ""
    if digests.get("algorithm") != ALGORITHM:
        raise UsageError(f"{prefix}digests: unknown algorithm {digests.get('algorithm')!r}")
    root_text = store if store is not None else digests.get("store")
    files = digests.get("files")
    document = digests.get("config_document")
    if not root_text or not isinstance(files, list) or not isinstance(document, Mapping):
        raise UsageError(f"{prefix}digests: no store, files or config document to check against")
    root = Path(root_text).expanduser()
    diffs: list[Difference] = []
    statuses: list[FileStatus] = []
    records: list[FileRecords] = []
    for item in files:
        rel = str(item.get("path", ""))
        p = root / rel
        if not p.is_file():
            statuses.append(FileStatus(rel, "missing"))
            diffs.append(Difference(prefix + rel, f"missing from the store {root}", path=rel))
            continue
        status, found, rec = check_file(p, rel)
        statuses.append(status)
        diffs += [dataclasses.replace(d, where=prefix + d.where) for d in found]
        if rec is None:
            continue
        records.append(rec)
        if not found and rec.records_root != item.get("records"):
            why = (
                "the file was written again since (its seal matches its records)"
                if status.status == "ok"
                else "the file is unsealed: its episodes cannot be named"
            )
            diffs.append(
                Difference(
                    _where(prefix + rel, rec.key),
                    f"records differ from the output's: {why}",
                    path=rel,
                )
            )
    now = {"results": results_digest([r.digest for r in records]), "config": ""}
    if len(records) == len(files):
        if not diffs and now["results"] != digests.get("results"):
            diffs.append(
                Difference(
                    prefix + "results",
                    f"results digest {digests.get('results')} in the output, {now['results']} "
                    "recomputed from its files",
                )
            )
        redone = config_document([r.digest for r in records], document.get("settings") or {})
        now["config"] = config_digest(redone)
        setting = _first_difference(document, redone)
        if setting is not None:
            name, said, found_v = setting
            diffs.append(
                Difference(
                    prefix + "config",
                    f"setting {name}: {said!r} in the output, {found_v!r} in the store",
                    setting=name,
                )
            )
    if config_digest(document) != digests.get("config"):
        diffs.append(
            Difference(prefix + "config", "the config digest does not match its config document")
        )
    return diffs, statuses, now


def _first_difference(said: Any, found: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """The first (path, output's value, store's value) where two JSON documents differ."""
    if isinstance(said, Mapping) and isinstance(found, Mapping):
        for k in sorted(set(said) | set(found)):
            sub = _first_difference(said.get(k), found.get(k), f"{path}.{k}" if path else k)
            if sub is not None:
                return sub
        return None
    if isinstance(said, Sequence) and isinstance(found, Sequence) and not isinstance(said, str):
        if isinstance(found, str):
            return (path, said, found)
        for i, (a, b) in enumerate(zip(said, found, strict=False)):
            label = f"{path}[{i}]"
            if isinstance(b, Mapping) and "cell" in b:
                label += f" ({b['cell']})"
            sub = _first_difference(a, b, label)
            if sub is not None:
                return sub
        if len(said) != len(found):
            return (f"{path} length", len(said), len(found))
        return None
    return None if said == found else (path, said, found)
