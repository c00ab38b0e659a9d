"""The closed loop at toy size (docs/torch.md section 7): measure the modules, tune, apply in one
call on 2 gloo processes, and the step's losses and gradients equal the unsplit model's; the
prediction tune writes is what `tightpipe simulate` gives for its files; tune keeps a setup
that is already good; bad input is one line."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from tightpipe import cli
from tightpipe.errors import CliError
from tightpipe.torch.gpt import GptConfig, batch, loss_fn
from tightpipe.torch.launch import spawn
from tightpipe.torch.layers import measure_layers
from tightpipe.torch.tune import measure_host_time, read_tune, tune
from tune_worker import MICROBATCH, model_modules, reference, run_tuned

CFG = GptConfig(vocab=512, seq=16, d_model=32, heads=2)
LAYERS = 4  # modules: tok_embeddings, layers.0-3, norm, output


@pytest.fixture(scope="module")
def layers_json(tmp_path_factory):
    torch.set_num_threads(1)
    from tightpipe.torch.gpt import make_layered

    model = make_layered(CFG, LAYERS, 0)
    tokens, targets = batch(CFG, MICROBATCH)
    path = tmp_path_factory.mktemp("tune") / "layers.json"
    measure_layers(model, tokens, loss_fn=loss_fn, target=targets, reps=3, out=path)
    return str(path)


def test_tune_applies_and_trains_like_the_unsplit_model(layers_json, tmp_path):
    results = []
    # What tune recommends from the measured costs, then one per placement (looped v = 2, V).
    # (Without a current setup tune always writes its pick.)
    for k, schedules in enumerate([None, ["interleaved"], ["zb-v-auto", "zb-v"]]):
        current = {"current_split": [4, 3], "current_schedule": "Schedule1F1B"} if k == 0 else {}
        res = tune(
            layers_json, 2, 4, out=tmp_path / str(k), schedules=schedules, min_gain=0.0, **current
        )  # type: ignore[arg-type]
        assert os.path.isfile(res.compute_comms_csv) and os.path.isfile(res.compute_csv)
        names = model_modules(CFG, LAYERS)[1]
        assert [n for part in res.module_fqns_per_model_part for n in part] == names
        assert ("current" in res.table) == (k == 0)
        results.append(res)
    assert results[1].placement == "loop" and results[1].vpp == 2
    assert results[2].placement == "v"
    ref_losses, ref_grads = reference(CFG, LAYERS, 4)
    per_rank = spawn(2, run_tuned, CFG, LAYERS, results, timeout=300, pg_timeout=60)
    for k, res in enumerate(results):
        losses = [x for r in per_rank for x in r[k]["losses"]]
        assert losses == pytest.approx(ref_losses, rel=1e-5), res.schedule
        grads = {n: g for r in per_rank for n, g in r[k]["grads"].items()}
        assert set(grads) == set(ref_grads), res.schedule
        for n, g in grads.items():
            torch.testing.assert_close(
                torch.from_numpy(g), ref_grads[n], rtol=1e-4, atol=1e-6, msg=n
            )


@pytest.mark.parametrize(
    "host, slowdown",
    [(None, None), ({"f": 300.0, "b": 500.0, "w_module": 40.0}, None), (None, 1.3)],
)
def test_tune_prediction_is_what_simulate_gives(layers_json, tmp_path, host, slowdown):
    """tune's prediction is simulate's of the same files: with host time, and with the ranks'
    cores slowing each other (core_slowdown: simulate --core-slowdown the same)."""
    res = tune(
        layers_json,
        2,
        4,
        out=tmp_path,
        current_split=[4, 3],
        current_schedule="1f1b",
        host_time_us=host,
        core_slowdown=slowdown,
    )
    with open(os.path.join(res.directory, "tune.json")) as f:
        said = json.load(f)["host_time_s"]
    # A CPU table measured under glibc's default malloc gets a note with the fix (steady_malloc).
    with open(layers_json) as f:
        default_malloc = json.load(f)["malloc"] == "default"
    assert len(res.notes) == (1 if default_malloc else 0), res.notes
    for note in res.notes:
        assert "default malloc" in note and "steady_malloc()" in note and note in res.table
    assert {k: v * 1e6 for k, v in said.items() if v} == pytest.approx(host or {})
    sim = json.loads(
        cli.run(
            [
                "simulate",
                "--schedule",
                res.compute_csv,
                "--costs",
                os.path.join(res.directory, "costs.json"),
                "--engine",
                "torch",
                "--json",
                *(["--core-slowdown", repr(slowdown)] if slowdown else []),
            ]
        )
    )
    pred = res.prediction
    assert ("core_sharing" in sim) == ("core_sharing" in pred) == (slowdown is not None)
    assert sim["makespan"] == pytest.approx(pred["step_s"], rel=1e-12)
    assert sim["bubble_ratio"] == pytest.approx(pred["bubble_ratio"], rel=1e-12, abs=1e-15)
    assert [r["bubble_ratio"] for r in sim["per_rank"]] == pytest.approx(
        [r["bubble_ratio"] for r in pred["ranks"]], rel=1e-12, abs=1e-15
    )
    with open(os.path.join(res.directory, "prediction.json")) as f:
        assert json.load(f)["makespan"] == pytest.approx(pred["step_s"], rel=1e-12)


def _balanced(tmp_path, blocks=8):
    """A balanced model's table: tiny first and last modules, equal blocks."""

    def entry(name, t):
        return {
            "name": name,
            "f": t,
            "i": t,
            "w": t,
            "act_bytes": 1000,
            "act_after_i_bytes": 1000,
            "input_bytes": 100,
            "output_bytes": 100,
            "param_bytes": 4000,
            "grad_bytes": 4000,
            "optimizer_bytes": 8000,
            "params": 1000,
        }

    layers = [entry("embed", 1e-5)] + [entry(f"layers.{k}", 1e-2) for k in range(blocks)]
    layers.append(entry("head", 1e-5))
    path = tmp_path / "balanced.json"
    path.write_text(
        json.dumps(
            {
                "format": "tightpipe-layers/1",
                "time_unit": "s",
                "microbatch_input_shape": [2, 16],
                "layers": layers,
            }
        )
    )
    return str(path)


