// Causal multi-head self-attention on cblas_sgemm. Rows go in blocks of kBlock queries; a block
// only multiplies against the keys it can see (columns [0, block end)), which skips most of the
// masked upper triangle.
#include <cblas.h>

#include <cmath>
#include <vector>

#include "nn/kernels/fast_math.h"
#include "tightpipe/check.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {
namespace {
constexpr int kBlock = 64;
}

TP_VECTOR_CLONES void attention_forward(std::span<float> out, std::span<float> att,
                                        std::span<const float> qkv, int B, int T, int C, int NH) {
  // out (B,T,C), att (B,NH,T,T), qkv (B,T,3C)
  TP_CHECK(C % NH == 0 && out.size() >= size_t(B) * T * C && att.size() >= size_t(B) * NH * T * T &&
           qkv.size() >= size_t(B) * T * 3 * C);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = 3 * C;
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv.data() + size_t(b) * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* a = att.data() + (size_t(b) * NH + h) * T * T;
      float* o = out.data() + size_t(b) * T * C + h * hs;
      for (int i0 = 0; i0 < T; i0 += kBlock) {
        const int i1 = std::min(T, i0 + kBlock);
        const int m = i1 - i0;
        // scores[i0:i1, 0:i1] = scale * q[i0:i1] k[0:i1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, scale, q + size_t(i0) * ld,
                    ld, k, ld, 0.0f, a + size_t(i0) * T, T);
        for (int i = i0; i < i1; ++i) {
          float* row = a + size_t(i) * T;
          const int n = i + 1;
          const float mx = internal::reduce_max(row, n);
          for (int j = 0; j < n; ++j) row[j] = internal::fast_expf(row[j] - mx);
          const float inv = 1.0f / internal::reduce_sum(row, n);
          for (int j = 0; j < n; ++j) row[j] *= inv;
          for (int j = n; j < T; ++j) row[j] = 0.0f;
        }
        // out[i0:i1] = att[i0:i1, 0:i1] v[0:i1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, 1.0f, a + size_t(i0) * T,
                    T, v, ld, 0.0f, o + size_t(i0) * C, C);
      }
    }
  }
}

TP_VECTOR_CLONES void attention_backward_input(std::span<float> dqkv, std::span<float> scratch,
                                               std::span<const float> dout,
                                               std::span<const float> qkv,
                                               std::span<const float> att, int B, int T, int C,
                                               int NH) {
  // dqkv (B,T,3C), scratch (T,T), dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T)
  TP_CHECK(scratch.size() >= size_t(T) * T && dqkv.size() >= size_t(B) * T * 3 * C);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const int ld = 3 * C;
  std::fill(dqkv.begin(), dqkv.begin() + size_t(B) * T * ld, 0.0f);
  float* ds = scratch.data();
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < NH; ++h) {
      const float* q = qkv.data() + size_t(b) * T * ld + h * hs;
      const float* k = q + C;
      const float* v = q + 2 * C;
      float* dq = dqkv.data() + size_t(b) * T * ld + h * hs;
      float* dk = dq + C;
      float* dv = dq + 2 * C;
      const float* a = att.data() + (size_t(b) * NH + h) * T * T;
      const float* dO = dout.data() + size_t(b) * T * C + h * hs;
      for (int i0 = 0; i0 < T; i0 += kBlock) {
        const int i1 = std::min(T, i0 + kBlock);
        const int m = i1 - i0;
        // datt[i0:i1, 0:i1] = dout[i0:i1] v[0:i1]^T
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, i1, hs, 1.0f, dO + size_t(i0) * C,
                    C, v, ld, 0.0f, ds + size_t(i0) * T, T);
        // dv[0:i1] += att[i0:i1, 0:i1]^T dout[i0:i1]
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, m, 1.0f, a + size_t(i0) * T, T,
                    dO + size_t(i0) * C, C, 1.0f, dv, ld);
        // softmax backward: dscore = att * (datt - sum_j att datt)
        for (int i = i0; i < i1; ++i) {
          const float* arow = a + size_t(i) * T;
          float* drow = ds + size_t(i) * T;
          const int n = i + 1;
          const float dot = internal::reduce_dot(arow, drow, n);
          for (int j = 0; j < n; ++j) drow[j] = arow[j] * (drow[j] - dot);
          for (int j = n; j < i1; ++j) drow[j] = 0.0f;
        }
        // dq[i0:i1] += scale * dscore k[0:i1];  dk[0:i1] += scale * dscore^T q[i0:i1]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, i1, scale,
                    ds + size_t(i0) * T, T, k, ld, 1.0f, dq + size_t(i0) * ld, ld);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1, hs, m, scale, ds + size_t(i0) * T,
                    T, q + size_t(i0) * ld, ld, 1.0f, dk, ld);
      }
    }
  }
}

