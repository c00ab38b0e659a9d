"""A `tightpipe tune` result as torchtitan's pipeline settings (tested with torchtitan 0.3.0).

    from torchtitan.config import ParallelismConfig
    from tightpipe.torch.titan import titan_config, titan_snippet
    cfg = titan_config("tune_out", local_batch_size=16)     # the folder of tune.json, or the file
    parallelism = ParallelismConfig(**cfg)                  # or print(titan_snippet("tune_out"))

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

import json
import os
import shlex
from pathlib import Path
from typing import Any

from tightpipe.errors import TightpipeError
from tightpipe.schedule import COMPUTE_TYPES, parse

TESTED_TORCHTITAN = "0.3.0"
TUNE_FORMAT = "tightpipe-tune/1"
TUNE_FILE = "tune.json"
PLACEMENTS = ("loop", "v")
# The names torchtitan 0.3.0 maps to each placement (`_get_pp_rank_to_stage_indices_mapping`).
SINGLE_STAGE_NAME = "1F1B"
LOOPED_NAME = "Interleaved1F1B"
V_NAME = "ZBVZeroBubble"


class TuneFileError(TightpipeError, ValueError):
    """A tune result (tune.json and its schedule files) that is missing, damaged or
    inconsistent."""


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


def _int(tune: dict[str, Any], key: str, where: str, low: int = 1) -> int:
    value = tune.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise TuneFileError(f"{where}: '{key}' is {value!r}; hint: an int >= {low}")
    return value


def read_tune(tune: str | os.PathLike[str] | dict[str, Any]) -> tuple[dict[str, Any], Path]:
    """(the checked tune dict, the folder its file names are relative to). `tune` is the path of
    tune.json, its folder, or the dict itself (file names then relative to the working folder).
    TuneFileError, one line naming the file, the key and the value, for anything inconsistent."""
    if isinstance(tune, dict):
        data, folder, where = tune, Path.cwd(), "tune dict"
    elif isinstance(tune, (str, os.PathLike)):
        path = Path(tune)
        if path.is_dir():
            path = path / TUNE_FILE
        where = str(path)
        try:
            text = path.read_text()
        except OSError as e:
            raise TuneFileError(f"cannot read {where}: {e.strerror}; hint: the folder "
                                "`tightpipe tune` wrote, or its tune.json") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TuneFileError(f"{where}: not JSON ({e.msg} at line {e.lineno}); hint: the "
                                "tune.json `tightpipe tune` wrote") from None
        if not isinstance(data, dict):
            raise TuneFileError(f"{where}: holds a {type(data).__name__}, not an object")
        folder = path.parent
    else:
        raise TypeError(f"tune={tune!r}: must be a path (tune.json or its folder) or a dict")
    if data.get("format") != TUNE_FORMAT:
        raise TuneFileError(f"{where}: 'format' is {data.get('format')!r}, expected "
                            f"'{TUNE_FORMAT}'; hint: write it with this version's `tightpipe "
                            "tune`")
    pp = _int(data, "pp", where)
    vpp = _int(data, "vpp", where)
    num_stages = _int(data, "num_stages", where)
    _int(data, "microbatches", where)
    if num_stages != pp * vpp:
        raise TuneFileError(f"{where}: 'num_stages' is {num_stages}, but pp x vpp = "
                            f"{pp} x {vpp} = {pp * vpp}")
    placement = data.get("placement")
    if placement not in PLACEMENTS:
        raise TuneFileError(f"{where}: 'placement' is {placement!r}; hint: one of "
                            f"{', '.join(PLACEMENTS)}")
    s2r = data.get("stage_to_rank")
    expected = stage_to_rank(placement, pp, num_stages)
    if s2r != expected:
        raise TuneFileError(f"{where}: 'stage_to_rank' is {s2r!r}, but placement "
                            f"'{placement}' with pp={pp} gives {expected}")
    fqns = data.get("module_fqns_per_model_part")
    if (not isinstance(fqns, list) or not all(isinstance(part, list) for part in fqns)
            or not all(isinstance(n, str) and n for part in fqns for n in part)):
        raise TuneFileError(f"{where}: 'module_fqns_per_model_part' is {fqns!r}; hint: one list "
                            "of module names per stage, e.g. [[\"tok_embeddings\", \"layers.0\"], "
                            "...]")
    if len(fqns) != num_stages:
        raise TuneFileError(f"{where}: 'module_fqns_per_model_part' has {len(fqns)} stages, but "
                            f"'num_stages' is {num_stages}")
    seen: dict[str, int] = {}
    for s, part in enumerate(fqns):
        if not part:
            raise TuneFileError(f"{where}: 'module_fqns_per_model_part' stage {s} is empty; "
                                "hint: every stage holds at least one module")
        for name in part:
            if name in seen:
                raise TuneFileError(f"{where}: 'module_fqns_per_model_part' puts '{name}' on "
                                    f"stages {seen[name]} and {s}; hint: each module on one "
                                    "stage")
            seen[name] = s
    files = data.get("files")
    if not isinstance(files, dict) or not isinstance(files.get("compute"), str):
        raise TuneFileError(f"{where}: 'files' is {files!r}; hint: {{\"compute_comms\": "
                            "\"schedule.csv\", \"compute\": \"schedule_compute.csv\"}")
    return data, folder


def compute_schedule_path(tune: str | os.PathLike[str] | dict[str, Any]) -> Path:
    """The absolute path of the tune result's compute-only CSV (what torchtitan loads), checked:
    it is readable, holds compute actions only, and its ranks, stages, microbatches and placement
    are tune.json's. TuneFileError (or ScheduleFileError for a damaged file) otherwise."""
    data, folder = read_tune(tune)
    path: Path = (folder / str(data["files"]["compute"])).resolve()
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) else "not text"
        raise TuneFileError(f"cannot read {path} ('files.compute' of the tune result): {why}; "
                            "hint: `tightpipe schedule ... --format csv --out FILE` writes "
                            "one") from None
    sched = parse(text, str(path))
    extra = sorted(sched.action_types - set(COMPUTE_TYPES) - {"OVERLAP_F_B"})
    if extra:
        raise TuneFileError(f"{path}: holds {', '.join(extra)} actions; hint: torchtitan loads "
                            "the compute-only form (`tightpipe schedule --format csv`), not the "
                            "compute_comms one")
    for what, got, want in (("ranks (rows)", sched.num_ranks, data["pp"]),
                            ("stages", sched.num_stages, data["num_stages"]),
                            ("microbatches", sched.num_microbatches, data["microbatches"])):
        if got != want:
            raise TuneFileError(f"{path}: has {got} {what}, but tune.json says {want}")
    if sched.stage_to_rank != data["stage_to_rank"]:
        raise TuneFileError(f"{path}: places stages on ranks {sched.stage_to_rank}, but "
                            f"tune.json's 'stage_to_rank' is {data['stage_to_rank']}")
    return path


