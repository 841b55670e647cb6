"""Where alem-eval keeps its files (overridable with ALEM_EVAL_CACHE or XDG_CACHE_HOME)."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir() -> Path:
    """``$ALEM_EVAL_CACHE``, else ``$XDG_CACHE_HOME/alem-eval``, else ``~/.cache/alem-eval``."""
    explicit = os.environ.get("ALEM_EVAL_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or (Path.home() / ".cache")
    return Path(base) / "alem-eval"


def results_dir() -> Path:
    return user_cache_dir() / "results"


def compare_dir() -> Path:
    """Where ``compare`` keeps both sources' scores: apart from the results store, so that
    a leaderboard never mixes a comparison's other source into it."""
    return user_cache_dir() / "compare"


def compilation_cache_dir() -> Path:
    """``$ALEM_EVAL_JAX_CACHE``, else ``<user cache>/jax-compilation-cache``."""
    explicit = os.environ.get("ALEM_EVAL_JAX_CACHE")
    return Path(explicit) if explicit else user_cache_dir() / "jax-compilation-cache"
