"""Draw one greedy episode with the environment's own pixel renderer (``alem-eval render``).

The episode is exactly the one ``score --protocol fast`` plays as episode ``i``: world
``PRNGKey(9999 + i)``, step keys threaded from ``fold_in(PRNGKey(9999 + i), 1)`` with the
evaluator's 3-way split per step (key, act key unused, env key), the greedy actions of
:func:`alem_eval.evaluate.teams.team_actions` (action masking as each member's config says) and
the eval env's ``step``, all on a batch of one slot -- the shapes ``run_teams`` uses for a
single episode, so its actions, length and return are those of
``run_teams(..., num_episodes=1)`` bit for bit (with more episodes in the batch, float
rounding in the policies' matmuls may, in rare near-ties, pick another action).

Any team plays: one cell drives every agent (self-play) or ``A+B+C`` names the cell of
each agent slot (mixed teams, any algorithms).

Streaming: the host calls one jitted env+policy step per env step
(:class:`EpisodePlayer`), draws the new state with alem's ``render_alem_pixels`` and hands
the frame to the writer at once (:class:`GifWriter`: one frame after another into the file,
each with its own palette; :class:`Mp4Writer`: raw frames piped to ffmpeg, :func:`ffmpeg_exe`).
Memory stays bounded whatever the episode length; nothing but the current state is kept.

Frames: frame 0 is the reset world, frame ``t`` the state after step ``t``, so a video
of an episode of ``T`` steps has ``T + 1`` frames. Each frame is the renderer's per-agent
views (``[P, H, W, 3]``, the 9x11-tile view and inventory each agent sees) side by side,
scaled by an integer factor, above a caption strip (:func:`caption_lines`): the step,
the team's distinct achievements so far (and those unlocked at this step), and under
each agent's view its cell, the action it took and, when the action space has comm
channels, the comm signal it sent.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NamedTuple

import numpy as np

from alem_eval.algorithms.config import DIFFICULTIES
from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.core.extras import install_hint, optional

SUFFIXES: tuple[str, ...] = (".gif", ".mp4")
DEFAULT_FPS = 10.0
MAX_FPS = 50.0  # GIF delays are whole centiseconds; viewers slow anything faster down
DEFAULT_SCALE = 1
MAX_SCALE = 8
BLOCK_PIXELS = 16  # alem's BLOCK_PIXEL_SIZE_IMG: the renderer's tile size in pixels
MAX_EPISODE = 2**31 - 1 - 9999  # PRNGKey(9999 + i) takes an int32 seed

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


def check_episode(episode: int) -> None:
    if (
        isinstance(episode, bool)
        or not isinstance(episode, (int, np.integer))
        or not 0 <= episode <= MAX_EPISODE
    ):
        raise UsageError(
            f"--episode must be an integer from 0 to {MAX_EPISODE} (episode i is the world "
            f"PRNGKey(9999 + i) of the fast protocol), got {episode!r}"
        )


def ffmpeg_exe() -> str | None:
    """The ffmpeg executable on PATH, else the one the ``video`` extra installs
    (imageio-ffmpeg's bundled binary, built with libx264), else None."""
    found = shutil.which("ffmpeg")
    if found is None and (bundled := optional("imageio_ffmpeg")) is not None:
        try:
            found = str(bundled.get_ffmpeg_exe())
        except RuntimeError:  # a platform without a bundled binary
            return None
    return found


# ----------------------------------------------------------------------------------------
# Playing one episode, one jitted step at a time
# ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class EpisodeStep:
    """The episode after ``t`` steps (``t = 0``: the reset world)."""

    t: int
    state: Any = field(repr=False)  # the env state (unbatched, on the device)
    actions: np.ndarray | None  # [P] int32: the actions of step t (None at t = 0)
    rewards: np.ndarray | None  # [P] float32: their rewards (None at t = 0)
    team_reward: float  # float32 mean over agents (what the episode return sums); 0 at t = 0
    comm: np.ndarray  # [P] int: the comm channel each agent signalled at step t, -1: none
    achievements: np.ndarray  # [num_achievements] bool: unlocked by any agent so far
    last: bool  # the episode ends here (the env said done, or the step cap)
    terminated: bool  # the env said done


class EpisodePlayer:
    """One ``fast``-protocol episode of a team, stepped from the host.

    ``cfgs[k]`` / ``weights[k]`` describe checkpoint ``k``; ``team[s]`` is the checkpoint
    driving agent slot ``s``. Iterating yields :class:`EpisodeStep` s for ``t = 0 ..
    length``; each step is one call of a jitted function (the policies of every role and
    one env step, on a batch of one slot, as :class:`alem_eval.evaluate.machine.Machine` steps).
    """

    def __init__(
        self,
        cfgs: Sequence[Any],
        weights: Sequence[Any],
        team: Sequence[int],
        *,
        eval_difficulty: str,
        episode: int = 0,
        max_steps: int | None = None,
        on_env_mismatch: str = "error",
    ):
        import jax

        from alem_eval.evaluate.group import _stack
        from alem_eval.evaluate.rollout import _policy_variables
        from alem_eval.evaluate.settings import (
            FAST_MAX_STEPS,
            check_env_version,
            check_settings,
            eval_statics,
        )
        from alem_eval.evaluate.teams import batch_structure, check_team, team_roles
        from alem_eval.model.networks import build_network
        from alem_eval.model.policies import make_policy

        check_episode(episode)
        check_settings("fast", None, max_steps)
        if eval_difficulty not in DIFFICULTIES:
            raise UsageError(
                f"unknown eval difficulty {eval_difficulty!r} "
                f"(expected one of {', '.join(DIFFICULTIES)})"
            )
        if jax.config.jax_threefry_partitionable or jax.config.jax_enable_x64:  # type: ignore[attr-defined]
            raise EvaluationError(
                "render needs jax_threefry_partitionable=False and jax_enable_x64=False "
                "(the PRNG mode and precision of the fast protocol's worlds and keys)"
            )
        team = tuple(int(m) for m in team)
        statics = [eval_statics(c) for c in cfgs]
        specs = [build_network(c) for c in cfgs]
        for k, cfg in enumerate(cfgs):
            check_env_version(cfg, on_mismatch=on_env_mismatch, where=f"checkpoint {k}")
        check_team(0, team, cfgs, statics, "fast")
        for m in set(team):
            if statics[m].input_dim != specs[m].input_dim:
                raise EvaluationError(
                    f"checkpoint {m} ({cfgs[m].algorithm}): the network expects inputs of width "
                    f"{specs[m].input_dim} but the eval env gives {statics[m].input_dim}"
                )
        self.team = team
        self.eval_difficulty = eval_difficulty
        self.episode = int(episode)
        self.max_steps = int(max_steps or FAST_MAX_STEPS)
        self.world = statics[team[0]].world
        self.num_agents = self.world.num_agents
        self.num_comm_channels = self.world.num_comm_channels
        keys, group_specs, classes, _ = batch_structure([team], cfgs, specs)
        members, _slots = team_roles(team)
        masking = any(cfgs[m].env.action_masking for m in team)
        self._step = _step_program(
            keys, classes, self.world, masking, tuple(make_policy(s) for s in group_specs)
        )
        variables = tuple(
            _policy_variables(specs[m], weights[m], f"checkpoint {m}") for m in members
        )
        # Per class (one), per role: the member's variables with a leading team axis of one.
        self._variables = (tuple(_stack([v]) for v in variables),)
        self._use_mask = (tuple(np.array([cfgs[m].env.action_masking]) for m in members),)
        self._classes = classes

    def __iter__(self) -> Iterator[EpisodeStep]:
        import jax

        from alem_eval.evaluate.group import _resets
        from alem_eval.evaluate.settings import fast_keys
        from alem_eval.evaluate.teams import init_team_carries

        env = self._step.env
        dyn = env.difficulty_params(self.eval_difficulty)
        worlds, chains = fast_keys(self.episode + 1)
        obs, state = _resets(self.world, dyn, [worlds[self.episode]])  # [1, ...]
        carry = _Carry(
            key=chains[self.episode][None],
            state=state,
            obs=obs,
            dones=np.zeros((1, self.num_agents), bool),
            policy=init_team_carries(self._step.policies, self._classes, 1),
        )
        view = jax.tree_util.tree_map(lambda x: x[0], state)
        unlocked = np.asarray(np.asarray(view.achievements).any(axis=0))
        none = np.full(self.num_agents, -1)
        yield EpisodeStep(0, view, None, None, 0.0, none, unlocked, False, False)
        step = functools.partial(self._step.fn, self._variables, self._use_mask, dyn)
        pending = step(carry)
        for t in range(1, self.max_steps + 1):
            carry, out = pending
            if t < self.max_steps:  # queue the next step while the host draws this one
                pending = step(carry)
            actions, rewards, team_reward, done, unlocked, comm = jax.device_get(
                (out.actions, out.rewards, out.team_reward, out.done, out.achievements, out.comm)
            )
            terminated = bool(done)
            yield EpisodeStep(
                t,
                out.state,
                np.asarray(actions),
                np.asarray(rewards),
                float(team_reward),
                np.asarray(comm),
                np.asarray(unlocked),
                terminated or t >= self.max_steps,
                terminated,
            )
            if terminated:
                return


class _Carry(NamedTuple):
    """What one step hands the next (leading axis: one batch slot)."""

    key: Any  # [1, 2] the threaded step key
    state: Any  # the env state
    obs: Any  # [1, P, obs_dim] raw observations
    dones: Any  # [1, P] bool: fed back as reset flags
    policy: Any  # per class, per role: the recurrent state


class _StepOut(NamedTuple):
    state: Any  # the new env state, unbatched (what the renderer draws)
    actions: Any  # [P] int32
    rewards: Any  # [P] float32
    team_reward: Any  # [] float32: their mean, computed as the evaluator computes it
    done: Any  # [] bool
    achievements: Any  # [num_achievements] bool, any agent
    comm: Any  # [P] int32: channel signalled this step, -1: none


@dataclass(frozen=True)
class _StepProgram:
    fn: Callable
    env: Any
    policies: tuple


_STEP_PROGRAMS: dict[tuple, _StepProgram] = {}


def _step_program(keys, classes, world, masking: bool, policies) -> _StepProgram:
    """The jitted one-step function of a team structure (cached per process)."""
    import dataclasses

    import jax
    import jax.numpy as jnp

    from alem_eval.envs.eval_env import get_eval_env

    from alem_eval.evaluate.teams import team_actions

    cache_key = (keys, classes, world, masking)
    found = _STEP_PROGRAMS.get(cache_key)
    if found is not None:
        return found
    env = get_eval_env(world)
    mask_env = get_eval_env(dataclasses.replace(world, action_masking=True)) if masking else None
    nc = world.num_comm_channels
    comm_base = world.num_actions - nc

    def step(variables, use_mask, dyn, c: _Carry) -> tuple[_Carry, _StepOut]:
        # As the evaluator's program: the policies' constants (HyperMARL's heads) are
        # computed in the same compiled call, vmapped over the class's team axis.
        params = tuple(
            tuple(
                jax.vmap(policies[role.group].prepare)(variables[ci][r])
                for r, role in enumerate(cls.roles)
            )
            for ci, cls in enumerate(classes)
        )
        split = jax.vmap(lambda k: jax.random.split(k, 3))(c.key)  # act key unused: greedy
        key, env_key = split[:, 0], split[:, 2]
        mask = None if mask_env is None else jax.vmap(mask_env.action_mask, (0, None))(c.state, dyn)
        policy_carry, actions = team_actions(
            policies,
            classes,
            params,
            use_mask,
            c.policy,
            c.obs,
            c.dones,
            mask,
            episodes=1,
            num_actions=world.num_actions,
        )
        out = jax.vmap(env.step, (0, 0, 0, None))(env_key, c.state, actions, dyn)
        channel = actions[0] - comm_base
        new = _Carry(key, out.state, out.obs, out.agent_dones, policy_carry)
        state = jax.tree_util.tree_map(lambda x: x[0], out.state)
        return new, _StepOut(
            state=state,
            actions=actions[0],
            rewards=out.reward[0],
            team_reward=jnp.mean(out.reward, axis=-1)[0],
            done=out.done[0],
            achievements=jnp.any(state.achievements, axis=0),
            comm=jnp.where((channel >= 0) & (channel < nc), channel, -1),
        )

    prog = _STEP_PROGRAMS[cache_key] = _StepProgram(jax.jit(step), env, policies)
    return prog


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


# ----------------------------------------------------------------------------------------
# Writers: frames go to the file as they come
# ----------------------------------------------------------------------------------------
def _palette_image(frame: np.ndarray):
    """``frame [H, W, 3]`` uint8 -> a PIL "P" image: its exact colours when it has at most
    256, else an octree palette of 256 (no dithering; a rendered frame, with its
    anti-aliased caption, has a few hundred)."""
    from PIL import Image

    rgb = Image.fromarray(frame, "RGB")
    counted = rgb.getcolors(256)  # None: more than 256 colours
    if counted is None:
        return rgb.quantize(256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)

    def packed(rgb_values: np.ndarray) -> np.ndarray:
        v = rgb_values.astype(np.uint32)
        return (v[..., 0] << 16) | (v[..., 1] << 8) | v[..., 2]

    table = np.sort(packed(np.array([colour for _, colour in counted])))
    index = np.searchsorted(table, packed(frame))
    img = Image.fromarray(index.astype(np.uint8), "P")
    palette = np.stack([(table >> 16) & 255, (table >> 8) & 255, table & 255], axis=1)
    img.putpalette(palette.astype(np.uint8).tobytes())
    return img


class GifWriter:
    """An animated GIF written one frame at a time into ``fh`` (each frame a full image
    with its own colour table, shown for ``1/fps`` s; loops forever). Nothing but the
    current frame is held."""

    def __init__(self, fh: IO[bytes], fps: float = DEFAULT_FPS):
        self.fh = fh
        self.delay_ms = max(10, round(100 / fps) * 10)
        self.frames = 0
        self.size: tuple[int, int] | None = None

    def add(self, frame: np.ndarray) -> None:
        from PIL import GifImagePlugin

        img = _palette_image(frame)
        if self.size is None:
            self.size = img.size
            header, _ = GifImagePlugin.getheader(img, info={"loop": 0, "duration": self.delay_ms})
            for part in header:
                self.fh.write(part)
        elif img.size != self.size:
            raise EvaluationError(f"frame of size {img.size} in a GIF of size {self.size}")
        data = GifImagePlugin.getdata(
            img, duration=self.delay_ms, disposal=1, include_color_table=True
        )
        for part in data:
            self.fh.write(part)
        self.frames += 1

    def close(self) -> None:
        self.fh.write(b";")  # trailer


class Mp4Writer:
    """H.264 video through an ffmpeg subprocess: raw RGB frames on its stdin, written to
    ``path`` (dimensions padded to even numbers, yuv420p for every player)."""

    def __init__(self, path: Path, fps: float = DEFAULT_FPS, exe: str | None = None):
        self.path = path
        self.fps = fps
        self.exe = exe or ffmpeg_exe()
        if self.exe is None:
            raise UsageError(f"writing .mp4 needs ffmpeg: {install_hint('imageio_ffmpeg')}")
        self.proc: subprocess.Popen | None = None
        self.size: tuple[int, int] | None = None
        self.frames = 0

    def _start(self, w: int, h: int) -> None:
        assert self.exe is not None
        cmd = [
            self.exe, "-loglevel", "error", "-y",
            "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{w}x{h}", "-r", f"{self.fps:g}",
            "-i", "-", "-an", "-vf", "pad=ceil(iw/2)*2:ceil(ih/2)*2",
            "-c:v", "libx264", "-pix_fmt", "yuv420p", "-f", "mp4", str(self.path),
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)

    def add(self, frame: np.ndarray) -> None:
        h, w = frame.shape[:2]
        if self.proc is None:
            self.size = (w, h)
            self._start(w, h)
        elif (w, h) != self.size:
            raise EvaluationError(f"frame of size {(w, h)} in a video of size {self.size}")
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(np.ascontiguousarray(frame, np.uint8).tobytes())
        except BrokenPipeError:
            self._finish()
        self.frames += 1

    def _finish(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(BrokenPipeError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
        code = self.proc.wait()
        if code != 0:
            last = (err.strip().splitlines() or ["no message"])[-1]
            raise EvaluationError(f"ffmpeg failed writing {self.path} (exit {code}): {last}")

    def close(self) -> None:
        if self.proc is not None:
            self._finish()

    def abort(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


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
    from alem_eval.scoring.crossplay import _shared_difficulty
    from alem_eval.evaluate.settings import check_eval_difficulty
    from alem_eval.model.loader import load_cell

    check_episode(episode)
    if eval_difficulty is not None:
        check_eval_difficulty(eval_difficulty)
    cells = resolve_team(source, team, difficulties)
    path = Path(out) if out is not None else None
    if path is not None:
        check_output(path, fps, scale)
    members = list({c.id: c for c in cells}.values())
    loaded = []
    for c in members:
        loaded.append(
            load_cell(
                source.local_dir(c),
                algorithm=c.algorithm,
                difficulty=c.difficulty,
                seed=c.seed,
                policy_only=True,
                where=c.id,
            )
        )
    resolved = {c.id: (lc.cell_dir, lc.cfg, lc.spec) for c, lc in zip(members, loaded)}
    eval_difficulty = eval_difficulty or _shared_difficulty(members, resolved)
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


def gif_frames(path: str | Path) -> Iterator[np.ndarray]:
    """The frames of a GIF as RGB arrays, one at a time (tests, notebooks)."""
    from PIL import Image

    with Image.open(path) as img:
        for i in range(getattr(img, "n_frames", 1)):
            img.seek(i)
            yield np.asarray(img.convert("RGB"))


__all__ = [
    "Caption",
    "EpisodePlayer",
    "EpisodeStep",
    "FrameDrawer",
    "GifWriter",
    "Mp4Writer",
    "RenderResult",
    "achievement_names",
    "action_names",
    "algorithm_clips",
    "caption_lines",
    "caption_strip",
    "check_output",
    "compose_frame",
    "gif_frames",
    "render_episode",
    "render_team",
]
