"""Draw one greedy episode with the environment's own pixel renderer (``alem-eval render``).

Any team plays: one cell drives every agent (self-play) or ``A+B+C`` names the cell of
each agent slot (mixed teams, any algorithms). The episode is the one ``score --protocol
fast`` plays as episode ``i`` (:mod:`alem_eval.rendering.player`).

Streaming: the host calls one jitted env+policy step per env step
(:class:`.player.EpisodePlayer`), draws the new state with alem's ``render_alem_pixels``
(:class:`.frames.FrameDrawer`) and hands the frame to the writer at once
(:mod:`alem_eval.rendering.writers`: GIF, or MP4 through ffmpeg). Memory stays bounded
whatever the episode length; nothing but the current state is kept.

Frames: frame 0 is the reset world, frame ``t`` the state after step ``t``, so a video
of an episode of ``T`` steps has ``T + 1`` frames.

This module checks the options, resolves the team's cells, and plays and writes the
episode (:func:`render_team`, :func:`render_episode`, :func:`algorithm_clips`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np

from alem_eval.core.errors import UsageError
from alem_eval.core.extras import install_hint
from alem_eval.rendering.frames import DEFAULT_SCALE, MAX_SCALE, FrameDrawer
from alem_eval.rendering.player import EpisodePlayer, EpisodeStep, check_episode
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
    """What :func:`render_team` / :func:`render_episode` drew and wrote."""

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


def render_team(
    cfgs: Sequence[Any],
    weights: Sequence[Any],
    team: Sequence[int],
    *,
    out: str | Path,
    names: Sequence[str] | None = None,
    eval_difficulty: str,
    episode: int = 0,
    max_steps: int | None = None,
    fps: float = DEFAULT_FPS,
    scale: int = DEFAULT_SCALE,
    on_env_mismatch: str = "error",
    on_frame: Callable[[EpisodeStep, np.ndarray], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> RenderResult:
    """Play fast-protocol episode ``episode`` of ``team`` (``team[s]``: the index into
    ``cfgs`` / ``weights`` of the checkpoint driving slot ``s``) and write it to ``out``
    (``.gif``, or ``.mp4`` with ffmpeg: :func:`ffmpeg_exe`) frame by frame. ``names[k]`` labels checkpoint
    ``k`` in the captions (default ``checkpoint k``). ``on_frame(step, frame)`` sees every
    frame as written; ``on_progress(steps done, max steps)`` is called after each step.
    The file appears complete or not at all (written beside it, then renamed)."""
    from alem_eval.core.fsutil import TMP_PREFIX, atomic_write

    kind = check_output(out, fps, scale)
    out = Path(out)
    player = EpisodePlayer(
        cfgs,
        weights,
        team,
        eval_difficulty=eval_difficulty,
        episode=episode,
        max_steps=max_steps,
        on_env_mismatch=on_env_mismatch,
    )
    names = list(names) if names is not None else [f"checkpoint {k}" for k in range(len(cfgs))]
    labels = [names[m] for m in player.team]
    drawer = FrameDrawer(player.world, labels, scale=scale)
    played: dict[str, Any] = {}

    def stream(writer) -> None:
        before: np.ndarray | None = None
        actions, order, ret = [], [], []
        seen = np.zeros(len(drawer.achievements), bool)
        for step in player:
            frame = drawer.frame(step, before, player.max_steps)
            writer.add(frame)
            if on_frame is not None:
                on_frame(step, frame)
            if step.actions is not None:
                actions.append(step.actions)
                ret.append(step.team_reward)
            order += [i for i in np.flatnonzero(step.achievements & ~seen)]
            seen |= step.achievements
            before = step.achievements
            if on_progress is not None:
                on_progress(step.t, player.max_steps)
            played.update(steps=step.t, terminated=step.terminated)
        # The evaluator's return: float64 running sum of the float32 per-step means.
        played["return"] = float(np.add.accumulate(np.asarray(ret, np.float64))[-1]) if ret else 0.0
        played["actions"] = np.asarray(actions, np.int32).reshape(-1, player.num_agents)
        played["order"] = order
        played["frames"] = writer.frames

    out.parent.mkdir(parents=True, exist_ok=True)
    if kind == "gif":

        def write_gif(fh: IO[bytes]) -> None:
            writer = GifWriter(fh, fps)
            stream(writer)
            writer.close()

        atomic_write(out, write_gif)
    else:
        tmp = out.parent / f"{TMP_PREFIX}{os.getpid()}-{out.name}"
        writer = Mp4Writer(tmp, fps)
        try:
            stream(writer)
            writer.close()
            os.replace(tmp, out)
        except BaseException:
            writer.abort()
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
    return RenderResult(
        path=out,
        team=tuple(labels),
        eval_difficulty=eval_difficulty,
        episode=int(episode),
        frames=played["frames"],
        steps=played["steps"],
        terminated=played["terminated"],
        episode_return=played["return"],
        achievements=tuple(drawer.achievements[i] for i in played["order"]),
        actions=played["actions"],
    )


def default_out(cells: Sequence[Any], eval_difficulty: str, episode: int) -> Path:
    """``render-<cells>-<difficulty>-ep<i>.gif`` in the current directory."""
    slug = "+".join(c.id.replace("/", "-") for c in cells)
    return Path(f"render-{slug}-{eval_difficulty}-ep{episode}.gif")


def render_episode(
    source: Any,
    team: str,
    *,
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
    ``difficulties``, when given). ``eval_difficulty`` defaults to the cells' training
    difficulty (which they must then share); ``out`` defaults to :func:`default_out`.
    Options are checked before anything is loaded."""
    from alem_eval.scoring.play import shared_difficulty
    from alem_eval.evaluate.settings import check_eval_difficulty
    from alem_eval.model.loader import load_policy_cell

    check_episode(episode)
    if eval_difficulty is not None:
        check_eval_difficulty(eval_difficulty)
    cells = resolve_team(source, team, difficulties)
    path = Path(out) if out is not None else None
    if path is not None:
        check_output(path, fps, scale)
    members = list({c.id: c for c in cells}.values())
    loaded = [load_policy_cell(source, c) for c in members]
    resolved = {c.id: (lc.cell_dir, lc.cfg, lc.spec) for c, lc in zip(members, loaded)}
    eval_difficulty = eval_difficulty or shared_difficulty(members, resolved)
    index = {c.id: k for k, c in enumerate(members)}
    num_agents = loaded[0].cfg.env.num_agents
    if len(cells) == 1:
        slots = [index[cells[0].id]] * num_agents
    elif len(cells) == num_agents:
        slots = [index[c.id] for c in cells]
    else:
        raise UsageError(
            f"team {team!r} names {len(cells)} cells but the env has {num_agents} agents: "
            "name one cell (self-play) or one per agent slot"
        )
    if path is None:
        path = default_out(cells, eval_difficulty, episode)
    return render_team(
        [lc.cfg for lc in loaded],
        [lc.weights for lc in loaded],
        slots,
        out=path,
        names=[c.id for c in members],
        eval_difficulty=eval_difficulty,
        episode=episode,
        max_steps=max_steps,
        fps=fps,
        scale=scale,
        on_env_mismatch=on_env_mismatch,
        on_frame=on_frame,
        on_progress=on_progress,
    )


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


__all__ = ["RenderResult", "algorithm_clips", "check_output", "render_episode", "render_team"]
