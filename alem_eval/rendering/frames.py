"""Draw a frame of an episode: alem's pixel renderer per agent, side by side, above a caption.

Each frame is the renderer's per-agent views (``[P, H, W, 3]``, the 9x11-tile view and
inventory each agent sees) side by side, scaled by an integer factor, above a caption strip
(:func:`caption_lines`): the step, the team's distinct achievements so far (and those
unlocked at this step), and under each agent's view its cell, the action it took and, when
the action space has comm channels, the comm signal it sent. :class:`FrameDrawer` holds
what a world's frames share (textures, names, agent colours); :func:`compose_frame` and
:func:`caption_strip` are plain array / PIL functions.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from alem_eval.rendering.player import EpisodeStep

DEFAULT_SCALE = 1
MAX_SCALE = 8
BLOCK_PIXELS = 16  # alem's BLOCK_PIXEL_SIZE_IMG: the renderer's tile size in pixels

_GAP = 4  # pixels between two agents' views (before scaling)
_BACKGROUND = (24, 24, 28)
_TEXT = (235, 235, 235)
_HIGHLIGHT = (255, 214, 102)
_FONT_SIZE = 11
_LINE = 14  # caption line height, pixels (before scaling)
_PAD = 4


# ----------------------------------------------------------------------------------------
# Names: actions and achievements of the installed environment
# ----------------------------------------------------------------------------------------
def _alem_constants():
    from alem_eval.envs.loader import import_alem

    import_alem()  # the quiet first import (the texture cache message goes nowhere)
    from alem.alem_coop import constants

    return constants


def action_names(num_agents: int, num_comm_channels: int) -> list[list[str]]:
    """``names[agent][action]``: alem's ``Action`` names, then one ``GIVE->a<j>`` per
    teammate (slot ``k`` gives to the ``k``-th other agent, as the env's trade logic
    reads it), then ``COMM_<c>`` per comm channel."""
    c = _alem_constants()
    give = c.Action.GIVE.value
    base = [a.name for a in sorted(c.Action, key=lambda a: a.value) if a.value < give]
    out = []
    for agent in range(num_agents):
        others = [j for j in range(num_agents) if j != agent]
        gives = [f"GIVE->a{j}" for j in others] or ["GIVE"]
        out.append(base + gives + [f"COMM_{k}" for k in range(num_comm_channels)])
    return out


def achievement_names() -> list[str]:
    """alem's ``Achievement`` names (lower case), in index order."""
    c = _alem_constants()
    return [a.name.lower() for a in sorted(c.Achievement, key=lambda a: a.value)]


# ----------------------------------------------------------------------------------------
# Drawing a frame
# ----------------------------------------------------------------------------------------
class FrameDrawer:
    """alem's ``render_alem_pixels`` for one world's statics, plus the caption strip."""

    def __init__(self, world: Any, labels: Sequence[str], *, scale: int = DEFAULT_SCALE):
        from alem_eval.envs.eval_env import get_eval_env

        c = _alem_constants()
        from alem.alem_coop.renderer.renderer_pixels import render_alem_pixels

        self._render = render_alem_pixels
        self.static_params = get_eval_env(world).static_env_params
        self.textures = c.load_player_specific_textures(c.TEXTURES[BLOCK_PIXELS], world.num_agents)
        self.labels = list(labels)
        self.scale = scale
        self.actions = action_names(world.num_agents, world.num_comm_channels)
        self.achievements = achievement_names()
        self.num_comm_channels = world.num_comm_channels
        self.colors = _agent_colors(world.num_agents)

    def pixels(self, state: Any) -> np.ndarray:
        """The renderer's output for ``state``: ``[P, H, W, 3]`` uint8 (its float pixels
        cast as upstream's language wrapper casts them)."""
        out = self._render(state, BLOCK_PIXELS, self.static_params, self.textures)
        return np.asarray(out).astype(np.uint8)

    def caption(self, step: EpisodeStep, before: np.ndarray | None, max_steps: int) -> Caption:
        return caption_lines(
            step,
            before,
            max_steps=max_steps,
            labels=self.labels,
            action_names=self.actions,
            achievement_names=self.achievements,
            comm=self.num_comm_channels > 0,
        )

    def frame(self, step: EpisodeStep, before: np.ndarray | None, max_steps: int) -> np.ndarray:
        """The full frame of ``step``: views side by side above the caption strip."""
        return compose_frame(
            self.pixels(step.state),
            self.caption(step, before, max_steps),
            scale=self.scale,
            colors=self.colors,
        )


