"""The user documentation points only at what a user has: this repository or the installed
package. README.md, docs/*.md, the notebooks, the demo cells' card and every command's
--help are read as a user gets them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from alem_eval.cli.app import _register, app

from .conftest import REPO

_register()
USER_DOCS = sorted(
    [REPO / "README.md", REPO / "alem_eval" / "data" / "demo-cells" / "CARD.md"]
    + list((REPO / "docs").glob("*.md"))
    + list((REPO / "notebooks").glob("*.ipynb")),
)
# The development checkout's neighbours and this machine's paths: a user has neither.
OUTSIDE = re.compile(r"\.\./shared|/work/|\bshared/fixtures\b|\bshared/docs\b")
# [text](target) in Markdown; a target with a scheme or an anchor only is not a file
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _help_texts() -> dict[str, str]:
    argvs = [[c.name or c.callback.__name__] for c in app.registered_commands]
    argvs += [
        [g.name, c.name or c.callback.__name__]
        for g in app.registered_groups
        if g.typer_instance
        for c in g.typer_instance.registered_commands
    ]
    out = {}
    for argv in [[]] + argvs:
        result = CliRunner().invoke(app, [*argv, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        out[" ".join(["alem-eval", *argv, "--help"])] = result.output
    return out


def test_docs_are_where_a_user_finds_them():
    names = {p.relative_to(REPO).as_posix() for p in USER_DOCS}
    assert {"README.md", "docs/upstream-format.md", "notebooks/quickstart.ipynb"} <= names


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_user_doc_points_outside_the_repository(doc: Path):
    text = doc.read_text(encoding="utf-8")
    found = [ln.strip() for ln in text.splitlines() if OUTSIDE.search(ln)]
    assert not found, found


def test_no_command_help_points_outside_the_repository():
    found = {
        where: [ln.strip() for ln in text.splitlines() if OUTSIDE.search(ln)]
        for where, text in _help_texts().items()
    }
    assert not {k: v for k, v in found.items() if v}


@pytest.mark.parametrize(
    "doc",
    [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))],
    ids=lambda p: p.relative_to(REPO).as_posix(),
)
def test_every_relative_link_names_a_file_of_the_repository(doc: Path):
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:|#", target):
            continue
        path = (doc.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(REPO.resolve()), f"{doc.name}: {target} leaves the repository"
        assert path.exists(), f"{doc.name}: {target} does not exist"


def test_the_action_table_in_docs_scenarios_is_the_installed_alems():
    """docs/scenarios.md's action table (index -> action, 3 agents and 4 comm channels, as
    every released cell) names what alem's own ``Action`` enum and the env's layout say."""
    from alem_eval.rendering.frames import action_names

    text = (REPO / "docs" / "scenarios.md").read_text()
    table = dict(
        (int(i), name) for i, name in re.findall(r"\|\s*(\d+)\s*\|\s*`([A-Z_0-9]+)`", text)
    )
    names = action_names(3, 4)
    assert sorted(table) == list(range(len(names[0]))) and len(names[0]) == 60
    first_give = next(i for i, n in enumerate(names[0]) if n.startswith("GIVE->"))
    for i, name in table.items():
        if names[0][i].startswith("GIVE->"):  # a give: to the agent's k-th other agent
            k = i - first_give
            assert name == "GIVE" and [n[i] for n in names] == [
                f"GIVE->a{[j for j in range(3) if j != a][k]}" for a in range(3)
            ]
            assert f"| {i} | `GIVE` to the {('1st', '2nd')[k]} other agent |" in text
        else:
            assert name == names[0][i] and all(n[i] == name for n in names)
