"""Video files written frame by frame: animated GIF (:class:`GifWriter`) and MP4 through
ffmpeg (:class:`Mp4Writer`, :func:`ffmpeg_exe`).

Frames go to the file as they come: :class:`GifWriter` writes one frame after another into
the file, each a full image with its own palette; :class:`Mp4Writer` pipes raw RGB frames to
an ffmpeg subprocess. Nothing but the current frame is held, so memory stays bounded
whatever the episode length. :func:`gif_frames` reads a GIF's frames back (tests, notebooks).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import numpy as np

from alem_eval.core.errors import EvaluationError, UsageError
from alem_eval.core.extras import install_hint, optional

SUFFIXES: tuple[str, ...] = (".gif", ".mp4")
DEFAULT_FPS = 10.0
MAX_FPS = 50.0  # GIF delays are whole centiseconds; viewers slow anything faster down


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


def gif_frames(path: str | Path) -> Iterator[np.ndarray]:
    """The frames of a GIF as RGB arrays, one at a time (tests, notebooks)."""
    from PIL import Image

    with Image.open(path) as img:
        for i in range(getattr(img, "n_frames", 1)):
            img.seek(i)
            yield np.asarray(img.convert("RGB"))


__all__ = ["GifWriter", "Mp4Writer", "ffmpeg_exe", "gif_frames"]
