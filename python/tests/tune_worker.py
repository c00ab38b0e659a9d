"""What each rank runs in test_torch_tune.py: the tuned split and schedule applied in one call
(build_tuned_runtime) on a fresh model, one training step, the losses and every gradient by its
name in the unsplit model.
Module-level so that the rank processes' start method (forkserver, or spawn) can pickle it."""

from __future__ import annotations

from typing import Any

import torch

from tightpipe.torch.gpt import GptConfig, batch, loss_fn, make_layered
from tightpipe.torch.layers import top_level_modules
from tightpipe.torch.tune import TuneResult, build_tuned_runtime

SEED = 0
MICROBATCH = 2


def model_modules(cfg: GptConfig, layers: int) -> tuple[list[Any], list[str]]:
    model = make_layered(cfg, layers, SEED)
    named = top_level_modules(model)
    return [m for _, m in named], [n for n, _ in named]


def reference(cfg: GptConfig, layers: int, m: int) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The unsplit model on the same batch: per-microbatch losses and the gradients of the mean
    loss (PyTorch's pipelining scales each microbatch's loss by 1/m)."""
    model = make_layered(cfg, layers, SEED)
    tokens, targets = batch(cfg, m * MICROBATCH, seed=m)
    losses = []
    for x, y in zip(tokens.chunk(m), targets.chunk(m), strict=True):
        loss = loss_fn(model(x), y)
        (loss / m).backward()
        losses.append(float(loss.detach()))
    return losses, {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def run_tuned(
    rank: int, world: int, cfg: GptConfig, layers: int, results: list[TuneResult]
) -> list[dict[str, Any]]:
    out = []
    for res in results:
        runtime, stages, _ = build_tuned_runtime(
            lambda: model_modules(cfg, layers), res, rank, loss_fn
        )
        mine = res.stages_of(rank)
        tokens, targets = batch(cfg, res.microbatches * MICROBATCH, seed=res.microbatches)
        args = (tokens,) if 0 in mine else ()
        losses: list[torch.Tensor] = []
        runtime.step(*args, target=targets if res.num_stages - 1 in mine else None, losses=losses)
        grads = {}
        for s, st in zip(mine, stages, strict=True):
            names = res.module_fqns_per_model_part[s]
            for pname, p in st.submod.named_parameters():
                idx, rest = pname.split(".", 1)
                grads[f"{names[int(idx)]}.{rest}"] = p.grad.detach().numpy().copy()
        out.append({"losses": [float(x.detach()) for x in losses], "grads": grads})
    return out
