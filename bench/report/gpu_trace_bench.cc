// gpu_trace_bench: can `tightpipe report` take 1 GB of PyTorch profiler traces? (issue 15: "traces
// of 1 GB must stream"). From one run:
//   1. generates (or, with --keep, reuses) one Kineto trace per rank, rank<R>.json (or .json.gz),
//      shaped like the real traces in ../shared/data/traces: distributedInfo, deviceProperties,
//      cpu_op events, cudaLaunchKernel launches and their kernels joined by args.correlation,
//      ac2g flow events, memcpy/memset, NCCL all-reduce (collective) and SendRecv (P2P) kernels on
//      a stream of their own, ProfilerStep#N and forward/backward annotations; even ranks write
//      timestamps with three decimals (microseconds), odd ranks whole microseconds. Seeded and
//      deterministic; each file is exactly --total-mb / --ranks bytes of JSON;
//   2. ours: build_gpu_trace_report (the SAX reader, ranks read in parallel, every metric) end to
//      end, timed;
//   3. naive: each file read whole and parsed into a nlohmann::json document, then the same
//      per-rank unions computed from the document by a short implementation of its own;
// each side in a forked child, so that its peak RSS (wait4's ru_maxrss) is its own. Prints time,
// MiB/s and peak RSS of each side, their ratios, and both sides' totals, which must agree to the
// nanosecond on every rank (exit 1 otherwise).
// Usage: gpu_trace_bench [--ranks 8] [--total-mb 1024] [--dir DIR] [--gzip] [--keep] [--seed S]
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"

using namespace tightpipe;
namespace fs = std::filesystem;

namespace {

constexpr int kMaxRankFiles = 64;
constexpr int64_t kMiB = 1 << 20;

// ----- the generator ---------------------------------------------------------------------------

struct GenSpec {
  int ranks = 8;
  int64_t bytes_per_rank = 0;  // of JSON text (before gzip)
  uint64_t seed = 1;
  bool gzip = false;
};

std::string rank_file(const std::string& dir, const GenSpec& g, int rank) {
  return fmt::format("{}/rank{}.json{}", dir, rank, g.gzip ? ".gz" : "");
}

// Written as the trace's "traceName": what --keep compares, with the size, before reusing a file.
std::string signature(const GenSpec& g, int rank) {
  return fmt::format("gpu_trace_bench v1: seed {}, rank {} of {}, {} bytes", g.seed, rank, g.ranks,
                     g.bytes_per_rank);
}

struct KernelKind {
  const char* name;
  int grid, block, registers, shared_memory;
};

// Kernel names as CUDA libraries and PyTorch name them (templated, often a few hundred characters).
constexpr KernelKind kForwardKernels[] = {
    {"void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8>("
     "cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_256x128_32x3_tn_align8::Params)",
     432, 256, 230, 73728},
    {"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>("
     "int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, "
     "float*, c10::BFloat16*)",
     8192, 128, 40, 0},
    {"sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_"
     "segment_k_off_kernel__5x_cublas",
     264, 384, 168, 213504},
    {"void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, "
     "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, "
     "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>("
     "pytorch_flash::Flash_fwd_params)",
     512, 128, 255, 49152},
    {"void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::"
     "TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::"
     "operator()() const::{lambda(c10::BFloat16)#1}, at::detail::Array<char*, 2> >(int, "
     "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}"
     "::operator()() const::{lambda()#2}::operator()() const::{lambda(c10::BFloat16)#1}, "
     "at::detail::Array<char*, 2>)",
     32768, 128, 26, 0},
    {"void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>"
     ", at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
     "at::detail::Array<char*, 3>)",
     16384, 128, 28, 0},
    {"void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, float, "
     "unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, unsigned int>, "
     "at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<"
     "bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)",
     1056, 256, 32, 0},
    {"void (anonymous namespace)::softmax_warp_forward<c10::BFloat16, c10::BFloat16, float, 11, "
     "false, false>(c10::BFloat16*, c10::BFloat16 const*, int, int, int, bool const*, int, bool)",
     4096, 128, 64, 0},
};
constexpr const char* kForwardOps[] = {"aten::linear",  "aten::layer_norm",
                                       "aten::matmul",  "aten::_scaled_dot_product_flash_attention",
                                       "aten::gelu",    "aten::add",
                                       "aten::dropout", "aten::softmax"};

constexpr KernelKind kBackwardKernels[] = {
    {"ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_nt", 864, 256, 238, 81920},
    {"void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized<c10::"
     "BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*, float const*, "
     "c10::BFloat16 const*, c10::BFloat16*, int)",
     8192, 128, 48, 0},
    {"void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::Flash_bwd_"
     "kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::"
     "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, false, "
     "false, false, false>(pytorch_flash::Flash_bwd_params)",
     1024, 256, 255, 98304},
    {"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_"
     "t<float, at::native::sum_functor<c10::BFloat16, float, float>::operator()(at::"
     "TensorIterator&)::{lambda(float, float)#1}>, unsigned int, c10::BFloat16, 4> >(at::native::"
     "ReduceOp<float, at::native::func_wrapper_t<float, at::native::sum_functor<c10::BFloat16, "
     "float, float>::operator()(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, "
     "c10::BFloat16, 4>)",
     432, 512, 38, 16},
};
constexpr const char* kBackwardOps[] = {
    "autograd::engine::evaluate_function: AddmmBackward0",
    "autograd::engine::evaluate_function: NativeLayerNormBackward0",
    "autograd::engine::evaluate_function: ScaledDotProductFlashAttentionBackward0",
    "autograd::engine::evaluate_function: SumBackward1"};

constexpr KernelKind kAdamKernel = {
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<"
    "float, 4, (at::native::ADAM_MODE)1, false>, float*, double, double, double, double, double, "
    "bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::"
    "(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, "
    "float*, double, double, double, double, double, bool, float*, float*)",
    320, 512, 96, 0};
constexpr KernelKind kAllReduce = {
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 24, 640, 96, 0};
constexpr KernelKind kSendRecv = {"ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 1,
                                  640, 96, 0};

// One rank's trace, written as Kineto lays it out (an event per few lines, args indented).
class TraceWriter {
 public:
  TraceWriter(const GenSpec& g, int rank) : g_(g), rank_(rank), rng_(Rng(g.seed).fork(rank)) {
    whole_us_ = rank % 2 == 1;
    pid_ = 3000 + 17 * rank;
    device_ = rank % 8;
    // Epoch-like microseconds for whole-microsecond ranks; a boot-time clock (below 2^41 us, so a
    // double holds every three-decimal value to well under a nanosecond) otherwise.
    t_cpu_ = whole_us_ ? 1'700'000'000'000'000'000 : 1'700'000'000'000'000;
    t_cpu_ += static_cast<int64_t>(rng_.below(1'000'000)) * 1000;
    correlation_ = 1000 + 100'000'000LL * rank;
  }

