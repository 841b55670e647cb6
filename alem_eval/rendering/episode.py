"""Draw one greedy episode with the environment's own pixel renderer (``alem-eval render``).

Any team plays: one cell drives every agent (self-play), ``A+B+C`` names the cell of
each agent slot (mixed teams, any algorithms), and a focal agent (``--focal``, as
``scenario`` takes it) may drive some slots beside the cells (a scenario team). The
episode is the one ``score --protocol fast`` plays as episode ``i``, played by the one
orchestration and the play core (:mod:`alem_eval.rendering.player`).

Streaming: the play core runs one step per compiled call and hands the host each step's
env state (:class:`.player.EpisodeSteps`, a recorder of states); the host draws it with
alem's ``render_alem_pixels`` (:class:`.frames.FrameDrawer`) and hands the frame to the
writer at once (:mod:`alem_eval.rendering.writers`: GIF, or MP4 through ffmpeg), the next
step queued meanwhile. Memory stays bounded whatever the episode length; nothing but the
current state is kept.

Frames: frame 0 is the reset world, frame ``t`` the state after step ``t``, so a video
of an episode of ``T`` steps has ``T + 1`` frames.

This module checks the options, resolves the team's cells, and plays and writes the
episode (:func:`render_episode`, :func:`algorithm_clips`).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from alem_eval.core.errors import UsageError
from alem_eval.core.extras import install_hint
from alem_eval.rendering.frames import DEFAULT_SCALE, MAX_SCALE, FrameDrawer
from alem_eval.rendering.player import EpisodeStep, EpisodeSteps, check_episode, reset_state
from alem_eval.rendering.writers import (
    DEFAULT_FPS,
    MAX_FPS,
    SUFFIXES,
    GifWriter,
    Mp4Writer,
    ffmpeg_exe,
)


# ----------------------------------------------------------------------------------------
# Teams and options
# ----------------------------------------------------------------------------------------
def parse_team(spec: str) -> list[str]:
    """``"A"`` -> ``["A"]`` (self-play); ``"A+B+C"`` -> one selector per agent slot."""
    parts = [p.strip() for p in str(spec).split("+")]
    if not parts or any(not p for p in parts):
        raise UsageError(
            f"team {spec!r}: expected one cell (self-play) or one cell per agent slot "
            "joined by '+', e.g. 'demo/ippo/easy/0+demo/pqn/easy/0+demo/ippo/easy/0'"
        )
    return parts


def resolve_team(source: Any, spec: str, difficulties: Sequence[str] | None = None) -> list[Any]:
    """The cells (manifest ``Cell`` s) named by ``spec``: each part, narrowed to cells of
    the training ``difficulties`` when given, must match exactly one cell of ``source``.
    One part is that cell's self-play (the caller repeats it)."""
    cells = []
    for part in parse_team(spec):
        found = source.select([part], difficulties=difficulties)
        if len(found) != 1:
            shown = ", ".join(c.id for c in found[:3]) + (", ..." if len(found) > 3 else "")
            raise UsageError(
                f"{part!r} names {len(found)} cells ({shown}); render plays one episode of one "
                "team: name one cell, or one cell per agent slot joined by '+'"
            )
        cells.append(found[0])
    return cells


def check_output(out: str | Path, fps: float = DEFAULT_FPS, scale: int = DEFAULT_SCALE) -> str:
    """The writer ``out`` needs (``"gif"`` | ``"mp4"``); a one-line :class:`UsageError` for
    an unknown suffix, an mp4 without ffmpeg, or an fps / scale out of range."""
    suffix = Path(out).suffix.lower()
    if suffix not in SUFFIXES:
        raise UsageError(
            f"--out {str(out)!r}: the file must end in {' or '.join(SUFFIXES)} "
            f"(got {suffix or 'no suffix'})"
        )
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps <= MAX_FPS:
        raise UsageError(f"--fps must be in (0, {MAX_FPS:g}], got {fps!r}")
    if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= MAX_SCALE:
        raise UsageError(f"--scale must be an integer from 1 to {MAX_SCALE}, got {scale!r}")
    if suffix == ".mp4" and ffmpeg_exe() is None:
        raise UsageError(
            f"--out {str(out)!r}: writing .mp4 needs ffmpeg, which is neither on PATH nor "
            f"installed with the video extra: {install_hint('imageio_ffmpeg')} (or put "
            "ffmpeg on PATH), or write a .gif"
        )
    return suffix[1:]


