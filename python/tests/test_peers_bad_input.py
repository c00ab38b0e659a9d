"""Bad input to the peer harnesses (issue 44): each refused in one line naming it and the fix,
before any process is spawned."""

import json
import os
import subprocess
import sys

import pytest

from tightpipe.peers import deepspeed, megatron
from tightpipe.peers.common import PeerError, check_version, load_costs, make_costs

PYTHON_DIR = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))


def one_line(e: Exception) -> str:
    text = str(e)
    assert "\n" not in text, text
    assert "hint:" in text, text
    return text


def test_cost_table_whose_stage_count_does_not_match_the_run():
    with pytest.raises(PeerError) as e:
        megatron.run(2, 4, make_costs(3, 10, 20), vpp=2, batch_p2p=False)
    assert "has 3 stage(s) but the run (p=2 x v=2) has 4" in one_line(e.value)
    with pytest.raises(PeerError) as e:
        deepspeed.run(4, 8, make_costs(2, 10, 20))
    assert "has 2 stage(s) but the run (p=4, one stage per rank) has 4" in one_line(e.value)


def test_cost_table_errors_name_the_entry(tmp_path):
    path = tmp_path / "costs.json"
    path.write_text(json.dumps({"time_unit": "ms", "stages": [{"stage": 0, "f": 1}]}))
    with pytest.raises(PeerError) as e:
        load_costs(str(path))
    assert f'{path}: stages[0]: needs "f" and "b"' in one_line(e.value)
    path.write_text(json.dumps({"time_unit": "flops", "stages": []}))
    with pytest.raises(PeerError) as e:
        load_costs(str(path))
    assert "time_unit 'flops' is not a time" in one_line(e.value)
    path.write_text(json.dumps({"stages": [{"stage": 1, "f": 1, "b": 2}]}))
    with pytest.raises(PeerError) as e:
        load_costs(str(path))
    assert "lacks stage 0" in one_line(e.value)


def test_engine_version_the_harness_does_not_know():
    with pytest.raises(PeerError) as e:
        check_version("megatron-core", "0.18.0")
    text = one_line(e.value)
    assert "megatron-core 0.18.0 is not a version the peer harness knows (known: 0.19.2)" in text
    assert "megatron-core==0.19.2" in text
    with pytest.raises(PeerError) as e:
        check_version("deepspeed", "0.17.1")
    assert "deepspeed 0.17.1 is not a version" in one_line(e.value)
    assert check_version("deepspeed", "0.19.8") == "0.19.8"


def test_schedule_the_engine_cannot_run():
    with pytest.raises(PeerError) as e:
        megatron.check_options(4, 1, 8, True, "zb-h1")
    assert "Megatron-Core does not run schedule 'zb-h1'" in one_line(e.value)
    with pytest.raises(PeerError) as e:
        deepspeed.check_options(4, 8, "interleaved")
    assert "DeepSpeed's PipelineEngine does not run schedule 'interleaved'" in one_line(e.value)


def test_p2_interleaved_with_batched_p2p_and_no_overlap():
    with pytest.raises(PeerError) as e:
        megatron.run(2, 4, make_costs(4, 5, 10), vpp=2, batch_p2p=True)
    text = one_line(e.value)
    assert "p = 2 interleaved with batched p2p and no overlap" in text
    assert "--no-batch-p2p" in text


def test_megatron_group_rules_are_refused_before_megatron_raises():
    with pytest.raises(PeerError) as e:
        megatron.check_options(4, 2, 6, True, "interleaved", group=4)
    assert "leaves a last group of 2 < p=4" in one_line(e.value)


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--pp", "2", "--vpp", "2", "--microbatches", "4"],
            "two sends and two receives to the one peer",
        ),
        (
            ["--pp", "2", "--microbatches", "4", "--schedule", "zb-h1"],
            "does not run schedule 'zb-h1'",
        ),
    ],
)
def test_cli_prints_one_line_and_exits_2(args, needle, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "tightpipe.peers.megatron", *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": PYTHON_DIR},
    )
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0] and lines[0].startswith("error: "), r.stderr


def test_counts_of_another_type_are_refused_before_any_comparison():
    # Issue 45: a string count raised TypeError ('<' between str and int), None too, and a float
    # count ran.
    from tightpipe.peers.common import check_int

    for mod in (megatron, deepspeed):
        for pp, m in (("2", 4), (None, 4), (2.5, 4), (True, 4), (2, "4"), (2, 4.0)):
            with pytest.raises(PeerError) as e:
                mod.run(pp, m, make_costs(2, 10, 20))
            assert "not an int" in one_line(e.value), (mod.__name__, pp, m)
    with pytest.raises(PeerError) as e:
        megatron.run(2, 4, make_costs(4, 10, 20), vpp=2.0)
    assert "--vpp 2.0 is a float, not an int" in one_line(e.value)
    check_int("--pp", 2)


def test_overlap_the_engine_does_not_run():
    """Megatron's overlap_p2p_comm needs virtual stages and individual p2p calls."""
    with pytest.raises(PeerError) as e:
        megatron.run(4, 8, make_costs(4, 10, 20), vpp=1, batch_p2p=False, overlap=True)
    assert "overlap_p2p_comm with one stage per rank" in one_line(e.value)
    with pytest.raises(PeerError) as e:
        megatron.run(4, 8, make_costs(8, 10, 20), vpp=2, batch_p2p=True, overlap=True)
    assert "overlap_p2p_comm with batch_p2p_comm" in one_line(e.value)
