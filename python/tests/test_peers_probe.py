"""The engine's host-time probe (issue 49, docs/peers.md "Predicted from the probe"): at toy size
it returns simulate's --host-time-us form, the binary accepts it, and the prediction moves as
with_host_time's arithmetic says (every F and B of the table raised by the probe's host time).
An engine or transport with no probe is refused in one line."""

import dataclasses
import json
import types

import pytest

from peers_util import need, need_tightpipe
from tightpipe.peers.common import PeerError, make_costs
from tightpipe.peers.compare import (
    PROBE_ENGINES,
    EngineHostTime,
    check_probe,
    measure_engine_host_time,
    predict_from_probe,
    simulate,
)


def shape(m: int):
    """What compare.simulate reads of a run: its schedule and shape (1F1B, p = 2)."""
    return types.SimpleNamespace(
        schedule="1f1b", pp=2, vpp=1, microbatches=m, options={}, costs=make_costs(2, 10.0, 20.0)
    )


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
    assert costs["link"] == {"latency": h.link_ms, "overhead": h.op_overhead_ms}
    assert h.costs(run.costs, link_only=True)["link"]["latency"] == h.link_ms
    # each rank: 1 operation, 2 (send_forward_recv_backward or its mirror), 1: 4 in 3 calls
    assert h.ops_per_call == pytest.approx(4 / 3)
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


def test_the_engines_call_is_paid_per_operation_at_each_end_and_the_link_per_message():
    """The probe's message is the link's ping-pong plus the engine's call around it; the
    prediction pays the call per p2p operation (call_ms over the probe's operations per call) as
    compute time of the sending and of the receiving rank (`link.overhead`), and the link per
    message, whether the engine batches its calls (megatron), posts them and waits later
    (megatron-overlap) or blocks on each (deepspeed). An older probe without the count is
    refused in one line."""
    need_tightpipe()
    h = EngineHostTime(
        engine="megatron",
        transport="gloo",
        host_time_us={"f": 400.0, "b": 450.0},
        message_ms=0.3,
        link_ms=0.1,
        tail_ms=0.0,
        ops_per_call=2.0,
        probe={},
    )
    assert h.op_overhead_ms == pytest.approx(0.1)
    assert h.costs(make_costs(2, 5.0, 10.0))["link"] == pytest.approx(
        {"latency": 0.1, "overhead": 0.1}
    )
    assert h.costs(make_costs(2, 5.0, 10.0), link_only=True)["link"] == pytest.approx(
        {"latency": 0.1, "overhead": 0.0}
    )
    # a probe whose ping-pong ran slower than the engine's messages charges no negative call
    assert dataclasses.replace(h, link_ms=0.5).op_overhead_ms == 0.0
    run = types.SimpleNamespace(
        schedule="interleaved",
        pp=2,
        vpp=2,
        microbatches=4,
        options={},
        costs=make_costs(4, 5.0, 10.0),
    )
    for profile in ("megatron", "megatron-overlap"):
        got = predict_from_probe(run, profile, h)["makespan"]
        # the same prediction with the call charged nowhere is shorter by at least one call per
        # compute of a rank: 2 m v computes per rank, each posting 1-2 operations of 0.1 ms
        bare = simulate(run, profile, h.costs(run.costs, link_only=True), h.host_time_flag())[
            "makespan"
        ]
        assert got >= bare + 2 * 4 * 2 * 0.1 - 1e-9, (profile, got, bare)
    doc = h.to_json()
    assert EngineHostTime.from_json(json.loads(json.dumps(doc))) == h
    del doc["ops_per_call"]
    with pytest.raises(PeerError) as e:
        EngineHostTime.from_json(doc)
    assert "ops_per_call" in str(e.value) and "hint:" in str(e.value)
    assert "\n" not in str(e.value)
