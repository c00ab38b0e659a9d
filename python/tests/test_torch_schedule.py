"""Without a process group: PyTorch's own schedule files read back through
`tightpipe schedule --check`, the compute orders compared with ours where the names agree
(docs/torch.md explains each difference), and the bad inputs the package refuses before PyTorch
sees them."""

from __future__ import annotations

import csv
import json
from unittest import mock

import pytest
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining import schedules as S

from tightpipe import (
    ArgumentTypeError,
    ScheduleFileError,
    ScheduleMismatchError,
    UnsupportedActionError,
)
from tightpipe.schedule import check_text, generate, parse
from tightpipe.torch import (
    build_runtime,
    check_actions,
    check_reduce_grads,
    check_stages,
    runtime_action_types,
)


def _mock_stage(p: int, num_stages: int, rank: int = 0, index: int = 0):
    # As torch/distributed/pipelining/_schedule_visualizer.py get_schedule_ops builds its stages.
    st = mock.create_autospec(PipelineStage, instance=True)
    st.group_rank = rank
    st.group_size = p
    st.submod = None
    st.num_stages = num_stages
    st.stage_index = index
    return st


def _pytorch_dump(cls, p: int, v: int, m: int, path) -> str:
    """PyTorch's own CSV of its built-in class: _dump_csv (compute_comms) for the runtime-based
    ones; the single-stage ones have none, so their pipeline_order through csv.writer as
    _dump_csv writes it."""
    st = _mock_stage(p, p * v)
    inst = cls(st if v == 1 else [st] * v, m)
    if isinstance(inst, S._PipelineScheduleRuntime):
        inst._dump_csv(str(path))
    else:
        with open(path, "w", newline="") as f:
            writer = csv.writer(f)
            for r in range(p):
                writer.writerow(inst.pipeline_order[r])
    return path.read_text()


RUNTIME_CLASSES = [
    (S.ScheduleLoopedBFS, 2),
    (S.ScheduleInterleaved1F1B, 2),
    (S.ScheduleInterleavedZeroBubble, 2),
    (S.ScheduleZBVZeroBubble, 2),
    (S.ScheduleDualPipeV, 2),
    (S.ScheduleGPipe, 1),
]


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16)])
@pytest.mark.parametrize("cls,v", RUNTIME_CLASSES, ids=lambda x: getattr(x, "__name__", str(x)))
def test_pytorchs_own_dump_reads_back(tmp_path, cls, v, p, m):
    text = _pytorch_dump(cls, p, v, m, tmp_path / "dump.csv")
    out = check_text(text, "dump.csv")
    assert "valid" in out
    if v > 1:  # PyTorch 2.15's compute_comms form: its waits are counted, not refused
        assert "WAIT_SEND, each where PyTorch's runtime needs it" in out
        assert f"{p * v} REDUCE_GRAD, {p * v} WAIT_REDUCE_GRAD" in out


@pytest.mark.parametrize("p", [2, 4])
def test_schedule1f1bs_ir_is_refused_for_its_last_rank(tmp_path, p):
    # PyTorch 2.15's Schedule1F1B IR (not its executed loop) gives the last rank F1..Fm and no F0
    # (docs/torch.md): tightpipe says so instead of reading it.
    text = _pytorch_dump(S.Schedule1F1B, p, 1, 2 * p, tmp_path / "dump.csv")
    with pytest.raises(ScheduleFileError, match=rf"{p - 1}B0 comes before {p - 1}F0"):
        check_text(text, "dump.csv")


def _compute_rows(text: str) -> list[list[str]]:
    sched = parse(text)
    return [sched.compute_order(r) for r in range(sched.num_ranks)]


@pytest.mark.parametrize("p,m", [(2, 4), (2, 8), (4, 8), (4, 16)])
@pytest.mark.parametrize(
    "name,cls,v",
    [
        ("interleaved", S.ScheduleInterleaved1F1B, 2),
        ("zb-v", S.ScheduleZBVZeroBubble, 2),
        ("looped-bfs", S.ScheduleLoopedBFS, 2),
        ("gpipe", S.ScheduleGPipe, 1),
        ("dualpipev", S.ScheduleDualPipeV, 2),
    ],
)
def test_compute_order_equals_pytorchs(tmp_path, name, cls, v, p, m):
    theirs = _compute_rows(_pytorch_dump(cls, p, v, m, tmp_path / "dump.csv"))
    ours = generate(name, p, m, vpp=v if name in ("interleaved", "looped-bfs") else None)
    assert [ours.compute_order(r) for r in range(p)] == theirs


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16)])
def test_1f1b_compute_order_equals_pytorchs_but_its_last_ranks_ir(tmp_path, p, m):
    theirs = _compute_rows(_pytorch_dump(S.Schedule1F1B, p, 1, m, tmp_path / "dump.csv"))
    ours = generate("1f1b", p, m)
    for r in range(p - 1):
        assert ours.compute_order(r) == theirs[r]
    # The last rank: PyTorch's IR numbers the forwards 1..m (its executed loop runs 0..m-1).
    last = ours.compute_order(p - 1)
    assert theirs[p - 1] != last
    assert [c.replace("F", "F#") for c in theirs[p - 1] if "F" in c] == [
        f"{p - 1}F#{i + 1}" for i in range(m)
    ]
    assert [c for c in theirs[p - 1] if "B" in c] == [c for c in last if "B" in c]


