// The bf16 attention kernels against their FP32 twins (attention_*_ref in double) on bf16-exact
// inputs, per element, within bounds derived from the roundings each kernel makes.
//
// Notation: u16 = 2^-8 (bf16 unit roundoff), u32 = 2^-24, gamma_K = K u32 (FP32 sum of K terms in
// any order, first order: Higham). Products of two bf16 values are exact in FP32, so a bf16
// matmul's only errors are its FP32 sums: |computed - exact| <= gamma_(K+1) sum_k |a_k b_k|.
//
// Forward, per row i of a head (n = i + 1 visible keys):
//   score error (scaled) d_i = max_j scale gamma_(hs+1) S_ij, S_ij = sum_e |q_ie k_je|, plus the
//   rounding of the exponent's argument x = (s - max) scale, 2 u32 max|x|;
//   softmax moves each probability by at most (e^(2 d_i) - 1) relative (every score moves by
//   at most d_i, numerator and denominator), fast_expf (2 ulp), the sum and the division add
//   (n + 8) u32: rel_i; rounding the probability to bf16 adds u16 (1 + rel_i): p_err_ij;
//   out_i = sum_j p_j v_j with FP32 sums: E = sum_j p_err_ij p_j |v_j| + gamma_(n+1) sum_j p_j
//   |v_j| (1 + p_err), and the output rounded to bf16: |out - ref| <= E + u16 (|ref| + E).
// Backward, with att (bf16) and dout (bf16-exact) given, so the reference sees the same inputs:
//   da_ij = dO_i . v_j: err_da = gamma_(hs+1) sum_e |dO_ie v_je|;
//   dot_i = sum_j p_ij da_ij (FP32): err_dot = sum_j p_ij err_da_ij + gamma_(n+1) sum_j p |da|;
//   ds_ij = scale p_ij (da_ij - dot_i), rounded to bf16: err_ds = scale p (err_da + err_dot)
//   (1 + 3 u32) + (u16 + 3 u32) (|ds| + scale p (err_da + err_dot));
//   dq_i = sum_j ds_ij k_j: err <= sum_j err_ds_ij |k_j| + gamma_(n+1) sum_j (|ds| + err_ds) |k_j|,
//   dk_j likewise over i, dv_j = sum_i p_ij dO_i with gamma_(T+1); each output rounded to bf16 adds
//   u16 (|ref| + err). Second-order terms (u16^2 and smaller) are covered by a factor 1.001.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "nn/bf16_testing.h"
#include "tightpipe/base.h"
#include "tightpipe/kernels.h"
#include "tightpipe/kernels_bf16.h"

