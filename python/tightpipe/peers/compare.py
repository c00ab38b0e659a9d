"""Peer runs beside tightpipe: the generators' orders (`tightpipe schedule`), the simulator's
prediction (`tightpipe simulate --engine ...`) from the run's own measured durations or from the
asked compute plus the engine's host time and link measured once per machine by a probe
(measure_engine_host_time), and the harness's own idle-per-rank-and-cause (to hold `tightpipe
report` to).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tightpipe.peers.common import (
    HIDDEN,
    CostTable,
    Event,
    PeerError,
    PeerRun,
    check_int,
    init_gloo,
    make_costs,
    run_rank,
    spawn,
)


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


def crossings_and_tails(run: PeerRun) -> Tuple[List[float], List[float]]:
    """Milliseconds, over the run's measured steps: each message's crossing, the time it takes
    once both its send and its receive are posted (receive end - the later of the two posts; for
    an asynchronous receive only where the engine's wait on it blocked); and per step the tail,
    from the last rank's last compute or message to the step's end (DeepSpeed's ReduceGrads,
    OptimizerStep and loss broadcast; Megatron's return)."""
    crossing = []
    tail = []
    for step in run.measured_steps():
        posts: Dict[Tuple[Any, ...], float] = {}
        recvs = []
        program_end = 0.0
        for r in range(run.pp):
            for e in run.step_events(step, r):
                if e.kind in ("F", "B", "SEND", "RECV"):
                    program_end = max(program_end, e.end)
                if e.kind == "SEND":
                    posts[("_B" in e.name, e.mb, _recv_stage(e))] = e.start
                elif e.kind == "RECV":
                    recvs.append(e)
        tail.append(1e3 * (run.step_time(step) - program_end))
        for e in recvs:
            key = ("_B" in e.name, e.mb, e.stage)
            if key not in posts:
                continue
            # An asynchronous receive (overlap) ends when the engine's wait returned: a crossing
            # only where that wait blocked (the message came in during it), else it measures
            # the engine's compute in between.
            if e.wait >= 0 and e.end - e.wait < BLOCKED_WAIT_S:
                continue
            crossing.append(1e3 * (e.end - max(e.start, posts[key])))
    return crossing, tail


def measured_costs(run: PeerRun) -> Dict[str, Any]:
    """costs.json (ms) from the run's own measured steps (never the table it was asked for):
    per stage the median host-inclusive F and B (host_inclusive); the link latency, the median
    message crossing, and an optimizer time per stage, the median step tail
    (crossings_and_tails)."""
    f: Dict[int, List[float]] = {}
    b: Dict[int, List[float]] = {}
    for step in run.measured_steps():
        for r in range(run.pp):
            for e, d in host_inclusive(run.step_events(step, r)):
                (f if e.kind == "F" else b).setdefault(e.stage, []).append(d)
    crossing, tail = crossings_and_tails(run)
    stages = sorted(f)
    if stages != list(range(run.pp * run.vpp)):
        raise RuntimeError(f"measured stages {stages} for p={run.pp} x v={run.vpp}")
    opt = statistics.median(tail)
    return {
        "time_unit": "ms",
        "link": {"latency": statistics.median(crossing) if crossing else 0.0},
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


def simulate(
    run: PeerRun, engine: str, costs: Dict[str, Any], host_time_us: Optional[str] = None
) -> Dict[str, Any]:
    """`tightpipe simulate --engine ENGINE --json` of the run's schedule and shape; with
    `host_time_us` (EngineHostTime.host_time_flag()) also `--host-time-us` that."""
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
        if host_time_us is not None:
            args += ["--host-time-us", host_time_us]
        out: Dict[str, Any] = json.loads(_tool(args))
        return out


# ---------------------------------------------------------------------------------------------
# The engine's host time and its link, measured once per machine outside the runs they predict
# (issue 49): with them a run is predicted from the compute its stages are asked to take alone.

# The engines with a probe, and the transports each was measured on (docs/peers.md, "Predicted
# from the probe"). PyTorch's runtime has its own: tightpipe.torch.measure_host_time.
PROBE_ENGINES = {"megatron": ("gloo",), "deepspeed": ("gloo",)}
MESSAGE_BYTES = HIDDEN * 4  # what both harnesses send per message: HIDDEN fp32 values


@dataclasses.dataclass
class EngineHostTime:
    """What measure_engine_host_time measured on this machine for one engine and transport."""

    engine: str  # "megatron" or "deepspeed"
    transport: str  # "gloo"
    # Per kind of action, the engine's host time around one compute beyond what the stage was
    # asked to take, microseconds: `tightpipe simulate --host-time-us` (f, b).
    host_time_us: Dict[str, float]
    # The probe's median message crossing (from both ends posted to the receive's return,
    # measured_costs' rule): the transport and the engine's call around it.
    message_ms: float
    link_ms: float  # the transport's own: a send/recv ping-pong of MESSAGE_BYTES, median one way
    # The engine's step after its last message (DeepSpeed's ReduceGrads, OptimizerStep and loss
    # broadcast; Megatron's schedule returns), median: each stage's `optimizer` time.
    tail_ms: float
    # The p2p operations (sends and receives) per call the engine made in the probe's runs
    # (ops_per_call): what call_ms was spent on.
    ops_per_call: float
    probe: Dict[str, Any]  # what ran: pp, microbatches, f_ms, b_ms, steps, samples, machine, when
    # The same figures from each of the probe's identical runs alone (host_time_us, message_ms,
    # link_ms, tail_ms; run k with the k-th batch of ping-pong rounds): their spread is the
    # probe's own noise (identical()).
    runs: List[Dict[str, Any]] = dataclasses.field(default_factory=list)

    def identical(self) -> List["EngineHostTime"]:
        """The probe as each of its identical runs alone measured it."""
        return [dataclasses.replace(self, runs=[], **r) for r in self.runs]

    @property
    def call_ms(self) -> float:
        """The engine's call around a message beyond the link's ping-pong (negative where the
        ping-pong ran slower than the engine's own messages: a busy machine during the probe)."""
        return self.message_ms - self.link_ms

    @property
    def op_overhead_ms(self) -> float:
        """The engine's call per p2p operation it posts: call_ms over the probe's operations per
        call (never below 0). Each end of a message spends it on its own rank (the sender making
        its send, the receiver its receive buffer), whenever the engine posts it: inside a
        batched waited call (Megatron's default, 2 operations in 1F1B's steady state, 4 in
        interleaved's), posted and waited later (overlap_p2p_comm), or one blocking call an
        operation (DeepSpeed)."""
        return max(0.0, self.call_ms) / self.ops_per_call

    def host_time_flag(self) -> str:
        """The value of `tightpipe simulate --host-time-us`."""
        return ",".join(f"{k}={v:.1f}" for k, v in self.host_time_us.items())

    def costs(self, asked: CostTable, link_only: bool = False) -> Dict[str, Any]:
        """costs.json (ms) of a run from what it asked its stages to take: per stage its F and B,
        every message the link's ping-pong (link_ms) plus, at each end, the engine's call per
        operation (op_overhead_ms: `link.overhead`, compute time the sending and the receiving
        rank each spend; link_only: none), the tail as every stage's optimizer. Nothing from
        the run."""
        return {
            "time_unit": "ms",
            "link": {
                "latency": self.link_ms,
                "overhead": 0.0 if link_only else self.op_overhead_ms,
            },
            "stages": [
                {"stage": s, "f": 1e3 * f, "i": 1e3 * b, "w": 0.0, "optimizer": self.tail_ms}
                for s, (f, b) in enumerate(zip(asked.f, asked.b, strict=True))
            ],
        }

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_json(doc: Dict[str, Any]) -> "EngineHostTime":
        """PeerError, one line, for a probe written before ops_per_call was measured."""
        if "ops_per_call" not in doc:
            raise PeerError(
                f"probe of {doc.get('engine', '?')!r} has no ops_per_call (written by an older "
                "tightpipe); hint: measure it again (peers_bench.py --probe-out FILE)"
            )
        return EngineHostTime(**doc)


def check_probe(engine: str, transport: str) -> None:
    """PeerError, one line, for an engine or a transport with no probe."""
    if engine not in PROBE_ENGINES:
        raise PeerError(
            f"engine {engine!r} has no host-time probe here (probes: "
            f"{', '.join(PROBE_ENGINES)}); hint: PyTorch's runtime is measured by "
            f"tightpipe.torch.measure_host_time, tightpipe's executor by its own run's timeline"
        )
    if transport not in PROBE_ENGINES[engine]:
        raise PeerError(
            f"engine {engine!r} has no measurement on transport {transport!r} (measured: "
            f"{', '.join(PROBE_ENGINES[engine])}); hint: transport='gloo', the harness's"
        )


def _pingpong_worker(rank: int, world: int, port: int, q: Any, rounds: int, nbytes: int) -> None:
    def body() -> List[float]:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        init_gloo(rank, world, port)
        t = torch.zeros(max(1, nbytes // 4))
        one_way = []
        for k in range(rounds + 20):  # the first 20 round trips warm the pair up
            t0 = time.monotonic()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
            if k >= 20:
                one_way.append((time.monotonic() - t0) / 2)
        dist.barrier()
        dist.destroy_process_group()
        return one_way

    run_rank(rank, q, body)


def link_one_way(
    transport: str = "gloo", nbytes: int = MESSAGE_BYTES, rounds: int = 200
) -> List[float]:
    """The transport's own message time, seconds, once per round: a blocking send/recv
    ping-pong of `nbytes` between two processes, the receiver always already waiting; each round
    trip halved (rank 0's clock), in the order they ran."""
    if transport != "gloo":
        raise PeerError(
            f"transport {transport!r} has no link microbenchmark here; hint: transport='gloo'"
        )
    check_int("rounds", rounds)
    check_int("nbytes", nbytes)
    if rounds < 1 or nbytes < 1:
        raise PeerError(f"rounds {rounds}, nbytes {nbytes}; hint: both 1 or more")
    res = spawn(_pingpong_worker, 2, (rounds, nbytes))
    return [float(x) for x in res[0]]


def measure_link(transport: str = "gloo", nbytes: int = MESSAGE_BYTES, rounds: int = 200) -> float:
    """The median of link_one_way, seconds."""
    return float(statistics.median(link_one_way(transport, nbytes, rounds)))


def engine_host_time(run: PeerRun) -> Dict[str, List[float]]:
    """Per kind (F, B): each compute's host-inclusive duration (host_inclusive) minus what its
    stage was asked to take, seconds, over the run's measured steps and every rank."""
    out: Dict[str, List[float]] = {"F": [], "B": []}
    for k in run.measured_steps():
        for r in range(run.pp):
            for e, d in host_inclusive(run.step_events(k, r)):
                asked = (run.costs.f if e.kind == "F" else run.costs.b)[e.stage]
                out[e.kind].append(d - asked)
    return out


def ops_per_call(runs: Sequence[PeerRun]) -> float:
    """Sends and receives per p2p call over the runs' measured steps: the operations one call
    posted share its number (Event.call, Megatron's `_communicate`); an operation without one
    (DeepSpeed's blocking instructions) is a call of its own."""
    ops = 0
    calls = set()
    for run in runs:
        for step in run.measured_steps():
            for r in range(run.pp):
                for e in run.step_events(step, r):
                    if e.kind in ("SEND", "RECV"):
                        ops += 1
                        calls.add((id(run), step, r, e.call if e.call >= 0 else ("op", ops)))
    if not calls:
        raise PeerError("the probe's runs posted no p2p operation; hint: pp=2 or more")
    return ops / len(calls)


def measure_engine_host_time(
    engine: str,
    *,
    transport: str = "gloo",
    pp: int = 2,
    microbatches: int = 8,
    f_ms: float = 1.0,
    b_ms: float = 2.0,
    steps: int = 6,
    repeat: int = 3,
    rounds: int = 200,
) -> EngineHostTime:
    """The engine's host time per kind of action and its messages on this machine, measured
    once, outside the runs they will predict. The engine's own 1F1B (Megatron-Core's batched
    forward_backward_pipelining_without_interleaving, DeepSpeed's TrainSchedule) runs `repeat`
    identical times in one process group of `pp` processes whose stages are asked to take F
    `f_ms` and B `b_ms` (the last stage 1.5x). Pooled over the runs: per kind the median of
    host-inclusive minus asked (engine_host_time), the median message crossing and step tail
    (measured_costs' rules: the crossing is the engine's message time, the transport's and its
    call's), and the link's own ping-pong (link_one_way, `rounds` per identical run), the
    transport's part of it. Each identical run alone
    gives the same figures too (EngineHostTime.runs). PeerError for an engine or transport with
    no probe."""
    check_probe(engine, transport)
    for flag, v in (
        ("pp", pp),
        ("microbatches", microbatches),
        ("steps", steps),
        ("repeat", repeat),
    ):
        check_int(flag, v)
    if pp < 2:
        raise PeerError(f"pp {pp}: the probe needs messages; hint: pp=2")
    if repeat < 1:
        raise PeerError(f"repeat {repeat}; hint: repeat=3")
    for flag, x in (("f_ms", f_ms), ("b_ms", b_ms)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= 1000:
            raise PeerError(f"{flag} {x!r}: must be in (0, 1000] ms; hint: {flag}=1")
    one_way = link_one_way(transport, MESSAGE_BYTES, rounds * repeat)
    costs = make_costs(pp, f_ms, b_ms)
    runs: List[PeerRun]
    if engine == "megatron":
        from tightpipe.peers import megatron

        runs = megatron.run_many(pp, [microbatches] * repeat, costs, steps=steps)
    else:
        from tightpipe.peers import deepspeed

        runs = deepspeed.run_many(pp, [microbatches] * repeat, costs, steps=steps)

    def figures(
        host: Dict[str, List[float]],
        crossings: List[float],
        tails: List[float],
        link_s: List[float],
    ) -> Dict[str, Any]:
        link_ms = 1e3 * statistics.median(link_s)
        return {
            "host_time_us": {
                k.lower(): round(1e6 * statistics.median(v), 1) for k, v in host.items()
            },
            "message_ms": statistics.median(crossings),
            "link_ms": link_ms,
            "tail_ms": statistics.median(tails),
        }

    pooled: Dict[str, List[float]] = {"F": [], "B": []}
    crossings: List[float] = []
    tails: List[float] = []
    per_run = []
    for k, run in enumerate(runs):
        host = engine_host_time(run)
        crossing, tail = crossings_and_tails(run)
        # identical run k pairs with the k-th batch of the ping-pong's rounds
        per_run.append(figures(host, crossing, tail, one_way[k * rounds : (k + 1) * rounds]))
        for kind, durations in host.items():
            pooled[kind] += durations
        crossings += crossing
        tails += tail
    from tightpipe.verdict import machine_line

    return EngineHostTime(
        engine=engine,
        transport=transport,
        **figures(pooled, crossings, tails, one_way),
        ops_per_call=ops_per_call(runs),
        probe={
            "pp": pp,
            "microbatches": microbatches,
            "f_ms": f_ms,
            "b_ms": b_ms,
            "steps": steps,
            "repeat": repeat,
            "samples": {k: len(v) for k, v in pooled.items()},
            "pingpong_rounds": rounds * repeat,
            "message_bytes": MESSAGE_BYTES,
            "engine_version": runs[0].engine_version,
            "machine": machine_line(),
            "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        },
        runs=per_run,
    )


def predict_from_probe(
    run: PeerRun, profile: str, probe: EngineHostTime, link_only: bool = False
) -> Dict[str, Any]:
    """`tightpipe simulate --engine PROFILE` of the run's schedule and shape from what its stages
    were asked to take (run.costs), the probe's messages and tail (EngineHostTime.costs;
    link_only: messages of the ping-pong alone) and its host time (--host-time-us): never from
    the run's own durations."""
    return simulate(run, profile, probe.costs(run.costs, link_only), probe.host_time_flag())


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
