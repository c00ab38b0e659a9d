"""What each rank runs in test_torch_titan.py: torchtitan 0.3.0's own pipeline code (pipeline_llm:
its split `_pipeline_module_split` and its schedule `_build_pipeline_schedule`) on its own Llama3
model at a tiny size, set up only from `titan_config` of a tune result; one training step per
case, compared with the unsplit model.
Module-level so that the rank processes' start method (forkserver, or spawn) can pickle it.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import torch

from interop_worker import _max_diff
from tightpipe.torch.titan import titan_cli_args, titan_config, titan_local_batch_size

SEED = 0
MICROBATCH = 2  # sequences per microbatch: the hand-written tune results' micro_batch_size
SEQ = 16
VOCAB = 64
LAYERS = 4


@dataclasses.dataclass
class Case:
    id: str
    tune: str  # the tune result's folder
    microbatches: int
    name: str | None = None  # forces pipeline_parallel_schedule (the mismatch case)


def tiny_llama3() -> Any:
    """torchtitan's Llama3 (its model code and its layer builder, the debug model's init), at 4
    layers, d = 32, 2 heads, vocab 64. Attention is torchtitan's ScaledDotProductAttention (causal)
    instead of flex: flex takes a BlockMask built per batch, which a pipeline stage would need
    passed with every microbatch; the blocks are otherwise the flavour's own."""
    from torchtitan.models import llama3
    from torchtitan.models.common import (
        ComplexRoPE,
        Embedding,
        Linear,
        RMSNorm,
        compute_ffn_hidden_dim,
    )
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3.model import Llama3Model

    dim, heads = 32, 2
    cfg = Llama3Model.Config(
        dim=dim,
        vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(
            num_embeddings=VOCAB, embedding_dim=dim, param_init=llama3._EMBEDDING_INIT
        ),
        norm=RMSNorm.Config(normalized_shape=dim, param_init=llama3._NORM_INIT),
        lm_head=Linear.Config(
            in_features=dim, out_features=VOCAB, param_init=llama3._output_linear_init(dim)
        ),
        layers=llama3._build_llama3_layers(
            n_layers=LAYERS,
            dim=dim,
            n_heads=heads,
            hidden_dim=compute_ffn_hidden_dim(dim, multiple_of=16),
            rope=ComplexRoPE.Config(
                dim=dim // heads, max_seq_len=SEQ, theta=500000, scaling="llama"
            ),
            attn_backend="flex",
        ),
    )
    for layer in cfg.layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    return cfg


