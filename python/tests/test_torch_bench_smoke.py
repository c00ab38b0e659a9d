"""bench/torch/torch_runtime_bench.py --smoke: the bench runs end to end (tiny model, PyTorch's
ScheduleZBVZeroBubble beside tightpipe's zb-v-auto built from costs it measured) and prints both
rows with a step time and a bubble per rank."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_bench_smoke():
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "bench", "torch", "torch_runtime_bench.py"), "--smoke"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"(PyTorch \S+|tightpipe \S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)%$",
                     line)
        if m:
            rows[m.group(1)] = [float(x) for x in m.group(3, 4, 5)]
    assert set(rows) == {"PyTorch ScheduleZBVZeroBubble", "tightpipe zb-v-auto"}, proc.stdout
    for step_ms, b0, b1 in rows.values():
        assert step_ms > 0 and 0 <= b0 < 100 and 0 <= b1 < 100
