// The single-rank (one-stage) path: train step, evaluation, next-token distribution.
#include <cmath>

#include "tightpipe/check.h"
#include "tightpipe/model.h"

namespace tightpipe::nn {

TrainStepResult train_step(GptStage& model, std::span<const MicroBatch> microbatches,
                           const AdamWConfig& opt, float lr, float clip) {
  TP_CHECK(model.spec().has_embedding && model.spec().has_head && !microbatches.empty());
  model.zero_grads();
  const float scale =
      1.0f / float(double(microbatches.size()) * model.config().tokens_per_microbatch());
  TrainStepResult r;
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const int mb = int(i);
    r.loss += model.forward(mb, microbatches[i].tokens, microbatches[i].targets, scale).loss;
    model.backward(mb);
  }
  const double sq = model.grad_sq_norm();
  r.grad_norm = std::sqrt(sq);
  const float s = clip_scale(sq, clip);
  if (s != 1.0f) model.scale_grads(s);
  model.optimizer_step(opt, lr);
  return r;
}

double evaluate_loss(GptStage& model, std::span<const MicroBatch> microbatches) {
  TP_CHECK(model.spec().has_embedding && model.spec().has_head && !microbatches.empty());
  const float scale =
      1.0f / float(double(microbatches.size()) * model.config().tokens_per_microbatch());
  double loss = 0;
  for (size_t i = 0; i < microbatches.size(); ++i) {
    const int mb = -1 - int(i);
    loss += model.forward(mb, microbatches[i].tokens, microbatches[i].targets, scale).loss;
    model.discard(mb);
  }
  return loss;
}

std::vector<float> next_token_probs(GptStage& model, std::span<const int32_t> context) {
  const GptConfig& c = model.config();
  TP_CHECK(model.spec().has_embedding && model.spec().has_head && !context.empty());
  const size_t n = std::min(context.size(), size_t(c.seq_length));
  std::vector<int32_t> tokens(size_t(c.micro_batch_size) * c.seq_length, 0);
  std::copy(context.end() - n, context.end(), tokens.begin());  // row 0; causal: padding is unseen
  std::vector<int32_t> targets(tokens.size(), 0);
  constexpr int kMb = -1000000;
  model.forward(kMb, std::span<const int32_t>(tokens), targets, 0.0f);
  std::span<const float> p = model.probs(kMb).subspan((n - 1) * c.vocab_size, c.vocab_size);
  std::vector<float> out(p.begin(), p.end());
  model.discard(kMb);
  return out;
}

}  // namespace tightpipe::nn
