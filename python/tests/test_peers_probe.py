"""The engine's host-time probe (issue 49, docs/peers.md "Predicted from the probe"): at toy size
it returns simulate's --host-time-us form, the binary accepts it, and the prediction moves as
with_host_time's arithmetic says (every F and B of the table raised by the probe's host time).
An engine or transport with no probe is refused in one line."""
import json
import types

import pytest
from peers_util import need, need_tightpipe

from tightpipe.peers.common import PeerError, make_costs
from tightpipe.peers.compare import (
    PROBE_ENGINES,
    check_probe,
    measure_engine_host_time,
    predict_from_probe,
    simulate,
)


def shape(m: int):
    """What compare.simulate reads of a run: its schedule and shape (1F1B, p = 2)."""
    return types.SimpleNamespace(schedule="1f1b", pp=2, vpp=1, microbatches=m, options={},
                                 costs=make_costs(2, 10.0, 20.0))


def test_probe_form_is_what_simulate_takes_and_moves_the_prediction_by_its_arithmetic():
    need("megatron.core")
    need_tightpipe()
    h = measure_engine_host_time("megatron", microbatches=2, steps=2, repeat=2, rounds=20)
    assert (h.engine, h.transport) == ("megatron", "gloo")
    assert set(h.host_time_us) == {"f", "b"}
    # a recorded compute lasts at least its asked sleep, so host-inclusive minus asked is >= 0
    assert all(0 <= v < 1e6 for v in h.host_time_us.values()), h.host_time_us
    assert h.link_ms > 0 and h.message_ms > 0 and h.tail_ms >= 0
    assert h.call_ms == pytest.approx(h.message_ms - h.link_ms)
    assert h.probe["samples"] == {"F": 8, "B": 8}  # p x m per kind, a measured step per run
    assert len(h.identical()) == 2 and all(one.runs == [] for one in h.identical())
    assert h.identical()[0].host_time_us.keys() == h.host_time_us.keys()
    assert json.loads(json.dumps(h.to_json())) == h.to_json()
    run = shape(4)
    costs = h.costs(run.costs)
    assert [s["f"] for s in costs["stages"]] == pytest.approx([10.0, 15.0])
    assert costs["link"]["latency"] == h.message_ms
    assert h.costs(run.costs, link_only=True)["link"]["latency"] == h.link_ms
    for engine in ("megatron", "deepspeed"):
        base = simulate(run, engine, costs)
        with_host = predict_from_probe(run, engine, h)
        # with_host_time: every stage's f and b plus the host time of that kind (us -> ms)
        raised = json.loads(json.dumps(costs))
        for st in raised["stages"]:
            st["f"] += h.host_time_us["f"] / 1e3
            st["i"] += h.host_time_us["b"] / 1e3
        want = simulate(run, engine, raised)
        assert with_host["makespan"] == pytest.approx(want["makespan"], rel=1e-9)
        assert with_host["makespan"] >= base["makespan"]
        assert "host time per action" in with_host["cost_source"], with_host["cost_source"]


def test_an_engine_or_transport_without_a_probe_is_refused_in_one_line():
    for engine, transport, want in (
        ("torch", "gloo", "engine 'torch' has no host-time probe here"),
        ("megatron-overlap", "gloo", "engine 'megatron-overlap' has no host-time probe"),
        ("megatron", "nccl", "engine 'megatron' has no measurement on transport 'nccl'"),
        ("deepspeed", "mpi", "engine 'deepspeed' has no measurement on transport 'mpi'"),
    ):
        with pytest.raises(PeerError) as e:
            check_probe(engine, transport)
        text = str(e.value)
        assert want in text and "hint:" in text and "\n" not in text, text
    assert set(PROBE_ENGINES) == {"megatron", "deepspeed"}
    with pytest.raises(PeerError) as e:
        measure_engine_host_time("megatron", pp=1)
    assert "hint:" in str(e.value) and "\n" not in str(e.value)
