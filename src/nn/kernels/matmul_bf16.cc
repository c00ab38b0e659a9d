// Matmul with bf16 inputs and FP32 accumulation on oneDNN's matmul primitive (and the same three
// matmuls in FP32 through oneDNN, to measure against OpenBLAS). One engine, stream and primitive
// cache per calling thread: no locks, and each primitive is created once per thread and shape.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/kernels/fast_math.h"
#include "tightpipe/check.h"
#include "tightpipe/kernels_bf16.h"

// OpenMP's per-thread thread count, from the OpenMP runtime libdnnl itself loads (Debian builds
// oneDNN with GCC's libgomp). Declared weak and not linked, so that a clang build (whose -fopenmp
// would bring a second runtime, libomp) uses the same runtime as oneDNN; null if none is loaded.
extern "C" void omp_set_num_threads(int) __attribute__((weak));

namespace tightpipe::nn {

// The conversion loops carry the elementwise kernels' clones (TP_VECTOR_CLONES, fast_math.h): the
// same arithmetic, wider vectors.
TP_VECTOR_CLONES void float_to_bf16(std::span<Bf16> out, std::span<const float> in) {
  TP_CHECK(out.size() >= in.size(), "float_to_bf16 out ", out.size(), " < in ", in.size());
  const float* __restrict src = in.data();
  Bf16* __restrict dst = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_from_float(src[i]);
}

TP_VECTOR_CLONES void bf16_to_float(std::span<float> out, std::span<const Bf16> in) {
  TP_CHECK(out.size() >= in.size(), "bf16_to_float out ", out.size(), " < in ", in.size());
  const Bf16* __restrict src = in.data();
  float* __restrict dst = out.data();
  const size_t n = in.size();
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

std::atomic<int> g_dnnl_threads{0};

// dst (M,N) [+]= src (M,K) @ wei (K,N) [+ bias (N)]. src_t: src is stored as (K,M) row-major;
// wei_t: wei is stored as (N,K) row-major. accumulate: dst += (oneDNN sum post-op).
struct MatmulKey {
  int64_t M, K, N;
  bool src_t, wei_t, bias, accumulate;
  dt type;
  int64_t batch = 0;  // 0: 2-D; else (batch, rows, cols) descriptors, dense batches
  bool operator==(const MatmulKey&) const = default;
};
struct MatmulKeyHash {
  size_t operator()(const MatmulKey& k) const {
    size_t h = size_t(k.M);
    h = h * 1000003u ^ size_t(k.K);
    h = h * 1000003u ^ size_t(k.N);
    h = h * 1000003u ^ (size_t(k.src_t) | size_t(k.wei_t) << 1 | size_t(k.bias) << 2 |
                        size_t(k.accumulate) << 3 | size_t(k.type) << 4);
    h = h * 1000003u ^ size_t(k.batch);
    return h;
  }
};

// supported false: oneDNN has no implementation (bf16 on a CPU without AVX-512: oneDNN 2.6 needs
// avx512_core for bf16); run() then converts the bf16 operands to FP32 and uses the FP32 matmul.
struct CachedMatmul {
  dnnl::matmul prim;
  dnnl::memory src, wei, bias, dst;
  std::string impl;
  bool supported = true;
};

dnnl::memory::desc plain(int64_t rows, int64_t cols, bool transposed, dt type) {
  // Logical (rows, cols); stored row-major as (rows, cols), or as (cols, rows) when transposed.
  return dnnl::memory::desc(dims{rows, cols}, type, transposed ? dims{1, rows} : dims{cols, 1});
}

dnnl::memory::desc batched(int64_t batch, int64_t rows, int64_t cols, bool transposed, dt type) {
  if (batch == 0) return plain(rows, cols, transposed, type);
  return dnnl::memory::desc(dims{batch, rows, cols}, type,
                            transposed ? dims{rows * cols, 1, rows} : dims{rows * cols, cols, 1});
}

// Per-thread oneDNN state: engine, stream and the primitives created by this thread.
struct ThreadContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::unordered_map<MatmulKey, CachedMatmul, MatmulKeyHash> cache;
  int threads_applied = 0;

  CachedMatmul& get(const MatmulKey& k) {
    auto it = cache.find(k);
    if (it != cache.end()) return it->second;
    const auto src_md = batched(k.batch, k.M, k.K, k.src_t, k.type);
    const auto wei_md = batched(k.batch, k.K, k.N, k.wei_t, k.type);
    const auto dst_md = batched(k.batch, k.M, k.N, false, dt::f32);
    const auto bias_md = k.bias ? plain(1, k.N, false, dt::f32) : dnnl::memory::desc();
    dnnl::primitive_attr attr;
    if (k.accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    try {
      const dnnl::matmul::desc desc(src_md, wei_md, bias_md, dst_md);
      const dnnl::matmul::primitive_desc pd(desc, attr, engine);
      CachedMatmul c{dnnl::matmul(pd),
                     dnnl::memory(src_md, engine, nullptr),
                     dnnl::memory(wei_md, engine, nullptr),
                     k.bias ? dnnl::memory(bias_md, engine, nullptr) : dnnl::memory(),
                     dnnl::memory(dst_md, engine, nullptr),
                     pd.impl_info_str()};
      return cache.emplace(k, std::move(c)).first->second;
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented && k.type == dt::bf16) {
        CachedMatmul c;
        c.supported = false;
        return cache.emplace(k, std::move(c)).first->second;
      }
      // FP32 has a reference implementation everywhere: any other failure is a bug.
      TP_CHECK(false, "oneDNN matmul creation failed (", e.what(), ") M=", k.M, " K=", k.K,
               " N=", k.N, " bf16=", k.type == dt::bf16);
    }
    std::abort();
  }

  // FP32 copies of bf16 operands for the fallback (same layout, element by element).
  std::vector<float> fallback_src, fallback_wei;
};

ThreadContext& context() {
  thread_local ThreadContext ctx;
  const int want = g_dnnl_threads.load(std::memory_order_relaxed);
  if (want > 0 && ctx.threads_applied != want && omp_set_num_threads != nullptr) {
    omp_set_num_threads(want);
    ctx.threads_applied = want;
  }
  return ctx;
}

void run(const MatmulKey& k, const void* src, const void* wei, const float* bias, float* dst) {
  ThreadContext& ctx = context();
  CachedMatmul& m = ctx.get(k);
  if (!m.supported) {
    // No bf16 kernel on this CPU: the same products (exact in FP32) and FP32 sums, via FP32.
    const size_t nb = size_t(std::max<int64_t>(k.batch, 1));
    const size_t ns = nb * k.M * k.K, nw = nb * k.K * k.N;
    ctx.fallback_src.resize(ns);
    ctx.fallback_wei.resize(nw);
    bf16_to_float(ctx.fallback_src, {static_cast<const Bf16*>(src), ns});
    bf16_to_float(ctx.fallback_wei, {static_cast<const Bf16*>(wei), nw});
    MatmulKey f = k;
    f.type = dt::f32;
    run(f, ctx.fallback_src.data(), ctx.fallback_wei.data(), bias, dst);
    return;
  }
  m.src.set_data_handle(const_cast<void*>(src));
  m.wei.set_data_handle(const_cast<void*>(wei));
  m.dst.set_data_handle(dst);
  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, m.src}, {DNNL_ARG_WEIGHTS, m.wei}, {DNNL_ARG_DST, m.dst}};
  if (k.bias) {
    m.bias.set_data_handle(const_cast<float*>(bias));
    args.emplace(DNNL_ARG_BIAS, m.bias);
  }
  m.prim.execute(ctx.stream, args);
  ctx.stream.wait();
}

