"""What both peer harnesses share: the cost table, the emulated stage, the per-rank recorder,
the run directory `tightpipe report` reads, and spawning p gloo processes.

Emulated compute sleeps (time.sleep to an absolute deadline on CLOCK_MONOTONIC) rather than
spinning: p = 4 ranks share 2 cores here with other work, and a spinning rank would take a core
from the rank whose message it waits for, so the measured step would be the machine's scheduling
and not the engine's schedule. A sleeping rank holds no core; it wakes after its deadline by the
timer slack plus the wait for a core (docs/peers.md: the recorded F and B, the engine's own code
around the sleep included, run a median 0.7 ms beyond the asked durations on a loaded 2-core
machine; the predictions use what was recorded).

Every time is CLOCK_MONOTONIC (time.monotonic), which all processes of one machine share, so the
ranks' events line up on one clock without any exchange.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import math
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from tightpipe.errors import TightpipeError  # the package's base error (docs/errors.md)


class PeerError(TightpipeError, ValueError):
    """Bad input to a peer harness: the message says what, the value, and a hint."""


def check_int(flag: str, value: Any) -> None:
    """PeerError unless `value` is an int (not a bool, a float, a string or None): the harnesses
    compare and divide the counts, which raised TypeError or ran a float through (issue 45)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise PeerError(
            f"{flag} {value!r} is a {type(value).__name__}, not an int; hint: e.g. {flag} 4"
        )


# The engine versions this harness was written against and checked on (docs/peers.md).
KNOWN_VERSIONS = {"megatron-core": ("0.19.2",), "deepspeed": ("0.19.8",)}


def check_version(dist: str, installed: Optional[str] = None) -> str:
    """The installed version of `dist`; PeerError when it is not one the harness knows."""
    if installed is None:
        try:
            installed = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise PeerError(
                f"{dist} is not installed; hint: scripts/setup-python-peers.sh VENV installs "
                f"{dist}=={KNOWN_VERSIONS[dist][0]}"
            ) from None
    known = KNOWN_VERSIONS[dist]
    if installed not in known:
        raise PeerError(
            f"{dist} {installed} is not a version the peer harness knows (known: "
            f"{', '.join(known)}); hint: install {dist}=={known[-1]} "
            f"(python/requirements-peers.txt) or check the harness's patches against {installed} "
            f"and add it to KNOWN_VERSIONS in tightpipe/peers/common.py"
        )
    return installed


# ---------------------------------------------------------------------------------------------
# Cost table (the costs.json of docs/cost_model.md section 2; f and b per stage are used)

_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


@dataclasses.dataclass
class CostTable:
    time_unit: str
    f: List[float]  # forward of one microbatch through stage s, seconds
    b: List[float]  # whole backward (I + W) of one microbatch through stage s, seconds
    path: str = "<costs>"
    raw: Optional[Dict[str, Any]] = None

    @property
    def num_stages(self) -> int:
        return len(self.f)

    def check_stages(self, num_stages: int, what: str) -> None:
        if num_stages != self.num_stages:
            raise PeerError(
                f"cost table {self.path} has {self.num_stages} stage(s) but {what} has "
                f"{num_stages}; hint: give one entry per stage (p x v), e.g. "
                f"`tightpipe.peers.common.make_costs({num_stages}, f_ms, b_ms)`"
            )

    def to_json(self) -> Dict[str, Any]:
        """The table in costs.json form, in its own time unit."""
        scale = _UNITS[self.time_unit]
        return {
            "time_unit": self.time_unit,
            "stages": [
                {
                    "stage": s,
                    "f": self.f[s] / scale,
                    "i": self.b[s] / scale,
                    "w": 0.0,
                    "b": self.b[s] / scale,
                }
                for s in range(self.num_stages)
            ],
        }


