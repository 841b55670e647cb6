"""Every module the code and the developer docs name exists: a dotted ``alem_eval.x.y`` path
(and the name right after its module, ``alem_eval.hub.sources.open_source``), an
``alem_eval/x/y.py`` file and a ``tests/test_x.py`` file, in the package's docstrings and
comments, docs/*.md, README.md, CONTRACTS.md, CONTRIBUTING.md and scripts/*.py."""

from __future__ import annotations

import re
from pathlib import Path

from .conftest import REPO

DOTTED = re.compile(r"(?<![\w./\"'])alem_eval(?:\.[A-Za-z_]\w*)+")
FILE = re.compile(r"(?<![\w/])((?:alem_eval|tests)/[\w/]*\w\.py)\b")
# Parquet metadata keys (b"alem_eval.seal", ...) are spelled like modules but are not.
METADATA_KEY = re.compile(r"b\"(alem_eval\.\w+)\"")


def _texts(repo: Path) -> dict[Path, str]:
    files = sorted((repo / "alem_eval").rglob("*.py")) + sorted((repo / "scripts").glob("*.py"))
    files += sorted((repo / "docs").glob("*.md"))
    files += [repo / n for n in ("README.md", "CONTRACTS.md", "CONTRIBUTING.md")]
    return {f: f.read_text(encoding="utf-8") for f in files if f.is_file()}


def _unresolved_dotted(repo: Path, dotted: str) -> str | None:
    """Why ``dotted`` names nothing (None when it does)."""
    here = repo / "alem_eval"
    rest = dotted.split(".")[1:]
    while rest:
        part, rest = rest[0], rest[1:]
        if (here / part / "__init__.py").is_file() or (here / part).is_dir():
            here = here / part
            continue
        if (here / f"{part}.py").is_file():
            text = (here / f"{part}.py").read_text(encoding="utf-8")
            if rest and not re.search(rf"\b{re.escape(rest[0])}\b", text):
                return f"{rest[0]} is not in {here.relative_to(repo)}/{part}.py"
            return None
        init = here / "__init__.py"
        if init.is_file() and re.search(rf"\b{re.escape(part)}\b", init.read_text("utf-8")):
            return None  # a name of the package (alem_eval.score, ...)
        return f"no module {part} in {here.relative_to(repo)}"
    return None


def unresolved_references(repo: Path) -> list[str]:
    texts = _texts(repo)
    keys = {k for text in texts.values() for k in METADATA_KEY.findall(text)}
    bad = []
    for path, text in texts.items():
        where = path.relative_to(repo)
        for m in DOTTED.finditer(text):
            dotted = m.group(0)
            why = None if dotted in keys else _unresolved_dotted(repo, dotted)
            if why:
                bad.append(f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {dotted}: {why}")
        for m in FILE.finditer(text):
            if not (repo / m.group(1)).is_file():
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{where}:{line}: {m.group(1)} does not exist")
    return bad


def test_every_module_path_in_docstrings_comments_and_docs_exists():
    bad = unresolved_references(REPO)
    assert not bad, "references to modules that do not exist:\n" + "\n".join(bad)


def test_a_stale_reference_is_found(tmp_path):
    """No vacuous pass: a moved name, a gone module and a gone test file are each reported;
    a module, a name of its module and a metadata key are not."""
    pkg = tmp_path / "alem_eval" / "hub"
    pkg.mkdir(parents=True)
    (tmp_path / "alem_eval" / "__init__.py").write_text('"""Exports score."""\n')
    (pkg / "__init__.py").write_text("")
    (pkg / "sources.py").write_text('KEY = b"alem_eval.seal"\n\ndef open_source(): ...\n')
    (pkg / "notes.py").write_text(
        '"""See alem_eval.hub.sources.open_source, alem_eval.score, alem_eval.seal and '
        'alem_eval.hub.sources.Source; alem_eval.engine; tests/test_spaces.py."""\n'
    )
    found = sorted(line.split(": ", 1)[1] for line in unresolved_references(tmp_path))
    assert found == [
        "alem_eval.engine: no module engine in alem_eval",
        "alem_eval.hub.sources.Source: Source is not in alem_eval/hub/sources.py",
        "tests/test_spaces.py does not exist",
    ]
