"""Peer runs beside tightpipe: the generators' orders (`tightpipe schedule`), the simulator's
prediction (`tightpipe simulate --engine ...`) from the run's own measured durations, and the
harness's own idle-per-rank-and-cause (to hold `tightpipe report` to).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tightpipe.peers.common import Event, PeerError, PeerRun


def find_tightpipe() -> str:
    """The tightpipe binary, by the package's one rule (tightpipe.cli.find_binary):
    $TIGHTPIPE_BIN, the binary `pip install ./python` bundled, build/tools/tightpipe/tightpipe of
    this checkout, then PATH. PeerError when there is none."""
    from tightpipe.cli import find_binary
    from tightpipe.errors import BinaryNotFoundError

    try:
        return find_binary()
    except BinaryNotFoundError as e:
        raise PeerError(str(e)) from None


def _tool(args: Sequence[str]) -> str:
    r = subprocess.run([find_tightpipe(), *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"tightpipe {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def generator_orders(
    schedule: str, pp: int, microbatches: int, vpp: int = 1, group: Optional[int] = None
) -> List[List[str]]:
    """Each rank's compute order from `tightpipe schedule ... --format csv`."""
    args = [
        "schedule",
        "--schedule",
        schedule,
        "--pp",
        str(pp),
        "--microbatches",
        str(microbatches),
        "--vpp",
        str(vpp),
        "--format",
        "csv",
    ]
    if group is not None:
        args += ["--microbatch-group-size", str(group)]
    return [line.split(",") for line in _tool(args).strip().splitlines()]


def first_differences(engine: List[List[str]], ours: List[List[str]]) -> Dict[int, str]:
    """Rank -> where the two orders first part ("step k: engine X, ours Y"); equal ranks absent."""
    out = {}
    for r, (a, b) in enumerate(zip(engine, ours, strict=False)):
        if a == b:
            continue
        k = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        out[r] = (
            f"step {k}: engine {a[k] if k < len(a) else '(end)'}, "
            f"ours {b[k] if k < len(b) else '(end)'}"
        )
    return out


# ---------------------------------------------------------------------------------------------
# Measured durations -> the cost table the prediction uses


def host_inclusive(events: List[Event]) -> List[Tuple[Event, float]]:
    """(compute event, its host-inclusive duration) for each F/B of one rank and step: from the
    end of the event before it (the wait that released it, or the previous compute) to the start
    of the event after it (the next wait or compute). What the engine's Python does around a
    compute (Megatron's forward_step bookkeeping, DeepSpeed's LoadMicroBatch) is work the rank does
    between two waits, so it belongs to the compute in a model that knows computes and waits."""
    evs = sorted(
        (e for e in events if e.kind in ("F", "B", "SEND", "RECV")), key=lambda e: (e.start, e.end)
    )
    out = []
    for i, e in enumerate(evs):
        if e.kind not in ("F", "B"):
            continue
        start = max((x.end for x in evs[:i] if x.end <= e.start), default=e.start)
        end = evs[i + 1].start if i + 1 < len(evs) else e.end
        out.append((e, max(e.end, end) - min(e.start, start)))
    return out


BLOCKED_WAIT_S = 50e-6  # an asynchronous receive's wait that took longer waited for its message


def measured_costs(run: PeerRun) -> Dict[str, Any]:
    """costs.json (ms) from the run's own measured steps (never the table it was asked for):
    per stage the median host-inclusive F and B (host_inclusive); the link latency, the median
    time a message takes once both its send and its receive are posted (receive end - the later
    of the two posts; for an asynchronous receive only where the engine's wait on it blocked);
    an optimizer time per stage, the median time from the last rank's last
    compute or message to the step's end (DeepSpeed's ReduceGrads, OptimizerStep and loss
    broadcast; Megatron's return)."""
    f: Dict[int, List[float]] = {}
    b: Dict[int, List[float]] = {}
    crossing = []
    tail = []
    for step in run.measured_steps():
        posts: Dict[Tuple[Any, ...], float] = {}
        recvs = []
        program_end = 0.0
        for r in range(run.pp):
            evs = run.step_events(step, r)
            for e, d in host_inclusive(evs):
                (f if e.kind == "F" else b).setdefault(e.stage, []).append(d)
            for e in evs:
                if e.kind in ("F", "B", "SEND", "RECV"):
                    program_end = max(program_end, e.end)
                if e.kind == "SEND":
                    posts[("_B" in e.name, e.mb, _recv_stage(e))] = e.start
                elif e.kind == "RECV":
                    recvs.append(e)
        tail.append(run.step_time(step) - program_end)
        for e in recvs:
            key = ("_B" in e.name, e.mb, e.stage)
            if key not in posts:
                continue
            # An asynchronous receive (overlap) ends when the engine's wait returned: a crossing
            # only where that wait blocked (the message came in during it), else it measures
            # the engine's compute in between.
            if e.wait >= 0 and e.end - e.wait < BLOCKED_WAIT_S:
                continue
            crossing.append(e.end - max(e.start, posts[key]))
    stages = sorted(f)
    if stages != list(range(run.pp * run.vpp)):
        raise RuntimeError(f"measured stages {stages} for p={run.pp} x v={run.vpp}")
    opt = 1e3 * statistics.median(tail)
    return {
        "time_unit": "ms",
        "link": {"latency": 1e3 * statistics.median(crossing) if crossing else 0.0},
        "stages": [
            {
                "stage": s,
                "f": 1e3 * statistics.median(f[s]),
                "i": 1e3 * statistics.median(b[s]),
                "w": 0.0,
                "optimizer": opt,
            }
            for s in stages
        ],
    }


