"""The Python API checks its own arguments in Python terms before the binary or PyTorch runs
(issue 48, "Bad input"): the wrong type is an ArgumentTypeError (a TypeError), a value out of its
range an ArgumentError (a ValueError), both TightpipeErrors, in one line in the C++ side's style
"<argument> <value>: <what is wrong>; hint: <fix>". No process group; for a bad argument the
binary never runs."""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tightpipe import (
    ArgumentError,
    ArgumentTypeError,
    BinaryNotFoundError,
    ScheduleFileError,
    TightpipeError,
    _args,
    cli,
)
from tightpipe.schedule import TorchSchedule, check_text, generate, load, parse, parse_cell

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_binary_run(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Fails the test if anything starts a process (the binary) during it."""
    calls: list[Any] = []

    def refuse(*args: Any, **kwargs: Any) -> None:
        calls.append(args)
        raise AssertionError(f"a process ran: {args}")

    monkeypatch.setattr(subprocess, "run", refuse)
    return calls


@pytest.fixture(scope="module")
def sched() -> TorchSchedule:
    return generate("1f1b", 2, 4)


def _one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text, text
    return text


def _expect(fn: Callable[[], Any], exc: type[Exception], start: str, *more: str) -> str:
    with pytest.raises(exc) as info:
        fn()
    msg = _one_line(info.value)
    assert isinstance(info.value, TightpipeError)
    assert msg.startswith(start), msg
    assert "; hint: " in msg, msg
    for part in more:
        assert part in msg, msg
    return msg


# ----- the issue's own cases ----------------------------------------------------------------------


def test_the_issues_cases(no_binary_run: list[Any], tmp_path: Path) -> None:
    _expect(
        lambda: generate("1f1b", pp=0, microbatches=4), ArgumentError, "pp 0: must be in [1, 1024]"
    )
    _expect(
        lambda: generate("1f1b", pp=2, microbatches=2.5),
        ArgumentTypeError,
        "microbatches 2.5: must be an int in [1, 65536], not float",
    )
    _expect(
        lambda: generate("1f1b", pp="2; x", microbatches=4),
        ArgumentTypeError,
        "pp '2; x': must be an int in [1, 1024], not str",
    )
    binary = tmp_path / "sched.csv"
    binary.write_bytes(b"0F0,0F1\n\xff\xfe\x00\x01")
    _expect(
        lambda: load(str(binary)),
        ScheduleFileError,
        f"cannot read schedule file '{binary}': not text (byte 0xff at offset 8",
    )
    from tightpipe.torch import idle_from_trace

    _expect(lambda: idle_from_trace([]), ArgumentError, "paths []: no trace")
    assert no_binary_run == []


def test_the_error_classes() -> None:
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, TightpipeError)
    assert issubclass(ArgumentTypeError, TypeError)
    assert issubclass(ArgumentTypeError, TightpipeError)


def test_the_limits_are_the_binarys() -> None:
    header = (REPO / "include/tightpipe/schedule.h").read_text()
    auto = (REPO / "include/tightpipe/auto_schedule.h").read_text()

    def const(text: str, name: str) -> float:
        m = re.search(rf"\b{name}\s*=\s*([0-9.]+)", text)
        assert m, name
        return float(m.group(1))

    assert const(header, "kMaxRanks") == _args.MAX_RANKS
    assert const(header, "kMaxChunks") == _args.MAX_CHUNKS
    assert const(header, "kMaxStages") == _args.MAX_STAGES
    assert const(header, "kMaxMicrobatches") == _args.MAX_MICROBATCHES
    assert const(auto, "kZbAutoMinMemoryLimit") == _args.MIN_MEMORY_LIMIT


# ----- tightpipe.schedule -------------------------------------------------------------------------

GENERATE_CASES: list[tuple[dict[str, Any], type[Exception], str]] = [
    (dict(pp=1025), ArgumentError, "pp 1025: must be in [1, 1024]"),
    (dict(pp=True), ArgumentTypeError, "pp True: must be an int in [1, 1024], not bool"),
    (dict(pp=2.0), ArgumentTypeError, "pp 2.0: must be an int"),
    (dict(pp=None), ArgumentTypeError, "pp None: must be an int"),
    (dict(microbatches=0), ArgumentError, "microbatches 0: must be in [1, 65536]"),
    (dict(microbatches=65537), ArgumentError, "microbatches 65537: must be in [1, 65536]"),
    (dict(microbatches="4"), ArgumentTypeError, "microbatches '4': must be an int"),
    (dict(vpp=0), ArgumentError, "vpp 0: must be in [1, 64]"),
    (dict(vpp=65), ArgumentError, "vpp 65: must be in [1, 64]"),
    (dict(vpp=2.0), ArgumentTypeError, "vpp 2.0: must be an int in [1, 64], not float"),
    (
        dict(pp=1024, vpp=16),
        ArgumentError,
        "pp x vpp 1024 x 16: 16384 stages, must be at most 8192",
    ),
    (dict(name=None), ArgumentTypeError, "name None: must be a str, not NoneType"),
    (dict(name=""), ArgumentError, "name '': is empty"),
    (dict(name="--pp"), ArgumentError, "name '--pp': starts with '-' (a flag)"),
    (dict(cost=1), ArgumentTypeError, "cost 1: must be a str, not int"),
    (dict(cost="-f"), ArgumentError, "cost '-f': starts with '-'"),
    (
        dict(costs="/nonexistent/costs.json"),
        ArgumentError,
        "costs '/nonexistent/costs.json': no such file",
    ),
    (
        dict(costs=b"c.json"),
        ArgumentTypeError,
        "costs b'c.json': must be a path (str or os.PathLike), not bytes",
    ),
    (dict(memory_limit=0.5), ArgumentError, "memory_limit 0.5: must be a finite number >= 1"),
    (dict(memory_limit=math.inf), ArgumentError, "memory_limit inf: must be a finite number"),
    (dict(memory_limit=math.nan), ArgumentError, "memory_limit nan: must be a finite number"),
    (
        dict(memory_limit="4"),
        ArgumentTypeError,
        "memory_limit '4': must be a finite number >= 1, not str",
    ),
    (dict(binary=3), ArgumentTypeError, "binary 3: must be a path"),
    (
        dict(binary="/nonexistent/tightpipe"),
        BinaryNotFoundError,
        "binary '/nonexistent/tightpipe': no executable file",
    ),
]


@pytest.mark.parametrize("kw,exc,start", GENERATE_CASES, ids=lambda x: str(x)[:40])
def test_generate_checks_each_argument(
    no_binary_run: list[Any], kw: dict[str, Any], exc: type[Exception], start: str
) -> None:
    args = dict(name="zb-auto" if "memory_limit" in kw else "1f1b", pp=2, microbatches=4) | kw
    _expect(lambda: generate(**args), exc, start)


def test_generate_a_folder_as_costs_and_both_costs(
    no_binary_run: list[Any], tmp_path: Path
) -> None:
    _expect(
        lambda: generate("zb-auto", 2, 4, costs=tmp_path),
        ArgumentError,
        f"costs '{tmp_path}': is not a regular file",
    )
    f = tmp_path / "c.json"
    f.write_text("{}")
    _expect(
        lambda: generate("zb-auto", 2, 4, cost="f=1,i=1,w=1", costs=f),
        ArgumentError,
        "cost 'f=1,i=1,w=1' and costs",
    )


def test_generate_takes_numpys_ints_and_an_int_memory_limit() -> None:
    s = generate("zb-auto", np.int64(2), np.int32(4), memory_limit=2, cost="f=1,i=1,w=1")
    assert (s.num_ranks, s.num_microbatches) == (2, 4)


def test_load_parse_and_check_refuse_what_is_no_text(
    no_binary_run: list[Any], tmp_path: Path
) -> None:
    _expect(
        lambda: load(b"0F0,0F1\n"),
        ArgumentTypeError,
        "path_or_text b'0F0,0F1\\n': must be a str or os.PathLike, not bytes",
    )
    _expect(lambda: load(3), ArgumentTypeError, "path_or_text 3: must be a path")
    _expect(lambda: load(""), ArgumentError, "path_or_text '': is empty")
    _expect(
        lambda: load(str(tmp_path / "none.csv")),
        ScheduleFileError,
        "cannot read schedule file",
        "no such file",
    )
    _expect(lambda: load(str(tmp_path)), ScheduleFileError, "cannot read schedule file")
    _expect(
        lambda: parse(b"0F0\n"),
        ArgumentTypeError,
        "text b'0F0\\n': must be a str, not bytes (decode it first",
    )
    _expect(lambda: parse("0F0\n", source=None), ArgumentTypeError, "source None: must be a str")
    _expect(lambda: check_text(None), ArgumentTypeError, "text None: must be a str")
    _expect(lambda: parse_cell(3), ArgumentTypeError, "cell 3: must be a str")
    _expect(
        lambda: load("0F0,0F1\n", binary="/nonexistent"),
        BinaryNotFoundError,
        "binary '/nonexistent'",
    )


def test_a_long_value_is_cut(no_binary_run: list[Any]) -> None:
    msg = _expect(lambda: parse(b"x" * 1000), ArgumentTypeError, "text b'xxx")
    assert len(msg) < 300, msg


def test_schedule_ranks(sched: TorchSchedule) -> None:
    assert sched.stages_of(1) == [1]
    _expect(lambda: sched.stages_of(2), ArgumentError, "rank 2: must be in [0, 1]")
    _expect(lambda: sched.compute_order(-1), ArgumentError, "rank -1: must be in [0, 1]")
    _expect(lambda: sched.stages_of("0"), ArgumentTypeError, "rank '0': must be an int")


def test_cli_run(no_binary_run: list[Any]) -> None:
    _expect(
        lambda: cli.run("schedule --pp 2"),
        ArgumentTypeError,
        "args 'schedule --pp 2': must be a list of str, not str",
    )
    _expect(lambda: cli.run(["schedule", 2]), ArgumentTypeError, "args[1] 2: must be a str")
    _expect(
        lambda: cli.run(["--help"], timeout=0),
        ArgumentError,
        "timeout 0: must be a finite number of seconds > 0",
    )


# ----- tightpipe.torch ----------------------------------------------------------------------------


def test_build_runtime(no_binary_run: list[Any], sched: TorchSchedule) -> None:
    from tightpipe.torch import build_runtime, check_actions, check_reduce_grads, check_stages

    _expect(
        lambda: build_runtime("stage", sched, 4),
        ArgumentTypeError,
        "stages 'stage': must be a list of this rank's PipelineStage objects, not str",
    )
    _expect(
        lambda: build_runtime([object()], sched, 0),
        ArgumentError,
        "n_microbatches 0: must be in [1, 65536]",
    )
    _expect(
        lambda: build_runtime([object()], sched, 4.0),
        ArgumentTypeError,
        "n_microbatches 4.0: must be an int",
    )
    _expect(
        lambda: build_runtime([object()], sched, 4, loss_fn=3),
        ArgumentTypeError,
        "loss_fn 3: must be callable or None",
    )
    _expect(
        lambda: build_runtime([object()], sched, 4, scale_grads="yes"),
        ArgumentTypeError,
        "scale_grads 'yes': must be True or False",
    )
    _expect(
        lambda: build_runtime([object()], 3, 4),
        ArgumentTypeError,
        "schedule 3: must be a TorchSchedule, a CSV file path or CSV text, not int",
    )
    _expect(
        lambda: check_stages("s", [object()], 4),
        ArgumentTypeError,
        "sched 's': must be a TorchSchedule, not str",
    )
    _expect(lambda: check_stages(sched, [object()], -1), ArgumentError, "n_microbatches -1")
    _expect(lambda: check_actions(None), ArgumentTypeError, "sched None: must be a TorchSchedule")
    _expect(lambda: check_actions(sched, "F"), ArgumentTypeError, "supported 'F': must be a set")
    _expect(lambda: check_reduce_grads([]), ArgumentTypeError, "sched []: must be a TorchSchedule")


def test_trace_functions(tmp_path: Path) -> None:
    from tightpipe.torch import idle_from_trace, profile_step

    _expect(
        lambda: idle_from_trace("rank0.json"),
        ArgumentTypeError,
        "paths 'rank0.json': must be a list of trace paths, not str",
    )
    _expect(lambda: idle_from_trace(tmp_path), ArgumentTypeError, "paths ")
    _expect(lambda: idle_from_trace([3]), ArgumentTypeError, "paths[0] 3: must be a path")

    class Runtime:
        ran = False

        def step(self, *args: Any, **kwargs: Any) -> None:
            self.ran = True

    rt = Runtime()
    _expect(
        lambda: profile_step(object(), trace_path="t.json"),
        ArgumentTypeError,
        "runtime <object object",
    )
    missing = tmp_path / "no" / "t.json"
    _expect(
        lambda: profile_step(rt, trace_path=str(missing)),
        ArgumentError,
        f"trace_path '{missing}': its folder {missing.parent} does not exist",
    )
    _expect(
        lambda: profile_step(rt, trace_path=tmp_path),
        ArgumentError,
        f"trace_path '{tmp_path}': is a folder",
    )
    _expect(
        lambda: profile_step(rt, trace_path=str(tmp_path / "t.json"), step=-1),
        ArgumentError,
        "step -1: must be in [0, ",
    )
    _expect(
        lambda: profile_step(rt, trace_path=str(tmp_path / "t.json"), barrier=None),
        ArgumentTypeError,
        "barrier None: must be True or False",
    )
    assert not rt.ran  # refused before the step


def test_spawn_and_the_model() -> None:
    import torch

    from tightpipe.torch.gpt import GptConfig, batch, make_stages, reference_step
    from tightpipe.torch.launch import spawn

    _expect(lambda: spawn(0, print), ArgumentError, "world 0: must be in [1, 1024]")
    _expect(lambda: spawn(1.5, print), ArgumentTypeError, "world 1.5: must be an int")
    _expect(lambda: spawn(2, "print"), ArgumentTypeError, "fn 'print': must be callable")
    _expect(lambda: spawn(2, print, threads=0), ArgumentError, "threads 0: must be in [1, 1024]")
    _expect(lambda: spawn(2, print, timeout=-1), ArgumentError, "timeout -1: must be a finite")
    _expect(lambda: spawn(2, print, pg_timeout=math.nan), ArgumentError, "pg_timeout nan")
    _expect(
        lambda: spawn(2, print, steady_malloc="yes"),
        ArgumentTypeError,
        "steady_malloc 'yes': must be True or False",
    )
    # The start method comes from the environment; a wrong one is named before any rank starts.
    saved = os.environ.get("TIGHTPIPE_START_METHOD")
    os.environ["TIGHTPIPE_START_METHOD"] = "fork"
    try:
        _expect(
            lambda: spawn(2, print),
            ArgumentError,
            "TIGHTPIPE_START_METHOD 'fork': must be forkserver or spawn",
        )
    finally:
        if saved is None:
            del os.environ["TIGHTPIPE_START_METHOD"]
        else:
            os.environ["TIGHTPIPE_START_METHOD"] = saved
    _expect(
        lambda: GptConfig(d_model=30, heads=4),
        ArgumentError,
        "d_model 30: is not divisible by heads 4",
    )
    _expect(lambda: GptConfig(vocab=0), ArgumentError, "vocab 0: must be in [1, ")
    _expect(lambda: GptConfig(seq=16.0), ArgumentTypeError, "seq 16.0: must be an int")
    _expect(
        lambda: make_stages({"vocab": 64}, 2),
        ArgumentTypeError,
        "cfg {'vocab': 64}: must be a GptConfig, not dict",
    )
    for n, exc in (
        (0, ArgumentError),
        (-1, ArgumentError),
        (2.0, ArgumentTypeError),
        (True, ArgumentTypeError),
    ):
        _expect(lambda n=n: make_stages(GptConfig(), n), exc, f"num_stages {n}: must be")
    cfg = GptConfig()
    _expect(lambda: batch(cfg, 0), ArgumentError, "n 0: must be in [1, ")
    tokens, targets = batch(cfg, 4)
    stages = make_stages(cfg, 2)
    _expect(
        lambda: reference_step(stages, tokens, targets, 5),
        ArgumentError,
        "microbatches 5: must be in [1, 4]",
    )
    _expect(lambda: reference_step([], tokens, targets, 2), ArgumentTypeError, "stages []")
    losses, _ = reference_step(stages, tokens, targets, 2)
    assert len(losses) == 2 and all(torch.isfinite(x) for x in losses)


# ----- where the binary is found (tightpipe.cli.find_binary) --------------------------------------


def _exe(path: Path, text: str = "\x7fELF") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_find_binary_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bundled = tmp_path / "pkg" / "bin" / "tightpipe"
    repo = tmp_path / "repo"
    built = repo / "build" / "tools" / "tightpipe" / "tightpipe"
    monkeypatch.setattr(cli, "bundled_binary", lambda: bundled)
    monkeypatch.setattr(cli, "_REPO", repo)
    monkeypatch.delenv("TIGHTPIPE_BIN", raising=False)
    # PATH: first this package's console script (skipped: it would look for the binary again),
    # then a real binary.
    script = _exe(
        tmp_path / "venv" / "bin" / "tightpipe",
        "#!/venv/bin/python\nimport sys\nfrom tightpipe.cli import main\n",
    )
    on_path = _exe(tmp_path / "usr" / "bin" / "tightpipe")
    monkeypatch.setenv("PATH", f"{script.parent}:{on_path.parent}")
    assert cli.find_binary() == str(on_path)
    _exe(built)
    assert cli.find_binary() == str(built)
    _exe(bundled)
    assert cli.find_binary() == str(bundled)
    monkeypatch.setenv("TIGHTPIPE_BIN", str(on_path))
    assert cli.find_binary() == str(on_path)
    monkeypatch.setenv("TIGHTPIPE_BIN", str(tmp_path / "none"))
    with pytest.raises(BinaryNotFoundError, match="TIGHTPIPE_BIN is '.*none', which is no "):
        cli.find_binary()


def test_find_binary_names_every_place(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli, "bundled_binary", lambda: tmp_path / "pkg" / "bin" / "tightpipe")
    monkeypatch.setattr(cli, "_REPO", tmp_path / "repo")
    monkeypatch.delenv("TIGHTPIPE_BIN", raising=False)
    script = _exe(
        tmp_path / "venv" / "bin" / "tightpipe",
        "#!/venv/bin/python\nfrom tightpipe.cli import main\n",
    )
    monkeypatch.setenv("PATH", str(script.parent))
    with pytest.raises(BinaryNotFoundError) as e:
        cli.find_binary()
    msg = _one_line(e.value)
    assert str(tmp_path / "pkg" / "bin" / "tightpipe") in msg and "pip install" in msg, msg
    assert str(tmp_path / "repo" / "build") in msg and "none is on PATH" in msg, msg
