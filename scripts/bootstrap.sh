#!/usr/bin/env bash
# Create .venv at the repo root and install alem-eval (editable) with everything the tests
# need, locked: requirements-dev.lock (the runtime lock, the datasets and video extras, and
# the test, lint and notebook tools). Idempotent: a second run only checks that everything
# is in place.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.alem-eval-installed
if [ ! -f "$stamp" ] || [ requirements.lock -nt "$stamp" ] || [ requirements-dev.lock -nt "$stamp" ] \
    || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.lock
  # --no-deps: the lock already holds every dependency, extras included.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps -e '.[dev]'
  # alem-env builds its texture cache (next to the installed package) on its first import:
  # about two minutes, once. Do it here, so no command or test pays for it (and parallel
  # test workers never race to write that file).
  .venv/bin/python -c "from alem_eval.envs.loader import import_alem; import_alem()"
  touch "$stamp"
fi
