#!/usr/bin/env bash
# Create .venv at the repo root and install alem-eval with its locked dependencies.
# Idempotent: a second run only checks that everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.alem-eval-installed
if [ ! -f "$stamp" ] || [ requirements.lock -nt "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements.lock
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
  # alem-env builds its texture cache (next to the installed package) on its first import:
  # about two minutes, once. Do it here, so no command or test pays for it (and parallel
  # test workers never race to write that file).
  .venv/bin/python -c "from alem_env.loader import import_alem; import_alem()"
  touch "$stamp"
fi
