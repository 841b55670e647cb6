"""Regenerate the reset worlds shipped with alem-eval (alem_eval/data/worlds/).

The package ships the first ``FAST_NUM_EPISODES`` worlds of the ``fast`` protocol
(``PRNGKey(9999 + i)``) of the demo cells' world on ``easy``, so that a cold
``alem-eval demo`` or ``score`` of a demo cell compiles no reset program
(:mod:`alem_eval.evaluate.worlds`). A file is named by its world identity (the world, the
difficulty, the alem-env and JAX versions, ...): after an upgrade of either, run this
again (the old file is removed; an installation whose identity differs ignores it and
resets its worlds once).

    .venv/bin/python scripts/make_world_data.py            # write
    .venv/bin/python scripts/make_world_data.py --check    # compare with a fresh reset
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def shipped_settings():
    """(world statics, difficulty params, keys [E, 2]) of the shipped worlds."""
    import numpy as np

    from alem_eval.envs.eval_env import get_eval_env
    from alem_eval.evaluate.settings import FAST_NUM_EPISODES, eval_statics, fast_keys
    from alem_eval.hub.demo_cells import DEMO_DIFFICULTY
    from alem_eval.hub.sources import open_source
    from alem_eval.model.loader import resolve_cell

    src = open_source("demo")
    worlds = {eval_statics(resolve_cell(src.local_dir(c))[0]).world for c in src.select([])}
    (world,) = worlds  # every demo cell plays the same world
    dyn = get_eval_env(world).difficulty_params(DEMO_DIFFICULTY)
    keys, _ = fast_keys(FAST_NUM_EPISODES)
    return world, dyn, np.asarray(keys)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare the shipped file, write nothing")
    args = ap.parse_args(argv)
    import jax
    import numpy as np

    from alem_eval.evaluate import worlds as w

    world, dyn, keys = shipped_settings()
    ident = w.world_identity(world, dyn)
    path = w.PACKAGE_DIR / f"{ident}-fast-{len(keys)}{w.SUFFIX}"
    fresh = w.reset_fresh(world, dyn, list(keys))
    if args.check:
        stored = w.read_worlds(path, ident) if path.is_file() else None
        if stored is None:
            print(f"no shipped worlds for this installation ({path.name})")
            return 1
        same = np.array_equal(stored[0], keys) and all(
            np.asarray(a).tobytes() == b.tobytes()
            for a, b in zip(jax.tree_util.tree_leaves(fresh), stored[2], strict=True)
        )
        print(f"{path.name}: {'identical to a fresh reset' if same else 'DIFFERS'}")
        return 0 if same else 1
    for old in w.PACKAGE_DIR.glob(f"*{w.SUFFIX}"):
        old.unlink()
    w.write_worlds(path, ident, keys, fresh)
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
