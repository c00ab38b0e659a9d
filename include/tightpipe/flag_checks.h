// One check per rule for numbers the user gives: a flag's or key's value within its range, and a
// GPT model shape (plan's flags, simulate's --model keys, train's flags: one definition of what a
// shape must satisfy).
#pragma once

#include <cstdint>
#include <string_view>

#include "tightpipe/status.h"

namespace tightpipe {

// `value` of `name` (a flag, "--mfu", or a key, "--model flops") finite and within [lo, hi];
// otherwise InvalidArgument "NAME VALUE: must be in [LO, HI]; hint: HINT" (NaN, inf, a negative
// or an absurd value alike).
Status check_number_range(std::string_view name, double value, double lo, double hi,
                          std::string_view hint);

// A GPT shape: layers, hidden, heads, seq, vocab (0: no embedding and LM head where allowed),
// MLP width (0: 4 x hidden).
struct ModelShape {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0, ffn_hidden = 0;
};
// How the caller's syntax shows each field before its value: flags ("--hidden-size ") or keys
// ("hidden="), and a prefix for every message ("--model: ").
struct ModelShapeNames {
  std::string_view context = {};
  std::string_view layers = "--num-layers ", hidden = "--hidden-size ",
                   heads = "--num-attention-heads ", seq = "--seq-length ", vocab = "--vocab-size ",
                   ffn_hidden = "--ffn-hidden-size ";
};
// The limits (the analytic cost model's by default; train's are smaller: it allocates them).
struct ModelShapeLimits {
  int64_t layers = 1024, hidden = int64_t{1} << 20, heads = int64_t{1} << 16,
          seq = int64_t{1} << 20, vocab = int64_t{1} << 24, ffn_hidden = int64_t{1} << 22;
  int64_t min_vocab = 0;  // train needs a vocabulary: 1
};
// Every field within its limits and the heads dividing the hidden size; InvalidArgument naming
// the field in the caller's syntax, the value, the range and a hint.
Status check_model_shape(const ModelShape& shape, const ModelShapeNames& names = {},
                         const ModelShapeLimits& limits = {});

// Megatron-LM's way to turn on interleaving, `--num-layers-per-virtual-pipeline-stage N`: the
// chunks per rank v = (layers / p) / N, as Megatron's arguments.py computes it, refused (naming
// both numbers, with a hint) where p does not divide the layers or N the layers per rank, or when
// N is not in [1, layers]. The one conversion for schedule, simulate, plan and train.
Result<int32_t> chunks_from_layers_per_virtual_stage(int64_t layers, int32_t pp,
                                                     int64_t layers_per_virtual_stage);

}  // namespace tightpipe
