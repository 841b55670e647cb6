"""The package's optional dependencies (its extras), imported where they are used.

``pip install alem-eval`` leaves out what only one command needs: ``flashbax`` (the
``datasets`` extra: ``dataset export`` and the vault side of ``dataset info``) and
``imageio-ffmpeg`` (the ``video`` extra: an ffmpeg for ``render --out clip.mp4`` when none
is on PATH), ``pettingzoo`` and ``gymnasium`` (the ``pettingzoo`` extra:
``alem_eval.parallel_env``). :func:`require` imports such a module, or raises :class:`MissingExtraError`, a
one-line error that names the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from alem_eval.core.errors import MissingExtraError

# top-level module -> (the distribution that provides it, the extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "flashbax": ("flashbax", "datasets"),
    "imageio_ffmpeg": ("imageio-ffmpeg", "video"),
    "pettingzoo": ("pettingzoo", "pettingzoo"),
    "gymnasium": ("gymnasium", "pettingzoo"),
}


def install_hint(module: str) -> str:
    """The pip command that installs ``module``'s extra."""
    return f"pip install 'alem-eval[{EXTRAS[module][1]}]'"


def optional(module: str) -> ModuleType | None:
    """``module`` (a top-level name in :data:`EXTRAS`), or None when it is not installed.
    A module that is installed but fails to import for another reason (one of its own
    dependencies missing) raises as usual."""
    if module not in EXTRAS:
        raise KeyError(f"{module!r} is not an optional dependency ({sorted(EXTRAS)})")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        return None


def require(module: str, purpose: str) -> ModuleType:
    """``module``, imported; :class:`MissingExtraError` naming its extra when it is not
    installed. ``purpose`` completes "... needs <distribution>", e.g. "writing Flashbax
    vaults"."""
    found = optional(module)
    if found is None:
        dist = EXTRAS[module][0]
        raise MissingExtraError(
            f"{purpose} needs {dist}, which is not installed: {install_hint(module)}"
        )
    return found
