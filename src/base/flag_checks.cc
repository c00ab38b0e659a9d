#include "tightpipe/flag_checks.h"

#include <fmt/format.h>

#include <cmath>

namespace tightpipe {

Status check_number_range(std::string_view name, double value, double lo, double hi,
                          std::string_view hint) {
  if (std::isfinite(value) && value >= lo && value <= hi) return OkStatus();
  return Status::invalid_argument(
      fmt::format("{} {}: must be in [{}, {}]; hint: {}", name, value, lo, hi, hint));
}

Status check_model_shape(const ModelShape& s, const ModelShapeNames& n, const ModelShapeLimits& l) {
  auto in_range = [&](std::string_view name, int64_t v, int64_t lo, int64_t hi,
                      std::string_view what) -> Status {
    if (v >= lo && v <= hi) return OkStatus();
    return Status::invalid_argument(
        fmt::format("{}{}{}: must be in [{}, {}]; hint: {}", n.context, name, v, lo, hi, what));
  };
  TP_RETURN_IF_ERROR(in_range(n.layers, s.layers, 1, l.layers, "transformer layers, e.g. 32"));
  TP_RETURN_IF_ERROR(in_range(n.hidden, s.hidden, 1, l.hidden, "the model width, e.g. 4096"));
  TP_RETURN_IF_ERROR(
      in_range(n.heads, s.heads, 1, l.heads, "attention heads that divide the hidden size"));
  TP_RETURN_IF_ERROR(in_range(n.seq, s.seq, 1, l.seq, "tokens per sequence, e.g. 4096"));
  TP_RETURN_IF_ERROR(in_range(n.vocab, s.vocab, l.min_vocab, l.vocab,
                              l.min_vocab > 0 ? "the tokenizer's vocabulary (256 for bytes)"
                                              : "e.g. 50304 (GPT-2's, padded); 0 leaves out the "
                                                "embedding and the LM head"));
  TP_RETURN_IF_ERROR(
      in_range(n.ffn_hidden, s.ffn_hidden, 0, l.ffn_hidden, "the MLP width; 0 is 4 x hidden"));
  if (s.hidden % s.heads != 0) {
    const int64_t lo = s.hidden - s.hidden % s.heads;
    return Status::invalid_argument(fmt::format(
        "{}{}{} is not divisible by {}{}; hint: a hidden size that is a multiple of the heads "
        "(e.g. {}{}) or a head count that divides {}",
        n.context, n.hidden, s.hidden, n.heads, s.heads, n.hidden, lo > 0 ? lo + s.heads : s.heads,
        s.hidden));
  }
  return OkStatus();
}

Result<int32_t> chunks_from_layers_per_virtual_stage(int64_t layers, int32_t pp,
                                                     int64_t layers_per_virtual_stage) {
  const int64_t n = layers_per_virtual_stage;
  constexpr std::string_view kFlag = "--num-layers-per-virtual-pipeline-stage";
  if (layers < 1 || pp < 1) {
    return Status::invalid_argument(
        fmt::format("{} {}: needs the model's layers and the pipeline size (got --num-layers {}, "
                    "--pipeline-model-parallel-size {}); hint: give --num-layers",
                    kFlag, n, layers, pp));
  }
  if (n < 1 || n > layers) {
    return Status::invalid_argument(fmt::format(
        "{} {}: must be in [1, {}] (--num-layers); hint: transformer layers per chunk, e.g. 2",
        kFlag, n, layers));
  }
  if (layers % pp != 0) {
    return Status::invalid_argument(fmt::format(
        "{} {}: --num-layers {} is not divisible by --pipeline-model-parallel-size {} (Megatron "
        "requires it for interleaving); hint: a layer count that is a multiple of {}, or --vpp "
        "with an uneven --pipeline-layout",
        kFlag, n, layers, pp, pp));
  }
  const int64_t per_rank = layers / pp;
  if (per_rank % n != 0) {
    return Status::invalid_argument(
        fmt::format("{} {}: does not divide the {} layers per rank (--num-layers {} / "
                    "--pipeline-model-parallel-size {}); hint: a divisor of {}",
                    kFlag, n, per_rank, layers, pp, per_rank));
  }
  return static_cast<int32_t>(per_rank / n);
}

}  // namespace tightpipe