template <typename F>
void attention_forward_ref(std::span<F> out, std::span<F> att, std::span<const F> qkv, int B, int T,
                           int C, int NH) {
  const int hs = C / NH;
  const F scale = F(1) / std::sqrt(F(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const F* q = qkv.data() + (size_t(b) * T + i) * 3 * C + h * hs;
        F* a = att.data() + ((size_t(b) * NH + h) * T + i) * T;
        F mx = -1e30;
        for (int j = 0; j <= i; ++j) {
          const F* k = qkv.data() + (size_t(b) * T + j) * 3 * C + C + h * hs;
          F s = 0;
          for (int e = 0; e < hs; ++e) s += q[e] * k[e];
          a[j] = s * scale;
          mx = std::max(mx, a[j]);
        }
        F sum = 0;
        for (int j = 0; j <= i; ++j) {
          a[j] = std::exp(a[j] - mx);
          sum += a[j];
        }
        for (int j = 0; j < T; ++j) a[j] = j <= i ? a[j] / sum : F(0);
        F* o = out.data() + (size_t(b) * T + i) * C + h * hs;
        for (int e = 0; e < hs; ++e) {
          F s = 0;
          for (int j = 0; j <= i; ++j)
            s += a[j] * qkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * hs + e];
          o[e] = s;
        }
      }
}

template <typename F>
void attention_backward_input_ref(std::span<F> dqkv, std::span<const F> dout,
                                  std::span<const F> qkv, std::span<const F> att, int B, int T,
                                  int C, int NH) {
  const int hs = C / NH;
  const F scale = F(1) / std::sqrt(F(hs));
  for (auto& x : dqkv) x = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const F* a = att.data() + ((size_t(b) * NH + h) * T + i) * T;
        const F* dO = dout.data() + (size_t(b) * T + i) * C + h * hs;
        std::vector<F> da(i + 1);
        for (int j = 0; j <= i; ++j) {
          F s = 0;
          for (int e = 0; e < hs; ++e) {
            s += dO[e] * qkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * hs + e];
            dqkv[(size_t(b) * T + j) * 3 * C + 2 * C + h * hs + e] += a[j] * dO[e];
          }
          da[j] = s;
        }
        F dot = 0;
        for (int j = 0; j <= i; ++j) dot += a[j] * da[j];
        for (int j = 0; j <= i; ++j) {
          const F ds = a[j] * (da[j] - dot) * scale;
          for (int e = 0; e < hs; ++e) {
            dqkv[(size_t(b) * T + i) * 3 * C + h * hs + e] +=
                ds * qkv[(size_t(b) * T + j) * 3 * C + C + h * hs + e];
            dqkv[(size_t(b) * T + j) * 3 * C + C + h * hs + e] +=
                ds * qkv[(size_t(b) * T + i) * 3 * C + h * hs + e];
          }
        }
      }
}

#define TP_INSTANTIATE(F)                                                                          \
  template void attention_forward_ref<F>(std::span<F>, std::span<F>, std::span<const F>, int, int, \
                                         int, int);                                                \
  template void attention_backward_input_ref<F>(std::span<F>, std::span<const F>,                  \
                                                std::span<const F>, std::span<const F>, int, int,  \
                                                int, int);
TP_INSTANTIATE(float)
TP_INSTANTIATE(double)
#undef TP_INSTANTIATE

}  // namespace tightpipe::nn
