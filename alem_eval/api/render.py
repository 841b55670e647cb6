"""``alem_eval.render``: one greedy episode of a cell, a mixed team or a scenario team (a
focal agent beside a cell) as a GIF or MP4, drawn with the environment's own pixel
renderer (:func:`render` calls :func:`alem_eval.rendering.episode.render_episode`, or
``plan_render`` for a dry run; ``alem-eval render`` calls :func:`render`).

Importing this module imports no JAX (the player loads it on the first call).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from alem_eval.api.calls import before_compiling, frame
from alem_eval.api.cells import DEFAULT_SOURCE, Cell, Cells, SourceSpec, resolve_cells
from alem_eval.core.errors import UsageError
from alem_eval.rendering.episode import RenderResult
from alem_eval.rendering.frames import DEFAULT_SCALE
from alem_eval.rendering.writers import DEFAULT_FPS

if TYPE_CHECKING:
    import pandas as pd

    from alem_eval.hub.source_base import Source
    from alem_eval.scoring.plan import RunPlan


@dataclass(frozen=True)
class Rendered(RenderResult):
    """What :func:`render` drew (:class:`~alem_eval.rendering.episode.RenderResult`):
    ``.path``, ``.team`` (the cell driving each agent slot), ``.eval_difficulty``,
    ``.episode``, ``.frames`` (steps + 1), ``.steps``, ``.terminated``,
    ``.episode_return``, ``.achievements``, ``.actions`` (``[steps, slots]`` int32)."""

    def to_json(self) -> dict[str, Any]:
        """What ``alem-eval render --format json`` prints."""
        return self.as_json()

    def to_frame(self) -> pd.DataFrame:
        """One row per step: ``step`` (1-based: the state after it is frame ``step``) and
        the action of each agent slot (``slot0``, ``slot1``, ...)."""
        actions = self.actions
        rows = [
            {"step": t + 1, **{f"slot{s}": int(a) for s, a in enumerate(actions[t])}}
            for t in range(len(actions))
        ]
        return frame(rows, fractions=False)


def _team(
    cells: Cells, source, repo, revision, cache_dir, *, read_only: bool = False
) -> tuple[Source, str]:
    """(the source, the team spec ``a+b+c``) from one cell, a ``+``-joined team string or
    a list with one cell per agent slot (``Cell`` s or selectors, each naming one cell)."""
    from alem_eval.core.progress import download_bar
    from alem_eval.hub.sources import open_source

    items: list[Any] = [cells] if isinstance(cells, (str, Cell)) else list(cells or [])
    if not items:
        raise UsageError("render: no cell given (a Cell, a selector, or one per agent slot)")
    if all(isinstance(c, Cell) for c in items):
        src, _ = resolve_cells(items, source, repo, revision, cache_dir)
        return src, "+".join(c.id for c in items)
    if not all(isinstance(c, str) for c in items):
        raise UsageError("render: the team is all Cells from alem_eval.select() or all selectors")
    spec = DEFAULT_SOURCE if source is None else source
    src = open_source(
        spec,
        repo=repo,
        revision=revision,
        cache_dir=cache_dir,
        read_only=read_only,
        on_download=download_bar(),
    )
    return src, "+".join(items)


def render(
    cells: Cells,
    *,
    focal: Any = None,
    focal_args: Mapping[str, Any] | None = None,
    slots: int | Sequence[int] | None = None,
    out: str | Path | None = None,
    eval_difficulty: str | None = None,
    episode: int = 0,
    max_steps: int | None = None,
    fps: float = DEFAULT_FPS,
    scale: int = DEFAULT_SCALE,
    difficulty: str | Sequence[str] | None = None,
    on_env_mismatch: str = "error",
    source: SourceSpec | None = None,
    repo: str | None = None,
    revision: str | None = None,
    cache_dir: str | Path | None = None,
    progress: bool | None = None,
    dry_run: bool = False,
) -> Rendered | RunPlan:
    """Draw episode ``episode`` of the fast protocol (world ``PRNGKey(9999 + i)``, the
    episode ``score`` plays as ``i``) as ``alem-eval render`` does: ``cells`` is one cell
    (self-play: a ``Cell`` or a selector naming one), or one per agent slot (a list, or
    selectors joined by ``+``: a mixed team of any algorithms). Each frame shows every
    agent's view over a caption (step, team achievements, each agent's cell, action and
    signal); frame 0 is the reset world.

    ``focal``: a scenario team -- the agent (what :func:`alem_eval.scenario` takes as its
    focal: an agent object, a ``--focal`` SPEC such as ``"random-legal"`` or
    ``"scripted"`` with ``focal_args``, a cell directory, a loaded policy) drives the
    agent ``slots`` (default ``(0,)``) beside the cells; the captions name it
    ``focal:<spec>`` in its slots.

    ``out``: a ``.gif`` or ``.mp4`` (mp4 needs ffmpeg or the video extra; None: a GIF in
    the current directory named after the team). ``eval_difficulty``: the worlds (None:
    the cells' shared training difficulty); ``difficulty``: only cells of these training
    difficulties match; ``fps``, ``scale`` (integer zoom). ``progress``: the steps on
    stderr (None: on a terminal or in Jupyter; False: none).
    Returns :class:`Rendered` (``.path``, ``.steps``, ``.to_frame()``, ``.to_json()``);
    ``dry_run=True`` plays and writes nothing and returns the
    :class:`~alem_eval.scoring.plan.RunPlan` (the cells, the team, one episode; the
    focal is not loaded), as ``alem-eval render --dry-run``.
    """
    from alem_eval.core.progress import live_display, steps_progress
    from alem_eval.rendering.episode import check_output
    from alem_eval.rendering.player import check_episode

    check_episode(episode)  # bad arguments before anything is opened
    if out is not None:
        check_output(out, fps, scale)
    difficulties = [difficulty] if isinstance(difficulty, str) else difficulty
    src, team = _team(cells, source, repo, revision, cache_dir, read_only=dry_run)
    if dry_run:
        from alem_eval.rendering.episode import plan_render

        return plan_render(
            src,
            team,
            focal=focal,
            slots=slots,
            eval_difficulty=eval_difficulty,
            episode=episode,
            max_steps=max_steps,
            difficulties=None if difficulties is None else list(difficulties),
        )
    before_compiling()
    from alem_eval.rendering.episode import render_episode

    show = live_display() if progress is None else progress
    with steps_progress("render", show=show) as on_progress:
        result = render_episode(
            src,
            team,
            out=out,
            eval_difficulty=eval_difficulty,
            difficulties=None if difficulties is None else list(difficulties),
            episode=episode,
            max_steps=max_steps,
            fps=fps,
            scale=scale,
            on_env_mismatch=on_env_mismatch,
            on_progress=on_progress,
            focal=focal,
            focal_args=focal_args,
            slots=slots,
        )
    return Rendered(**{f.name: getattr(result, f.name) for f in fields(result)})
