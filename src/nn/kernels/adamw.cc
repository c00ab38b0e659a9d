// AdamW with decoupled weight decay (Loshchilov & Hutter 2019), as torch.optim.AdamW.
#include <cmath>

#include "nn/kernels/fast_math.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {

TP_VECTOR_CLONES void adamw_update(std::span<float> params, std::span<const float> grads,
                                   std::span<float> m, std::span<float> v, const AdamWHyper& h) {
  // params, grads, m, v (N)
  const size_t n = params.size();
  const float b1 = h.beta1, b2 = h.beta2;
  const float bc1 = 1.0f - std::pow(b1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(b2, static_cast<float>(h.step));
  const float step_size = h.lr / bc1;
  const float inv_sqrt_bc2 = 1.0f / std::sqrt(bc2);
  const float decay = 1.0f - h.lr * h.weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  float* mm = m.data();
  float* vv = v.data();
  for (size_t i = 0; i < n; ++i) {
    mm[i] = b1 * mm[i] + (1.0f - b1) * g[i];
    vv[i] = b2 * vv[i] + (1.0f - b2) * g[i] * g[i];
    const float denom = std::sqrt(vv[i]) * inv_sqrt_bc2 + h.eps;
    p[i] = p[i] * decay - step_size * mm[i] / denom;
  }
}

void adamw_update_ref(std::span<float> params, std::span<const float> grads, std::span<float> m,
                      std::span<float> v, const AdamWHyper& h) {
  for (size_t i = 0; i < params.size(); ++i) {
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * grads[i];
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * grads[i] * grads[i];
    const double mhat = m[i] / (1.0 - std::pow(double(h.beta1), double(h.step)));
    const double vhat = v[i] / (1.0 - std::pow(double(h.beta2), double(h.step)));
    params[i] = static_cast<float>(
        params[i] - h.lr * (mhat / (std::sqrt(vhat) + h.eps) + h.weight_decay * params[i]));
  }
}

}  // namespace tightpipe::nn
