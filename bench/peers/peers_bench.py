"""Measured against predicted: Megatron-Core's and DeepSpeed's real schedules on CPU (gloo) beside
`tightpipe simulate --engine megatron|deepspeed` (docs/peers.md, issues 44 and 49). Run by hand:

    PYTHONPATH=python VENV/bin/python bench/peers/peers_bench.py [--quick] [--f-ms 10 --b-ms 20]
        [--predict-from measured|probe] [--repeat 2] [--probe-in FILE | --probe-out FILE]

Each run's stages sleep F and B from a cost table (the last stage 1.5x, as an LM head makes it;
per chunk F/v and B/v with v virtual stages). Two predictions:

* `--predict-from measured` (default): from the run's own measured durations
  (compare.measured_costs: median host-inclusive F and B per stage, the median message crossing,
  the step's tail), so what is compared is the engine profile: which waits the engine has.
* `--predict-from probe`: from what the stages were asked to take, plus the engine's host time
  per F and per B, the link's latency, the engine's call per p2p operation (paid at each end)
  and its step tail, measured once per engine by compare.measure_engine_host_time (its own 1F1B
  on short computes, and a gloo ping-pong), before and outside every run it predicts:
  `simulate --host-time-us`. Nothing from the run predicted.

`--runs-out FILE` also keeps every run measured (pickle); `--runs-in FILE` (with `--probe-in`)
predicts those runs again and runs nothing: a changed model judged on the same measurements.

Step: the median over the measured steps (the first step, with the engines' set-up, is left
out); with --repeat N, of the N runs of a configuration the one with the shortest measured step
(the least disturbed by the machine's other work; chosen by the measurement, not the
prediction). The row's noise: the larger of the N runs' spread (max / min - 1, "spread %") and,
predicted from the probe, the spread of the predictions from each of the probe's identical runs
alone ("probe %"). Idle (measured mode): per rank, T minus its compute, median over steps; its
error in points of the measured step. "link only" (probe mode): the same prediction with each
message taking the link's ping-pong alone, without the engine's call around it.

Verdict: the project's one rule (bench/verdict.h; tightpipe.verdict mirrors it once in Python):
every row within 5% and the median within 3%, each judged only where the identical runs spread
no more than its tolerance (the worst against each row's spread, the median against the median
spread); otherwise COULD NOT JUDGE, never PASS. One run per row (--repeat 1) has no known noise.
Exit 0 PASS, 1 FAIL, 3 COULD NOT JUDGE.
"""

import argparse
import json
import os
import pickle
import statistics
import sys
import time
from typing import Any, TypedDict

from tightpipe.peers import deepspeed, megatron
from tightpipe.peers.common import PeerRun, RunSpec, make_costs
from tightpipe.peers.compare import (
    EngineHostTime,
    crossings_and_tails,
    engine_host_time,
    host_time,
    measure_engine_host_time,
    measured_costs,
    predict_from_probe,
    simulate,
)
from tightpipe.verdict import (
    Verdict,
    combine,
    could_not_judge_reason,
    exit_code,
    judge,
    machine_line,
    spread,
)

MEDIAN_TOLERANCE = 0.03
WORST_TOLERANCE = 0.05
NOISE_HINT = "run it with nothing else on the machine, or more --repeat"

# (engine, p, v, microbatches, batch_p2p); an (m, g) entry: Megatron's microbatch group g
Config = tuple[str, int, int, list[int | tuple[int, int]], bool | None]
# A configuration's key in --runs-out: (engine, p, v, repr(microbatches), batch_p2p)
RunsKey = tuple[str, int, int, str, bool | None]


class SavedRuns(TypedDict, total=False):
    """What --runs-out writes (pickle) and --runs-in reads: per configuration, every repeat's
    runs (one per microbatch entry) and the load average after them."""

    when: str
    machine: str
    runs: dict[RunsKey, list[list[PeerRun]]]
    load: dict[RunsKey, float]


def configs(quick: bool) -> list[Config]:
    out: list[Config] = [
        ("megatron", 2, 1, [4, 8], True),
        ("megatron", 4, 1, [4, 8, 16], True),
        ("megatron", 4, 2, [8, 16], True),
        ("megatron", 4, 2, [(10, 5), (16, 8)], True),
        ("megatron", 2, 2, [4, 8], False),
        ("megatron-overlap", 4, 2, [8, 16], False),
        ("megatron-overlap", 2, 2, [4, 8], False),
        ("deepspeed", 2, 1, [4, 8], None),
        ("deepspeed", 4, 1, [4, 8, 16], None),
    ]
    if quick:
        out = [(e, p, v, ms[:1], b) for e, p, v, ms, b in out]
    return out


