// bf16 conversions against an independent round-to-nearest-even oracle (double arithmetic), and
// the oneDNN matmuls (bf16 and FP32) against OpenBLAS's FP32 matmuls with per-element bounds
// derived from the formats (see docs/bf16.md):
//   u32 = 2^-24 (FP32 unit roundoff), u16 = 2^-8 (bf16 unit roundoff, 8 significant bits),
//   S = sum_k |a_k||b_k| for the output element (computed exactly enough in double).
// * Same (bf16-rounded) inputs, FP32 accumulation in a different order: each side's sum is within
//   K u32 S of the exact one (Higham's gamma_K), so |bf16 kernel - FP32 kernel| <= 2 K u32 S.
// * Unrounded FP32 inputs: each factor moves by at most u16 relative, a product by at most
//   (2 u16 + u16^2), so |bf16 kernel - FP32 kernel| <= (2 u16 + u16^2) S + 2 K u32 S.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "nn/bf16_testing.h"
#include "tightpipe/base.h"
#include "tightpipe/cpu_kernels.h"
#include "tightpipe/kernels.h"
#include "tightpipe/kernels_bf16.h"

extern "C" int omp_get_max_threads() __attribute__((weak));

namespace tightpipe::nn {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Round to nearest even by comparing distances to the two bf16 neighbours in double.
uint16_t rne_oracle(float x) {
  const uint32_t u = to_bits(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t mag = u & 0x7FFFFFFFu;
  const uint32_t lo = mag >> 16, hi = lo + 1;  // hi may be 0x7F80 (Inf): its value is 2^128
  const double x_abs = std::abs(double(x));
  const double v_lo = double(from_bits(lo << 16));
  const double v_hi = hi == 0x7F80u ? std::ldexp(1.0, 128) : double(from_bits(hi << 16));
  uint32_t pick;
  if (x_abs - v_lo < v_hi - x_abs) {
    pick = lo;
  } else if (x_abs - v_lo > v_hi - x_abs) {
    pick = hi;
  } else {
    pick = (lo & 1u) ? hi : lo;
  }
  return uint16_t((sign >> 16) | pick);
}

TEST(Bf16Convert, EveryBf16RoundTripsExactlyAndNanStaysNan) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = bf16_to_float(Bf16{uint16_t(b)});
    ASSERT_EQ(to_bits(f), b << 16) << "bf16 -> fp32 must only append zero bits, b=" << b;
    const Bf16 back = bf16_from_float(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(bf16_to_float(back))) << "NaN became a number, b=" << b;
      ASSERT_EQ(back.bits & 0x8000u, b & 0x8000u) << "NaN sign, b=" << b;
    } else {
      ASSERT_EQ(back.bits, b) << "representable value changed, b=" << b;
    }
  }
}

TEST(Bf16Convert, TiesToEvenAndNeighbours) {
  const float one = 1.0f, ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  // Halfway between 1 (even) and 1+ulp (odd): down to 1.
  EXPECT_EQ(bf16_from_float(one + ulp / 2).bits, 0x3F80u);
  // Halfway between 1+ulp (odd) and 1+2ulp (even): up.
  EXPECT_EQ(bf16_from_float(one + 3 * ulp / 2).bits, 0x3F82u);
  // One fp32 ulp either side of the first tie.
  EXPECT_EQ(bf16_from_float(std::nextafter(one + ulp / 2, 2.0f)).bits, 0x3F81u);
  EXPECT_EQ(bf16_from_float(std::nextafter(one + ulp / 2, 0.0f)).bits, 0x3F80u);
  // Negative mirror.
  EXPECT_EQ(bf16_from_float(-(one + ulp / 2)).bits, 0xBF80u);
  EXPECT_EQ(bf16_from_float(-(one + 3 * ulp / 2)).bits, 0xBF82u);
  // A tie whose rounding carries into the exponent: 2 - ulp/2 is halfway between 1.9921875 (odd
  // mantissa 0x7F) and 2.0.
  EXPECT_EQ(bf16_from_float(2.0f - ulp / 2).bits, 0x4000u);
}

