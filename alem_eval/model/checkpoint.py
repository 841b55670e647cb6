"""Orbax checkpoints: read the tree metadata, validate it against the configured network
*before* reading any array, then restore only the weights to host memory.

The released cells are orbax OCDBT PyTree checkpoints (spec §5, end). The metadata
(paths, shapes, dtypes) is read through orbax; if orbax cannot read it (a metadata format
from another orbax release), it falls back to the ``_METADATA`` tree index plus the zarr
array headers inside the OCDBT store, read with tensorstore. Restores use
``restore_type=np.ndarray``, so a checkpoint saved on a GPU restores on a CPU-only host.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Mapping

import jax
import numpy as np

from alem_eval.envs.spaces import num_actions, obs_dim

from alem_eval.algorithms.registry import get_algorithm
from alem_eval.core.errors import CheckpointError, LeafMismatch, ShapeMismatchError, brief
from alem_eval.core.runtime import quiet_closed_loop_callbacks

Path_ = tuple[str, ...]
_ORBAX_MARKERS = ("_CHECKPOINT_METADATA", "_METADATA")


@dataclass(frozen=True)
class LeafMeta:
    shape: tuple[int, ...]
    dtype: str


# ----------------------------------------------------------------------------------------
# Locating and reading
# ----------------------------------------------------------------------------------------
def resolve_checkpoint_dir(path: str | Path) -> Path:
    """The orbax directory for ``path``: itself, its ``checkpoint/`` child, or (like
    upstream) the ``*checkpoint*`` child with the highest ``_v<N>`` suffix."""
    p = Path(path)
    if not p.is_dir():
        raise CheckpointError(f"{p}: checkpoint directory not found")
    if any((p / m).is_file() for m in _ORBAX_MARKERS):
        return p
    candidates = [
        c
        for c in p.iterdir()
        if c.is_dir() and "checkpoint" in c.name and any((c / m).is_file() for m in _ORBAX_MARKERS)
    ]
    if not candidates:
        raise CheckpointError(f"{p}: no orbax checkpoint here (no _METADATA or checkpoint/ dir)")

    def version(c: Path) -> int:
        m = re.search(r"_v(\d+)$", c.name)
        return int(m.group(1)) if m else -1

    return max(candidates, key=lambda c: (version(c), c.name))


def _key_str(k: Any) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def _flatten(tree: Any) -> dict[Path_, Any]:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {tuple(_key_str(k) for k in path): leaf for path, leaf in leaves}


def read_tree_metadata(ckpt_dir: str | Path) -> dict[Path_, LeafMeta]:
    """Every leaf's path, shape and dtype, without reading array data."""
    d = resolve_checkpoint_dir(ckpt_dir)
    try:
        return _metadata_via_orbax(d)
    except Exception as exc:
        logging.getLogger(__name__).debug("orbax metadata failed (%s); raw fallback", exc)
    try:
        return _metadata_via_tensorstore(d)
    except CheckpointError:
        raise
    except Exception as exc:
        raise CheckpointError(
            f"{d}: cannot read checkpoint metadata ({type(exc).__name__}: {brief(exc, 240)})"
        ) from None


def _metadata_via_orbax(d: Path) -> dict[Path_, LeafMeta]:
    import orbax.checkpoint as ocp

    meta = ocp.PyTreeCheckpointer().metadata(d)
    tree = meta.tree if hasattr(meta, "tree") else meta
    out = {}
    for path, leaf in _flatten(tree).items():
        shape = getattr(leaf, "shape", None)
        dtype = getattr(leaf, "dtype", None)
        if shape is None or dtype is None:
            raise ValueError(f"leaf {'/'.join(path)} has no shape metadata")
        out[path] = LeafMeta(tuple(int(s) for s in shape), str(np.dtype(dtype)))
    return out


