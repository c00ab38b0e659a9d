"""The small GPT of tightpipe's own model (src/nn), written in PyTorch, cut into pipeline stages.

Token + learned position embedding, pre-LN blocks (causal multi-head attention, 4x GELU MLP),
final LayerNorm, LM head (untied: its stages may sit on different ranks), cross-entropy. One block
per stage; stage 0 also holds the embeddings, the last stage the final LayerNorm and the head, so
the last stage is the heaviest (the LM head), as in a real model. Deterministic from `seed`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from tightpipe import _args
from tightpipe.errors import ArgumentError, ArgumentTypeError


@dataclasses.dataclass(frozen=True)
class GptConfig:
    vocab: int = 64
    seq: int = 16  # T
    d_model: int = 32  # C
    heads: int = 2  # NH
    blocks_per_stage: int = 1

    def __post_init__(self) -> None:
        for name, hint in (
            ("vocab", "e.g. vocab=64"),
            ("seq", "tokens per sequence, e.g. 16"),
            ("d_model", "the model width, e.g. 32"),
            ("heads", "attention heads that divide d_model, e.g. 2"),
            ("blocks_per_stage", "transformer blocks per stage, e.g. 1"),
        ):
            _args.count(name, getattr(self, name), 1, 2**31 - 1, hint)
        if self.d_model % self.heads != 0:
            raise ArgumentError(
                f"d_model {self.d_model}: is not divisible by heads {self.heads}; hint: e.g. "
                "d_model=32, heads=2"
            )


class Block(nn.Module):
    def __init__(self, cfg: GptConfig):
        super().__init__()
        c = cfg.d_model
        self.heads = cfg.heads
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_out = nn.Linear(4 * c, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, T, C)
        b, t, c = x.shape
        nh = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, nh, c // nh).transpose(1, 2)  # (B, NH, T, C/NH)
        k = k.view(b, t, nh, c // nh).transpose(1, 2)
        v = v.view(b, t, nh, c // nh).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // nh)  # (B, NH, T, T)
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        out: torch.Tensor = x + self.fc_out(F.gelu(self.fc(self.ln2(x))))
        return out


class GptStage(nn.Module):
    """Stage `index` of `num_stages`: tokens (B, T) in on stage 0, else activations (B, T, C);
    logits (B, T, V) out of the last stage, else activations."""

    def __init__(self, cfg: GptConfig, index: int, num_stages: int):
        super().__init__()
        self.first = index == 0
        self.last = index == num_stages - 1
        if self.first:
            self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
            self.wpe = nn.Embedding(cfg.seq, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.blocks_per_stage))
        if self.last:
            self.ln_f = nn.LayerNorm(cfg.d_model)
            self.head = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            pos = torch.arange(x.shape[1], device=x.device)
            x = self.wte(x) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        if self.last:
            x = self.head(self.ln_f(x))
        return x


def make_stages(cfg: GptConfig, num_stages: int, seed: int = 0) -> list[GptStage]:
    """All stages of the model, the same weights for the same (cfg, num_stages, seed)."""
    if not isinstance(cfg, GptConfig):
        raise ArgumentTypeError(
            f"cfg {_args.show(cfg)}: must be a GptConfig, not {type(cfg).__name__}; hint: "
            "GptConfig() or GptConfig(vocab=..., d_model=...)"
        )
    _args.count(
        "num_stages",
        num_stages,
        1,
        _args.MAX_STAGES,
        "the schedule's stage count, schedule.num_stages",
    )
    _args.count("seed", seed, 0, 2**63 - 1, "any int >= 0, e.g. seed=0")
    torch.manual_seed(seed)
    return [GptStage(cfg, s, num_stages) for s in range(num_stages)]


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:  # (B, T, V), (B, T)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def batch(cfg: GptConfig, n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """n sequences of random tokens and their targets (the next tokens), deterministic."""
    if not isinstance(cfg, GptConfig):
        raise ArgumentTypeError(
            f"cfg {_args.show(cfg)}: must be a GptConfig, not {type(cfg).__name__}; hint: "
            "the config the stages were made with"
        )
    _args.count("n", n, 1, 2**31 - 1, "sequences in the batch, e.g. the microbatch count")
    _args.count("seed", seed, 0, 2**63 - 1, "any int >= 0, e.g. seed=1")
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, cfg.vocab, (n, cfg.seq + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def reference_step(
    stages: list[GptStage], tokens: torch.Tensor, targets: torch.Tensor, microbatches: int
) -> tuple[list[torch.Tensor], dict[int, dict[str, torch.Tensor]]]:
    """The non-pipelined model on the whole batch: per-microbatch losses and the gradients of
    the mean loss (PyTorch's pipelining scales by 1/m), {stage: {param name: grad}}."""
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Sequence) or not stages:
        raise ArgumentTypeError(
            f"stages {_args.show(stages)}: must be a non-empty list of the model's stages; hint: "
            "make_stages(cfg, num_stages)"
        )
    _args.count(
        "microbatches",
        microbatches,
        1,
        max(1, len(tokens)),
        f"at most the batch's {len(tokens)} sequences, e.g. the schedule's microbatch count",
    )
    losses = []
    for mb_tokens, mb_targets in zip(
        tokens.chunk(microbatches), targets.chunk(microbatches), strict=True
    ):
        x = mb_tokens
        for st in stages:
            x = st(x)
        loss = loss_fn(x, mb_targets)
        (loss / microbatches).backward()  # type: ignore[no-untyped-call]
        losses.append(loss.detach())
    grads = {
        # Every parameter has a grad after the backward above.
        i: {n: p.grad.detach().clone() for n, p in st.named_parameters()}  # type: ignore[union-attr]
        for i, st in enumerate(stages)
    }
    return losses, grads