def _number(entry: Dict[str, Any], key: str, where: str) -> Optional[float]:
    if key not in entry:
        return None
    v = entry[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise PeerError(f'{where}: "{key}" is {v!r}; hint: a finite number >= 0')
    return float(v)


def load_costs(source: Any, path: str = "<costs>") -> CostTable:
    """A cost table from a costs.json path or its parsed dict. Each stage needs f and b (or i and
    w, b = i + w); time_unit is s, ms, us or ns (default s)."""
    if isinstance(source, (str, os.PathLike)):
        path = str(source)
        try:
            with open(path) as fh:
                source = json.load(fh)
        except OSError as e:
            raise PeerError(
                f"cost table {path}: {e.strerror}; hint: pass a costs.json "
                f"(docs/cost_model.md section 2)"
            ) from None
        except json.JSONDecodeError as e:
            raise PeerError(
                f"cost table {path}: not JSON ({e}); hint: see docs/cost_model.md section 2"
            ) from None
    if not isinstance(source, dict) or not isinstance(source.get("stages"), list):
        raise PeerError(
            f'cost table {path}: no "stages" list; hint: '
            f'{{"time_unit": "ms", "stages": [{{"stage": 0, "f": 10, '
            f'"b": 20}}, ...]}}'
        )
    unit = source.get("time_unit", "s")
    if unit not in _UNITS:
        raise PeerError(
            f"cost table {path}: time_unit {unit!r} is not a time; hint: one of "
            f"{', '.join(_UNITS)} (the emulated stages sleep real time)"
        )
    scale = _UNITS[unit]
    by_stage: Dict[int, Tuple[float, float]] = {}
    for k, entry in enumerate(source["stages"]):
        where = f"cost table {path}: stages[{k}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("stage"), int):
            raise PeerError(f'{where}: no integer "stage"; hint: {{"stage": {k}, ...}}')
        s = entry["stage"]
        if s in by_stage:
            raise PeerError(f"{where}: stage {s} appears twice; hint: one entry per stage")
        f = _number(entry, "f", where)
        b = _number(entry, "b", where)
        if b is None:
            i, w = _number(entry, "i", where), _number(entry, "w", where)
            b = None if i is None or w is None else i + w
        if f is None or b is None:
            raise PeerError(
                f'{where}: needs "f" and "b" (or "i" and "w"); hint: '
                f'{{"stage": {s}, "f": 10, "b": 20}}'
            )
        by_stage[s] = (f * scale, b * scale)
    n = len(by_stage)
    missing = [s for s in range(n) if s not in by_stage]
    if missing:
        raise PeerError(
            f"cost table {path}: lacks stage {missing[0]} (stages are 0..{n - 1}); "
            f"hint: one entry per stage"
        )
    return CostTable(
        unit, [by_stage[s][0] for s in range(n)], [by_stage[s][1] for s in range(n)], path, source
    )


def make_costs(num_stages: int, f_ms: float, b_ms: float, last_extra: float = 0.5) -> CostTable:
    """Stage costs in ms, the last stage (1 + last_extra) x heavier, as an LM head makes it."""
    stages = []
    for s in range(num_stages):
        k = 1.0 + (last_extra if s == num_stages - 1 else 0.0)
        stages.append({"stage": s, "f": f_ms * k, "b": b_ms * k})
    return load_costs({"time_unit": "ms", "stages": stages}, f"<{num_stages} stages>")


# ---------------------------------------------------------------------------------------------
# Emulated compute


def sleep_until(deadline: float) -> None:
    """Sleeps until time.monotonic() >= deadline (see the module comment for why not spin)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        time.sleep(left)


def emulated_function() -> Any:
    """A torch.autograd.Function whose forward takes `f` seconds and backward `b`, passing the
    activation through unchanged (x * 1, so the received data is what the peer sent: a wrong
    tensor from the engine shows in the loss)."""
    import torch

    class Emulated(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, w: Any, f: float, b: float) -> Any:  # x (B, C); w (1,)
            ctx.b = b
            sleep_until(time.monotonic() + f)
            return x * w

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            sleep_until(time.monotonic() + ctx.b)
            return grad, grad.sum().reshape(1), None, None

    return Emulated


# ---------------------------------------------------------------------------------------------
# The per-rank recorder and the run directory


@dataclasses.dataclass
class Event:
    name: str  # action text form: 2F0, 1B3, 0SEND_F3, 1RECV_B0
    kind: str  # F, B, SEND, RECV, other
    lane: str  # compute, comm
    stage: int
    mb: int
    step: int
    start: float  # time.monotonic() while recording; seconds from the step's origin once written
    end: float
    peer: int = -1
    bytes: int = 0
    call: int = -1  # the engine's p2p call (or instruction) the message belonged to
    # Asynchronous p2p (Megatron's overlap_p2p_comm): when the engine called wait() on the
    # operation's handle (end: when that wait returned); -1 for a blocking call.
    wait: float = -1.0

    def to_json(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "lane": self.lane,
            "stage": self.stage,
            "mb": self.mb,
            "step": self.step,
            "start": self.start,
            "end": self.end,
            "peer": self.peer,
            "bytes": self.bytes,
        }


@dataclasses.dataclass
class RunSpec:
    """One run inside a harness's process group; None fields take run_many's arguments."""

    microbatches: int
    costs: Optional["CostTable"] = None
    steps: Optional[int] = None
    group: Optional[int] = None  # Megatron interleaved: microbatch_group_size_per_vp_stage


def as_specs(
    items: Sequence[Any],
    costs: Optional[CostTable],
    steps: Optional[int],
    group: Optional[int] = None,
) -> List[RunSpec]:
    out = []
    for it in items:
        if not isinstance(it, RunSpec):
            check_int("--microbatches", it)  # int(4.7) ran 4 microbatches, silently
        sp = it if isinstance(it, RunSpec) else RunSpec(it)
        out.append(
            RunSpec(
                sp.microbatches,
                sp.costs or costs,
                sp.steps if sp.steps is not None else steps,
                sp.group if sp.group is not None else group,
            )
        )
    return out


@dataclasses.dataclass
class PeerRun:
    """One harness run: what ran and every rank's events per step (seconds from the step's
    origin, the earliest step start over the ranks)."""

    engine: str  # "megatron" or "deepspeed"
    engine_version: str
    schedule: str  # tightpipe's name for it: 1f1b, interleaved
    pp: int
    vpp: int
    microbatches: int
    costs: CostTable
    steps: int
    warmup_steps: int
    events: List[List[Event]]  # per rank
    step_spans: List[List[float]]  # per step: [origin, end] (monotonic seconds)
    losses: List[float]
    options: Dict[str, Any]

    def measured_steps(self) -> List[int]:
        return list(range(self.warmup_steps, self.steps))

    def step_events(self, step: int, rank: int) -> List[Event]:
        return [e for e in self.events[rank] if e.step == step]

    def orders(self, step: Optional[int] = None) -> List[List[str]]:
        """Each rank's compute actions in the order they ran (one step)."""
        step = self.measured_steps()[0] if step is None else step
        out = []
        for r in range(self.pp):
            comp = [e for e in self.step_events(step, r) if e.kind in ("F", "B", "I", "W")]
            comp.sort(key=lambda e: e.start)
            out.append([e.name for e in comp])
        return out

    def step_time(self, step: int) -> float:
        return max(e.end for r in range(self.pp) for e in self.step_events(step, r))

    def write_run_dir(self, out_dir: str) -> str:
        """timeline_rank<R>.jsonl, summary.json, costs.json (the table the stages were asked to
        take), metrics.jsonl and order.csv (the compute order that ran, one rank a line) in
        `out_dir`: what `tightpipe report` reads. No schedule.csv: the report would predict with
        its own p2p model, not the engine's (docs/peers.md); `tightpipe simulate --engine`
        predicts these runs."""
        os.makedirs(out_dir, exist_ok=True)
        for r in range(self.pp):
            with open(os.path.join(out_dir, f"timeline_rank{r}.jsonl"), "w") as fh:
                for e in sorted(self.events[r], key=lambda e: (e.step, e.start)):
                    fh.write(json.dumps(e.to_json()) + "\n")
        summary = {
            "pp": self.pp,
            "vpp": self.vpp,
            "microbatches": self.microbatches,
            "schedule": self.schedule,
            "transport": "gloo",
            "compute": "emulated (sleep)",
            "overlap_p2p": bool(self.options.get("overlap_p2p", False)),
            "warmup_steps_excluded": self.warmup_steps,
            "engine": self.engine,
            "engine_version": self.engine_version,
            "peer_options": {k: v for k, v in self.options.items()},
            "cpu": {
                "cores": os.cpu_count() or 0,
                "rank_threads": self.pp,
                "busy_threads": 0,
                "oversubscribed": False,
                "note": "emulated compute sleeps: ranks hold no core while computing",
            },
        }
        with open(os.path.join(out_dir, "summary.json"), "w") as fh:
            json.dump(summary, fh, indent=1)
        with open(os.path.join(out_dir, "costs.json"), "w") as fh:
            json.dump(self.costs.to_json(), fh, indent=1)
        with open(os.path.join(out_dir, "metrics.jsonl"), "w") as fh:
            for k, loss in enumerate(self.losses):
                fh.write(
                    json.dumps({"step": k, "loss": loss, "step_time_s": self.step_time(k)}) + "\n"
                )
        with open(os.path.join(out_dir, "order.csv"), "w") as fh:
            for row in self.orders():
                fh.write(",".join(row) + "\n")
        return out_dir