# ----------------------------------------------------------------------------------------
# The episode as a video
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RenderResult:
    """What :func:`render_episode` drew and wrote."""

    path: Path
    team: tuple[str, ...]  # the cell driving each agent slot
    eval_difficulty: str
    episode: int
    frames: int  # frames written: steps + 1 (frame 0 is the reset world)
    steps: int  # env steps of the episode (the record's episode_length)
    terminated: bool  # the env ended the episode before the step cap
    episode_return: float  # sum over steps of the mean reward over agents (the record's)
    achievements: tuple[str, ...]  # distinct team achievements, in the order unlocked
    actions: np.ndarray = field(repr=False)  # [steps, P] int32

    def as_json(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "team": list(self.team),
            "eval_difficulty": self.eval_difficulty,
            "episode": self.episode,
            "frames": self.frames,
            "steps": self.steps,
            "terminated": self.terminated,
            "episode_return": self.episode_return,
            "achievements": list(self.achievements),
        }


def render_episode(
    source: Any,
    team: str,
    *,
    focal: Any = None,
    focal_args: Mapping[str, Any] | None = None,
    slots: Sequence[int] | int | None = None,
    out: str | Path | None = None,
    eval_difficulty: str | None = None,
    episode: int = 0,
    max_steps: int | None = None,
    fps: float = DEFAULT_FPS,
    scale: int = DEFAULT_SCALE,
    on_env_mismatch: str = "error",
    on_frame: Callable[[EpisodeStep, np.ndarray], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    difficulties: Sequence[str] | None = None,
) -> RenderResult:
    """Render episode ``episode`` of the team ``team`` of ``source`` (an
    :func:`alem_eval.hub.sources.open_source` source): one cell selector (self-play) or one
    per agent slot joined by ``+``, each naming exactly one cell (of the training
    ``difficulties``, when given). ``focal`` (what ``scenario`` takes as its focal: an
    agent, a ``--focal`` SPEC with ``focal_args``, a cell directory, a loaded policy)
    drives the agent ``slots`` (default ``(0,)``: a visitor in slot 0) in place of the
    team's cells there: a scenario team. ``eval_difficulty`` defaults to the cells'
    training difficulty (which they must then share); ``out`` defaults to
    :func:`default_out`. Options and the focal are checked before anything is loaded.

    The episode is played by the one orchestration and the play core
    (:mod:`alem_eval.rendering.player`) and written to ``out`` (``.gif``, or ``.mp4`` with
    ffmpeg: :func:`ffmpeg_exe`) frame by frame; ``on_frame(step, frame)`` sees every frame
    as written; ``on_progress(steps done, max steps)`` is called after each step. The file
    appears complete or not at all (written beside it, then renamed)."""
    from alem_eval.scoring.orchestration import Match, Member
    from alem_eval.scoring.play import resolve_worlds
    from alem_eval.scoring.teams import Team
    from alem_eval.evaluate.settings import check_eval_difficulty

    check_episode(episode)
    if eval_difficulty is not None:
        check_eval_difficulty(eval_difficulty)
    path = Path(out) if out is not None else None
    if path is not None:
        check_output(path, fps, scale)
    if focal is None and (slots is not None or focal_args):
        raise UsageError("--slots and --focal-arg go with --focal (the agent they place)")
    group = None if focal is None else _focal(focal, focal_args)  # a bad spec: one line
    cells = resolve_team(source, team, difficulties)
    label = None if group is None else FOCAL_LABEL_PREFIX + group.label
    used = playing_cells(cells, label, slots)
    worlds = resolve_worlds(source, used, eval_difficulty, 1, max_steps, on_env_mismatch)
    names = slot_names([c.id for c in cells], worlds.num_slots, team, label, slots)
    agents: dict[str, Any] = {}
    if group is not None and label is not None:  # a scenario team
        from alem_eval.scoring.focal_cell import check_focal_world

        check_focal_world(group, worlds, on_env_mismatch)
        agents[label] = group
    if path is None:
        path = default_out(names, worlds.eval_difficulty, episode)
    match = Match(
        Team(tuple(names)),
        None,
        worlds.eval_difficulty,
        1,
        worlds.max_steps,
        first_episode=int(episode),
    )
    members = {c.id: Member(c, *worlds.resolved[c.id]) for c in used}
    played = _draw(
        lambda sink: _play(members, match, agents, sink),
        next(iter(worlds.statics.values())).world,
        worlds.eval_difficulty,
        int(episode),
        names,
        path,
        fps=fps,
        scale=scale,
        max_steps=worlds.max_steps,
        on_frame=on_frame,
        on_progress=on_progress,
    )
    return RenderResult(
        path=path,
        team=tuple(names),
        eval_difficulty=worlds.eval_difficulty,
        episode=int(episode),
        **played,
    )


FOCAL_LABEL_PREFIX = "focal:"  # a focal's slots are named focal:<its label>


def _focal(focal: Any, args: Mapping[str, Any] | None) -> Any:
    """The play core's actor of a focal, as ``scenario`` resolves its ``--focal``
    (:func:`~alem_eval.scoring.focal_cell.resolve_focal`: no parser of its own)."""
    from alem_eval.scoring.focal_cell import resolve_focal

    return resolve_focal(focal, args)


def playing_cells(cells: Sequence[Any], label: str | None, slots: Any) -> list[Any]:
    """The distinct cells that play: all of them, but those of a per-slot team (``A+B+C``)
    whose slots the focal ``label`` takes (``slots``, checked here)."""
    if label is not None and len(cells) > 1:
        placed = check_slots(slots, len(cells))
        cells = [c for s, c in enumerate(cells) if s not in placed]
    return list({c.id: c for c in cells}.values())


def slot_names(
    cells: Sequence[str], num_slots: int, spec: str, label: str | None = None, slots: Any = None
) -> list[str]:
    """What drives each agent slot: ``cells`` (ids) are one cell (its self-play) or one per
    slot; the focal's ``label`` takes its ``slots`` (:func:`check_slots`)."""
    if len(cells) == 1:
        names = list(cells) * num_slots
    elif len(cells) == num_slots:
        names = list(cells)
    else:
        raise UsageError(
            f"team {spec!r} names {len(cells)} cells but the env has {num_slots} agents: "
            "name one cell (self-play) or one per agent slot"
        )
    if label is None:
        return names
    placed = check_slots(slots, num_slots)
    return [label if s in placed else c for s, c in enumerate(names)]


def check_slots(slots: Sequence[int] | int | None, num_slots: int) -> tuple[int, ...]:
    """The focal's agent slots (default ``(0,)``): distinct, in ``[0, num_slots)``, at
    least one left to the cells (they give the team its env)."""
    chosen = (0,) if slots is None else (slots,) if isinstance(slots, int) else tuple(slots)
    bad = [
        s
        for s in chosen
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or not 0 <= s < num_slots
    ]
    if not chosen or bad or len(set(chosen)) != len(chosen) or len(chosen) >= num_slots:
        raise UsageError(
            f"--slots must name distinct agent slots from 0 to {num_slots - 1} for the "
            f"focal, leaving at least one to the cells, got {','.join(map(str, chosen)) or 'none'}"
        )
    return tuple(int(s) for s in chosen)


def _play(members: Mapping[str, Any], match: Any, agents: Mapping[str, Any], sink: Any) -> None:
    """The one orchestration plays ``match`` into ``sink`` (its recorder keeps states)."""
    from alem_eval.core.errors import DatasetError
    from alem_eval.scoring.orchestration import play_matches
    from alem_eval.scoring.teams import PROTOCOL

    try:
        play_matches(members, [match], protocol=PROTOCOL, agents=agents, sinks=[sink])
    except DatasetError:
        if sink.failure is not None:  # the drawing failed (e.g. ffmpeg): its own error
            raise sink.failure from None
        raise


def _draw(
    play: Callable[[EpisodeSteps], None],
    world: Any,
    eval_difficulty: str,
    episode: int,
    labels: Sequence[str],
    out: Path,
    *,
    fps: float,
    scale: int,
    max_steps: int,
    on_frame: Callable[[EpisodeStep, np.ndarray], None] | None,
    on_progress: Callable[[int, int], None] | None,
) -> dict[str, Any]:
    """``play(sink)`` with a sink that draws each step into ``out`` as it comes -> the
    :class:`RenderResult` fields of the episode."""
    from alem_eval.core.fsutil import TMP_PREFIX, atomic_write

    kind = check_output(out, fps, scale)
    drawer = FrameDrawer(world, labels, scale=scale)
    seen = np.zeros(len(drawer.achievements), bool)
    order: list[int] = []
    before: list[np.ndarray | None] = [None]
    writers: list[Any] = []

    def on_step(step: EpisodeStep) -> None:
        frame = drawer.frame(step, before[0], max_steps)
        writers[0].add(frame)
        if on_frame is not None:
            on_frame(step, frame)
        order.extend(int(i) for i in np.flatnonzero(step.achievements & ~seen))
        seen[:] |= step.achievements
        before[0] = step.achievements
        if on_progress is not None:
            on_progress(step.t, max_steps)

    sink = EpisodeSteps(world, reset_state(world, eval_difficulty, episode), on_step)
    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "gif":

        def write_gif(fh: IO[bytes]) -> None:
            writers[:] = [GifWriter(fh, fps)]
            play(sink)
            writers[0].close()

        atomic_write(out, write_gif)
    else:
        tmp = out.parent / f"{TMP_PREFIX}{os.getpid()}-{out.name}"
        writers[:] = [Mp4Writer(tmp, fps)]
        try:
            play(sink)
            writers[0].close()
            os.replace(tmp, out)
        except BaseException:
            writers[0].abort()
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
    played = sink.episode
    return {
        "frames": writers[0].frames,
        "steps": played["steps"],
        "terminated": played["terminated"],
        "episode_return": played["return"],
        "achievements": tuple(drawer.achievements[i] for i in order),
        "actions": played["actions"],
    }


def default_out(slots: Sequence[Any], eval_difficulty: str, episode: int) -> Path:
    """``render-<names>-<difficulty>-ep<i>.gif`` in the current directory: the cell of a
    self-play team, else what drives each slot (cells, ``Cell`` s or a focal's label)."""
    names = [str(getattr(c, "id", c)) for c in slots]
    names = names[:1] if len(set(names)) == 1 else names
    slug = "+".join(re.sub(r"[^A-Za-z0-9._+-]+", "-", n) for n in names)
    return Path(f"render-{slug}-{eval_difficulty}-ep{episode}.gif")


def plan_render(
    source: Any,
    team: str,
    *,
    focal: Any = None,
    slots: Sequence[int] | int | None = None,
    eval_difficulty: str | None = None,
    episode: int = 0,
    max_steps: int | None = None,
    difficulties: Sequence[str] | None = None,
) -> Any:
    """What :func:`render_episode` would download and play (``render --dry-run``): the
    team's cells and the one team (:func:`~alem_eval.scoring.plan.plan_teams`, as every
    way of playing plans), one episode of at most ``max_steps`` steps; the focal is not
    loaded (its spec, or its class, names its slots). A
    :class:`~alem_eval.scoring.plan.RunPlan`; nothing is downloaded, run or written."""
    import dataclasses

    from alem_eval.scoring.plan import plan_teams
    from alem_eval.scoring.teams import Team

    check_episode(episode)
    if focal is None and slots is not None:
        raise UsageError("--slots and --focal-arg go with --focal (the agent they place)")
    cells = resolve_team(source, team, difficulties)
    label = None
    if focal is not None:
        label = FOCAL_LABEL_PREFIX + (focal if isinstance(focal, str) else type(focal).__name__)
    chosen: list[tuple[str, ...]] = []

    def build(_cells: Sequence[Any], num_slots: int) -> list[Any]:
        chosen.append(tuple(slot_names([c.id for c in cells], num_slots, team, label, slots)))
        return [Team(chosen[0])]

    used = playing_cells(cells, label, slots)
    plan = plan_teams(source, used, "render", build, eval_difficulty, 1, max_steps)
    team_text = " | ".join(chosen[0])
    note = f"episode {episode} (world PRNGKey({9999 + episode})) of the team {team_text}"
    return dataclasses.replace(plan, notes=(note, *plan.notes))


def algorithm_clips(
    source: Any,
    cells: Sequence[Any],
    out_dir: str | Path,
    *,
    max_steps: int = 200,
    episode: int = 0,
    fps: float = DEFAULT_FPS,
    scale: int = DEFAULT_SCALE,
    on_env_mismatch: str = "error",
) -> dict[str, RenderResult]:
    """A short self-play clip per algorithm, for a report to embed: for each algorithm
    among ``cells`` (manifest order), its first cell plays ``episode`` on its training
    difficulty for at most ``max_steps`` steps, written to ``out_dir/<algorithm>.gif``.
    Returns ``{algorithm: RenderResult}``; a Markdown report next to ``out_dir`` embeds
    them as ``![<algorithm>](<out_dir name>/<algorithm>.gif)``."""
    from alem_eval.hub.manifest import sort_cells

    first: dict[str, Any] = {}
    for c in sort_cells(cells):
        first.setdefault(c.algorithm, c)
    out = Path(out_dir)
    return {
        algorithm: render_episode(
            source,
            c.id,
            out=out / f"{algorithm}.gif",
            episode=episode,
            max_steps=max_steps,
            fps=fps,
            scale=scale,
            on_env_mismatch=on_env_mismatch,
        )
        for algorithm, c in first.items()
    }


__all__ = ["RenderResult", "algorithm_clips", "check_output", "plan_render", "render_episode"]
