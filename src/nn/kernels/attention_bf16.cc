// Causal multi-head self-attention with bf16 matmuls (FP32 accumulation) on oneDNN: q, k, v are
// kept head-major (3, B, NH, T, hs) so that each of the six attention matmuls is ONE dense batched
// matmul over the B*NH heads (one cached primitive per shape), instead of B*NH*(T/64) small calls.
// The batched matmuls cover the whole (T,T) square: the masked half costs FLOPs but at bf16 speed
// that is cheaper than the per-call overhead of skipping it. Softmax and its backward are FP32.
#include <algorithm>
#include <cmath>

#include "nn/kernels/fast_math.h"
#include "tightpipe/check.h"
#include "tightpipe/kernels_bf16.h"

namespace tightpipe::nn {
namespace {

// (B,T,ld) row-major, head h at column offset col0 + h*hs  <->  (B*NH, T, hs) head-major.
TP_VECTOR_CLONES void heads_from_rows(Bf16* __restrict dst, const float* __restrict src, int B,
                                      int T, int NH, int hs, int ld, int col0) {
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      Bf16* d = dst + (size_t(b) * NH + h) * T * hs;
      for (int t = 0; t < T; ++t) {
        const float* s = src + (size_t(b) * T + t) * ld + col0 + h * hs;
        for (int e = 0; e < hs; ++e) d[size_t(t) * hs + e] = bf16_from_float(s[e]);
      }
    }
}

TP_VECTOR_CLONES void rows_from_heads(Bf16* __restrict dst, const float* __restrict src, int B,
                                      int T, int NH, int hs, int ld, int col0) {
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const float* s = src + (size_t(b) * NH + h) * T * hs;
      for (int t = 0; t < T; ++t) {
        Bf16* d = dst + (size_t(b) * T + t) * ld + col0 + h * hs;
        for (int e = 0; e < hs; ++e) d[e] = bf16_from_float(s[size_t(t) * hs + e]);
      }
    }
}

// Causal softmax of one score row (n = i + 1 visible keys) into bf16 probabilities.
TP_VECTOR_CLONES void softmax_row(Bf16* __restrict p, float* __restrict row, int n, int T,
                                  float scale) {
  const float mx = internal::reduce_max(row, n);
  for (int j = 0; j < n; ++j) row[j] = internal::fast_expf((row[j] - mx) * scale);
  const float inv = 1.0f / internal::reduce_sum(row, n);
  for (int j = 0; j < n; ++j) p[j] = bf16_from_float(row[j] * inv);
  for (int j = n; j < T; ++j) p[j] = Bf16{};
}

// ds = bf16(scale * p * (da - sum_j p da)) over the visible keys, 0 above the diagonal.
TP_VECTOR_CLONES void softmax_backward_row(Bf16* __restrict ds, const Bf16* __restrict p,
                                           const float* __restrict da, int n, int T, float scale) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int j = 0;
  for (; j + 8 <= n; j += 8)
    for (int k = 0; k < 8; ++k) acc[k] += bf16_to_float(p[j + k]) * da[j + k];
  float dot = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; j < n; ++j) dot += bf16_to_float(p[j]) * da[j];
  for (j = 0; j < n; ++j) ds[j] = bf16_from_float(scale * bf16_to_float(p[j]) * (da[j] - dot));
  for (j = n; j < T; ++j) ds[j] = Bf16{};
}

}  // namespace

void qkv_to_heads_bf16(std::span<Bf16> qkvh, std::span<const float> qkv, int B, int T, int C,
                       int NH) {
  TP_CHECK(
      C % NH == 0 && qkvh.size() >= size_t(B) * T * 3 * C && qkv.size() >= size_t(B) * T * 3 * C,
      "qkv_to_heads_bf16 shapes B=", B, " T=", T, " C=", C, " NH=", NH);
  const size_t part = size_t(B) * T * C;
  for (int p = 0; p < 3; ++p)
    heads_from_rows(qkvh.data() + p * part, qkv.data(), B, T, NH, C / NH, 3 * C, p * C);
}

size_t attention_bf16_scratch_floats(int B, int T, int C, int NH) {
  return size_t(B) * NH * T * T + 3 * size_t(B) * T * C;
}
size_t attention_bf16_scratch_halves(int B, int T, int C, int NH) {
  return size_t(B) * NH * T * T + size_t(B) * T * C;
}

