"""A tune result (tune.json, its compute-only CSV, the split) applied through torchtitan 0.3.0's own
pipeline code: `titan_config` gives the ParallelismConfig fields, and torchtitan's `pipeline_llm`
(its `_pipeline_module_split` and `_build_pipeline_schedule`) splits its own Llama3 model (tiny)
and trains one step on 2 gloo CPU processes with them: per-microbatch losses and every gradient
equal the unsplit model's (rtol 1e-4, atol 1e-6), for one stage per rank with uneven splits
(1f1b, zb-h1), looped v = 2 (interleaved) and the V (zb-v, dualpipev), and what `tightpipe tune`
itself writes for a hand-written cost table of these modules. The name titan_config
picks places the stages exactly as the file does (torchtitan's own mapping asked), and a V file
under a looped name fails at the first step: the name matters. One spawn for all cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tightpipe import cli
from tightpipe.torch.launch import spawn
from tightpipe.torch.titan import (
    TuneFileError,
    check_tune,
    stage_to_rank,
    titan_cli_args,
    titan_config,
    titan_local_batch_size,
    titan_schedule_name,
    titan_snippet,
)
from tightpipe.torch.tune import read_tune
from titan_worker import MICROBATCH, Case, run_cases

PP = 2
M = 4
TOK, NORM, HEAD = "tok_embeddings", "norm", "lm_head"
L = [f"layers.{i}" for i in range(4)]
FOUR_STAGES = [[TOK, L[0]], [L[1]], [L[2]], [L[3], NORM, HEAD]]
# id -> (tightpipe schedule, vpp, placement, split)
TUNES: dict[str, tuple[str, int, str, list[list[str]]]] = {
    "1f1b": ("1f1b", 1, "loop", [[TOK, L[0]], [L[1], L[2], L[3], NORM, HEAD]]),
    "zb-h1": ("zb-h1", 1, "loop", [[TOK, L[0], L[1], L[2]], [L[3], NORM, HEAD]]),
    "interleaved": ("interleaved", 2, "loop", FOUR_STAGES),
    "zb-v": ("zb-v", 2, "v", FOUR_STAGES),
    "dualpipev": ("dualpipev", 2, "v", FOUR_STAGES),
}
EXPECTED_NAME = {
    "1f1b": "1F1B",
    "zb-h1": "1F1B",
    "interleaved": "Interleaved1F1B",
    "zb-v": "ZBVZeroBubble",
    "dualpipev": "ZBVZeroBubble",
}


def write_tune(
    folder: Path, schedule: str, vpp: int, placement: str, fqns: list[list[str]], m: int = M
) -> Path:
    """A tune result as `tightpipe tune` writes it (tightpipe-tune/1; its keys, the prediction
    left empty) from the CLI's schedule and a split chosen by hand."""
    folder.mkdir(parents=True, exist_ok=True)
    for fmt, name in (("torch", "schedule.csv"), ("csv", "schedule_compute.csv")):
        cli.run(
            [
                "schedule",
                "--schedule",
                schedule,
                "--pp",
                str(PP),
                "--microbatches",
                str(m),
                "--vpp",
                str(vpp),
                "--format",
                fmt,
                "--out",
                str(folder / name),
            ]
        )
    tune = {
        "format": "tightpipe-tune/1",
        "schedule": schedule,
        "pp": PP,
        "vpp": vpp,
        "num_stages": PP * vpp,
        "microbatches": m,
        "micro_batch_size": MICROBATCH,
        "placement": placement,
        "stage_to_rank": stage_to_rank(placement, PP, PP * vpp),
        "module_fqns_per_model_part": fqns,
        "files": {"compute_comms": "schedule.csv", "compute": "schedule_compute.csv"},
        "change": True,
        "why": "written by test_torch_titan",
        "prediction": {},
    }
    (folder / "tune.json").write_text(json.dumps(tune, indent=1))
    return folder


