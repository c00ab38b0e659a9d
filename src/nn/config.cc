// GptConfig / RecomputeOptions validation and the layer partitioner.
#include <fmt/format.h>

#include "tightpipe/base.h"
#include "tightpipe/flag_checks.h"
#include "tightpipe/model.h"

namespace tightpipe::nn {

std::string_view precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

Result<Precision> parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return Status::invalid_argument(
      fmt::format("precision '{}' is not known; hint: fp32 or bf16", printable(name)));
}

Status GptConfig::validate() const {
  auto in_range = [](int v, int limit, const char* flag, const char* hint) -> Status {
    if (v >= 1 && v <= limit) return OkStatus();
    return Status::invalid_argument(
        fmt::format("{} {}: must be in [1, {}]; hint: {}", flag, v, limit, hint));
  };
  // The shape's rules are plan's and simulate --model's (flag_checks.h), at train's limits.
  TP_RETURN_IF_ERROR(check_model_shape({.layers = num_layers,
                                        .hidden = hidden_size,
                                        .heads = num_heads,
                                        .seq = seq_length,
                                        .vocab = vocab_size},
                                       {.vocab = "vocab size "},
                                       {.layers = kMaxNumLayers,
                                        .hidden = kMaxHiddenSize,
                                        .heads = kMaxNumHeads,
                                        .seq = kMaxSeqLength,
                                        .vocab = kMaxVocabSize,
                                        .min_vocab = 1}));
  TP_RETURN_IF_ERROR(in_range(micro_batch_size, kMaxMicroBatchSize, "--micro-batch-size",
                              "e.g. --micro-batch-size 8"));
  // The largest buffers a stage holds: one layer's attention probabilities (B, NH, T, T), the
  // logits (B, T, V), one layer's parameters (12C^2 + 13C) and the embedding. Within the limits
  // above they fit 64 bits; the check keeps that true if a limit is raised.
  const int64_t B = micro_batch_size, NH = num_heads, T = seq_length, C = hidden_size,
                V = vocab_size;
  if (!checked_product({B, NH, T, T}) || !checked_product({B, T, V}) ||
      !checked_product({12 * C + 13, C, int64_t{num_layers}}) || !checked_product({V + T, C})) {
    return Status::invalid_argument(fmt::format(
        "--micro-batch-size {} --num-attention-heads {} --seq-length {} --hidden-size {} "
        "--num-layers {}: the buffer sizes overflow 64 bits; hint: smaller values",
        B, NH, T, C, num_layers));
  }
  return OkStatus();
}

Status RecomputeOptions::validate() const {
  if (granularity.empty()) return OkStatus();
  if (granularity != "full") {
    return Status::invalid_argument(fmt::format(
        "--recompute-granularity '{}' is not supported; hint: use 'full' (or leave it out)",
        granularity));
  }
  if (method != "uniform") {
    return Status::invalid_argument(
        fmt::format("--recompute-method '{}' is not supported; hint: use 'uniform'", method));
  }
  if (num_layers < 1 || num_layers > kMaxNumLayers) {
    return Status::invalid_argument(fmt::format(
        "--recompute-num-layers {}: must be in [1, {}]; hint: 1 keeps the input of every layer",
        num_layers, kMaxNumLayers));
  }
  return OkStatus();
}

namespace {
Status layout_error(std::string_view layout, const std::string& what) {
  return Status::invalid_argument(fmt::format(
      "--pipeline-layout '{}': {}; hint: stages are separated by '|', items by ',': E (embedding, "
      "first item of the first stage), t or t*N (transformer layers), L (loss, last item of the "
      "last stage), e.g. \"E,t*3|t*3|t*3|t*2,L\"",
      layout, what));
}
}  // namespace

Result<std::vector<StageSpec>> partition_layers(const GptConfig& config, int num_stages,
                                                std::string_view layout) {
  TP_RETURN_IF_ERROR(config.validate());
  if (num_stages < 1) {
    return Status::invalid_argument(
        fmt::format("the number of stages must be >= 1, got {}", num_stages));
  }
  const int L = config.num_layers;
  std::vector<StageSpec> stages(num_stages);
  if (trim(layout).empty()) {
    if (L < num_stages) {
      return Status::invalid_argument(fmt::format(
          "--num-layers {} is fewer than the {} pipeline stages; hint: use at least one layer per "
          "stage (--num-layers >= {}) or fewer stages",
          L, num_stages, num_stages));
    }
    // Megatron's accounting: the embedding and the loss each cost one layer.
    const int units = L + 2;
    int first = 0;
    for (int s = 0; s < num_stages; ++s) {
      int u = units / num_stages + (s < units % num_stages ? 1 : 0);
      StageSpec& st = stages[s];
      st.has_embedding = s == 0;
      st.has_head = s == num_stages - 1;
      if (st.has_embedding) --u;
      if (st.has_head) --u;
      st.first_layer = first;
      st.num_layers = std::max(0, std::min(u, L - first));
      first += st.num_layers;
    }
    // Any layer left over (rounding) goes to the last stage, so that none is ever dropped.
    stages.back().num_layers += L - first;
    return stages;
  }
  const std::vector<std::string> parts = split(layout, '|');
  if (int(parts.size()) != num_stages) {
    return layout_error(layout, fmt::format("it describes {} stages but the pipeline has {}",
                                            parts.size(), num_stages));
  }
  int first = 0, num_e = 0, num_l = 0;
  for (int s = 0; s < num_stages; ++s) {
    StageSpec& st = stages[s];
    st.first_layer = first;
    const std::vector<std::string> items = split(parts[s], ',');
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string item(trim(items[i]));
      if (item == "E") {
        if (s != 0 || i != 0) return layout_error(layout, "E must be the first item of stage 0");
        st.has_embedding = true;
        ++num_e;
      } else if (item == "L") {
        if (s != num_stages - 1 || i + 1 != items.size())
          return layout_error(layout, "L must be the last item of the last stage");
        st.has_head = true;
        ++num_l;
      } else if (item == "t" || item.rfind("t*", 0) == 0) {
        int64_t n = 1;
        if (item != "t") {
          auto r = parse_int(item.substr(2));
          if (!r.ok() || *r < 0 || *r > kMaxNumLayers) {
            return layout_error(layout, fmt::format("bad repeat count in '{}' (a whole number in "
                                                    "[0, {}])",
                                                    printable(item), kMaxNumLayers));
          }
          n = *r;
        }
        st.num_layers += int(n);
        first += int(n);
        if (first > kMaxNumLayers) {
          return layout_error(
              layout, fmt::format("it places more than {} transformer layers", kMaxNumLayers));
        }
      } else {
        return layout_error(layout, fmt::format("unknown item '{}' in stage {}", item, s));
      }
    }
    if (st.num_layers == 0 && !st.has_embedding && !st.has_head)
      return layout_error(layout, fmt::format("stage {} is empty", s));
  }
  if (num_e != 1) return layout_error(layout, "the embedding E must appear exactly once");
  if (num_l != 1) return layout_error(layout, "the loss L must appear exactly once");
  if (first != L) {
    return layout_error(
        layout, fmt::format("it places {} transformer layers but --num-layers is {}: a layout must "
                            "place every layer exactly once ({})",
                            first, L, first < L ? "some are lost" : "some are repeated"));
  }
  return stages;
}

