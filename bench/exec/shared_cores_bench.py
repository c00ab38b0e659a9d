"""More thread ranks than cores, predicted with and without the cores shared (docs/cost_model.md
"Shared cores"), against the measured runs, side by side in one run.

Each of --rounds rounds:
  1. calibrates: a short real run of the small GPT (`tightpipe train`, p = 2 thread ranks, zb-h1,
     which times I and W apart) writes its measured costs, as plan_check_bench's calibration;
  2. plans the same model at p = --pp (default 4) from those costs twice: with a core per rank
     (`plan --cores 0`) and with the ranks sharing this machine's cores (`plan --cores N`, N the
     usable cores, and `--core-slowdown`, default 1);
  3. runs each schedule of --schedules at p = --pp on thread ranks with the layout the plan gave
     it, and records its measured step beside both predictions.
A schedule's error is the median over the rounds of predicted / measured - 1. The verdict (the
project's one rule, tightpipe.verdict): the calibration is the same run every round, so its
spread over the rounds is the machine's noise; where it exceeds --tolerance, or with one round,
the predictions cannot be judged (exit 3); otherwise PASS (exit 0) when every shared-cores
prediction is within --tolerance, FAIL (exit 1) when not. The one-core-per-rank predictions are
printed beside, not judged: they are what the planner said before it knew of the sharing.

    PYTHONPATH=python python3 bench/exec/shared_cores_bench.py [--rounds 3] [--pp 4] [--json F]

`--json F` writes every figure, the noise and the verdict (what bench/sim/checks_bench's
`--shared-cores-json` reads).

About 30 s a round with the defaults on a 2-core machine. Name the CPU (printed first) beside
every figure taken from it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from tightpipe import cli
from tightpipe.verdict import (
    Verdict,
    combine,
    could_not_judge_reason,
    exit_code,
    judge,
    machine_line,
    spread,
)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DATA = os.path.join(os.path.dirname(REPO), "shared", "data", "tinyshakespeare.txt")
MODEL = ["--num-layers", "8", "--hidden-size", "128", "--num-attention-heads", "4"]
MODEL += ["--seq-length", "128"]
MBS, M = 4, 8  # micro batch size and microbatches per step


def train(out: str, pp: int, schedule: str, steps: int, warmup: int, extra: list[str]) -> float:
    """One `tightpipe train` run on thread ranks; its measured step (summary.json), seconds."""
    args = [
        "train",
        *MODEL,
        "--micro-batch-size",
        str(MBS),
        "--num-microbatches",
        str(M),
        "--pp",
        str(pp),
        "--schedule",
        schedule,
        *extra,
        "--train-iters",
        str(warmup + steps),
        "--measure-warmup-steps",
        str(warmup),
        "--eval-iters",
        "0",
        "--log-interval",
        "1000",
        "--blas-threads",
        "1",
        "--data-path",
        DATA,
        "--out-dir",
        out,
    ]
    proc = subprocess.run([cli.find_binary(), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"shared_cores_bench: `tightpipe {' '.join(args)}` failed: {proc.stderr}")
    with open(os.path.join(out, "summary.json")) as fh:
        return float(json.load(fh)["step_time_s"])


def plan(
    calib: str, pp: int, schedules: list[str], cores: int, slowdown: float
) -> dict[str, tuple[float, str]]:
    """`tightpipe plan` at p = pp from the calibration run's costs: per schedule, the step of its
    best candidate (no recompute, the calibration's micro batch) and that candidate's layout."""
    out = cli.run(
        [
            "plan",
            *MODEL,
            "--vocab-size",
            "256",
            "--global-batch-size",
            str(MBS * M),
            "--micro-batch-size",
            str(MBS),
            "--devices",
            str(pp),
            "--pp",
            str(pp),
            "--device",
            "this-cpu",
            "--costs",
            calib,
            "--schedules",
            ",".join(schedules),
            "--cores",
            str(cores),
            "--core-slowdown",
            repr(slowdown),
            "--top",
            "1000",
            "--json",
        ]
    )
    best: dict[str, tuple[float, str]] = {}
    for c in json.loads(out)["candidates"]:
        if not (c.get("fits", True) and c.get("simulated", True)) or c["recompute"] != "none":
            continue
        if c["pp"] != pp or c["micro_batch_size"] != MBS or c["schedule"] in best:
            continue
        best[c["schedule"]] = (float(c["step_time_s"]), str(c["layout"]))
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds (calibration, plans, runs)")
    ap.add_argument("--pp", type=int, default=4, help="thread ranks of the runs")
    ap.add_argument("--schedules", default="1f1b,zb-h1,zb-h2,gpipe", help="schedules to run")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per run")
    ap.add_argument("--warmup", type=int, default=4, help="steps left out of each run")
    ap.add_argument("--core-slowdown", type=float, default=1.0, help="plan --core-slowdown")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest error of a prediction")
    ap.add_argument("--json", default="", help="also write the figures and the verdict here")
    args = ap.parse_args()
    if args.rounds < 1 or args.pp < 2 or args.steps < 1 or args.warmup < 1:
        ap.error("--rounds, --steps and --warmup at least 1, --pp at least 2")
    cores = len(os.sched_getaffinity(0))
    schedules = [s for s in args.schedules.split(",") if s]
    print(machine_line())
    print(
        f"p = {args.pp} thread ranks on {cores} usable cores; GPT 8 x 128, T = 128, micro batch "
        f"{MBS}, m = {M}; {args.steps} steps per run after {args.warmup}; {args.rounds} rounds"
    )
    tmp = tempfile.mkdtemp(prefix="tp-shared-cores-")
    calib_steps: list[float] = []
    rows: dict[str, dict[str, list[float]]] = {
        s: {"measured": [], "alone": [], "shared": []} for s in schedules
    }
    layouts: dict[str, str] = {}
    for rnd in range(args.rounds):
        calib = os.path.join(tmp, f"round{rnd + 1}", "calibration")
        calib_steps.append(train(calib, 2, "zb-h1", args.steps, args.warmup, []))
        alone = plan(calib, args.pp, schedules, 0, 1.0)
        shared = plan(calib, args.pp, schedules, cores, args.core_slowdown)
        for s in schedules:
            if s not in alone or s not in shared:
                raise SystemExit(f"shared_cores_bench: the plan has no {s} at p = {args.pp}")
            # The layout of the first round's plan, kept (the predictions are of that split).
            layout = layouts.setdefault(s, alone[s][1])
            if alone[s][1] != layout or shared[s][1] != layout:
                raise SystemExit(
                    f"shared_cores_bench: round {rnd + 1}'s plans split {s} as {alone[s][1]} / "
                    f"{shared[s][1]}, round 1's as {layout}; hint: more steps per run"
                )
            out = os.path.join(tmp, f"round{rnd + 1}", s)
            step = train(out, args.pp, s, args.steps, args.warmup, ["--pipeline-layout", layout])
            rows[s]["measured"].append(step)
            rows[s]["alone"].append(alone[s][0])
            rows[s]["shared"].append(shared[s][0])
    noise = spread(calib_steps)
    print(
        "calibration (zb-h1, p = 2) each round: "
        + " ".join(f"{1e3 * x:.1f}" for x in calib_steps)
        + " ms"
        + (f", spread {100 * noise:.1f}%" if noise is not None else "")
    )
    print(
        f"\n| schedule | layout | measured ms | a core per rank: predicted, error | "
        f"{cores} cores shared: predicted, error | verdict ({100 * args.tolerance:.0f}%) |"
    )
    print("|---|---|---|---|---|---|")
    verdict = Verdict.PASS
    figures = []
    for s in schedules:
        r = rows[s]

        def err(key: str, r: dict[str, list[float]] = r) -> float:
            return statistics.median(p / m - 1 for p, m in zip(r[key], r["measured"], strict=True))

        v = judge(err("shared"), args.tolerance, noise)
        verdict = combine(verdict, v)
        figures.append(
            {
                "schedule": s,
                "layout": layouts[s],
                "measured_s": r["measured"],
                "alone_s": r["alone"],
                "shared_s": r["shared"],
                "error_alone": err("alone"),
                "error_shared": err("shared"),
                "verdict": v.value,
            }
        )
        print(
            f"| {s} | {layouts[s].replace('|', chr(92) + '|')} | "
            f"{1e3 * statistics.median(r['measured']):.1f} | "
            f"{1e3 * statistics.median(r['alone']):.1f}, {100 * err('alone'):+.1f}% | "
            f"{1e3 * statistics.median(r['shared']):.1f}, {100 * err('shared'):+.1f}% | "
            f"{v.value} |"
        )
    why = could_not_judge_reason(noise, args.tolerance, "a quieter machine, or more --rounds")
    print(f"\nverdict: {verdict.value}" + (f" ({why})" if why else ""))
    if args.json:
        doc = {
            "machine": machine_line(),
            "pp": args.pp,
            "cores": cores,
            "core_slowdown": args.core_slowdown,
            "tolerance": args.tolerance,
            "calibration_step_s": calib_steps,
            "schedules": figures,
            "verdict": verdict.value,
        }
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
    return exit_code(verdict)


if __name__ == "__main__":
    sys.exit(main())