namespace tightpipe::nn {
namespace {

using bf16_testing::kU16;
using bf16_testing::kU32;

std::vector<float> random_bf16(size_t n, uint64_t seed, float scale) {
  Rng r(seed);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_float(bf16_from_float(scale * r.normal()));
  return v;
}

struct AttentionShape {
  int B, T, C, NH;
};

class AttentionBf16 : public ::testing::TestWithParam<AttentionShape> {};

TEST_P(AttentionBf16, ForwardAndBackwardWithinDerivedBounds) {
  // Plain ints, not a structured binding: the lambdas below capture them (clang 14, the sanitizer
  // lane's compiler, refuses to capture a structured binding).
  const AttentionShape shape = GetParam();
  const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH;
  const int hs = C / NH;
  const size_t NC = size_t(B) * T * C, BH = size_t(B) * NH, TT = size_t(T) * T;
  const double scale = 1.0 / std::sqrt(double(float(hs)));
  // Scores of a few units: peaked, non-trivial softmax rows.
  const std::vector<float> qkv = random_bf16(3 * NC, 1, 1.5f);
  const std::vector<float> dout = random_bf16(NC, 2, 1.0f);
  std::vector<Bf16> qkvh(3 * NC), out16(NC), att16(BH * TT), dqkv16(3 * NC);
  std::vector<float> scratch(attention_bf16_scratch_floats(B, T, C, NH));
  std::vector<Bf16> scratch16(attention_bf16_scratch_halves(B, T, C, NH));
  qkv_to_heads_bf16(qkvh, qkv, B, T, C, NH);
  attention_forward_bf16(out16, att16, qkvh, scratch, B, T, C, NH);
  attention_backward_input_bf16(dqkv16, dout, qkvh, att16, scratch, scratch16, B, T, C, NH);

  const std::vector<double> qkv_d(qkv.begin(), qkv.end()), dout_d(dout.begin(), dout.end());
  std::vector<double> out_d(NC), att_d(BH * TT), dqkv_d(3 * NC), att16_d(BH * TT);
  attention_forward_ref<double>(out_d, att_d, qkv_d, B, T, C, NH);
  for (size_t i = 0; i < att16.size(); ++i) att16_d[i] = bf16_to_float(att16[i]);
  attention_backward_input_ref<double>(dqkv_d, dout_d, qkv_d, att16_d, B, T, C, NH);

  auto Q = [&](int b, int t, int h, int e) {
    return qkv_d[(size_t(b) * T + t) * 3 * C + h * hs + e];
  };
  auto K = [&](int b, int t, int h, int e) { return Q(b, t, h, e + C); };
  auto Vv = [&](int b, int t, int h, int e) { return Q(b, t, h, e + 2 * C); };
  auto DO = [&](int b, int t, int h, int e) {
    return dout_d[(size_t(b) * T + t) * C + h * hs + e];
  };
  const double slack = 1.001;
  double worst_f = 0, worst_b = 0;  // max |err| / bound
  std::vector<double> err_ds(TT), ds(TT);
  std::vector<double> bdq(size_t(T) * hs), bdk(size_t(T) * hs), bdv(size_t(T) * hs);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const double* P = att_d.data() + (size_t(b) * NH + h) * TT;
      const double* P16 = att16_d.data() + (size_t(b) * NH + h) * TT;
      // ---- forward
      for (int i = 0; i < T; ++i) {
        const int n = i + 1;
        double d = 0, smax = -1e300, smin = 1e300;
        for (int j = 0; j < n; ++j) {
          double S = 0, s = 0;
          for (int e = 0; e < hs; ++e) {
            S += std::abs(Q(b, i, h, e) * K(b, j, h, e));
            s += Q(b, i, h, e) * K(b, j, h, e);
          }
          d = std::max(d, scale * (hs + 1) * kU32 * S);
          smax = std::max(smax, s);
          smin = std::min(smin, s);
        }
        d += 2 * kU32 * (smax - smin) * scale + 2 * kU32 * d;
        const double rel = std::expm1(2 * d) + (n + 8) * kU32;
        const double perr = rel + kU16 * (1 + rel);
        for (int j = 0; j < n; ++j) {
          const double got = bf16_to_float(att16[(size_t(b) * NH + h) * TT + size_t(i) * T + j]);
          const double bound = slack * perr * P[size_t(i) * T + j] + 1e-45;
          worst_f = std::max(worst_f, std::abs(got - P[size_t(i) * T + j]) / bound);
        }
        for (int e = 0; e < hs; ++e) {
          double E = 0, A = 0;
          for (int j = 0; j < n; ++j) {
            E += perr * P[size_t(i) * T + j] * std::abs(Vv(b, j, h, e));
            A += P[size_t(i) * T + j] * std::abs(Vv(b, j, h, e));
          }
          E += (n + 1) * kU32 * A * (1 + perr);
          const double ref = out_d[(size_t(b) * T + i) * C + h * hs + e];
          const double got = bf16_to_float(out16[(size_t(b) * T + i) * C + h * hs + e]);
          const double bound = slack * (E + kU16 * (std::abs(ref) + E)) + 1e-45;
          worst_f = std::max(worst_f, std::abs(got - ref) / bound);
        }
      }
      // ---- backward, on the kernel's bf16 probabilities P16
      for (int i = 0; i < T; ++i) {
        const int n = i + 1;
        std::vector<double> da(n), eda(n);
        for (int j = 0; j < n; ++j) {
          double s = 0, S = 0;
          for (int e = 0; e < hs; ++e) {
            s += DO(b, i, h, e) * Vv(b, j, h, e);
            S += std::abs(DO(b, i, h, e) * Vv(b, j, h, e));
          }
          da[j] = s;
          eda[j] = (hs + 1) * kU32 * S;
        }
        double dot = 0, edot = 0, A = 0;
        for (int j = 0; j < n; ++j) {
          const double p = P16[size_t(i) * T + j];
          dot += p * da[j];
          edot += p * eda[j];
          A += p * std::abs(da[j]);
        }
        edot += (n + 1) * kU32 * A;
        for (int j = 0; j < T; ++j) {
          const double p = j < n ? P16[size_t(i) * T + j] : 0.0;
          ds[size_t(i) * T + j] = j < n ? scale * p * (da[j] - dot) : 0.0;
          const double e0 = j < n ? scale * p * (eda[j] + edot) : 0.0;
          err_ds[size_t(i) * T + j] =
              e0 * (1 + 3 * kU32) + (kU16 + 3 * kU32) * (std::abs(ds[size_t(i) * T + j]) + e0);
        }
      }
      for (int t = 0; t < T; ++t)
        for (int e = 0; e < hs; ++e) {
          double eq = 0, aq = 0, ek = 0, ak = 0, av = 0;
          for (int j = 0; j < T; ++j) {  // dq_t = sum_j ds_tj k_j
            eq += err_ds[size_t(t) * T + j] * std::abs(K(b, j, h, e));
            aq += (std::abs(ds[size_t(t) * T + j]) + err_ds[size_t(t) * T + j]) *
                  std::abs(K(b, j, h, e));
            // dk_t = sum_i ds_it q_i; dv_t = sum_i p_it dO_i
            ek += err_ds[size_t(j) * T + t] * std::abs(Q(b, j, h, e));
            ak += (std::abs(ds[size_t(j) * T + t]) + err_ds[size_t(j) * T + t]) *
                  std::abs(Q(b, j, h, e));
            av += P16[size_t(j) * T + t] * std::abs(DO(b, j, h, e));
          }
          const double errs[3] = {eq + (T + 1) * kU32 * aq, ek + (T + 1) * kU32 * ak,
                                  (T + 1) * kU32 * av};
          for (int part = 0; part < 3; ++part) {
            const size_t at = (size_t(b) * T + t) * 3 * C + part * C + h * hs + e;
            const double ref = dqkv_d[at], got = bf16_to_float(dqkv16[at]);
            const double bound = slack * (errs[part] + kU16 * (std::abs(ref) + errs[part])) + 1e-45;
            worst_b = std::max(worst_b, std::abs(got - ref) / bound);
          }
        }
    }
  std::printf("B=%d T=%d C=%d NH=%d: max err/bound forward %.3f, backward %.3f\n", B, T, C, NH,
              worst_f, worst_b);
  EXPECT_LE(worst_f, 1.0);
  EXPECT_LE(worst_b, 1.0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionBf16,
                         ::testing::Values(AttentionShape{1, 5, 8, 2}, AttentionShape{2, 37, 32, 2},
                                           AttentionShape{1, 64, 128, 2},
                                           AttentionShape{2, 33, 96, 3}),
                         [](const ::testing::TestParamInfo<AttentionShape>& i) {
                           const AttentionShape& s = i.param;
                           return "B" + std::to_string(s.B) + "T" + std::to_string(s.T) + "C" +
                                  std::to_string(s.C) + "NH" + std::to_string(s.NH);
                         });

// The head-major layout: every element lands where the attention matmuls read it, rounded once.
TEST(AttentionBf16Layout, QkvToHeadsPermutesAndRounds) {
  const int B = 2, T = 3, C = 8, NH = 2, hs = 4;
  std::vector<float> qkv(size_t(B) * T * 3 * C);
  Rng r(3);
  for (float& x : qkv) x = r.normal();
  std::vector<Bf16> h(qkv.size());
  qkv_to_heads_bf16(h, qkv, B, T, C, NH);
  for (int p = 0; p < 3; ++p)
    for (int b = 0; b < B; ++b)
      for (int hh = 0; hh < NH; ++hh)
        for (int t = 0; t < T; ++t)
          for (int e = 0; e < hs; ++e) {
            const size_t src = (size_t(b) * T + t) * 3 * C + p * C + hh * hs + e;
            const size_t dst = (((size_t(p) * B + b) * NH + hh) * T + t) * hs + e;
            ASSERT_EQ(h[dst].bits, bf16_from_float(qkv[src]).bits) << p << b << hh << t << e;
          }
}

}  // namespace
}  // namespace tightpipe::nn
