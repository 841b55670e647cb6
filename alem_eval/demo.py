"""The embedded demo source: small cells in the released layout, made on first use.

They let a fresh machine run the whole pipeline with no network. **They are untrained**:
each cell is a randomly initialised network of the right structure (reduced sizes),
saved exactly as the upstream trainers save a checkpoint (orbax, full train state), with a
``config.json`` that says so (``"demo": true``, budget label ``demo-untrained``). Their
scores measure nothing but the pipeline.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .algorithms import all_algorithms, get_algorithm
from .config import build_run_config, resolve_values
from .networks import build_network
from .paths import user_cache_dir
from .released import CHECKPOINT_DIR, CONFIG_FILE, write_released_cell

DEMO_BUDGET = "demo-untrained"
DEMO_NOTE = (
    "UNTRAINED demo cell: random initial weights written by alem-eval to exercise "
    "the pipeline offline; its scores mean nothing."
)
_COMMON = {
    "NUM_COMM_CHANNELS": 4,
    "ACTION_MASKING": True,
    "SHARED_REWARD": False,
    "ENV_NAME": "Alem-Coop-Symbolic",
}
DEMO_DIFFICULTY = "easy"
_VERSION = 1  # bump to regenerate the demo cells


def demo_root() -> Path:
    return user_cache_dir() / f"demo-v{_VERSION}"


def ensure_demo_source(root: Path | None = None) -> Path:
    """Create the demo cells under ``root`` if they are not there; return ``root``."""
    root = Path(root) if root else demo_root()
    for algo in all_algorithms():  # reduced sizes: the registry's demo_overrides
        cell = root / DEMO_BUDGET / algo.name / DEMO_DIFFICULTY / "seed0"
        if (cell / CONFIG_FILE).is_file() and (cell / CHECKPOINT_DIR).is_dir():
            continue
        _write_cell(cell, algo.name, {**_COMMON, **algo.demo_overrides})
    return root


def _write_cell(cell: Path, algorithm: str, overrides: dict) -> None:
    import jax
    import optax

    values, _ = resolve_values(
        algorithm,
        overrides={**overrides, "SEED": 0, "TRAINING_COORDINATION_DIFFICULTY": DEMO_DIFFICULTY},
    )
    cfg = build_run_config(algorithm, values)
    spec = build_network(cfg)
    weights = spec.init_variables(jax.random.PRNGKey(0))
    adam = optax.chain(
        optax.clip_by_global_norm(1.0), optax.adam(optax.linear_schedule(1e-4, 0.0, 1000), eps=1e-5)
    )
    tree = get_algorithm(algorithm).saved_layout.resolve().fresh(weights, adam)
    config = {
        "algorithm": algorithm,
        "demo": True,
        "note": DEMO_NOTE,
        "env_config": {
            "env_name": "Alem-Coop-Symbolic",
            "num_agents": 3,
            "num_comm_channels": 4,
            "coordination_difficulty": DEMO_DIFFICULTY,
            "shared_reward": False,
            "action_masking": True,
        },
        "reload_overrides": overrides,
        "wandb_summary": {"num_params": spec.num_params()},
        "config": {
            **overrides,
            "SEED": 0,
            "VISUALIZE": False,
            "TRAINING_COORDINATION_DIFFICULTY": DEMO_DIFFICULTY,
            "EVAL_DIFFICULTIES": [DEMO_DIFFICULTY],
            "TEST_NUM_EPISODES": 20,
            "TEST_MAX_STEPS": 10000,
        },
    }
    # Written beside the cell, then renamed into place: a half-written cell is never seen.
    tmp = cell.parent / f".{cell.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    write_released_cell(tmp, tree, config)
    if cell.exists():
        shutil.rmtree(cell)
    tmp.rename(cell)
