"""DeepSpeed's real pipeline engine on p CPU processes (gloo), stages of emulated duration.

    python -m tightpipe.peers.deepspeed --pp 4 --microbatches 8 --costs costs.json --out RUN_DIR

builds a `deepspeed.pipe.PipelineModule` of p emulated layers (one per stage) and runs
`PipelineEngine.train_batch` (deepspeed 0.19.8, DS_ACCELERATOR=cpu) unchanged: its `TrainSchedule`
instructions, its blocking `dist.send` / `dist.recv` (runtime/pipe/p2p.py), its loss broadcast at
the end. The harness only times each instruction: the engine's `_INSTRUCTION_MAP` is replaced, on
the engine object, by the same functions wrapped in a timer.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from tightpipe.peers.common import (
    HIDDEN,
    CostTable,
    PeerError,
    PeerRun,
    Recorder,
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

DIST = "deepspeed"


def check_options(pp: int, microbatches: int, schedule: str = "1f1b") -> None:
    check_int("--pp", pp)
    check_int("--microbatches", microbatches)
    if schedule != "1f1b":
        raise PeerError(
            f"DeepSpeed's PipelineEngine does not run schedule '{schedule}' (its TrainSchedule "
            f"is 1F1B, one stage per rank); hint: --schedule 1f1b, or run '{schedule}' with "
            f"`tightpipe.peers.megatron` (interleaved) or `tightpipe train`"
        )
    if pp < 2:
        raise PeerError(f"pipeline size {pp} < 2; hint: --pp 2 or more")
    if microbatches < 1:
        raise PeerError(f"--microbatches {microbatches}; hint: 1 or more")


def _rank_main(rank: int, pp: int, port: int, cfg: Dict[str, Any]) -> List[Dict[str, Any]]:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ["DS_ACCELERATOR"] = "cpu"
    os.environ.setdefault("LOCAL_RANK", str(rank))
    os.environ.setdefault("RANK", str(rank))
    os.environ.setdefault("WORLD_SIZE", str(pp))
    import logging

    import torch

    torch.set_num_threads(1)
    torch.manual_seed(cfg["seed"])
    version = check_version(DIST)
    init_gloo(rank, pp, port)
    import deepspeed
    from deepspeed.pipe import PipelineModule
    from deepspeed.utils import logger as ds_logger

    ds_logger.setLevel(logging.ERROR)
    import torch.distributed as dist

    deepspeed.init_distributed(
        dist_backend="gloo", auto_mpi_discovery=False, dist_init_required=False
    )
    Emulated = emulated_function()
    f, b = list(cfg["runs"][0]["f"]), list(cfg["runs"][0]["b"])  # the running spec's

    class Layer(torch.nn.Module):
        def __init__(self, stage: int):
            super().__init__()
            self.stage = stage
            self.w = torch.nn.Parameter(torch.ones(1))

        def forward(self, x):
            return Emulated.apply(x, self.w, f[self.stage], b[self.stage])

    def loss_fn(output, label):
        return output.sum() + 0 * label.sum()

    from deepspeed.runtime.pipe import schedule as ds_schedule

    kinds = {
        ds_schedule.ForwardPass: ("F", "compute"),
        ds_schedule.BackwardPass: ("B", "compute"),
        ds_schedule.SendActivation: ("SEND_F", "comm"),
        ds_schedule.RecvActivation: ("RECV_F", "comm"),
        ds_schedule.SendGrad: ("SEND_B", "comm"),
        ds_schedule.RecvGrad: ("RECV_B", "comm"),
    }
    results = []
    for one in cfg["runs"]:  # one process group; an engine per microbatch count
        m = one["microbatches"]
        f[:], b[:] = one["f"], one["b"]
        module = PipelineModule(
            layers=[Layer(s) for s in range(pp)],
            num_stages=pp,
            loss_fn=loss_fn,
            partition_method="uniform",
            activation_checkpoint_interval=0,
        )
        opt = torch.optim.SGD(module.parameters(), lr=0.0)
        ds_config = {
            "train_batch_size": m,
            "train_micro_batch_size_per_gpu": 1,
            "gradient_accumulation_steps": m,
            "steps_per_print": 10**9,
            "wall_clock_breakdown": False,
            "pipeline": {"seed_layers": False},
        }
        engine, _, _, _ = deepspeed.initialize(model=module, optimizer=opt, config=ds_config)
        rec = Recorder(rank)
        counters = {k: 0 for k in ("F", "B", "SEND_F", "SEND_B", "RECV_F", "RECV_B")}

        def timed(instr, fn, rec=rec, counters=counters):
            kind, lane = kinds.get(instr, (None, None))

            def run(self, *args, **kw):
                t0 = time.monotonic()
                out = fn(self, *args, **kw)
                t1 = time.monotonic()
                if kind is None:  # LoadMicroBatch: data; OptimizerStep; ReduceGrads, ...
                    ek, el = {
                        "LoadMicroBatch": ("data", "data"),
                        "OptimizerStep": ("optimizer", "compute"),
                    }.get(instr.__name__, ("other", "comm"))
                    rec.add(
                        name=instr.__name__, kind=ek, lane=el, stage=rank, mb=-1, start=t0, end=t1
                    )
                    return out
                mb = counters[kind]  # TrainSchedule runs each kind in microbatch order
                counters[kind] += 1
                if lane == "compute":
                    rec.add(
                        name=f"{rank}{kind}{mb}",
                        kind=kind,
                        lane=lane,
                        stage=rank,
                        mb=mb,
                        start=t0,
                        end=t1,
                    )
                else:
                    ev = "SEND" if kind.startswith("SEND") else "RECV"
                    peer = rank + 1 if kind in ("SEND_F", "RECV_B") else rank - 1
                    rec.add(
                        name=f"{rank}{kind}{mb}",
                        kind=ev,
                        lane=lane,
                        stage=rank,
                        mb=mb,
                        start=t0,
                        end=t1,
                        peer=peer,
                        bytes=HIDDEN * 4,
                    )
                return out

            return run

        engine._INSTRUCTION_MAP = {k: timed(k, v) for k, v in type(engine)._INSTRUCTION_MAP.items()}

        def data(step: int):
            for k in range(m):  # noqa: B023 - consumed by train_batch in this iteration of m
                yield torch.full((1, HIDDEN), microbatch_value(k, step)), torch.zeros(1)

        losses = []
        for step in range(one["steps"]):
            for k in counters:
                counters[k] = 0
            it = data(step)
            dist.barrier()
            rec.begin_step(step)
            loss = engine.train_batch(data_iter=it)
            rec.end_step()
            losses.append(float(loss))
        results.append(rec.result(losses, version))
        del engine
    dist.barrier()
    dist.destroy_process_group()
    return results


def _worker(rank, pp, port, q, cfg):
    run_rank(rank, q, lambda: _rank_main(rank, pp, port, cfg))


def run_many(
    pp: int,
    microbatches: Sequence[Any],
    costs: CostTable,
    steps: int = 3,
    warmup_steps: int = 1,
    seed: int = 1234,
) -> List[PeerRun]:
    """Runs DeepSpeed's PipelineEngine on pp processes once per entry of `microbatches` (an m, or
    a RunSpec with its own costs or steps), in one process group with a new engine each, and
    returns the recorded runs."""
    check_int("--pp", pp)
    specs = as_specs(microbatches, costs, steps)
    runs = []
    for sp in specs:
        assert sp.costs is not None and sp.steps is not None  # as_specs fills both
        check_options(pp, sp.microbatches)
        sp.costs.check_stages(pp, f"the run (p={pp}, one stage per rank)")
        if sp.steps <= warmup_steps:
            raise PeerError(
                f"--steps {sp.steps} <= warm-up steps {warmup_steps}; hint: "
                f"--steps {warmup_steps + 2}"
            )
        runs.append(
            {"microbatches": sp.microbatches, "steps": sp.steps, "f": sp.costs.f, "b": sp.costs.b}
        )
    check_version(DIST)
    cfg = {"runs": runs, "seed": seed}
    per_rank_runs = spawn(_worker, pp, (cfg,))
    out = []
    for sp, events, spans, losses, version in collect_runs(
        "DeepSpeed",
        per_rank_runs,
        specs,
        pp,
        0,
        expected_loss,
        lambda sp: f"p={pp}, m={sp.microbatches}",
    ):
        out.append(
            PeerRun(
                "deepspeed",
                version,
                "1f1b",
                pp,
                1,
                sp.microbatches,
                sp.costs,
                sp.steps,
                warmup_steps,
                events,
                spans,
                losses,
                {"overlap_p2p": False, "p2p": "dist.send/dist.recv (blocking)", "seed": seed},
            )
        )
    return out


def run(pp: int, microbatches: int, costs: CostTable, **kw) -> PeerRun:
    return run_many(pp, [microbatches], costs, **kw)[0]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tightpipe.peers.deepspeed", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--schedule", default="1f1b")
    ap.add_argument("--costs", default=None)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)

    def body() -> PeerRun:
        check_options(a.pp, a.microbatches, a.schedule)
        costs = load_costs(a.costs) if a.costs else make_costs(a.pp, 10, 20)
        return run(a.pp, a.microbatches, costs, steps=a.steps)

    return cli_main(a.out, "deepspeed", body)


if __name__ == "__main__":
    sys.exit(main())
