"""measure_layers (tightpipe.torch.layers) without a process group: the JSON contract that
`tightpipe tune --layers` reads, bytes against hand counts, F/I/W through PyTorch's own split
backward ordered by FLOPs, and the bad inputs refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

from tightpipe.torch import measure_layers
from tightpipe.torch.gpt import GptConfig, batch, loss_fn, make_layered
from tightpipe.torch.layers import LAYER_KEYS, top_level_modules

CFG = GptConfig(vocab=64, seq=16, d_model=32, heads=2)
MB = 4  # sequences per microbatch
F32 = 4


# Every test with one intra-op thread, as a pipeline rank runs (conftest.py's one_thread).
pytestmark = pytest.mark.usefixtures("one_thread")


def test_contract_keys_and_bytes(tmp_path):
    model = make_layered(CFG, 2)
    tokens, targets = batch(CFG, MB)
    out = tmp_path / "layers.json"
    table = measure_layers(model, tokens, loss_fn=loss_fn, target=targets, reps=2, out=out)
    assert json.loads(out.read_text()) == table
    assert list(table) == [
        "format",
        "time_unit",
        "microbatch_input_shape",
        "threads",
        "torch",
        "device",
        "malloc",
        "layers",
    ]
    assert table["malloc"] == "default"  # steady_malloc() never ran in this process
    assert table["format"] == "tightpipe-layers/1" and table["time_unit"] == "s"
    assert table["microbatch_input_shape"] == [MB, CFG.seq]
    assert table["threads"] == 1 and table["device"] == "cpu"
    assert table["torch"] == torch.__version__.split("+")[0]
    layers = table["layers"]
    assert [e["name"] for e in layers] == [
        "tok_embeddings",
        "layers.0",
        "layers.1",
        "norm",
        "output",
    ]
    for e in layers:
        assert tuple(e) == LAYER_KEYS
        for k in ("f", "i", "w", "b"):
            assert isinstance(e[k], float) and e[k] >= 0, (e["name"], k)
        for k in LAYER_KEYS[5:]:
            assert isinstance(e[k], int) and e[k] >= 0, (e["name"], k)
    c, v, t = CFG.d_model, CFG.vocab, CFG.seq
    numel = {
        "tok_embeddings": v * c + t * c,
        "layers.0": 12 * c * c + 13 * c,
        "layers.1": 12 * c * c + 13 * c,
        "norm": 2 * c,
        "output": v * c,
    }
    act = MB * t * c * F32
    for e in layers:
        n = numel[e["name"]]
        assert e["params"] == n
        assert e["param_bytes"] == e["grad_bytes"] == n * F32
        assert e["optimizer_bytes"] == 8 * n
        assert e["output_bytes"] == (MB * t * v * F32 if e["name"] == "output" else act)
        assert e["input_bytes"] == (tokens.numel() * 8 if e["name"] == "tok_embeddings" else act)
        assert e["act_bytes"] > 0 and e["act_after_i_bytes"] > 0
        assert e["f"] > 0 and e["w"] > 0
    # PyTorch's runtime runs no I on the first stage and the whole backward in its W.
    assert layers[0]["i"] == 0.0 and layers[0]["act_after_i_bytes"] == layers[0]["act_bytes"]
    assert layers[0]["b"] == layers[0]["w"]  # its W is its whole backward already
    assert all(e["b"] > 0 for e in layers[1:])  # one autograd pass, timed on its own
    assert all(e["i"] > 0 for e in layers[1:])
    # dW of the head needs its input (and the gradient I captured for W): held after I.
    assert layers[-1]["act_after_i_bytes"] >= act


def test_list_of_modules_names_and_frozen():
    head = nn.Linear(8, 8)
    head.bias.requires_grad_(False)
    x = torch.randn(2, 3, 8)
    table = measure_layers(
        [nn.Linear(8, 8), head],
        x,
        loss_fn=lambda y, t: y.pow(2).mean(),
        target=None,
        reps=1,
        warmup=0,
        optimizer_bytes_per_param=12,
    )
    a, b = table["layers"]
    assert (a["name"], b["name"]) == ("0", "1")
    assert b["param_bytes"] == 72 * F32 and b["grad_bytes"] == 64 * F32
    assert b["optimizer_bytes"] == 12 * 64 and b["params"] == 72


def test_bigger_head_costs_more_than_a_layernorm():
    # LayerNorm: ~10 FLOP per element; the head 2 * d * V per token (V = 4096: >20x the FLOPs).
    d, big = 32, 4096
    emb, ln, head = nn.Embedding(big, d), nn.LayerNorm(d), nn.Linear(d, big, bias=False)
    tokens = torch.randint(0, big, (MB, 16))
    targets = torch.randint(0, big, (MB, 16))
    table = measure_layers(
        [emb, ln, head],
        tokens,
        loss_fn=loss_fn,
        target=targets,
        names=["tok_embeddings", "norm", "output"],
        reps=5,
    )
    _, norm, out = table["layers"]
    for k in ("f", "i", "w"):
        assert out[k] > norm[k], (k, out, norm)


def test_linear_saves_at_least_its_input():
    d = 16
    x = torch.randn(MB, 8, d)
    mods = [nn.Linear(d, d), nn.Linear(d, d)]
    table = measure_layers(mods, x, loss_fn=lambda y, t: y.pow(2).mean(), target=None, reps=1)
    size = x.numel() * F32
    for e in table["layers"]:
        assert e["act_bytes"] >= size and e["input_bytes"] == size
    # Its weight gradient needs the input: still held between I and W.
    assert table["layers"][1]["act_after_i_bytes"] >= size


def test_gradients_and_modes_put_back():
    lin = nn.Linear(4, 4)
    lin.weight.grad = torch.ones_like(lin.weight)
    measure_layers(
        [nn.Linear(4, 4), lin],
        torch.randn(2, 4),
        loss_fn=lambda y, t: y.sum(),
        target=None,
        reps=1,
        warmup=0,
    )
    assert torch.equal(lin.weight.grad, torch.ones_like(lin.weight))
    assert lin.bias.grad is None


def test_model_children_expand_like_torchtitan():
    names = [n for n, _ in top_level_modules(make_layered(CFG, 3))]
    assert names == ["tok_embeddings", "layers.0", "layers.1", "layers.2", "norm", "output"]


def _sq(y, t):
    return y.pow(2).mean()


BAD = [
    ({"modules": []}, ValueError, "modules=\\[\\]"),
    ({"modules": "abc"}, TypeError, "modules is a str"),
    ({"modules": [nn.Linear(4, 4), 3]}, TypeError, "modules\\[1\\] is a int"),
    ({"modules": nn.Linear(4, 4)}, ValueError, "without children"),
    ({"names": ["a"]}, ValueError, "names has 1 entries for 2 modules"),
    ({"names": ["a", "a"]}, ValueError, "names\\[1\\]='a' repeats names\\[0\\]"),
    ({"names": "ab"}, TypeError, "names='ab'"),
    ({"names": ["a", 2]}, TypeError, "names\\[1\\]=2"),
    ({"reps": 0}, ValueError, "reps=0"),
    ({"reps": 2.5}, ValueError, "reps=2.5"),
    ({"reps": True}, ValueError, "reps=True"),
    ({"warmup": -1}, ValueError, "warmup=-1"),
    ({"optimizer_bytes_per_param": -1}, ValueError, "optimizer_bytes_per_param=-1"),
    ({"optimizer_bytes_per_param": float("nan")}, ValueError, "optimizer_bytes_per_param=nan"),
    ({"example_input": [1, 2]}, TypeError, "example_input is a list"),
    ({"loss_fn": None}, TypeError, "loss_fn=None is not callable"),
    ({"out": 3}, TypeError, "out=3"),
    (
        {"modules": [nn.Linear(4, 8), nn.Linear(4, 2)], "names": ["up", "down"]},
        ValueError,
        "module 'down' \\(modules\\[1\\]\\) cannot take the output of module 'up' "
        "\\(Tensor\\(2, 8\\) torch.float32\\)",
    ),
    (
        {"modules": [nn.Linear(3, 4), nn.Linear(4, 4)]},
        ValueError,
        "module '0' \\(modules\\[0\\]\\) cannot take example_input",
    ),
    (
        {"loss_fn": lambda y, t: y[5]},
        ValueError,
        "loss_fn cannot take the output of the last module '1'",
    ),
    ({"loss_fn": lambda y, t: y}, ValueError, "not a scalar tensor"),
]


@pytest.mark.parametrize("kw,exc,msg", BAD)
def test_bad_input_is_one_line(kw, exc, msg):
    args = {
        "modules": [nn.Linear(4, 4), nn.Linear(4, 4)],
        "example_input": torch.randn(2, 4),
        "loss_fn": _sq,
        "target": None,
        "reps": 1,
        "warmup": 0,
    }
    args.update(kw)
    with pytest.raises(exc, match=msg) as info:
        measure_layers(args.pop("modules"), args.pop("example_input"), **args)
    assert "\n" not in str(info.value) and "hint:" in str(info.value)


# One process per allocator: steady_malloc() is process-wide and cannot be undone. The step is a
# forward and backward of a GPT with a 4 MiB logits tensor (glibc mmaps each tensor that large).
_FAULTS = """
import json, resource, sys, torch
from tightpipe.torch import malloc_mode, measure_layers, steady_malloc
from tightpipe.torch.gpt import GptConfig, batch, loss_fn, make_layered
if sys.argv[1] == "steady":
    steady_malloc()