def test_names_and_config(tmp_path: Path) -> None:
    for id_, (schedule, vpp, placement, fqns) in TUNES.items():
        folder = write_tune(tmp_path / id_, schedule, vpp, placement, fqns)
        cfg = titan_config(folder)
        assert cfg == {
            "pipeline_parallel_degree": PP,
            "pipeline_parallel_schedule": EXPECTED_NAME[id_],
            "pipeline_parallel_schedule_csv": str((folder / "schedule_compute.csv").resolve()),
            "module_fqns_per_model_part": fqns,
            "pipeline_parallel_layers_per_stage": None,
            "pipeline_parallel_microbatch_size": MICROBATCH,
        }, id_
        assert titan_config(folder / "tune.json") == cfg == titan_config(read_tune(folder))
        assert titan_local_batch_size(folder) == M * MICROBATCH
        text = titan_snippet(folder)
        assert f"pipeline_parallel_schedule='{EXPECTED_NAME[id_]}'" in text
        assert f"local_batch_size={M * MICROBATCH}" in text
        assert "--parallelism.module_fqns_per_model_part tok_embeddings,layers.0" in text
    assert titan_schedule_name("loop", 4, 3) == "Interleaved1F1B"
    args = titan_cli_args(tmp_path / "zb-v")
    i = args.index("--parallelism.module_fqns_per_model_part")
    assert args[i + 1 : i + 5] == [
        "tok_embeddings,layers.0",
        "layers.1",
        "layers.2",
        "layers.3,norm,lm_head",
    ]
    assert args[-2:] == ["--training.local_batch_size", str(M * MICROBATCH)]
    assert "--parallelism.pipeline_parallel_layers_per_stage" in args


def _bad(tmp_path: Path, change: dict[str, Any], drop: str = "") -> str:
    folder = write_tune(tmp_path / "bad", "zb-v", 2, "v", FOUR_STAGES)
    tune = json.loads((folder / "tune.json").read_text())
    tune.update(change)
    tune.pop(drop, None)
    (folder / "tune.json").write_text(json.dumps(tune))
    with pytest.raises(ValueError) as e:  # TuneFileError is one
        titan_config(folder)
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def test_bad_tune_results(tmp_path: Path) -> None:
    assert "format 'x', expected 'tightpipe-tune/1'" in _bad(tmp_path, {"format": "x"})
    assert "'num_stages' is 4, but pp x vpp = 2 x 1 = 2" in _bad(tmp_path, {"vpp": 1})
    assert "'stage_to_rank' is [0, 1, 0, 1], but placement 'v'" in _bad(
        tmp_path, {"stage_to_rank": [0, 1, 0, 1]}
    )
    assert "'placement' is 'w'" in _bad(tmp_path, {"placement": "w"})
    assert "4 stages, but 3 module lists" in _bad(
        tmp_path, {"module_fqns_per_model_part": FOUR_STAGES[:3]}
    )
    assert "puts 'layers.1' on stages 1 and 2" in _bad(
        tmp_path, {"module_fqns_per_model_part": [[TOK, L[0]], [L[1]], [L[1]], [NORM, HEAD]]}
    )
    assert "stage 2 is empty" in _bad(
        tmp_path, {"module_fqns_per_model_part": [[TOK, L[0]], [L[1]], [], [NORM, HEAD]]}
    )
    assert "'microbatches' is 0" in _bad(tmp_path, {"microbatches": 0})
    assert "'micro_batch_size' is 0" in _bad(tmp_path, {"micro_batch_size": 0})
    assert "missing or bad key 'micro_batch_size'" in _bad(tmp_path, {}, drop="micro_batch_size")
    # the file disagrees with tune.json
    assert "has 4 microbatches, but tune.json says 8" in _bad(tmp_path, {"microbatches": 8})
    msg = _bad(tmp_path, {"placement": "loop", "stage_to_rank": [0, 1, 0, 1]})
    assert (
        "places stages on ranks [0, 1, 1, 0], but tune.json's 'stage_to_rank' is [0, 1, 0, 1]"
        in msg
    )
    # torchtitan loads the compute-only form, not the compute_comms one
    folder = write_tune(tmp_path / "comms", "zb-v", 2, "v", FOUR_STAGES)
    (folder / "schedule_compute.csv").write_text((folder / "schedule.csv").read_text())
    with pytest.raises(TuneFileError, match="REDUCE_GRAD.*--format csv") as e:
        titan_config(folder)
    assert "\n" not in str(e.value)
    (folder / "schedule_compute.csv").unlink()
    with pytest.raises(TuneFileError, match="cannot read .*schedule_compute.csv"):
        check_tune(folder)
    # a V torchtitan cannot place; pp 1; not a tune result
    with pytest.raises(ValueError, match="places a V only with exactly 2 stages per rank"):
        titan_schedule_name("v", 2, 4)
    with pytest.raises(TuneFileError, match="cannot read .*tune.json"):
        titan_config(tmp_path / "missing")
    with pytest.raises(TypeError, match="must be the folder"):
        titan_config(3)  # type: ignore[arg-type]


