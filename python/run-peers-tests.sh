#!/usr/bin/env bash
# Runs the peer tests (python/tests/test_peers_*.py, issue 44) with pytest in the Python
# environment: $TIGHTPIPE_VENV, else the one scripts/setup-python.sh makes (--print-venv), with this
# clone's python/ first on PYTHONPATH. ctest's label `python` runs it (python/peers.cmake).
# Without an environment holding torch, megatron-core and deepspeed it says so loudly and exits 77,
# which ctest reports as skipped, never as passed. Arguments go to pytest.
#   TIGHTPIPE_BIN   the tightpipe binary (ctest sets it to the one it built)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
venv="${TIGHTPIPE_VENV:-}"
if [ -z "$venv" ] && [ -x "$repo/scripts/setup-python.sh" ]; then
  venv=$("$repo/scripts/setup-python.sh" --print-venv 2>/dev/null || true)
fi
if [ -z "$venv" ] || [ ! -x "$venv/bin/python" ]; then
  echo "peer tests: SKIPPED: no Python environment (${venv:-TIGHTPIPE_VENV unset}); make one" \
    "with torch (./scripts/setup-python.sh), then ./scripts/setup-python-peers.sh VENV"
  exit 77
fi
has_peers='import importlib.util as u, sys
sys.exit(not all(u.find_spec(m) for m in ("torch", "megatron", "deepspeed")))'
if ! "$venv/bin/python" -c "$has_peers" >/dev/null 2>&1; then
  echo "peer tests: SKIPPED: $venv lacks torch, megatron-core or deepspeed; run" \
    "./scripts/setup-python-peers.sh $venv"
  exit 77
fi
cd "$repo/python"
export PYTHONPATH="$repo/python:$repo/python/tests${PYTHONPATH:+:$PYTHONPATH}"
export DS_ACCELERATOR=cpu
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
