"""Quiet, lazy access to the installed Alem environment (PyPI ``alem-env``, import ``alem``).

alem-env 0.1.0 prints "Loading textures from cache" to *stdout* whenever its constants
module is imported (spec §8.11), and the very first import on a fresh install builds a
texture cache (minutes). :func:`import_alem` performs that import once, with stdout
captured, so machine-readable output (``--format json|csv``) stays clean. What was printed
is kept in :data:`IMPORT_MESSAGES` for diagnostics. The texture table that import reads
(4 s of bzip2 on a 2-core CPU, for the pixel renderer only) is read when a frame is first
drawn instead (:mod:`alem_eval.envs.textures`).
"""

from __future__ import annotations

import contextlib
import io
import threading
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

IMPORT_MESSAGES: list[str] = []
_LOCK = threading.Lock()
_MODULES: AlemModules | None = None


@dataclass(frozen=True)
class AlemModules:
    """The handful of upstream entry points alem-eval uses (nothing is re-implemented)."""

    make_alem_env_from_name: Callable[..., Any]
    EnvParams: type
    StaticEnvParams: type
    get_coordination_params: Callable[..., dict]
    compute_action_mask: Callable[..., Any]
    compute_score: Callable[..., dict]
    package_version: str | None
    Action: Any = None  # alem's action enum (names of the base actions, in index order)

    @property
    def env_version(self) -> str:
        """``StaticEnvParams().version`` of the installed environment."""
        return str(self.StaticEnvParams().version)


def import_alem() -> AlemModules:
    """Import ``alem`` once (stdout captured) and return its entry points.

    Guarantees: nothing is written to stdout; later calls return the same object at no
    cost. Raises ``ImportError`` (unchanged) when alem-env is not installed.
    """
    global _MODULES
    if _MODULES is not None:
        return _MODULES
    with _LOCK:
        if _MODULES is None:
            from alem_eval.envs.textures import deferred_textures

            try:
                from importlib.metadata import version

                pkg: str | None = version("alem-env")
            except Exception:
                pkg = None
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf), deferred_textures(pkg):
                from alem.alem_coop.action_masking import compute_action_mask
                from alem.alem_coop.constants import Action
                from alem.alem_coop.alem_state import (
                    EnvParams,
                    StaticEnvParams,
                    get_coordination_params,
                )
                from alem.alem_coop.envs.common import compute_score
                from alem.alem_env import make_alem_env_from_name
            IMPORT_MESSAGES.extend(line for line in buf.getvalue().splitlines() if line)
            _MODULES = AlemModules(
                make_alem_env_from_name,
                EnvParams,
                StaticEnvParams,
                get_coordination_params,
                compute_action_mask,
                compute_score,
                pkg,
                Action,
            )
    return _MODULES


def installed_env_version() -> str:
    """``StaticEnvParams().version`` of the installed alem (imports it quietly)."""
    return import_alem().env_version
