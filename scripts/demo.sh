#!/usr/bin/env bash
# Sets everything up and runs tightpipe's main job on the embedded default: threads as ranks, the
# tiny Shakespeare text from ../shared/data.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
TP=${BUILD_DIR:-build}/tools/tightpipe/tightpipe
set -x
$TP schedule --schedule zb-h1 --pp 4 --microbatches 8
$TP schedule --schedule interleaved --pp 4 --vpp 2 --microbatches 8 --lowered --format grid