# ----- bad input: refused by the package, naming both numbers, before PyTorch sees it ---------


@pytest.fixture
def sched_p2_m4():
    return generate("1f1b", 2, 4)


def test_rank_count_mismatch_names_both(sched_p2_m4):
    with pytest.raises(
        ScheduleMismatchError,
        match=r"has 2 ranks \(rows\), but the pipeline group "
        r"has 4 ranks",
    ):
        check_stages(sched_p2_m4, [_mock_stage(4, 2)], 4)


def test_stage_count_mismatch_names_both(sched_p2_m4):
    with pytest.raises(
        ScheduleMismatchError,
        match=r"has 2 stages, but the PyTorch stages say "
        r"num_stages=4",
    ):
        check_stages(sched_p2_m4, [_mock_stage(2, 4)], 4)


def test_microbatch_count_mismatch_names_both(sched_p2_m4):
    with pytest.raises(
        ScheduleMismatchError,
        match=r"has 4 microbatches, but the runtime is asked "
        r"for n_microbatches=8",
    ):
        check_stages(sched_p2_m4, [_mock_stage(2, 2)], 8)


def test_placement_mismatch_names_both():
    zbv = generate("zb-v", 2, 4)  # V: rank 0 holds stages 0 and 3
    looped = [_mock_stage(2, 4, 0, 0), _mock_stage(2, 4, 0, 2)]
    with pytest.raises(
        ScheduleMismatchError,
        match=r"puts stages \[0, 3\] on rank 0, but this "
        r"rank holds PyTorch stages \[0, 2\]",
    ):
        check_stages(zbv, looped, 4)
    check_stages(zbv, [_mock_stage(2, 4, 0, 0), _mock_stage(2, 4, 0, 3)], 4)


def test_an_action_the_runtime_lacks_is_refused_naming_it(sched_p2_m4):
    check_actions(sched_p2_m4)  # the installed PyTorch has them all
    before_215 = runtime_action_types() - {"WAIT_SEND_F", "WAIT_SEND_B", "WAIT_REDUCE_GRAD"}
    with pytest.raises(
        UnsupportedActionError,
        match=r"action '0WAIT_SEND_F0' needs WAIT_SEND_F, "
        r"which PyTorch .* runtime lacks",
    ):
        check_actions(sched_p2_m4, before_215)
    dual = generate("dualpipev", 2, 4)
    with pytest.raises(UnsupportedActionError, match=r"needs OVERLAP_F_B"):
        check_actions(dual, runtime_action_types() - {"OVERLAP_F_B"})


def test_dualpipe_two_directions_is_refused_with_the_reason():
    from tightpipe import CliError

    with pytest.raises(CliError, match="runs 2 directions"):
        generate("dualpipe", 2, 4)


@pytest.fixture
def load_csv_spy(monkeypatch):
    calls = []
    real = S._PipelineScheduleRuntime._load_csv

    def spy(self, *a, **k):
        calls.append(a)
        return real(self, *a, **k)

    monkeypatch.setattr(S._PipelineScheduleRuntime, "_load_csv", spy)
    return calls


