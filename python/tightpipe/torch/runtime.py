"""Build PyTorch's own pipelining runtime from a tightpipe schedule.

    from tightpipe.torch import build_runtime, generate, stage_placement
    sched = generate("zb-v-auto", pp=4, microbatches=8, cost="f=1,i=1,w=1")
    # this rank builds PipelineStage objects for sched.stages_of(rank), then:
    runtime = build_runtime(stages, sched, n_microbatches=8, loss_fn=loss_fn)
    runtime.step(x, target=y, losses=losses)      # as any PyTorch schedule

The runtime is torch.distributed.pipelining's `_PipelineScheduleRuntime` (PyTorch 2.15.0, the
version this was tested with; docs/torch.md) loaded with format="compute_comms": it runs each
rank's row exactly as tightpipe wrote it. Before PyTorch sees the file, the schedule was checked by
`tightpipe schedule --check`, its shape against the stages (ranks, stages, microbatches, which
stages this rank holds) and its actions against the installed PyTorch's action types; each
mismatch raises an error naming both numbers.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from typing import Any

import torch
from torch.distributed.pipelining import schedules as _schedules

from tightpipe import _args
from tightpipe import schedule as _sched
from tightpipe.errors import (
    ArgumentTypeError,
    ScheduleFileError,
    ScheduleMismatchError,
    UnsupportedActionError,
)
from tightpipe.schedule import TorchSchedule

TESTED_TORCH = "2.15.0"


def _schedule_arg(sched: Any) -> TorchSchedule:
    if not isinstance(sched, TorchSchedule):
        raise ArgumentTypeError(
            f"sched {_args.show(sched)}: must be a TorchSchedule, not {type(sched).__name__}; "
            "hint: tightpipe.schedule.generate(...) or load(path) gives one"
        )
    return sched


def _stages_arg(stages: Any) -> list[Any]:
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence):
        raise ArgumentTypeError(
            f"stages {_args.show(stages)}: must be a list of this rank's PipelineStage objects, "
            f"not {type(stages).__name__}; hint: one per stage in schedule.stages_of(rank)"
        )
    return list(stages)


def runtime_action_types() -> set[str]:
    """The action types the installed PyTorch's runtime knows (its _ComputationType values)."""
    return {t.value for t in _schedules._ComputationType}


def check_actions(sched: TorchSchedule, supported: set[str] | None = None) -> None:
    """UnsupportedActionError naming the first action type of `sched` the runtime lacks."""
    _schedule_arg(sched)
    if supported is not None and (
        isinstance(supported, str) or not all(isinstance(t, str) for t in supported)
    ):
        raise ArgumentTypeError(
            f"supported {_args.show(supported)}: must be a set of action type strings; hint: "
            "e.g. {'F', 'I', 'W', 'SEND_F'}, or leave it out for the installed PyTorch's"
        )
    supported = runtime_action_types() if supported is None else set(supported)
    for rank, row in enumerate(sched.rows):
        for col, cell in enumerate(row):
            typ, actions = _sched.parse_cell(cell)
            for t in [typ] + [a.type for a in actions]:
                if t not in supported:
                    raise UnsupportedActionError(
                        f"{sched.source}:{rank + 1}:{col + 1}: action '{cell}' needs {t}, which "
                        f"PyTorch {torch.__version__}'s pipelining runtime lacks; hint: "
                        f"tightpipe's torch form is tested with PyTorch {TESTED_TORCH} "
                        "(python/requirements.txt); with an older one, load a compute-only "
                        "file (`--format csv`) with format='compute_only'"
                    )


def check_reduce_grads(sched: TorchSchedule) -> None:
    """ScheduleFileError unless every stage has exactly one REDUCE_GRAD: PyTorch's runtime
    (format="compute_comms") scales a stage's gradients by 1/m only there, so a stage without
    one, or with two, trains on wrong gradients and raises nothing."""
    _schedule_arg(sched)
    count = [0] * sched.num_stages
    where: dict[int, str] = {}
    for rank, row in enumerate(sched.rows):
        for col, cell in enumerate(row):
            _, actions = _sched.parse_cell(cell)
            for a in actions:
                if a.type == "REDUCE_GRAD" and 0 <= a.stage < sched.num_stages:
                    count[a.stage] += 1
                    if count[a.stage] == 2:
                        raise ScheduleFileError(
                            f"{sched.source}:{rank + 1}:{col + 1}: a second '{cell}' (the first "
                            f"is at {where[a.stage]}): stage {a.stage} would scale its gradients "
                            "twice; hint: PyTorch reduces a stage's gradients once per step, at "
                            "its one REDUCE_GRAD"
                        )
                    where[a.stage] = f"{sched.source}:{rank + 1}:{col + 1}"
    missing = [s for s in range(sched.num_stages) if count[s] == 0]
    if missing:
        raise ScheduleFileError(
            f"{sched.source}: stage {missing[0]} has no REDUCE_GRAD ({len(missing)} of "
            f"{sched.num_stages} stages have none): PyTorch's runtime would never scale its "
            "gradients; hint: write the file with `tightpipe schedule --format torch`, which "
            "puts one after each stage's last backward"
        )


