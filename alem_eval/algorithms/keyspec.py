"""The vocabulary an algorithm's registry record describes its ``config.json`` with.

* :data:`KeySpec`: ``(coercion, trainer default)`` of one upstream UPPER_CASE key, and the
  coercions (``to_int``, ``to_bool``, ``choice(...)``, ...) that turn loosely typed JSON
  values (numbers, booleans, lists or strings such as ``"4"``, ``"true"``, ``"[16]"``) into
  typed ones, raising ``ValueError`` otherwise;
* :class:`NetworkConfig`: what an algorithm's typed network sizes must be (any frozen
  dataclass);
* :class:`TrainFamily`: how a family of trainers types and checks its hyperparameters.

It imports nothing of alem_eval (not even for types), so the registry (``alem_eval.algorithms.registry``) builds on it
and ``alem_eval.algorithms.config``, which reads the keys, asks the registry.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

KeySpec = tuple[Callable[[Any], Any], Any]  # (coercion, trainer default)

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in _TRUE | _FALSE:
        return v.strip().lower() in _TRUE
    raise ValueError("expected a boolean")


def to_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v == int(v):
        return int(v)
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s)
        except ValueError:
            f = float(s)  # "1e9"
            if math.isfinite(f) and f == int(f):
                return int(f)
    raise ValueError("expected an integer")


def to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number")
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return float(v.strip())
    raise ValueError("expected a number")


def to_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    raise ValueError("expected a string")


def to_list(item: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    """A list of ``item`` values: a JSON list, a Hydra-style ``[a,b]`` string or one value."""

    def conv(v: Any) -> tuple:
        if isinstance(v, str):
            s = v.strip()
            try:
                v = json.loads(s)
            except json.JSONDecodeError:
                # Hydra style: [hard] or [easy,medium]
                inner = s[1:-1] if s.startswith("[") and s.endswith("]") else s
                v = [p.strip().strip("'\"") for p in inner.split(",") if p.strip()]
        if isinstance(v, (int, float, str)) and not isinstance(v, bool):
            v = [v]
        if not isinstance(v, (list, tuple)):
            raise ValueError("expected a list")
        return tuple(item(x) for x in v)

    return conv


def choice(options: tuple[str, ...], *, lower: bool = True) -> Callable[[Any], str]:
    """One of ``options`` (compared lower-cased unless ``lower=False``)."""

    def conv(v: Any) -> str:
        s = to_str(v).strip()
        s = s.lower() if lower else s
        if s not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return s

    return conv


class NetworkConfig(Protocol):
    """An algorithm's typed network sizes (``RunConfig.network``): any frozen dataclass,
    built from the merged values by the registry record's ``network_config``. Its fields
    enter ``RunConfig.network_key`` (equal keys = equal parameter shapes)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]


@dataclass(frozen=True)
class TrainFamily:
    """How one trainer family types and checks its hyperparameters (a registry field).

    ``build(run, family, where)`` returns the typed
    :class:`~alem_eval.algorithms.train_config.TrainConfig` (a subclass of it for the family's
    own fields), raising ``ConfigError`` for values its trainer cannot run with;
    ``alem_eval.algorithms.train_config.common_train_fields`` gives the fields every trainer
    reads, validated.
    """

    epochs_key: str  # PPO's UPDATE_EPOCHS, PQN's NUM_EPOCHS
    lr_decay_key: str  # PPO's ANNEAL_LR, PQN's LR_LINEAR_DECAY
    build: Callable[[Any, TrainFamily, str], Any]  # (RunConfig, family, where) -> TrainConfig
    needs_agent_id: bool = False  # trains on obs + one-hot id (APPEND_AGENT_ID must be set)
    scales_clip_eps: bool = False  # SCALE_CLIP_EPS divides CLIP_EPS by the agent count
