"""What each rank runs in the interop test (test_torch_interop.py): a list of jobs, one training
step each, on one gloo process group.
Module-level so that the rank processes' start method (forkserver, or spawn) can pickle it."""

from __future__ import annotations

import copy
import dataclasses

import torch
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from tightpipe.schedule import TorchSchedule
from tightpipe.torch import build_runtime
from tightpipe.torch.gpt import GptConfig, batch, loss_fn, make_stages, reference_step

MICROBATCH = 2  # sequences per microbatch
SEED = 0


@dataclasses.dataclass
class Job:
    id: str
    m: int
    stage_to_rank: list[int]
    schedule: TorchSchedule | None = None  # ours
    builtin: str | None = None  # PyTorch's class name
    reference: str | None = None  # the id of the built-in job to compare with


def _stages(job: Job, rank: int, full):
    num = len(job.stage_to_rank)
    mine = [s for s in range(num) if job.stage_to_rank[s] == rank]
    mods = {s: copy.deepcopy(full[s]) for s in mine}
    pstages = [PipelineStage(mods[s], s, num, torch.device("cpu")) for s in mine]
    return mine, mods, pstages


def _max_diff(grads, ref):
    worst = 0.0
    for s, named in grads.items():
        for name, g in named.items():
            r = ref[s][name]
            # |g - r| measured against the tolerance rtol 1e-4, atol 1e-6: <= 1 passes
            worst = max(worst, float(((g - r).abs() / (1e-6 + 1e-4 * r.abs())).max()))
    return worst


def run_jobs(rank: int, world: int, cfg: GptConfig, jobs: list[Job]):
    out = []
    refs: dict = {}
    builtin_grads: dict = {}
    for job in jobs:
        num = len(job.stage_to_rank)
        full = make_stages(cfg, num, SEED)
        tokens, targets = batch(cfg, job.m * MICROBATCH, seed=job.m)
        if (num, job.m) not in refs:
            refs[(num, job.m)] = reference_step(copy.deepcopy(full), tokens, targets, job.m)
        ref_losses, ref_grads = refs[(num, job.m)]
        mine, mods, pstages = _stages(job, rank, full)
        static_ok = None
        if job.schedule is not None:
            # PyTorch's static send/recv/cycle check on the same file (moves nothing at 10**9).
            build_runtime(pstages, job.schedule, job.m, loss_fn, max_outstanding_sends=10**9)
            static_ok = True
            runtime = build_runtime(pstages, job.schedule, job.m, loss_fn)
        else:
            cls = getattr(S, job.builtin)
            single = issubclass(cls, S.PipelineScheduleSingle)
            runtime = cls(pstages[0] if single else pstages, job.m, loss_fn=loss_fn)
        args = (tokens,) if 0 in mine else ()
        target = targets if num - 1 in mine else None
        losses: list = []
        runtime.step(*args, target=target, losses=losses)
        grads = {
            s: {n: p.grad.detach().clone() for n, p in mods[s].named_parameters()} for s in mine
        }
        if job.builtin is not None:
            builtin_grads[job.id] = (grads, losses)
        res = {
            "id": job.id,
            "rank": rank,
            "static_ok": static_ok,
            "grad_vs_model": _max_diff(grads, {s: ref_grads[s] for s in mine}),
            "stages": mine,
        }
        if num - 1 in mine:
            # strict=False: a runtime that returned too few or too many losses is reported by
            # their count (res["losses"], which the test compares with m), not by a raise here.
            res["loss_vs_model"] = max(
                abs(float(a.detach()) - float(b)) for a, b in zip(losses, ref_losses, strict=False)
            )
            res["losses"] = len(losses)
        if job.reference is not None:
            bg, bl = builtin_grads[job.reference]
            res["grad_vs_builtin"] = _max_diff(grads, bg)
            if num - 1 in mine:
                # strict=False: as for loss_vs_model, each count is checked on its own.
                res["loss_vs_builtin"] = max(
                    abs(float(a.detach()) - float(b.detach()))
                    for a, b in zip(losses, bl, strict=False)
                )
        out.append(res)
    return out
