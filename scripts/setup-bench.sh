#!/usr/bin/env bash
# scripts/setup.sh plus what the benches compare against and CI does not need: the PyTorch peer of
# build/bench/nn/bench_nn (../shared/peers/torch_gpt_bench.py), Debian's python3-torch (PyTorch
# 1.13, CPU, for /usr/bin/python3). Safe to run again: a no-op when everything is in place.
set -euo pipefail
cd "$(dirname "$0")/.."

TP_EXTRA_PACKAGES="python3-torch ${TP_EXTRA_PACKAGES:-}" scripts/setup.sh
/usr/bin/python3 -c 'import torch; print("setup-bench: PyTorch", torch.__version__, "for /usr/bin/python3")'
