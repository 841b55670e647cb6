"""An agent's identity: what stored results are keyed by, so two agents that act
differently never share one.

``name@digest``, the digest over

* the source file of the agent's class;
* the agent's own declaration, when it gives one: an ``identity`` or ``version``
  attribute (any value with a stable ``repr``) stands for its state (an agent whose
  state cannot be read, e.g. a client of a remote model, says what it is this way);
* otherwise its state: every attribute, walked (:func:`state_digest`): array leaves
  (numpy, JAX, anything with ``__array__``, a PyTorch module's ``state_dict``) by shape,
  dtype and bytes; numbers, strings and other plain values by ``repr``; functions by
  their module, name and code; random generators by their state; objects whose ``repr``
  names only a memory address by their type (and their own attributes, a few levels
  deep);
* what the caller adds (``extra``: a ``--focal`` SPEC's factory file and arguments).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

MAX_DEPTH = 8  # objects' attributes of attributes ... this deep; below, the type alone
MAX_ITEMS = 10_000  # elements of one list / dict walked; past it, their count


def agent_digest(agent: Any, extra: bytes = b"") -> str:
    """16 hex digits over the class's source, the declared identity or the state, and
    ``extra`` (see the module docstring)."""
    declared = _declared(agent)
    state = b"declared:" + declared if declared is not None else state_digest(agent)
    h = hashlib.sha256()
    for part in (source_digest(agent), state, extra):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def _declared(agent: Any) -> bytes | None:
    for attr in ("identity", "version"):
        value = getattr(agent, attr, None)
        if value is not None and not callable(value):
            return f"{attr}={value!r}".encode()
    return None


def source_digest(agent: Any) -> bytes:
    """The source file of the agent's class (empty when it has none)."""
    try:
        path = inspect.getsourcefile(type(agent))
        return Path(path).read_bytes() if path else b""
    except (OSError, TypeError):
        return b""


def state_digest(obj: Any) -> bytes:
    """A digest of ``obj``'s state (see the module docstring): equal for objects that
    hold equal values, whatever their memory addresses."""
    h = hashlib.sha256()
    _feed(h, obj, 0, set())
    return h.digest()


def _feed(h: Any, x: Any, depth: int, seen: set[int]) -> None:
    """Feed ``x`` into the hash ``h``, a type tag before every value. ``depth`` counts
    the objects walked into (containers of values, e.g. a parameter tree, do not count:
    every array leaf of a tree is hashed, however deep)."""
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        h.update(f"{type(x).__name__}:{x!r};".encode())
        return
    if id(x) in seen:  # a cycle (or a shared object: its first place counts)
        h.update(b"<seen>;")
        return
    try:
        _feed_value(h, x, depth, seen)
    except Exception:  # an object that cannot be read: its type stands for it
        h.update(f"<unreadable {type(x).__qualname__}>;".encode())


def _feed_value(h: Any, x: Any, depth: int, seen: set[int]) -> None:
    array = _as_array(x)
    if array is not None:
        h.update(f"array:{array.shape}:{array.dtype};".encode())
        h.update(np.ascontiguousarray(array).tobytes() if array.dtype != object else b"")
        if array.dtype == object:
            _feed(h, array.tolist(), depth, seen)
        return
    h.update(f"{type(x).__module__}.{type(x).__qualname__}".encode())
    seen = seen | {id(x)}
    if isinstance(x, Mapping):
        items = sorted(((repr(k), v) for k, v in x.items()), key=lambda kv: kv[0])
        _feed_items(h, items, depth, seen)
    elif isinstance(x, (list, tuple)):
        _feed_items(h, list(enumerate(x)), depth, seen)
    elif isinstance(x, (set, frozenset)):
        h.update(repr(sorted(repr(v) for v in x)[:MAX_ITEMS]).encode())
    elif inspect.isfunction(x) or inspect.ismethod(x):
        _feed_function(h, x, depth, seen)
    elif isinstance(x, functools.partial):
        _feed(h, (x.func, x.args, x.keywords), depth + 1, seen)
    elif isinstance(x, np.random.Generator):
        _feed(h, x.bit_generator.state, depth + 1, seen)
    elif callable(getattr(x, "getstate", None)) and type(x).__module__ == "random":
        _feed(h, x.getstate(), depth + 1, seen)
    elif callable(getattr(x, "state_dict", None)):  # a PyTorch module, an optimizer
        try:
            _feed(h, x.state_dict(), depth + 1, seen)
        except Exception:
            h.update(b"<state_dict?>;")
    elif depth >= MAX_DEPTH:
        h.update(b"<deep>;")
    else:
        _feed_object(h, x, depth + 1, seen)


def _feed_items(h: Any, items: list[tuple[Any, Any]], depth: int, seen: set[int]) -> None:
    h.update(f"[{len(items)}]".encode())
    for k, v in items[:MAX_ITEMS]:
        h.update(f"{k}=".encode())
        _feed(h, v, depth, seen)


