// Softmax + cross-entropy over the vocabulary, fused.
#include <cmath>

#include "nn/kernels/fast_math.h"
#include "tightpipe/check.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {

TP_VECTOR_CLONES double softmax_xent_forward(std::span<float> probs, std::span<const float> logits,
                                             std::span<const int32_t> targets, int N, int V) {
  // probs (N,V), logits (N,V), targets (N)
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    const float* z = logits.data() + size_t(n) * V;
    float* p = probs.data() + size_t(n) * V;
    const int32_t tgt = targets[n];
    TP_CHECK(tgt >= 0 && tgt < V, "target ", tgt, " out of range [0, ", V, ")");
    const float mx = internal::reduce_max(z, V);
    const float zt = z[tgt];
    for (int v = 0; v < V; ++v) p[v] = internal::fast_expf(z[v] - mx);
    const float sum = internal::reduce_sum(p, V);
    const float inv = 1.0f / sum;
    for (int v = 0; v < V; ++v) p[v] *= inv;
    // -log p[tgt] computed from the logits, exact even when p underflows.
    loss += static_cast<double>(mx) + std::log(static_cast<double>(sum)) - zt;
  }
  return loss;
}

TP_VECTOR_CLONES void softmax_xent_backward_input(std::span<float> dlogits,
                                                  std::span<const float> probs,
                                                  std::span<const int32_t> targets, float scale,
                                                  int N, int V) {
  // dlogits (N,V), probs (N,V), targets (N)
  for (int n = 0; n < N; ++n) {
    const float* p = probs.data() + size_t(n) * V;
    float* d = dlogits.data() + size_t(n) * V;
    for (int v = 0; v < V; ++v) d[v] = p[v] * scale;
    d[targets[n]] -= scale;
  }
}

template <typename F>
double softmax_xent_forward_ref(std::span<F> probs, std::span<const F> logits,
                                std::span<const int32_t> targets, int N, int V) {
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    F mx = logits[size_t(n) * V];
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[size_t(n) * V + v]);
    F sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(logits[size_t(n) * V + v] - mx);
    const F zt = logits[size_t(n) * V + targets[n]];
    for (int v = 0; v < V; ++v)
      probs[size_t(n) * V + v] = std::exp(logits[size_t(n) * V + v] - mx) / sum;
    loss += static_cast<double>(mx + std::log(sum) - zt);
  }
  return loss;
}

template <typename F>
void softmax_xent_backward_input_ref(std::span<F> dlogits, std::span<const F> probs,
                                     std::span<const int32_t> targets, F scale, int N, int V) {
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v)
      dlogits[size_t(n) * V + v] =
          (probs[size_t(n) * V + v] - (v == targets[n] ? F(1) : F(0))) * scale;
}

template double softmax_xent_forward_ref<float>(std::span<float>, std::span<const float>,
                                                std::span<const int32_t>, int, int);
template double softmax_xent_forward_ref<double>(std::span<double>, std::span<const double>,
                                                 std::span<const int32_t>, int, int);
template void softmax_xent_backward_input_ref<float>(std::span<float>, std::span<const float>,
                                                     std::span<const int32_t>, float, int, int);
template void softmax_xent_backward_input_ref<double>(std::span<double>, std::span<const double>,
                                                      std::span<const int32_t>, double, int, int);

}  // namespace tightpipe::nn