# Every stage passes its input through (x * w, w = 1): microbatch k of step s carries
# k + 1 + 100 s in each of HIDDEN values (fp32, 32 bytes a message), so an engine that moves the
# wrong tensor shows in its loss.
HIDDEN = 8


def microbatch_value(k: int, step: int) -> float:
    return float(k + 1 + 100 * step)


def expected_loss(microbatches: int, step: int) -> float:
    """The loss both engines must report for the harness's data: the mean over the microbatches
    of the sum of the last stage's output, HIDDEN x (k + 1 + 100 step)."""
    return sum(HIDDEN * microbatch_value(k, step) for k in range(microbatches)) / microbatches


class Recorder:
    """One rank's events, in time.monotonic() seconds."""

    def __init__(self, rank: int):
        self.rank = rank
        self.step = 0
        self.events: List[Event] = []
        self.step_starts: List[float] = []
        self.step_ends: List[float] = []

    def begin_step(self, step: int) -> None:
        self.step = step
        self.step_starts.append(time.monotonic())

    def end_step(self) -> None:
        self.step_ends.append(time.monotonic())

    def result(self, losses: Sequence[Optional[float]], version: str) -> Dict[str, Any]:
        """What the rank sends back for one run."""
        return {
            "events": self.events,
            "step_starts": self.step_starts,
            "step_ends": self.step_ends,
            "losses": losses,
            "version": version,
        }

    def add(self, **kw: Any) -> Event:
        e = Event(step=self.step, **kw)
        self.events.append(e)
        return e


