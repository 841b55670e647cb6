"""Regenerate the demo cells bundled with alem-eval (alem_eval/data/demo-cells/).

Each cell is trained by ``alem-eval train`` itself, with the settings of
``alem_eval.hub.demo_cells.DEMO_RECIPE`` (network sizes: the registry's ``demo.overrides``; seed 0,
easy), in a scratch directory; its ``checkpoint/`` and ``config.json`` are then copied into
the package. Training is deterministic on one machine: the same command gives the same
arrays bit for bit there. XLA compiles for the host CPU's features, so on another CPU model
the rounding, and with it the trained weights, differ (CARD.md); ``--check`` says which.

    .venv/bin/python scripts/make_demo_cells.py                       # all four (~40 min, 2-core CPU)
    .venv/bin/python scripts/make_demo_cells.py ippo-rnn              # one
    .venv/bin/python scripts/make_demo_cells.py --check ippo-rnn      # retrain, compare, keep the committed
    .venv/bin/python scripts/make_demo_cells.py --from /tmp/w ...     # install cells already trained in /tmp/w
    .venv/bin/python scripts/make_demo_cells.py --untrained DIR       # same sizes, initial weights (for comparison)

``--check`` compares every array of the full saved train state (weights, optimiser state,
counters) restored from the new checkpoint with the committed one (``ndarray.tobytes()``
equality), and ``config.json`` except the timing fields of ``training_summary``. The orbax
files themselves are not byte-comparable: OCDBT names its data files at random and
``_CHECKPOINT_METADATA`` holds the save time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from alem_eval.hub.demo_cells import (  # noqa: E402
    DEMO_RECIPE,
    DEMO_SEED,
    demo_cell_id,
    demo_root,
    train_args,
)
from alem_eval.hub.layout import CHECKPOINT_DIR, CONFIG_FILE  # noqa: E402

# training_summary fields that depend on the wall clock, not on the computation
TIMING_KEYS = ("wall_time_s", "compile_time_s", "steps_per_second", "steps_per_second_per_cell")


def train(algorithm: str, work: Path) -> Path:
    """``alem-eval train`` one demo cell into ``work``; returns the cell directory."""
    cmd = [sys.executable, "-m", "alem_eval", "train", *train_args(algorithm)]
    cmd += ["--out", str(work), "--fresh", "--force", "--log-every", "60"]
    print("$ " + " ".join(cmd[2:]), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=REPO, check=True)
    print(f"{algorithm}: {time.perf_counter() - t0:.0f} s in all", flush=True)
    return work / demo_cell_id(algorithm)


def install(cell: Path, dest: Path) -> None:
    """Copy ``checkpoint/`` and ``config.json`` of ``cell`` to ``dest`` (replacing it)."""
    tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    shutil.copytree(cell / CHECKPOINT_DIR, tmp / CHECKPOINT_DIR)
    shutil.copy2(cell / CONFIG_FILE, tmp / CONFIG_FILE)
    if dest.exists():
        shutil.rmtree(dest)
    tmp.rename(dest)


def restore_all(cell: Path) -> dict[str, bytes]:
    """Every array of the saved train state: ``{path: dtype + shape + raw bytes}``."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    tree = ocp.PyTreeCheckpointer().restore(cell / CHECKPOINT_DIR)
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        a = np.asarray(leaf)
        out[jax.tree_util.keystr(path)] = f"{a.dtype}{a.shape}".encode() + a.tobytes()
    return out


def comparable_config(cell: Path) -> dict:
    config = json.loads((cell / CONFIG_FILE).read_text())
    summary = config.get("training_summary") or {}
    for key in TIMING_KEYS:
        summary.pop(key, None)
    config.get("wandb_summary", {}).pop("sps", None)
    return config


def check(new: Path, committed: Path) -> bool:
    a, b = restore_all(new), restore_all(committed)
    same = [k for k in a if b.get(k) == a[k]]
    print(
        f"{committed}: {len(same)} of {len(b)} arrays identical bit for bit"
        + ("" if a.keys() == b.keys() else " (the trees differ in structure)")
    )
    for k in [k for k in b if k not in same][:5]:
        print(f"  differs: {k}")
    cfg_same = comparable_config(new) == comparable_config(committed)
    print(f"  config.json {'identical' if cfg_same else 'DIFFERS'} (timing fields aside)")
    return a.keys() == b.keys() and len(same) == len(b) and cfg_same


def write_untrained(root: Path) -> None:
    """Cells of the demo sizes with initial weights, saved like the trainers save (to
    measure what training bought; never committed)."""
    import jax
    import optax

    from alem_eval.algorithms.registry import get_algorithm
    from alem_eval.hub.demo_cells import (
        DEMO_DIFFICULTY,
        DEMO_ENV,
    )
    from alem_eval.algorithms.config import build_run_config, resolve_values
    from alem_eval.model.networks import build_network
    from alem_eval.hub.released import write_released_cell

    for algorithm in DEMO_RECIPE:
        demo = get_algorithm(algorithm).demo
        assert demo is not None  # DEMO_RECIPE has only algorithms with a demo
        overrides = {**DEMO_ENV, **demo.overrides}
        values, _ = resolve_values(
            algorithm,
            overrides={
                **overrides,
                "SEED": DEMO_SEED,
                "TRAINING_COORDINATION_DIFFICULTY": DEMO_DIFFICULTY,
            },
        )
        spec = build_network(build_run_config(algorithm, values))
        weights = spec.init_variables(jax.random.PRNGKey(DEMO_SEED))
        tree = get_algorithm(algorithm).saved_layout.resolve().fresh(weights, optax.adam(1e-3))
        config = {
            "algorithm": algorithm,
            "note": "untrained: initial weights of the demo sizes",
            "reload_overrides": overrides,
            "config": {
                **overrides,
                "SEED": DEMO_SEED,
                "VISUALIZE": False,
                "TRAINING_COORDINATION_DIFFICULTY": DEMO_DIFFICULTY,
                "EVAL_DIFFICULTIES": [DEMO_DIFFICULTY],
            },
        }
        cell = root / demo_cell_id(algorithm).replace("demo/", "untrained/", 1)
        write_released_cell(cell, tree, config)
        print(cell)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("algorithms", nargs="*", help="default: all four")
    ap.add_argument("--check", action="store_true", help="retrain and compare; change nothing")
    ap.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    ap.add_argument("--from", dest="trained", type=Path, help="install cells trained there")
    ap.add_argument("--dest", type=Path, default=demo_root(), help="default: the package's")
    ap.add_argument("--untrained", type=Path, help="write untrained cells there and exit")
    args = ap.parse_args()
    if args.untrained:
        write_untrained(args.untrained)
        return
    algorithms = args.algorithms or list(DEMO_RECIPE)
    unknown = sorted(set(algorithms) - set(DEMO_RECIPE))
    if unknown:
        ap.error(f"unknown algorithm(s) {unknown}; choose from {list(DEMO_RECIPE)}")
    with tempfile.TemporaryDirectory(prefix="demo-cells-") as tmp:
        work = args.work or Path(tmp)
        ok = True
        for algorithm in algorithms:
            cell = (
                args.trained / demo_cell_id(algorithm) if args.trained else train(algorithm, work)
            )
            dest = args.dest / demo_cell_id(algorithm)
            if args.check:
                ok &= check(cell, dest)
            else:
                install(cell, dest)
                print(f"installed {dest}")
    if args.check:
        print("regenerated cells match the committed ones" if ok else "MISMATCH")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
