"""Write the manifest of the released cells: one record per cell.

    .venv/bin/python manifests/generate.py          # rewrite the manifest
    .venv/bin/python manifests/generate.py --check  # exit 1 if a copy is stale

It writes two identical files: ``alem_eval/data/alem-rl-baselines.json``, the package data
that ``alem_eval.hub.manifest`` reads (and wheels ship), and ``manifests/alem-rl-baselines.json``,
the human-facing copy; and beside each the release's frozen partner splits,
``alem-rl-baselines-splits.json`` (``alem_eval.hub.splits``; docs/splits.md), whose digest
the manifest records as ``splits_digest``.

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
from alem_eval.hub.demo_cells import DEMO_BUDGET, DEMO_DIFFICULTY, DEMO_SEED, demo_algorithms
from alem_eval.hub.manifest import (
    DEFAULT_REVISION,
    HUB_REPO,
    MANIFEST_NAME,
    MANIFEST_PATH,
    MANIFEST_SCHEMA_VERSION,
)
from alem_eval.hub.splits import SPLITS_NAME, SPLITS_PATH, Splits, seed_assignment

# The package data first (what the library reads), then the human-facing copies.
HERE = Path(__file__).resolve().parent
TARGETS = (MANIFEST_PATH, HERE / MANIFEST_NAME)
SPLIT_TARGETS = (SPLITS_PATH, HERE / SPLITS_NAME)

# The card's table says "100M", its prose "100m": sources resolve the label against the
# repo listing case-insensitively.
BUDGETS = ("100M", "1B")
SEEDS = range(5)
NUM_COMM_CHANNELS = 4

# The release's partner splits (docs/splits.md): per population, the same seeds in every
# one (seeds were drawn alike, so none is special): three to train with, one to choose
# settings on, one held out for the final numbers.
RELEASE_SEED_SPLITS = {0: "train", 1: "train", 2: "train", 3: "val", 4: "test"}
# The demo cells (one seed per algorithm): the split is across algorithms; the held-out one
# is HyperMARL (its hypernetwork agents are the least like the PPO and PQN ones).
DEMO_TEST_ALGORITHM = "hypermarl-rnn"


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


def release_splits() -> Splits:
    """The release's splits (its populations, then the demo cells')."""
    released = [a.name for a in all_algorithms() if a.release is not None]
    populations = [(b, a, d) for b in BUDGETS for a in released for d in DIFFICULTIES]
    assignment = seed_assignment(populations, RELEASE_SEED_SPLITS)
    for algorithm in demo_algorithms():
        split = "test" if algorithm.name == DEMO_TEST_ALGORITHM else "train"
        assignment[(DEMO_BUDGET, algorithm.name, DEMO_DIFFICULTY)] = {DEMO_SEED: split}
    return Splits(assignment, name="alem-rl-baselines")


def splits_data() -> dict:
    data = release_splits().to_json()
    data["notes"] = (
        "Frozen partner splits (docs/splits.md): per released population (budget, algorithm, "
        "difficulty) seeds 0-2 train, 3 val, 4 test; the demo cells: hypermarl-rnn test, the "
        "others train. 'test' is for final numbers only. The digest covers the assignment."
    )
    return data


def render() -> str:
    data = manifest_data()
    data["splits_digest"] = release_splits().digest
    return json.dumps(data, indent=1) + "\n"


def render_splits() -> str:
    return json.dumps(splits_data(), indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if the manifest is stale")
    args = ap.parse_args(argv)
    texts = {**dict.fromkeys(TARGETS, render()), **dict.fromkeys(SPLIT_TARGETS, render_splits())}
    if args.check:
        stale = [
            p
            for p, text in texts.items()
            if not p.is_file() or p.read_text(encoding="utf-8") != text
        ]
        for path in stale:
            print(f"{path} is stale: run manifests/generate.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in texts.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
