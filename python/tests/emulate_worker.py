"""What each rank runs in test_torch_emulate.py: emulated stages (nn.Sequential of
EmulatedLayers) in PyTorch's runtime on a tightpipe schedule, one warm-up step, then one
profiled step. Module-level for spawn."""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.pipelining import PipelineStage

from tightpipe.torch import build_runtime, profile_step
from tightpipe.torch.emulate import EmulatedLayer
from tightpipe.torch.gpt import loss_fn


def emulated_stages(sleeps, shape, layers_per_stage, num_stages):
    """All stages: stage s holds layers s*k .. s*k+k-1, each sleeping `sleeps` = (f, i, w)."""
    n = layers_per_stage * num_stages
    layers = [
        EmulatedLayer(*sleeps, shape, first=j == 0, last=j == n - 1, name=f"layers.{j}")
        for j in range(n)
    ]
    return [
        nn.Sequential(*layers[s * layers_per_stage : (s + 1) * layers_per_stage])
        for s in range(num_stages)
    ]


def run(rank, world, sched, sleeps, shape, layers_per_stage, tokens, targets, trace_path):
    num = sched.num_stages
    full = emulated_stages(sleeps, shape, layers_per_stage, num)
    mine = sched.stages_of(rank)
    stages = [PipelineStage(full[s], s, num, torch.device("cpu")) for s in mine]
    rt = build_runtime(stages, sched, sched.num_microbatches, loss_fn)
    args = (tokens,) if 0 in mine else ()
    for p in full[0].parameters():
        p.grad = None
    rt.step(*args, target=targets if num - 1 in mine else None, losses=[])
    for s in mine:
        for p in full[s].parameters():
            p.grad = None
    losses: list[torch.Tensor] = []
    profile_step(
        rt,
        *args,
        trace_path=trace_path.format(rank=rank),
        target=targets if num - 1 in mine else None,
        losses=losses,
    )
    # Plain lists: a tensor through spawn's queue is shared memory that dies with the process.
    grads = {s: {n: p.grad.tolist() for n, p in full[s].named_parameters()} for s in mine}
    return [float(x) for x in losses], grads
