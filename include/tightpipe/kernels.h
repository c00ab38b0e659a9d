// Kernels of the GPT model: llm.c-style free functions over std::span with explicit dimensions.
// Each family (encoder, layernorm, matmul, attention, gelu, residual, softmax cross-entropy, adamw)
// lives in one file of src/nn/kernels/ and has three entry points where it has parameters:
//   *_forward          computes the output from the input (overwrites `out`).
//   *_backward_input   gradient w.r.t. the input from the gradient of the output (OVERWRITES the
//                      input-gradient buffer, except residual_backward_input, which adds); it never
//                      touches parameter gradients.
//   *_backward_weight  ACCUMULATES (+=) parameter gradients; it may run any time after
//                      backward_input of the same microbatch, from what the caller kept.
// Every kernel has a naive `*_ref` twin, a plain loop templated on the scalar type (float and
// double are instantiated) so that tests compare the optimized version against it and check the
// twins against central finite differences in double precision.
//
// Dimension alphabet (used in every shape comment of tightpipe): B microbatch size, T sequence
// length, C hidden size, V vocabulary, NH attention heads, hs = C/NH head size, L layers,
// N = B*T rows, OC/IC output/input channels of a matmul.
//
// Thread safety: pure functions; safe to call concurrently on disjoint outputs. OpenBLAS runs
// with the thread count set by set_blas_threads() (tightpipe sets 1 per rank).
#pragma once

#include <cstdint>
#include <span>

