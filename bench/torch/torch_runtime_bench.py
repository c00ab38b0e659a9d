#!/usr/bin/env python3
"""tightpipe's schedules inside PyTorch's own pipelining runtime, beside PyTorch's built-in
schedules of the same shape, in one run: step time (median of the timed steps) and the bubble
measured from one profiled step's trace per rank (tightpipe.torch.idle_from_trace: the definitions
of docs/torch.md, the same `tightpipe report` prints).

The model is python/tightpipe/torch/gpt.py's GPT with a large vocabulary, so that the last stage
(final LayerNorm + LM head) is the heaviest; the cost-aware schedules (zb-1p, zb-2p, zb-v-auto,
v-half, v-min) are built from per-stage costs measured here first (F and B of each stage on one
microbatch, I = W = B / 2), passed to `tightpipe schedule --costs`.

    ./python/run-tests.sh is the test runner; this is run by hand, in the environment of
    scripts/setup-python.sh:
    PYTHONPATH=python:python/tests $(./scripts/setup-python.sh --print-venv)/bin/python \\
        bench/torch/torch_runtime_bench.py [--pp 2] [--microbatches 8] [--smoke]

Prints one table; absolute numbers move between runs on shared machines: compare rows of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import TypedDict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(REPO, "python"), os.path.join(REPO, "python", "tests")]

import torch  # noqa: E402

from tightpipe.schedule import TorchSchedule, generate  # noqa: E402
from tightpipe.torch import idle_from_trace, profile_step  # noqa: E402
from tightpipe.torch.gpt import GptConfig, batch, make_stages  # noqa: E402
from tightpipe.torch.launch import spawn  # noqa: E402
from trace_worker import _runtime  # noqa: E402

MB = 2  # sequences per microbatch (trace_worker's batch: 2 * m sequences)


class Entry(TypedDict):
    """One row: PyTorch's class `builtin` (sched None) or tightpipe's schedule `sched`."""

    label: str
    kind: str  # placement(): "loop1", "loop2" or "v"
    sched: TorchSchedule | None
    builtin: str | None
    m: int
    stage_to_rank: list[int]


class StepKw(TypedDict):
    """The keyword arguments of each runtime.step()."""

    target: torch.Tensor | None
    losses: list[torch.Tensor]


class GenerateKw(TypedDict, total=False):
    """generate()'s keyword arguments a row of ours passes."""

    vpp: int
    costs: str