def host_time(run: PeerRun, step: int, rank: int) -> float:
    """Seconds of host work the rank did around its computes in one step (host-inclusive minus
    compute): busy in the prediction's costs, idle in the report's definition."""
    return sum(d - (e.end - e.start) for e, d in host_inclusive(run.step_events(step, rank)))


def _recv_stage(send: Event) -> int:
    return send.stage + 1 if "SEND_F" in send.name else send.stage - 1


def simulate(run: PeerRun, engine: str, costs: Dict[str, Any]) -> Dict[str, Any]:
    """`tightpipe simulate --engine ENGINE --json` of the run's schedule and shape."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "costs.json")
        with open(path, "w") as fh:
            json.dump(costs, fh)
        args = [
            "simulate",
            "--schedule",
            run.schedule,
            "--pp",
            str(run.pp),
            "--microbatches",
            str(run.microbatches),
            "--vpp",
            str(run.vpp),
            "--costs",
            path,
            "--engine",
            engine,
            "--json",
        ]
        if run.vpp > 1:
            args += [
                "--microbatch-group-size",
                str(run.options.get("microbatch_group_size_per_vp_stage", run.pp)),
            ]
        out: Dict[str, Any] = json.loads(_tool(args))
        return out


# ---------------------------------------------------------------------------------------------
# The harness's own idle accounting (docs/report.md's rules, written again from the recorded
# events, to hold `tightpipe report` reading the files to)

CAUSES = ("fill", "drain", "exposed comm", "dependency wait", "data wait", "other")


def harness_idle(run: PeerRun, step: int) -> List[Dict[str, float]]:
    """Per rank: seconds of idle by cause in one step. The window is [0, T], T the latest event
    end; busy is F and B, and an optimizer event from when every rank has reached it. Each idle
    instant m of a gap gets the first cause that holds: data wait (inside a data load); exposed
    comm (inside the rank's own blocking send: the engines here post no send they do not wait
    for; or the compute after the gap waits for a message the peer had posted, posted <= m <
    arrival); drain (after the last compute); fill (before the first); dependency wait (the
    message was not posted yet); other."""
    evs = [run.step_events(step, r) for r in range(run.pp)]
    T = max(e.end for es in evs for e in es)
    opt_sync = max((e.start for es in evs for e in es if e.kind == "optimizer"), default=0.0)
    send_start: Dict[Tuple[bool, int, int], float] = {}
    for es in evs:
        for e in es:
            if e.kind == "SEND":
                k = ("_B" in e.name, e.stage, e.mb)
                send_start[k] = min(send_start.get(k, float("inf")), e.start)
    last_stage = run.pp * run.vpp - 1
    out = []
    for es in evs:
        comps = sorted((e for e in es if e.kind in ("F", "B")), key=lambda e: e.start)
        busy = sorted(
            [(e.start, e.end, e) for e in comps]
            + [(max(e.start, opt_sync), e.end, None) for e in es if e.kind == "optimizer"],
            key=lambda x: x[0],
        )
        first = comps[0].start if comps else T
        last = max((e.end for e in comps), default=0.0)
        recv_end = {("_B" in e.name, e.stage, e.mb): e.end for e in es if e.kind == "RECV"}
        sends = [(e.start, e.end) for e in es if e.kind == "SEND"]
        data = [(e.start, e.end) for e in es if e.kind == "data"]
        idle = {c: 0.0 for c in CAUSES}
        t = 0.0
        gaps = []
        for s0, e0, ev in busy:
            if s0 > t:
                gaps.append((t, s0, ev))
            t = max(t, e0)
        if t < T:
            gaps.append((t, T, None))
        for a, b, nxt in gaps:
            posted = arrived = None
            if nxt is not None:
                grad = nxt.kind == "B"
                other = nxt.stage + 1 if grad else nxt.stage - 1
                if 0 <= other <= last_stage and (grad, nxt.stage, nxt.mb) in recv_end:
                    arrived = recv_end[(grad, nxt.stage, nxt.mb)]
                    posted = send_start.get((grad, other, nxt.mb))
            cut_set = {a, b, first, last}
            cut_set |= {x for iv in sends + data for x in iv}
            cut_set |= {x for x in (posted, arrived) if x is not None}
            cuts = sorted(x for x in cut_set if a <= x <= b)
            for x, y in zip(cuts, cuts[1:], strict=False):
                m = 0.5 * (x + y)
                idle[_cause(m, data, sends, posted, arrived, first, last)] += y - x
        out.append(idle)
    return out


def _inside(ivs: List[Tuple[float, float]], m: float) -> bool:
    return any(s <= m < e for s, e in ivs)


def _cause(
    m: float,
    data: List[Tuple[float, float]],
    sends: List[Tuple[float, float]],
    posted: Optional[float],
    arrived: Optional[float],
    first: float,
    last: float,
) -> str:
    if _inside(data, m):
        return "data wait"
    if _inside(sends, m):
        return "exposed comm"
    if posted is not None and arrived is not None and posted <= m < arrived:
        return "exposed comm"
    if m >= last:
        return "drain"
    if m < first:
        return "fill"
    if posted is not None and m < posted:
        return "dependency wait"
    return "other"
