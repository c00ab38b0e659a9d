"""Timing and the report on the engines' runs (issue 44 items 3 and 4), asserted without a fixed
time or a prediction's tolerance: each measured step lies inside bounds derived from that run's
own measured durations, and `tightpipe report`, reading the run directory, finds the harness's own
idle per rank and cause. (The prediction against these runs is the benchmark's job:
bench/peers/peers_bench.py, docs/peers.md.)"""

import json
import statistics
import subprocess

import pytest

from peers_util import need_tightpipe, timed_run
from tightpipe.peers.compare import CAUSES, harness_idle

RUNS = [("megatron", 4, 1, 8), ("megatron", 4, 2, 8), ("deepspeed", 4, 1, 8)]


def dependency_bound(run, step: int) -> float:
    """The shortest step the run's own order and measured compute durations allow: each rank runs
    its computes in the order it ran them, each taking what it took; a forward waits for the
    stage before's forward of its microbatch, a backward for the stage after's backward (the
    last stage's for its own forward). Messages and host time are free. No real run beats it."""
    S = run.pp * run.vpp
    progs = []
    for r in range(run.pp):
        comp = sorted(
            (e for e in run.step_events(step, r) if e.kind in ("F", "B")), key=lambda e: e.start
        )
        progs.append([(e.kind, e.stage, e.mb, e.end - e.start) for e in comp])
    done = {}
    pc = [0] * run.pp
    clock = [0.0] * run.pp
    progress = True
    while progress:
        progress = False
        for r in range(run.pp):
            while pc[r] < len(progs[r]):
                kind, s, mb, d = progs[r][pc[r]]
                dep = (
                    (("F", s - 1, mb) if s > 0 else None)
                    if kind == "F"
                    else (("B", s + 1, mb) if s < S - 1 else ("F", s, mb))
                )
                if dep is not None and dep not in done:
                    break
                start = max(clock[r], done[dep] if dep is not None else 0.0)
                clock[r] = done[(kind, s, mb)] = start + d
                pc[r] += 1
                progress = True
    assert all(pc[r] == len(progs[r]) for r in range(run.pp)), "the recorded order deadlocks"
    return max(clock)


def covered_time(run, step: int) -> float:
    """Length of the part of [0, T] in which some rank is working (inside no SEND or RECV: a
    compute, the engine's host code, a data load, the optimizer) or some message is moving (from
    the later of its two posts until both its send and its receive have returned: gloo's
    rendezvous and its completion). A run in which every rank waits and nothing moves would fall
    short of T."""
    T = run.step_time(step)
    ivs = []
    posts = {}
    recvs = []
    for r in range(run.pp):
        evs = sorted(run.step_events(step, r), key=lambda e: e.start)
        waits = [(e.start, e.end) for e in evs if e.kind in ("SEND", "RECV")]
        t = 0.0
        end = max(e.end for e in evs)
        for a, b in sorted(waits):
            if a > t:
                ivs.append((t, a))
            t = max(t, b)
        if t < end:
            ivs.append((t, end))
        for e in evs:
            if e.kind == "SEND":
                dst = e.stage + (-1 if "_B" in e.name else 1)
                posts[("_B" in e.name, e.mb, dst)] = (e.start, e.end)
            elif e.kind == "RECV":
                recvs.append(e)
    for e in recvs:  # a message moves from its later post until both ends have returned
        key = ("_B" in e.name, e.mb, e.stage)
        if key in posts:
            ivs.append((max(e.start, posts[key][0]), max(e.end, posts[key][1])))
    total, t = 0.0, 0.0
    for a, b in sorted(ivs):
        a, b = max(a, t), min(b, T)
        if b > a:
            total += b - a
            t = b
    return total


@pytest.mark.parametrize("engine,p,v,m", RUNS)
def test_measured_step_lies_inside_bounds_from_its_own_durations(engine, p, v, m):
    run = timed_run(engine, p, v, m)
    for step in run.measured_steps():
        T = run.step_time(step)
        lower = dependency_bound(run, step)
        assert lower <= T, (step, lower, T)
        covered = covered_time(run, step)
        assert covered * (1 + 1e-9) >= T, (step, T, covered)


@pytest.mark.parametrize("engine,p,v,m", RUNS)
def test_report_finds_the_harness_idle_per_rank_and_cause(engine, p, v, m, tmp_path):
    binary = need_tightpipe()
    run = timed_run(engine, p, v, m)
    run_dir = run.write_run_dir(str(tmp_path / "run"))
    out = tmp_path / "report"
    r = subprocess.run(
        [binary, "report", run_dir, "--out", str(out), "--quiet"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads((out / "report.json").read_text())
    steps = run.measured_steps()
    T = statistics.median(run.step_time(k) for k in steps)
    assert rep["step_time_s"] == pytest.approx(T, rel=1e-6)
    mine = [harness_idle(run, k) for k in steps]
    for rank in range(run.pp):
        got = rep["per_rank"][rank]["idle_s"]
        for cause in CAUSES:
            want = statistics.median(per[rank][cause] for per in mine)
            assert abs(got[cause] - want) / T * 100 <= 2.0, (rank, cause, got[cause], want)
        # busy: F and B as the harness timed them (the optimizer's share aside)
        busy = rep["per_rank"][rank]["busy_s"]
        want_busy = statistics.median(
            sum(e.end - e.start for e in run.step_events(k, rank) if e.kind in ("F", "B"))
            for k in steps
        )
        assert abs(busy["F"] + busy["B"] - want_busy) / T * 100 <= 2.0, (rank, busy, want_busy)
