"""Progress for people, on stderr: the one console every layer writes its live display to.

Data goes to stdout (the commands' renderers); progress, notes and warnings go here, in a
terminal as live bars, in a batch log as a line every so often, in Jupyter as rich's
notebook display. :class:`EpisodeBar` shows evaluated episodes, :class:`DownloadBar` the
bytes a Hub pull downloads (the sources themselves draw nothing).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console

err_console = Console(stderr=True)


# ========================================================================================
# The progress reporter: score, compare, crossplay, dataset export, render and train.
# Library functions take callbacks (``on_progress``, ``on_episodes``) and never draw;
# a command (or the public API) hands them a Reporter's methods.
# ========================================================================================
_QUIET = [False]  # inside quiet_progress(True): every Reporter draws and prints nothing


@contextlib.contextmanager
def quiet_progress(quiet: bool = True) -> Iterator[None]:
    """Inside: no progress on stderr (``--quiet``): every :class:`Reporter` (episode
    bars, download bars, step bars, their lines and notes) is silent and
    :func:`download_bar` gives None. Warnings, errors and what a command prints as its
    result are not progress: they still print."""
    before = _QUIET[0]
    _QUIET[0] = before or quiet
    try:
        yield
    finally:
        _QUIET[0] = before


def live_display() -> bool:
    """Whether progress redraws in place on stderr: a terminal, or a Jupyter notebook
    with ipywidgets (rich's Progress renders there as a live widget); else a batch log
    (lines). Never inside :func:`quiet_progress`."""
    if _QUIET[0]:
        return False
    if err_console.is_jupyter:
        import importlib.util

        return importlib.util.find_spec("ipywidgets") is not None
    return err_console.is_terminal


class Reporter:
    """One progress display on stderr, for every task a run reports (a bar each).

    Live (:func:`live_display`: a terminal or Jupyter): rich bars redrawn in place, notes
    printed above them. Otherwise (a batch log): each task's own line at most every
    ``every_s`` seconds (``force``: always), ``dated`` with the time of day, and with
    ``last_line`` the newest line of each task not yet printed at the end. ``note`` prints
    a line either way.

    Callbacks for the library: ``note`` is an ``on_progress(message)``; :meth:`steps` makes
    an ``on_progress(done, total)``; :class:`EpisodeBar` takes ``on_episodes`` and
    ``on_progress(message, done, total)``. Made inside :func:`quiet_progress`, it shows
    nothing at all.
    """

    def __init__(
        self,
        *,
        every_s: float = 30.0,
        live: bool | None = None,
        dated: bool = False,
        last_line: bool = True,
    ):
        from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

        self.quiet = _QUIET[0]
        self.live = not self.quiet and (live_display() if live is None else live)
        self.every_s = every_s
        self.dated = dated
        self.last_line = last_line
        self._t0 = time.perf_counter()
        self._tasks: dict[str, TaskID] = {}
        self._printed: dict[str, float] = {}  # each task's last throttled line: its clock
        self._pending: dict[str, str] = {}  # each task's newest line not printed yet
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            console=err_console,
            disable=not self.live,
            transient=False,
        )

    def __enter__(self) -> Reporter:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(None, None, None)
        if not self.live and self.last_line:
            for line in self._pending.values():
                self._print_line(line)
        self._pending.clear()

    def elapsed(self) -> float:
        """Seconds since the reporter was made."""
        return time.perf_counter() - self._t0

    def note(self, message: str, *, soft_wrap: bool = False) -> None:
        """One line (rich markup), above the bars when live (``soft_wrap``: never broken
        into several: a long path stays one line)."""
        if not self.quiet:
            err_console.print(message, highlight=False, soft_wrap=soft_wrap)

    def task(self, key: str, description: str, total: float | None = None) -> None:
        """Show task ``key``'s bar now (live), before its first report."""
        if self.live and key not in self._tasks:
            self._tasks[key] = self._progress.add_task(description, total=total, count="", info="")

    def update(
        self,
        key: str,
        *,
        description: str,
        completed: float,
        total: float | None,
        count: str = "",
        info: str = "",
        line: str | None = None,
        clock: float | None = None,
        force: bool = False,
    ) -> None:
        """Task ``key``'s state: its bar when live; else its ``line`` (plain text) when
        ``force`` or ``every_s`` has passed on ``clock`` (default: the reporter's seconds)
        since its last throttled line."""
        if self.live:
            self.task(key, description, total)
            self._progress.update(
                self._tasks[key],
                description=description,
                completed=completed,
                total=total,
                count=count,
                info=info,
            )
            return
        if line is None:
            return
        now = self.elapsed() if clock is None else clock
        if force or now - self._printed.get(key, float("-inf")) >= self.every_s:
            if not force:
                self._printed[key] = now
            self._pending.pop(key, None)
            self._print_line(line)
        else:
            self._pending[key] = line

    def steps(
        self, key: str, description: str, line: Callable[[int, int, float], str]
    ) -> Callable[[int, int], None]:
        """An ``on_progress(done, total)`` drawing task ``key`` (``done/total`` in its bar);
        off a terminal ``line(done, total, seconds)`` every ``every_s`` seconds from now."""
        self._printed[key] = self.elapsed()
        self.task(key, description)

        def on_progress(done: int, total: int) -> None:
            now = self.elapsed()
            self.update(
                key,
                description=description,
                completed=done,
                total=total,
                count=f"{done}/{total}",
                line=line(done, total, now),
                clock=now,
            )

        return on_progress

    def _print_line(self, line: str) -> None:
        if self.quiet:
            return
        stamp = f"{time.strftime('%Y-%m-%d %H:%M:%S')} " if self.dated else ""
        err_console.print(stamp + line, highlight=False, markup=False, soft_wrap=True)


class EpisodeBar:
    """Evaluated episodes on a :class:`Reporter`: episodes done / total, live env-steps/s
    and ETA. ``update`` is an ``on_episodes``: it takes
    :class:`alem_eval.evaluate.rollout.RolloutProgress` (anything with ``episodes_done``,
    ``episodes_total``, ``live_steps``, ``elapsed_s``); ``cell_done`` is an
    ``on_progress(message, done, total)``; ``note`` an ``on_progress(message)``.

    Rates and the ETA count from the first report (the first call also compiles). Live it
    redraws in place; otherwise (batch logs) it prints a line at most every ``every_s``
    seconds of the reports' own clock, and the last state at the end.
    """

    def __init__(self, label: str = "score", *, every_s: float = 30.0, live: bool | None = None):
        self.label = label
        self.reporter = Reporter(every_s=every_s, live=live)
        self.live = self.reporter.live
        self._base: Any = None  # the first report: rates count from there
        self.reporter.task("episodes", f"[bold]{label}[/] episodes")

    def __enter__(self) -> EpisodeBar:
        self.reporter.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.reporter.__exit__(*exc)

    def note(self, message: str) -> None:
        self.reporter.note(message)

    def cell_done(self, message: str, done: int, total: int) -> None:
        """The scoring functions' ``on_progress(message, done, total)``: one line,
        ``[done/total] message (seconds since the bar started)``."""
        self.note(f"[{done}/{total}] {message} ({self.reporter.elapsed():.0f}s)")

    def rates(self, p: Any) -> tuple[float, float | None]:
        """(live env-steps/s, seconds left or None) since the first report."""
        if self._base is None or p.elapsed_s <= self._base.elapsed_s:
            return 0.0, None
        dt = p.elapsed_s - self._base.elapsed_s
        steps_rate = (p.live_steps - self._base.live_steps) / dt
        episodes_rate = (p.episodes_done - self._base.episodes_done) / dt
        left = p.episodes_total - p.episodes_done
        return steps_rate, (left / episodes_rate if episodes_rate > 0 else None)

    def update(self, p: Any) -> None:
        if self._base is None or p.episodes_total != self._base.episodes_total:
            self._base = p
        rate, eta = self.rates(p)
        left = f", ETA {eta:.0f}s" if eta is not None and p.episodes_done < p.episodes_total else ""
        speed = f" ({rate:,.0f}/s)" if rate else ""  # none yet on the first report
        self.reporter.update(
            "episodes",
            description=f"[bold]{self.label}[/] episodes",
            completed=p.episodes_done,
            total=p.episodes_total,
            count=f"{p.episodes_done}/{p.episodes_total}",
            info=" ".join(
                x
                for x in (
                    f"{rate:,.0f} env-steps/s" if rate else "",
                    f"ETA {eta:.0f}s" if eta is not None else "",
                )
                if x
            ),
            line=f"episodes {p.episodes_done}/{p.episodes_total}, {p.live_steps:,} env steps"
            f"{speed}, {p.elapsed_s:.0f}s{left}",
            clock=p.elapsed_s,
        )


def steps_line(label: str) -> Callable[[int, int, float], str]:
    """A batch log's line for ``label``'s steps: ``render: 40 steps of at most 40, 46s``."""

    def line(done: int, total: int, seconds: float) -> str:
        return f"{label}: {done} step{'' if done == 1 else 's'} of at most {total}, {seconds:.0f}s"

    return line


@contextlib.contextmanager
def steps_progress(label: str, *, show: bool = True) -> Iterator[Callable[[int, int], None]]:
    """The ``on_progress(steps done, max steps)`` of one episode (render, a recording): a
    bar when live; in a batch log a line every 30 s and the last state at the end (the
    first step waits for the compile, so without it the log would end at "1 step of at
    most 40" for a whole episode). ``show`` False: a callback that shows nothing."""
    if not show:
        yield lambda done, total: None
        return
    with Reporter() as progress:
        yield progress.steps(label, f"[bold]{label}[/] steps", steps_line(label))


# ========================================================================================
# (end of the progress reporter)
# ========================================================================================


class DownloadBar:
    """The ``pull`` task on stderr: files done, bytes downloaded of the total and the speed
    of each pull that downloads anything, drawn by a :class:`Reporter` (live: a bar; in a
    batch log: a line at most every 30 s). A source's ``on_download``
    (:class:`alem_eval.hub.transfer.DownloadProgress`): ``start``, ``update``, ``stop``.
    Make one with :func:`download_bar`.
    """

    def __init__(self, label: str = "pull", *, live: bool = True):
        self.label = label
        self.live = live
        self._reporter: Reporter | None = None
        self._files_total = 0
        self._total_bytes = 0

    def start(self, total_bytes: int, files_total: int) -> None:
        self.stop()  # (a pull that failed before it said so)
        self._files_total, self._total_bytes = files_total, total_bytes
        self._reporter = Reporter(live=self.live).__enter__()
        self.update(0, 0)

    def update(self, done_bytes: int, files_done: int) -> None:
        from alem_eval.core.units import format_bytes

        r = self._reporter
        if r is None:
            return
        seconds = r.elapsed()
        speed = f"{format_bytes(int(done_bytes / seconds))}/s" if seconds > 0.5 else ""
        count = f"{files_done}/{self._files_total} files"
        info = f"{format_bytes(done_bytes)}/{format_bytes(self._total_bytes)} {speed}".rstrip()
        r.update(
            "download",
            description=f"[bold]{self.label}[/]",
            completed=done_bytes,
            total=self._total_bytes,
            count=count,
            info=info,
            line=f"{self.label}: {count}, {info}",
            force=files_done == self._files_total,
        )

    def stop(self) -> None:
        if self._reporter is not None:
            self._reporter.__exit__(None, None, None)
            self._reporter = None


def download_bar(show: bool | None = None, label: str = "pull") -> DownloadBar | None:
    """A :class:`DownloadBar` if ``show`` (None: on a terminal or in Jupyter), else None (a
    source then reports its downloads to nobody; always inside :func:`quiet_progress`)."""
    if _QUIET[0]:
        return None
    return DownloadBar(label) if (live_display() if show is None else show) else None