  Status write(const std::string& path) {
    const std::string tmp = path + ".part";
    if (g_.gzip) {
      gz_ = gzopen(tmp.c_str(), "wb1");
      if (!gz_) return Status::io_error(fmt::format("cannot write '{}'", printable(tmp)));
    } else {
      file_ = std::fopen(tmp.c_str(), "wb");
      if (!file_) {
        return Status::io_error(
            fmt::format("cannot write '{}' ({})", printable(tmp), std::strerror(errno)));
      }
    }
    header();
    const int64_t ops = std::clamp<int64_t>(g_.bytes_per_rank / 16 / 1600, 30, 4500);
    const std::string tail =
        fmt::format("\n  ],\n  \"displayTimeUnit\": \"ms\",\n  \"baseTimeNanoseconds\": {}\n}}\n",
                    1'700'000'000'000'000'000LL);
    // Steps while a whole op fits; then CPU-only events; then spaces up to the exact size.
    constexpr int64_t kReserve = 64 * 1024;
    budget_ = g_.bytes_per_rank - static_cast<int64_t>(tail.size()) - kReserve;
    for (int32_t step = 1; !full(); ++step) write_step(step, ops / 3, ops - ops / 3);
    budget_ = g_.bytes_per_rank - static_cast<int64_t>(tail.size()) - 512;
    while (!full()) {
      cpu_op("aten::empty", t_cpu_, 2000 + rng_.below(3000), pid_ + 3, false);
      t_cpu_ += 6000;
    }
    const int64_t pad = g_.bytes_per_rank - size() - static_cast<int64_t>(tail.size());
    if (pad < 0) {
      return Status::invalid_argument(
          fmt::format("--total-mb / --ranks = {} bytes per rank is too small for one trace",
                      g_.bytes_per_rank));
    }
    buf_.append(static_cast<size_t>(pad), ' ');
    buf_ += tail;
    TP_RETURN_IF_ERROR(flush());
    const int rc = g_.gzip ? gzclose(gz_) : std::fclose(file_);
    gz_ = nullptr;
    file_ = nullptr;
    if (rc != 0) return Status::io_error(fmt::format("cannot write '{}'", printable(tmp)));
    std::error_code ec;
    fs::rename(tmp, path, ec);
    if (ec) return Status::io_error(fmt::format("cannot rename to '{}'", printable(path)));
    return Status::Ok();
  }

  ~TraceWriter() {
    if (gz_) gzclose(gz_);
    if (file_) std::fclose(file_);
  }

 private:
  int64_t size() const { return written_ + static_cast<int64_t>(buf_.size()); }
  bool full() const { return size() >= budget_; }

