#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (every label, slow and mpi ones included), then
# the sanitizer lane: an ASan+UBSan build of the unit tests and every fuzz target for a bounded
# time (scripts/sanitize.sh; SANITIZE=0 skips it).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
(cd "$BUILD_DIR" && ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@")
if [ "${SANITIZE:-1}" != 0 ]; then
  ./scripts/sanitize.sh
fi
