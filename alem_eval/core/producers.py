"""What produced a recorded episode, and whether a new recording may reuse it.

Every ``episode.json`` a :class:`alem_eval.datasets.recorder.Recorder` writes names what decided
its steps: the protocol, the eval difficulty and the installed env version (the
recorder's own), and what the caller declares for the team
(:meth:`~alem_eval.datasets.recorder.Recorder.set_producer`; ``score --record`` declares the
checkpoint hash, the config hash and the step cap, see :func:`cell_producer`). A recorded
episode is reused only when every one of them matches; otherwise it is recorded again.
An episode recorded before these keys were written lacks some of them: it can still be
read, but it is never taken for one of a declared producer (nothing says it is).

Host-only, no JAX: a few dict comparisons.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def cell_producer(*, checkpoint_hash: str, config_hash: str, max_steps: int) -> dict[str, Any]:
    """What ``score`` declares for a self-play team of a cell (the recorder adds the
    protocol, eval difficulty and env version it records under)."""
    return {"checkpoint_hash": checkpoint_hash, "config_hash": config_hash, "max_steps": max_steps}


def producer_changes(recorded: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """How a recorded episode's ``episode.json`` differs from what would record it now,
    one phrase each (``"max_steps 30 (now 60)"``, ``"no checkpoint_hash recorded (an older
    alem-eval)"``); empty when it may be reused."""
    missing = [k for k in expected if k not in recorded]
    out = [
        f"{_value(k, recorded[k])} (now {_value(k, v, named=False)})"
        for k, v in expected.items()
        if k in recorded and recorded[k] != v
    ]
    if missing:
        out.append(f"no {', '.join(missing)} recorded (an older alem-eval)")
    return out


def describe_changes(changes: Sequence[str]) -> str:
    """The distinct phrases of :func:`producer_changes`, in first-seen order, joined."""
    return ", ".join(dict.fromkeys(changes))


def _value(key: str, value: Any, *, named: bool = True) -> str:
    text = str(value)
    if key.endswith("_hash") and len(text) > 16:
        text = text[:12]
    return f"{key} {text}" if named else text