def _batch(sequences: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(sequences)
    data = torch.randint(0, VOCAB, (sequences, SEQ + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def _loss_fn(tokens_in_batch: int) -> Any:
    """torchtitan's cross-entropy (sum over tokens) over the batch's token count, as its trainer
    normalizes (`global_valid_tokens`): the microbatch losses sum to the batch's mean loss, and
    the schedule runs with scale_grads=False. Returns (loss, metrics) as torchtitan expects."""
    from torchtitan.components.loss import cross_entropy_loss

    def loss_fn(pred: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        return cross_entropy_loss(pred, labels) / tokens_in_batch, {}

    return loss_fn


def _reference(
    model: torch.nn.Module, tokens: torch.Tensor, targets: torch.Tensor, m: int, loss_fn: Any
) -> tuple[list[float], dict[str, torch.Tensor]]:
    """The unsplit model, microbatch by microbatch: the losses and the gradients by name."""
    losses = []
    for x, y in zip(tokens.chunk(m), targets.chunk(m), strict=True):
        loss, _ = loss_fn(model(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
    grads = {}
    for n, p in model.named_parameters():
        assert p.grad is not None, n
        grads[n] = p.grad.detach().clone()
    return losses, grads


def _cli_parses_to(tune: str, cfg: dict[str, Any]) -> bool:
    """titan_cli_args(tune) read by tyro with the rules torchtitan's ConfigManager registers gives
    back cfg's fields and the local batch size (the trainer's own parse needs its data packages,
    which are not pinned: a config of its two sections stands for it)."""
    import tyro
    from torchtitan.config import ParallelismConfig, TrainingConfig
    from torchtitan.config.manager import ConfigManager, custom_registry

    # Trainer.Config's two sections (real types: this module's annotations are text)
    sections = dataclasses.make_dataclass(
        "Sections",
        [
            (
                "parallelism",
                ParallelismConfig,
                dataclasses.field(default_factory=ParallelismConfig),
            ),
            ("training", TrainingConfig, dataclasses.field(default_factory=TrainingConfig)),
        ],
    )
    ConfigManager()  # registers torchtitan's rules (a list of names: one comma-separated argument)
    parsed = tyro.cli(sections, args=titan_cli_args(tune), registry=custom_registry)
    return all(
        getattr(parsed.parallelism, k) == v for k, v in cfg.items()
    ) and parsed.training.local_batch_size == titan_local_batch_size(tune)


def run_cases(rank: int, world: int, cases: list[Case]) -> list[dict[str, Any]]:
    from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.activation_checkpoint import SelectiveAC
    from torchtitan.distributed.pipeline_parallel import (
        _get_pp_rank_to_stage_indices_mapping,
        pipeline_llm,
    )

    out = []
    model_cfg = tiny_llama3()
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=world, ep=1, world_size=world)
    dims.build_mesh()
    for case in cases:
        m = case.microbatches
        cfg = titan_config(case.tune)
        local_batch_size = titan_local_batch_size(case.tune)
        if case.name is not None:
            cfg["pipeline_parallel_schedule"] = case.name
        res: dict[str, Any] = {"id": case.id, "rank": rank, "config": cfg}
        if rank == 0:
            res["cli_ok"] = _cli_parses_to(case.tune, cfg)
        torch.manual_seed(SEED)
        model = model_cfg.build()
        model.init_weights(buffer_device=None)
        reference_model = copy.deepcopy(model)
        tokens, targets = _batch(local_batch_size)
        loss_fn = _loss_fn(tokens.numel())
        ref_losses, ref_grads = _reference(reference_model, tokens, targets, m, loss_fn)

        try:
            schedule, parts, first, last = pipeline_llm(
                model,
                parallel_dims=dims,
                training=TrainingConfig(local_batch_size=local_batch_size, seq_len=SEQ),
                parallelism=ParallelismConfig(**cfg),
                compile_config=CompileConfig(),
                ac_config=SelectiveAC.Config(),
                dump_folder=case.tune,
                device=torch.device("cpu"),
                model_config=model_cfg,
                parallelize_fn=lambda part, **_: part,
                loss_fn=loss_fn,
            )
            res["schedule_class"] = type(schedule).__name__
            res["stages"] = [st.stage_index for st in schedule._stages]
            res["titan_stages"] = list(
                _get_pp_rank_to_stage_indices_mapping(
                    rank,
                    world,
                    cfg["pipeline_parallel_schedule"],
                    len(cfg["module_fqns_per_model_part"]),
                )
            )
            losses: list[torch.Tensor] = []
            schedule.step(
                tokens if first else None, target=targets if last else None, losses=losses
            )
        except Exception as e:  # noqa: BLE001 - the mismatch case expects it; reported
            res["error"] = f"{type(e).__name__}: {e}"
            out.append(res)
            continue
        grads = {n: p.grad.detach().clone() for part in parts for n, p in part.named_parameters()}
        res["params"] = sorted(grads)
        res["grad_abs_sum"] = float(sum(g.abs().sum() for g in grads.values()))
        res["grad_vs_model"] = _max_diff({0: grads}, {0: {n: ref_grads[n] for n in grads}})
        if last:
            res["losses"] = [float(x.detach()) for x in losses]
            res["loss_vs_model"] = max(
                abs(a - b) for a, b in zip(res["losses"], ref_losses, strict=True)
            )
        if rank == 0:
            res["all_params"] = sorted(ref_grads)
        out.append(res)
    return out
