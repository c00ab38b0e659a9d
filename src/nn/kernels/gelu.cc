// GELU, exact form x * Phi(x) (torch.nn.functional.gelu default).
#include <cmath>

#include "nn/kernels/fast_math.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {
namespace {
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
}  // namespace

TP_VECTOR_CLONES void gelu_forward(std::span<float> out, std::span<const float> inp, int64_t N) {
  // out (N), inp (N)
  const float* x = inp.data();
  float* o = out.data();
  for (int64_t i = 0; i < N; ++i) {
    const float e = internal::fast_expf(-0.5f * x[i] * x[i]);
    const float cdf = 0.5f * (1.0f + internal::erf_with_exp(x[i] * kInvSqrt2, e));
    o[i] = x[i] * cdf;
  }
}

TP_VECTOR_CLONES void gelu_backward_input(std::span<float> dinp, std::span<const float> dout,
                                          std::span<const float> inp, int64_t N) {
  // dinp (N), dout (N), inp (N)
  const float* x = inp.data();
  const float* d = dout.data();
  float* di = dinp.data();
  for (int64_t i = 0; i < N; ++i) {
    const float e = internal::fast_expf(-0.5f * x[i] * x[i]);
    const float cdf = 0.5f * (1.0f + internal::erf_with_exp(x[i] * kInvSqrt2, e));
    di[i] = d[i] * (cdf + x[i] * e * kInvSqrt2Pi);
  }
}

template <typename F>
void gelu_forward_ref(std::span<F> out, std::span<const F> inp, int64_t N) {
  for (int64_t i = 0; i < N; ++i)
    out[i] = inp[i] * F(0.5) * (F(1) + std::erf(inp[i] / std::sqrt(F(2))));
}

template <typename F>
void gelu_backward_input_ref(std::span<F> dinp, std::span<const F> dout, std::span<const F> inp,
                             int64_t N) {
  for (int64_t i = 0; i < N; ++i) {
    const F x = inp[i];
    const F cdf = F(0.5) * (F(1) + std::erf(x / std::sqrt(F(2))));
    const F pdf = std::exp(F(-0.5) * x * x) / std::sqrt(F(2) * F(3.14159265358979323846));
    dinp[i] = dout[i] * (cdf + x * pdf);
  }
}

template void gelu_forward_ref<float>(std::span<float>, std::span<const float>, int64_t);
template void gelu_forward_ref<double>(std::span<double>, std::span<const double>, int64_t);
template void gelu_backward_input_ref<float>(std::span<float>, std::span<const float>,
                                             std::span<const float>, int64_t);
template void gelu_backward_input_ref<double>(std::span<double>, std::span<const double>,
                                              std::span<const double>, int64_t);

}  // namespace tightpipe::nn
