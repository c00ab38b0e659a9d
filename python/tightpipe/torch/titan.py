"""A `tightpipe tune` result as torchtitan's pipeline settings (tested with torchtitan 0.3.0).

    from torchtitan.config import ParallelismConfig, TrainingConfig
    from tightpipe.torch.titan import titan_config, titan_local_batch_size, titan_snippet
    parallelism = ParallelismConfig(**titan_config("tune_out"))  # tune's folder, tune.json, or
    training = TrainingConfig(local_batch_size=titan_local_batch_size("tune_out"), ...)  # result
    print(titan_snippet("tune_out"))                             # the same as text to paste

torchtitan 0.3.0 (`torchtitan/distributed/pipeline_parallel.py`) builds a
`_PipelineScheduleRuntime` and loads `pipeline_parallel_schedule_csv` with `_load_csv`'s default
(compute-only) format, but it places the stages on the ranks from the schedule *name*
(`_get_pp_rank_to_stage_indices_mapping`): the V (rank r holds stages r and 2p-1-r) for
`ZBVZeroBubble` and `DualPipeV`, which need exactly 2 stages per rank, and the loop (stage s on
rank s mod p) for every other name. PyTorch then reads the placement off the file again, and a
file whose placement differs from the name's fails at the first step
(`PipeliningMetadataError: Stage 2: Expected _StageForwardMeta from P2P, got _StageBackwardMeta`
on one rank, `KeyError` on the other). So the name is chosen from the file's placement:

    loop, 1 stage per rank   1F1B (torchtitan's default name)
    loop, v >= 2 per rank    Interleaved1F1B
    V, 2 stages per rank     ZBVZeroBubble (so spelled: torchtitan's metrics take the loss from
                             rank 0, where a V puts the last stage, only for this exact name)
    V, any other v           refused: torchtitan has no such placement

With a CSV the name picks nothing else: the runtime runs the file's order. torchtitan 0.3.0 has
no TOML: its settings are the `ParallelismConfig` fields of a `config_registry` function, or
command-line overrides `--parallelism.<field> <value>` (tyro); `titan_snippet` prints both.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from tightpipe.schedule import COMPUTE_TYPES, parse
from tightpipe.torch.tune import TuneFileError, TuneResult, read_tune

TESTED_TORCHTITAN = "0.3.0"
PLACEMENTS = ("loop", "v")
# The names torchtitan 0.3.0 maps to each placement (`_get_pp_rank_to_stage_indices_mapping`).
SINGLE_STAGE_NAME = "1F1B"
LOOPED_NAME = "Interleaved1F1B"
V_NAME = "ZBVZeroBubble"


TuneLike = str | os.PathLike[str] | TuneResult


def stage_to_rank(placement: str, pp: int, num_stages: int) -> list[int]:
    """The rank of each stage under a placement: loop, stage s on rank s % pp; v, stage s on
    rank s if s < pp, else 2pp-1-s (torchtitan's and PyTorch's V)."""
    if placement == "loop":
        return [s % pp for s in range(num_stages)]
    if placement == "v":
        return [s if s < pp else 2 * pp - 1 - s for s in range(num_stages)]
    raise ValueError(f"placement={placement!r}: must be one of {', '.join(PLACEMENTS)}")


def titan_schedule_name(placement: str, pp: int, vpp: int) -> str:
    """The `pipeline_parallel_schedule` name for which torchtitan 0.3.0 places the stages as
    `placement` does with `vpp` stages per rank; ValueError for a placement it cannot take."""
    if placement == "loop":
        return SINGLE_STAGE_NAME if vpp == 1 else LOOPED_NAME
    if placement == "v":
        if vpp != 2:
            raise ValueError(
                f"placement 'v' with vpp={vpp} stages per rank: torchtitan {TESTED_TORCHTITAN} "
                "places a V only with exactly 2 stages per rank (ZBVZeroBubble, DualPipeV); "
                "hint: tune with --vpp 2 for a V, or a looped placement"
            )
        return V_NAME
    raise ValueError(f"placement={placement!r}: must be one of {', '.join(PLACEMENTS)}")


def _result(tune: TuneLike) -> TuneResult:
    if isinstance(tune, TuneResult):
        return tune
    if isinstance(tune, (str, os.PathLike)):
        return read_tune(tune)
    raise TypeError(
        f"tune={tune!r}: must be the folder `tightpipe tune` wrote, its tune.json, "
        "or a TuneResult (tightpipe.torch.tune)"
    )


def check_tune(tune: TuneLike) -> TuneResult:
    """The tune result (read by `tightpipe.torch.tune.read_tune`) checked for torchtitan: counts
    that agree (num_stages = pp x vpp), the placement's stage_to_rank, every stage's module list
    non-empty and no module on two stages; and its compute-only CSV (what torchtitan loads): only
    compute actions, and its ranks, stages, microbatches and placement tune.json's. TuneFileError,
    one line naming the file, the key and the value (ScheduleFileError for a damaged CSV)."""
    res = _result(tune)
    where = os.path.join(res.directory, "tune.json")
    for key in ("pp", "vpp", "num_stages", "microbatches", "micro_batch_size"):
        if getattr(res, key) < 1:
            raise TuneFileError(f"{where}: '{key}' is {getattr(res, key)}; hint: an int >= 1")
    if res.num_stages != res.pp * res.vpp:
        raise TuneFileError(
            f"{where}: 'num_stages' is {res.num_stages}, but pp x vpp = "
            f"{res.pp} x {res.vpp} = {res.pp * res.vpp}"
        )
    if res.placement not in PLACEMENTS:
        raise TuneFileError(
            f"{where}: 'placement' is {res.placement!r}; hint: one of {', '.join(PLACEMENTS)}"
        )
    expected = stage_to_rank(res.placement, res.pp, res.num_stages)
    if res.stage_to_rank != expected:
        raise TuneFileError(
            f"{where}: 'stage_to_rank' is {res.stage_to_rank}, but placement "
            f"'{res.placement}' with pp={res.pp} gives {expected}"
        )
    seen: dict[str, int] = {}
    for s, part in enumerate(res.module_fqns_per_model_part):
        if not part:
            raise TuneFileError(
                f"{where}: 'module_fqns_per_model_part' stage {s} is empty; "
                "hint: every stage holds at least one module"
            )
        for name in part:
            if name in seen:
                raise TuneFileError(
                    f"{where}: 'module_fqns_per_model_part' puts '{name}' on "
                    f"stages {seen[name]} and {s}; hint: each module on one "
                    "stage"
                )
            seen[name] = s
    path = Path(res.compute_csv).resolve()
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not text"
        raise TuneFileError(
            f"cannot read {path} (the tune result's compute-only schedule): "
            f"{why}; hint: `tightpipe schedule ... --format csv --out FILE` "
            "writes one"
        ) from None
    sched = parse(text, str(path))
    extra = sorted(sched.action_types - set(COMPUTE_TYPES) - {"OVERLAP_F_B"})
    if extra:
        raise TuneFileError(
            f"{path}: holds {', '.join(extra)} actions; hint: torchtitan loads "
            "the compute-only form (`tightpipe schedule --format csv`), not the "
            "compute_comms one"
        )
    for what, got, want in (
        ("ranks (rows)", sched.num_ranks, res.pp),
        ("stages", sched.num_stages, res.num_stages),
        ("microbatches", sched.num_microbatches, res.microbatches),
    ):
        if got != want:
            raise TuneFileError(f"{path}: has {got} {what}, but tune.json says {want}")
    if sched.stage_to_rank != res.stage_to_rank:
        raise TuneFileError(
            f"{path}: places stages on ranks {sched.stage_to_rank}, but "
            f"tune.json's 'stage_to_rank' is {res.stage_to_rank}"
        )
    return res


def titan_config(tune: TuneLike) -> dict[str, Any]:
    """torchtitan 0.3.0's `ParallelismConfig` fields that run the tune result (checked by
    `check_tune`): the degree, the schedule name whose placement is the file's, the compute-only
    CSV (absolute path), the split, the microbatch size; `pipeline_parallel_layers_per_stage` is
    None so that torchtitan's split by layer counts is off. torchtitan runs
    training.local_batch_size / microbatch size microbatches: set it to `titan_local_batch_size`,
    the file's count times the microbatch size."""
    res = check_tune(tune)
    if res.pp < 2:
        raise ValueError(
            f"tune result with pp={res.pp}: torchtitan turns pipelining off at "
            "pipeline_parallel_degree 1; hint: tune for pp >= 2"
        )
    return {
        "pipeline_parallel_degree": res.pp,
        "pipeline_parallel_schedule": titan_schedule_name(res.placement, res.pp, res.vpp),
        "pipeline_parallel_schedule_csv": str(Path(res.compute_csv).resolve()),
        "module_fqns_per_model_part": [list(part) for part in res.module_fqns_per_model_part],
        "pipeline_parallel_layers_per_stage": None,
        "pipeline_parallel_microbatch_size": res.micro_batch_size,
    }


