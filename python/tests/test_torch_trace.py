"""`tightpipe report` on CPU-only Kineto traces of a real run in PyTorch's runtime: per-rank idle
and cause, and the simulator's prediction from the costs measured in the same trace. The report's
per-rank bubble must be within 5 points of the idle measured here, in Python, from the same
traces' PP: ranges (tightpipe.torch.idle_from_trace, the definitions of docs/torch.md)."""

from __future__ import annotations

import json
import os

import pytest

from tightpipe import cli
from tightpipe.schedule import generate
from tightpipe.torch import idle_from_trace
from tightpipe.torch.gpt import GptConfig
from tightpipe.torch.launch import spawn
from trace_worker import profile_run


@pytest.mark.parametrize("name,m", [("1f1b", 8), ("zb-v-auto", 8)])
def test_report_bubble_matches_the_trace(tmp_path, name, m):
    p = 2
    sched = generate(name, p, m, cost="f=1,i=1,w=1" if name.endswith("auto") else None)
    (tmp_path / "schedule.csv").write_text(sched.text())
    pattern = str(tmp_path / "rank{rank}.json")
    spawn(p, profile_run, GptConfig(), sched, None, m, sched.stage_to_rank, pattern)
    traces = [pattern.format(rank=r) for r in range(p)]
    measured = idle_from_trace(traces)
    out = cli.run(
        [
            "report",
            *traces,
            "--pp",
            str(p),
            "--schedule-file",
            str(tmp_path / "schedule.csv"),
            "--out",
            str(tmp_path / "report"),
        ]
    )
    assert "kineto-cpu format" in out
    rep = json.loads((tmp_path / "report" / "report.json").read_text())
    assert rep["pipelined"] is True
    assert [r["rank"] for r in rep["ranks"]] == list(range(p))
    for r in rep["ranks"]:
        want = measured[r["rank"]]
        assert abs(r["bubble_ratio"] - want["bubble"]) <= 0.05, (r["rank"], r, want)
        assert r["compute_s"] == pytest.approx(want["compute_s"], rel=0.02)
        causes = r["causes"]
        # every idle microsecond has a cause, and the pipeline ones are named
        assert sum(causes.values()) == pytest.approx(r["window_s"] - r["compute_s"], abs=1e-6)
        assert causes["dependency_wait_s"] + causes["fill_s"] + causes["drain_s"] > 0
    pipe = rep["pipeline"]
    assert pipe["error"] == ""
    assert pipe["costs_method"] == "annotations"
    assert pipe["predicted_step_s"] > 0
    assert len(pipe["f_s"]) == sched.num_stages
    assert os.path.exists(tmp_path / "report" / "report.html")
