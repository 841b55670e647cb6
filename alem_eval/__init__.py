"""alem-eval: checkpoint hub and evaluation toolkit for the Alem MARL benchmark baselines.

The public Python API (``docs/python-api.md``)::

    import alem_eval

    cells = alem_eval.select("demo", source="demo")
    episodes = alem_eval.score(cells, episodes=8, max_steps=300)  # a DataFrame
    print(alem_eval.leaderboard(*cells).to_markdown())

Importing the package compiles nothing and imports no JAX: each name below loads its
module on first use (:mod:`alem_eval.api`, :mod:`alem_eval.play`). The names ``report``,
``crossplay``, ``verify`` and ``leaderboard`` are the functions, also once the library
modules of the same name are loaded (import from those as ``from alem_eval.report import
build_report``).
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# Public name -> the module defining it.
_EXPORTS: dict[str, str] = {
    "Cell": "api",
    "select": "api",
    "pull": "api",
    "verify": "api",
    "score": "api",
    "leaderboard": "api",
    "report": "api",
    "crossplay": "api",
    "CrossPlay": "api",
    "Leaderboard": "leaderboard",
    "load_policy": "play",
    "make_env": "play",
    "Policy": "play",
    "Env": "play",
    "enable_compilation_cache": "runtime",
}

__all__ = [
    "Cell",
    "select",
    "pull",
    "verify",
    "score",
    "leaderboard",
    "report",
    "crossplay",
    "CrossPlay",
    "Leaderboard",
    "load_policy",
    "make_env",
    "Policy",
    "Env",
    "enable_compilation_cache",
]

if TYPE_CHECKING:
    from .api import (
        Cell,
        CrossPlay,
        crossplay,
        leaderboard,
        pull,
        report,
        score,
        select,
        verify,
    )
    from .leaderboard import Leaderboard
    from .play import Env, Policy, load_policy, make_env
    from .runtime import enable_compilation_cache


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted([*__all__, "__version__"])


class _Package(types.ModuleType):
    """The package keeps its public names when a submodule of the same name loads (the
    import system would set ``alem_eval.report`` to the module ``alem_eval/report.py``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and isinstance(value, types.ModuleType):
            return  # the submodule stays in sys.modules
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