def align_steps(
    per_rank: Sequence[Dict[str, Any]], steps: int
) -> Tuple[List[List[Event]], List[List[float]]]:
    """Rebases every rank's events to its step's origin (the earliest step start over the ranks):
    returns (events per rank, [origin, end] per step)."""
    spans = []
    for k in range(steps):
        origin = min(d["step_starts"][k] for d in per_rank)
        end = max(d["step_ends"][k] for d in per_rank)
        spans.append([origin, end])
    out = []
    for d in per_rank:
        evs = []
        for e in d["events"]:
            o = spans[e.step][0]
            evs.append(
                dataclasses.replace(
                    e,
                    start=max(0.0, e.start - o),
                    end=max(0.0, e.end - o),
                    wait=max(0.0, e.wait - o) if e.wait >= 0 else -1.0,
                )
            )
        out.append(evs)
    return out, spans


def spawn(
    worker: Callable[..., None], nprocs: int, args: Tuple[Any, ...], timeout_s: float = 600
) -> List[Any]:
    """Runs worker(rank, nprocs, port, queue, *args) on nprocs processes (from the package's fork
    server, tightpipe.torch.launch.process_context, so no state leaks from the caller) and
    returns what each put on the queue, by rank. A rank that fails makes this raise with its
    traceback."""
    import queue as _queue

    from tightpipe.torch.launch import free_port, process_context

    ctx = process_context()
    q = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=worker, args=(r, nprocs, port, q) + args, daemon=True)
        for r in range(nprocs)
    ]
    for p in procs:
        p.start()
    results: Dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(results) < nprocs:
            try:
                r, payload = q.get(timeout=1.0)
            except _queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"peer run: rank(s) {[procs.index(p) for p in dead]} exited "
                        f"({[p.exitcode for p in dead]}) or the run passed {timeout_s:.0f} s; "
                        f"hint: run the harness module directly to see the rank's output"
                    ) from None
                continue
            if isinstance(payload, BaseException) or (
                isinstance(payload, dict) and "error" in payload
            ):
                err = payload["error"] if isinstance(payload, dict) else repr(payload)
                kind = payload.get("kind") if isinstance(payload, dict) else None
                if kind == "PeerError":
                    raise PeerError(err)
                raise RuntimeError(f"peer run: rank {r} failed:\n{err}")
            results[r] = payload
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
    return [results[r] for r in range(nprocs)]