  Status flush() {
    if (buf_.empty()) return Status::Ok();
    const bool ok = g_.gzip ? gzwrite(gz_, buf_.data(), static_cast<unsigned>(buf_.size())) ==
                                  static_cast<int>(buf_.size())
                            : std::fwrite(buf_.data(), 1, buf_.size(), file_) == buf_.size();
    if (!ok) return Status::io_error("write failed (disk full?)");
    written_ += static_cast<int64_t>(buf_.size());
    buf_.clear();
    return Status::Ok();
  }
  void maybe_flush() {
    if (buf_.size() > (4 << 20)) TP_CHECK(flush().ok(), "write failed");
  }

  // Microseconds as Kineto writes them: "1700000000123.456", or "1700000000123" whole.
  std::string us(int64_t ns) const {
    if (whole_us_) return fmt::format("{}", ns / 1000);
    return fmt::format("{}.{:03d}", ns / 1000, ns % 1000);
  }
  std::string dur(int64_t ns) const {
    if (whole_us_) return fmt::format("{}.0", ns / 1000);
    return us(ns);
  }
  // Durations and times on a whole-microsecond rank are whole microseconds.
  int64_t q(int64_t ns) const { return whole_us_ ? ns / 1000 * 1000 : ns; }

  void header() {
    buf_ += fmt::format("{{\n  \"schemaVersion\": 1,\n  \"traceName\": \"{}\",\n",
                        signature(g_, rank_));
    buf_ += "  \"deviceProperties\": [\n";
    for (int d = 0; d < 8; ++d) {
      buf_ += fmt::format(
          "    {{\n      \"id\": {}, \"name\": \"NVIDIA H100 80GB HBM3\", \"totalGlobalMem\": "
          "85031714816,\n      \"computeMajor\": 9, \"computeMinor\": 0,\n      "
          "\"maxThreadsPerBlock\": 1024, \"maxThreadsPerMultiprocessor\": 2048,\n      "
          "\"regsPerBlock\": 65536, \"warpSize\": 32,\n      \"sharedMemPerBlock\": 49152, "
          "\"numSms\": 132\n    }}{}\n",
          d, d < 7 ? "," : "");
    }
    std::string ranks;
    for (int r = 0; r < g_.ranks; ++r) ranks += fmt::format("{}{}", r ? ", " : "", r);
    buf_ += fmt::format(
        "  ],\n  \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {}, \"world_size\": {}, "
        "\"pg_count\": 1, \"pg_config\": [{{\"pg_name\": \"0\", \"pg_desc\": \"default_pg\", "
        "\"backend_config\": \"cuda:nccl\", \"pg_size\": {}, \"ranks\": [{}]}}], "
        "\"nccl_version\": \"2.20.5\"}},\n  \"traceEvents\": [",
        rank_, g_.ranks, g_.ranks, ranks);
  }

  void open_event() {
    buf_ += first_ ? "\n  {\n" : ",\n  {\n";
    first_ = false;
    ++events_;
  }

  void cpu_op(std::string_view name, int64_t ts, int64_t d, int64_t tid, bool shapes) {
    open_event();
    const int64_t ext = ++external_;
    buf_ += fmt::format(
        "    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"{}\", \"pid\": {}, \"tid\": {},\n    "
        "\"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {},\"Record function "
        "id\": 0, \"Ev Idx\": {}",
        name, pid_, tid, us(q(ts)), dur(q(d)), ext, ext - 1);
    if (shapes) {
      buf_ += fmt::format(
          ", \"Input Dims\": [[{}, 2048, 4096], [4096, 4096], []], \"Input type\": [\"c10::"
          "BFloat16\", \"c10::BFloat16\", \"Scalar\"]",
          1 + rng_.below(8));
    }
    buf_ += "\n    }\n  }";
    maybe_flush();
  }

  void user_annotation(std::string_view name, int64_t ts, int64_t end, int64_t tid) {
    open_event();
    const int64_t ext = ++external_;
    buf_ += fmt::format(
        "    \"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"{}\", \"pid\": {}, \"tid\": "
        "{},\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {},\"Record "
        "function id\": 0, \"Ev Idx\": {}\n    }}\n  }}",
        name, pid_, tid, us(q(ts)), dur(q(end) - q(ts)), ext, ext - 1);
  }

  void flow(char ph, int64_t id, int64_t pid, int64_t tid, int64_t ts) {
    open_event();
    buf_ += fmt::format(
        "    \"ph\": \"{}\", \"id\": {}, \"pid\": {}, \"tid\": {}, \"ts\": {},\n    \"cat\": "
        "\"ac2g\", \"name\": \"ac2g\"{}\n  }}",
        ph, id, pid, tid, us(q(ts)), ph == 'f' ? ", \"bp\": \"e\"" : "");
  }

