"""Write the manifest of the released cells: one record per cell.

    .venv/bin/python manifests/generate.py          # rewrite the manifest
    .venv/bin/python manifests/generate.py --check  # exit 1 if a copy is stale

It writes two identical files: ``alem_eval/data/alem-rl-baselines.json``, the package data
that ``alem_eval.hub.manifest`` reads (and wheels ship), and ``manifests/alem-rl-baselines.json``,
the human-facing copy.

The facts come from the model card and the upstream trainers (spec §5 and §9): the grid
below, and each algorithm's registry record (``alem_eval.algorithms.registry``, its ``release``).
``tests/test_hub.py`` checks the parameter counts against ``alem_eval.model.networks`` at the
released sizes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Run as a script from anywhere: make the checkout importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from alem_eval.algorithms.registry import all_algorithms
from alem_eval.algorithms.config import DIFFICULTIES, PAPER_ENV_VERSION
from alem_eval.hub.manifest import (
    DEFAULT_REVISION,
    HUB_REPO,
    MANIFEST_NAME,
    MANIFEST_PATH,
    MANIFEST_SCHEMA_VERSION,
)

# The package data first (what the library reads), then the human-facing copy.
TARGETS = (MANIFEST_PATH, Path(__file__).resolve().parent / MANIFEST_NAME)

# The card's table says "100M", its prose "100m": sources resolve the label against the
# repo listing case-insensitively.
BUDGETS = ("100M", "1B")
SEEDS = range(5)
NUM_COMM_CHANNELS = 4


def manifest_data() -> dict:
    # Per algorithm, its registry record's ``release``: network family, ``num_params`` as
    # the trainers log it with NUM_COMM_CHANNELS=4 (MAPPO: actor + critic; PQN: batch_stats
    # included), measured size of a cell. An algorithm without one has no Hub cells.
    released = [(a.name, a.release) for a in all_algorithms() if a.release is not None]
    cells = []
    for budget in BUDGETS:
        for algorithm, release in released:
            for difficulty in DIFFICULTIES:
                for seed in SEEDS:
                    cells.append(
                        {
                            "budget": budget,
                            "algorithm": algorithm,
                            "difficulty": difficulty,
                            "seed": seed,
                            "repo": HUB_REPO,
                            "path": f"{budget}/{algorithm}/{difficulty}/seed{seed}",
                            "revision": DEFAULT_REVISION,
                            "family": release.family,
                            "expected_params": release.num_params,
                            "num_comm_channels": NUM_COMM_CHANNELS,
                            "env_version": PAPER_ENV_VERSION,
                            "approx_size_mb": release.approx_size_mb,
                        }
                    )
    return {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "name": "alem-rl-baselines",
        "repo": HUB_REPO,
        "revision": DEFAULT_REVISION,
        "env_version": PAPER_ENV_VERSION,
        "notes": (
            "Budget folder spelling (100M vs 100m) is resolved against the repo listing "
            "case-insensitively; revision is not pinned yet (main)."
        ),
        "cells": cells,
    }


def render() -> str:
    return json.dumps(manifest_data(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the manifest is stale")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        stale = [p for p in TARGETS if not p.is_file() or p.read_text(encoding="utf-8") != text]
        for path in stale:
            print(f"{path} is stale: run manifests/generate.py", file=sys.stderr)
        return 1 if stale else 0
    for path in TARGETS:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path} ({len(manifest_data()['cells'])} cells)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
