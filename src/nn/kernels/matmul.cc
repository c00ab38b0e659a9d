// Matmul on cblas_sgemm (OpenBLAS), the one place where the model spends most of its FLOPs.
#include <cblas.h>

#include "tightpipe/check.h"
#include "tightpipe/cpu_kernels.h"
#include "tightpipe/kernels.h"
#include "tightpipe/kernels_bf16.h"

namespace tightpipe::nn {
namespace {
// The BLAS core rule (cpu_kernels.h) before main: OpenBLAS initialised itself when it loaded (a
// shared library's initialisers run before the program's), and no matmul has run yet. Here, in
// the file every matmul links, so that no program of the project can leave it out.
[[maybe_unused]] const bool kBlasCoreRule = (apply_blas_core_rule(), true);
}  // namespace

// oneDNN (the bf16 matmuls) gets the same count: one knob for the threads of a rank's kernels.
void set_blas_threads(int threads) {
  openblas_set_num_threads(threads);
  set_dnnl_threads(threads);
}
const char* blas_core_name() { return openblas_get_corename(); }

void matmul_forward(std::span<float> out, std::span<const float> inp, std::span<const float> weight,
                    std::span<const float> bias, int N, int IC, int OC) {
  // out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC)
  TP_CHECK(out.size() >= size_t(N) * OC && inp.size() >= size_t(N) * IC &&
               weight.size() >= size_t(OC) * IC,
           "matmul_forward shapes N=", N, " IC=", IC, " OC=", OC);
  float beta = 0.0f;
  if (!bias.empty()) {
    for (int n = 0; n < N; ++n) {
      float* o = out.data() + size_t(n) * OC;
      for (int c = 0; c < OC; ++c) o[c] = bias[c];
    }
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, IC, 1.0f, inp.data(), IC,
              weight.data(), IC, beta, out.data(), OC);
}

void matmul_backward_input(std::span<float> dinp, std::span<const float> dout,
                           std::span<const float> weight, int N, int IC, int OC) {
  // dinp (N,IC) = dout (N,OC) @ weight (OC,IC)
  TP_CHECK(dinp.size() >= size_t(N) * IC && dout.size() >= size_t(N) * OC);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, IC, OC, 1.0f, dout.data(), OC,
              weight.data(), IC, 0.0f, dinp.data(), IC);
}

void matmul_backward_weight(std::span<float> dweight, std::span<float> dbias,
                            std::span<const float> dout, std::span<const float> inp, int N, int IC,
                            int OC) {
  // dweight (OC,IC) += dout (N,OC)^T @ inp (N,IC); dbias (OC) += sum_n dout
  TP_CHECK(dweight.size() >= size_t(OC) * IC && dout.size() >= size_t(N) * OC);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, IC, N, 1.0f, dout.data(), OC, inp.data(),
              IC, 1.0f, dweight.data(), IC);
  if (!dbias.empty()) {
    for (int n = 0; n < N; ++n) {
      const float* d = dout.data() + size_t(n) * OC;
      for (int c = 0; c < OC; ++c) dbias[c] += d[c];
    }
  }
}

template <typename F>
void matmul_forward_ref(std::span<F> out, std::span<const F> inp, std::span<const F> weight,
                        std::span<const F> bias, int N, int IC, int OC) {
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      F s = bias.empty() ? F(0) : bias[o];
      for (int i = 0; i < IC; ++i) s += inp[size_t(n) * IC + i] * weight[size_t(o) * IC + i];
      out[size_t(n) * OC + o] = s;
    }
}

template <typename F>
void matmul_backward_input_ref(std::span<F> dinp, std::span<const F> dout,
                               std::span<const F> weight, int N, int IC, int OC) {
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < IC; ++i) {
      F s = 0;
      for (int o = 0; o < OC; ++o) s += dout[size_t(n) * OC + o] * weight[size_t(o) * IC + i];
      dinp[size_t(n) * IC + i] = s;
    }
}

template <typename F>
void matmul_backward_weight_ref(std::span<F> dweight, std::span<F> dbias, std::span<const F> dout,
                                std::span<const F> inp, int N, int IC, int OC) {
  for (int o = 0; o < OC; ++o) {
    for (int i = 0; i < IC; ++i) {
      F s = 0;
      for (int n = 0; n < N; ++n) s += dout[size_t(n) * OC + o] * inp[size_t(n) * IC + i];
      dweight[size_t(o) * IC + i] += s;
    }
    if (!dbias.empty()) {
      F s = 0;
      for (int n = 0; n < N; ++n) s += dout[size_t(n) * OC + o];
      dbias[o] += s;
    }
  }
}

#define TP_INSTANTIATE(F)                                                                          \
  template void matmul_forward_ref<F>(std::span<F>, std::span<const F>, std::span<const F>,        \
                                      std::span<const F>, int, int, int);                          \
  template void matmul_backward_input_ref<F>(std::span<F>, std::span<const F>, std::span<const F>, \
                                             int, int, int);                                       \
  template void matmul_backward_weight_ref<F>(std::span<F>, std::span<F>, std::span<const F>,      \
                                              std::span<const F>, int, int, int);
TP_INSTANTIATE(float)
TP_INSTANTIATE(double)
#undef TP_INSTANTIATE

}  // namespace tightpipe::nn
