// Branch-free float helpers that GCC vectorizes (no libm calls inside hot loops): exp by range
// reduction plus a Cephes polynomial, erf by Abramowitz & Stegun 7.1.26, and 8-lane reductions.
// Internal to src/nn.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

// Hot elementwise kernels are compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2, FMA)
// and the baseline, and the loader picks the best one the CPU runs (GCC function multiversioning);
// the BLAS side dispatches itself. The v4 clone halves GELU's time on Zen 5 (docs/cpu_kernels.md).
// A machine always picks the same clone, and the reductions keep their explicit lane order, so
// every rank and run on a machine computes the same arithmetic.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TP_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TP_VECTOR_CLONES
#endif

namespace tightpipe::nn::internal {

// exp(x) for x in [-87, 88] (clamped outside), relative error about 2 ulp.
inline float fast_expf(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kShift;
  const int32_t i = std::bit_cast<int32_t>(t) - 0x4B400000;
  const float n = t - kShift;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(i + 127) << 23);
  return p * scale;
}

// erf(z) given z and exp(-z*z), absolute error < 1.5e-7 (A&S 7.1.26).
inline float erf_with_exp(float z, float exp_minus_z2) {
  const float az = z < 0 ? -z : z;
  const float t = 1.0f / (1.0f + 0.3275911f * az);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * exp_minus_z2;
  return z < 0 ? -y : y;
}

inline float reduce_sum(const float* x, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += x[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += x[i];
  return s;
}

inline float reduce_max(const float* x, int n) {
  float acc[8];
  for (int k = 0; k < 8; ++k) acc[k] = -3.4e38f;
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] = std::max(acc[k], x[i + k]);
  float m = -3.4e38f;
  for (int k = 0; k < 8; ++k) m = std::max(m, acc[k]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

inline float reduce_dot(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace tightpipe::nn::internal