  // A CPU op on `tid` launching one kernel (or a copy) on `stream`; the GPU side starts once
  // the stream is free, a few microseconds after the launch at the earliest.
  void launch(std::string_view op, const KernelKind* k, std::string_view cat, int stream,
              int64_t gpu_ns, int64_t tid) {
    const int64_t op_start = t_cpu_;
    const int64_t launch_at = op_start + 3000 + static_cast<int64_t>(rng_.below(6000));
    const int64_t launch_dur = 4000 + static_cast<int64_t>(rng_.below(12000));
    const int64_t op_dur = launch_at - op_start + launch_dur + 1000 + rng_.below(4000);
    cpu_op(op, op_start, op_dur, tid, rng_.below(4) == 0);
    const int64_t c = ++correlation_;
    const char* api = cat == "kernel"       ? "cudaLaunchKernel"
                      : cat == "gpu_memcpy" ? "cudaMemcpyAsync"
                                            : "cudaMemsetAsync";
    open_event();
    buf_ += fmt::format(
        "    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"{}\", \"pid\": {}, \"tid\": "
        "{},\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {},      "
        "\"cbid\": 211, \"correlation\": {}\n    }}\n  }}",
        api, pid_, tid, us(q(launch_at)), dur(q(launch_dur)), external_, c);
    flow('s', c, pid_, tid, launch_at);
    int64_t& free_at = gpu_free_[stream];
    const int64_t start =
        q(std::max(free_at, launch_at + 2000 + static_cast<int64_t>(rng_.below(5000))));
    const int64_t d = std::max<int64_t>(whole_us_ ? 1000 : 1, q(gpu_ns));
    free_at = start + d + 500 + rng_.below(2500);
    open_event();
    if (cat == "kernel") {
      buf_ += fmt::format(
          "    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{}\", \"pid\": {}, \"tid\": {},\n"
          "    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {},      "
          "\"queued\": 0, \"device\": {}, \"context\": 1,      \"stream\": {}, \"correlation\": "
          "{},      \"registers per thread\": {},      \"shared memory\": {},      \"blocks per "
          "SM\": {:.6f},      \"warps per SM\": {:.6f},      \"grid\": [{}, 1, 1],      \"block\": "
          "[{}, 1, 1],      \"est. achieved occupancy %\": {}\n    }}\n  }}",
          k->name, device_, stream, us(start), dur(d), external_, device_, stream, c, k->registers,
          k->shared_memory, k->grid / 132.0, k->grid * (k->block / 32) / 132.0, k->grid, k->block,
          25 + rng_.below(75));
    } else {
      const bool copy = cat == "gpu_memcpy";
      const int64_t bytes = 4096 * (1 + static_cast<int64_t>(rng_.below(4096)));
      buf_ += fmt::format(
          "    \"ph\": \"X\", \"cat\": \"{}\", \"name\": \"{}\", \"pid\": {}, \"tid\": {},\n    "
          "\"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {},      \"device\": "
          "{}, \"context\": 1,      \"stream\": {}, \"correlation\": {},      \"bytes\": {}, "
          "\"memory bandwidth (GB/s)\": {:.6f}\n    }}\n  }}",
          cat, copy ? "Memcpy HtoD (Pinned -> Device)" : "Memset (Device)", device_, stream,
          us(start), dur(d), external_, device_, stream, c, bytes,
          static_cast<double>(bytes) / static_cast<double>(d));
    }
    flow('f', c, device_, stream, start);
    t_cpu_ = op_start + op_dur + 500 + static_cast<int64_t>(rng_.below(3000));
    // Now and then the host falls behind (Python, the allocator, a data loader): the GPU idles.
    if (rng_.below(50) == 0) t_cpu_ += 200'000 + static_cast<int64_t>(rng_.below(2'300'000));
    maybe_flush();
  }

  // Kernel time: mostly short element-wise kernels, some long GEMMs and attention kernels.
  int64_t kernel_ns() {
    const double u = rng_.uniform_double();
    return static_cast<int64_t>(2000.0 * std::pow(300.0, u * u * u));  // 2 us .. 600 us
  }

