#!/usr/bin/env bash
# The project's checks, in order: lint, format, types, layers, then the offline test suite.
# Run after scripts/bootstrap.sh (README: "Run the tests"; .ci/run calls the same).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
# packages by layer: import-linter prints a banner; show it only when a contract breaks
layers=$(.venv/bin/lint-imports --no-cache) || { echo "$layers"; exit 1; }
# --max-worker-restart=0: a worker that dies (the OOM killer) fails the run at once with its
# test named; a replacement worker once left pytest-xdist waiting until CI's time ran out.
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --max-worker-restart=0 \
    --durations=15 "$@"