template <typename T>
constexpr dt dtype_of() {
  if constexpr (std::is_same_v<T, float>) {
    return dt::f32;
  } else {
    static_assert(std::is_same_v<T, Bf16>);
    return dt::bf16;
  }
}

template <typename T>
void forward(std::span<float> out, std::span<const T> inp, std::span<const T> weight,
             std::span<const float> bias, int N, int IC, int OC) {
  // out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (OC)
  TP_CHECK(N > 0 && IC > 0 && OC > 0 && out.size() >= size_t(N) * OC &&
               inp.size() >= size_t(N) * IC && weight.size() >= size_t(OC) * IC &&
               (bias.empty() || bias.size() >= size_t(OC)),
           "matmul_forward shapes N=", N, " IC=", IC, " OC=", OC);
  const MatmulKey k{N, IC, OC, false, true, !bias.empty(), false, dtype_of<T>()};
  run(k, inp.data(), weight.data(), bias.empty() ? nullptr : bias.data(), out.data());
}

template <typename T>
void backward_input(std::span<float> dinp, std::span<const T> dout, std::span<const T> weight,
                    int N, int IC, int OC) {
  // dinp (N,IC) = dout (N,OC) @ weight (OC,IC)
  TP_CHECK(N > 0 && IC > 0 && OC > 0 && dinp.size() >= size_t(N) * IC &&
               dout.size() >= size_t(N) * OC && weight.size() >= size_t(OC) * IC,
           "matmul_backward_input shapes N=", N, " IC=", IC, " OC=", OC);
  const MatmulKey k{N, OC, IC, false, false, false, false, dtype_of<T>()};
  run(k, dout.data(), weight.data(), nullptr, dinp.data());
}