def _damaged(text: str) -> dict[str, str]:
    rows = text.splitlines()
    return {
        "truncated mid-row": text[: len(text) * 2 // 3],
        "last row missing": rows[0] + "\n",
        "trailing junk in a cell": text.replace("0F1,", "0F1x,", 1),
        "empty cell": text.replace("0F1,", "0F1,,", 1),
        "a wait dropped": text.replace("0WAIT_SEND_F1,", "", 1),
        "REDUCE_GRAD twice": text.replace(
            "0WAIT_REDUCE_GRAD", "0WAIT_REDUCE_GRAD,0REDUCE_GRAD,0WAIT_REDUCE_GRAD", 1
        ),
        "not a CSV": "\x00\x01binary,\xff\n",
    }


@pytest.mark.parametrize("case", list(_damaged("0F1,\n")))
def test_a_damaged_csv_never_reaches_pytorch(sched_p2_m4, load_csv_spy, case):
    text = _damaged(sched_p2_m4.text())[case]
    stages = [_mock_stage(2, 2, 0, 0)]
    with pytest.raises(ScheduleFileError):
        build_runtime(stages, text, 4)
    assert load_csv_spy == []
    # The file undamaged does reach it (and PyTorch loads it).
    build_runtime(stages, sched_p2_m4.text(), 4)
    assert len(load_csv_spy) == 1


# ----- issue 45: a stage that loses its gradient scaling never reaches PyTorch -------------------


def _one_line(e: Exception) -> str:
    text = str(e)
    assert "\n" not in text, text
    assert "hint:" in text, text
    return text


def test_a_file_without_reduce_grad_never_reaches_pytorch(load_csv_spy):
    # A lowered tightpipe CSV holds none of PyTorch's actions: `schedule --check` accepts it (it
    # is a valid schedule), but PyTorch's runtime would never scale any stage's gradients.
    from tightpipe import cli

    text = cli.run(
        [
            "schedule",
            "--schedule",
            "1f1b",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--format",
            "csv",
            "--lowered",
        ]
    )
    with pytest.raises(ScheduleFileError) as e:
        build_runtime([_mock_stage(2, 2, 0, 0)], text, 4)
    assert "stage 0 has no REDUCE_GRAD (2 of 2 stages have none)" in _one_line(e.value)
    assert load_csv_spy == []


@pytest.mark.parametrize("case", ["dropped", "twice"])
def test_an_unchecked_schedule_is_checked_before_pytorch(sched_p2_m4, load_csv_spy, case):
    # A TorchSchedule made by parse() (or by hand) has not been through the binary: build_runtime
    # checks it, and counts the REDUCE_GRADs itself.
    text = sched_p2_m4.text()
    if case == "dropped":
        text = text.replace("1REDUCE_GRAD,1WAIT_REDUCE_GRAD", "1WAIT_REDUCE_GRAD", 1)
    else:
        text = text.replace("0REDUCE_GRAD,", "0REDUCE_GRAD,0REDUCE_GRAD,", 1)
    assert text != sched_p2_m4.text()
    with pytest.raises(ScheduleFileError):
        build_runtime([_mock_stage(2, 2, 0, 0)], parse(text), 4)
    assert load_csv_spy == []
    # And without the binary's check (a schedule claiming to be checked), the count still holds.
    forged = parse(text)
    forged.check_output = "checked"
    with pytest.raises(ScheduleFileError) as e:
        check_reduce_grads(forged)
    assert ("has no REDUCE_GRAD" if case == "dropped" else "a second '0REDUCE_GRAD'") in _one_line(
        e.value
    )


def test_a_compute_action_without_a_microbatch_is_refused():
    with pytest.raises(ScheduleFileError) as e:
        parse("0F0,0F,0B0\n", "x.csv")
    assert "x.csv:1:2: '0F' has no microbatch" in _one_line(e.value)


def test_n_microbatches_of_another_type_is_refused(sched_p2_m4):
    with pytest.raises(ArgumentTypeError) as e:
        build_runtime([_mock_stage(2, 2, 0, 0)], sched_p2_m4, 4.0)
    assert "n_microbatches 4.0: must be an int in [1, 65536], not float" in _one_line(e.value)


def test_model_and_spawn_refuse_bad_counts():
    # More of these in test_api_args.py (every public function's arguments).
    from tightpipe.torch.gpt import GptConfig, make_stages
    from tightpipe.torch.launch import spawn

    for n in (0, -1, 2.0, True):
        with pytest.raises((ValueError, TypeError)) as e:
            make_stages(GptConfig(), n)
        assert f"num_stages {n!r}: must be" in _one_line(e.value)
    with pytest.raises(ValueError) as e:
        make_stages(GptConfig(d_model=30, heads=4), 2)
    assert "d_model 30: is not divisible by heads 4" in _one_line(e.value)
    for w in (0, -2, 1.5):
        with pytest.raises((ValueError, TypeError)) as e:
            spawn(w, print)
        assert f"world {w!r}: must be" in _one_line(e.value)
    with pytest.raises(ValueError) as e:
        spawn(2, print, threads=0)
    assert "threads 0: must be in [1, 1024]" in _one_line(e.value)


def _fails_on_rank_1(rank: int, world: int) -> int:
    if rank == 1:
        raise RuntimeError("rank 1 ran out of batches")
    return rank


def _killed_on_rank_0(rank: int, world: int) -> None:
    import os
    import signal

    import torch.distributed as dist

    if rank == 0:
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer ends a rank
    dist.barrier()  # rank 1 waits for the dead rank: gloo says "connection closed"


def test_spawn_names_the_rank_that_failed_and_the_one_that_was_killed():
    from tightpipe.torch.launch import RankError, spawn

    with pytest.raises(RankError) as e:
        spawn(2, _fails_on_rank_1, timeout=120, pg_timeout=60)
    assert "rank 1:" in str(e.value) and "rank 1 ran out of batches" in str(e.value)
    # A killed rank never reports: the error names it and its signal first (not only the
    # survivor's "connection closed"), long before the 600 s timeout.
    for world in (1, 2):
        with pytest.raises(RankError) as e:
            spawn(world, _killed_on_rank_0, timeout=600, pg_timeout=60)
        first = str(e.value).splitlines()[0]
        assert "rank 0: its process died with signal 9 (SIGKILL" in first, str(e.value)
        assert "out-of-memory killer" in first


def test_trace_reader_names_a_damaged_file(tmp_path):
    import gzip

    from tightpipe.torch import idle_from_trace

    good = {"distributedInfo": {"rank": 0}, "traceEvents": []}
    cases = {
        "missing.json": None,
        "garbage.json": b"\x00\xffnot json",
        "truncated.json": json.dumps(good).encode()[:20],
        "list.json": b"[1, 2]",
        "norank.json": json.dumps({"traceEvents": []}).encode(),
        "truncated.json.gz": gzip.compress(json.dumps(good).encode())[:15],
        "empty.json.gz": b"",
    }
    for name, data in cases.items():
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        with pytest.raises(ValueError) as e:
            idle_from_trace([str(path)])
        assert f"trace '{path}'" in _one_line(e.value), name
    (tmp_path / "dir.json").mkdir()
    with pytest.raises(ValueError):
        idle_from_trace([str(tmp_path / "dir.json")])


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ScheduleFileError, match="cannot read schedule file"):
        build_runtime([_mock_stage(2, 2)], str(tmp_path / "none.csv"), 4)


