"""tightpipe's schedules in PyTorch's own runtime: one training step of the small GPT (our
model's architecture in PyTorch), p = 2 and 4 CPU processes on gloo, every generator PyTorch's
runtime can express (zb-opt at the m its exact search takes), m up to 16. Each step's losses and
gradients equal the non-pipelined model's and PyTorch's own built-in schedule's on the same
stages (Schedule1F1B for one stage per rank, ScheduleInterleaved1F1B for two looped,
ScheduleZBVZeroBubble for the V), within float tolerance; PyTorch's loader accepts every file,
also with max_outstanding_sends=10**9 (its static send/recv/cycle check). One spawn per p: all
jobs run inside the same process group."""

from __future__ import annotations

import pytest

from interop_worker import Job, run_jobs
from tightpipe.schedule import generate
from tightpipe.torch.gpt import GptConfig
from tightpipe.torch.launch import spawn

COST = "f=1,i=1,w=1"
# name -> (extra generate() arguments, the placement's built-in reference)
GENERATORS = {
    "1f1b": ({}, "Schedule1F1B"),
    "gpipe": ({}, "Schedule1F1B"),
    "zb-h1": ({}, "Schedule1F1B"),
    "zb-h2": ({}, "Schedule1F1B"),
    "zb-1p": ({"cost": COST}, "Schedule1F1B"),
    "zb-2p": ({"cost": COST}, "Schedule1F1B"),
    "zb-auto": ({"cost": COST}, "Schedule1F1B"),
    "interleaved": ({"vpp": 2}, "ScheduleInterleaved1F1B"),
    "looped-bfs": ({"vpp": 2}, "ScheduleInterleaved1F1B"),
    "zb-v": ({}, "ScheduleZBVZeroBubble"),
    "zb-v-auto": ({"cost": COST}, "ScheduleZBVZeroBubble"),
    "v-half": ({"cost": COST}, "ScheduleZBVZeroBubble"),
    "v-min": ({"cost": COST}, "ScheduleZBVZeroBubble"),
    # PyTorch's runtime runs OVERLAP_F_B's two halves one after the other (no overlap without a
    # registered custom function), which is what this checks: same numbers.
    "dualpipev": ({}, "ScheduleZBVZeroBubble"),
}
MICROBATCHES = {2: (4, 16), 4: (8, 16)}
# zb-opt (exact search) takes p <= 4 and m <= 6: its own m, with its reference at that m.
EXACT = {2: 4, 4: 6}


OURS = set(GENERATORS) | {"zb-opt"}


def _placement(kind: str, p: int) -> list[int]:
    if kind == "Schedule1F1B":
        return list(range(p))
    if kind == "ScheduleInterleaved1F1B":
        return [s % p for s in range(2 * p)]
    return [s if s < p else 2 * p - 1 - s for s in range(2 * p)]  # V


def _builtin(ref: str, m: int, p: int) -> Job:
    """PyTorch's own schedule class `ref` with m microbatches on p ranks."""
    return Job(id=f"{ref} m={m}", m=m, stage_to_rank=_placement(ref, p), builtin=ref)


def _ours(name: str, m: int, sched, ref: str) -> Job:
    """Our schedule `sched` (generator `name`), checked against the built-in `ref` at m."""
    return Job(
        id=f"{name} m={m}",
        m=m,
        stage_to_rank=sched.stage_to_rank,
        schedule=sched,
        reference=f"{ref} m={m}",
    )


def _jobs(p: int) -> list[Job]:
    jobs = []
    for m in MICROBATCHES[p]:
        jobs.extend(
            _builtin(ref, m, p)
            for ref in ("Schedule1F1B", "ScheduleInterleaved1F1B", "ScheduleZBVZeroBubble")
        )
        for name, (kw, ref) in GENERATORS.items():
            sched = generate(name, p, m, **kw)
            assert sched.stage_to_rank == _placement(ref, p), (name, sched.stage_to_rank)
            jobs.append(_ours(name, m, sched, ref))
    m = EXACT[p]
    if m not in MICROBATCHES[p]:
        jobs.append(_builtin("Schedule1F1B", m, p))
    jobs.append(_ours("zb-opt", m, generate("zb-opt", p, m, cost=COST), "Schedule1F1B"))
    return jobs


@pytest.mark.parametrize("p", [2, 4])
def test_every_generator_trains_like_pytorch(p):
    jobs = _jobs(p)
    per_rank = spawn(p, run_jobs, GptConfig(), jobs)
    failures = []
    seen = set()
    for results in per_rank:
        for r in results:
            seen.add(r["id"])
            where = f"{r['id']} rank {r['rank']} (stages {r['stages']})"
            # grad_* are |diff| / (1e-6 + 1e-4 |reference|): at most 1 passes
            if r["grad_vs_model"] > 1:
                failures.append(f"{where}: gradients vs the model {r['grad_vs_model']:.3g}")
            if r.get("grad_vs_builtin", 0) > 1:
                failures.append(
                    f"{where}: gradients vs PyTorch's built-in {r['grad_vs_builtin']:.3g}"
                )
            if r.get("loss_vs_model", 0) > 1e-5 or r.get("loss_vs_builtin", 0) > 1e-5:
                failures.append(
                    f"{where}: losses differ ({r.get('loss_vs_model')}, {r.get('loss_vs_builtin')})"
                )
            if "losses" in r and r["losses"] != int(r["id"].split("m=")[1]):
                failures.append(f"{where}: {r['losses']} losses")
            if r["id"].split(" ")[0] in OURS and r["static_ok"] is not True:
                failures.append(f"{where}: the static check did not run")
    assert seen == {j.id for j in jobs}
    # every tightpipe job compared with a built-in on every rank
    for results in per_rank:
        ours = [r for r in results if r["id"].split(" ")[0] in OURS]
        assert len(ours) == len(GENERATORS) * len(MICROBATCHES[p]) + 1
        assert all("grad_vs_builtin" in r for r in ours)
    assert not failures, "\n".join(failures)
