"""alem-eval: checkpoint hub and evaluation toolkit for the Alem MARL benchmark baselines.

The public Python API (``docs/python-api.md``)::

    import alem_eval

    cells = alem_eval.select("demo", source="demo")
    episodes = alem_eval.score(cells, episodes=8, max_steps=300)  # a DataFrame
    print(alem_eval.leaderboard(cells).to_markdown())

Importing the package compiles nothing and imports no JAX: each name below loads its
module on first use (:mod:`alem_eval.api`). Every function takes its cells (or selectors)
first; ``docs/python-api.md`` has the table of them all. The library below the API is organised in
packages by layer (``CONTRACTS.md``, "Architecture"); the names here are the stable surface.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from alem_eval.core.version import __version__ as __version__

# Public name -> the module defining it (loaded on first use).
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("Cell", "select"), "api.cells"),
    **dict.fromkeys(("pull", "verify", "score", "compare"), "api.functions"),
    **dict.fromkeys(("results", "leaderboard", "report", "export", "merge"), "api.stored"),
    **dict.fromkeys(("crossplay", "CrossPlay"), "api.crossplay"),
    **dict.fromkeys(("scenario", "Scenario"), "api.scenario"),
    "render": "api.render",
    "train": "api.training",
    **dict.fromkeys(("load_policy", "Policy"), "api.agents"),
    **dict.fromkeys(("make_env", "Env"), "api.envs"),
    "parallel_env": "api.parallel",
    "Leaderboard": "reporting.leaderboard",
    **dict.fromkeys(("verify_results", "VerifyReport"), "analysis.verify_results"),
    "enable_compilation_cache": "core.runtime",
}

__all__ = [
    "Cell",
    "select",
    "pull",
    "verify",
    "score",
    "compare",
    "results",
    "leaderboard",
    "report",
    "export",
    "merge",
    "crossplay",
    "CrossPlay",
    "scenario",
    "Scenario",
    "render",
    "train",
    "Leaderboard",
    "verify_results",
    "VerifyReport",
    "load_policy",
    "make_env",
    "parallel_env",
    "Policy",
    "Env",
    "enable_compilation_cache",
]

if TYPE_CHECKING:
    from alem_eval.analysis.verify_results import VerifyReport, verify_results
    from alem_eval.api.agents import Policy, load_policy
    from alem_eval.api.envs import Env, make_env
    from alem_eval.api.parallel import parallel_env
    from alem_eval.api.cells import Cell, select
    from alem_eval.api.crossplay import CrossPlay, crossplay
    from alem_eval.api.functions import compare, pull, score, verify
    from alem_eval.api.render import render
    from alem_eval.api.scenario import Scenario, scenario
    from alem_eval.api.stored import export, leaderboard, merge, report, results
    from alem_eval.api.training import train
    from alem_eval.core.runtime import enable_compilation_cache
    from alem_eval.reporting.leaderboard import Leaderboard


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])
