"""bench/torch/torch_runtime_bench.py --smoke: the bench runs end to end (tiny model, PyTorch's
ScheduleZBVZeroBubble beside tightpipe's zb-v-auto built from costs it measured) and prints both
rows with a step time and a bubble per rank."""

import json
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_smoke():
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "torch", "torch_runtime_bench.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(
            r"(PyTorch \S+|tightpipe \S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)%$", line
        )
        if m:
            rows[m.group(1)] = [float(x) for x in m.group(3, 4, 5)]
    assert set(rows) == {"PyTorch ScheduleZBVZeroBubble", "tightpipe zb-v-auto"}, proc.stdout
    for step_ms, b0, b1 in rows.values():
        assert step_ms > 0 and 0 <= b0 < 100 and 0 <= b1 < 100


def test_tune_bench_smoke(tmp_path):
    """bench/torch/tune_bench.py --smoke: measure_layers, tune, PyTorch's Schedule1F1B and
    ScheduleInterleaved1F1B on the even split and the tuned row, each with a measured step and
    the simulator's prediction beside it, in both modes; with real compute also the prediction
    from the modules timed again during the run (emulated: none, printed "-"). --keep keeps the
    run's files and its raw figures (raw.json), and refuses a folder that holds something;
    --gain-pairs and --gain-procs time adjacent pairs of the best even-split row and the tuned
    one in the rows' processes, and of the tuned row and each even-split row in processes of
    their own."""
    for mode in ("real", "emulated"):
        keep = tmp_path / mode
        proc = subprocess.run(
            [
                sys.executable,
                os.path.join(REPO, "bench", "torch", "tune_bench.py"),
                "--smoke",
                "--mode",
                mode,
                "--keep",
                str(keep),
                "--gain-pairs",
                "2",
                "--gain-procs",
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(keep / "raw.json") as f:
            raw = json.load(f)
        (run,) = raw["runs"]
        assert {r["label"] for r in run["rows"]} >= {"PyTorch Schedule1F1B"}, raw
        for r in run["rows"]:
            assert len(r["steps_s"]) == 1 and r["steps_s"][0] > 0 and r["predicted_s"] > 0, r
            assert len(r["in_run_predicted_s"]) == (1 if mode == "real" else 0), r
        assert (keep / "tuned" / "tune.json").is_file() and (keep / "layers.json").is_file()
        # --gain-pairs 2: two adjacent pairs of the best even-split row and the tuned one.
        assert len(run["gain_adjacent_pairs"]) == 2 and min(run["gain_adjacent_pairs"]) > 0, run
        assert re.search(r"^tuned over PyTorch \S+ even, 2 adjacent pairs", proc.stdout, re.M), (
            proc.stdout
        )
        # --gain-procs 2: the same two rows each in processes of its own, stepping in turn;
        # every pair line names each rank's page faults per step of either row.
        assert len(run["gain_own_processes"]) == 2 and min(run["gain_own_processes"]) > 0, run
        own = re.search(
            r"^tuned over PyTorch \S+ even, 2 adjacent pairs, each row in processes of its own "
            r".*faults/step per rank \d+/\d+ and \d+/\d+$",
            proc.stdout,
            re.M,
        )
        assert own, proc.stdout
        # Beside the tuned row, the two even-split built-ins (--gain-rivals 2), the gain taken
        # over the faster there.
        by = run["gain_own_processes_by_rival"]
        assert len(by) == 2 and run["gain_own_processes"] == min(
            by.values(), key=statistics.median
        ), run
        assert "the fastest of them in processes of their own: PyTorch " in proc.stdout
        again = subprocess.run(
            [sys.executable, os.path.join(REPO, "bench", "torch", "tune_bench.py"), "--smoke"]
            + ["--keep", str(keep)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert again.returncode == 2 and "is not empty" in again.stderr, again.stderr[-2000:]
        rows = {}
        for line in proc.stdout.splitlines():
            m = re.match(
                r"(PyTorch \S+|tuned: \S+)\s+(even|tuned)\s+[\d|]+\s+([\d.]+)\s+\S+\s+"
                r"([\d.]+)\s+([-+][\d.]+)%\s+([\d.]+|-)\s+([-+][\d.]+%|-)\s+([\d.]+)x\s+"
                r"[\d/]+$",
                line,
            )
            if m:
                rows[m.group(1)] = (float(m.group(3)), float(m.group(4)))
                assert (m.group(6) == "-") == (mode == "emulated"), line
                if mode == "real":
                    assert float(m.group(6)) > 0, line
        assert {"PyTorch Schedule1F1B", "PyTorch ScheduleInterleaved1F1B"} <= set(rows), proc.stdout
        assert any(k.startswith("tuned: ") for k in rows), proc.stdout
        for measured, predicted in rows.values():
            assert measured > 0 and predicted > 0
        if mode == "real":
            # Per row and rank, the time inside the runtime's compute calls against the
            # simulated compute, in all and by kind: 1F1B runs F and whole backwards (b).
            inside = re.search(
                r"  PyTorch Schedule1F1B\s+even\s+rank 0\s+[-+][\d.]+% \(f [-+][\d.]+, "
                r"b [-+][\d.]+\)\s+rank 1\s+[-+][\d.]+% \(f [-+][\d.]+, b [-+][\d.]+\)$",
                proc.stdout,
                re.M,
            )
            assert inside, proc.stdout


def test_tune_bench_refuses_an_unknown_row_before_any_work():
    """--rows with a class the bench does not run: one line naming it and the classes it runs,
    exit 2 (argparse's), nothing measured."""
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "bench", "torch", "tune_bench.py"),
            "--rows",
            "Schedule1F1B,ScheduleNope",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()[-1]
    assert "--rows Schedule1F1B,ScheduleNope" in err and "ScheduleNope not among" in err, err
    assert "ScheduleDualPipeV" in err and "Schedule1F1B" in err.split("not among")[1], err
    assert proc.stdout == "", proc.stdout


def test_tune_bench_refuses_a_count_out_of_range_before_any_work():
    """--gain-procs -1 (or any count below its least): one line naming the flag, the value and
    the least it takes, exit 2 (argparse's), nothing measured."""
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "bench", "torch", "tune_bench.py"),
            "--gain-procs",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()[-1]
    assert err.endswith("error: --gain-procs -1: must be at least 0"), err
    assert proc.stdout == "", proc.stdout


def test_tune_bench_contention_is_not_one_disturbed_pair(monkeypatch):
    """The contention is the median of alternating alone / together pairs: one pair slowed by
    something else on the machine (here 1.4x) does not pass for the cores slowing each other,
    and a slowdown in every pair does (1.5x)."""
    sys.path.insert(0, os.path.join(REPO, "bench", "torch"))
    try:
        import tune_bench
    finally:
        sys.path.pop(0)

    def fake_popen(seconds_per_matmul):
        it = iter(seconds_per_matmul)

        class Proc:
            def __init__(self, cmd, **_):
                assert cmd[-1] == str(tune_bench.CONTENTION_SECONDS), cmd
                self.value = next(it)

            def communicate(self):
                return f"{self.value}\n", ""

        return Proc

    # Per pair: one process alone, then two at once.
    quiet = [1e-3, 1e-3, 1e-3]
    disturbed = quiet + [1e-3, 1.4e-3, 1.4e-3] + quiet * (tune_bench.CONTENTION_PAIRS - 2)
    monkeypatch.setattr(tune_bench.subprocess, "Popen", fake_popen(disturbed))
    alone, together, pairs = tune_bench.core_contention(2)
    assert together / alone == 1.0, (alone, together)
    # Each pair's own figure comes back too: the disturbed one shows as what it was.
    want = [1.0, 1.4] + [1.0] * (tune_bench.CONTENTION_PAIRS - 2)
    assert [round(x, 9) for x in pairs] == want, pairs
    shared = [1e-3, 1.5e-3, 1.5e-3] * tune_bench.CONTENTION_PAIRS
    monkeypatch.setattr(tune_bench.subprocess, "Popen", fake_popen(shared))
    alone, together, pairs = tune_bench.core_contention(2)
    assert abs(together / alone - 1.5) < 1e-12, (alone, together)


def _tune_bench():
    sys.path.insert(0, os.path.join(REPO, "bench", "torch"))
    try:
        import tune_bench
    finally:
        sys.path.pop(0)
    return tune_bench


def test_tune_bench_median_interval_is_the_order_statistics_that_hold_the_median():
    """90% for the median of n values, whatever their distribution: min..max from 5 values
    (1 - 2/32 = 93.75%), the 2nd..8th of 9 (96.1%; the 3rd..7th hold it only 82%), none from 4
    (min..max 87.5%)."""
    tb = _tune_bench()
    assert tb.median_interval([1.3, 1.1, 1.2, 1.5, 1.4]) == (1.1, 1.5)
    nine = [1.0 + x / 100 for x in (9, 1, 8, 2, 7, 3, 6, 4, 5)]
    assert tb.median_interval(nine) == (1.02, 1.08)
    assert tb.median_interval([1.0, 1.1, 1.2, 1.3]) is None
    assert tb.median_interval([1.0, 1.1, 1.2, 1.3], coverage=0.85) == (1.0, 1.3)


def test_tune_bench_judges_the_rows_with_the_contention_simulated_and_the_gain_on_its_rounds(
    capsys,
):
    """With the ranks' contention in the simulation (tune --core-slowdown) the rows are judged on
    those errors, the contention itself no reason to refuse, only its own spread around the run;
    the gain is judged on its rounds: PASS or FAIL only where the rounds' 90% interval for the
    median stays on one side of the bar."""
    from tightpipe.verdict import Verdict

    tb = _tune_bench()
    simulated = [-0.01, 0.02, -0.03]  # with the contention simulated, all within 5%
    above = [1.27, 1.29, 1.30, 1.28, 1.31]
    v = tb.print_verdicts(
        "real", 1.29, 1.31, 0.01, "", 0.06, shared=(simulated, 1.06, 0.02), gain_rounds=above
    )
    out = capsys.readouterr().out
    assert v is Verdict.PASS, out
    rows_line, gain_line = out.strip().splitlines()
    assert "--core-slowdown 1.060" in rows_line and "worst -3.0%" in rows_line, out
    assert "1.270..1.310x" in gain_line and "contention 6.0%" in gain_line, out
    # The contention figure moved by more than the tolerance around the run: not judged.
    v = tb.print_verdicts(
        "real", 1.29, 1.31, 0.01, "", 0.06, shared=(simulated, 1.06, 0.08), gain_rounds=above
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith(
        "(identical runs spread 8.0%, above the tolerance 5.0%; hint: a quieter machine "
        "(--noise-only says), more repeats)"
    ), out
    assert v is Verdict.COULD_NOT_JUDGE, out
    # A simulated miss beyond the tolerance fails.
    v = tb.print_verdicts(
        "real", 1.29, 1.31, 0.01, "", 0.06, shared=([0.06], 1.06, 0.01), gain_rounds=above
    )
    out = capsys.readouterr().out
    assert v is Verdict.FAIL, out
    # The gain: every round under the bar fails; an interval across it cannot be judged; 4
    # rounds give no interval.
    # Adjacent pairs (--gain-pairs) are judged on their own interval: the fixed compute's drift
    # between minutes (20% here) moves both steps of a pair alike.
    v = tb.print_verdicts(
        "real",
        1.29,
        1.3,
        0.20,
        "",
        0.0,
        shared=([0.0], 1.0, 0.0),
        gain_rounds=[1.27, 1.28, 1.29, 1.30, 1.31],
        gain_adjacent=True,
    )
    gain_line = capsys.readouterr().out.strip().splitlines()[1]
    assert "adjacent pairs median 1.290x" in gain_line and "measured): PASS" in gain_line, gain_line
    for rounds, want in (
        ([1.19, 1.20, 1.21, 1.22, 1.23], Verdict.FAIL),
        ([1.20, 1.22, 1.23, 1.24, 1.26], Verdict.COULD_NOT_JUDGE),
        ([1.27, 1.28, 1.30, 1.31], Verdict.COULD_NOT_JUDGE),
    ):
        gain = sorted(rounds)[len(rounds) // 2]
        tb.print_verdicts(
            "real", gain, 1.3, 0.01, "", 0.0, shared=([0.0], 1.0, 0.0), gain_rounds=rounds
        )
        gain_line = capsys.readouterr().out.strip().splitlines()[1]
        assert f"measured): {want.value}" in gain_line, (rounds, gain_line)


def test_tune_bench_core_slowdown_is_the_contention_mean_and_never_below_one():
    """The slowdown simulated is the mean of the contention figures around the run; a mean below
    0 (the probe's noise: 0.99x before and after a run) is taken as none, never a factor under 1
    that tune refuses (it ended a 25-minute run before its verdicts once)."""
    tb = _tune_bench()
    assert abs(tb.core_slowdown([0.02, 0.06]) - 1.04) < 1e-12
    assert tb.core_slowdown([-0.01, -0.013]) == 1.0