  void write_step(int32_t step, int64_t fwd_ops, int64_t bwd_ops) {
    const int64_t main_tid = pid_, bwd_tid = pid_ + 1;
    const int64_t step_start = t_cpu_;
    launch("aten::copy_", nullptr, "gpu_memcpy", kComputeStream, 20'000 + rng_.below(60'000),
           main_tid);
    const int64_t fwd_start = t_cpu_;
    for (int64_t i = 0; i < fwd_ops && !full(); ++i) {
      const size_t k = static_cast<size_t>(i) % std::size(kForwardKernels);
      launch(kForwardOps[k], &kForwardKernels[k], "kernel", kComputeStream, kernel_ns(), main_tid);
    }
    user_annotation("## forward ##", fwd_start, t_cpu_, main_tid);
    const int64_t bwd_start = t_cpu_;
    for (int64_t i = 0; i < bwd_ops && !full(); ++i) {
      const size_t k = static_cast<size_t>(i) % std::size(kBackwardKernels);
      launch(kBackwardOps[k], &kBackwardKernels[k], "kernel", kComputeStream, kernel_ns(), bwd_tid);
      if (i % 64 == 63) {  // a gradient bucket is ready: all-reduce it on the NCCL stream
        const int64_t at = t_cpu_;
        launch("record_param_comms", &kAllReduce, "kernel", kNcclStream,
               200'000 + rng_.below(800'000), bwd_tid);
        user_annotation("nccl:all_reduce", at, t_cpu_, bwd_tid);
      }
      if (i % 500 == 250) {
        launch("aten::zero_", nullptr, "gpu_memset", kComputeStream, 1000 + rng_.below(4000),
               bwd_tid);
      }
    }
    user_annotation("## backward ##", bwd_start, t_cpu_, bwd_tid);
    if (g_.ranks > 1) {  // an activation exchanged with the next rank, as pipelines do
      launch("record_param_comms", &kSendRecv, "kernel", kNcclStream, 50'000 + rng_.below(200'000),
             main_tid);
    }
    const int64_t opt_start = t_cpu_;
    for (int i = 0; i < 8 && !full(); ++i) {
      launch("aten::_fused_adamw_", &kAdamKernel, "kernel", kComputeStream, kernel_ns(), main_tid);
    }
    user_annotation("Optimizer.step#AdamW.step", opt_start, t_cpu_, main_tid);
    // The host waits for the GPU at the end of each step (loss.item()).
    t_cpu_ = std::max(t_cpu_, std::max(gpu_free_[kComputeStream], gpu_free_[kNcclStream]));
    user_annotation(fmt::format("ProfilerStep#{}", step), step_start, t_cpu_, main_tid);
    t_cpu_ += 20'000 + rng_.below(200'000);  // data loading between steps
  }

  static constexpr int kComputeStream = 7, kNcclStream = 20;
  GenSpec g_;
  int rank_;
  Rng rng_;
  bool whole_us_ = false;
  int64_t pid_ = 0, device_ = 0;
  int64_t t_cpu_ = 0, correlation_ = 0, external_ = 0;
  int64_t gpu_free_[32] = {};
  std::string buf_;
  int64_t written_ = 0, budget_ = 0, events_ = 0;
  bool first_ = true;
  FILE* file_ = nullptr;
  gzFile gz_ = nullptr;
};

// Whether `path` is what the generator writes for `rank` (--keep): the exact size of JSON (for
// gzip, the size its trailer records) and the signature in its first bytes.
bool reusable(const std::string& path, const GenSpec& g, int rank) {
  std::error_code ec;
  const auto on_disk = fs::file_size(path, ec);
  if (ec) return false;
  if (!g.gzip && static_cast<int64_t>(on_disk) != g.bytes_per_rank) return false;
  if (g.gzip) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    unsigned char isize[4] = {};
    const bool got = std::fseek(f, -4, SEEK_END) == 0 && std::fread(isize, 1, 4, f) == 4;
    std::fclose(f);
    const uint32_t n =
        isize[0] | isize[1] << 8 | isize[2] << 16 | static_cast<uint32_t>(isize[3]) << 24;
    if (!got || n != static_cast<uint32_t>(g.bytes_per_rank)) return false;
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) return false;
  char head[512] = {};
  const int n = gzread(f, head, sizeof head - 1);
  gzclose(f);
  return n > 0 && std::string_view(head, static_cast<size_t>(n)).find(signature(g, rank)) !=
                      std::string_view::npos;
}

// ----- the two sides, each in a child process ----------------------------------------------------

// Per-rank totals in nanoseconds: what both sides compute and must agree on.
struct RankTotals {
  int64_t rank = -1, gpu_events = 0;
  int64_t window = 0, busy = 0, compute = 0, communication = 0, exposed = 0, memory = 0;
  bool operator==(const RankTotals&) const = default;
};

// What a child hands back through shared memory.
struct SideResult {
  bool ok = false;
  char error[1024] = {};
  double seconds = 0;
  int64_t trace_events = -1;  // every element of traceEvents (naive only)
  int64_t steps = 0;          // (rank, step) pairs with GPU work (ours only)
  int32_t ranks = 0;
  RankTotals totals[kMaxRankFiles];
};

void set_error(SideResult& r, const std::string& what) {
  std::snprintf(r.error, sizeof r.error, "%s", what.c_str());
}

