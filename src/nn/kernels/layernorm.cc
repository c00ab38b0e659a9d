// LayerNorm over the last dimension (eps 1e-5), as torch.nn.LayerNorm.
#include <cmath>

#include "nn/kernels/fast_math.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {
namespace {
constexpr float kEps = 1e-5f;
}

TP_VECTOR_CLONES void layernorm_forward(std::span<float> out, std::span<float> mean,
                                        std::span<float> rstd, std::span<const float> inp,
                                        std::span<const float> weight, std::span<const float> bias,
                                        int N, int C) {
  // out (N,C), mean (N), rstd (N), inp (N,C), weight (C), bias (C)
  for (int n = 0; n < N; ++n) {
    const float* x = inp.data() + size_t(n) * C;
    const float m = internal::reduce_sum(x, C) / C;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int c = 0;
    for (; c + 8 <= C; c += 8)
      for (int k = 0; k < 8; ++k) acc[k] += (x[c + k] - m) * (x[c + k] - m);
    float v = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(v / C + kEps);
    float* o = out.data() + size_t(n) * C;
    for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

TP_VECTOR_CLONES void layernorm_backward_input(std::span<float> dinp, std::span<const float> dout,
                                               std::span<const float> inp,
                                               std::span<const float> mean,
                                               std::span<const float> rstd,
                                               std::span<const float> weight, int N, int C) {
  // dinp (N,C), dout (N,C), inp (N,C), mean (N), rstd (N), weight (C)
  for (int n = 0; n < N; ++n) {
    const float* d = dout.data() + size_t(n) * C;
    const float* x = inp.data() + size_t(n) * C;
    float* di = dinp.data() + size_t(n) * C;
    const float m = mean[n], s = rstd[n];
    float a0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, a1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int c = 0;
    for (; c + 8 <= C; c += 8)
      for (int k = 0; k < 8; ++k) {
        const float dn = weight[c + k] * d[c + k];
        a0[k] += dn;
        a1[k] += dn * (x[c + k] - m) * s;
      }
    float dnorm_mean = 0, dnorm_xhat = 0;
    for (int k = 0; k < 8; ++k) {
      dnorm_mean += a0[k];
      dnorm_xhat += a1[k];
    }
    for (; c < C; ++c) {
      const float dn = weight[c] * d[c];
      dnorm_mean += dn;
      dnorm_xhat += dn * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_xhat /= C;
    for (int i = 0; i < C; ++i) {
      const float xhat = (x[i] - m) * s;
      di[i] = (weight[i] * d[i] - dnorm_mean - xhat * dnorm_xhat) * s;
    }
  }
}

TP_VECTOR_CLONES void layernorm_backward_weight(std::span<float> dweight, std::span<float> dbias,
                                                std::span<const float> dout,
                                                std::span<const float> inp,
                                                std::span<const float> mean,
                                                std::span<const float> rstd, int N, int C) {
  // dweight (C), dbias (C), dout (N,C), inp (N,C), mean (N), rstd (N)
  for (int n = 0; n < N; ++n) {
    const float* d = dout.data() + size_t(n) * C;
    const float* x = inp.data() + size_t(n) * C;
    const float m = mean[n], s = rstd[n];
    for (int i = 0; i < C; ++i) {
      dweight[i] += d[i] * (x[i] - m) * s;
      dbias[i] += d[i];
    }
  }
}

template <typename F>
void layernorm_forward_ref(std::span<F> out, std::span<F> mean, std::span<F> rstd,
                           std::span<const F> inp, std::span<const F> weight,
                           std::span<const F> bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    F m = 0;
    for (int c = 0; c < C; ++c) m += inp[size_t(n) * C + c];
    m /= C;
    F v = 0;
    for (int c = 0; c < C; ++c) {
      const F x = inp[size_t(n) * C + c] - m;
      v += x * x;
    }
    v /= C;
    const F s = F(1) / std::sqrt(v + F(kEps));
    for (int c = 0; c < C; ++c)
      out[size_t(n) * C + c] = (inp[size_t(n) * C + c] - m) * s * weight[c] + bias[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename F>
void layernorm_backward_input_ref(std::span<F> dinp, std::span<const F> dout,
                                  std::span<const F> inp, std::span<const F> mean,
                                  std::span<const F> rstd, std::span<const F> weight, int N,
                                  int C) {
  for (int n = 0; n < N; ++n) {
    F dmean = 0, dxhat = 0;
    for (int c = 0; c < C; ++c) {
      const F xhat = (inp[size_t(n) * C + c] - mean[n]) * rstd[n];
      const F dn = weight[c] * dout[size_t(n) * C + c];
      dmean += dn;
      dxhat += dn * xhat;
    }
    dmean /= C;
    dxhat /= C;
    for (int c = 0; c < C; ++c) {
      const F xhat = (inp[size_t(n) * C + c] - mean[n]) * rstd[n];
      const F dn = weight[c] * dout[size_t(n) * C + c];
      dinp[size_t(n) * C + c] = (dn - dmean - xhat * dxhat) * rstd[n];
    }
  }
}

template <typename F>
void layernorm_backward_weight_ref(std::span<F> dweight, std::span<F> dbias,
                                   std::span<const F> dout, std::span<const F> inp,
                                   std::span<const F> mean, std::span<const F> rstd, int N, int C) {
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) {
      const F xhat = (inp[size_t(n) * C + c] - mean[n]) * rstd[n];
      dweight[c] += dout[size_t(n) * C + c] * xhat;
      dbias[c] += dout[size_t(n) * C + c];
    }
}

#define TP_INSTANTIATE(F)                                                                          \
  template void layernorm_forward_ref<F>(std::span<F>, std::span<F>, std::span<F>,                 \
                                         std::span<const F>, std::span<const F>,                   \
                                         std::span<const F>, int, int);                            \
  template void layernorm_backward_input_ref<F>(std::span<F>, std::span<const F>,                  \
                                                std::span<const F>, std::span<const F>,            \
                                                std::span<const F>, std::span<const F>, int, int); \
  template void layernorm_backward_weight_ref<F>(std::span<F>, std::span<F>, std::span<const F>,   \
                                                 std::span<const F>, std::span<const F>,           \
                                                 std::span<const F>, int, int);
TP_INSTANTIATE(float)
TP_INSTANTIATE(double)
#undef TP_INSTANTIATE

}  // namespace tightpipe::nn