TEST(Bf16Convert, InfNanAndMaxFinite) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bf16_from_float(inf).bits, 0x7F80u);
  EXPECT_EQ(bf16_from_float(-inf).bits, 0xFF80u);
  EXPECT_TRUE(std::isinf(bf16_to_float(Bf16{0x7F80})));
  // NaNs whose payload sits only in the low 16 bits: plain rounding would make them Inf.
  for (uint32_t nan : {0x7F800001u, 0x7F80FFFFu, 0x7FC00000u, 0xFF800001u, 0x7FFFFFFFu}) {
    const Bf16 b = bf16_from_float(from_bits(nan));
    EXPECT_TRUE(std::isnan(bf16_to_float(b))) << std::hex << nan;
    EXPECT_EQ(b.bits & 0x8000u, (nan >> 16) & 0x8000u) << std::hex << nan;
  }
  // Max finite bf16 (0x7F7F = (2 - 2^-7) 2^127) is exact; just under the midpoint to the next
  // (Inf) stays; the midpoint rounds to even, which is Inf; FLT_MAX is above it: Inf.
  EXPECT_EQ(bf16_to_float(Bf16{0x7F7F}), std::ldexp(255.0f, 120));
  EXPECT_EQ(bf16_from_float(std::ldexp(255.0f, 120)).bits, 0x7F7Fu);
  EXPECT_EQ(bf16_from_float(from_bits(0x7F7F7FFFu)).bits, 0x7F7Fu);
  EXPECT_EQ(bf16_from_float(from_bits(0x7F7F8000u)).bits, 0x7F80u);
  EXPECT_EQ(bf16_from_float(FLT_MAX).bits, 0x7F80u);
  EXPECT_EQ(bf16_from_float(-FLT_MAX).bits, 0xFF80u);
  // Subnormals are kept (no flush to zero).
  EXPECT_EQ(bf16_from_float(from_bits(0x00010000u)).bits, 0x0001u);
  EXPECT_EQ(bf16_from_float(from_bits(0x00018000u)).bits, 0x0002u);  // tie, odd -> up
}

TEST(Bf16Convert, SpansMatchTheOracleOnRandomBitPatterns) {
  Rng r(7);
  const size_t n = 200003;  // odd: exercises the vector loop's tail
  std::vector<float> x(n);
  for (auto& v : x) {
    do {
      v = from_bits(uint32_t(r.next_u64()));
    } while (std::isnan(v));
  }
  // Exact ties at random exponents too.
  for (size_t i = 0; i < n; i += 3) x[i] = from_bits((to_bits(x[i]) & 0xFFFF0000u) | 0x8000u);
  std::vector<Bf16> b(n);
  float_to_bf16(b, x);
  std::vector<float> back(n);
  bf16_to_float(back, b);
  for (size_t i = 0; i < n; ++i) {
    if (std::isinf(x[i]) || (to_bits(x[i]) & 0x7F800000u) == 0x7F800000u) continue;
    ASSERT_EQ(b[i].bits, rne_oracle(x[i])) << "x bits " << std::hex << to_bits(x[i]);
    ASSERT_EQ(to_bits(back[i]), uint32_t(b[i].bits) << 16);
  }
}

// ---- matmuls --------------------------------------------------------------------------------

std::vector<float> randn(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = float(r.normal());
  return v;
}
std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> b(v.size());
  float_to_bf16(b, v);
  return b;
}
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> f(v.size());
  bf16_to_float(f, to_bf16(v));
  return f;
}
std::vector<double> abs_d(const std::vector<float>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); ++i) d[i] = std::abs(double(v[i]));
  return d;
}

using bf16_testing::kU16;
using bf16_testing::kU32;

