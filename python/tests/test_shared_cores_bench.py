"""bench/exec/shared_cores_bench.py at smoke size: one round of 4 thread ranks on this machine's
cores. One round says nothing of the noise, so the verdict is COULD NOT JUDGE (exit 3); the table
holds each schedule's measured step beside both predictions, and where the ranks outnumber the
usable cores the shared-cores prediction is the longer (docs/cost_model.md "Shared cores")."""

from __future__ import annotations

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_shared_cores_bench_smoke():
    bench = os.path.join(REPO, "bench", "exec", "shared_cores_bench.py")
    args = ["--rounds", "1", "--steps", "1", "--warmup", "1", "--schedules", "1f1b,gpipe"]
    proc = subprocess.run(
        [sys.executable, bench, *args], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr[-3000:]
    assert proc.stdout.startswith("CPU "), proc.stdout
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(
            r"\| (\S+) \| \S+ \| ([\d.]+) \| ([\d.]+), [-+][\d.]+% \| ([\d.]+), [-+][\d.]+% \| "
            r"COULD NOT JUDGE \|$",
            line,
        )
        if m:
            rows[m.group(1)] = [float(x) for x in m.group(2, 3, 4)]
    assert set(rows) == {"1f1b", "gpipe"}, proc.stdout
    shared_cores = len(os.sched_getaffinity(0)) < 4
    for measured, alone, shared in rows.values():
        assert measured > 0 and alone > 0
        assert shared > alone if shared_cores else shared == alone, proc.stdout
    assert "verdict: COULD NOT JUDGE (one run: the noise is unknown" in proc.stdout