def measured(run: PeerRun) -> tuple[float, list[float]]:
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


def harness(profile: str) -> str:
    return "deepspeed" if profile == "deepspeed" else "megatron"


def probes(args: argparse.Namespace, engines: list[str]) -> dict[str, EngineHostTime]:
    """The probe of each engine: read from --probe-in, or measured now (before any row)."""
    out: dict[str, EngineHostTime]
    if args.probe_in:
        with open(args.probe_in) as fh:
            doc = json.load(fh)
        out = {e: EngineHostTime.from_json(doc[e]) for e in engines}
        print(f"probe read from {args.probe_in}")
    else:
        out = {}
        for e in engines:
            t0 = time.monotonic()
            out[e] = measure_engine_host_time(
                e,
                pp=args.probe_pp,
                f_ms=args.probe_f_ms,
                b_ms=args.probe_b_ms,
                steps=args.probe_steps,
            )
            print(f"probe {e}: measured in {time.monotonic() - t0:.0f} s", flush=True)
        if args.probe_out:
            with open(args.probe_out, "w") as fh:
                json.dump({e: h.to_json() for e, h in out.items()}, fh, indent=1)
    for e, h in out.items():
        print(
            f"probe {e} ({h.transport}, p={h.probe['pp']}, m={h.probe['microbatches']}, "
            f"F {h.probe['f_ms']} ms, B {h.probe['b_ms']} ms, {h.probe['when']}): "
            f"--host-time-us {h.host_time_flag()}; message {h.message_ms:.3f} ms "
            f"(ping-pong {h.link_ms:.3f}, the engine's call {h.call_ms:+.3f} over "
            f"{h.ops_per_call:.2f} operations: {h.op_overhead_ms:.3f} ms each at each end); "
            f"step tail "
            f"{h.tail_ms:.3f} ms; {h.probe['machine']}"
        )
        for k, one in enumerate(h.identical()):
            print(
                f"  its identical run {k}: --host-time-us {one.host_time_flag()}; message "
                f"{one.message_ms:.3f} ms (ping-pong {one.link_ms:.3f}); step tail "
                f"{one.tail_ms:.3f} ms"
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--f-ms", type=float, default=10.0)
    ap.add_argument("--b-ms", type=float, default=20.0)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per configuration; the one with the shortest measured step is "
        "shown, their spread is the row's noise",
    )
    ap.add_argument("--predict-from", choices=("measured", "probe"), default="measured")
    ap.add_argument("--probe-in", default="", help="a probe saved by --probe-out on this machine")
    ap.add_argument("--probe-out", default="", help="write the probe measured here")
    ap.add_argument(
        "--runs-out", default="", help="also write every run measured here (pickle) for --runs-in"
    )
    ap.add_argument(
        "--runs-in",
        default="",
        help="predict the runs of an earlier --runs-out again, running nothing "
        "(with --probe-in: a changed model judged on the same measurements)",
    )
    ap.add_argument("--probe-pp", type=int, default=2)
    ap.add_argument("--probe-f-ms", type=float, default=1.0)
    ap.add_argument("--probe-b-ms", type=float, default=2.0)
    ap.add_argument("--probe-steps", type=int, default=6)
    ap.add_argument(
        "--explain",
        action="store_true",
        help="probe mode: after each row, the run's own host time, message and tail "
        "beside the probe's (never used by the prediction)",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated engines of the rows to run (megatron, megatron-overlap, deepspeed)",
    )
    ap.add_argument(
        "--wrong-data",
        action="store_true",
        help="also run what the harness refuses (p = 2 interleaved, batched p2p)",
    )
    a = ap.parse_args()
    if a.repeat < 1:
        print(f"--repeat {a.repeat}; hint: 1 or more", file=sys.stderr)
        return 2
    rows_cfg = configs(a.quick)
    if a.only:
        rows_cfg = [c for c in rows_cfg if c[0] in a.only.split(",")]
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {machine_line()}")
    print(
        f"stages asked F {a.f_ms} ms, B {a.b_ms} ms per rank (per chunk / v; last stage "
        f"1.5x); predicted from {a.predict_from}; --repeat {a.repeat}"
    )
    probe = (
        probes(a, sorted({harness(c[0]) for c in rows_cfg})) if a.predict_from == "probe" else {}
    )
    print(
        f"{'engine':16} {'schedule':20} {'p':>2} {'v':>2} {'m':>3}  {'measured':>9} "
        f"{'predicted':>9} {'err %':>6} {'spread %':>8} {'probe %':>7} {'load':>5}  "
        f"{'idle err' if a.predict_from == 'measured' else 'link only':>9}  "
        f"{'other profile':>22}  verdict (5%)"
    )
    # Per row: its step error, idle error (measured mode), noise and verdict.
    rows: list[tuple[float, float | None, float | None, Verdict]] = []
    over: list[float] = []
    saved: SavedRuns = {}
    runs_out: SavedRuns = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine_line(),
    }
    if a.runs_in:
        with open(a.runs_in, "rb") as fh:
            saved = pickle.load(fh)
        print(f"runs read from {a.runs_in} (measured {saved['when']}; nothing runs now)")
    for engine, p, v, ms, batch in rows_cfg:
        costs = make_costs(p * v, a.f_ms / v, a.b_ms / v)
        profile = engine
        key = (engine, p, v, repr(ms), batch)
        tries = saved["runs"][key] if saved else []
        for _ in range(0 if saved else a.repeat):
            if engine.startswith("megatron"):
                # configs() gives every Megatron row its batch_p2p (None: DeepSpeed's rows only)
                assert batch is not None, f"configs(): {engine} has no batch_p2p"
                specs = [RunSpec(m[0], group=m[1]) if isinstance(m, tuple) else m for m in ms]
                tries.append(
                    megatron.run_many(
                        p,
                        specs,
                        costs,
                        vpp=v,
                        steps=a.steps,
                        batch_p2p=batch,
                        overlap=engine == "megatron-overlap",
                    )
                )
            else:
                tries.append(deepspeed.run_many(p, ms, costs, steps=a.steps))
        load_now = saved["load"][key] if saved else os.getloadavg()[0]
        if a.runs_out:
            runs_out.setdefault("runs", {})[key] = tries
            runs_out.setdefault("load", {})[key] = load_now
        for k in range(len(ms)):
            same = [t[k] for t in tries]
            noise = spread([measured(r)[0] for r in same])
            # The repeat with the shortest measured step: the one the machine's other work
            # disturbed least (chosen by the measurement alone, never by the prediction).
            run = min(same, key=lambda r: measured(r)[0])
            step, idle = measured(run)

            def predict(
                prof: str,
                run: PeerRun = run,
                h: EngineHostTime | None = None,
                engine: str = engine,
            ) -> dict[str, Any]:
                if a.predict_from == "probe":
                    return predict_from_probe(run, prof, h or probe[harness(engine)])
                return simulate(run, prof, measured_costs(run))

            sim = predict(profile)
            pred = sim["makespan"] / 1e3
            err = (pred - step) / step
            # The probe's own noise: the prediction from each of its identical runs alone.
            pnoise = (
                spread(
                    [predict(profile, h=h)["makespan"] for h in probe[harness(engine)].identical()]
                )
                if a.predict_from == "probe"
                else 0.0
            )
            run_noise = noise
            noise = None if noise is None or pnoise is None else max(noise, pnoise)
            if a.predict_from == "measured":
                # the prediction's idle in the report's definition: plus the rank's host time,
                # which the costs count as compute (compare.host_inclusive)
                pidle = [
                    pr["idle"] / 1e3
                    + statistics.median(host_time(run, j, r) for j in run.measured_steps())
                    for r, pr in enumerate(sim["per_rank"])
                ]
                ierr = max(abs(x - y) for x, y in zip(idle, pidle, strict=True)) / step * 100
                ierr_txt = f"{ierr:.2f}"
            else:
                # the same prediction with messages of the link's ping-pong alone (no engine call)
                o = (
                    predict_from_probe(run, profile, probe[harness(engine)], link_only=True)[
                        "makespan"
                    ]
                    / 1e3
                )
                ierr, ierr_txt = None, f"{100 * (o - step) / step:+.2f}%"
            other = {
                "megatron": "deepspeed",
                "deepspeed": "megatron",
                "megatron-overlap": "megatron",
            }[profile]
            if v == 1 or profile == "megatron-overlap":
                o = predict(other)["makespan"] / 1e3
                other_txt = f"{other} {100 * (o - step) / step:+.2f}%"
            else:
                other_txt = "-"
            verdict = judge(err, WORST_TOLERANCE, noise)
            rows.append((err, ierr, noise, verdict))
            for j in run.measured_steps():
                for r in range(p):
                    for e in run.step_events(j, r):
                        if e.kind in ("F", "B"):
                            asked = (run.costs.f if e.kind == "F" else run.costs.b)[e.stage]
                            over.append(e.end - e.start - asked)
            sched = run.schedule + (
                " (batch_p2p off)" if batch is False and engine == "megatron" else ""
            )
            g = run.options.get("microbatch_group_size_per_vp_stage")
            if v > 1 and g and g != p:
                sched += f" g={g}"
            noise_txt = f"{100 * run_noise:.2f}" if run_noise is not None else "-"
            probe_txt = f"{100 * pnoise:.2f}" if pnoise is not None and probe else "-"
            load = load_now  # after the runs (read back with --runs-in)
            print(
                f"{engine:16} {sched:20} {p:>2} {v:>2} {run.microbatches:>3}  "
                f"{step * 1e3:>8.1f}ms {pred * 1e3:>8.1f}ms {100 * err:>+6.2f} {noise_txt:>8} "
                f"{probe_txt:>7} "
                f"{load:>5.2f}  {ierr_txt:>9}  {other_txt:>22}  {verdict.value}",
                flush=True,
            )
            if a.explain and a.predict_from == "probe":
                # where the probe's figures and the run's own part (for the docs; the
                # prediction above never reads these)
                h = probe[harness(engine)]
                own = {k: 1e6 * statistics.median(x) for k, x in engine_host_time(run).items()}
                cross, tails = crossings_and_tails(run)
                print(
                    f"    the run's own: host f={own['F']:.0f},b={own['B']:.0f} us, message "
                    f"{statistics.median(cross) if cross else 0:.3f} ms, tail "
                    f"{statistics.median(tails):.3f} ms; the probe's: "
                    f"{h.host_time_flag()}, {h.message_ms:.3f} ms, {h.tail_ms:.3f} ms"
                )
    if a.runs_out:
        with open(a.runs_out, "wb") as out_fh:
            pickle.dump(runs_out, out_fh)
    errs = [abs(r[0]) for r in rows]
    noises = [r[2] for r in rows]
    known = [n for n in noises if n is not None]
    median_noise = statistics.median(known) if len(known) == len(noises) else None
    worst_noise = max(known) if len(known) == len(noises) else None
    print(
        f"step error: median {100 * statistics.median(errs):.2f}%, worst "
        f"{100 * max(errs):.2f}% ({len(rows)} runs); noise (the larger of the identical "
        f"runs' and the probe's spread): "
        + (
            f"median {100 * median_noise:.2f}%, worst {100 * worst_noise:.2f}%"
            if median_noise is not None and worst_noise is not None
            else "unknown (one run)"
        )
    )
    ierrs = [r[1] for r in rows if r[1] is not None]
    if ierrs:
        print(f"idle error: median {statistics.median(ierrs):.2f} pts, worst {max(ierrs):.2f} pts")
    print(
        f"emulated F/B beyond the asked durations (engine code around the sleep included): "
        f"median {statistics.median(over) * 1e3:.3f} ms, p90 "
        f"{statistics.quantiles(over, n=10)[-1] * 1e3:.3f} ms"
    )
    median_verdict = judge(statistics.median(errs), MEDIAN_TOLERANCE, median_noise)
    worst_verdict = Verdict.PASS
    for row in rows:
        worst_verdict = combine(worst_verdict, row[3])
    overall = combine(median_verdict, worst_verdict)
    print(
        f"median within {100 * MEDIAN_TOLERANCE:.0f}%: {median_verdict.value}"
        + (
            f" ({could_not_judge_reason(median_noise, MEDIAN_TOLERANCE, NOISE_HINT)})"
            if median_verdict is Verdict.COULD_NOT_JUDGE
            else ""
        )
    )
    judged = [r for r in rows if r[3] is not Verdict.COULD_NOT_JUDGE]
    print(
        f"every row within {100 * WORST_TOLERANCE:.0f}%: {worst_verdict.value} ("
        f"{sum(r[3] is Verdict.PASS for r in rows)} pass, "
        f"{sum(r[3] is Verdict.FAIL for r in rows)} fail, {len(rows) - len(judged)} could not "
        f"be judged: their identical runs spread more than {100 * WORST_TOLERANCE:.0f}% or "
        f"ran once)"
    )
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; {machine_line()}")
    print(f"verdict: {overall.value}")
    if a.wrong_data:
        # Megatron-Core at p = 2, interleaved, batch_p2p_comm=True, no overlap: run it anyway.
        try:
            megatron.run_many(
                2, [4], make_costs(4, 1, 2), vpp=2, steps=2, batch_p2p=True, known_wrong=True
            )
            print("p = 2 interleaved batched: the losses matched (no wrong data seen)")
        except RuntimeError as e:
            print(f"p = 2 interleaved batched: {str(e).splitlines()[0]}")
    return exit_code(overall)


if __name__ == "__main__":
    sys.exit(main())
