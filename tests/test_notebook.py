"""NOTEBOOK: notebooks/quickstart.ipynb runs top to bottom on the demo source.

It is executed in a fresh Python kernel (nbclient), in a temporary working directory, with
the user cache (results, downloads, HOME) in temporary directories and the Hub offline:
any cell that raises fails the test. It is committed with its outputs cleared.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from .conftest import REPO
from .eval_support import DEMO_PROGRAMS

NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"
CELL_TIMEOUT_S = 900  # the first scoring cell compiles the Alem step (minutes under load)

# Its kernel scores the demo cells as `alem-eval demo` does: it runs after that test, in
# the same worker (--dist loadgroup), and loads those programs from the compilation cache.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(DEMO_PROGRAMS)]


def _kernel_env(tmp_path: Path) -> dict[str, str]:
    """The test process's environment with every user-level cache moved under tmp_path
    and the Hub unreachable (the JAX compilation cache of the test run is kept)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        IPYTHONDIR=str(home / ".ipython"),
        MPLCONFIGDIR=str(home / ".matplotlib"),
        ALEM_EVAL_CACHE=str(tmp_path / "alem-cache"),
        HF_HOME=str(tmp_path / "hf-home"),
        HF_ENDPOINT="http://127.0.0.1:9",  # discard port: nothing listens
        HF_HUB_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    return env


def test_notebook_is_committed_with_outputs_cleared():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the notebook has no code cells"
    assert all(not c.outputs and c.execution_count is None for c in code)


def test_notebook_uses_nothing_but_import_alem_eval():
    """The public API (alem_eval/__init__.py) is the whole of alem-eval it touches."""
    import ast

    nb = nbformat.read(NOTEBOOK, as_version=4)
    imported = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                imported += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                imported += [f"{node.module}.{a.name}" for a in node.names]
    assert [n for n in imported if n.startswith("alem")] == ["alem_eval"]


def test_quickstart_notebook_runs_top_to_bottom(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    work = tmp_path / "work"
    work.mkdir()
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(work)}},
    )
    client.execute(env=_kernel_env(tmp_path))  # raises CellExecutionError on any error

    code = [c for c in nb.cells if c.cell_type == "code"]
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]

    def shown(marker: str, mime: str) -> int:
        """Outputs of type ``mime`` of the code cell whose source holds ``marker``."""
        (cell,) = [c for c in code if marker in c.source]
        return sum(mime in o.get("data", {}) for o in cell.outputs)

    assert shown("alem_eval.report(", "image/png") >= 3  # the report's figures, inline
    assert shown("alem_eval.crossplay(", "image/png") == 1  # the cross-play heatmap
    assert shown("alem_eval.scenario(", "image/png") == 1  # the focal agent's figure
    for marker in (
        'alem_eval.select("1B',
        "alem_eval.verify(cells)",
        "headline = [",  # the score cell (the own-runs cell scores too)
        "board = alem_eval.leaderboard(",
        "xplay.gap",
        "focal.table",
    ):
        assert shown(marker, "text/html") == 1, f"no DataFrame shown by the {marker!r} cell"
    (loop,) = [c for c in code if "alem_eval.load_policy(" in c.source]
    assert "team achievements" in "".join(o.get("text", "") for o in loop.outputs)
    out = work / "quickstart-output"
    assert (out / "report" / "report.md").is_file()
    assert list((out / "report" / "figures").glob("*.png"))
    assert list((out / "results").rglob("*.parquet"))
    assert list((out / "results").rglob("fast-team-*.parquet"))  # the cross-play teams
    assert list((out / "runs" / "mine").glob("*/*/seed*/config.json"))