namespace tightpipe::nn {

// Sets OpenBLAS's thread count for the whole process (openblas_set_num_threads), and oneDNN's
// (kernels_bf16.h set_dnnl_threads: the bf16 matmuls).
void set_blas_threads(int threads);
// Name of the OpenBLAS core kernel in use (e.g. "Haswell", "SkylakeX").
const char* blas_core_name();

// ---- token + position embedding -------------------------------------------------------------
// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T), wte (V,C), wpe (T,C).
// REQUIRES: 0 <= tokens < V (checked).
void encoder_forward(std::span<float> out, std::span<const int32_t> tokens,
                     std::span<const float> wte, std::span<const float> wpe, int B, int T, int C,
                     int V);
// dwte (V,C) += scatter of dout (B,T,C) by token; dwpe (T,C) += sum over b of dout.
void encoder_backward_weight(std::span<float> dwte, std::span<float> dwpe,
                             std::span<const float> dout, std::span<const int32_t> tokens, int B,
                             int T, int C, int V);
template <typename F>
void encoder_forward_ref(std::span<F> out, std::span<const int32_t> tokens, std::span<const F> wte,
                         std::span<const F> wpe, int B, int T, int C, int V);
template <typename F>
void encoder_backward_weight_ref(std::span<F> dwte, std::span<F> dwpe, std::span<const F> dout,
                                 std::span<const int32_t> tokens, int B, int T, int C, int V);

// ---- LayerNorm over the last dimension --------------------------------------------------------
// out (N,C), mean (N), rstd (N) from inp (N,C), weight (C), bias (C); eps 1e-5.
void layernorm_forward(std::span<float> out, std::span<float> mean, std::span<float> rstd,
                       std::span<const float> inp, std::span<const float> weight,
                       std::span<const float> bias, int N, int C);
// dinp (N,C) = d out / d inp applied to dout (N,C).
void layernorm_backward_input(std::span<float> dinp, std::span<const float> dout,
                              std::span<const float> inp, std::span<const float> mean,
                              std::span<const float> rstd, std::span<const float> weight, int N,
                              int C);
// dweight (C) += sum_n dout * xhat; dbias (C) += sum_n dout.
void layernorm_backward_weight(std::span<float> dweight, std::span<float> dbias,
                               std::span<const float> dout, std::span<const float> inp,
                               std::span<const float> mean, std::span<const float> rstd, int N,
                               int C);
template <typename F>
void layernorm_forward_ref(std::span<F> out, std::span<F> mean, std::span<F> rstd,
                           std::span<const F> inp, std::span<const F> weight,
                           std::span<const F> bias, int N, int C);
template <typename F>
void layernorm_backward_input_ref(std::span<F> dinp, std::span<const F> dout,
                                  std::span<const F> inp, std::span<const F> mean,
                                  std::span<const F> rstd, std::span<const F> weight, int N, int C);
template <typename F>
void layernorm_backward_weight_ref(std::span<F> dweight, std::span<F> dbias,
                                   std::span<const F> dout, std::span<const F> inp,
                                   std::span<const F> mean, std::span<const F> rstd, int N, int C);

// ---- matmul (cblas_sgemm) --------------------------------------------------------------------
// out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC); bias may be empty.
void matmul_forward(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                    std::span<const float> bias, int N, int IC, int OC);
// dinp (N,IC) = dout (N,OC) @ weight (OC,IC).
void matmul_backward_input(std::span<float> dinp, std::span<const float> dout,
                           std::span<const float> weight, int N, int IC, int OC);
// dweight (OC,IC) += dout (N,OC)^T @ inp (N,IC); dbias (OC) += sum_n dout (skipped when empty).
void matmul_backward_weight(std::span<float> dweight, std::span<float> dbias,
                            std::span<const float> dout, std::span<const float> inp, int N, int IC,
                            int OC);
template <typename F>
void matmul_forward_ref(std::span<F> out, std::span<const F> inp, std::span<const F> weight,
                        std::span<const F> bias, int N, int IC, int OC);
template <typename F>
void matmul_backward_input_ref(std::span<F> dinp, std::span<const F> dout,
                               std::span<const F> weight, int N, int IC, int OC);
template <typename F>
void matmul_backward_weight_ref(std::span<F> dweight, std::span<F> dbias, std::span<const F> dout,
                                std::span<const F> inp, int N, int IC, int OC);

// ---- causal multi-head self-attention (no parameters) -----------------------------------------
// qkv (B,T,3C) holds q, k, v side by side; head h uses channels [h*hs, (h+1)*hs) of each.
// out (B,T,C) = softmax(q k^T / sqrt(hs), causal) v per head; att (B,NH,T,T) keeps the
// probabilities (zero above the diagonal) for the backward pass.
void attention_forward(std::span<float> out, std::span<float> att, std::span<const float> qkv,
                       int B, int T, int C, int NH);
// dqkv (B,T,3C) from dout (B,T,C), qkv and att. scratch: T*T floats of work space.
void attention_backward_input(std::span<float> dqkv, std::span<float> scratch,
                              std::span<const float> dout, std::span<const float> qkv,
                              std::span<const float> att, int B, int T, int C, int NH);
template <typename F>
void attention_forward_ref(std::span<F> out, std::span<F> att, std::span<const F> qkv, int B, int T,
                           int C, int NH);
template <typename F>
void attention_backward_input_ref(std::span<F> dqkv, std::span<const F> dout,
                                  std::span<const F> qkv, std::span<const F> att, int B, int T,
                                  int C, int NH);

// ---- GELU, exact (erf) form as torch.nn.functional.gelu ----------------------------------------
// out (N) = x * Phi(x). The optimized version uses a polynomial erf/exp (abs error < 3e-7).
void gelu_forward(std::span<float> out, std::span<const float> inp, int64_t N);
// dinp (N) = dout * gelu'(inp).
void gelu_backward_input(std::span<float> dinp, std::span<const float> dout,
                         std::span<const float> inp, int64_t N);
template <typename F>
void gelu_forward_ref(std::span<F> out, std::span<const F> inp, int64_t N);
template <typename F>
void gelu_backward_input_ref(std::span<F> dinp, std::span<const F> dout, std::span<const F> inp,
                             int64_t N);

// ---- residual add ------------------------------------------------------------------------------
// out (N) = a (N) + b (N).
void residual_forward(std::span<float> out, std::span<const float> a, std::span<const float> b,
                      int64_t N);
// Both inputs receive dout unchanged; this ADDS dout (N) into the gradient of one branch, dinp (N).
void residual_backward_input(std::span<float> dinp, std::span<const float> dout, int64_t N);
template <typename F>
void residual_forward_ref(std::span<F> out, std::span<const F> a, std::span<const F> b, int64_t N);
template <typename F>
void residual_backward_input_ref(std::span<F> dinp, std::span<const F> dout, int64_t N);

// ---- softmax + cross-entropy -------------------------------------------------------------------
// probs (N,V) = softmax(logits (N,V)) (probs may alias logits); returns sum_n -log probs[n,target].
// REQUIRES: 0 <= targets < V (checked).
double softmax_xent_forward(std::span<float> probs, std::span<const float> logits,
                            std::span<const int32_t> targets, int N, int V);
// dlogits (N,V) = (probs - onehot(targets)) * scale (dlogits may alias probs); scale is the
// loss scale, e.g. 1/(tokens in the step) for the mean loss.
void softmax_xent_backward_input(std::span<float> dlogits, std::span<const float> probs,
                                 std::span<const int32_t> targets, float scale, int N, int V);
template <typename F>
double softmax_xent_forward_ref(std::span<F> probs, std::span<const F> logits,
                                std::span<const int32_t> targets, int N, int V);
template <typename F>
void softmax_xent_backward_input_ref(std::span<F> dlogits, std::span<const F> probs,
                                     std::span<const int32_t> targets, F scale, int N, int V);

// ---- AdamW (decoupled weight decay, Loshchilov & Hutter) ---------------------------------------
struct AdamWHyper {
  float lr = 3e-4f;           // learning rate of this step
  float beta1 = 0.9f;         // first-moment decay
  float beta2 = 0.95f;        // second-moment decay
  float eps = 1e-8f;          // denominator guard
  float weight_decay = 0.0f;  // decoupled decay (already 0 for tensors that are not decayed)
  int64_t step = 1;           // 1-based step count for the bias correction
};
// params, m, v (N) updated in place from grads (N):
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr (mhat / (sqrt(vhat) + eps) + wd p).
void adamw_update(std::span<float> params, std::span<const float> grads, std::span<float> m,
                  std::span<float> v, const AdamWHyper& h);
void adamw_update_ref(std::span<float> params, std::span<const float> grads, std::span<float> m,
                      std::span<float> v, const AdamWHyper& h);

}  // namespace tightpipe::nn
