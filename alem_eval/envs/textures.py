"""alem's pixel textures, read when a frame is first drawn instead of at ``import alem``.

alem-env 0.1.0 reads its texture table when ``alem.alem_coop.constants`` is imported: a
bzip2 pickle of 347 MB (``assets/texture_cache.pbz2``), 4.4 s of the ~7 s that importing
alem takes on a 2-core CPU, in every process that scores, trains or plays. Only the pixel
renderer reads the table (``TEXTURES[block_pixel_size]``: ``alem-eval render``, alem's
pixels env and its language wrapper), and the symbolic env alem-eval steps never does.

:func:`deferred_textures` wraps the import: alem's own loader (``load_compressed_pickle``
of ``alem.environment_base.util``) is handed, for the texture file only, a
:class:`LazyTextures` that reads the same file with the same loader on first use. Nothing
of the game changes: the table a renderer gets is the object alem would have loaded. When
anything is not as expected (another alem version, alem already imported, the loader
missing, ``ALEM_EVAL_EAGER_TEXTURES=1``) the import runs untouched.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

TEXTURE_FILE = "texture_cache.pbz2"
UTIL_MODULE = "alem.environment_base.util"
EAGER_ENV = "ALEM_EVAL_EAGER_TEXTURES"
DEFERRED_VERSIONS = ("0.1.0",)  # alem-env versions whose import is known to work this way


class LazyTextures(Mapping):
    """alem's texture table (pixel size -> textures), read from its file on first use.

    While alem's constants module is being imported, ``values()`` answers with nothing,
    so the import's own check of the table (every pixel size holds the required
    textures) does not read it; that check runs on the table itself when it is read
    (:meth:`table`), and a table that fails it is an error, not regenerated.
    """

    def __init__(self, load: Callable[[], Mapping], check: Callable[[Mapping], None] | None = None):
        self._load = load
        self._check = check
        self._data: Mapping | None = None
        self._lock = threading.Lock()
        self._importing = True

    @property
    def loaded(self) -> bool:
        return self._data is not None

    def table(self) -> Mapping:
        if self._data is None:
            with self._lock:
                if self._data is None:
                    data = self._load()
                    if self._check is not None:
                        self._check(data)
                    self._data = data
        return self._data

    def __getitem__(self, key: Any) -> Any:
        return self.table()[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.table())

    def __len__(self) -> int:
        return len(self.table())

    def values(self):  # type: ignore[override]
        if self._importing and self._data is None:
            return ()
        return self.table().values()

    def imported(self) -> None:
        """alem's import is over: from now on every read goes to the table."""
        self._importing = False


def _check_table(data: Mapping) -> None:
    constants = sys.modules.get("alem.alem_coop.constants")
    valid = getattr(constants, "_cache_is_valid", None)
    if valid is not None and not valid(data):
        raise RuntimeError(
            f"alem's texture cache ({TEXTURE_FILE}) lacks textures its renderer needs: "
            f"reinstall alem-env, or set {EAGER_ENV}=1 to let alem rebuild it at import"
        )


def _alem_util_path() -> Path | None:
    spec = importlib.util.find_spec("alem")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "environment_base" / "util.py"
    return path if path.is_file() else None


@contextlib.contextmanager
def deferred_textures(alem_version: str | None):
    """Import alem inside this block: its texture table is read on first use, when
    ``alem_version`` (the installed alem-env's) is one of :data:`DEFERRED_VERSIONS`.

    Yields the list of :class:`LazyTextures` handed to alem (one when alem's constants
    were imported inside the block; empty when the import ran untouched)."""
    handed: list[LazyTextures] = []
    util = None
    if (
        not os.environ.get(EAGER_ENV)
        and "alem" not in sys.modules
        and UTIL_MODULE not in sys.modules
        and alem_version in DEFERRED_VERSIONS
    ):
        util = _load_util()
    if util is None:
        yield handed
        return
    original = util.load_compressed_pickle

    def load_compressed_pickle(file: str):
        if Path(file).name != TEXTURE_FILE:
            return original(file)
        lazy = LazyTextures(lambda: original(file), check=_check_table)
        handed.append(lazy)
        return lazy

    util.load_compressed_pickle = load_compressed_pickle
    try:
        yield handed
    finally:
        util.load_compressed_pickle = original
        for lazy in handed:
            lazy.imported()


def _load_util():
    """alem's ``environment_base.util`` module, executed before the ``alem`` package so
    that its loader can be wrapped before ``alem.alem_coop.constants`` imports it (the
    package's ``__init__`` imports the env, which imports the constants)."""
    path = _alem_util_path()
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location(UTIL_MODULE, path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception:
        return None
    if not callable(getattr(module, "load_compressed_pickle", None)):
        return None
    sys.modules[UTIL_MODULE] = module
    return module