def titan_local_batch_size(tune: TuneLike) -> int:
    """torchtitan's `training.local_batch_size` for the tune result: microbatches x microbatch
    size (torchtitan derives the microbatch count from it)."""
    res = _result(tune)
    return res.microbatches * res.micro_batch_size


def titan_cli_args(tune: TuneLike) -> list[str]:
    """The tune result as torchtitan's command-line overrides (tyro, with the rules torchtitan
    registers: a list of names is one argument, comma-separated), an argv list:
    `--parallelism.<field> <value>` for each of `titan_config`'s fields (the split one argument
    per stage) and `--training.local_batch_size <n>`."""
    args: list[str] = []
    for key, value in titan_config(tune).items():
        args.append(f"--parallelism.{key}")
        if key == "module_fqns_per_model_part":
            args += [",".join(part) for part in value]
        else:
            args.append("None" if value is None else str(value))
    return args + ["--training.local_batch_size", str(titan_local_batch_size(tune))]


def titan_snippet(tune: TuneLike) -> str:
    """What a torchtitan 0.3.0 user sets, as text: the `ParallelismConfig(...)` and the
    `training.local_batch_size` for a `config_registry` function, and the same as command-line
    overrides."""
    res = _result(tune)
    cfg = titan_config(res)
    lines = [
        f"# tightpipe tune: {res.schedule}, pp={res.pp}, vpp={res.vpp}, "
        f"{res.microbatches} microbatches of {res.micro_batch_size}, placement "
        f"{res.placement} (torchtitan {TESTED_TORCHTITAN})",
        "parallelism=ParallelismConfig(",
    ]
    lines += [f"    {key}={value!r}," for key, value in cfg.items()]
    lines.append("),")
    lines.append(f"# and in TrainingConfig: local_batch_size={titan_local_batch_size(res)}")
    lines.append("# or as command-line overrides:")
    lines.append("#   " + shlex.join(titan_cli_args(res)))
    return "\n".join(lines) + "\n"


__all__ = [
    "LOOPED_NAME",
    "SINGLE_STAGE_NAME",
    "TESTED_TORCHTITAN",
    "TuneFileError",
    "V_NAME",
    "check_tune",
    "stage_to_rank",
    "titan_cli_args",
    "titan_config",
    "titan_local_batch_size",
    "titan_schedule_name",
    "titan_snippet",
]
