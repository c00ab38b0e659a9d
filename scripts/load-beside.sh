#!/usr/bin/env bash
# Load for proving the test command under load (issue 43): rebuilds the project in a loop in a
# build folder of its own, one job, ccache off, until killed or for DURATION seconds (default:
# forever). Run it beside `./scripts/test.sh` (or ctest) on a fresh clone, e.g.
#   ./scripts/load-beside.sh 3600 & ./scripts/test.sh; kill %1
# Environment: LOAD_BUILD_DIR (default build-load), JOBS (default 1).
set -euo pipefail
cd "$(dirname "$0")/.."
B=${LOAD_BUILD_DIR:-build-load}
DURATION=${1:-0}
export CCACHE_DISABLE=1
if [ ! -f "$B/build.ninja" ]; then
  cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
start=$SECONDS
n=0
while ((DURATION == 0 || SECONDS - start < DURATION)); do
  cmake --build "$B" --target clean >/dev/null
  t0=$SECONDS
  cmake --build "$B" -j "${JOBS:-1}" >/dev/null 2>&1 || true
  n=$((n + 1))
  echo "load-beside: rebuild $n took $((SECONDS - t0)) s"
done
