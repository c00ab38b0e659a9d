#!/usr/bin/env bash
# Installs the peers of issue 44 (DeepSpeed and Megatron-Core, pinned in
# python/requirements-peers.txt) into an existing virtual environment that already has torch
# (scripts/setup-python.sh makes it), then builds DeepSpeed's CPU shared-memory op once (its
# torch backend loads it at start; cached under ~/.cache/torch_extensions) so a first run does not
# pay ~60 s. Safe to run again: a no-op when the pinned versions are in place.
#   scripts/setup-python-peers.sh VENV
#   TP_PEERS_BUILD_OP=0 skips the op (scripts/setup-python.sh, in the temporary folder: torch's
#   extension cache records the venv's path, so the op is built once, at the final path)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:?usage: scripts/setup-python-peers.sh VENV (a venv with torch installed)}"
PY="$VENV/bin/python"
if [ ! -x "$PY" ]; then
  echo "setup-python-peers: $PY does not exist; hint: make the venv first" \
    "(scripts/setup-python.sh)" >&2
  exit 2
fi
if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "setup-python-peers: $VENV has no torch; hint: install python/requirements.txt" \
    "into it first" >&2
  exit 2
fi
MCORE_VERSION=0.19.2
start=$(date +%s)
have() {  # have DIST VERSION: that version of DIST is installed
  "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null
}
export DS_BUILD_OPS=0 DS_ACCELERATOR=cpu
if ! have deepspeed 0.19.8; then
  "$PY" -m pip install --quiet -r python/requirements-peers.txt
fi
if ! have megatron-core "$MCORE_VERSION"; then
  "$PY" -m pip install --quiet --no-deps --ignore-requires-python --no-binary megatron-core \
    "megatron-core==$MCORE_VERSION"
fi
# DeepSpeed's CPU accelerator builds its shared-memory collective op on first use (cached).
if [ "${TP_PEERS_BUILD_OP:-1}" != 0 ]; then
  "$PY" - <<'PYEOF'
import os, warnings
warnings.filterwarnings("ignore")
os.environ["DS_ACCELERATOR"] = "cpu"
from deepspeed.comm.torch import build_shm_op
build_shm_op()
PYEOF
fi
"$PY" -c "import megatron.core.pipeline_parallel.schedules, deepspeed.pipe" 2>/dev/null || {
  echo "setup-python-peers: megatron.core or deepspeed.pipe does not import in $VENV" >&2
  exit 1
}
echo "setup-python-peers: deepspeed 0.19.8 and megatron-core $MCORE_VERSION in $VENV" \
  "($(($(date +%s) - start)) s)"