// |got - want| <= tol_per_sum * S + |base| (abs of what was there before accumulating, counted in
// the FP32 rounding term) per element; returns the largest |got - want| / S seen.
double expect_within(const std::vector<float>& got, const std::vector<float>& want,
                     const std::vector<double>& S, double tol_per_sum, const std::string& what) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - double(want[i]));
    EXPECT_LE(err, tol_per_sum * S[i])
        << what << " element " << i << " got " << got[i] << " want " << want[i] << " S " << S[i];
    if (err > tol_per_sum * S[i]) return worst;
    if (S[i] > 0) worst = std::max(worst, err / S[i]);
  }
  return worst;
}

struct MatmulShape {
  int N, IC, OC;
};
const MatmulShape kShapes[] = {{1, 5, 3}, {7, 5, 6}, {7, 16, 33}, {33, 64, 17}, {128, 96, 384}};

TEST(MatmulBf16, ForwardMatchesFp32TwinWithinDerivedBounds) {
  for (const MatmulShape s : kShapes) {
    for (const bool with_bias : {true, false}) {
      const int N = s.N, IC = s.IC, OC = s.OC;
      const std::string what = "forward N=" + std::to_string(N) + " IC=" + std::to_string(IC) +
                               " OC=" + std::to_string(OC) + (with_bias ? " bias" : "");
      const auto a = randn(size_t(N) * IC, 1), w = randn(size_t(OC) * IC, 2);
      const auto bias = with_bias ? randn(OC, 3) : std::vector<float>{};
      std::vector<float> got(size_t(N) * OC, 7.f);
      matmul_forward_bf16(got, to_bf16(a), to_bf16(w), bias, N, IC, OC);
      // S = |a| |w|^T + |bias| in double.
      std::vector<double> S(size_t(N) * OC);
      const auto ab = abs_d(bias);
      matmul_forward_ref<double>(S, abs_d(a), abs_d(w), ab, N, IC, OC);
      std::vector<float> twin(size_t(N) * OC);
      matmul_forward(twin, rounded(a), rounded(w), bias, N, IC, OC);
      expect_within(got, twin, S, 2 * (IC + 1) * kU32, what + " vs FP32 on rounded inputs");
      matmul_forward(twin, a, w, bias, N, IC, OC);
      const double bound = 2 * kU16 + kU16 * kU16 + 2 * (IC + 1) * kU32;
      const double worst =
          expect_within(got, twin, S, bound, what + " vs FP32 on unrounded inputs");
      std::printf("%s: max |bf16 - fp32| / S = %.3g (bound %.3g, 2^-8 = %.3g)\n", what.c_str(),
                  worst, bound, kU16);
      // The inputs were rounded for real: the bf16 result is not the FP32 one.
      if (IC >= 16) {
        EXPECT_GT(worst, 1e-4) << what;
      }
      // oneDNN FP32 against OpenBLAS FP32.
      std::vector<float> dn(size_t(N) * OC, 7.f);
      matmul_forward_dnnl(dn, a, w, bias, N, IC, OC);
      expect_within(dn, twin, S, 2 * (IC + 1) * kU32, what + " oneDNN FP32 vs OpenBLAS");
    }
  }
}

TEST(MatmulBf16, BackwardInputMatchesFp32TwinWithinDerivedBounds) {
  for (const MatmulShape s : kShapes) {
    const int N = s.N, IC = s.IC, OC = s.OC;
    const std::string what = "backward_input N=" + std::to_string(N) + " IC=" + std::to_string(IC) +
                             " OC=" + std::to_string(OC);
    const auto dout = randn(size_t(N) * OC, 4), w = randn(size_t(OC) * IC, 5);
    std::vector<float> got(size_t(N) * IC, 99.f);  // overwritten, not accumulated
    matmul_backward_input_bf16(got, to_bf16(dout), to_bf16(w), N, IC, OC);
    std::vector<double> S(size_t(N) * IC);
    matmul_backward_input_ref<double>(S, abs_d(dout), abs_d(w), N, IC, OC);
    std::vector<float> twin(size_t(N) * IC);
    matmul_backward_input(twin, rounded(dout), rounded(w), N, IC, OC);
    expect_within(got, twin, S, 2 * OC * kU32, what + " vs FP32 on rounded inputs");
    matmul_backward_input(twin, dout, w, N, IC, OC);
    expect_within(got, twin, S, 2 * kU16 + kU16 * kU16 + 2 * OC * kU32,
                  what + " vs FP32 on unrounded inputs");
    std::vector<float> dn(size_t(N) * IC, 99.f);
    matmul_backward_input_dnnl(dn, dout, w, N, IC, OC);
    expect_within(dn, twin, S, 2 * OC * kU32, what + " oneDNN FP32 vs OpenBLAS");
  }
}