def init_gloo(rank: int, world: int, port: int) -> None:
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )


def run_rank(rank: int, q: Any, body: Callable[[], Any]) -> None:
    """Runs one rank's body, sends its result (or its error) to the parent."""
    import traceback

    try:
        q.put((rank, body()))
    except PeerError as e:
        q.put((rank, {"error": str(e), "kind": "PeerError"}))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        q.put((rank, {"error": traceback.format_exc()}))


def collect_runs(
    engine: str,
    per_rank_runs: List[List[Dict[str, Any]]],
    specs: Sequence["RunSpec"],
    pp: int,
    loss_rank: int,
    expected_loss: Callable[[int, int], float],
    what: Callable[["RunSpec"], str],
) -> List[Tuple[Any, ...]]:
    """Per spec: (spec, events per rank, step spans, losses, engine version) from what each rank
    returned, after checking every step's loss against the data (RuntimeError naming the run when
    the engine moved the wrong tensors)."""
    out = []
    for k, sp in enumerate(specs):
        per_rank = [rr[k] for rr in per_rank_runs]
        assert sp.steps is not None, "as_specs gives every run its steps and costs"
        events, spans = align_steps(per_rank, sp.steps)
        losses = per_rank[loss_rank]["losses"]
        for step, loss in enumerate(losses):
            want = expected_loss(sp.microbatches, step)
            if loss is None or abs(loss - want) > 1e-6 * want:
                raise RuntimeError(
                    f"{engine} step {step}: loss {loss} but the data give {want} ({what(sp)}): "
                    f"the engine moved the wrong tensors; hint: docs/peers.md 'wrong data'"
                )
        out.append((sp, events, spans, losses, per_rank[0]["version"]))
    return out


def cli_main(out_dir: str, label: str, body: Callable[[], "PeerRun"]) -> int:
    """A harness's command line: runs body(), writes its run directory, prints the steps; a
    PeerError is one line on stderr and exit 2."""
    import sys

    try:
        r = body()
    except PeerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    r.write_run_dir(out_dir)
    steps = [r.step_time(k) for k in r.measured_steps()]
    print(
        f"{label} {r.engine_version}: {r.schedule} p={r.pp} v={r.vpp} m={r.microbatches}: "
        f"steps {', '.join(f'{t * 1e3:.1f}' for t in steps)} ms; wrote {out_dir}"
    )
    return 0
