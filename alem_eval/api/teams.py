"""What :func:`alem_eval.crossplay` and :func:`alem_eval.scenario` do alike (and so
``alem-eval crossplay`` / ``alem-eval scenario``, which call them): the devices, the cells
(selectors with ``difficulty`` / ``split`` / ``splits``, or ``Cell`` s), the plan of a dry
run, the episode bar, the run and the files written with ``out=`` (:func:`play_teams`).

Importing this module imports no JAX.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import before_compiling, episode_progress, results_warnings
from alem_eval.api.cells import DEFAULT_SOURCE, Cells, SourceSpec, resolve_cells

if TYPE_CHECKING:
    from alem_eval.hub.source_base import Source


@dataclass(frozen=True)
class Where:
    """What :func:`alem_eval.crossplay` and :func:`alem_eval.scenario` take alike: where
    the cells come from (``source`` / ``repo`` / ``revision`` / ``cache_dir``, as
    :func:`alem_eval.select`), which of them play (the training ``difficulty`` filter, the
    partner ``split`` of ``splits``) and over how many CPU ``devices``."""

    source: SourceSpec | None = None
    repo: str | None = None
    revision: str | None = None
    cache_dir: str | Path | None = None
    difficulty: str | Sequence[str] | None = None
    split: str | None = None
    splits: Any = None
    devices: str | int | None = None


def team_cells(
    command: str, cells: Cells, where: Where, *, read_only: bool = False
) -> tuple[Source, list]:
    """(source, the library's cells) of a way of playing teams. Selector strings (none:
    every cell of a local source; the Hub refuses to take all,
    :func:`~alem_eval.hub.selectors.require_selection`) are selected from ``where``'s
    source (``read_only``: a Hub source writes nothing, for a dry run) with its
    ``difficulty`` filter; ``Cell`` s keep their own source (:func:`resolve_cells`).
    Then the cells of ``where.split`` of ``where.splits`` (a split file is read even
    without ``split``)."""
    from alem_eval.api.cells import cells_of_split

    items = [cells] if isinstance(cells, str) else list(cells or [])
    difficulties = [where.difficulty] if isinstance(where.difficulty, str) else where.difficulty
    if any(not isinstance(c, str) for c in items):
        src, chosen = resolve_cells(
            items, where.source, where.repo, where.revision, where.cache_dir
        )
        if difficulties is not None:
            chosen = [c for c in chosen if c.difficulty in difficulties]
        return src, cells_of_split(chosen, where.split, where.splits)
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.selectors import require_selection
    from alem_eval.hub.sources import open_source

    src = open_source(
        DEFAULT_SOURCE if where.source is None else where.source,
        repo=where.repo,
        revision=where.revision,
        cache_dir=where.cache_dir,
        read_only=read_only,
        on_download=download_bar(),
    )
    filters = (list(difficulties) if difficulties is not None else None,)
    require_selection(src, items, command=command, filters=filters)
    chosen = src.select(items, difficulties=filters[0])
    return src, cells_of_split(chosen, where.split, where.splits)


def use_devices(devices: str | int | None) -> None:
    """``devices``: expose that many CPU devices to JAX (``"auto"``: one per core; None:
    JAX's devices as they are) and say so on stderr. It takes effect only before JAX
    starts its backends, so it comes first."""
    from alem_eval.core.progress import err_console
    from alem_eval.core.runtime import parse_devices, use_host_devices

    n = parse_devices(devices)
    if n is not None and use_host_devices(n):
        err_console.print(f"splitting the work over {n} CPU devices", highlight=False)


def play_teams(
    command: str,
    cells: Cells,
    where: Where,
    plan: Callable[[Any, list], Any],
    run: Callable[..., Any],
    write: Callable[[Any, Path], list[Path]],
    out: str | Path | None,
    progress: bool | None,
    dry_run: bool,
) -> Any:
    """The devices, the cells (:func:`team_cells`), then with ``dry_run`` only
    ``plan(source, cells)`` (a :class:`~alem_eval.scoring.plan.RunPlan`: nothing played,
    nothing written); else the compilation cache (:func:`~alem_eval.api.calls.before_compiling`)
    and ``run(source, cells, on_progress=..., on_episodes=...)`` under the results store's
    warnings (:func:`~alem_eval.api.calls.results_warnings`) and the episode bar ``command`` (:func:`~alem_eval.api.calls.episode_progress`) and
    ``write(result, out)`` when ``out`` is given (``progress``: as the API's). Returns the plan, or (the run's
    result, the paths written)."""
    use_devices(where.devices)  # before JAX starts its backends
    src, chosen = team_cells(command, cells, where, read_only=dry_run)
    if dry_run:
        return plan(src, chosen)
    before_compiling()
    with results_warnings(), episode_progress(command, progress) as bar:
        result = run(src, chosen, on_progress=bar and bar.note, on_episodes=bar and bar.update)
    return result, (tuple(write(result, Path(out))) if out is not None else ())