TEST(MatmulBf16, BackwardWeightAccumulatesAndMatchesFp32TwinWithinDerivedBounds) {
  for (const MatmulShape s : kShapes) {
    for (const bool with_bias : {true, false}) {
      const int N = s.N, IC = s.IC, OC = s.OC;
      const std::string what = "backward_weight N=" + std::to_string(N) +
                               " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) +
                               (with_bias ? " bias" : "");
      const auto dout = randn(size_t(N) * OC, 6), a = randn(size_t(N) * IC, 8);
      const auto dw0 = randn(size_t(OC) * IC, 9), db0 = randn(OC, 10);
      std::vector<float> dw = dw0, db = with_bias ? db0 : std::vector<float>{};
      matmul_backward_weight_bf16(dw, db, to_bf16(dout), to_bf16(a), N, IC, OC);
      // S over the N products plus what was already there (the += is one more FP32 addition).
      std::vector<double> Sw = abs_d(dw0), Sb = abs_d(db0);
      matmul_backward_weight_ref<double>(Sw, Sb, abs_d(dout), abs_d(a), N, IC, OC);
      std::vector<float> tw = dw0, tb = with_bias ? db0 : std::vector<float>{};
      matmul_backward_weight(tw, tb, rounded(dout), rounded(a), N, IC, OC);
      expect_within(dw, tw, Sw, 2 * (N + 1) * kU32, what + " dweight vs FP32 on rounded inputs");
      if (with_bias) {
        expect_within(db, tb, Sb, 2 * (N + 1) * kU32, what + " dbias vs FP32 on rounded inputs");
      }
      tw = dw0;
      tb = with_bias ? db0 : std::vector<float>{};
      matmul_backward_weight(tw, tb, dout, a, N, IC, OC);
      expect_within(dw, tw, Sw, 2 * kU16 + kU16 * kU16 + 2 * (N + 1) * kU32,
                    what + " dweight vs FP32 on unrounded inputs");
      if (with_bias) {
        // dbias sums bf16 dout: one rounded factor per term.
        expect_within(db, tb, Sb, kU16 + 2 * (N + 1) * kU32,
                      what + " dbias vs FP32 on unrounded inputs");
      }
      std::vector<float> dn = dw0, dnb = with_bias ? db0 : std::vector<float>{};
      matmul_backward_weight_dnnl(dn, dnb, dout, a, N, IC, OC);
      expect_within(dn, tw, Sw, 2 * (N + 1) * kU32, what + " oneDNN FP32 vs OpenBLAS");
      if (with_bias) expect_within(dnb, tb, Sb, 2 * (N + 1) * kU32, what + " oneDNN dbias");
    }
  }
}

// Same shape called again with new data (a cached primitive must read the new pointers), and
// threads running their own primitives at once.
TEST(MatmulBf16, CachedPrimitivesReadNewBuffersAndThreadsAreIndependent) {
  auto check = [](int N, int IC, int OC, uint64_t seed) {
    for (int rep = 0; rep < 3; ++rep) {
      const auto a = randn(size_t(N) * IC, seed + rep), w = randn(size_t(OC) * IC, seed + 50);
      std::vector<float> got(size_t(N) * OC), twin(size_t(N) * OC);
      matmul_forward_bf16(got, to_bf16(a), to_bf16(w), {}, N, IC, OC);
      matmul_forward(twin, rounded(a), rounded(w), {}, N, IC, OC);
      std::vector<double> S(size_t(N) * OC);
      matmul_forward_ref<double>(S, abs_d(a), abs_d(w), {}, N, IC, OC);
      expect_within(got, twin, S, 2 * (IC + 1) * kU32, "rep " + std::to_string(rep));
    }
  };
  std::thread t1(check, 64, 48, 80, 100), t2(check, 64, 48, 80, 200), t3(check, 9, 5, 3, 300);
  check(64, 48, 80, 400);
  t1.join();
  t2.join();
  t3.join();
}