class TokEmbeddings(nn.Module):
    """Token + learned position embedding: tokens (B, T) -> activations (B, T, C)."""

    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x (B, T) tokens
        pos = torch.arange(x.shape[1], device=x.device)
        out: torch.Tensor = self.wte(x) + self.wpe(pos)
        return out


class LayeredGpt(nn.Module):
    """The same GPT as one module whose top-level children carry torchtitan's names:
    `tok_embeddings`, `layers` (a ModuleDict "0".."L-1" of Blocks), `norm`, `output`; its forward
    skips a child set to None (as torchtitan's models do after `_pipeline_module_split`), so a
    deep copy with only some children kept is one pipeline stage."""

    def __init__(self, cfg: GptConfig, num_layers: int) -> None:
        super().__init__()
        self.tok_embeddings = TokEmbeddings(cfg)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(num_layers)})
        self.norm = nn.LayerNorm(cfg.d_model)
        self.output = nn.Linear(cfg.d_model, cfg.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok_embeddings is not None:
            x = self.tok_embeddings(x)
        for layer in self.layers.values():
            x = layer(x)
        if self.norm is not None:
            x = self.norm(x)
        if self.output is not None:
            x = self.output(x)
        return x


def make_layered(cfg: GptConfig, num_layers: int, seed: int = 0) -> LayeredGpt:
    """The GPT with `num_layers` blocks as a LayeredGpt, deterministic from `seed`;
    `tightpipe.torch.layers.top_level_modules(model)` lists its modules in order with their FQNs
    (tok_embeddings, layers.0, ..., norm, output)."""
    if isinstance(num_layers, bool) or not isinstance(num_layers, int) or num_layers < 0:
        raise ValueError(
            f"num_layers={num_layers!r}: must be an int >= 0; hint: the number of "
            "transformer blocks, e.g. 12"
        )
    if cfg.heads < 1 or cfg.d_model % cfg.heads != 0:
        raise ValueError(
            f"GptConfig d_model={cfg.d_model} is not divisible by heads={cfg.heads}; "
            "hint: e.g. d_model=32, heads=2"
        )
    torch.manual_seed(seed)
    return LayeredGpt(cfg, num_layers)
