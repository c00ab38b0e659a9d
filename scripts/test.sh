#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (every label, slow and mpi ones included).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
