"""The bundled demo cells: what they are, how they were trained, where they lie.

The package ships four small cells (``alem_eval/data/demo-cells/``; read ``CARD.md``
there): one per released algorithm (those whose registry record has a ``demo``), easy
difficulty, reduced network sizes, each trained by ``alem-eval train`` on a CPU for a few
hundred thousand env steps and saved in the released layout
(``demo/<algorithm>/easy/seed0/{checkpoint/, config.json}``). Their greedy episodes unlock
a few achievements and the algorithms differ, but they are not the paper's baselines.
``scripts/make_demo_cells.py`` regenerates them from :data:`DEMO_RECIPE`; ``alem-eval
demo`` (:mod:`alem_eval.api.demo`) runs the whole pipeline on them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from alem_eval.algorithms.registry import Algorithm, all_algorithms, get_algorithm
from alem_eval.core.errors import SourceError
from alem_eval.hub.layout import CHECKPOINT_DIR, CONFIG_FILE

DEMO_BUDGET = "demo"
DEMO_DIFFICULTY = "easy"
DEMO_SEED = 0
DEMO_NOTE = (
    "demo cells: small networks trained for a few hundred thousand env steps on a CPU "
    "(alem_eval/data/demo-cells/CARD.md); not the paper's baselines"
)
CARD = "CARD.md"

# ----------------------------------------------------------------------------------------
# How the demo cells were trained (scripts/make_demo_cells.py; CARD.md states the same)
# ----------------------------------------------------------------------------------------
# Shared by every algorithm: easy, 4 comm channels (like the released cells), no shared
# reward, action masking, seed 0. Network sizes are each algorithm's registry
# ``demo.overrides``; the rest of the hyperparameters are the upstream yaml's unless set here.
DEMO_ENV: Mapping[str, Any] = MappingProxyType(
    {"NUM_COMM_CHANNELS": 4, "ACTION_MASKING": True, "SHARED_REWARD": False}
)


@dataclass(frozen=True)
class DemoRecipe:
    """``alem-eval train`` settings of one demo cell (beside the registry's sizes)."""

    total_timesteps: int
    num_envs: int
    num_steps: int
    sets: Mapping[str, Any]  # --set KEY=VALUE


DEMO_STEPS, DEMO_NUM_ENVS, DEMO_NUM_STEPS = 491_520, 64, 64


def demo_algorithms() -> tuple[Algorithm, ...]:
    """The registered algorithms that have a bundled demo cell (a registry ``demo``)."""
    return tuple(a for a in all_algorithms() if a.demo is not None)


class _Recipes(Mapping[str, DemoRecipe]):
    """algorithm -> its :class:`DemoRecipe`, read from the registry when asked (so an
    algorithm registered later, with a ``demo``, has one; one without has none)."""

    def __getitem__(self, algorithm: str) -> DemoRecipe:
        demo = next((a.demo for a in demo_algorithms() if a.name == algorithm), None)
        if demo is None:
            raise KeyError(algorithm)
        sets = {"NUM_MINIBATCHES": 8, **demo.training}
        return DemoRecipe(DEMO_STEPS, DEMO_NUM_ENVS, DEMO_NUM_STEPS, sets)

    def __iter__(self) -> Iterator[str]:
        return iter([a.name for a in demo_algorithms()])

    def __len__(self) -> int:
        return len(demo_algorithms())


# Per algorithm: the registry's ``demo.training`` (learning rate; PQN's exploration schedule).
DEMO_RECIPE: Mapping[str, DemoRecipe] = _Recipes()


def demo_cell_id(algorithm: str) -> str:
    return f"{DEMO_BUDGET}/{algorithm}/{DEMO_DIFFICULTY}/seed{DEMO_SEED}"


def train_args(algorithm: str) -> list[str]:
    """The ``alem-eval train`` arguments (after ``train``) that make one demo cell."""
    r = DEMO_RECIPE[algorithm]
    demo = get_algorithm(algorithm).demo
    assert demo is not None  # DEMO_RECIPE has only algorithms with a demo
    sets = {**DEMO_ENV, **demo.overrides, **r.sets}
    args = [demo_cell_id(algorithm), "--total-timesteps", str(r.total_timesteps)]
    args += ["--num-envs", str(r.num_envs), "--num-steps", str(r.num_steps)]
    for key, value in sets.items():
        args += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
    return args


# ----------------------------------------------------------------------------------------
# Where they are
# ----------------------------------------------------------------------------------------
def demo_root() -> Path:
    """The bundled demo source: ``<package>/data/demo-cells`` (read-only is fine)."""
    return Path(__file__).resolve().parents[1] / "data" / "demo-cells"


def ensure_demo_source(root: Path | None = None) -> Path:
    """The demo source's root, after checking that the cell of every algorithm with a
    ``demo`` is there (a one-line :class:`SourceError` naming what is missing otherwise)."""
    root = Path(root) if root else demo_root()
    missing = [
        demo_cell_id(a.name)
        for a in demo_algorithms()
        if not (root / demo_cell_id(a.name) / CONFIG_FILE).is_file()
        or not (root / demo_cell_id(a.name) / CHECKPOINT_DIR).is_dir()
    ]
    if missing:
        raise SourceError(
            f"the demo cells are missing from {root} ({', '.join(missing)}): a broken "
            "install? Reinstall alem-eval, or regenerate them from a checkout of its "
            "repository: scripts/make_demo_cells.py"
        )
    return root
