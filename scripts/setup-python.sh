#!/usr/bin/env bash
# Makes the one Python environment of tightpipe (PyTorch for python/tightpipe/torch; Megatron-Core
# and DeepSpeed for python/tightpipe/peers, by scripts/setup-python-peers.sh): a virtual
# environment OUTSIDE the clone, at
#   ${TIGHTPIPE_VENV:-$HOME/.cache/tightpipe/venv-<hash of python/requirements*.txt and both scripts>}
# so that the next clone on this machine reuses it. Safe to run again: a no-op when it is complete.
# It is built in a temporary folder beside its final place and renamed into place only when every
# package installed, so an interrupted run never leaves a half environment that later runs trust.
# The package python/tightpipe is NOT installed into it: tests put <this clone>/python first on
# PYTHONPATH, so each clone tests its own code.
#
#   ./scripts/setup-python.sh               make it (prints its path and the time taken)
#   ./scripts/setup-python.sh --print-venv  print where it lives (the rule tests use), nothing else
#
# Where the package index cannot be reached it prints a loud "setup-python: SKIPPED" line, writes
# nothing and exits 0 (the tests of ctest label `python` then skip loudly). PYTHON picks the
# interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

venv_path() {
  local h
  h=$(cat python/requirements*.txt scripts/setup-python.sh scripts/setup-python-peers.sh |
    sha256sum | cut -c1-12)
  echo "${TIGHTPIPE_VENV:-$HOME/.cache/tightpipe/venv-$h}"
}
venv=$(venv_path)
if [ "${1:-}" = "--print-venv" ]; then
  echo "$venv"
  exit 0
elif [ $# -gt 0 ]; then
  echo "setup-python: unknown argument '$1'; hint: no argument makes the environment," \
    "--print-venv prints its path" >&2
  exit 2
fi

if [ -f "$venv/.tightpipe-complete" ]; then
  echo "setup-python: environment ready at $venv (nothing to do)"
  exit 0
fi
start=$SECONDS
PY=${PYTHON:-python3}
apt_install() {  # the way scripts/setup.sh installs Debian packages
  local SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
if ! command -v "$PY" >/dev/null; then
  if [ -n "${PYTHON:-}" ]; then
    echo "setup-python: PYTHON=$PY is not on PATH; hint: unset PYTHON to use python3" >&2
    exit 1
  fi
  echo "setup-python: installing python3 and python3-venv (Debian's)"
  apt_install python3 python3-venv
fi

# The index must answer before anything is written.
index=${PIP_INDEX_URL:-https://pypi.org/simple}
if ! "$PY" - "$index" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=20).read(1)
except Exception as e:
    print(f"setup-python: the package index {sys.argv[1]} cannot be reached: {e}", file=sys.stderr)
    sys.exit(1)
EOF
then
  echo "setup-python: SKIPPED: no Python environment made (package index unreachable);" \
    "the tests of ctest label 'python' will skip. Run ./scripts/setup-python.sh where" \
    "$index answers."
  exit 0
fi

# Debian splits venv/ensurepip into python3-venv: install it the way scripts/setup.sh does.
if ! "$PY" -c 'import venv, ensurepip' 2>/dev/null; then
  ver=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
  echo "setup-python: installing python3-venv (python$ver-venv)"
  apt_install python3-venv "python$ver-venv"
fi

mkdir -p "$(dirname "$venv")"
tmp=$(mktemp -d "$venv.partial-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "setup-python: building $venv (in $tmp until complete)"
"$PY" -m venv "$tmp"
"$tmp/bin/python" -m pip install --quiet --upgrade pip==26.3
"$tmp/bin/python" -m pip install --quiet -r python/requirements.txt
# The peer engines (Megatron-Core, DeepSpeed; python/requirements-peers.txt), into the same one;
# DeepSpeed's CPU op only at the final path, below (built here too, it was built twice: 40 s).
TP_PEERS_BUILD_OP=0 ./scripts/setup-python-peers.sh "$tmp"
# The "# no-deps: NAME==VERSION" lines of python/requirements.txt (torchtitan: its pipeline code
# needs only the pins of that file, its declared dependencies are its trainer's), without deps;
# last, so that no later pip run reports the dependencies left out as conflicts.
mapfile -t nodeps < <(sed -n 's/^# no-deps: *//p' python/requirements.txt)
if ((${#nodeps[@]})); then
  "$tmp/bin/python" -m pip install --quiet --no-deps "${nodeps[@]}"
  "$tmp/bin/python" -c "import torchtitan.distributed.pipeline_parallel, torchtitan.models.llama3"
fi
# A venv names its own path in its scripts: point them at the final place before the rename.
{ grep -rlI --null -F "$tmp" "$tmp/bin" "$tmp/pyvenv.cfg" 2>/dev/null || true; } |
  xargs -0 -r sed -i "s#$tmp#$venv#g"
"$tmp/bin/python" -m pip freeze >"$tmp/.tightpipe-freeze.txt"
echo "made by $repo/scripts/setup-python.sh on $(date -u +%FT%TZ)" >"$tmp/.tightpipe-complete"
if [ -e "$venv" ]; then
  # An earlier environment without the marker (an older script's, or one that a person moved):
  # set it aside, then remove it, so the rename below is atomic.
  mv "$venv" "$tmp.old" && rm -rf "$tmp.old"
fi
mv "$tmp" "$venv"
trap - EXIT
# Again at the final path (the pins are in place: a no-op for pip), so that DeepSpeed's CPU op is
# built against the paths its runs will use.
./scripts/setup-python-peers.sh "$venv"
echo "setup-python: environment ready at $venv ($((SECONDS - start)) s," \
  "$(du -sh "$venv" | cut -f1) on disk)"