def write_layers(path: Path) -> Path:
    """A module cost table as measure_layers writes it (tightpipe-layers/1), by hand, for
    torchtitan's Llama3 modules (microbatches of 2 x 16 tokens): blocks of 1 ms per F, I and W,
    a head three times as heavy. (measure_layers takes modules of one tensor in and out; Llama3's
    blocks also take masks and positions.)"""

    def layer(name: str, t: float) -> dict[str, Any]:
        act, par = 64 * 1024, 16 * 1024
        return {
            "name": name,
            "f": t,
            "i": 0.0 if name == TOK else t,
            "w": t,
            "act_bytes": act,
            "act_after_i_bytes": act,
            "input_bytes": 4096,
            "output_bytes": 4096,
            "param_bytes": par,
            "grad_bytes": par,
            "optimizer_bytes": 2 * par,
            "params": par // 4,
        }

    costs = [(TOK, 1e-4), *[(n, 1e-3) for n in L], (NORM, 1e-4), (HEAD, 3e-3)]
    path.write_text(
        json.dumps(
            {
                "format": "tightpipe-layers/1",
                "time_unit": "s",
                "microbatch_input_shape": [2, 16],
                "threads": 1,
                "torch": "2.15.0",
                "device": "cpu",
                "layers": [layer(n, t) for n, t in costs],
            }
        )
    )
    return path


def test_torchtitan_trains_the_tune_result(tmp_path: Path) -> None:
    cases = []
    for id_, (schedule, vpp, placement, fqns) in TUNES.items():
        folder = write_tune(tmp_path / id_, schedule, vpp, placement, fqns)
        cases.append(Case(id=id_, tune=str(folder), microbatches=M))
    # what `tightpipe tune` itself recommends for the table, free and among V schedules only
    layers = write_layers(tmp_path / "layers.json")
    for id_, extra in (("tuned", []), ("tuned-v", ["--schedules", "zb-v"])):
        cli.run(
            [
                "tune",
                "--layers",
                str(layers),
                "--pp",
                str(PP),
                "--microbatches",
                str(M),
                "--out",
                str(tmp_path / id_),
                *extra,
            ]
        )
        cases.append(Case(id=id_, tune=str(tmp_path / id_), microbatches=M))
    assert read_tune(tmp_path / "tuned-v").placement == "v"
    # the V file under a looped name: torchtitan places loop, PyTorch reads V off the file
    cases.append(
        Case(id="mismatch", tune=str(tmp_path / "zb-v"), microbatches=M, name="Interleaved1F1B")
    )
    per_rank = spawn(PP, run_cases, cases, pg_timeout=60)
    failures = []
    for rank, results in enumerate(per_rank):
        assert [r["id"] for r in results] == [c.id for c in cases]
        for r in results:
            where = f"{r['id']} rank {rank}"
            if r["id"] == "mismatch":
                if "error" not in r:
                    failures.append(f"{where}: trained under the wrong name")
                continue
            if "error" in r:
                failures.append(f"{where}: {r['error']}")
                continue
            mine = read_tune(tmp_path / r["id"]).stages_of(rank)
            if not (r["stages"] == r["titan_stages"] == mine):
                failures.append(
                    f"{where}: torchtitan built stages {r['stages']} (its mapping "
                    f"{r['titan_stages']}), the file places {mine}"
                )
            if r["schedule_class"] != "_PipelineScheduleRuntime":
                failures.append(f"{where}: {r['schedule_class']}")
            if not r["grad_abs_sum"] > 0:
                failures.append(f"{where}: no gradient")
            if r["grad_vs_model"] > 1:  # |diff| / (1e-6 + 1e-4 |reference|)
                failures.append(f"{where}: gradients vs the model {r['grad_vs_model']:.3g}")
            if "losses" in r and (len(r["losses"]) != M or r["loss_vs_model"] > 1e-5):
                failures.append(f"{where}: losses {r['losses']} ({r['loss_vs_model']})")
            if rank == 0 and r["cli_ok"] is not True:
                failures.append(f"{where}: the command-line form parses to other values")
    assert not failures, "\n".join(failures)
    for i, case in enumerate(cases[:-1]):
        # every parameter compared once; the losses came from the rank with the last stage
        params = sorted(per_rank[0][i]["params"] + per_rank[1][i]["params"])
        assert params == per_rank[0][i]["all_params"], case.id
        assert sum("losses" in per_rank[r][i] for r in range(PP)) == 1, case.id
    errors = [per_rank[r][-1]["error"] for r in range(PP)]
    assert any("PipeliningMetadataError" in e for e in errors), errors
