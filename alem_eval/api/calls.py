"""What every function of the public API does alike: the compilation cache before JAX,
progress through :mod:`alem_eval.core.progress`'s callbacks (a terminal and Jupyter
alike), the old spellings kept for one release, and the two methods of every result
(``to_frame()``: a pandas DataFrame; ``to_json()``: a JSON-able dict).

Old spellings that still work, with a :class:`DeprecationWarning`, until the next release:
``results=DIR`` (now ``store=``), ``leaderboard("a", "b")`` / ``results(...)`` /
``report(...)`` with several positional selectors (now one list: ``leaderboard(["a",
"b"])``) and ``scenario(focal, cells)`` (now ``scenario(cells, focal)``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from alem_eval.core.errors import UsageError

if TYPE_CHECKING:
    import pandas as pd

F = TypeVar("F", bound=Callable[..., Any])


_COMMAND: list[list[str] | None] = [None]  # inside a_command(): the command's notes


@contextlib.contextmanager
def a_command() -> Iterator[list[str]]:
    """Inside: a command of the CLI calls the API. :func:`before_compiling` turns the
    cache on whatever JAX's state or variables (the command owns its process), and the
    results store's warnings a run raises are kept, one line each, in the list this
    yields (:func:`results_warnings`) for the command to show after."""
    notes: list[str] = []
    before = _COMMAND[0]
    _COMMAND[0] = notes
    try:
        yield notes
    finally:
        _COMMAND[0] = before


@contextlib.contextmanager
def results_warnings() -> Iterator[None]:
    """Around a run: inside :func:`a_command`, the
    :class:`~alem_eval.analysis.results.ResultsWarning` s raised in the block go to the
    command's notes (:func:`~alem_eval.analysis.results.collect_warnings`); elsewhere
    they warn as any warning does."""
    notes = _COMMAND[0]
    if notes is None:
        yield
        return
    from alem_eval.analysis.results import collect_warnings

    caught: list[str] = []
    try:
        with collect_warnings() as caught:
            yield
    finally:
        notes.extend(caught)


def before_compiling() -> None:
    """The persistent compilation cache, as the CLI sets it, while that can still take
    effect and is nobody else's choice: before JAX is imported, unless JAX's own cache
    variable is set (then, or once JAX runs, the caller decides); always inside
    :func:`a_command`."""
    import sys

    free = "jax" not in sys.modules and "JAX_COMPILATION_CACHE_DIR" not in os.environ
    if _COMMAND[0] is not None or free:
        from alem_eval.core.runtime import enable_compilation_cache

        enable_compilation_cache()


@contextlib.contextmanager
def episode_progress(label: str, show: bool | None) -> Iterator[Any]:
    """An :class:`~alem_eval.core.progress.EpisodeBar` on stderr (``show`` None: only on a
    terminal or in Jupyter, :func:`~alem_eval.core.progress.live_display`), else None.
    Its ``update`` is an ``on_episodes``, ``note`` an ``on_progress(message)`` and
    ``cell_done`` an ``on_progress(message, done, total)``: the callbacks the commands
    hand the same library functions."""
    from alem_eval.core.progress import EpisodeBar, live_display

    if not (live_display() if show is None else show):
        yield None
        return
    with EpisodeBar(label) as bar:
        yield bar


def deprecated(message: str) -> None:
    """Warn (once per call site: the caller's first frame outside :mod:`alem_eval.api`)
    that an old spelling goes in the next release."""
    import sys

    here = os.path.dirname(__file__)
    level, caller = 2, sys._getframe(1)
    while caller.f_back is not None and os.path.dirname(caller.f_code.co_filename) == here:
        caller, level = caller.f_back, level + 1
    warnings.warn(
        f"{message} (the old spelling goes in the next release)", DeprecationWarning, level
    )


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Keep old keyword names working for one release: ``results=`` -> ``store=``."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise UsageError(f"{fn.__name__}: give {new}= only ({old}= is its old name)")
                deprecated(f"alem_eval.{fn.__name__}({old}=...) is now {new}=...")
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        return cast(F, call)

    return wrap


def cells_in_one(fn: F) -> F:
    """``fn(cells=None, *, ...)`` still taking several positional selectors for one
    release (``leaderboard("1B", "100M")`` -> ``leaderboard(["1B", "100M"])``)."""

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if len(args) > 1:
            deprecated(
                f"alem_eval.{fn.__name__}(a, b, ...) with several positional selectors is now "
                f"alem_eval.{fn.__name__}([a, b, ...])"
            )
            args = (list(args),)
        return fn(*args, **kwargs)

    return cast(F, call)


def frame(rows: Any, *, fractions: bool = True) -> pd.DataFrame:
    """A DataFrame of ``rows`` (records); with ``fractions`` its unit is named
    (``.attrs["units"]``: the metric values are fractions in [0, 1])."""
    import pandas as pd

    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if fractions:
        from alem_eval.analysis.metrics import UNITS

        df.attrs["units"] = UNITS
    return df


def jsonable(value: Any) -> Any:
    """``value`` with paths as strings, tuples as lists and numpy scalars as numbers."""
    from pathlib import PurePath

    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 1) == 0:
        return value.item()
    return value
