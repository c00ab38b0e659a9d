"""Megatron-Core's real pipeline schedules on p CPU processes (gloo), stages of emulated duration.

    python -m tightpipe.peers.megatron --pp 4 --microbatches 8 [--vpp 2] --costs costs.json \
        --out RUN_DIR

runs `megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_without_interleaving`
(v = 1) or `..._with_interleaving` (v > 1, microbatch groups of `--group` = p by default) as
installed (megatron-core 0.19.2), unchanged, and records every rank's computes and p2p calls.

What the harness changes at run time, nothing in the installed files:
- the two CUDA allocations on this path go to the CPU: `schedules.py`'s token counter
  (`torch.zeros([], device="cuda")`) and `p2p_communication.py`'s receive buffers
  (`device=torch.cuda.current_device()`): each module's `torch` name is given a view of torch
  whose `zeros` puts a "cuda" tensor on the CPU and whose `cuda.current_device()` is "cpu";
- `batch_p2p_sync=False` (its `torch.cuda.synchronize()` has no CPU meaning);
- with `--overlap-p2p-comm` the handles `_communicate` returns are wrapped (TimedHandle) so
  that each operation's event ends when the engine's wait() on it returns;
- `forward_step`, `backward_step` and `P2PCommunicator._communicate` are wrapped to time them:
  each still runs the original.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types
from typing import Any, Dict, List, Optional, Sequence, Tuple

from tightpipe.peers.common import (
    HIDDEN,
    CostTable,
    Event,
    PeerError,
    PeerRun,
    Recorder,
    RunSpec,
    as_specs,
    check_int,
    check_version,
    cli_main,
    collect_runs,
    emulated_function,
    expected_loss,
    init_gloo,
    load_costs,
    make_costs,
    microbatch_value,
    run_rank,
    spawn,
)

DIST = "megatron-core"


def check_options(
    pp: int,
    vpp: int,
    microbatches: int,
    batch_p2p: bool,
    schedule: str,
    group: Optional[int] = None,
    overlap: bool = False,
) -> None:
    """Refuses what Megatron cannot run (or runs wrongly), one line each."""
    for flag, value in (("--pp", pp), ("--vpp", vpp), ("--microbatches", microbatches)):
        check_int(flag, value)
    if group is not None:
        check_int("--group", group)
    if schedule not in ("1f1b", "interleaved"):
        raise PeerError(
            f"Megatron-Core does not run schedule '{schedule}' (it runs 1f1b and interleaved: "
            f"forward_backward_pipelining_without_interleaving / _with_interleaving); hint: run "
            f"'{schedule}' with `tightpipe train` or simulate it under --engine zb or torch"
        )
    if pp < 2:
        raise PeerError(
            f"pipeline size {pp} < 2; hint: --pp 2 or more (one stage per rank is "
            f"forward_backward_no_pipelining, not a pipeline)"
        )
    if schedule == "1f1b" and vpp != 1:
        raise PeerError(f"schedule 1f1b with --vpp {vpp}; hint: --vpp 1, or schedule interleaved")
    if overlap and vpp < 2:
        raise PeerError(
            "overlap_p2p_comm with one stage per rank: Megatron-LM turns it off "
            "without virtual stages (validate_args); hint: --vpp 2 or more, or drop "
            "--overlap-p2p-comm"
        )
    if schedule == "interleaved" and vpp < 2:
        raise PeerError(f"schedule interleaved with --vpp {vpp}; hint: --vpp 2 or more")
    if microbatches < 1:
        raise PeerError(f"--microbatches {microbatches}; hint: 1 or more")
    if schedule == "interleaved":
        g = pp if group is None else group
        if g < pp or g > microbatches:
            raise PeerError(
                f"microbatch group {g} outside [p={pp}, m={microbatches}] (Megatron's "
                f"microbatch_group_size_per_vp_stage); hint: --group {pp}"
            )
        rem = microbatches % g
        if 0 < rem < pp:
            raise PeerError(
                f"--microbatches {microbatches} leaves a last group of {rem} < p={pp} "
                f"(Megatron refuses it); hint: m a multiple of {g}, or m % {g} >= {pp}"
            )
        if overlap and batch_p2p:
            raise PeerError(
                "overlap_p2p_comm with batch_p2p_comm: Megatron-Core asserts them "
                "apart (_communicate: batched p2p waits its requests); hint: "
                "--no-batch-p2p with --overlap-p2p-comm"
            )
        if pp == 2 and batch_p2p:
            raise PeerError(
                "p = 2 interleaved with batched p2p and no overlap: Megatron's batched call "
                "then posts two sends and two receives to the one peer, which the transport may "
                "pair wrongly (wrong data; Megatron-LM refuses it: 'pipeline-model-parallel size "
                "should be greater than 2 with interleaved schedule'); hint: --no-batch-p2p "
                "(batch_p2p_comm=False), or p >= 3"
            )


# ---------------------------------------------------------------------------------------------
# CUDA allocations sent to the CPU (run time only)


def _torch_view(torch):
    """A stand-in for a module's `torch` name: everything is torch's, except that a tensor asked
    for on "cuda" is made on the CPU and torch.cuda.current_device() names the CPU."""
    view: Any = types.ModuleType("torch_on_cpu")
    view.__dict__.update({k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})

    def zeros(*args, **kw):
        if kw.get("device") == "cuda":
            kw["device"] = "cpu"
        return torch.zeros(*args, **kw)

    cuda: Any = types.ModuleType("torch_on_cpu.cuda")
    cuda.__dict__.update(
        {k: getattr(torch.cuda, k) for k in dir(torch.cuda) if not k.startswith("__")}
    )
    cuda.current_device = lambda: "cpu"
    view.zeros = zeros
    view.cuda = cuda
    return view


def redirect_cuda(schedules, p2p_communication) -> None:
    import torch

    schedules.torch = _torch_view(torch)
    p2p_communication.torch = _torch_view(torch)


# ---------------------------------------------------------------------------------------------
# The rank


def _tensor(x):
    if isinstance(x, (list, tuple)):
        return x[0] if x else None
    return x


def _instrument(schedules, p2p_communication, rec: Recorder, rank: int, pp: int):
    """Wraps forward_step, backward_step and _communicate to time them (each runs unchanged)."""
    orig_forward, orig_backward = schedules.forward_step, schedules.backward_step
    comm_cls = p2p_communication.P2PCommunicator
    orig_communicate = comm_cls._communicate
    # id(tensor) -> (event, tensor): a received tensor not yet consumed
    pending_recv: Dict[int, Tuple[Event, Any]] = {}
    calls = [0]
    open_handles: List[Any] = []  # TimedHandles whose wait() the engine has not called yet

    def claim(t, stage: int, mb: int):
        """Names the receive that produced `t`, now that its consumer is known."""
        t = _tensor(t)
        if t is None:
            return
        hit = pending_recv.pop(id(t), None)
        if hit is not None:
            e = hit[0]
            e.stage, e.mb = stage, mb
            e.name = f"{stage}{e.name}{mb}"

    def forward_step(*args, **kw):
        model = args[2] if len(args) > 2 else kw["model"]
        input_tensor = args[4] if len(args) > 4 else kw.get("input_tensor")
        stage, mb = model.stage, model.next_forward
        model.next_forward += 1
        claim(input_tensor, stage, mb)
        t0 = time.monotonic()
        out = orig_forward(*args, **kw)
        t1 = time.monotonic()
        rec.add(
            name=f"{stage}F{mb}", kind="F", lane="compute", stage=stage, mb=mb, start=t0, end=t1
        )
        t = _tensor(out[0])
        if t is not None:
            t._tp_tag = (stage, mb)
        return out

    def backward_step(input_tensor, output_tensor, output_tensor_grad, config, *rest, **kw):
        stage, mb = _tensor(output_tensor)._tp_tag
        claim(output_tensor_grad, stage, mb)
        t0 = time.monotonic()
        grad = orig_backward(input_tensor, output_tensor, output_tensor_grad, config, *rest, **kw)
        t1 = time.monotonic()
        rec.add(
            name=f"{stage}B{mb}", kind="B", lane="compute", stage=stage, mb=mb, start=t0, end=t1
        )
        g = _tensor(grad)
        if g is not None:
            g._tp_tag = (stage, mb)
        return grad

    def _communicate(
        self,
        *,
        tensor_send_next,
        tensor_send_prev,
        recv_prev,
        recv_next,
        tensor_shape,
        wait_on_reqs=True,
    ):
        call = calls[0]
        calls[0] += 1
        t0 = time.monotonic()
        out = orig_communicate(
            self,
            tensor_send_next=tensor_send_next,
            tensor_send_prev=tensor_send_prev,
            recv_prev=recv_prev,
            recv_next=recv_next,
            tensor_shape=tensor_shape,
            wait_on_reqs=wait_on_reqs,
        )
        t1 = time.monotonic()
        # Overlap (wait_on_reqs=False): each operation's handle, by the key _p2p_ops gives it;
        # its event ends when the engine's wait() on it returns (TimedHandle).
        handles = out[2] if not wait_on_reqs and isinstance(out[2], dict) else None
        if not wait_on_reqs and handles is None and out[2]:
            raise PeerError(
                "overlap_p2p_comm with batched p2p is not timed by this harness "
                "(Megatron asserts it away too); hint: batch_p2p_comm=False"
            )
        for t, suffix, peer, key in (
            (tensor_send_next, "SEND_F", (rank + 1) % pp, "send_next"),
            (tensor_send_prev, "SEND_B", (rank - 1) % pp, "send_prev"),
        ):
            t = _tensor(t)
            if t is None:
                continue
            stage, mb = getattr(t, "_tp_tag", (-1, -1))
            e = rec.add(
                name=f"{stage}{suffix}{mb}",
                kind="SEND",
                lane="comm",
                stage=stage,
                mb=mb,
                start=t0,
                end=t1,
                peer=peer,
                bytes=t.numel() * t.element_size(),
                call=call,
            )
            if handles is not None and key in handles:
                handles[key] = TimedHandle(handles[key], e, open_handles)
        for t, suffix, peer, key in (
            (out[0], "RECV_F", (rank - 1) % pp, "recv_prev"),
            (out[1], "RECV_B", (rank + 1) % pp, "recv_next"),
        ):
            t = _tensor(t)
            if t is None:
                continue
            e = rec.add(
                name=suffix,
                kind="RECV",
                lane="comm",
                stage=-1,
                mb=-1,
                start=t0,
                end=t1,
                peer=peer,
                bytes=t.numel() * t.element_size(),
                call=call,
            )
            pending_recv[id(t)] = (e, t)
            if handles is not None and key in handles:
                handles[key] = TimedHandle(handles[key], e, open_handles)
        return out

    schedules.forward_step = forward_step
    schedules.backward_step = backward_step
    comm_cls._communicate = _communicate

    def restore():
        schedules.forward_step, schedules.backward_step = orig_forward, orig_backward
        comm_cls._communicate = orig_communicate

    def finish_step():
        """Waits what the engine left unwaited at the step's end (a send handle it drops):
        its event ends there."""
        for h in list(open_handles):  # noqa: PERF101 - wait() removes h from open_handles
            h.wait()

    return restore, finish_step


class TimedHandle:
    """A p2p handle whose first wait() ends its event: the engine waits a receive just before
    the compute that needs it and a send before its next send (overlap_p2p_comm), so the event
    spans post to the moment the engine had it; `wait` marks when the engine asked."""

    def __init__(self, handle, event, open_list):
        self.handle, self.event, self.open = handle, event, open_list
        self.done = False
        open_list.append(self)

    def wait(self, *args, **kw):
        t = time.monotonic()
        r = self.handle.wait(*args, **kw)
        if not self.done:
            self.done = True
            self.event.wait = t
            self.event.end = time.monotonic()
            self.open.remove(self)
        return r

    def is_completed(self):
        return self.handle.is_completed()


def _rank_main(rank: int, pp: int, port: int, cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    version = check_version(DIST)
    init_gloo(rank, pp, port)
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.enums import ModelType
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.pipeline_parallel import p2p_communication, schedules

    redirect_cuda(schedules, p2p_communication)
    vpp = cfg["vpp"]
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=1,
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
    )
    config = ModelParallelConfig(
        pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
        pipeline_dtype=torch.float32,
        batch_p2p_comm=cfg["batch_p2p"],
        batch_p2p_sync=False,
        overlap_p2p_comm=cfg["overlap"],
        deallocate_pipeline_outputs=cfg["deallocate"],
        microbatch_group_size_per_vp_stage=cfg["group"] if vpp > 1 else None,
    )
    config.hidden_size = HIDDEN
    Emulated = emulated_function()
    f, b = list(cfg["runs"][0]["f"]), list(cfg["runs"][0]["b"])  # the running spec's

    class Stage(torch.nn.Module):
        def __init__(self, chunk: int):
            super().__init__()
            self.config = config
            self.model_type = ModelType.encoder_or_decoder
            self.vp_stage = chunk if vpp > 1 else None
            self.stage = chunk * pp + rank
            self.first = self.stage == 0
            self.next_forward = 0
            self.w = torch.nn.Parameter(torch.ones(1))
            self.input_tensor = None

        def set_input_tensor(self, t):
            self.input_tensor = t[0] if isinstance(t, list) else t

        def forward(self, x):
            inp = x if self.first else self.input_tensor
            return Emulated.apply(inp, self.w, f[self.stage], b[self.stage])

    chunks = [Stage(c) for c in range(vpp)]

    def data(m: int, step: int):
        # microbatch k carries (k + 1 + 100 step) everywhere: a swapped tensor shows in the loss
        for k in range(m):
            yield torch.full((1, 1, HIDDEN), microbatch_value(k, step))

    def forward_step_func(data_iterator, model):
        x = next(data_iterator) if model.first else None
        out = model(x)

        def loss_func(output):
            loss = output.sum()
            return loss, {"loss": loss.detach()}

        return out, loss_func

    fb = (
        schedules.forward_backward_pipelining_with_interleaving
        if vpp > 1
        else schedules.forward_backward_pipelining_without_interleaving
    )
    results = []
    for one in cfg["runs"]:  # one process group, several microbatch counts
        m = one["microbatches"]
        f[:], b[:] = one["f"], one["b"]
        if vpp > 1:
            config.microbatch_group_size_per_vp_stage = one["group"]
        rec = Recorder(rank)
        restore, finish_step = _instrument(schedules, p2p_communication, rec, rank, pp)
        losses = []
        for step in range(one["steps"]):
            for c in chunks:
                c.next_forward = 0
            it = data(m, step)
            dist.barrier()
            rec.begin_step(step)
            out = fb(
                forward_step_func=forward_step_func,
                data_iterator=[it] * vpp if vpp > 1 else it,
                model=chunks if vpp > 1 else chunks[0],
                num_microbatches=m,
                seq_length=1,
                micro_batch_size=1,
                forward_only=False,
            )
            finish_step()
            rec.end_step()
            losses.append(float(sum(d["loss"] for d in out)) if out else None)
        restore()
        results.append(rec.result(losses, version))
    dist.barrier()
    dist.destroy_process_group()
    return results


def _worker(rank, pp, port, q, cfg):
    run_rank(rank, q, lambda: _rank_main(rank, pp, port, cfg))


def run_many(
    pp: int,
    microbatches: Sequence[Any],
    costs: CostTable,
    vpp: int = 1,
    steps: int = 3,
    warmup_steps: int = 1,
    batch_p2p: bool = True,
    deallocate: bool = False,
    group: Optional[int] = None,
    groups: Optional[Sequence[int]] = None,
    seed: int = 1234,
    known_wrong: bool = False,
    overlap: bool = False,
) -> List[PeerRun]:
    """Runs Megatron-Core's schedule on pp processes once per entry of `microbatches` (an m, or a
    RunSpec with its own costs, steps or group), all in one process group, and returns the
    recorded runs. Interleaved: microbatch group `groups[k]` for run k, else `group`, else p.
    known_wrong runs what check_options refuses for wrong data (p = 2 interleaved, batched), to
    show it (bench/peers): the loss check then raises."""
    check_int("--pp", pp)
    check_int("--vpp", vpp)
    schedule = "interleaved" if vpp > 1 else "1f1b"
    if groups is not None:
        if len(groups) != len(microbatches):
            raise PeerError(
                f"{len(groups)} microbatch groups for {len(microbatches)} runs; "
                f"hint: one group per microbatch count"
            )
        microbatches = [
            RunSpec(m, group=g) if not isinstance(m, RunSpec) else m
            for m, g in zip(microbatches, groups, strict=True)
        ]
    specs = as_specs(microbatches, costs, steps, group or pp)
    runs = []
    for sp in specs:
        assert sp.costs is not None and sp.steps is not None  # as_specs fills both
        check_options(
            pp, vpp, sp.microbatches, batch_p2p and not known_wrong, schedule, sp.group, overlap
        )
        sp.costs.check_stages(pp * vpp, f"the run (p={pp} x v={vpp})")
        if sp.steps <= warmup_steps:
            raise PeerError(
                f"--steps {sp.steps} <= warm-up steps {warmup_steps}; hint: "
                f"--steps {warmup_steps + 2}"
            )
        runs.append(
            {
                "microbatches": sp.microbatches,
                "steps": sp.steps,
                "group": sp.group,
                "f": sp.costs.f,
                "b": sp.costs.b,
            }
        )
    check_version(DIST)
    cfg = {
        "vpp": vpp,
        "runs": runs,
        "batch_p2p": batch_p2p,
        "deallocate": deallocate,
        "group": specs[0].group,
        "overlap": overlap,
        "seed": seed,
    }
    per_rank_runs = spawn(_worker, pp, (cfg,))
    out = []
    for sp, events, spans, losses, version in collect_runs(
        "Megatron-Core",
        per_rank_runs,
        specs,
        pp,
        pp - 1,
        expected_loss,
        lambda sp: f"p={pp}, v={vpp}, m={sp.microbatches}, batch_p2p={batch_p2p}",
    ):
        out.append(
            PeerRun(
                "megatron",
                version,
                schedule,
                pp,
                vpp,
                sp.microbatches,
                sp.costs,
                sp.steps,
                warmup_steps,
                events,
                spans,
                losses,
                {
                    "batch_p2p_comm": batch_p2p,
                    "batch_p2p_sync": False,
                    "overlap_p2p": overlap,
                    "deallocate_pipeline_outputs": deallocate,
                    "microbatch_group_size_per_vp_stage": sp.group,
                    "seed": seed,
                },
            )
        )
    return out


def run(pp: int, microbatches: int, costs: CostTable, vpp: int = 1, **kw) -> PeerRun:
    """One run of Megatron-Core's schedule (run_many with one microbatch count)."""
    return run_many(pp, [microbatches], costs, vpp, **kw)[0]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tightpipe.peers.megatron", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--vpp", type=int, default=1)
    ap.add_argument("--schedule", default=None, help="1f1b or interleaved (default: from --vpp)")
    ap.add_argument("--group", type=int, default=None, help="microbatch group (default p)")
    ap.add_argument(
        "--costs", default=None, help="costs.json (default: f=10 ms, b=20 ms, last stage 1.5x)"
    )
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--no-batch-p2p", action="store_true")
    ap.add_argument(
        "--overlap-p2p-comm",
        action="store_true",
        help="overlap_p2p_comm (interleaved; with --no-batch-p2p)",
    )
    ap.add_argument("--deallocate", action="store_true", help="deallocate_pipeline_outputs")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    def body() -> PeerRun:
        schedule = a.schedule or ("interleaved" if a.vpp > 1 else "1f1b")
        check_options(
            a.pp, a.vpp, a.microbatches, not a.no_batch_p2p, schedule, a.group, a.overlap_p2p_comm
        )
        costs = load_costs(a.costs) if a.costs else make_costs(a.pp * a.vpp, 10 / a.vpp, 20 / a.vpp)
        return run(
            a.pp,
            a.microbatches,
            costs,
            a.vpp,
            steps=a.steps,
            batch_p2p=not a.no_batch_p2p,
            deallocate=a.deallocate,
            group=a.group,
            overlap=a.overlap_p2p_comm,
        )

    return cli_main(a.out, "megatron-core", body)


if __name__ == "__main__":
    sys.exit(main())
