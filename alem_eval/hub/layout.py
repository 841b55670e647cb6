"""The released on-disk layout, in one place.

A cell lives at ``<root>/<budget>/<algorithm>/<difficulty>/seed<N>/`` and holds
``checkpoint/`` (an orbax OCDBT directory; upstream also accepts ``checkpoint_v<N>``, the
highest wins) and ``config.json``. Budgets are labels such as ``100M`` / ``1B`` (env steps)
or free-form names (``tiny``, ``demo-untrained``).
"""

from __future__ import annotations

import re
from pathlib import Path

CHECKPOINT_DIR = "checkpoint"
CONFIG_FILE = "config.json"

_SEED_DIR = re.compile(r"^seed(\d+)$")
_BUDGET = re.compile(r"^(\d+(?:\.\d+)?)([kmbt]?)$", re.IGNORECASE)
_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def is_cell_dir(path: Path) -> bool:
    """A directory holding ``config.json`` and ``checkpoint/``."""
    return (path / CONFIG_FILE).is_file() and (path / CHECKPOINT_DIR).is_dir()


def config_path(cell_dir: Path) -> Path:
    return Path(cell_dir) / CONFIG_FILE


def checkpoint_path(cell_dir: Path) -> Path:
    """The plain ``checkpoint/`` directory (see ``loader.cell_checkpoint_dir`` for the
    ``_v<N>`` choice)."""
    return Path(cell_dir) / CHECKPOINT_DIR


def parse_seed_dir(name: str) -> int | None:
    """``"seed3"`` -> 3; None for anything else."""
    m = _SEED_DIR.match(name)
    return int(m.group(1)) if m else None


def budget_sort_key(label: str) -> tuple[int, float, str]:
    """Numeric budgets in size order ("100M" < "1B"), then other labels alphabetically."""
    m = _BUDGET.match(label)
    if m is None:
        return (1, 0.0, label.lower())
    return (0, float(m.group(1)) * _SCALE[m.group(2).lower()], label.lower())


def budget_steps(budget: str) -> int | None:
    """'100M' -> 100_000_000, '1B' -> 1_000_000_000; None for free-form labels ('tiny')."""
    numeric, steps, _ = budget_sort_key(str(budget))
    return int(steps) if numeric == 0 else None