// set_dnnl_threads reaches the OpenMP runtime oneDNN runs on, per calling thread.
TEST(MatmulBf16, SetDnnlThreadsSetsTheCallingThreadsOpenMpCount) {
  ASSERT_NE(omp_get_max_threads, nullptr) << "no OpenMP runtime loaded with oneDNN";
  std::thread([] {
    const auto a = randn(8 * 4, 1);
    std::vector<float> out(8 * 8);
    for (const int n : {3, 1, 2}) {
      set_dnnl_threads(n);
      matmul_forward_bf16(out, to_bf16(a), to_bf16(a), {}, 8, 4, 8);
      EXPECT_EQ(omp_get_max_threads(), n);
    }
    set_dnnl_threads(0);
  }).join();
}

TEST(MatmulBf16, IsaLineNamesTheKernelAndAgreesWithCpuinfo) {
  const std::string line = bf16_matmul_isa();
  SCOPED_TRACE(line);
  EXPECT_NE(line.find("bf16 matmul: "), std::string::npos);
  if (!bf16_native()) {
    EXPECT_NE(line.find("will be slow"), std::string::npos);
  }
  // nn_bf16_test_avx2 (ctest) runs this binary with DNNL_MAX_CPU_ISA=AVX2: no bf16 kernel at all.
  if (const char* isa = std::getenv("DNNL_MAX_CPU_ISA")) {
    if (std::string(isa) == "AVX2") {
      EXPECT_NE(line.find("converted to FP32"), std::string::npos);
    }
    return;
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  if (text.empty()) GTEST_SKIP() << "no /proc/cpuinfo";
  const bool has = text.find(" avx512_bf16") != std::string::npos;
  EXPECT_EQ(bf16_native(), has);
  if (has) {
    EXPECT_NE(line.find("(native bf16)"), std::string::npos);
    EXPECT_NE(line.find("bf16"), std::string::npos);
  } else {
    EXPECT_NE(line.find("will be slow"), std::string::npos);
  }
}

// Issue 30: the kernel header of a --bf16 run names the bf16 backend and both measured rates; where
// oneDNN runs no native bf16 (this binary under DNNL_MAX_CPU_ISA=AVX2, or a CPU without bf16
// instructions) it says the matmuls are emulated and by how much slower than FP32. cpuid agrees
// with /proc/cpuinfo on AVX512-BF16.
TEST(MatmulBf16, KernelHeaderSaysWhatBf16CostsHere) {
  const std::string h = kernel_header(true);
  SCOPED_TRACE(h);
  EXPECT_NE(h.find("FP32 on OpenBLAS SGEMM at "), std::string::npos);
  EXPECT_NE(h.find("; bf16 on "), std::string::npos);
  EXPECT_GT(measured_matmul_flops(true), 0);
  if (!bf16_native()) {
    EXPECT_NE(h.find("bf16 matmuls are emulated"), std::string::npos);
    EXPECT_NE(h.find("x the time of FP32"), std::string::npos);
  } else {
    EXPECT_EQ(h.find("emulated"), std::string::npos);
  }
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string text((std::istreambuf_iterator<char>(cpuinfo)), std::istreambuf_iterator<char>());
  if (text.empty()) return;
  EXPECT_EQ(detect_cpu_features().avx512_bf16, text.find(" avx512_bf16") != std::string::npos);
  EXPECT_EQ(detect_cpu_features().avx2, text.find(" avx2") != std::string::npos);
}

}  // namespace
}  // namespace tightpipe::nn
