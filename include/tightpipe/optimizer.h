// Optimizer pieces shared by the single-rank loop and the pipeline executor: AdamW settings, the
// learning-rate schedule (linear warm-up then cosine decay to a floor, Megatron's
// --lr-warmup-iters / --min-lr), and global-norm gradient clipping split in two halves so that
// the norm can span ranks:
//   1. every stage computes grad_sq_norm() (a local sum of squares, in double);
//   2. the executor sums those over all stages and ranks (allreduce or gather) -> global_sq;
//   3. scale = clip_scale(global_sq, clip); every stage calls scale_grads(scale), then steps.
// The AdamW state itself lives in each GptStage next to its parameter arena (model.h).
// Value types; no shared state.
#pragma once

#include <cstdint>

#include "tightpipe/status.h"

namespace tightpipe::nn {

struct AdamWConfig {
  float beta1 = 0.9f;         // first-moment decay
  float beta2 = 0.95f;        // second-moment decay
  float eps = 1e-8f;          // denominator guard
  float weight_decay = 0.1f;  // decoupled decay on matrices and embeddings (not on LN, biases)
  Status validate() const;
};

struct LrSchedule {
  float lr = 1e-3f;          // peak learning rate (--lr)
  float min_lr = 0.0f;       // floor reached at the last iteration (--min-lr)
  int64_t warmup_iters = 0;  // linear warm-up length (--lr-warmup-iters)
  int64_t total_iters = 1;   // --train-iters; cosine decays over [warmup, total)
  Status validate() const;
};

// Learning rate of 0-based `step`: lr*(step+1)/warmup during warm-up, then cosine from lr to
// min_lr.
float lr_at(const LrSchedule& s, int64_t step);

// Multiplier for the gradients given the global squared norm: min(1, clip / (norm + 1e-6)).
// clip <= 0 disables clipping (returns 1).
float clip_scale(double global_sq_norm, float clip);

}  // namespace tightpipe::nn