torch.set_num_threads(1)
cfg = GptConfig(vocab=8192, seq=64, d_model=128, heads=2)
model = make_layered(cfg, 2)
tokens, targets = batch(cfg, 2)
def step():
    loss_fn(model(tokens), targets).backward()
for _ in range(5):
    step()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
table = measure_layers(model, tokens, loss_fn=loss_fn, target=targets, reps=1)
print(json.dumps({"faults": faults, "mode": malloc_mode(), "table": table["malloc"]}))
"""


def test_steady_malloc_steps_without_page_faults():
    """The allocator a user's ranks and measure_layers should share: glibc's default faults a
    large tensor's pages in afresh most steps (20 steps after 5 warm-up ones: 31,000-38,000
    pages on a Zen 4 core, 9,000-33,000 over 10 after 3); with steady_malloc() the same 20 steps
    fault 0-2,048 pages in all (a 4 MiB tensor placed anew once or twice while the heap's free
    lists settle). measure_layers records which allocator it ran under."""
    got = {}
    for mode in ("default", "steady"):
        run = subprocess.run(
            [sys.executable, "-c", _FAULTS, mode],
            capture_output=True,
            text=True,
            timeout=300,
            env=dict(os.environ),
            check=False,
        )
        assert run.returncode == 0, run.stderr
        got[mode] = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["default"]["mode"] == got["default"]["table"] == "default"
    assert got["steady"]["mode"] == got["steady"]["table"] == "steady"
    # By default at least a MiB (256 pages) a step; with steady_malloc a quarter of that or less.
    assert got["default"]["faults"] >= 20 * 256, got
    assert 4 * got["steady"]["faults"] <= got["default"]["faults"], got