namespace {

std::string stage_items(bool embedding, int blocks, bool head) {
  std::vector<std::string> items;
  if (embedding) items.push_back("E");
  if (blocks == 1) items.push_back("t");
  if (blocks > 1) items.push_back(fmt::format("t*{}", blocks));
  if (head) items.push_back("L");
  return join(items, ",");
}

}  // namespace

std::string layout_from_blocks(const std::vector<int>& blocks) {
  std::vector<std::string> parts;
  for (size_t s = 0; s < blocks.size(); ++s)
    parts.push_back(stage_items(s == 0, blocks[s], s + 1 == blocks.size()));
  return join(parts, "|");
}

Result<std::string> megatron_layout(const GptConfig& config, int num_stages,
                                    const MegatronSplit& split) {
  const MegatronSplit& f = split;
  const int L = config.num_layers, S = num_stages;
  const bool counts = f.first_stage_layers >= 0 || f.last_stage_layers >= 0;
  if (counts && (f.account_for_embedding || f.account_for_loss)) {
    return Status::invalid_argument(
        "--decoder-first/last-pipeline-num-layers with --account-for-embedding/loss-in-pipeline-"
        "split: Megatron-LM takes one or the other; hint: give the first/last stage counts, or the "
        "accounting flags");
  }
  std::vector<int> blocks(S, 0);
  if (counts) {
    for (const auto& [flag, n] :
         {std::pair{"--decoder-first-pipeline-num-layers", f.first_stage_layers},
          std::pair{"--decoder-last-pipeline-num-layers", f.last_stage_layers}}) {
      if (n > L) {  // also keeps first + last from overflowing int
        return Status::invalid_argument(
            fmt::format("{} {}: more than --num-layers {}; hint: at most {} layers on one stage",
                        flag, n, L, L));
      }
    }
    const int first = f.first_stage_layers, last = f.last_stage_layers;
    const int fixed = std::max(0, first) + std::max(0, last);
    const int others = S - (first >= 0) - (last >= 0 && S > 1);
    if (S < 2 || fixed > L || (others == 0 && fixed != L) || (others > 0 && (L - fixed) % others)) {
      std::vector<std::string> given;
      if (first >= 0) given.push_back(fmt::format("--decoder-first-pipeline-num-layers {}", first));
      if (last >= 0) given.push_back(fmt::format("--decoder-last-pipeline-num-layers {}", last));
      return Status::invalid_argument(fmt::format(
          "{} with --num-layers {} over {} stages: the other {} blocks do not divide evenly over "
          "the other {} stages; hint: choose counts that leave a multiple of the remaining stages "
          "(or --pipeline-layout)",
          join(given, " and "), L, S, L - fixed, others));
    }
    for (int s = 0; s < S; ++s) blocks[s] = others > 0 ? (L - fixed) / others : 0;
    if (first >= 0) blocks[0] = first;
    if (last >= 0) blocks[S - 1] = last;
    return layout_from_blocks(blocks);
  }
  const int units = L + (f.account_for_embedding ? 1 : 0) + (f.account_for_loss ? 1 : 0);
  if (units % S != 0 || units / S < 1) {
    return Status::invalid_argument(fmt::format(
        "--num-layers {}{}{} = {} layers do not divide evenly over {} pipeline stages; hint: "
        "Megatron-LM needs (layers + accounted embedding/loss) to be a multiple of the stages",
        L, f.account_for_embedding ? " + embedding" : "", f.account_for_loss ? " + loss" : "",
        units, S));
  }
  for (int s = 0; s < S; ++s) blocks[s] = units / S;
  if (f.account_for_embedding) --blocks[0];
  if (f.account_for_loss) --blocks[S - 1];
  return layout_from_blocks(blocks);
}

std::string format_layout(const std::vector<StageSpec>& stages) {
  std::vector<std::string> parts;
  for (const StageSpec& s : stages)
    parts.push_back(stage_items(s.has_embedding, s.num_layers, s.has_head));
  return join(parts, "|");
}

}  // namespace tightpipe::nn