def measure_costs(cfg: GptConfig, num_stages: int, reps: int) -> list[dict[str, float]]:
    """F and B seconds of each stage on one microbatch, one thread, median of `reps`."""
    torch.set_num_threads(1)
    stages = make_stages(cfg, num_stages, 0)
    tokens, _ = batch(cfg, MB)
    x = tokens
    out = []
    for s, st in enumerate(stages):
        fs, bs = [], []
        for _ in range(reps + 1):
            inp = x.detach().requires_grad_(x.is_floating_point())
            t0 = time.perf_counter()
            y = st(inp)
            t1 = time.perf_counter()
            y.float().pow(2).mean().backward()
            t2 = time.perf_counter()
            fs.append(t1 - t0)
            bs.append(t2 - t1)
        f, b = sorted(fs[1:])[reps // 2], sorted(bs[1:])[reps // 2]
        out.append({"stage": s, "f": f * 1e3, "i": b * 5e2, "w": b * 5e2})
        x = y.detach()
    return out


def bench_all(
    rank: int,
    world: int,
    cfg: GptConfig,
    entries: list[Entry],
    trace_dir: str,
    warmup: int,
    timed: int,
) -> list[float]:
    """Every entry's runtime built and warmed up, then `timed` rounds that each time one step of
    every entry in turn (so that the load of a shared machine falls on all entries alike), then
    one profiled step of each. Returns each entry's median step seconds."""
    runs = []
    for e in entries:
        rt, mine, num = _runtime(rank, cfg, e["sched"], e["builtin"], e["m"], e["stage_to_rank"])
        tokens, targets = batch(cfg, MB * e["m"])
        args = (tokens,) if 0 in mine else ()
        kw: StepKw = {"target": targets if num - 1 in mine else None, "losses": []}
        for _ in range(warmup):
            rt.step(*args, **kw)
        runs.append((rt, args, kw))
    times: list[list[float]] = [[] for _ in entries]
    for _ in range(timed):
        for k, (rt, args, kw) in enumerate(runs):
            torch.distributed.barrier()
            t0 = time.perf_counter()
            rt.step(*args, **kw)
            torch.distributed.barrier()
            times[k].append(time.perf_counter() - t0)
    for k, (rt, args, kw) in enumerate(runs):
        profile_step(rt, *args, trace_path=os.path.join(trace_dir, f"{k}-rank{rank}.json"), **kw)
    return [sorted(t)[len(t) // 2] for t in times]


def placement(kind: str, p: int) -> list[int]:
    if kind == "loop1":
        return list(range(p))
    if kind == "loop2":
        return [s % p for s in range(2 * p)]
    return [s if s < p else 2 * p - 1 - s for s in range(2 * p)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--timed", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="tiny model, two schedules, one step")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated substrings: run the rows whose "
        "label holds one of them (e.g. Interleaved1F1B,interleaved)",
    )
    args = ap.parse_args()
    p, m = args.pp, args.microbatches
    if args.smoke:
        cfg = GptConfig()
        args.warmup, args.timed = 1, 1
    else:
        cfg = GptConfig(vocab=8192, seq=64, d_model=128, heads=4, blocks_per_stage=1)

    costs: dict[int, tuple[str, list[dict[str, float]]]] = {}
    with tempfile.TemporaryDirectory(prefix="tp-torch-bench-") as tmp:
        for v in (1, 2):
            table = measure_costs(cfg, p * v, 3 if args.smoke else 7)
            path = os.path.join(tmp, f"costs_v{v}.json")
            with open(path, "w") as f:
                json.dump({"time_unit": "ms", "stages": table}, f)
            costs[v] = (path, table)
        ours: list[tuple[str, str, GenerateKw]] = [
            ("1f1b", "loop1", {}),
            ("zb-h1", "loop1", {}),
            ("zb-1p", "loop1", {"costs": costs[1][0]}),
            ("zb-2p", "loop1", {"costs": costs[1][0]}),
            ("interleaved", "loop2", {"vpp": 2}),
            ("zb-v", "v", {}),
            ("zb-v-auto", "v", {"costs": costs[2][0]}),
            ("v-half", "v", {"costs": costs[2][0]}),
            ("v-min", "v", {"costs": costs[2][0]}),
        ]
        builtins = [
            ("Schedule1F1B", "loop1"),
            ("ScheduleInterleaved1F1B", "loop2"),
            ("ScheduleInterleavedZeroBubble", "loop2"),
            ("ScheduleZBVZeroBubble", "v"),
        ]
        if args.smoke:
            ours, builtins = (
                [("zb-v-auto", "v", {"costs": costs[2][0]})],
                [("ScheduleZBVZeroBubble", "v")],
            )
        entries: list[Entry] = []
        for name, kind in builtins:
            entries.append(
                {
                    "label": f"PyTorch {name}",
                    "kind": kind,
                    "sched": None,
                    "builtin": name,
                    "m": m,
                    "stage_to_rank": placement(kind, p),
                }
            )
        for name, kind, kw in ours:
            sched = generate(name, p, m, **kw)
            assert sched.stage_to_rank == placement(kind, p), name
            entries.append(
                {
                    "label": f"tightpipe {name}",
                    "kind": kind,
                    "sched": sched,
                    "builtin": None,
                    "m": m,
                    "stage_to_rank": sched.stage_to_rank,
                }
            )
        if args.only:
            keys = args.only.split(",")
            entries = [e for e in entries if any(k in e["label"] for k in keys)]
        t0 = time.time()
        per_rank = spawn(p, bench_all, cfg, entries, tmp, args.warmup, args.timed, timeout=3600)
        wall = time.time() - t0
        print(
            f"PyTorch {torch.__version__} runtime, p={p} CPU processes on gloo, 1 thread each, "
            f"m={m}, microbatch {MB}x{cfg.seq} tokens, GPT d={cfg.d_model} "
            f"vocab={cfg.vocab} {cfg.blocks_per_stage} block(s)/stage; {wall:.0f} s"
        )
        for v in (1, 2):
            print(
                f"  measured costs v={v} (ms, F / B per stage): "
                + ", ".join(f"{c['f']:.2f}/{c['i'] * 2:.2f}" for c in costs[v][1])
            )
        hdr = f"{'schedule':<40} {'placement':<10} {'step ms':>9} " + " ".join(
            f"{'bubble r' + str(r):>10}" for r in range(p)
        )
        print(hdr)
        print("-" * len(hdr))
        for k, e in enumerate(entries):
            step = max(per_rank[r][k] for r in range(p)) * 1e3
            try:
                idle = idle_from_trace([os.path.join(tmp, f"{k}-rank{r}.json") for r in range(p)])
                bubbles = [f"{idle[r]['bubble'] * 100:9.1f}%" for r in range(p)]
            except ValueError:  # Schedule1F1B's loop records no PP: range (docs/torch.md)
                bubbles = [f"{'n/a':>10}"] * p
            print(f"{e['label']:<40} {e['kind']:<10} {step:9.1f} " + " ".join(bubbles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
