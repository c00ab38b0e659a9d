// BF16 matmul kernels (mixed precision) on oneDNN's matmul primitive, beside the FP32 family of
// kernels.h. A bf16 value is the upper half of an IEEE-754 binary32 (1 sign, 8 exponent, 7 stored
// mantissa bits), stored as a uint16_t inside `Bf16`. Matmul inputs (activations, weights and
// output gradients) are bf16 spans; every product is accumulated in FP32 and every output
// (out, dinp, dweight, dbias) is FP32, so master weights and gradients stay FP32.
//
// On a CPU without AVX-512 oneDNN 2.6 has no bf16 matmul: the bf16 kernels then convert their
// bf16 operands to FP32 per call and run the FP32 oneDNN matmul (same results within the same
// bounds, slow); bf16_matmul_isa() says so.
//
// The *_dnnl functions are the same three matmuls in FP32 through oneDNN (for measuring against
// OpenBLAS's cblas_sgemm; the model keeps OpenBLAS for FP32 unless oneDNN measures faster).
// The naive twins of every matmul here are the FP32 *_ref of kernels.h applied to the inputs
// converted with bf16_to_float (exact): the bf16 kernels differ from them only in the order of the
// FP32 accumulation.
//
// Dimension alphabet as in kernels.h: N = B*T rows, IC/OC input/output channels.
//
// Thread safety: every function may be called from several threads at once on disjoint outputs.
// oneDNN objects live per calling thread (one dnnl::engine, one dnnl::stream and one primitive
// cache per thread, keyed by shape and dtypes: a primitive is created once per thread and shape and
// reused), so no locks are taken on the hot path. oneDNN runs on OpenMP here; the thread count it
// uses in each calling thread is set by set_dnnl_threads() (tightpipe sets 1 per rank).
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>

namespace tightpipe::nn {

// bf16 storage: the high 16 bits of a binary32.
struct Bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(Bf16) == 2);

