"""Progress for people, on stderr: the one console every layer writes its live display to.

Data goes to stdout (the commands' renderers); progress, notes and warnings go here, in a
terminal as live bars, in a batch log as a line every so often, in Jupyter as rich's
notebook display.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

err_console = Console(stderr=True)


class EpisodeBar:
    """A live progress bar of evaluated episodes on stderr: episodes done / total, live
    env-steps/s and ETA. ``update`` takes :class:`alem_eval.evaluate.rollout.RolloutProgress`
    (anything with ``episodes_done``, ``episodes_total``, ``live_steps``, ``elapsed_s``).

    Rates and the ETA count from the first report (the first call also compiles). On a
    terminal it redraws in place; otherwise (batch logs) it prints a line at most every
    ``every_s`` seconds, and the last state at the end. ``note`` prints a line.
    """

    def __init__(self, label: str = "score", *, every_s: float = 30.0, live: bool | None = None):
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.live = err_console.is_terminal if live is None else live
        self.every_s = every_s
        self._t0 = time.perf_counter()
        self._base: Any = None  # the first report: rates count from there
        self._last: Any = None
        self._printed: Any = None
        self._progress = Progress(
            TextColumn(f"[bold]{label}[/] episodes"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[eta]}"),
            console=err_console,
            disable=not self.live,
            transient=False,
        )
        self._task = self._progress.add_task(label, total=None, rate="", eta="")

    def __enter__(self) -> EpisodeBar:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._progress.__exit__(*exc)
        if not self.live and self._last is not None and self._last is not self._printed:
            self._line(self._last)

    def note(self, message: str) -> None:
        err_console.print(message, highlight=False)

    def cell_done(self, message: str, done: int, total: int) -> None:
        """The scoring functions' ``on_progress(message, done, total)``: one line,
        ``[done/total] message (seconds since the bar started)``."""
        self.note(f"[{done}/{total}] {message} ({time.perf_counter() - self._t0:.0f}s)")

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
        self._last = p
        rate, eta = self.rates(p)
        self._progress.update(
            self._task,
            completed=p.episodes_done,
            total=p.episodes_total,
            rate=f"{rate:,.0f} env-steps/s" if rate else "",
            eta=f"ETA {eta:.0f}s" if eta is not None else "",
        )
        printed_at = self._printed.elapsed_s if self._printed is not None else float("-inf")
        if not self.live and p.elapsed_s - printed_at >= self.every_s:
            self._line(p)

    def _line(self, p: Any) -> None:
        self._printed = p
        rate, eta = self.rates(p)
        left = f", ETA {eta:.0f}s" if eta is not None and p.episodes_done < p.episodes_total else ""
        speed = f" ({rate:,.0f}/s)" if rate else ""  # none yet on the first report
        err_console.print(
            f"episodes {p.episodes_done}/{p.episodes_total}, {p.live_steps:,} env steps"
            f"{speed}, {p.elapsed_s:.0f}s{left}",
            highlight=False,
        )
