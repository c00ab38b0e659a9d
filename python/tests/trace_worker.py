"""What each rank runs in test_torch_trace.py and the bench: warm-up steps, then one profiled step
of a schedule in PyTorch's runtime, its Kineto trace written per rank. Module-level for spawn."""

from __future__ import annotations

import time

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from tightpipe.torch import build_runtime, profile_step
from tightpipe.torch.gpt import GptConfig, batch, loss_fn, make_stages


def _runtime(rank, cfg, sched, builtin, m, stage_to_rank):
    num = len(stage_to_rank)
    full = make_stages(cfg, num, 0)
    mine = [s for s in range(num) if stage_to_rank[s] == rank]
    stages = [PipelineStage(full[s], s, num, torch.device("cpu")) for s in mine]
    if sched is not None:
        rt = build_runtime(stages, sched, m, loss_fn)
    else:
        cls = getattr(S, builtin)
        rt = cls(
            stages[0] if issubclass(cls, S.PipelineScheduleSingle) else stages, m, loss_fn=loss_fn
        )
    return rt, mine, num


def profile_run(
    rank, world, cfg: GptConfig, sched, builtin, m, stage_to_rank, trace_path, warmup=2, timed=0
):
    """Builds the runtime (ours when `sched`, else PyTorch's class `builtin`), runs `warmup`
    steps, `timed` timed steps (median seconds returned), then one profiled step into
    trace_path (None: no profile)."""
    rt, mine, num = _runtime(rank, cfg, sched, builtin, m, stage_to_rank)
    tokens, targets = batch(cfg, 2 * m)
    args = (tokens,) if 0 in mine else ()
    kw = {"target": targets if num - 1 in mine else None, "losses": []}
    for _ in range(warmup):
        rt.step(*args, **kw)
    times = []
    for _ in range(timed):
        torch.distributed.barrier()
        t0 = time.perf_counter()
        rt.step(*args, **kw)
        torch.distributed.barrier()
        times.append(time.perf_counter() - t0)
    if trace_path:
        profile_step(rt, *args, trace_path=trace_path.format(rank=rank), **kw)
    return sorted(times)[len(times) // 2] if times else None
