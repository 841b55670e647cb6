"""Strict JSON for every ``--format json`` output and the JSON files written beside it.

``json.dumps`` writes ``NaN`` / ``Infinity`` for non-finite floats by default: tokens that
are not JSON (``jq``, JavaScript and most other parsers refuse them). Here a non-finite
float, numpy scalars and arrays included, becomes ``null``, and ``allow_nan=False`` makes
any that slipped through an error instead of invalid output. No numpy import at load time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def json_ready(value: Any) -> Any:
    """``value`` as plain JSON types: mappings, lists (from tuples, sets and numpy arrays),
    str, int, bool, None and finite floats; a non-finite float (or numpy float) is None.
    Anything else raises ``TypeError``."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_ready(v) for v in value]
    tolist = getattr(value, "tolist", None)  # numpy scalars (-> Python scalar) and arrays
    if callable(tolist) and type(value).__module__ == "numpy":
        return json_ready(tolist())
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def json_text(value: Any, *, indent: int | None = 1) -> str:
    """Strict JSON text of ``value`` (see :func:`json_ready`), no trailing newline."""
    return json.dumps(json_ready(value), indent=indent, allow_nan=False)