template <typename T>
float to_f32(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    return bf16_to_float(x);
  }
}

template <typename T>
void backward_weight(std::span<float> dweight, std::span<float> dbias, std::span<const T> dout,
                     std::span<const T> inp, int N, int IC, int OC) {
  // dweight (OC,IC) += dout (N,OC)^T @ inp (N,IC); dbias (OC) += sum_n dout
  TP_CHECK(N > 0 && IC > 0 && OC > 0 && dweight.size() >= size_t(OC) * IC &&
               dout.size() >= size_t(N) * OC && inp.size() >= size_t(N) * IC &&
               (dbias.empty() || dbias.size() >= size_t(OC)),
           "matmul_backward_weight shapes N=", N, " IC=", IC, " OC=", OC);
  const MatmulKey k{OC, N, IC, true, false, false, true, dtype_of<T>()};
  run(k, dout.data(), inp.data(), nullptr, dweight.data());
  if (!dbias.empty()) {
    float* __restrict db = dbias.data();
    for (int n = 0; n < N; ++n) {
      const T* __restrict d = dout.data() + size_t(n) * OC;
      for (int c = 0; c < OC; ++c) db[c] += to_f32(d[c]);
    }
  }
}

const char* isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic:
      return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

}  // namespace

void set_dnnl_threads(int threads) {
  TP_CHECK(threads >= 0, "set_dnnl_threads(", threads, ")");
  g_dnnl_threads.store(threads, std::memory_order_relaxed);
}