# ----- PyTorch's comms simulation (_simulate_comms_compute) on our files ----------------------

_NOT_SIMULATED = ("UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_REDUCE_GRAD")


def _simulate(sched, drop=()):
    # 2.15's simulation raises "Unsupported action type" on UNSHARD, RESHARD, REDUCE_GRAD,
    # WAIT_REDUCE_GRAD and OVERLAP_F_B (on PyTorch's own lowered files too): those are left out;
    # the sends, receives, waits and computes are what it checks.
    order = {}
    for r, row in enumerate(sched.rows):
        cells = [c for c in row if not any(c.endswith(t) for t in _NOT_SIMULATED)]
        order[r] = [S._Action.from_str(c) for c in cells if c not in drop]
    rank_of = sched.stage_to_rank
    return S._simulate_comms_compute(order, lambda s: rank_of[s], sched.num_stages)


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 16)])
@pytest.mark.parametrize(
    "name,kw",
    [
        ("1f1b", {}),
        ("gpipe", {}),
        ("zb-h1", {}),
        ("zb-h2", {}),
        ("zb-1p", {"cost": "f=1,i=1,w=1"}),
        ("zb-2p", {"cost": "f=1,i=1,w=1"}),
        ("interleaved", {"vpp": 2}),
        ("looped-bfs", {"vpp": 2}),
        ("zb-v", {}),
        ("zb-v-auto", {"cost": "f=1,i=1,w=1"}),
        ("v-half", {"cost": "f=1,i=1,w=1"}),
        ("v-min", {"cost": "f=1,i=1,w=1"}),
    ],
)
def test_pytorchs_comms_simulation_accepts_every_file(name, kw, p, m):
    sched = generate(name, p, m, **kw)
    out = _simulate(sched)
    assert sorted(out) == list(range(p))
    assert sum(a is not None for row in out.values() for a in row) == sum(
        1 for row in sched.rows for c in row if not any(c.endswith(t) for t in _NOT_SIMULATED)
    )


def test_pytorchs_comms_simulation_catches_a_missing_receive():
    sched = generate("1f1b", 2, 4)
    with pytest.raises(ValueError, match="not progressing"):
        _simulate(sched, drop=("1RECV_F2",))
