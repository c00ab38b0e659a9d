"""Emulated layers (tightpipe.torch.emulate): F, I and W sleep their durations in the calls of
PyTorch's split backward that run them (stage_backward_input for I, stage_backward_weight for W),
real gradients flow, and in a pipelined zb-h1 run on 2 gloo processes each I and W action of the
profiled step lasts at least its sleep."""

from __future__ import annotations

import re
import statistics
import time

import pytest
import torch
from torch.distributed.pipelining._backward import stage_backward_input, stage_backward_weight

from emulate_worker import emulated_stages, run
from tightpipe.schedule import generate
from tightpipe.torch import EmulatedLayer, emulated_modules, measure_layers
from tightpipe.torch.emulate import _Sleeper
from tightpipe.torch.gpt import loss_fn
from tightpipe.torch.launch import spawn
from tightpipe.torch.trace import _load

SHAPE = (2, 4, 8)  # B, T, C
# An upper bound that is loose under load but still tells the phases apart: each sleep below
# is larger than this margin, so a phase that also ran another phase's sleep fails it.
MARGIN = 0.05


# Every test with one intra-op thread, as a pipeline rank runs (conftest.py's one_thread).
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("last", [False, True])
def test_each_phase_sleeps_in_its_own_call(last):
    f, i, w = 0.06, 0.12, 0.24
    layer = EmulatedLayer(f, i, w, SHAPE, last=last, name="layers.3")
    times = []
    for _ in range(2):
        layer.zero_grad(set_to_none=True)
        x = torch.randn(*SHAPE, requires_grad=True)
        t0 = time.perf_counter()
        y = layer(x)
        roots, grads = (
            ([loss_fn(y, torch.randint(0, 64, SHAPE[:2]))], None)
            if last
            else ([y], [torch.ones_like(y)])
        )
        t1 = time.perf_counter()
        _, groups = stage_backward_input(roots, grads, [x], layer.parameters())
        t2 = time.perf_counter()
        assert x.grad is not None and layer.scale.grad is None  # I: the input's gradient only
        stage_backward_weight(layer.parameters(), groups)
        t3 = time.perf_counter()
        assert layer.scale.grad is not None
        assert last == (layer.out is not None) and (not last or layer.out.grad is not None)
        times.append((t1 - t0, t2 - t1, t3 - t2))
    for k, sleep in enumerate((f, i, w)):
        # A sleep is shortened by at most its process's mean overshoot (emulate._Sleeper).
        assert all(t[k] >= sleep - _Sleeper.MAX_BIAS for t in times), (k, sleep, times)
        assert min(t[k] for t in times) < sleep + MARGIN, (k, sleep, times)


def test_gradients_are_real():
    # The emulated model's gradient equals the one autograd gives the same expression.
    layer = EmulatedLayer(0, 0, 0, SHAPE, name="a")
    x = torch.randn(*SHAPE, requires_grad=True)
    (layer(x) ** 2).sum().backward()
    assert torch.allclose(x.grad, 2 * x * layer.scale**2)
    assert torch.allclose(layer.scale.grad, (2 * x**2 * layer.scale).sum(dim=(0, 1)))


