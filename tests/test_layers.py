"""The modules of alem_eval talk through public names: no module imports another module's
``_private`` name (make it public, or move the code to where it is used)."""

from __future__ import annotations

import ast

from .conftest import REPO

PACKAGE = REPO / "alem_eval"
ALLOWED: set[str] = set()  # none: every name another module uses is public


def _module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_module(node: ast.ImportFrom, importer: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def private_imports() -> set[str]:
    """``module.name`` for every ``from alem_eval... import _name`` (dunders aside), at any
    depth (module level, functions, ``if TYPE_CHECKING``)."""
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            module = _imported_module(node, importer, path.name == "__init__.py")
            if module != "alem_eval" and not module.startswith("alem_eval."):
                continue
            for alias in node.names:
                name = alias.name
                if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
                    found.add(f"{module}.{name}  ({path.relative_to(REPO)}:{node.lineno})")
    return found


def test_no_module_imports_another_modules_private_name():
    found = {entry for entry in private_imports() if entry.split()[0] not in ALLOWED}
    assert not found, "private names imported across modules:\n" + "\n".join(sorted(found))


def test_the_scan_sees_relative_and_nested_imports(tmp_path, monkeypatch):
    """The scan is no vacuous pass: a relative import of a private name inside a function is
    found."""
    pkg = tmp_path / "alem_eval" / "sub"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from .b import _hidden, __all__, shown\n")
    monkeypatch.setitem(globals(), "REPO", tmp_path)
    monkeypatch.setitem(globals(), "PACKAGE", tmp_path / "alem_eval")
    assert {e.split()[0] for e in private_imports()} == {"alem_eval.sub.b._hidden"}
