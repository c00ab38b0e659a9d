"""Orders, token for token (issue 44 item 2): Megatron-Core's 1F1B and interleaved (with its
microbatch groups) and DeepSpeed's 1F1B at p = 2 and 4, m = p .. 4p, as the engines ran them,
against `tightpipe schedule`'s generators. Every run also checks its loss against the data (the
harness raises when an engine moved the wrong tensors)."""

import pytest

from peers_util import deepspeed_runs, group_for, megatron_runs, need, need_tightpipe, order_runs
from tightpipe.peers.compare import first_differences, generator_orders, measured_costs, simulate


@pytest.mark.parametrize("p", [2, 4])
def test_megatron_1f1b_is_our_1f1b(p):
    need_tightpipe()
    runs = order_runs(megatron_runs(p, 1))
    assert [r.microbatches for r in runs] == list(range(p, 4 * p + 1))
    for r in runs:
        ours = generator_orders("1f1b", p, r.microbatches)
        assert first_differences(r.orders(), ours) == {}, (p, r.microbatches)


@pytest.mark.parametrize("p", [2, 4])
def test_megatron_interleaved_is_our_interleaved(p):
    """At every m, m = p included: megatron-core 0.19.2 warms up with (p - r - 1) x 2 + (v - 1) x g
    forwards (at most all m x v) and so does our generator (interleaved_warmup_forwards)."""
    need_tightpipe()
    v = 2
    runs = order_runs(megatron_runs(p, v))
    for r in runs:
        m = r.microbatches
        g = group_for(p, m)
        ours = generator_orders("interleaved", p, m, v, g)
        assert first_differences(r.orders(), ours) == {}, (p, m, g)
        # ... and `--engine megatron` runs it: the calls (with the leading ranks' aligned
        # receives) neither deadlock nor refuse an order the engine ran.
        assert simulate(r, "megatron", measured_costs(r))["makespan"] > 0, (p, m, g)


@pytest.mark.parametrize("p", [2, 4])
def test_deepspeed_1f1b_is_our_1f1b(p):
    need_tightpipe()
    runs = order_runs(deepspeed_runs(p))
    assert [r.microbatches for r in runs] == list(range(p, 4 * p + 1))
    for r in runs:
        ours = generator_orders("1f1b", p, r.microbatches)
        assert first_differences(r.orders(), ours) == {}, (p, r.microbatches)


@pytest.mark.parametrize("engine", ["megatron", "deepspeed"])
def test_every_message_is_recorded_at_both_ends(engine):
    """Each cross-rank message of a Megatron interleaved and a DeepSpeed run appears once as a
    SEND on its sender and once as a RECV on its receiver, named for the stage and microbatch
    (what the report matches on)."""
    for r in [megatron_runs(4, 2)[4] if engine == "megatron" else deepspeed_runs(4)[4]]:
        step = r.measured_steps()[0]
        sends, recvs = set(), set()
        for k in range(r.pp):
            for e in r.step_events(step, k):
                key = ("_B" in e.name, e.mb)
                if e.kind == "SEND":
                    dst = e.stage + (-1 if key[0] else 1)
                    sends.add(key + (e.stage, dst))
                elif e.kind == "RECV":
                    src = e.stage + (1 if key[0] else -1)
                    recvs.add(key + (src, e.stage))
        S, m = r.pp * r.vpp, r.microbatches
        assert len(sends) == 2 * (S - 1) * m
        assert sends == recvs


def test_megatron_overlap_is_our_interleaved_and_simulates():
    """overlap_p2p_comm (Megatron-LM's interleaved default): the same order as without it, every
    message recorded at both ends with the engine's wait on its handle, and `--engine
    megatron-overlap` runs the order."""
    need_tightpipe()
    need("megatron.core")
    from tightpipe.peers import megatron
    from tightpipe.peers.common import make_costs

    p, m = 4, 8
    run = megatron.run_many(
        p, [m], make_costs(2 * p, 2, 4), vpp=2, steps=2, batch_p2p=False, overlap=True
    )[0]
    assert first_differences(run.orders(), generator_orders("interleaved", p, m, 2, p)) == {}
    for k in run.measured_steps():
        for r in range(p):
            comm = [e for e in run.step_events(k, r) if e.kind in ("SEND", "RECV")]
            assert comm and all(e.end >= e.start for e in comm)
            # the steady state's calls are asynchronous: their events end at the engine's wait
            assert any(e.wait >= 0 for e in comm), (k, r)
    assert simulate(run, "megatron-overlap", measured_costs(run))["makespan"] > 0