def _metadata_via_tensorstore(d: Path) -> dict[Path_, LeafMeta]:
    import tensorstore as ts

    try:
        meta = json.loads((d / "_METADATA").read_text())
        index = meta["tree_metadata"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{d}: _METADATA missing or unreadable ({exc})") from None
    driver = "zarr3" if meta.get("use_zarr3") else "zarr"
    out = {}
    for entry in index.values():
        value = entry.get("value_metadata") or {}
        if value.get("skip_deserialize") or value.get("value_type") in ("None", None):
            continue  # empty nodes (e.g. optax's stateless clip entry) hold no array
        path = tuple(str(k["key"]) for k in entry["key_metadata"])
        spec = {
            "driver": driver,
            "kvstore": {"driver": "ocdbt", "base": f"file://{d}", "path": ".".join(path)},
        }
        arr = ts.open(spec, open=True).result()
        out[path] = LeafMeta(tuple(int(s) for s in arr.shape), str(np.dtype(arr.dtype.numpy_dtype)))
    return out


# ----------------------------------------------------------------------------------------
# Validation
# ----------------------------------------------------------------------------------------
def compare_trees(
    expected: Mapping[Path_, LeafMeta], found: Mapping[Path_, LeafMeta]
) -> list[LeafMismatch]:
    """Leaf-by-leaf differences inside the expected tree's weight groups.

    A weight group is a path prefix ending at the first ``params``/``batch_stats`` key
    (``params``, ``batch_stats``, ``actor/params``, ``critic/params``), so optimiser state
    and counters beside the weights are ignored.
    """
    groups = weight_groups(expected)
    scoped = {p: m for p, m in found.items() if any(p[: len(g)] == g for g in groups)}
    out = []
    for path in sorted(set(expected) | set(scoped)):
        e, f = expected.get(path), scoped.get(path)
        name = "/".join(path)
        if f is None:
            assert e is not None  # the path came from one of the two trees
            out.append(LeafMismatch(name, e.shape, None))
        elif e is None:
            out.append(LeafMismatch(name, None, f.shape))
        elif e.shape != f.shape:
            out.append(LeafMismatch(name, e.shape, f.shape))
        elif np.dtype(e.dtype) != np.dtype(f.dtype):
            out.append(LeafMismatch(name, e.shape, f.shape, e.dtype, f.dtype))
    return out


def weight_groups(paths: Iterable[Path_]) -> set[Path_]:
    out = set()
    for p in paths:
        cut = next((i for i, k in enumerate(p) if k in ("params", "batch_stats")), len(p) - 1)
        out.add(p[: cut + 1])
    return out


def _obs_explanations(width: int, *, extra_id: bool, times: int = 1) -> list[tuple[int, int]]:
    """(num_agents, comm_channels) pairs whose observation width explains ``width``."""
    hits = []
    for p in range(2, 9):
        for nc in range(0, 33):
            w = obs_dim(p, nc) * (p if times > 1 else 1) + (p if extra_id else 0)
            if w == width:
                hits.append((p, nc))
    return hits


def mismatch_hints(cfg, mismatches: Iterable[LeafMismatch]) -> list[str]:
    """Known config keys that explain shape differences (e.g. obs 9718 vs 9730 => comm)."""
    hints: list[str] = []
    algo = get_algorithm(cfg.algorithm)
    p, nc = cfg.env.num_agents, cfg.env.num_comm_channels
    for m in mismatches:
        if m.expected is None or m.found is None or m.expected == m.found:
            continue
        leaf = m.path
        if leaf.endswith("Dense_0/kernel") and "hypernet" not in leaf:
            critic = leaf.startswith("critic/")
            extra_id = algo.id_in_first_layer
            for fp, fnc in _obs_explanations(
                m.found[0], extra_id=extra_id, times=2 if critic else 1
            ):
                if (fp, fnc) != (p, nc):
                    hints.append(
                        f"input width {m.found[0]} vs {m.expected[0]} means "
                        f"NUM_AGENTS={fp}, NUM_COMM_CHANNELS={fnc} (config says "
                        f"NUM_AGENTS={p}, NUM_COMM_CHANNELS={nc})."
                    )
            if len(m.found) > 1 and len(m.expected) > 1 and m.found[1] != m.expected[1]:
                hints.append(
                    f"first layer width {m.found[1]} vs {m.expected[1]}: "
                    f"check {algo.input_layer_key}."
                )
        elif re.search(r"(GRUCell_1|OptimizedLSTMCell_0)/h\w/kernel$", leaf):
            hints.append(
                f"recurrent width {m.found[-1]} vs {m.expected[-1]}: check {algo.recurrent_key}."
            )
        elif leaf.endswith("bias") and len(m.found) == 1 and m.found[0] != m.expected[0]:
            for fnc in range(0, 33):
                if num_actions(p, fnc) == m.found[0] and m.expected[0] == num_actions(p, nc):
                    hints.append(
                        f"{m.found[0]} actions vs {m.expected[0]} means "
                        f"NUM_COMM_CHANNELS={fnc} (config says {nc})."
                    )
        elif "agent_embeddings" in leaf:
            hints.append(
                f"agent embeddings {list(m.found)} vs {list(m.expected)}: check "
                "HYPERNET_EMBEDDING_DIM / NUM_AGENTS."
            )
    if any("hypernet" in m.path for m in mismatches):
        hints.append(
            "hypernet layers differ: check HYPERNET_HIDDEN_DIMS, "
            "HYPERNET_EMBEDDING_DIM, USE_BIAS_IN_HYPERNET."
        )
    if any(m.found is None and m.path.startswith("params/agent_embeddings") for m in mismatches):
        hints.append("no agent_embeddings in the checkpoint: USE_AGENT_ID_EMBEDDINGS=false?")
    # Unique, in order.
    return list(dict.fromkeys(hints))


def expected_metadata(spec) -> dict[Path_, LeafMeta]:
    return {
        p: LeafMeta(tuple(x.shape), str(np.dtype(x.dtype)))
        for p, x in _flatten(spec.expected_tree()).items()
    }


def validate(
    cfg,
    spec,
    ckpt_dir: str | Path,
    *,
    where: str | None = None,
    found: Mapping[Path_, LeafMeta] | None = None,
) -> dict[Path_, LeafMeta]:
    """Raise :class:`ShapeMismatchError` unless the checkpoint's weights match ``spec``.

    Returns the expected leaf metadata. Reads metadata only, never array data.
    """
    where = where or str(ckpt_dir)
    found = found if found is not None else read_tree_metadata(ckpt_dir)
    expected = expected_metadata(spec)
    groups = weight_groups(expected)
    roots = sorted("/".join(g) for g in groups)
    if not any(p[: len(g)] == g for p in found for g in groups):
        top = sorted({p[0] for p in found})
        raise CheckpointError(
            f"{where}: checkpoint has none of the {cfg.algorithm} weight groups "
            f"{roots} (its top-level keys: {top}); is the algorithm right?"
        )
    mismatches = compare_trees(expected, found)
    if mismatches:
        raise ShapeMismatchError(where, mismatches, mismatch_hints(cfg, mismatches))
    return expected


# ----------------------------------------------------------------------------------------
# Restore
# ----------------------------------------------------------------------------------------
def restore_weights(
    cfg, spec, ckpt_dir: str | Path, *, policy_only: bool = False, where: str | None = None
) -> dict[str, Any]:
    """Validate, then restore the weights (host numpy arrays, released disk layout).

    The optimiser state is not read. ``policy_only`` also skips MAPPO's critic.
    """
    import orbax.checkpoint as ocp

    d = resolve_checkpoint_dir(ckpt_dir)
    where = where or str(d)
    validate(cfg, spec, d, where=where)
    template = spec.expected_tree()
    if policy_only and "critic" in template:
        template = {k: v for k, v in template.items() if k != "critic"}
    restore_args = jax.tree_util.tree_map(
        lambda _: ocp.RestoreArgs(restore_type=np.ndarray), template
    )
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)  # orbax warns that `transforms` is a legacy API
    try:
        restored = ocp.PyTreeCheckpointer().restore(
            d, args=ocp.args.PyTreeRestore(item=template, restore_args=restore_args, transforms={})
        )
    except Exception as exc:
        # The reads still in flight complete on orbax's closed event loop: keep their
        # RuntimeError off stderr (the error below is the whole story).
        quiet_closed_loop_callbacks()
        raise CheckpointError(
            f"{where}: checkpoint data unreadable, corrupt or truncated "
            f"download? ({type(exc).__name__}: {brief(exc, 240)})"
        ) from None
    finally:
        absl_logger.setLevel(level)
    restored = jax.tree_util.tree_map(np.asarray, restored)
    for path, leaf in _flatten(restored).items():
        if not np.all(np.isfinite(leaf)):
            raise CheckpointError(f"{where}: non-finite values in {'/'.join(path)}")
    return restored


def checkpoint_hash(ckpt_dir: str | Path) -> str:
    """SHA-256 over every file of the orbax directory (relative path, size, content).

    Memoised by the files' stat stamps (:mod:`alem_eval.core.hashmemo`): unchanged files are not
    read again."""
    from alem_eval.core.hashmemo import memoised_hash

    d = resolve_checkpoint_dir(ckpt_dir)
    files = sorted(p for p in d.rglob("*") if p.is_file())
    return memoised_hash(d, files, lambda: _content_hash(d, files), kind="checkpoint")


def _content_hash(d: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        rel = f.relative_to(d).as_posix()
        h.update(rel.encode() + b"\0" + str(f.stat().st_size).encode() + b"\0")
        with f.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def count_params(tree: Any) -> int:
    return int(sum(np.prod(np.shape(x)) for x in jax.tree_util.tree_leaves(tree)))
