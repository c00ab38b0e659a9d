"""Profile a pipelining step and measure its idle time from the trace.

`profile_step` runs `runtime.step(...)` under torch.profiler (CPU activity) and writes this rank's
Kineto trace (export_chrome_trace): PyTorch's runtime wraps each action of the row in a
`PP:<action>` user_annotation range on the main thread, which `tightpipe report TRACE...` reads.

`idle_from_trace` is the measurement the report is compared with, computed here from the PP:
ranges alone, by the definitions docs/torch.md gives for a CPU trace: a compute range (F, I, B, W,
OVERLAP_F_B) is busy from the first profiled op inside it to its end (the runtime first waits for
the received input inside the same range, with no op of its own: that wait is idle); a SEND/RECV
range (posting an isend/irecv) is busy (communication) for its whole length; WAIT_SEND ranges are
idle. A rank's window runs from its first busy interval to its last; idle = window - busy.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from tightpipe import _args
from tightpipe.errors import ArgumentError, ArgumentTypeError

_COMPUTE = re.compile(r"PP:(?:\(.*\)OVERLAP_F_B|\d+[FIBW]\d+)$")
_COMM = re.compile(r"PP:\d+(?:SEND|RECV)_[FB]\d+$")


def profile_step(
    runtime: Any,
    *args: Any,
    trace_path: str | os.PathLike[str],
    barrier: bool = True,
    step: int = 1,
    **kwargs: Any,
) -> Any:
    """One `runtime.step(*args, **kwargs)` under torch.profiler; the trace goes to trace_path.
    Run a step before it: the first step also sets up the stages (shape exchange, connections).
    With `barrier`, all ranks of the default group start the step together. The arguments are
    checked before the step runs (a trace_path whose folder is missing would fail after it)."""
    if not callable(getattr(runtime, "step", None)):
        raise ArgumentTypeError(
            f"runtime {_args.show(runtime)}: has no step() method; hint: the runtime "
            "build_runtime returned (or any PyTorch pipeline schedule)"
        )
    trace_path = _args.writable_file(
        "trace_path", trace_path, "a file in an existing folder, e.g. f'trace_rank{rank}.json'"
    )
    _args.flag("barrier", barrier, "True starts all ranks' steps together")
    _args.count(
        "step",
        step,
        0,
        2**31 - 1,
        "the step's number in the trace's ProfilerStep#N range, e.g. step=1",
    )
    if barrier and dist.is_initialized():
        dist.barrier()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:  # noqa: SIM117
        # The iteration mark torch.profiler's own step() writes with a schedule: the report fits
        # and compares steps (one here).
        with torch.profiler.record_function(f"ProfilerStep#{step}"):
            out = runtime.step(*args, **kwargs)
    prof.export_chrome_trace(trace_path)
    return out


def _load(path: str) -> dict[str, Any]:
    """The trace's JSON object; ValueError naming the file when it cannot be read as one."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt") as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(
            f"trace '{path}': {e.strerror or e}; hint: the file profile_step wrote"
        ) from None
    except (ValueError, EOFError) as e:  # JSON, UTF-8 or gzip damage
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"trace '{path}': not a Kineto JSON trace ({msg}); hint: the file "
            "profile_step wrote, whole"
        ) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"trace '{path}': no traceEvents list; hint: the file profile_step wrote")
    return doc


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(spans):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def idle_from_trace(paths: Sequence[str | os.PathLike[str]]) -> dict[int, dict[str, float]]:
    """{rank: {"window_s", "busy_s", "compute_s", "idle_s", "bubble"}} for one traced step, one
    trace per rank (ranks from each file's distributedInfo)."""
    hint = "a list of trace files, one per rank, as profile_step wrote them"
    if isinstance(paths, (str, bytes, os.PathLike)) or not isinstance(paths, Sequence):
        raise ArgumentTypeError(
            f"paths {_args.show(paths)}: must be a list of trace paths, not "
            f"{type(paths).__name__}; hint: {hint}, e.g. idle_from_trace(['rank0.json'])"
        )
    if not paths:
        raise ArgumentError(f"paths []: no trace; hint: {hint}")
    files = [_args.path(f"paths[{i}]", p, hint) for i, p in enumerate(paths)]
    out: dict[int, dict[str, float]] = {}
    for path in files:
        doc = _load(path)
        try:
            rank = int(doc["distributedInfo"]["rank"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"trace '{path}': no distributedInfo.rank; hint: profile inside an "
                "initialised process group (torch.distributed)"
            ) from None
        if rank in out:
            raise ValueError(
                f"trace '{path}': rank {rank} again (an earlier file has it); hint: "
                "one trace per rank"
            )
        events = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
        pp = [
            e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("PP:")
        ]
        if not pp:
            raise ValueError(
                f"trace '{path}' holds no PP: range; hint: profile a step of "
                "PyTorch's _PipelineScheduleRuntime"
            )
        tid = pp[0]["tid"]
        ops = sorted(e["ts"] for e in events if e.get("cat") == "cpu_op" and e["tid"] == tid)
        compute, comm = [], []
        for e in pp:
            lo, hi = e["ts"], e["ts"] + e["dur"]
            if _COMPUTE.match(e["name"]):
                i = bisect.bisect_left(ops, lo)
                if i < len(ops) and ops[i] <= hi:
                    compute.append((ops[i], hi))
            elif _COMM.match(e["name"]):
                comm.append((lo, hi))
        busy = compute + comm
        window = (max(hi for _, hi in busy) - min(lo for lo, _ in busy)) * 1e-6
        b = _union(busy) * 1e-6
        out[rank] = {
            "window_s": window,
            "busy_s": b,
            "compute_s": _union(compute) * 1e-6,
            "idle_s": window - b,
            "bubble": (window - b) / window if window > 0 else 0.0,
        }
    return dict(sorted(out.items()))
