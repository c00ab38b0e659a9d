// Test helpers shared by the model tests (model_test.cc, model_bf16_test.cc): real-text batches,
// a model split into stages, one microbatch pushed through them like a pipeline, named tensors.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/check.h"
#include "tightpipe/model.h"

namespace tightpipe::nn::model_testing {

struct Data {
  std::vector<int32_t> tokens, targets;
};

// B*T windows of real text (tinyshakespeare) at offsets drawn from `seed`.
inline Data text_batch(const GptConfig& c, uint64_t seed) {
  static const std::string text =
      *read_file(std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt");
  Rng r(seed);
  Data d;
  for (int b = 0; b < c.micro_batch_size; ++b) {
    const size_t start = r.below(text.size() - c.seq_length - 1);
    for (int t = 0; t < c.seq_length; ++t) {
      d.tokens.push_back(static_cast<unsigned char>(text[start + t]));
      d.targets.push_back(static_cast<unsigned char>(text[start + t + 1]));
    }
  }
  return d;
}

// The model split evenly into S stages, seed 42.
inline std::vector<GptStage> make_stages(const GptConfig& c, int S,
                                         const RecomputeOptions& rc = {}) {
  auto specs = partition_layers(c, S, "");
  TP_CHECK(specs.ok());
  std::vector<GptStage> out;
  for (const StageSpec& s : *specs) out.emplace_back(c, s, 42, rc);
  return out;
}

// What crosses a stage boundary: the activation out of stage `from` (gradient false) or the
// gradient out of stage `from` (gradient true).
using BoundaryCheck =
    std::function<void(std::span<const float> values, bool gradient, size_t from)>;

// Runs F, I, W (fused: B) of one microbatch through the stages chained like a pipeline; returns the
// loss. `check` sees every boundary value; `returned` collects the gradients stages 1.. return.
inline double run_pipeline(std::vector<GptStage>& stages, int mb, const Data& d, float scale,
                           bool fused, const BoundaryCheck& check = {},
                           std::vector<std::vector<float>>* returned = nullptr) {
  std::vector<std::vector<float>> acts;
  StageOutput out;
  const size_t S = stages.size();
  for (size_t s = 0; s < S; ++s) {
    std::span<const int32_t> tg =
        s + 1 == S ? std::span<const int32_t>(d.targets) : std::span<const int32_t>();
    if (s == 0) {
      out = stages[s].forward(mb, std::span<const int32_t>(d.tokens), tg, scale);
    } else {
      acts.emplace_back(out.activations.begin(), out.activations.end());
      if (check) check(acts.back(), false, s - 1);
      out = stages[s].forward(mb, std::span<const float>(acts.back()), tg, scale);
    }
  }
  std::vector<float> g;
  for (size_t s = S; s-- > 0;) {
    // backward_input's span lives until backward_weight: copy it first.
    std::span<const float> gi = fused ? stages[s].backward(mb, g) : stages[s].backward_input(mb, g);
    g.assign(gi.begin(), gi.end());
    if (!fused) stages[s].backward_weight(mb);
    if (s > 0) {
      if (check) check(g, true, s);
      if (returned) returned->push_back(g);
    }
  }
  return out.loss;
}

// Every parameter (or gradient) tensor of the stages by name.
inline std::map<std::string, std::vector<float>> named(const std::vector<GptStage>& stages,
                                                       bool grads) {
  std::map<std::string, std::vector<float>> out;
  for (const GptStage& s : stages)
    for (const ParamTensor& t : s.tensors()) {
      auto src = (grads ? s.grads() : s.params()).subspan(t.offset, t.size);
      out[t.name].assign(src.begin(), src.end());
    }
  return out;
}

}  // namespace tightpipe::nn::model_testing