void attention_forward_bf16(std::span<Bf16> out, std::span<Bf16> att, std::span<const Bf16> qkvh,
                            std::span<float> scratch, int B, int T, int C, int NH) {
  const size_t BH = size_t(B) * NH, TT = size_t(T) * T, part = size_t(B) * T * C;
  TP_CHECK(C % NH == 0 && out.size() >= part && att.size() >= BH * TT && qkvh.size() >= 3 * part &&
               scratch.size() >= attention_bf16_scratch_floats(B, T, C, NH),
           "attention_forward_bf16 shapes B=", B, " T=", T, " C=", C, " NH=", NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::span<const Bf16> q = qkvh.subspan(0, part), k = qkvh.subspan(part, part),
                              v = qkvh.subspan(2 * part, part);
  const std::span<float> scores = scratch.subspan(0, BH * TT), o = scratch.subspan(BH * TT, part);
  // scores (BH,T,T) = q (BH,T,hs) @ k^T (k stored (T,hs)).
  batched_matmul_bf16(scores, q, k, int(BH), T, hs, T, false, true);
  for (size_t bh = 0; bh < BH; ++bh)
    for (int i = 0; i < T; ++i)
      softmax_row(att.data() + bh * TT + size_t(i) * T, scores.data() + bh * TT + size_t(i) * T,
                  i + 1, T, scale);
  // o (BH,T,hs) = att (BH,T,T) @ v (BH,T,hs); then (B,T,C) rows, rounded.
  batched_matmul_bf16(o, att, v, int(BH), T, T, hs, false, false);
  rows_from_heads(out.data(), o.data(), B, T, NH, hs, C, 0);
}

void attention_backward_input_bf16(std::span<Bf16> dqkv, std::span<const float> dout,
                                   std::span<const Bf16> qkvh, std::span<const Bf16> att,
                                   std::span<float> scratch, std::span<Bf16> scratch16, int B,
                                   int T, int C, int NH) {
  const size_t BH = size_t(B) * NH, TT = size_t(T) * T, part = size_t(B) * T * C;
  TP_CHECK(C % NH == 0 && dqkv.size() >= 3 * part && dout.size() >= part &&
               qkvh.size() >= 3 * part && att.size() >= BH * TT &&
               scratch.size() >= attention_bf16_scratch_floats(B, T, C, NH) &&
               scratch16.size() >= attention_bf16_scratch_halves(B, T, C, NH),
           "attention_backward_input_bf16 shapes B=", B, " T=", T, " C=", C, " NH=", NH);
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const std::span<const Bf16> q = qkvh.subspan(0, part), k = qkvh.subspan(part, part),
                              v = qkvh.subspan(2 * part, part);
  const std::span<Bf16> dO = scratch16.subspan(0, part), ds = scratch16.subspan(part, BH * TT);
  const std::span<float> da = scratch.subspan(0, BH * TT);
  const std::span<float> dq = scratch.subspan(BH * TT, part),
                         dk = scratch.subspan(BH * TT + part, part),
                         dv = scratch.subspan(BH * TT + 2 * part, part);
  heads_from_rows(dO.data(), dout.data(), B, T, NH, hs, C, 0);
  // datt (BH,T,T) = dO (T,hs) @ v^T;  dv (BH,T,hs) = att^T @ dO.
  batched_matmul_bf16(da, dO, v, int(BH), T, hs, T, false, true);
  batched_matmul_bf16(dv, att, dO, int(BH), T, T, hs, true, false);
  for (size_t bh = 0; bh < BH; ++bh)
    for (int i = 0; i < T; ++i) {
      const size_t r = bh * TT + size_t(i) * T;
      softmax_backward_row(ds.data() + r, att.data() + r, da.data() + r, i + 1, T, scale);
    }
  // dq = ds @ k;  dk = ds^T @ q (ds already holds the 1/sqrt(hs)).
  batched_matmul_bf16(dq, ds, k, int(BH), T, T, hs, false, false);
  batched_matmul_bf16(dk, ds, q, int(BH), T, T, hs, true, false);
  rows_from_heads(dqkv.data(), dq.data(), B, T, NH, hs, 3 * C, 0);
  rows_from_heads(dqkv.data(), dk.data(), B, T, NH, hs, 3 * C, C);
  rows_from_heads(dqkv.data(), dv.data(), B, T, NH, hs, 3 * C, 2 * C);
}

}  // namespace tightpipe::nn
