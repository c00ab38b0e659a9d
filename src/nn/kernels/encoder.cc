// Token + position embedding.
#include "nn/kernels/fast_math.h"
#include "tightpipe/check.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {

TP_VECTOR_CLONES void encoder_forward(std::span<float> out, std::span<const int32_t> tokens,
                                      std::span<const float> wte, std::span<const float> wpe, int B,
                                      int T, int C, int V) {
  // out (B,T,C), tokens (B,T), wte (V,C), wpe (T,C)
  TP_CHECK(out.size() >= size_t(B) * T * C && tokens.size() >= size_t(B) * T);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int32_t tok = tokens[size_t(b) * T + t];
      TP_CHECK(tok >= 0 && tok < V, "token ", tok, " out of range [0, ", V, ")");
      float* o = out.data() + (size_t(b) * T + t) * C;
      const float* e = wte.data() + size_t(tok) * C;
      const float* p = wpe.data() + size_t(t) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

TP_VECTOR_CLONES void encoder_backward_weight(std::span<float> dwte, std::span<float> dwpe,
                                              std::span<const float> dout,
                                              std::span<const int32_t> tokens, int B, int T, int C,
                                              int V) {
  // dwte (V,C), dwpe (T,C), dout (B,T,C), tokens (B,T)
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int32_t tok = tokens[size_t(b) * T + t];
      TP_CHECK(tok >= 0 && tok < V, "token ", tok, " out of range [0, ", V, ")");
      const float* d = dout.data() + (size_t(b) * T + t) * C;
      float* e = dwte.data() + size_t(tok) * C;
      float* p = dwpe.data() + size_t(t) * C;
      for (int c = 0; c < C; ++c) {
        e[c] += d[c];
        p[c] += d[c];
      }
    }
  }
}

template <typename F>
void encoder_forward_ref(std::span<F> out, std::span<const int32_t> tokens, std::span<const F> wte,
                         std::span<const F> wpe, int B, int T, int C, int V) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        out[(size_t(b) * T + t) * C + c] =
            wte[size_t(tokens[size_t(b) * T + t]) * C + c] + wpe[size_t(t) * C + c];
}

template <typename F>
void encoder_backward_weight_ref(std::span<F> dwte, std::span<F> dwpe, std::span<const F> dout,
                                 std::span<const int32_t> tokens, int B, int T, int C, int V) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c) {
        const F d = dout[(size_t(b) * T + t) * C + c];
        dwte[size_t(tokens[size_t(b) * T + t]) * C + c] += d;
        dwpe[size_t(t) * C + c] += d;
      }
}

#define TP_INSTANTIATE(F)                                                                          \
  template void encoder_forward_ref<F>(std::span<F>, std::span<const int32_t>, std::span<const F>, \
                                       std::span<const F>, int, int, int, int);                    \
  template void encoder_backward_weight_ref<F>(std::span<F>, std::span<F>, std::span<const F>,     \
                                               std::span<const int32_t>, int, int, int, int);
TP_INSTANTIATE(float)
TP_INSTANTIATE(double)
#undef TP_INSTANTIATE

}  // namespace tightpipe::nn