def titan_config(tune: str | os.PathLike[str] | dict[str, Any], *,
                 local_batch_size: int | None = None) -> dict[str, Any]:
    """torchtitan 0.3.0's `ParallelismConfig` fields that run the tune result: the degree, the
    schedule name whose placement is the file's, the compute-only CSV (absolute path), the split;
    with `local_batch_size` (training.local_batch_size, per rank) also the microbatch size, which
    torchtitan needs for local_batch_size / microbatch_size = the file's microbatch count.
    `pipeline_parallel_layers_per_stage` is None so that torchtitan's split by counts is off."""
    data, _ = read_tune(tune)
    if data["pp"] < 2:
        raise ValueError(f"tune result with pp={data['pp']}: torchtitan turns pipelining off at "
                         "pipeline_parallel_degree 1; hint: tune for pp >= 2")
    csv = compute_schedule_path(tune)
    m = data["microbatches"]
    cfg: dict[str, Any] = {
        "pipeline_parallel_degree": data["pp"],
        "pipeline_parallel_schedule": titan_schedule_name(data["placement"], data["pp"],
                                                          data["vpp"]),
        "pipeline_parallel_schedule_csv": str(csv),
        "module_fqns_per_model_part": [list(part) for part in data["module_fqns_per_model_part"]],
        "pipeline_parallel_layers_per_stage": None,
    }
    if local_batch_size is not None:
        if (isinstance(local_batch_size, bool) or not isinstance(local_batch_size, int)
                or local_batch_size < 1 or local_batch_size % m != 0):
            raise ValueError(f"local_batch_size={local_batch_size!r}: must be a positive multiple "
                             f"of the tune result's {m} microbatches; hint: e.g. {2 * m}")
        cfg["pipeline_parallel_microbatch_size"] = local_batch_size // m
    return cfg


def titan_cli_args(cfg: dict[str, Any]) -> list[str]:
    """`titan_config`'s result as torchtitan's command-line overrides (tyro, with the rules
    torchtitan registers: a list of names is one argument, comma-separated), an argv list:
    `--parallelism.<field> <value>`; the split gives one argument per stage."""
    args: list[str] = []
    for key, value in cfg.items():
        args.append(f"--parallelism.{key}")
        if key == "module_fqns_per_model_part":
            args += [",".join(part) for part in value]
        else:
            args.append("None" if value is None else str(value))
    return args


def titan_snippet(tune: str | os.PathLike[str] | dict[str, Any], *,
                  local_batch_size: int | None = None) -> str:
    """What a torchtitan 0.3.0 user sets, as text: the `ParallelismConfig(...)` arguments for a
    `config_registry` function, and the command-line overrides of the scalar fields."""
    data, _ = read_tune(tune)
    cfg = titan_config(tune, local_batch_size=local_batch_size)
    m = data["microbatches"]
    lines = [f"# tightpipe tune: {data['schedule']}, pp={data['pp']}, vpp={data['vpp']}, "
             f"{m} microbatches, placement {data['placement']} (torchtitan {TESTED_TORCHTITAN})",
             "parallelism=ParallelismConfig("]
    lines += [f"    {key}={value!r}," for key, value in cfg.items()]
    lines.append("),")
    if local_batch_size is None:
        lines.append(f"# and training.local_batch_size = {m} x "
                     "parallelism.pipeline_parallel_microbatch_size")
    else:
        lines.append(f"# with training.local_batch_size={local_batch_size}")
    lines.append("# or as command-line overrides:")
    lines.append("#   " + shlex.join(titan_cli_args(cfg)))
    return "\n".join(lines) + "\n"


__all__ = [
    "LOOPED_NAME",
    "SINGLE_STAGE_NAME",
    "TESTED_TORCHTITAN",
    "TUNE_FORMAT",
    "TuneFileError",
    "V_NAME",
    "compute_schedule_path",
    "read_tune",
    "stage_to_rank",
    "titan_cli_args",
    "titan_config",
    "titan_schedule_name",
    "titan_snippet",
]
