#!/usr/bin/env bash
# Runs python/tests with pytest in the environment scripts/setup-python.sh makes (found by the same
# rule: `setup-python.sh --print-venv`), this clone's python/ first on PYTHONPATH. ctest's label
# `python` runs it (python/CMakeLists.txt). Without the environment it says so loudly and exits
# 77, which ctest reports as skipped. Arguments go to pytest (default: every test).
#   TIGHTPIPE_BIN   the tightpipe binary (ctest sets it to the one it built)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv=$("$repo/scripts/setup-python.sh" --print-venv)
if [ ! -f "$venv/.tightpipe-complete" ]; then
  echo "python tests: SKIPPED: no Python environment at $venv; run ./scripts/setup-python.sh" \
    "(it installs the pins of python/requirements*.txt) to run them"
  exit 77
fi
export DS_ACCELERATOR=cpu  # DeepSpeed's peer runs (python/tightpipe/peers)
cd "$repo/python"
export PYTHONPATH="$repo/python:$repo/python/tests${PYTHONPATH:+:$PYTHONPATH}"
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "${@:-tests}"
