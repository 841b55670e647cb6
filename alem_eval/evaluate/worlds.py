"""The evaluation worlds as data: each world is reset once, then kept on disk.

The protocols play fixed worlds (``fast``: episode ``i`` resets with ``PRNGKey(9999 + i)``,
``reference``: ``PRNGKey(EVAL_SEED + i)``), so the reset program need not run (nor
compile: 20-40 s of a cold call on a 2-core CPU) more than once per world.
:func:`fixed_worlds` returns the reset worlds of a list of keys from, in order:

1. the worlds shipped in the package (``alem_eval/data/worlds/``: the first
   ``FAST_NUM_EPISODES`` worlds of the ``fast`` protocol for the demo cells' world on
   ``easy``, made by ``scripts/make_world_data.py``);
2. alem-eval's cache (``<user cache>/worlds/``), filled by earlier calls;
3. the reset program (:func:`~alem_eval.evaluate.programs.world_programs`), whose worlds
   are then written to the cache.

A file is used only when it was made by the same code for the same world: its name and
contents carry :func:`world_identity` (the world statics, the difficulty's values, the
alem-env and JAX versions, the backend, the PRNG settings), and it holds worlds for a
sequence of keys among which every key of the request must be (the 20 shipped worlds serve a
call for 8, or the renderer's episode 3).
Every file carries a SHA-256 of its contents; a file that cannot be read or whose digest
does not match is ignored (one :class:`WorldCacheWarning`) and the worlds are reset
again: never a wrong world. The worlds returned are bitwise those of the reset program.

File layout (``.worlds``): ``MAGIC``, then an LZMA stream of a JSON header line
(identity, keys, the leaves' dtypes and shapes, the state's tree structure pickled, the
digest) followed by the leaves' raw bytes.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import lzma
import pickle
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from alem_eval.core.fsutil import write_bytes_atomic

MAGIC = b"alem-eval worlds 1\n"
SUFFIX = ".worlds"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / "data" / "worlds"
# Bump when the way a world is made changes (the reset program, its inputs) without a
# change of any version in the identity: every stored world is then made again.
WORLDS_FORMAT = 1


class WorldCacheWarning(UserWarning):
    """A stored world file could not be used; the worlds are reset again."""


def cache_dir() -> Path:
    """Where reset worlds are kept: ``<user cache>/worlds``."""
    from alem_eval.core.paths import user_cache_dir

    return user_cache_dir() / "worlds"


def world_identity(world: Any, dyn: Mapping[str, Any]) -> str:
    """A digest of everything the reset worlds of ``world`` (``EnvStatics``) on the
    difficulty ``dyn`` (:meth:`EvalEnv.difficulty_params`) depend on, besides the key."""
    import jaxlib

    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.envs.loader import import_alem

    env = get_eval_env(world)
    alem = import_alem()
    parts = [
        f"format={WORLDS_FORMAT}",
        f"alem-env={alem.package_version}|{alem.env_version}",
        f"jax={jax.__version__}|{jaxlib.__version__}",
        f"backend={jax.default_backend()}",
        f"threefry_partitionable={jax.config.jax_threefry_partitionable}",  # type: ignore[attr-defined]
        f"x64={jax.config.jax_enable_x64}",  # type: ignore[attr-defined]
        f"prng={jax.config.jax_default_prng_impl}",  # type: ignore[attr-defined]
        f"world={world!r}",
        f"static={env.static_env_params!r}",
        f"template={env.env_params('easy')!r}",
    ]
    for name in sorted(dyn):
        value = np.asarray(dyn[name])
        parts.append(f"dyn.{name}={value.dtype.str}:{value.tobytes().hex()}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def fixed_worlds(world: Any, dyn: Mapping[str, Any], keys: Sequence[Any]) -> tuple[Any, Any]:
    """The reset worlds of ``keys`` (``[2]`` uint32 each) -> (obs ``[E, P, obs_dim]``,
    state with leading axis ``E``), device arrays, bitwise those of
    ``world_programs(world)``'s reset run on each key and stacked (see the module)."""
    want = np.stack([np.asarray(k) for k in keys]).astype(np.uint32)
    ident = world_identity(world, dyn)
    for path in _candidates(ident):
        stat = path.stat()
        stored = _read_memo(path, stat.st_mtime_ns, stat.st_size, ident)
        if stored is None and path.parent != PACKAGE_DIR:  # (warned): made again below
            path.unlink(missing_ok=True)
        rows = None if stored is None else _rows(want, stored[0])
        if rows is not None:
            _, treedef, leaves = stored
            return jax.tree_util.tree_unflatten(treedef, [jax.device_put(x[rows]) for x in leaves])
    out = reset_fresh(world, dyn, keys)
    try:
        write_worlds(
            cache_dir() / f"{ident}-{_digest(want.tobytes())[:16]}{SUFFIX}", ident, want, out
        )
    except OSError as exc:  # a read-only cache: the worlds are reset again next time
        warnings.warn(f"reset worlds not cached ({exc})", WorldCacheWarning, stacklevel=2)
    return out


