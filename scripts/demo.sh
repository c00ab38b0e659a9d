#!/usr/bin/env bash
# Sets everything up and runs tightpipe's main job on the embedded default: a short
# pipeline-parallel training of the GPT model (4 layers x 128, T=128) on tiny Shakespeare
# (../shared/data), 2 threads as ranks (one per core of a 2-core machine), the ZB-H1 schedule; it
# prints the measured bubble next to the simulator's prediction and the data wait.
set -euo pipefail
cd "$(dirname "$0")/.."
# The demo runs only the CLI: build that target alone, not the test suite and the benches.
BUILD_TARGETS=tightpipe ./scripts/setup.sh
TP=${BUILD_DIR:-build}/tools/tightpipe/tightpipe
OUT=${OUT_DIR:-runs/demo}
set -x
$TP schedule --schedule zb-h1 --pp 4 --microbatches 8
$TP train --pp 2 --schedule zb-h1 --num-microbatches 8 \
  --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 --micro-batch-size 8 \
  --train-iters 30 --lr 3e-3 --lr-warmup-iters 5 --eval-iters 4 \
  --data-path ../shared/data/tinyshakespeare.txt --out-dir "$OUT" --trace "$OUT/trace.json"