def test_tune_keeps_1f1b_when_it_is_enough(tmp_path):
    res = tune(
        _balanced(tmp_path),
        2,
        32,
        out=tmp_path / "out",
        current_split=[5, 5],
        current_schedule="Schedule1F1B",
    )
    assert not res.change, res.why
    assert "1F1B is enough" in res.why and "Keep the current setup" in res.why
    # The files hold the current setup: applying them changes nothing.
    assert res.schedule == "1f1b" and res.module_fqns_per_model_part[0][0] == "embed"
    assert [len(s) for s in res.module_fqns_per_model_part] == [5, 5]


@pytest.mark.parametrize(
    "args, words",
    [
        (["--pp", "20", "--microbatches", "8"], "cannot be split further"),
        (
            ["--pp", "2", "--microbatches", "8", "--memory-limit-gib", "1e-6"],
            "no candidate fits it per rank: the smallest need is",
        ),
        (
            [
                "--pp",
                "2",
                "--microbatches",
                "8",
                "--current-split",
                "3,3",
                "--current-schedule",
                "1f1b",
            ],
            "--current-split 3,3: 6 modules",
        ),
        (
            [
                "--pp",
                "2",
                "--microbatches",
                "8",
                "--current-split",
                "5,5",
                "--current-schedule",
                "ScheduleInterleavedZeroBubble",
            ],
            "give the CSV",
        ),
        (["--pp", "2", "--microbatches", "8", "--traces", "a.json"], "--traces without"),
    ],
)
def test_tune_bad_input_is_one_line(tmp_path, args, words):
    with pytest.raises(CliError) as e:
        cli.run(["tune", "--layers", _balanced(tmp_path), *args])
    assert words in str(e.value)
    assert str(e.value).count("\n") == 0


def test_tune_refuses_traces_without_pp_ranges(tmp_path):
    """A Schedule1F1B run's traces (PyTorch records no PP: range in its loop): one line that
    names the fix."""
    data = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "torch_cpu_p2")
    traces = [os.path.join(data, f"rank{r}.json.gz") for r in (0, 1)]
    sched = os.path.join(data, "schedule.csv")
    proc = subprocess.run(
        [
            cli.find_binary(),
            "tune",
            "--layers",
            _balanced(tmp_path),
            "--pp",
            "2",
            "--traces",
            *traces,
            "--schedule-file",
            sched,
            "--current-split",
            "5,5",
        ],
        capture_output=True,
        text=True,
    )
    # The committed run is tightpipe's 1f1b in the runtime: it has PP: ranges, so it fits.
    assert proc.returncode == 0, proc.stderr
    assert "current" in proc.stdout


def test_tune_python_arguments_are_checked_first(layers_json):
    with pytest.raises(TypeError, match="pp="):
        tune(layers_json, "2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pp=0"):
        tune(layers_json, 0)
    with pytest.raises(TypeError, match="microbatches="):
        tune(layers_json, 2, 2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no such file"):
        tune("/nonexistent/layers.json", 2)
    with pytest.raises(TypeError, match="current_split="):
        tune(layers_json, 2, 4, current_split="4,3")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="tune.json"):
        read_tune("/nonexistent")
    with pytest.raises(ValueError, match="host_time_us: unknown key 'x'"):
        tune(layers_json, 2, 4, host_time_us={"x": 1.0})
    with pytest.raises(ValueError, match=r"host_time_us\['f'\]=-1"):
        tune(layers_json, 2, 4, host_time_us={"f": -1})
    with pytest.raises(ValueError, match="both given"):
        tune(layers_json, 2, 4, host_time_us={"f": 1.0}, action_overhead_us=1.0)
    with pytest.raises(ValueError, match="cores=-1"):
        tune(layers_json, 2, 4, cores=-1)
    with pytest.raises(ValueError, match="core_slowdown=0.5"):
        tune(layers_json, 2, 4, core_slowdown=0.5)
    with pytest.raises(ValueError, match="pp=1"):
        measure_host_time(pp=1)
    with pytest.raises(ValueError, match="sleep_s=0"):
        measure_host_time(sleep_s=0)
    with pytest.raises(ValueError, match="layers='real'"):
        measure_host_time(layers="real")