def _feed_function(h: Any, fn: Any, depth: int, seen: set[int]) -> None:
    """A function by where it lives and its code (its constants and defaults too), a
    bound method also by its object."""
    if inspect.ismethod(fn):
        _feed(h, fn.__self__, depth + 1, seen)
        fn = fn.__func__
    h.update(f"{fn.__module__}.{fn.__qualname__};".encode())
    code = getattr(fn, "__code__", None)
    if code is not None:
        h.update(code.co_code)
        _feed(h, [c for c in code.co_consts if not inspect.iscode(c)], depth + 1, seen)
    _feed(h, fn.__defaults__, depth + 1, seen)
    _feed(h, [_contents(c) for c in fn.__closure__ or ()], depth + 1, seen)


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # (a cell not yet filled)
        return None


def _feed_object(h: Any, x: Any, depth: int, seen: set[int]) -> None:
    """Any other object: its attributes (``__dict__``, ``__slots__``), or its ``repr``
    when it has none and the ``repr`` is not just an address."""
    attrs = _attributes(x)
    if attrs is not None:
        _feed_items(h, sorted(attrs.items()), depth, seen)
        return
    try:
        text = repr(x)
    except Exception:
        text = ""
    h.update((b"<opaque>;" if " at 0x" in text else text.encode()) + b";")


def _attributes(x: Any) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    found = False
    d = getattr(x, "__dict__", None)
    if isinstance(d, dict):
        # (a flax module's ``_id`` counts the modules made before it in the process)
        out.update((k, v) for k, v in d.items() if type(v).__name__ != "FlaxId")
        found = True
    for cls in type(x).__mro__:
        for name in getattr(cls, "__slots__", ()) or ():
            if isinstance(name, str) and hasattr(x, name) and not name.startswith("__"):
                out.setdefault(name, getattr(x, name))
                found = True
    if inspect.isclass(x) or inspect.ismodule(x):
        return {"name": getattr(x, "__qualname__", getattr(x, "__name__", ""))}
    return out if found else None


def _as_array(x: Any) -> np.ndarray | None:
    """``x`` as a numpy array when it is one (numpy, JAX, anything with ``__array__``
    or a ``numpy()`` method, e.g. a PyTorch tensor); else None."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic):
        return np.asarray(x)
    if inspect.isclass(x):
        return None
    try:
        if hasattr(x, "__array__"):
            return np.asarray(x)
        numpy = getattr(x, "numpy", None)
        if callable(numpy) and hasattr(x, "detach"):  # a PyTorch tensor
            return np.asarray(x.detach().cpu().numpy())
    except Exception:
        return None
    return None


# ----------------------------------------------------------------------------------------
# The arrays of an agent: program inputs, not constants
# ----------------------------------------------------------------------------------------
def split_arrays(agent: Any) -> tuple[tuple[np.ndarray, ...], Callable[[Sequence[Any]], Any]]:
    """The numeric array leaves of ``agent``'s attributes (each attribute flattened as a
    JAX pytree: a parameter dict, a ``Policy`` of :func:`alem_eval.load_policy`, an array),
    and ``rebuild(leaves)``: a shallow copy of ``agent`` with ``leaves`` in their places
    (traced arrays, inside a compiled program). An agent whose attributes cannot be read
    or copied has none (its arrays stay constants of its program)."""
    import copy

    import jax

    attrs = _attributes(agent)
    places: list[tuple[str, Any, list[Any], list[int]]] = []
    arrays: list[np.ndarray] = []
    for name, value in sorted((attrs or {}).items()):
        try:
            leaves, treedef = jax.tree_util.tree_flatten(value)
        except Exception:
            continue
        at = [i for i, x in enumerate(leaves) if _numeric_array(x)]
        if at:
            places.append((name, treedef, leaves, at))
            arrays += [np.asarray(leaves[i]) for i in at]

    def rebuild(new: Sequence[Any]) -> Any:
        out = copy.copy(agent)
        it = iter(new)
        for name, treedef, leaves, at in places:
            filled = list(leaves)
            for i in at:
                filled[i] = next(it)
            object.__setattr__(out, name, jax.tree_util.tree_unflatten(treedef, filled))
        return out

    if not places:
        return (), lambda new: agent
    try:  # (a copy, and the tree rebuilt with placeholders, must work before it is relied on)
        rebuild([jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays])
    except Exception:
        return (), lambda new: agent
    return tuple(arrays), rebuild


def _numeric_array(x: Any) -> bool:
    import jax

    return isinstance(x, (np.ndarray, jax.Array)) and np.dtype(x.dtype).kind in "biufc"


def code_digest(agent: Any, extra: bytes = b"", *, values: bool = False) -> str:
    """16 hex digits over what a JAX agent's compiled program depends on besides its
    arrays' values: the class's source, ``extra`` and its state with every array of
    :func:`split_arrays` by shape and dtype only (a declared ``identity`` / ``version``
    does not stand in for it here). Another instance with other weights has the same.
    ``values``: the arrays' bytes too (an agent whose arrays are constants)."""
    import jax

    skeleton = agent
    if not values:
        arrays, rebuild = split_arrays(agent)
        skeleton = rebuild([jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays])
    h = hashlib.sha256()
    for part in (source_digest(agent), state_digest(skeleton), extra):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]
