// Learning-rate schedule and the clipping coefficient.
#include "tightpipe/optimizer.h"

#include <fmt/format.h>

#include <cmath>

namespace tightpipe::nn {

Status AdamWConfig::validate() const {
  if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
    return Status::invalid_argument(
        fmt::format("AdamW betas must be in [0, 1), got {} and {}", beta1, beta2));
  if (!(eps > 0)) return Status::invalid_argument("AdamW eps must be positive");
  if (!(std::isfinite(weight_decay) && weight_decay >= 0))
    return Status::invalid_argument(fmt::format(
        "--weight-decay {}: must be a finite number >= 0; hint: e.g. 0.1, or 0 for none",
        weight_decay));
  return OkStatus();
}

Status LrSchedule::validate() const {
  if (!(std::isfinite(lr) && lr > 0)) {
    return Status::invalid_argument(
        fmt::format("--lr {}: must be a finite number > 0; hint: e.g. --lr 3e-4", lr));
  }
  if (!(min_lr >= 0 && min_lr <= lr))  // NaN fails both comparisons
    return Status::invalid_argument(
        fmt::format("--min-lr {}: must be a finite number in [0, --lr {}]; hint: e.g. --min-lr {}",
                    min_lr, lr, lr / 10));
  if (warmup_iters < 0)
    return Status::invalid_argument(
        fmt::format("--lr-warmup-iters must be >= 0, got {}", warmup_iters));
  if (total_iters < 1)
    return Status::invalid_argument(fmt::format("--train-iters must be >= 1, got {}", total_iters));
  return OkStatus();
}

float lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_iters) return s.lr * float(step + 1) / float(s.warmup_iters);
  const int64_t decay_len = s.total_iters - s.warmup_iters;
  if (decay_len <= 1) return s.lr;
  const double frac = std::min(1.0, double(step - s.warmup_iters) / double(decay_len - 1));
  const double coeff = 0.5 * (1.0 + std::cos(3.14159265358979323846 * frac));
  return static_cast<float>(s.min_lr + coeff * (s.lr - s.min_lr));
}

float clip_scale(double global_sq_norm, float clip) {
  if (clip <= 0) return 1.0f;
  const double norm = std::sqrt(global_sq_norm);
  if (norm <= clip) return 1.0f;
  return static_cast<float>(clip / (norm + 1e-6));
}

}  // namespace tightpipe::nn