def reset_fresh(world: Any, dyn: Mapping[str, Any], keys: Sequence[Any]) -> tuple[Any, Any]:
    """The reset program on each key (one shared compiled reset), stacked on axis 0."""
    from alem_eval.evaluate.programs import world_programs

    reset, _ = world_programs(world)
    return jax.block_until_ready(_stacked(*[reset(k, dyn) for k in keys]))


# Run eagerly, every leaf of the Alem state (~130) would compile its own tiny program on
# first use, ~45 ms each on a GPU: the stacking is jitted as a whole.
@jax.jit
def _stacked(*trees: Any) -> Any:
    """The trees' leaves stacked on a new axis 0."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


@functools.lru_cache(maxsize=8)
def _read_memo(path: Path, mtime_ns: int, size: int, ident: str):
    """:func:`read_worlds`, once per version of a file in a process (a call per group)."""
    return read_worlds(path, ident)


def _candidates(ident: str) -> list[Path]:
    """The stored files of one identity: the package's first, then the cache's."""
    found: list[Path] = []
    for where in (PACKAGE_DIR, cache_dir()):
        if where.is_dir():
            found += sorted(where.glob(f"{ident}-*{SUFFIX}"))
    return found


def _rows(want: np.ndarray, have: np.ndarray) -> np.ndarray | None:
    """The rows of ``have`` (stored keys ``[K, 2]``) holding each key of ``want``, in
    order; None unless every one is there."""
    index = {tuple(k): i for i, k in enumerate(have.tolist())}
    rows = [index.get(tuple(k)) for k in want.tolist()]
    return None if any(r is None for r in rows) else np.asarray(rows, np.int64)


def _digest(*chunks: bytes) -> str:
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def write_worlds(path: Path, ident: str, keys: np.ndarray, worlds: Any) -> Path:
    """Write the reset ``worlds`` of ``keys`` under ``ident`` to ``path`` (atomically)."""
    leaves, treedef = jax.tree_util.tree_flatten(jax.device_get(worlds))
    arrays = [np.ascontiguousarray(np.asarray(x)) for x in leaves]
    tree = pickle.dumps(treedef)
    body = b"".join(x.tobytes() for x in arrays)
    header = dict(
        identity=ident,
        keys=keys.astype(np.uint32).tolist(),
        leaves=[[x.dtype.str, list(x.shape)] for x in arrays],
        treedef=base64.b64encode(tree).decode(),
    )
    header["digest"] = _digest(json.dumps(header, sort_keys=True).encode(), body)
    payload = json.dumps(header, sort_keys=True).encode() + b"\n" + body
    return write_bytes_atomic(path, MAGIC + lzma.compress(payload, preset=9))


def read_worlds(path: Path, ident: str) -> tuple[np.ndarray, Any, list[np.ndarray]] | None:
    """(keys ``[K, 2]``, the state tree structure, the leaves ``[K, ...]``) of a file
    written by :func:`write_worlds` for ``ident``; None (one warning) when it cannot be
    read, is not of ``ident`` or its digest does not match."""
    try:
        raw = path.read_bytes()
        if not raw.startswith(MAGIC):
            raise ValueError("not a worlds file")
        payload = lzma.decompress(raw[len(MAGIC) :])
        line, body = payload.split(b"\n", 1)
        header = json.loads(line)
        digest = header.pop("digest")
        if header["identity"] != ident:
            raise ValueError("made for other worlds")
        if _digest(json.dumps(header, sort_keys=True).encode(), body) != digest:
            raise ValueError("digest mismatch")
        leaves, at = [], 0
        for dtype, shape in header["leaves"]:
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            leaves.append(
                np.frombuffer(body, dtype, count=int(np.prod(shape)), offset=at).reshape(shape)
            )
            at += n
        if at != len(body):
            raise ValueError("size mismatch")
        treedef = pickle.loads(base64.b64decode(header["treedef"]))
        keys = np.asarray(header["keys"], np.uint32).reshape(-1, 2)
        if treedef.num_leaves != len(leaves) or any(len(x) != len(keys) for x in leaves):
            raise ValueError("inconsistent contents")
    except Exception as exc:  # any fault of the file: ignored, the worlds reset again
        warnings.warn(
            f"stored worlds {path.name} ignored ({type(exc).__name__}: {exc}); resetting them again",
            WorldCacheWarning,
            stacklevel=3,
        )
        return None
    return keys, treedef, leaves