struct Measured {
  SideResult result;
  double peak_rss_bytes = 0;
  double cpu_seconds = 0;  // user + system of the child, all its threads
};

// Runs `work` in a forked child; the parent waits and reads the child's peak RSS. The parent must
// be single-threaded and small (a forked child starts with the parent's resident pages).
Measured in_child(const std::function<void(SideResult&)>& work) {
  auto* shared = static_cast<SideResult*>(
      mmap(nullptr, sizeof(SideResult), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  TP_CHECK(shared != MAP_FAILED, "mmap");
  new (shared) SideResult();
  std::fflush(stdout);
  const pid_t pid = fork();
  TP_CHECK(pid >= 0, "fork");
  if (pid == 0) {
    work(*shared);
    std::fflush(stdout);
    _exit(0);
  }
  int wstatus = 0;
  struct rusage ru {};
  TP_CHECK(wait4(pid, &wstatus, 0, &ru) == pid, "wait4");
  Measured m;
  m.result = *shared;
  munmap(shared, sizeof(SideResult));
  m.peak_rss_bytes = static_cast<double>(ru.ru_maxrss) * 1024.0;  // KiB on Linux
  m.cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    m.result.ok = false;
    set_error(m.result, WIFSIGNALED(wstatus)
                            ? fmt::format("the child died of signal {} ({}; out of memory?)",
                                          WTERMSIG(wstatus), strsignal(WTERMSIG(wstatus)))
                            : fmt::format("the child exited {}", WEXITSTATUS(wstatus)));
  }
  return m;
}

int64_t ns_of(double s) { return std::llround(s * 1e9); }

void ours(const std::vector<std::string>& files, SideResult& out) {
  const double t0 = now_seconds();
  auto rep = build_gpu_trace_report(files);
  out.seconds = now_seconds() - t0;
  if (!rep.ok()) return set_error(out, rep.status().to_string());
  out.ranks = static_cast<int32_t>(rep->ranks.size());
  for (size_t i = 0; i < rep->ranks.size() && i < kMaxRankFiles; ++i) {
    const GpuRankReport& r = rep->ranks[i];
    const GpuUsage& u = r.usage;
    out.steps += static_cast<int64_t>(r.steps.size());
    out.totals[i] = {r.rank,
                     u.events,
                     u.end_ns - u.start_ns,
                     ns_of(u.busy_s),
                     ns_of(u.compute_s),
                     ns_of(u.communication_s),
                     ns_of(u.exposed_communication_s),
                     ns_of(u.memory_s)};
  }
  out.ok = true;
}

// The naive side: its own reading of a trace and its own interval arithmetic, kept apart from
// the report's code so that agreeing totals mean something.
using Interval = std::pair<int64_t, int64_t>;

std::vector<Interval> union_of(std::vector<Interval> v) {
  std::sort(v.begin(), v.end());
  std::vector<Interval> u;
  for (const Interval& x : v) {
    if (u.empty() || x.first > u.back().second) {
      u.push_back(x);
    } else {
      u.back().second = std::max(u.back().second, x.second);
    }
  }
  return u;
}

int64_t length(const std::vector<Interval>& u) {
  int64_t n = 0;
  for (const auto& [a, b] : u) n += b - a;
  return n;
}

int64_t length_of_intersection(const std::vector<Interval>& x, const std::vector<Interval>& y) {
  int64_t n = 0;
  for (size_t i = 0, j = 0; i < x.size() && j < y.size();) {
    n +=
        std::max<int64_t>(0, std::min(x[i].second, y[j].second) - std::max(x[i].first, y[j].first));
    (x[i].second < y[j].second) ? ++i : ++j;
  }
  return n;
}

int64_t micros_to_ns(const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<int64_t>() * 1000;
  return std::llround(v.get<double>() * 1000.0);
}

Result<std::string> whole_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // zlib reads plain files too
  if (!f) return Status::io_error(fmt::format("cannot open '{}'", printable(path)));
  std::string text;
  std::vector<char> chunk(1 << 20);
  int n = 0;
  while ((n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) {
    text.append(chunk.data(), static_cast<size_t>(n));
  }
  gzclose(f);
  if (n < 0) return Status::corruption(fmt::format("cannot read '{}'", printable(path)));
  return text;
}

void naive(const std::vector<std::string>& files, SideResult& out) {
  const double t0 = now_seconds();
  out.trace_events = 0;
  for (const std::string& path : files) {
    auto text = whole_file(path);
    if (!text.ok()) return set_error(out, text.status().to_string());
    nlohmann::json doc = nlohmann::json::parse(*text, nullptr, false);
    *text = std::string();
    if (doc.is_discarded()) return set_error(out, "not JSON: " + path);
    std::vector<Interval> all, compute, comm, memory;
    for (const nlohmann::json& e : doc["traceEvents"]) {
      ++out.trace_events;
      if (e.value("ph", "") != "X") continue;
      const std::string cat = e.value("cat", "");
      if (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset") continue;
      const int64_t a = micros_to_ns(e["ts"]);
      const Interval iv{a, a + std::max<int64_t>(0, micros_to_ns(e["dur"]))};
      all.push_back(iv);
      std::string name = e.value("name", "");
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (cat != "kernel") {
        memory.push_back(iv);
      } else if (name.find("nccl") != std::string::npos) {
        comm.push_back(iv);
      } else {
        compute.push_back(iv);
      }
    }
    RankTotals& t = out.totals[out.ranks++];
    t.rank = doc["distributedInfo"].value("rank", -1);
    t.gpu_events = static_cast<int64_t>(all.size());
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const auto& [a, b] : all) lo = std::min(lo, a), hi = std::max(hi, b);
    t.window = all.empty() ? 0 : hi - lo;
    const auto cu = union_of(compute), mu = union_of(comm);
    t.busy = length(union_of(all));
    t.compute = length(cu);
    t.communication = length(mu);
    t.exposed = t.communication - length_of_intersection(mu, cu);
    t.memory = length(union_of(memory));
  }
  std::sort(out.totals, out.totals + out.ranks,
            [](const RankTotals& a, const RankTotals& b) { return a.rank < b.rank; });
  out.seconds = now_seconds() - t0;
  out.ok = true;
}

std::string seconds_text(int64_t ns) {
  return fmt::format("{:.9f}", static_cast<double>(ns) * 1e-9);
}

void print_totals(const char* side, const SideResult& r) {
  RankTotals sum;
  for (int i = 0; i < r.ranks; ++i) {
    const RankTotals& t = r.totals[i];
    sum.gpu_events += t.gpu_events;
    sum.window += t.window;
    sum.busy += t.busy;
    sum.compute += t.compute;
    sum.communication += t.communication;
    sum.exposed += t.exposed;
    sum.memory += t.memory;
  }
  std::printf("%-6s %10lld %14s %14s %14s %14s %14s %14s %14s\n", side,
              static_cast<long long>(sum.gpu_events), seconds_text(sum.window).c_str(),
              seconds_text(sum.busy).c_str(), seconds_text(sum.window - sum.busy).c_str(),
              seconds_text(sum.compute).c_str(), seconds_text(sum.communication).c_str(),
              seconds_text(sum.exposed).c_str(), seconds_text(sum.memory).c_str());
}

double peak_rss_self_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_maxrss) * 1024.0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "our streaming Kineto reader against a whole-file DOM parse: time and peak RSS",
      "gpu_trace_bench");
  GenSpec g;
  int64_t total_mb = 1024;
  std::string dir = (fs::temp_directory_path() / "tightpipe-gpu-trace-bench").string();
  bool keep = false, skip_naive = false;
  flags.option("--ranks", g.ranks, "rank files").range(1, kMaxRankFiles).show_default();
  flags.option("--total-mb", total_mb, "MiB of JSON over all ranks")
      .range(int64_t{1}, int64_t{65536})
      .show_default();
  flags
      .option("--dir", dir,
              "where the rank<R>.json files go (overwritten; removed after the run unless --keep)")
      .show_default();
  flags.flag("--gzip", g.gzip, "write rank<R>.json.gz (gzip level 1)");
  flags.flag("--keep", keep,
             "reuse files already in --dir that match (size and seed), keep them afterwards");
  flags.option("--seed", g.seed, "generator seed").show_default();
  flags.flag("--skip-naive", skip_naive, "run only ours (for profiling the reader)");
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  g.bytes_per_rank = total_mb * kMiB / g.ranks;
  if (g.bytes_per_rank < 256 * 1024) {
    std::fprintf(stderr,
                 "gpu_trace_bench: --total-mb %lld over --ranks %d is %lld bytes per rank, below "
                 "the 256 KiB one trace needs; hint: raise --total-mb\n",
                 static_cast<long long>(total_mb), g.ranks,
                 static_cast<long long>(g.bytes_per_rank));
    return bench::kExitUsage;
  }

  std::error_code ec;
  const bool made_dir = !fs::exists(dir, ec);
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr,
                 "gpu_trace_bench: --dir '%s': cannot create (%s); hint: give a writable "
                 "directory\n",
                 printable(dir).c_str(), ec.message().c_str());
    return 1;
  }
  std::vector<std::string> files;
  std::vector<int> to_write;
  for (int r = 0; r < g.ranks; ++r) {
    files.push_back(rank_file(dir, g, r));
    if (!keep || !reusable(files.back(), g, r)) to_write.push_back(r);
  }
  // 1. Generate in a child (threads there; the parent stays single-threaded and small).
  if (!to_write.empty()) {
    Measured gen = in_child([&](SideResult& out) {
      const double t0 = now_seconds();
      std::atomic<size_t> next{0};
      std::vector<std::string> errors(to_write.size());
      std::vector<std::thread> pool;
      const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
      for (unsigned t = 0; t < std::min<size_t>(threads, to_write.size()); ++t) {
        pool.emplace_back([&] {
          for (size_t i; (i = next.fetch_add(1)) < to_write.size();) {
            TraceWriter w(g, to_write[i]);
            Status s = w.write(files[static_cast<size_t>(to_write[i])]);
            if (!s.ok()) errors[i] = s.to_string();
          }
        });
      }
      for (auto& th : pool) th.join();
      out.seconds = now_seconds() - t0;
      for (const std::string& e : errors) {
        if (!e.empty()) return set_error(out, e);
      }
      out.ok = true;
    });
    if (!gen.result.ok) {
      std::fprintf(stderr, "gpu_trace_bench: generating the traces failed: %s\n", gen.result.error);
      return 1;
    }
    std::printf("generated %zu of %d rank files in %.1f s\n", to_write.size(), g.ranks,
                gen.result.seconds);
  }
  double on_disk = 0;
  for (const std::string& f : files) on_disk += static_cast<double>(fs::file_size(f));
  const double json_bytes = static_cast<double>(g.bytes_per_rank) * g.ranks;
  std::printf("%d Kineto traces in %s: %s of JSON%s (%s reused)\n", g.ranks, dir.c_str(),
              human_bytes(json_bytes).c_str(),
              g.gzip ? fmt::format(", {} gzip'd", human_bytes(on_disk)).c_str() : "",
              fmt::format("{}", g.ranks - static_cast<int>(to_write.size())).c_str());
  std::printf("each side runs in a child of this process (peak RSS %s when it forks)\n\n",
              human_bytes(peak_rss_self_bytes()).c_str());

  // 2. and 3.
  const Measured a = in_child([&](SideResult& out) { ours(files, out); });
  Measured b;
  if (!skip_naive) b = in_child([&](SideResult& out) { naive(files, out); });

  // CPU time (user + system, the child's threads together, including its exit) is what other
  // work on a shared machine does not stretch.
  std::printf("%-52s %9s %10s %9s %12s\n", "side", "time", "MiB/s", "CPU", "peak RSS");
  auto row = [&](const char* what, const Measured& m) {
    if (!m.result.ok) {
      std::printf("%-52s failed: %s\n", what, m.result.error);
      return;
    }
    std::printf("%-52s %7.2f s %10.1f %7.2f s %12s\n", what, m.result.seconds,
                json_bytes / kMiB / m.result.seconds, m.cpu_seconds,
                human_bytes(m.peak_rss_bytes).c_str());
  };
  row("ours  (build_gpu_trace_report: SAX, files in parallel)", a);
  if (!skip_naive) row("naive (whole file, nlohmann::json DOM, one by one)", b);
  bool agree = a.result.ok;
  if (!skip_naive && a.result.ok && b.result.ok) {
    std::printf("naive / ours: time %.2fx, CPU %.2fx, peak RSS %.2fx\n",
                b.result.seconds / a.result.seconds, b.cpu_seconds / a.cpu_seconds,
                b.peak_rss_bytes / a.peak_rss_bytes);
    std::printf("\n%lld trace events, %lld (rank, step) pairs\n",
                static_cast<long long>(b.result.trace_events),
                static_cast<long long>(a.result.steps));
    std::printf("%-6s %10s %14s %14s %14s %14s %14s %14s %14s\n", "sum", "GPU events", "window s",
                "busy s", "idle s", "compute s", "comm s", "exposed s", "memory s");
    print_totals("ours", a.result);
    print_totals("naive", b.result);
    int equal = 0;
    for (int i = 0; i < a.result.ranks && i < b.result.ranks; ++i) {
      if (a.result.totals[i] == b.result.totals[i]) {
        ++equal;
      } else {
        std::printf("rank %lld differs\n", static_cast<long long>(a.result.totals[i].rank));
      }
    }
    agree = equal == g.ranks && a.result.ranks == g.ranks && b.result.ranks == g.ranks;
    std::printf(
        "per rank: %d of %d ranks equal to the nanosecond (events, window, busy, "
        "compute, communication, exposed, memory)\n",
        equal, g.ranks);
  } else if (!skip_naive) {
    agree = false;
  }
  if (a.result.ok) {
    std::printf("ours under 30 s: %s (%.2f s)\n", a.result.seconds < 30 ? "yes" : "no",
                a.result.seconds);
  }

  if (!keep) {
    for (const std::string& f : files) fs::remove(f, ec);
    if (made_dir) fs::remove(dir, ec);
  }
  return agree ? 0 : 1;
}
