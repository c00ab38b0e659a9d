"""Measure, decide, apply: from a PyTorch user's model and run to a faster split and schedule.

`tune(...)` runs `tightpipe tune` (the planner's search over split, placement, schedule and
microbatch size, simulated as PyTorch's runtime runs it) on the modules' costs that
`measure_layers` wrote, optionally refitted to the profiler traces of the current run, and returns
the recommendation as a `TuneResult` read from the `tune.json` it writes. `cut_stages` cuts the
user's list of top-level modules into the recommended stages, and `build_tuned_runtime` builds
PyTorch's runtime on this rank's stages from the written schedule: the apply step in one call.
docs/torch.md section 7 shows the loop end to end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tightpipe import cli
from tightpipe.errors import ScheduleMismatchError, TightpipeError
from tightpipe.schedule import TorchSchedule, load


class TuneFileError(TightpipeError, ValueError):
    """A tune.json that is missing, damaged or of another format."""


@dataclasses.dataclass(frozen=True)
class TuneResult:
    """What `tightpipe tune` recommends (tune.json, "tightpipe-tune/1")."""

    directory: str
    schedule: str
    pp: int
    vpp: int
    num_stages: int
    microbatches: int
    micro_batch_size: int
    placement: str  # "loop" or "v"
    stage_to_rank: list[int]
    module_fqns_per_model_part: list[list[str]]
    change: bool  # False: keep the current setup (the files then hold the current one)
    why: str
    prediction: dict[str, Any]
    current: dict[str, Any] | None
    table: str  # the side-by-side table tune printed
    # What to know about the inputs, one line each (e.g. a CPU table measured under glibc's
    # default malloc: docs/torch.md section 7); tune prints them under the table too.
    notes: list[str] = dataclasses.field(default_factory=list)

    @property
    def compute_comms_csv(self) -> str:
        """The schedule for `build_runtime` (PyTorch's compute_comms form)."""
        return os.path.join(self.directory, "schedule.csv")

    @property
    def compute_csv(self) -> str:
        """The compute-only schedule (torchtitan's `pipeline_parallel_schedule_csv`)."""
        return os.path.join(self.directory, "schedule_compute.csv")

    @property
    def predicted_step_s(self) -> float:
        return float(self.prediction["step_s"])

    def stages_of(self, rank: int) -> list[int]:
        return [s for s, r in enumerate(self.stage_to_rank) if r == rank]


def _int_arg(name: str, value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}={value!r}: must be an int in [{lo}, {hi}]")
    if not lo <= value <= hi:
        raise ValueError(f"{name}={value}: must be in [{lo}, {hi}]")
    return value


def _number_arg(name: str, value: Any, lo: float, hi: float, what: str = "") -> float:
    """A number in [lo, hi), as a float; ValueError naming the argument otherwise (`what`: the
    rest of the message, after the range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value < hi:
        bounds = ", ".join(f"{x:g}".replace("e+0", "e") for x in (lo, hi))
        raise ValueError(f"{name}={value!r}: must be a number in [{bounds}){what}")
    return float(value)


def _path_arg(name: str, value: Any) -> str:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}={value!r}: must be a path (str or os.PathLike)")
    return os.fspath(value)


def read_tune(directory: str | os.PathLike[str], table: str = "") -> TuneResult:
    """Reads the tune.json in `directory` (or the file itself); TuneFileError naming it."""
    d = Path(os.fspath(directory))
    path = d if d.is_file() else d / "tune.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise TuneFileError(
            f"cannot read {path}: {e.strerror}; hint: the --out folder of `tightpipe tune`"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TuneFileError(
            f"{path}: not JSON text ({e}); hint: the tune.json `tightpipe tune --out` writes"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != "tightpipe-tune/1":
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise TuneFileError(f"{path}: format {fmt!r}, expected 'tightpipe-tune/1'")
    try:
        res = TuneResult(
            directory=str(path.parent),
            schedule=str(doc["schedule"]),
            pp=int(doc["pp"]),
            vpp=int(doc["vpp"]),
            num_stages=int(doc["num_stages"]),
            microbatches=int(doc["microbatches"]),
            micro_batch_size=int(doc["micro_batch_size"]),
            placement=str(doc["placement"]),
            stage_to_rank=[int(r) for r in doc["stage_to_rank"]],
            module_fqns_per_model_part=[
                [str(n) for n in s] for s in doc["module_fqns_per_model_part"]
            ],
            change=bool(doc["change"]),
            why=str(doc["why"]),
            prediction=dict(doc["prediction"]),
            current=dict(doc["current"]) if doc.get("current") else None,
            table=table,
            notes=[str(n) for n in doc.get("notes") or []],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise TuneFileError(
            f"{path}: missing or bad key {e}; hint: rewrite it with `tightpipe tune --out`"
        ) from None
    if (
        len(res.module_fqns_per_model_part) != res.num_stages
        or len(res.stage_to_rank) != res.num_stages
    ):
        raise TuneFileError(
            f"{path}: {res.num_stages} stages, but "
            f"{len(res.module_fqns_per_model_part)} module lists and "
            f"{len(res.stage_to_rank)} ranks in stage_to_rank"
        )
    return res


def tune(
    layers: str | os.PathLike[str],
    pp: int,
    microbatches: int | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    current_split: Sequence[int] | None = None,
    current_schedule: str | None = None,
    current_vpp: int | None = None,
    schedule_file: str | os.PathLike[str] | None = None,
    traces: Sequence[str | os.PathLike[str]] | None = None,
    memory_limit_gib: float | None = None,
    schedules: Sequence[str] | None = None,
    micro_batch_sizes: Sequence[int] | None = None,
    min_gain: float | None = None,
    top: int | None = None,
    action_overhead_us: float | None = None,
    host_time_us: Mapping[str, float] | None = None,
    cores: int | None = None,
    core_slowdown: float | None = None,
    binary: str | None = None,
) -> TuneResult:
    """`tightpipe tune` on the modules' costs (`measure_layers(..., out=layers)`); the files go to
    `out` (default: a new temporary folder). `cores` and `core_slowdown`: CPU ranks that share
    cores (tune's --cores and --core-slowdown, docs/cost_model.md "Shared cores"). Arguments are
    checked here first (TypeError or ValueError naming the argument); the binary's own errors
    come back as CliError."""
    layers_s = _path_arg("layers", layers)
    if not os.path.isfile(layers_s):
        raise ValueError(
            f"layers='{layers_s}': no such file; hint: the JSON "
            "measure_layers(..., out=PATH) writes"
        )
    _int_arg("pp", pp, 1, 1024)
    args = ["tune", "--layers", layers_s, "--pp", str(pp)]
    if microbatches is not None:
        args += ["--microbatches", str(_int_arg("microbatches", microbatches, 1, 1 << 18))]
    if current_split is not None:
        if isinstance(current_split, (str, bytes)) or not all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in current_split
        ):
            raise TypeError(
                f"current_split={current_split!r}: must be a list of module counts "
                "per stage, each an int >= 1, e.g. [7, 7]"
            )
        args += ["--current-split", ",".join(str(k) for k in current_split)]
    if current_schedule is not None:
        if not isinstance(current_schedule, str) or not current_schedule:
            raise TypeError(
                f"current_schedule={current_schedule!r}: must be a schedule name, "
                "e.g. 'Schedule1F1B' or '1f1b'"
            )
        args += ["--current-schedule", current_schedule]
    if current_vpp is not None:
        args += ["--current-vpp", str(_int_arg("current_vpp", current_vpp, 1, 64))]
    if schedule_file is not None:
        args += ["--schedule-file", _path_arg("schedule_file", schedule_file)]
    if traces is not None:
        if isinstance(traces, (str, bytes, os.PathLike)) or not traces:
            raise TypeError(
                f"traces={traces!r}: must be a non-empty list of trace paths, one per rank"
            )
        args += ["--traces", *[_path_arg("traces[]", t) for t in traces]]
    if memory_limit_gib is not None:
        if isinstance(memory_limit_gib, bool) or not isinstance(memory_limit_gib, (int, float)):
            raise TypeError(f"memory_limit_gib={memory_limit_gib!r}: must be a number of GiB")
        if not 0 < memory_limit_gib < 2**20:
            raise ValueError(
                f"memory_limit_gib={memory_limit_gib}: must be in (0, 2^20) GiB per rank"
            )
        args += ["--memory-limit-gib", repr(float(memory_limit_gib))]
    if schedules is not None:
        if isinstance(schedules, str) or not all(isinstance(s, str) and s for s in schedules):
            raise TypeError(f"schedules={schedules!r}: must be a list of schedule names")
        args += ["--schedules", ",".join(schedules)]
    if micro_batch_sizes is not None:
        sizes = [_int_arg("micro_batch_sizes[]", b, 1, 4096) for b in micro_batch_sizes]
        args += ["--micro-batch-size", ",".join(str(b) for b in sizes)]
    if min_gain is not None:
        args += ["--min-gain", repr(_number_arg("min_gain", min_gain, 0, 1))]
    if top is not None:
        args += ["--top", str(_int_arg("top", top, 1, 10000))]
    if action_overhead_us is not None:
        us = _number_arg(
            "action_overhead_us",
            action_overhead_us,
            0,
            1e6,
            "; hint: or host_time_us=measure_host_time(...)",
        )
        args += ["--action-overhead-us", repr(us)]
    if host_time_us is not None:
        if action_overhead_us is not None:
            raise ValueError(
                "action_overhead_us and host_time_us both given; hint: give one "
                "(host_time_us is the finer, per kind and per module)"
            )
        if not isinstance(host_time_us, Mapping):
            raise TypeError(
                f"host_time_us={host_time_us!r}: must be a dict of microseconds; hint: "
                "measure_host_time(...) returns one"
            )
        for key, v in host_time_us.items():
            if key not in HOST_TIME_KEYS:
                raise ValueError(
                    f"host_time_us: unknown key {key!r}; hint: keys are {', '.join(HOST_TIME_KEYS)}"
                )
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e6:
                raise ValueError(
                    f"host_time_us[{key!r}]={v!r}: must be a number of microseconds in [0, 1e6)"
                )
        if host_time_us:
            args += [
                "--host-time-us",
                ",".join(f"{k}={float(v)!r}" for k, v in host_time_us.items()),
            ]
    if cores is not None:
        args += ["--cores", str(_int_arg("cores", cores, 0, 1 << 16))]
    if core_slowdown is not None:
        slow = _number_arg(
            "core_slowdown",
            core_slowdown,
            1,
            1e3,
            ": how much longer each of several ranks computing at once takes than one alone; "
            "hint: 1 where the cores do not slow each other",
        )
        args += ["--core-slowdown", repr(slow)]
    out_s = _path_arg("out", out) if out is not None else tempfile.mkdtemp(prefix="tightpipe-tune-")
    table = cli.run(args + ["--out", out_s], binary=binary)
    return read_tune(out_s, table)


def cut_stages(
    modules: Sequence[Any],
    names: Sequence[str],
    result: TuneResult,
    stages: Sequence[int] | None = None,
) -> dict[int, Any]:
    """The user's top-level modules (in model order, named `names`) cut into the recommended
    stages: {stage: torch.nn.Sequential of its modules}, for `stages` (default: all). The modules
    are used as given (no copy): build a fresh model per process, as PyTorch's examples do."""
    from torch import nn

    if len(modules) != len(names):
        raise ValueError(
            f"modules has {len(modules)} entries but names has {len(names)}; "
            "hint: one name per module, in model order"
        )
    listed = [n for part in result.module_fqns_per_model_part for n in part]
    if listed != list(names):
        raise ScheduleMismatchError(
            f"{result.directory}/tune.json splits the modules {listed}, but the model's are "
            f"{list(names)}; hint: tune the same model (measure_layers names its modules the same "
            "way)"
        )
    index = dict(zip(names, modules, strict=True))
    want = range(result.num_stages) if stages is None else stages
    out: dict[int, Any] = {}
    for s in want:
        if not 0 <= s < result.num_stages:
            raise ValueError(f"stage {s}: the tuned schedule has stages 0..{result.num_stages - 1}")
        out[s] = nn.Sequential(*[index[n] for n in result.module_fqns_per_model_part[s]])
    return out


def build_tuned_runtime(
    make_modules: Callable[[], tuple[Sequence[Any], Sequence[str]]],
    result: TuneResult,
    rank: int,
    loss_fn: Callable[..., Any],
    *,
    device: Any = "cpu",
    **runtime_kw: Any,
) -> tuple[Any, list[Any], TorchSchedule]:
    """Apply in one call: this rank's `PipelineStage`s of the tuned split (from a fresh model:
    `make_modules()` returns its top-level modules and their names) and PyTorch's
    `_PipelineScheduleRuntime` running the tuned schedule file. Returns (runtime, stages,
    schedule). Needs the process group (one process per rank) to be up."""
    from torch.distributed.pipelining import PipelineStage

    from tightpipe.torch.runtime import build_runtime

    sched = load(result.compute_comms_csv)
    if sched.num_ranks != result.pp:
        raise ScheduleMismatchError(
            f"{result.compute_comms_csv} has {sched.num_ranks} ranks but "
            f"tune.json says pp={result.pp}"
        )
    modules, names = make_modules()
    mine = result.stages_of(rank)
    cut = cut_stages(modules, names, result, mine)
    stages = [PipelineStage(cut[s].to(device), s, result.num_stages, device) for s in mine]
    runtime = build_runtime(stages, sched, result.microbatches, loss_fn, **runtime_kw)
    return runtime, stages, sched


# The keys of tune's --host-time-us (RuntimeHostTime in include/tightpipe/cost_model.h).
HOST_TIME_KEYS = ("f", "i", "w", "b", "f_module", "i_module", "w_module", "b_module")


def _host_time_worker(
    rank: int,
    world: int,
    probes: list[tuple[str, dict[str, Any], list[int]]],
    m: int,
    warmup: int,
    steps: int,
) -> list[tuple[list[float], dict[str, float]]]:
    """One rank of measure_host_time's probes, one after the other in the same processes."""
    return [
        _host_time_probe(rank, world, table, split, schedule, m, warmup, steps)
        for schedule, table, split in probes
    ]


def _host_time_probe(
    rank: int,
    world: int,
    table: dict[str, Any],
    split: list[int],
    schedule: str,
    m: int,
    warmup: int,
    steps: int,
) -> tuple[list[float], dict[str, float]]:
    """One probe on one rank: the steps' wall times, and per kind of action the median time
    inside the runtime's call for it beyond the sleeps it was asked for."""
    import statistics
    import time

    import torch
    from torch import nn
    from torch.distributed.pipelining import PipelineStage

    from tightpipe.schedule import generate
    from tightpipe.torch.emulate import emulated_modules
    from tightpipe.torch.runtime import build_runtime

    torch.set_num_threads(1)
    mods = emulated_modules(table, vocab=16)
    first = sum(split[:rank])
    mine = table["layers"][first : first + split[rank]]
    stage = PipelineStage(
        nn.Sequential(*mods[first : first + split[rank]]), rank, world, torch.device("cpu")
    )
    inside: dict[str, list[float]] = {"F": [], "B": [], "I": [], "W": []}
    recording = [False]

    def timed(name: str, kind: Callable[[dict[str, Any]], str]) -> None:
        call = getattr(stage, name)

        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            out = call(*a, **kw)
            if recording[0]:
                inside[kind(kw)].append(time.perf_counter() - t0)
            return out

        setattr(stage, name, wrapper)

    # The runtime waits for an action's inputs before it calls these, so the time inside is the
    # action's own: its sleeps and its host time.
    timed("forward_one_chunk", lambda kw: "F")
    timed("backward_one_chunk", lambda kw: "B" if kw.get("full_backward", True) else "I")
    timed("backward_weight_one_chunk", lambda kw: "W")
    rt = build_runtime(
        [stage],
        generate(schedule, world, m),
        m,
        lambda out, y: torch.nn.functional.cross_entropy(out.flatten(0, 1), y.flatten()),
    )
    shape = table["microbatch_input_shape"]
    tokens = torch.zeros((shape[0] * m, *shape[1:]), dtype=torch.long)
    args = (tokens,) if rank == 0 else ()
    kw: dict[str, Any] = {"target": tokens if rank == world - 1 else None, "losses": []}
    times = []
    for k in range(warmup + steps):
        recording[0] = k >= warmup
        torch.distributed.barrier()
        t0 = time.perf_counter()
        rt.step(*args, **kw)
        torch.distributed.barrier()
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    asked = {
        "F": sum(e["f"] for e in mine),
        "I": sum(e["i"] for e in mine),
        "W": sum(e["w"] for e in mine),
    }
    asked["B"] = asked["I"] + asked["W"]
    # The first stage's I computes nothing and its W runs the whole backward (PyTorch's runtime):
    # its I and W say nothing about the other stages' and are left out.
    kinds = ("F", "B") if rank == 0 else ("F", "B", "I", "W")
    host = {k: statistics.median(inside[k]) - asked[k] for k in kinds if inside[k]}
    return times, host


def measure_host_time(
    *,
    pp: int = 2,
    microbatches: int = 8,
    sleep_s: float = 0.005,
    steps: int = 5,
    layers: str = "measured",
    binary: str | None = None,
) -> dict[str, float]:
    """PyTorch's pipelining runtime's host time around each compute action on this machine, in
    microseconds, for `tune(..., host_time_us=...)`: a fixed part per kind of action (f, i, w,
    b) and a part per module the stage holds (f_module, ...). Measured once per machine, outside
    the run it predicts, on `pp` gloo processes whose modules are EmulatedLayers sleeping
    `sleep_s` in each of F, I and W:

    * four probe runs: 1f1b (F, B) and zb-h1 (F, I, W), with 1 and 3 modules per stage;
    * inside each action (the runtime's call for it, after its inputs arrived): the time beyond
      the sleeps, median over steps and ranks; 1 and 3 modules give the fixed and per-module
      parts of each kind (F from both schedules);
    * between actions (the p2p calls, the runtime's loop): what the four steps measured beyond
      tune's simulation with the parts above, per action on the simulated critical path (a
      least-squares fit of one time over the four runs), added to each kind's fixed part.

    `layers` says what the run to predict runs: "measured" (modules timed by measure_layers,
    which times each module's own Python and autograd calls with its compute, so the per-module
    parts are already in their costs and come back 0) or "emulated" (EmulatedLayers, whose
    tables hold only the sleeps: the per-module parts are given)."""
    import statistics

    from tightpipe.torch.launch import spawn

    _int_arg("pp", pp, 2, 64)
    _int_arg("microbatches", microbatches, 1, 4096)
    _int_arg("steps", steps, 1, 1000)
    if isinstance(sleep_s, bool) or not isinstance(sleep_s, (int, float)) or not (0 < sleep_s <= 1):
        raise ValueError(f"sleep_s={sleep_s!r}: must be in (0, 1] seconds")
    if layers not in ("measured", "emulated"):
        raise ValueError(
            f"layers={layers!r}: must be 'measured' (modules timed by measure_layers) or "
            "'emulated' (EmulatedLayers)"
        )

    def entry(k: int) -> dict[str, Any]:
        first = k == 0
        return {
            "name": f"m{k}",
            "f": sleep_s,
            "i": 0.0 if first else sleep_s,
            "w": 2 * sleep_s if first else sleep_s,
            **dict.fromkeys(("act_bytes", "act_after_i_bytes", "input_bytes", "output_bytes"), 0),
            **dict.fromkeys(("param_bytes", "grad_bytes", "optimizer_bytes", "params"), 0),
        }

    probes = []
    for schedule in ("1f1b", "zb-h1"):
        for per_stage in (1, 3):
            table = {
                "format": "tightpipe-layers/1",
                "time_unit": "s",
                "microbatch_input_shape": [1, 4],
                "layers": [entry(k) for k in range(pp * per_stage)],
            }
            probes.append((schedule, table, [per_stage] * pp))
    by_rank = spawn(pp, _host_time_worker, probes, microbatches, 2, steps, timeout=600)
    runs = []  # (schedule, modules per stage, table, measured step, {kind: [host per rank]})
    for k, (schedule, table, split) in enumerate(probes):
        res = [r[k] for r in by_rank]
        step = statistics.median(max(r[0][j] for r in res) for j in range(steps))
        hosts: dict[str, list[float]] = {}
        for _, h in res:
            for kind, v in h.items():
                hosts.setdefault(kind, []).append(v)
        runs.append((schedule, split[0], table, step, hosts))

    def inside(kind: str, per_stage: int) -> float:
        vals = [
            statistics.median(h[kind]) for s, n, _, _, h in runs if n == per_stage and kind in h
        ]
        return statistics.fmean(vals)

    out: dict[str, float] = {}
    for kind in ("F", "I", "W", "B"):
        one, three = inside(kind, 1), inside(kind, 3)
        per_module = max(0.0, (three - one) / 2)
        out[kind.lower()] = max(0.0, one - per_module)
        out[kind.lower() + "_module"] = per_module
    # Between actions: one time per action, fitted over the four runs.
    num = den = 0.0
    with tempfile.TemporaryDirectory(prefix="tightpipe-host-time-") as tmp:
        for k, (schedule, per_stage, table, step, _) in enumerate(runs):
            path = os.path.join(tmp, f"layers{k}.json")
            with open(path, "w") as f:
                json.dump(table, f)

            def predicted(
                extra_us: float, path: str = path, n: int = per_stage, s: str = schedule
            ) -> float:
                host = {
                    key: 1e6 * v + (extra_us if "_" not in key else 0.0) for key, v in out.items()
                }
                doc = json.loads(
                    cli.run(
                        [
                            "tune",
                            "--layers",
                            path,
                            "--pp",
                            str(pp),
                            "--microbatches",
                            str(microbatches),
                            "--current-split",
                            ",".join([str(n)] * pp),
                            "--current-schedule",
                            s,
                            "--host-time-us",
                            ",".join(f"{key}={v!r}" for key, v in host.items()),
                            "--top",
                            "1",
                            "--json",
                        ],
                        binary=binary,
                    )
                )
                return float(doc["current"]["prediction"]["step_s"])

            base = predicted(0.0)
            actions = (predicted(1000.0) - base) / 1e-3
            num += actions * (step - base)
            den += actions * actions
    between = max(0.0, num / den) if den > 0 else 0.0
    for kind in ("f", "i", "w", "b"):
        out[kind] += between
    if layers == "measured":
        out.update({k: 0.0 for k in out if k.endswith("_module")})
    return {k: round(1e6 * v, 1) for k, v in out.items()}
