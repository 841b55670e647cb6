"""Process-level JAX set-up: the persistent compilation cache and CPU host devices.

Both must happen before JAX compiles anything (the cache) or starts its backends (host
devices), so every command that compiles calls :func:`enable_compilation_cache` before
its library call (the others, ``--help``, ``list``, ``report``, ``leaderboard``, never
touch the cache); library users call it themselves (it is idempotent).
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from pathlib import Path

from alem_eval.core.errors import UsageError


class CacheWarning(UserWarning):
    """The compilation cache directory cannot be used; work goes on without it."""


# JAX's own settings for the persistent cache; read from the environment when JAX is
# imported, or set through jax.config afterwards.
_CACHE_SETTINGS = {
    "jax_compilation_cache_dir": None,  # filled with the directory
    "jax_persistent_cache_min_compile_time_secs": 0.0,
    "jax_persistent_cache_min_entry_size_bytes": 0,
}


def enable_compilation_cache(directory: str | os.PathLike | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache (idempotent) and return its directory.

    Default: ``alem_eval.core.paths.compilation_cache_dir()`` (``$ALEM_EVAL_JAX_CACHE``, else
    under the user cache). Every compiled program, whatever its compile time, is stored, so
    a second process (or a rerun of the CLI) skips the dominant cost of scoring: compiling
    the Alem step. Before JAX is imported this only sets environment variables (no JAX
    import, so quick commands stay quick); afterwards it updates ``jax.config``. It must
    run before the first compilation of the process: JAX decides once whether the cache
    is on.

    A directory that cannot be created or written (a read-only or full home, a file in its
    place) leaves the cache off: one :class:`CacheWarning` per directory and process, and
    None; everything still works, only compiling again in the next process.
    """
    if directory is None:
        from alem_eval.core.paths import compilation_cache_dir

        directory = compilation_cache_dir()
    path = Path(directory).expanduser()
    problem = _unwritable(path)
    if problem is not None:
        if str(path) not in _WARNED:
            _WARNED.add(str(path))
            warnings.warn(
                f"compilation cache off: cannot write to {path} ({problem}); every program "
                "is compiled again in the next process (set ALEM_EVAL_JAX_CACHE to a "
                "writable directory)",
                CacheWarning,
                stacklevel=2,
            )
        return None
    settings = {**_CACHE_SETTINGS, "jax_compilation_cache_dir": str(path)}
    if "jax" in sys.modules:
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:
        for name, value in settings.items():
            os.environ[name.upper()] = str(value)
    return path


_WARNED: set[str] = set()  # directories already warned about in this process


def _unwritable(path: Path) -> str | None:
    """Why ``path`` cannot hold the cache (None: it can): created if missing, then a small
    file is written and removed in it (a full disk fails there, not at ``mkdir``)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path, prefix=".alem-eval-probe-") as fh:
            fh.write(b"\0" * 4096)
            fh.flush()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def use_host_devices(n: int | None = None) -> int | None:
    """Expose ``n`` CPU devices to JAX (default: one per core) so that the evaluator's
    episode axis is split over all cores (the Alem step itself is mostly single-threaded
    on CPU). Only effective before JAX initialises its backends (call it first thing);
    returns the count applied, or None when it is too late or already set. It does not
    change which device runs unsharded work (device 0), nor GPU behaviour.
    """
    n = n or os.cpu_count() or 1
    flags = os.environ.get("XLA_FLAGS", "")
    if n < 2 or "xla_force_host_platform_device_count" in flags:
        return None
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return None
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()
    return n


def parse_devices(value: str | int | None) -> int | None:
    """``--devices``: None (leave JAX's devices as they are), a count >= 1, or ``"auto"``
    (one per CPU core). Raises :class:`UsageError` for anything else."""
    if value is None:
        return None
    text = str(value).strip().lower()
    if text == "auto":
        return os.cpu_count() or 1
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise UsageError(f"--devices must be a positive integer or 'auto', got {value!r}")
    return n


def _is_closed_loop_callback(unraisable: object) -> bool:
    value = getattr(unraisable, "exc_value", None)
    return isinstance(value, RuntimeError) and str(value) == "Event loop is closed"


def quiet_closed_loop_callbacks() -> None:
    """Drop one known leftover of a failed checkpoint read, and nothing else.

    When one read of an orbax restore fails (a truncated download), the restore raises at
    once and closes its asyncio loop while tensorstore still completes the other reads;
    each completion then calls ``loop.call_soon_threadsafe`` on the closed loop, and Python
    prints that ``RuntimeError('Event loop is closed')`` as an unraisable exception -- a
    traceback after alem-eval's one-line error. Other unraisable exceptions go to the
    previous hook."""
    previous = sys.unraisablehook
    if getattr(previous, "_alem_eval_quiet", False):
        return

    def hook(unraisable) -> None:
        if not _is_closed_loop_callback(unraisable):
            previous(unraisable)

    hook._alem_eval_quiet = True  # type: ignore[attr-defined]
    sys.unraisablehook = hook
