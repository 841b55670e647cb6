"""``--focal SPEC``: an agent from a module, a file or the reference agents.

SPEC is ``package.module:factory``, ``path/to/file.py:factory`` or the name of a
reference agent (:data:`alem_eval.evaluate.reference_agents.REFERENCE_AGENTS`); the
factory is called with the ``--focal-arg k=v`` keyword arguments (values parsed as JSON
where they are JSON: ``n=3`` an int, ``name=x`` a string) and returns the agent. The
agent's identity, which stored results are keyed by, is its name and a digest of its
class's source file, its state (or declared ``identity`` / ``version``), the factory's
file and arguments (:mod:`alem_eval.evaluate.agent_identity`).
Every fault is one line naming the spec.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alem_eval.core.errors import AlemEvalError, UsageError, brief
from alem_eval.evaluate.agents import make_group


def parse_focal_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``["k=v", ...]`` -> keyword arguments (JSON values where they parse, else str)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().isidentifier():
            raise UsageError(f"--focal-arg must be KEY=VALUE with a Python name, got {pair!r}")
        try:
            out[key.strip()] = json.loads(value)
        except ValueError:
            out[key.strip()] = value
    return out


def load_focal(spec: Any, args: Mapping[str, Any] | None = None) -> Any:
    """An agent object (used as it is), or a SPEC string -> its
    :class:`~alem_eval.evaluate.actors.Actor` (:func:`~alem_eval.evaluate.agents.make_group`:
    a ``JaxAgent`` or a ``HostAgent``)."""
    args = dict(args or {})
    if not isinstance(spec, str):
        if args:
            raise UsageError("focal arguments go with a SPEC string, not an agent object")
        return make_group(spec)
    from alem_eval.evaluate.reference_agents import REFERENCE_AGENTS

    if spec in REFERENCE_AGENTS:
        factory, source = REFERENCE_AGENTS[spec], b""
    else:
        factory, source = _factory(spec)
    try:
        agent = factory(**args)
    except AlemEvalError:
        raise
    except Exception as exc:
        raise UsageError(
            f"focal {spec}: the factory raised {type(exc).__name__}: {brief(exc)}"
        ) from None
    extra = source + json.dumps(args, sort_keys=True, default=repr).encode()
    return make_group(agent, label=spec, extra=extra)


def _factory(spec: str) -> tuple[Any, bytes]:
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise UsageError(
            f"focal {spec}: expected package.module:factory or path/to/file.py:factory"
        )
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise UsageError(f"focal {spec}: no such file {where}")
        source = path.read_bytes()
        mod_name = "alem_focal_" + hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        loader_spec = importlib.util.spec_from_file_location(mod_name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise UsageError(f"focal {spec}: cannot import {where}")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[mod_name] = module
        try:
            loader_spec.loader.exec_module(module)
        except Exception as exc:
            sys.modules.pop(mod_name, None)
            raise UsageError(
                f"focal {spec}: importing {where} raised {type(exc).__name__}: {brief(exc)}"
            ) from None
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            raise UsageError(f"focal {spec}: no module named {exc.name or where!r}") from None
        except Exception as exc:
            raise UsageError(
                f"focal {spec}: importing {where} raised {type(exc).__name__}: {brief(exc)}"
            ) from None
        file = getattr(module, "__file__", None)
        source = Path(file).read_bytes() if file and Path(file).is_file() else b""
    factory = getattr(module, name, None)
    if factory is None:
        raise UsageError(f"focal {spec}: {where} has no attribute {name!r}")
    if not callable(factory):
        raise UsageError(f"focal {spec}: {where}:{name} is not callable")
    return factory, source