def test_modules_from_a_measured_table(tmp_path):
    table = measure_layers(
        [torch.nn.Embedding(64, 8), torch.nn.Linear(8, 64)],
        torch.randint(0, 64, SHAPE[:2]),
        loss_fn=loss_fn,
        target=torch.randint(0, 64, SHAPE[:2]),
        names=["emb", "head"],
        reps=1,
        warmup=0,
    )
    mods = emulated_modules(table, width=8, vocab=64)
    assert [(m.name, m.f, m.i, m.w) for m in mods] == [
        (e["name"], e["f"], e["i"], e["w"]) for e in table["layers"]
    ]
    tokens = torch.randint(0, 64, SHAPE[:2])
    out = mods[1](mods[0](tokens))
    assert out.shape == (*SHAPE[:2], 64)
    loss_fn(out, tokens).backward()
    assert all(p.grad is not None for m in mods for p in m.parameters())


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"format": "x"}, "format 'x', expected 'tightpipe-layers/1'"),
        ({"layers": []}, "no layers"),
        ({"layers": [{"name": "a", "f": -1, "i": 0, "w": 0}]}, "layers\\[0\\] \\('a'\\).*f=-1"),
        ({"microbatch_input_shape": [0]}, "microbatch_input_shape=\\[0\\]"),
    ],
)
def test_bad_tables(bad, msg):
    table = {
        "format": "tightpipe-layers/1",
        "time_unit": "s",
        "microbatch_input_shape": [2, 4],
        "layers": [{"name": "a", "f": 0, "i": 0, "w": 0}],
    }
    table.update(bad)
    with pytest.raises(ValueError, match=msg):
        emulated_modules(table)
    with pytest.raises(TypeError, match="layers_json is a int"):
        emulated_modules(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape=\\(\\)"):
        EmulatedLayer(0, 0, 0, ())


_PP = re.compile(r"PP:(\d+)([FIW])(\d+)$")


def test_zb_h1_pipelined_actions_last_their_sleeps(tmp_path):
    p, m, k = 2, 4, 2  # ranks, microbatches, layers per stage
    f, i, w = 0.004, 0.008, 0.012  # per layer
    sched = generate("zb-h1", pp=p, microbatches=m)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 64, (SHAPE[0] * m, SHAPE[1]), generator=g)
    targets = torch.randint(0, 64, (SHAPE[0] * m, SHAPE[1]), generator=g)
    pattern = str(tmp_path / "rank{rank}.json")
    results = spawn(p, run, sched, (f, i, w), SHAPE, k, tokens, targets, pattern)
    # Losses and gradients: those of the same emulated model, unpipelined.
    ref = emulated_stages((0, 0, 0), SHAPE, k, p)
    losses = []
    for tok, tgt in zip(tokens.chunk(m), targets.chunk(m), strict=True):
        x = tok
        for st in ref:
            x = st(x)
        loss = loss_fn(x, tgt)
        (loss / m).backward()
        losses.append(float(loss.detach()))
    assert results[p - 1][0] == pytest.approx(losses, rel=1e-6)
    for r in range(p):
        for s, grads in results[r][1].items():
            for name, gr in grads.items():
                want = dict(ref[s].named_parameters())[name].grad
                assert torch.allclose(torch.tensor(gr), want, rtol=1e-5, atol=1e-7), (s, name)
    # Each action's PP: range in the profiled step lasts its sleeps, each shortened by at most
    # its process's mean overshoot (emulate._Sleeper: sleeps last what they are asked on
    # average); the median over the microbatches is checked.
    low = _Sleeper.MAX_BIAS
    for r in range(p):
        doc = _load(pattern.format(rank=r))
        durs: dict[tuple[int, str], list[float]] = {}
        for e in doc["traceEvents"]:
            mt = _PP.match(str(e.get("name", ""))) if e.get("ph") == "X" else None
            if mt:
                durs.setdefault((int(mt[1]), mt[2]), []).append(e["dur"] * 1e-6)
        for s in sched.stages_of(r):
            assert [len(durs[(s, t)]) for t in "FIW"] == [m, m, m], (r, s, durs)
            med = {t: statistics.median(durs[(s, t)]) for t in "FIW"}
            assert med["F"] >= k * (f - low), (r, s, durs)
            if s == 0:
                # PyTorch's runtime runs no input backward on the first stage and the whole
                # backward in W: I runs no backward (its range may still hold the wait for the
                # gradient message), W sleeps the stage's I and W.
                assert med["W"] >= k * (i + w - 2 * low), (r, s, durs)
                assert min(durs[(s, "I")]) < k * i
            else:
                assert med["I"] >= k * (i - low), (r, s, durs)
                assert med["W"] >= k * (w - low), (r, s, durs)
                # the W sleep ran in W, not in I (I waits for no message on the last stage)
                assert min(durs[(s, "I")]) < k * (i + w)
