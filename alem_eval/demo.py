"""The embedded demo source: small cells in the released layout, made on first use.

They let a fresh machine run the whole pipeline with no network. **They are untrained**:
each cell is a randomly initialised network of the right structure (reduced sizes),
saved exactly as the upstream trainers save a checkpoint (orbax, full train state), with a
``config.json`` that says so (``"demo": true``, budget label ``demo-untrained``). Their
scores measure nothing but the pipeline.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .config import build_run_config, resolve_values
from .networks import build_network
from .paths import user_cache_dir

DEMO_BUDGET = "demo-untrained"
DEMO_NOTE = ("UNTRAINED demo cell: random initial weights written by alem-eval to exercise "
             "the pipeline offline; its scores mean nothing.")
# Reduced sizes as in the upstream-written fixtures.
_DEMO_CELLS = {
    "ippo-rnn": {"FC_DIM_SIZE": 32, "GRU_HIDDEN_DIM": 64, "NUM_AGENTS": 3},
    "mappo-rnn": {"FC_DIM_SIZE": 32, "GRU_HIDDEN_DIM": 64},
    "hypermarl-rnn": {"FC_DIM_SIZE": 32, "GRU_HIDDEN_DIM": 64, "HYPERNET_EMBEDDING_DIM": 8,
                      "HYPERNET_HIDDEN_DIMS": [16], "APPEND_AGENT_ID": True, "ACTIVATION": "relu",
                      "USE_AGENT_ID_EMBEDDINGS": True, "USE_BIAS_IN_HYPERNET": True},
    "pqn-vdn-rnn": {"HIDDEN_SIZE": 64, "NUM_LAYERS": 1, "NORM_TYPE": "layer_norm",
                    "NORM_INPUT": False},
}
_COMMON = {"NUM_COMM_CHANNELS": 4, "ACTION_MASKING": True, "SHARED_REWARD": False,
           "ENV_NAME": "Alem-Coop-Symbolic"}
DEMO_DIFFICULTY = "easy"
_VERSION = 1  # bump to regenerate the demo cells


def demo_root() -> Path:
    return user_cache_dir() / f"demo-v{_VERSION}"


def ensure_demo_source(root: Path | None = None) -> Path:
    """Create the demo cells under ``root`` if they are not there; return ``root``."""
    root = Path(root) if root else demo_root()
    for algorithm, sizes in _DEMO_CELLS.items():
        cell = root / DEMO_BUDGET / algorithm / DEMO_DIFFICULTY / "seed0"
        if (cell / "config.json").is_file() and (cell / "checkpoint").is_dir():
            continue
        _write_cell(cell, algorithm, {**_COMMON, **sizes})
    return root


def _write_cell(cell: Path, algorithm: str, overrides: dict) -> None:
    import jax
    import jax.numpy as jnp
    import optax
    import orbax.checkpoint as ocp
    from flax.training.train_state import TrainState

    values, _ = resolve_values(algorithm, overrides={**overrides, "SEED": 0,
                                                     "TRAINING_COORDINATION_DIFFICULTY": DEMO_DIFFICULTY})
    cfg = build_run_config(algorithm, values)
    spec = build_network(cfg)
    weights = spec.init_variables(jax.random.PRNGKey(0))
    adam = optax.chain(optax.clip_by_global_norm(1.0),
                       optax.adam(optax.linear_schedule(1e-4, 0.0, 1000), eps=1e-5))

    def state(params):
        s = TrainState.create(apply_fn=None, params=params, tx=adam)
        return s.replace(step=jnp.int32(0))  # upstream's counters are int32 arrays

    if algorithm == "mappo-rnn":
        tree = {"actor": state(weights["actor"]["params"]),
                "critic": state(weights["critic"]["params"])}
    elif algorithm == "pqn-vdn-rnn":
        s = state(weights["params"])
        tree = {"step": s.step, "params": s.params, "opt_state": s.opt_state,
                "batch_stats": weights["batch_stats"], "timesteps": jnp.int32(0),
                "n_updates": jnp.int32(0), "grad_steps": jnp.int32(0)}
    else:
        tree = state(weights["params"])
    tmp = cell.parent / f".{cell.name}.tmp-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    ocp.PyTreeCheckpointer().save(tmp / "checkpoint", tree, force=True)
    config = {
        "algorithm": algorithm,
        "demo": True,
        "note": DEMO_NOTE,
        "env_config": {"env_name": "Alem-Coop-Symbolic", "num_agents": 3, "num_comm_channels": 4,
                       "coordination_difficulty": DEMO_DIFFICULTY, "shared_reward": False,
                       "action_masking": True},
        "reload_overrides": overrides,
        "wandb_summary": {"num_params": spec.num_params()},
        "config": {**overrides, "SEED": 0, "VISUALIZE": False,
                   "TRAINING_COORDINATION_DIFFICULTY": DEMO_DIFFICULTY,
                   "EVAL_DIFFICULTIES": [DEMO_DIFFICULTY], "TEST_NUM_EPISODES": 20,
                   "TEST_MAX_STEPS": 10000},
    }
    (tmp / "config.json").write_text(json.dumps(config, indent=1))
    if cell.exists():
        import shutil

        shutil.rmtree(cell)
    tmp.rename(cell)