def check_stages(sched: TorchSchedule, stages: Sequence[Any], n_microbatches: int) -> None:
    """ScheduleMismatchError when `sched` does not fit this rank's PyTorch stages: the rank
    count, the stage count, the microbatch count, or the stages this rank holds."""
    _schedule_arg(sched)
    stages = _stages_arg(stages)
    _args.count(
        "n_microbatches",
        n_microbatches,
        1,
        _args.MAX_MICROBATCHES,
        f"the schedule's microbatch count, {sched.num_microbatches}",
    )
    if not stages:
        raise ScheduleMismatchError(
            "no PipelineStage given for this rank; hint: build one per stage in "
            "schedule.stages_of(rank)"
        )
    st = stages[0]
    if sched.num_ranks != st.group_size:
        raise ScheduleMismatchError(
            f"{sched.source} has {sched.num_ranks} ranks (rows), but the pipeline group has "
            f"{st.group_size} ranks; hint: generate the schedule with --pp {st.group_size}"
        )
    if sched.num_stages != st.num_stages:
        raise ScheduleMismatchError(
            f"{sched.source} has {sched.num_stages} stages, but the PyTorch stages say "
            f"num_stages={st.num_stages}; hint: the schedule's --pp x --vpp must equal the "
            "number of stages the model is split into"
        )
    if sched.num_microbatches != n_microbatches:
        raise ScheduleMismatchError(
            f"{sched.source} has {sched.num_microbatches} microbatches, but the runtime is asked "
            f"for n_microbatches={n_microbatches}; hint: generate the schedule with "
            f"--microbatches {n_microbatches}"
        )
    want = sched.stages_of(st.group_rank)
    have = sorted(s.stage_index for s in stages)
    if have != want:
        raise ScheduleMismatchError(
            f"{sched.source} puts stages {want} on rank {st.group_rank}, but this rank holds "
            f"PyTorch stages {have}; hint: build this rank's stages from "
            "schedule.stages_of(rank) (the placement is the schedule's: loop or V)"
        )
    for s in stages:
        if s.num_stages != st.num_stages or s.group_size != st.group_size:
            raise ScheduleMismatchError(
                f"stage {s.stage_index} says num_stages={s.num_stages}, group_size="
                f"{s.group_size}, stage {st.stage_index} says {st.num_stages}, {st.group_size}; "
                "hint: all stages of one pipeline agree"
            )


def build_runtime(
    stages: Sequence[Any],
    schedule: TorchSchedule | str | os.PathLike[str],
    n_microbatches: int,
    loss_fn: Any = None,
    *,
    scale_grads: bool = True,
    **runtime_kwargs: Any,
) -> "_schedules._PipelineScheduleRuntime":
    """PyTorch's `_PipelineScheduleRuntime` for this rank's `stages`, running `schedule` (a
    TorchSchedule, a CSV file path or CSV text from `tightpipe schedule --format torch`).

    Raises ScheduleFileError (damaged, truncated, refused by `tightpipe schedule --check`, or a
    stage without exactly one REDUCE_GRAD: PyTorch would scale its gradients wrongly, silently),
    ScheduleMismatchError (shape or placement), UnsupportedActionError, all before PyTorch reads
    the file. `runtime_kwargs` go to the runtime (e.g. max_outstanding_sends)."""
    stages = _stages_arg(stages)
    _args.count(
        "n_microbatches",
        n_microbatches,
        1,
        _args.MAX_MICROBATCHES,
        "the schedule's microbatch count (schedule.num_microbatches)",
    )
    _args.callable_or_none(
        "loss_fn",
        loss_fn,
        "a function (output, target) -> loss, or None where no stage computes the loss",
    )
    _args.flag(
        "scale_grads", scale_grads, "True (PyTorch's default) scales gradients by 1/n_microbatches"
    )
    if isinstance(schedule, TorchSchedule):
        sched = schedule
    elif isinstance(schedule, (str, os.PathLike)):
        sched = _sched.load(schedule)
    else:
        raise ArgumentTypeError(
            f"schedule {_args.show(schedule)}: must be a TorchSchedule, a CSV file path or CSV "
            f"text, not {type(schedule).__name__}; hint: tightpipe.schedule.generate(...) or "
            "load(path)"
        )
    if not sched.check_output:  # built by parse() or by hand: not yet checked by the binary
        sched.check_output = _sched.check_text(sched.text(), sched.source)
    check_reduce_grads(sched)
    check_stages(sched, stages, n_microbatches)
    check_actions(sched)
    # PyTorch's own constructor carries no annotations.
    runtime = _schedules._PipelineScheduleRuntime(  # type: ignore[no-untyped-call]
        list(stages), n_microbatches, loss_fn=loss_fn, scale_grads=scale_grads, **runtime_kwargs
    )
    with tempfile.TemporaryDirectory(prefix="tightpipe-") as tmp:
        path = os.path.join(tmp, "schedule.csv")
        with open(path, "w", newline="") as f:
            f.write(sched.text())
        runtime._load_csv(path, format="compute_comms")
    return runtime
