"""Orders, token for token (issue 44 item 2): Megatron-Core's 1F1B and interleaved (with its
microbatch groups) and DeepSpeed's 1F1B at p = 2 and 4, m = p .. 4p, as the engines ran them,
against `tightpipe schedule`'s generators. Every run also checks its loss against the data (the
harness raises when an engine moved the wrong tensors). docs/peers.md explains the one
difference."""
import pytest

from peers_util import deepspeed_runs, group_for, megatron_runs, need_tightpipe, order_runs
from tightpipe.peers.compare import first_differences, generator_orders


@pytest.mark.parametrize("p", [2, 4])
def test_megatron_1f1b_is_our_1f1b(p):
    need_tightpipe()
    runs = order_runs(megatron_runs(p, 1))
    assert [r.microbatches for r in runs] == list(range(p, 4 * p + 1))
    for r in runs:
        ours = generator_orders("1f1b", p, r.microbatches)
        assert first_differences(r.orders(), ours) == {}, (p, r.microbatches)


def megatron_warmup(p: int, v: int, g: int, rank: int, m: int) -> int:
    """megatron-core 0.19.2 get_pp_rank_microbatches: (p - r - 1) x 2 + (v - 1) x g forwards,
    at most all m x v (no rule for m == p)."""
    return min(m * v, (p - rank - 1) * 2 + (v - 1) * g)


@pytest.mark.parametrize("p", [2, 4])
def test_megatron_interleaved_is_ours_except_all_warmup_at_m_equal_p(p):
    need_tightpipe()
    v = 2
    runs = order_runs(megatron_runs(p, v))
    for r in runs:
        m = r.microbatches
        g = group_for(p, m)
        engine = r.orders()
        ours = generator_orders("interleaved", p, m, v, g)
        diff = first_differences(engine, ours)
        if m != p:
            assert diff == {}, (p, m, g, diff)
            continue
        # m == p: our generator warms up with every forward (the rule older Megatron-LM had);
        # megatron-core 0.19.2 runs its usual warm-up and then forward-backward pairs. The ranks
        # that differ are exactly those whose 0.19.2 warm-up is shorter than all m x v forwards,
        # and there the engine's first backward follows that warm-up and one more forward.
        short = {k for k in range(p) if megatron_warmup(p, v, g, k, m) < m * v}
        assert set(diff) == short, (p, m, diff)
        for k in short:
            first_b = next(i for i, a in enumerate(engine[k]) if "B" in a)
            assert first_b == megatron_warmup(p, v, g, k, m) + 1, (k, engine[k])
            assert sorted(engine[k]) == sorted(ours[k])  # the same actions, in another order


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