bool bf16_native() {
  const auto isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

std::string bf16_matmul_isa() {
  const MatmulKey k{1024, 512, 512, false, true, true, false, dt::bf16};
  const CachedMatmul& m = context().get(k);
  const std::string impl =
      m.supported ? m.impl : "none in oneDNN for this CPU (bf16 converted to FP32 for each call)";
  const dnnl::version_t* v = dnnl::version();
  std::string line = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                     std::to_string(v->patch) + " bf16 matmul: " + impl + ", CPU ISA " +
                     isa_name(dnnl::get_effective_cpu_isa());
  if (bf16_native()) {
    line += " (native bf16)";
  } else {
    line += " (no native bf16: bf16 matmuls will be slow, slower than FP32)";
  }
  return line;
}

void matmul_forward_bf16(std::span<float> out, std::span<const Bf16> inp,
                         std::span<const Bf16> weight, std::span<const float> bias, int N, int IC,
                         int OC) {
  forward<Bf16>(out, inp, weight, bias, N, IC, OC);
}
void matmul_backward_input_bf16(std::span<float> dinp, std::span<const Bf16> dout,
                                std::span<const Bf16> weight, int N, int IC, int OC) {
  backward_input<Bf16>(dinp, dout, weight, N, IC, OC);
}
void matmul_backward_weight_bf16(std::span<float> dweight, std::span<float> dbias,
                                 std::span<const Bf16> dout, std::span<const Bf16> inp, int N,
                                 int IC, int OC) {
  backward_weight<Bf16>(dweight, dbias, dout, inp, N, IC, OC);
}

void matmul_forward_dnnl(std::span<float> out, std::span<const float> inp,
                         std::span<const float> weight, std::span<const float> bias, int N, int IC,
                         int OC) {
  forward<float>(out, inp, weight, bias, N, IC, OC);
}
void matmul_backward_input_dnnl(std::span<float> dinp, std::span<const float> dout,
                                std::span<const float> weight, int N, int IC, int OC) {
  backward_input<float>(dinp, dout, weight, N, IC, OC);
}
void matmul_backward_weight_dnnl(std::span<float> dweight, std::span<float> dbias,
                                 std::span<const float> dout, std::span<const float> inp, int N,
                                 int IC, int OC) {
  backward_weight<float>(dweight, dbias, dout, inp, N, IC, OC);
}

}  // namespace tightpipe::nn

namespace tightpipe::nn {

void batched_matmul_bf16(std::span<float> dst, std::span<const Bf16> a, std::span<const Bf16> b,
                         int batch, int M, int K, int N, bool a_t, bool b_t) {
  TP_CHECK(batch > 0 && M > 0 && K > 0 && N > 0 && dst.size() >= size_t(batch) * M * N &&
               a.size() >= size_t(batch) * M * K && b.size() >= size_t(batch) * K * N,
           "batched_matmul_bf16 shapes batch=", batch, " M=", M, " K=", K, " N=", N);
  const MatmulKey k{M, K, N, a_t, b_t, false, false, dt::bf16, batch};
  run(k, a.data(), b.data(), nullptr, dst.data());
}

TP_VECTOR_CLONES void round_to_bf16(std::span<Bf16> out16, std::span<float> inout) {
  TP_CHECK(out16.size() >= inout.size(), "round_to_bf16 out ", out16.size(), " < ", inout.size());
  float* __restrict x = inout.data();
  Bf16* __restrict o = out16.data();
  const size_t n = inout.size();
  for (size_t i = 0; i < n; ++i) {
    o[i] = bf16_from_float(x[i]);
    x[i] = bf16_to_float(o[i]);
  }
}

TP_VECTOR_CLONES void add_to_bf16(std::span<Bf16> out16, std::span<const float> a,
                                  std::span<const float> b) {
  TP_CHECK(out16.size() >= a.size() && b.size() >= a.size(), "add_to_bf16 sizes ", out16.size(),
           " ", a.size(), " ", b.size());
  const float* __restrict pa = a.data();
  const float* __restrict pb = b.data();
  Bf16* __restrict o = out16.data();
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) o[i] = bf16_from_float(pa[i] + pb[i]);
}

TP_VECTOR_CLONES void accumulate_bf16(std::span<float> out, std::span<const Bf16> in) {
  TP_CHECK(in.size() >= out.size(), "accumulate_bf16 in ", in.size(), " < out ", out.size());
  float* __restrict o = out.data();
  const Bf16* __restrict p = in.data();
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) o[i] += bf16_to_float(p[i]);
}

}  // namespace tightpipe::nn