// fp32 -> bf16, round to nearest, ties to even. NaN stays NaN (quiet, sign kept); values at or
// above the bf16 maximum plus half an ulp (3.3961e38) become +-Inf, as IEEE rounding requires.
inline Bf16 bf16_from_float(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  const bool is_nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  return Bf16{uint16_t(is_nan ? quiet_nan : rounded)};
}
// bf16 -> fp32, exact.
inline float bf16_to_float(Bf16 x) {
  const uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// out[i] = bf16_from_float(in[i]) over spans (vectorized loop). REQUIRES: out.size() >= in.size().
void float_to_bf16(std::span<Bf16> out, std::span<const float> in);
// out[i] = bf16_to_float(in[i]). REQUIRES: out.size() >= in.size().
void bf16_to_float(std::span<float> out, std::span<const Bf16> in);

// Sets the thread count oneDNN uses: a process-wide value that each thread applies to its own
// OpenMP setting (omp_set_num_threads of the runtime oneDNN loaded) on its next call here. 0
// applies nothing: OpenMP's default (all cores, or OMP_NUM_THREADS), or what the thread applied
// before.
void set_dnnl_threads(int threads);

// ---- matmul, bf16 inputs, FP32 accumulation and outputs ----------------------------------------
// out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias (FP32) may be empty.
void matmul_forward_bf16(std::span<float> out, std::span<const Bf16> inp,
                         std::span<const Bf16> weight, std::span<const float> bias, int N, int IC,
                         int OC);
// dinp (N,IC) = dout (N,OC) @ weight (OC,IC).
void matmul_backward_input_bf16(std::span<float> dinp, std::span<const Bf16> dout,
                                std::span<const Bf16> weight, int N, int IC, int OC);
// dweight (OC,IC) += dout (N,OC)^T @ inp (N,IC); dbias (OC) += sum_n dout (skipped when empty).
void matmul_backward_weight_bf16(std::span<float> dweight, std::span<float> dbias,
                                 std::span<const Bf16> dout, std::span<const Bf16> inp, int N,
                                 int IC, int OC);

// dst (batch,M,N) = op(a) @ op(b) for `batch` dense problems, bf16 inputs, FP32 accumulation and
// output. a is stored (batch,M,K) row-major, or (batch,K,M) when a_t; b is stored (batch,K,N), or
// (batch,N,K) when b_t. One oneDNN primitive per thread and shape (batched memory descriptors).
void batched_matmul_bf16(std::span<float> dst, std::span<const Bf16> a, std::span<const Bf16> b,
                         int batch, int M, int K, int N, bool a_t, bool b_t);

// ---- conversions fused with what produces the values -------------------------------------------
// out16[i] = bf16(inout[i]) and inout[i] = the rounded value, as a float.
void round_to_bf16(std::span<Bf16> out16, std::span<float> inout);
// out16[i] = bf16(a[i] + b[i]) (FP32 add, one rounding): a residual add ending in bf16.
void add_to_bf16(std::span<Bf16> out16, std::span<const float> a, std::span<const float> b);
// out[i] += bf16_to_float(in[i]).
void accumulate_bf16(std::span<float> out, std::span<const Bf16> in);

// ---- causal multi-head self-attention, bf16 matmuls (the twin of attention_* in kernels.h) -----
// Head-major bf16 layout of q, k, v: qkvh (3, B, NH, T, hs), each (b,h) slice of q, k or v
// contiguous (T,hs), so that every attention matmul is one dense batched matmul over B*NH.
// qkvh = bf16(qkv (B,T,3C)): the conversion of the qkv matmul output, fused with the permutation.
void qkv_to_heads_bf16(std::span<Bf16> qkvh, std::span<const float> qkv, int B, int T, int C,
                       int NH);
// Work space of the two kernels below: floats (both) and bf16 elements (backward only).
size_t attention_bf16_scratch_floats(int B, int T, int C, int NH);
size_t attention_bf16_scratch_halves(int B, int T, int C, int NH);
// out (B,T,C) = bf16(softmax(q k^T / sqrt(hs), causal) v) per head; att (B,NH,T,T) = the bf16
// probabilities (zero above the diagonal) for the backward. Scores and softmax in FP32; q k^T and
// att v are bf16 matmuls with FP32 accumulation over the full (T,T) square (the masked half is
// computed and ignored: one batched call instead of many small ones).
void attention_forward_bf16(std::span<Bf16> out, std::span<Bf16> att, std::span<const Bf16> qkvh,
                            std::span<float> scratch, int B, int T, int C, int NH);
// dqkv (B,T,3C) = bf16 of the gradient of qkv from dout (B,T,C) (FP32), qkvh and att. The softmax
// backward is FP32 on the bf16 probabilities; its result (times 1/sqrt(hs)) is rounded to bf16 as
// the input of the dq and dk matmuls.
void attention_backward_input_bf16(std::span<Bf16> dqkv, std::span<const float> dout,
                                   std::span<const Bf16> qkvh, std::span<const Bf16> att,
                                   std::span<float> scratch, std::span<Bf16> scratch16, int B,
                                   int T, int C, int NH);

// ---- the same three in FP32 through oneDNN (same contracts as matmul_* in kernels.h) -----------
void matmul_forward_dnnl(std::span<float> out, std::span<const float> inp,
                         std::span<const float> weight, std::span<const float> bias, int N, int IC,
                         int OC);
void matmul_backward_input_dnnl(std::span<float> dinp, std::span<const float> dout,
                                std::span<const float> weight, int N, int IC, int OC);
void matmul_backward_weight_dnnl(std::span<float> dweight, std::span<float> dbias,
                                 std::span<const float> dout, std::span<const float> inp, int N,
                                 int IC, int OC);

// Which implementation oneDNN picks for a representative bf16 matmul (1024 x 512 x 512, the
// primitive's impl_info_str, e.g. "brg:avx512_core_bf16"), the CPU ISA oneDNN uses, and whether
// that ISA has native bf16 instructions; without them the line says bf16 will be slow. One line.
std::string bf16_matmul_isa();
// True when oneDNN's effective ISA on this CPU has native bf16 (avx512_core_bf16 or newer).
bool bf16_native();

}  // namespace tightpipe::nn
