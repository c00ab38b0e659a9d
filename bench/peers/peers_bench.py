"""Measured against predicted: Megatron-Core's and DeepSpeed's real schedules on CPU (gloo) beside
`tightpipe simulate --engine megatron|deepspeed` (docs/peers.md, issue 44). Run by hand:

    PYTHONPATH=python VENV/bin/python bench/peers/peers_bench.py [--quick] [--f-ms 10 --b-ms 20]

Each run's stages sleep F and B from a cost table (the last stage 1.5x, as an LM head makes it;
per chunk F/v and B/v with v virtual stages). The prediction uses the run's own measured
durations (compare.measured_costs: median F and B per stage, the median message crossing), never
the table it was asked for, so what is compared is the engine profile: which waits the engine
has. Step: the median over the measured steps (the first step, with the engines' set-up, is left
out); with --repeat N, of the N runs of a configuration the one with the shortest measured step
(the least disturbed by the machine's other work; chosen by the measurement, not the
prediction). Idle: per rank, T minus its compute, median over steps; its error in points of the
measured step.
"""
import argparse
import statistics
import sys

from tightpipe.peers import deepspeed, megatron
from tightpipe.peers.common import RunSpec, make_costs
from tightpipe.peers.compare import host_time, measured_costs, simulate


def configs(quick: bool):
    # (engine, p, v, microbatches, batch_p2p); an (m, g) entry: Megatron's microbatch group g
    out = [("megatron", 2, 1, [4, 8], True), ("megatron", 4, 1, [4, 8, 16], True),
           ("megatron", 4, 2, [8, 16], True), ("megatron", 4, 2, [(10, 5), (16, 8)], True),
           ("megatron", 2, 2, [4, 8], False),
           ("megatron-overlap", 4, 2, [8, 16], False), ("megatron-overlap", 2, 2, [4, 8], False),
           ("deepspeed", 2, 1, [4, 8], None), ("deepspeed", 4, 1, [4, 8, 16], None)]
    if quick:
        out = [(e, p, v, ms[:1], b) for e, p, v, ms, b in out]
    return out


def measured(run):
    steps = [run.step_time(k) for k in run.measured_steps()]
    idle = []
    for r in range(run.pp):
        per = []
        for k in run.measured_steps():
            evs = run.step_events(k, r)
            busy = sum(e.end - e.start for e in evs if e.kind in ("F", "B"))
            per.append(run.step_time(k) - busy)
        idle.append(statistics.median(per))
    return statistics.median(steps), idle


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--f-ms", type=float, default=10.0)
    ap.add_argument("--b-ms", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per configuration; the one with the shortest measured step is shown")
    ap.add_argument("--wrong-data", action="store_true",
                    help="also run what the harness refuses (p = 2 interleaved, batched p2p)")
    a = ap.parse_args()
    rows = []
    print(f"{'engine':9} {'schedule':20} {'p':>2} {'v':>2} {'m':>3}  {'measured':>9} "
          f"{'predicted':>9} {'err %':>6}  {'idle err pts':>12}  {'other profile':>22}")
    over = []
    for engine, p, v, ms, batch in configs(a.quick):
        costs = make_costs(p * v, a.f_ms / v, a.b_ms / v)
        profile = engine
        tries = []
        for _ in range(a.repeat):
            if engine.startswith("megatron"):
                specs = [RunSpec(m[0], group=m[1]) if isinstance(m, tuple) else m for m in ms]
                tries.append(megatron.run_many(p, specs, costs, vpp=v, steps=a.steps,
                                               batch_p2p=batch,
                                               overlap=engine == "megatron-overlap"))
            else:
                tries.append(deepspeed.run_many(p, ms, costs, steps=a.steps))
        # Per microbatch count, the repeat with the shortest measured step: the one the machine's
        # other work disturbed least (chosen by the measurement alone, never by the prediction).
        runs = [min((t[k] for t in tries), key=lambda r: measured(r)[0]) for k in range(len(ms))]
        for run in runs:
            step, idle = measured(run)
            sim = simulate(run, profile, measured_costs(run))
            pred = sim["makespan"] / 1e3
            # the prediction's idle in the report's definition: plus the rank's host time, which
            # the costs count as compute (compare.host_inclusive)
            pidle = [pr["idle"] / 1e3 + statistics.median(host_time(run, k, r)
                                                           for k in run.measured_steps())
                     for r, pr in enumerate(sim["per_rank"])]
            err = 100 * (pred - step) / step
            ierr = max(abs(x - y) for x, y in zip(idle, pidle)) / step * 100
            rows.append((abs(err), ierr))
            other = {"megatron": "deepspeed", "deepspeed": "megatron",
                     "megatron-overlap": "megatron"}[profile]
            if v == 1 or profile == "megatron-overlap":
                o = simulate(run, other, measured_costs(run))["makespan"] / 1e3
                other_txt = f"{other} {100 * (o - step) / step:+.2f}%"
            else:
                other_txt = "-"
            for k in run.measured_steps():
                for r in range(p):
                    for e in run.step_events(k, r):
                        if e.kind in ("F", "B"):
                            asked = (run.costs.f if e.kind == "F" else run.costs.b)[e.stage]
                            over.append(e.end - e.start - asked)
            sched = run.schedule + (" (batch_p2p off)" if batch is False and
                                    engine == "megatron" else "")
            g = run.options.get("microbatch_group_size_per_vp_stage")
            if v > 1 and g and g != p:
                sched += f" g={g}"
            print(f"{engine:9} {sched:20} {p:>2} {v:>2} {run.microbatches:>3}  "
                  f"{step * 1e3:>8.1f}ms {pred * 1e3:>8.1f}ms {err:>+6.2f}  {ierr:>12.2f}  "
                  f"{other_txt:>22}", flush=True)
    errs = [r[0] for r in rows]
    ierrs = [r[1] for r in rows]
    print(f"step error: median {statistics.median(errs):.2f}%, worst {max(errs):.2f}%; "
          f"idle error: median {statistics.median(ierrs):.2f} pts, worst {max(ierrs):.2f} pts "
          f"({len(rows)} runs)")
    print(f"emulated F/B beyond the asked durations (engine code around the sleep included): "
          f"median {statistics.median(over) * 1e3:.3f} ms, p90 "
          f"{statistics.quantiles(over, n=10)[-1] * 1e3:.3f} ms")
    if a.wrong_data:
        # Megatron-Core at p = 2, interleaved, batch_p2p_comm=True, no overlap: run it anyway.
        try:
            megatron.run_many(2, [4], make_costs(4, 1, 2), vpp=2, steps=2, batch_p2p=True,
                              known_wrong=True)
            print("p = 2 interleaved batched: the losses matched (no wrong data seen)")
        except RuntimeError as e:
            print(f"p = 2 interleaved batched: {str(e).splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