def _agent_colors(n: int) -> list[tuple[int, int, int]]:
    """Each agent's colour: the palette alem's constants tint the player sprites with
    (seaborn's ``husl_palette(P, h=0.5, l=0.5)``, as ``load_player_specific_textures``)."""
    husl_palette = _alem_constants().husl_palette
    return [(int(r * 255), int(g * 255), int(b * 255)) for r, g, b in husl_palette(n, h=0.5, l=0.5)]


@dataclass(frozen=True)
class Caption:
    """The text of one frame's caption strip: a header line and lines under each view."""

    header: str
    highlight: str  # drawn after the header in the highlight colour ("" if none)
    agents: tuple[tuple[str, ...], ...]  # per agent, its lines


def caption_lines(
    step: EpisodeStep,
    before: np.ndarray | None,
    *,
    max_steps: int,
    labels: Sequence[str],
    action_names: Sequence[Sequence[str]],
    achievement_names: Sequence[str],
    comm: bool,
) -> Caption:
    """The caption of ``step`` (``before``: the team's achievements one step earlier)."""
    n = int(step.achievements.sum())
    header = f"step {step.t}/{max_steps}   team achievements {n}/{len(achievement_names)}"
    if step.last:
        header += "   (episode over)" if step.terminated else "   (step cap)"
    new = [] if before is None else np.flatnonzero(step.achievements & ~before).tolist()
    highlight = ("   + " + ", ".join(achievement_names[i] for i in new)) if new else ""
    agents = []
    for a, label in enumerate(labels):
        lines = [f"a{a}  {label}"]
        lines.append("-" if step.actions is None else action_names[a][int(step.actions[a])])
        if comm:
            ch = int(step.comm[a])
            lines.append(f"comm: ch{ch}" if ch >= 0 else "comm: -")
        agents.append(tuple(lines))
    return Caption(header, highlight, tuple(agents))


@functools.cache
def _font(scale: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=_FONT_SIZE * scale)


def compose_frame(
    pixels: np.ndarray,
    caption: Caption,
    *,
    scale: int = DEFAULT_SCALE,
    colors: Sequence[tuple[int, int, int]] | None = None,
) -> np.ndarray:
    """``pixels [P, H, W, 3]`` uint8 (the renderer's views) -> one RGB frame: the views
    side by side (``_GAP`` pixels apart), each pixel repeated ``scale`` times in both
    directions, above :func:`caption_strip`. The views occupy the top ``H * scale`` rows
    unchanged; view ``a`` starts at column ``a * (W + _GAP) * scale``."""
    p, h, w, _ = pixels.shape
    gap = _GAP * scale
    width = p * w * scale + (p - 1) * gap
    views = np.empty((h * scale, width, 3), np.uint8)
    views[:] = _BACKGROUND
    for a in range(p):
        big = pixels[a].repeat(scale, axis=0).repeat(scale, axis=1)
        x = a * (w * scale + gap)
        views[:, x : x + w * scale] = big
    strip = caption_strip(
        caption, width=width, view_width=w * scale, gap=gap, scale=scale, colors=colors
    )
    return np.concatenate([views, strip], axis=0)


def caption_strip(
    caption: Caption,
    *,
    width: int,
    view_width: int,
    gap: int,
    scale: int = DEFAULT_SCALE,
    colors: Sequence[tuple[int, int, int]] | None = None,
) -> np.ndarray:
    """The caption as an RGB strip ``[rows, width, 3]``: the header across the top, each
    agent's lines under its view (its label in the agent's colour)."""
    from PIL import Image, ImageDraw

    line, pad = _LINE * scale, _PAD * scale
    rows = max((len(a) for a in caption.agents), default=0)
    height = pad + line * (1 + rows) + pad
    img = Image.new("RGB", (width, height), _BACKGROUND)
    draw = ImageDraw.Draw(img)
    font = _font(scale)
    draw.text((pad, pad), caption.header, fill=_TEXT, font=font)
    if caption.highlight:
        x = pad + draw.textlength(caption.header, font=font)
        draw.text((x, pad), caption.highlight, fill=_HIGHLIGHT, font=font)
    for a, lines in enumerate(caption.agents):
        x = a * (view_width + gap) + pad
        for i, text in enumerate(lines):
            fill = colors[a] if (colors is not None and i == 0) else _TEXT
            draw.text((x, pad + line * (1 + i)), text, fill=fill, font=font)
    return np.asarray(img)


__all__ = [
    "Caption",
    "FrameDrawer",
    "achievement_names",
    "action_names",
    "caption_lines",
    "caption_strip",
    "compose_frame",
]
