"""Profile a pipelining step and measure its idle time from the trace.

`profile_step` runs `runtime.step(...)` under torch.profiler (CPU activity) and writes this rank's
Kineto trace (export_chrome_trace): PyTorch's runtime wraps each action of the row in a
`PP:<action>` user_annotation range on the main thread, which `tightpipe report TRACE...` reads.

`idle_from_trace` is the measurement the report is compared with, computed here from the PP:
ranges alone: the step's window runs from the first PP: range of any rank to the last one's end
(one host, one clock); a rank is busy inside its compute ranges (F, I, B, W, OVERLAP_F_B) from the
first profiled op in the range to the range's end (the runtime first waits for the received input
inside the same range, with no op of its own: that wait is idle); idle = window - busy.
"""

from __future__ import annotations

import gzip
import json
import re
from typing import Any

import torch
import torch.distributed as dist

_COMPUTE = re.compile(r"PP:(?:\(.*\)OVERLAP_F_B|\d+[FIBW]\d+)$")


def profile_step(runtime: Any, *args: Any, trace_path: str, barrier: bool = True, **kwargs: Any):
    """One `runtime.step(*args, **kwargs)` under torch.profiler; the trace goes to trace_path.
    Run a step before it: the first step also sets up the stages (shape exchange, connections).
    With `barrier`, all ranks of the default group start the step together."""
    if barrier and dist.is_initialized():
        dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = runtime.step(*args, **kwargs)
    prof.export_chrome_trace(trace_path)
    return out


def _load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def idle_from_trace(paths: list[str]) -> dict[int, dict[str, float]]:
    """{rank: {"window_s", "busy_s", "idle_s", "bubble"}} for one traced step, one trace per rank
    (ranks from each file's distributedInfo)."""
    per_rank: dict[int, list[tuple[float, float]]] = {}
    starts, ends = [], []
    for path in paths:
        doc = _load(path)
        rank = int(doc["distributedInfo"]["rank"])
        events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
        pp = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("PP:")]
        if not pp:
            raise ValueError(f"trace '{path}' holds no PP: range; hint: profile a step of "
                             "PyTorch's _PipelineScheduleRuntime")
        tid = pp[0]["tid"]
        ops = sorted(e["ts"] for e in events if e.get("cat") == "cpu_op" and e["tid"] == tid)
        starts.append(min(e["ts"] for e in pp))
        ends.append(max(e["ts"] + e["dur"] for e in pp))
        busy = []
        for e in pp:
            if not _COMPUTE.match(e["name"]):
                continue
            lo, hi = e["ts"], e["ts"] + e["dur"]
            first = next((t for t in ops if lo <= t <= hi), None)
            if first is not None:
                busy.append((first, hi))
        per_rank[rank] = busy
    window = (max(ends) - min(starts)) * 1e-6
    out = {}
    for rank, busy in sorted(per_rank.items()):
        b = sum(hi - lo for lo, hi in busy) * 1e-6
        out[rank] = {"window_s": window, "busy_s": b, "idle_s": window - b,
                     "bubble": (window - b) / window if window > 0 else 0.0}
    return out
