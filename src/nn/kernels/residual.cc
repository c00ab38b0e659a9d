// Residual add: the stream x + f(x).
#include "nn/kernels/fast_math.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {

TP_VECTOR_CLONES void residual_forward(std::span<float> out, std::span<const float> a,
                                       std::span<const float> b, int64_t N) {
  // out (N) = a (N) + b (N)
  float* o = out.data();
  const float* x = a.data();
  const float* y = b.data();
  for (int64_t i = 0; i < N; ++i) o[i] = x[i] + y[i];
}

TP_VECTOR_CLONES void residual_backward_input(std::span<float> dinp, std::span<const float> dout,
                                              int64_t N) {
  // dinp (N) += dout (N)
  float* di = dinp.data();
  const float* d = dout.data();
  for (int64_t i = 0; i < N; ++i) di[i] += d[i];
}

template <typename F>
void residual_forward_ref(std::span<F> out, std::span<const F> a, std::span<const F> b, int64_t N) {
  for (int64_t i = 0; i < N; ++i) out[i] = a[i] + b[i];
}
template <typename F>
void residual_backward_input_ref(std::span<F> dinp, std::span<const F> dout, int64_t N) {
  for (int64_t i = 0; i < N; ++i) dinp[i] += dout[i];
}

template void residual_forward_ref<float>(std::span<float>, std::span<const float>,
                                          std::span<const float>, int64_t);
template void residual_forward_ref<double>(std::span<double>, std::span<const double>,
                                           std::span<const double>, int64_t);
template void residual_backward_input_ref<float>(std::span<float>, std::span<const float>, int64_t);
template void residual_backward_input_ref<double>(std::span<double>, std::span<const double>,
                                                  int64_t);

}  // namespace tightpipe::nn
