#!/usr/bin/env python3
"""Writes tests/data/tune/: the closed loop's example, which docs/torch.md section 8 runs as
written: the measured modules of the bench's GPT (layers.json: GPT-2 small's proportions at
d = 128, 12 blocks), tightpipe tune's recommendation for p = 2, m = 8 from the even split under
Schedule1F1B (tune.json, schedule.csv, schedule_compute.csv), and one profiled step of that
recommendation applied in PyTorch's runtime (rank0.json.gz, rank1.json.gz: p = 2 gloo processes,
1 thread each). Run from the repository root in the Python environment:

    PYTHONPATH=python:python/tests $(./scripts/setup-python.sh --print-venv)/bin/python \\
        python/tests/make_tune_data.py
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(REPO, "tests", "data", "tune")

from tightpipe.torch import profile_step  # noqa: E402
from tightpipe.torch.gpt import GptConfig, batch, loss_fn, make_layered  # noqa: E402
from tightpipe.torch.launch import spawn  # noqa: E402
from tightpipe.torch.layers import measure_layers, top_level_modules  # noqa: E402
from tightpipe.torch.tune import (  # noqa: E402
    TuneResult,
    build_tuned_runtime,
    measure_host_time,
    tune,
)

CFG = GptConfig(vocab=round(50257 * 128 / 768), seq=64, d_model=128, heads=2)
LAYERS, MB, M = 12, 2, 8


def modules():
    named = top_level_modules(make_layered(CFG, LAYERS, 0))
    return [m for _, m in named], [n for n, _ in named]


def run(rank: int, world: int, res: TuneResult, trace_dir: str) -> None:
    runtime, _, _ = build_tuned_runtime(modules, res, rank, loss_fn)
    mine = res.stages_of(rank)
    tokens, targets = batch(CFG, MB * M)
    args = (tokens,) if 0 in mine else ()
    kw = {"target": targets if res.num_stages - 1 in mine else None, "losses": []}
    for _ in range(2):
        runtime.step(*args, **kw)
    profile_step(runtime, *args, trace_path=os.path.join(trace_dir, f"rank{rank}.json"), **kw)


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    tokens, targets = batch(CFG, MB)
    layers = os.path.join(OUT, "layers.json")
    measure_layers(
        make_layered(CFG, LAYERS, 0), tokens, loss_fn=loss_fn, target=targets, reps=7, out=layers
    )
    with tempfile.TemporaryDirectory() as tmp:
        host_us = measure_host_time(pp=2, microbatches=M)
        print(f"the runtime's host time around each action: {host_us} us")
        res = tune(
            layers,
            2,
            M,
            out=os.path.join(tmp, "tuned"),
            current_split=[7, 8],
            current_schedule="Schedule1F1B",
            host_time_us=host_us,
        )
        print(res.table)
        for name in ("tune.json", "schedule.csv", "schedule_compute.csv"):
            shutil.copy(os.path.join(res.directory, name), os.path.join(OUT, name))
        spawn(2, run, res, tmp, timeout=600)
        for r in (0, 1):
            with (
                open(os.path.join(tmp, f"rank{r}.json"), "rb") as f,
                gzip.GzipFile(os.path.join(OUT, f"rank{r}.json.gz"), "wb", mtime=0) as g,
            ):
                g.write(f.read())
    return 0


if __name__ == "__main__":
    sys.exit(main())
