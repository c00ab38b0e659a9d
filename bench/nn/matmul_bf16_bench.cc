// matmul_bf16_bench: single-thread GFLOP/s of the GPT's matmuls (forward, backward_input,
// backward_weight) in three implementations measured side by side in one run: OpenBLAS sgemm
// (matmul_* of kernels.h, what the model uses), oneDNN FP32 (matmul_*_dnnl) and oneDNN bf16 with
// FP32 accumulation (matmul_*_bf16), the last both on inputs already in bf16 and including the
// conversion of the FP32 activation operand (forward: inp; backward: dout), whose time is also
// printed apart. Weights are converted once per step in training and are not counted. Shapes: the
// sizes of bench_nn, N = B*T rows, (IC,OC) in {(C,3C) qkv, (C,C) attention proj, (C,4C) fc,
// (4C,C) fc proj}.
//
// It is also the measurement behind the model's FP32 kernel choice (issue 17: keep OpenBLAS for
// FP32 unless oneDNN FP32 measures faster): with --rounds R every (shape, pass) is measured R times
// in a row, the GFLOP/s columns are the medians over the rounds, and dnnl/B gives oneDNN FP32's
// rate over OpenBLAS's as the median and the range over the rounds. A shape counts as faster on
// oneDNN only when it is more than 10% faster in every round (beyond noise on a shared machine).
//
//   build/bench/nn/matmul_bf16_bench
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/nn/matmul_bf16_bench   # AVX-512 sgemm
//   build/bench/nn/matmul_bf16_bench --rounds 5          # the FP32 choice, beyond noise
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/kernels.h"
#include "tightpipe/kernels_bf16.h"

namespace {
using namespace tightpipe;
using nn::Bf16;

struct Size {
  int L, C, T, B;
};

std::vector<float> randn(size_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = r.normal();
  return v;
}
std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> b(v.size());
  nn::float_to_bf16(b, v);
  return b;
}

// Median seconds of `reps` calls after one untimed call.
template <typename Fn>
double time_median(int reps, Fn&& fn) {
  fn();
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = now_seconds();
    fn();
    t.push_back(now_seconds() - t0);
  }
  return median(t);
}

enum class Pass { kForward, kBackwardInput, kBackwardWeight };
const char* pass_name(Pass p) {
  switch (p) {
    case Pass::kForward:
      return "fwd";
    case Pass::kBackwardInput:
      return "bwd_in";
    case Pass::kBackwardWeight:
      return "bwd_w";
  }
  return "?";
}

// Seconds per call of each implementation for one (shape, pass).
struct Times {
  double blas = 0, dnnl_f32 = 0, bf16 = 0, conv = 0;
};

Times measure(Pass pass, int N, int IC, int OC, int reps) {
  const auto inp = randn(size_t(N) * IC, 1), w = randn(size_t(OC) * IC, 2), bias = randn(OC, 3);
  const auto dout = randn(size_t(N) * OC, 4);
  const auto inp16 = to_bf16(inp), w16 = to_bf16(w), dout16 = to_bf16(dout);
  std::vector<float> out(size_t(N) * OC), dinp(size_t(N) * IC), dw(size_t(OC) * IC), db(OC);
  std::vector<Bf16> act16(size_t(N) * std::max(IC, OC));
  Times t;
  switch (pass) {
    case Pass::kForward:
      t.blas = time_median(reps, [&] { nn::matmul_forward(out, inp, w, bias, N, IC, OC); });
      t.dnnl_f32 =
          time_median(reps, [&] { nn::matmul_forward_dnnl(out, inp, w, bias, N, IC, OC); });
      t.bf16 =
          time_median(reps, [&] { nn::matmul_forward_bf16(out, inp16, w16, bias, N, IC, OC); });
      t.conv = time_median(reps, [&] { nn::float_to_bf16(act16, inp); });
      break;
    case Pass::kBackwardInput:
      t.blas = time_median(reps, [&] { nn::matmul_backward_input(dinp, dout, w, N, IC, OC); });
      t.dnnl_f32 =
          time_median(reps, [&] { nn::matmul_backward_input_dnnl(dinp, dout, w, N, IC, OC); });
      t.bf16 =
          time_median(reps, [&] { nn::matmul_backward_input_bf16(dinp, dout16, w16, N, IC, OC); });
      t.conv = time_median(reps, [&] { nn::float_to_bf16(act16, dout); });
      break;
    case Pass::kBackwardWeight:
      t.blas = time_median(reps, [&] { nn::matmul_backward_weight(dw, db, dout, inp, N, IC, OC); });
      t.dnnl_f32 =
          time_median(reps, [&] { nn::matmul_backward_weight_dnnl(dw, db, dout, inp, N, IC, OC); });
      t.bf16 = time_median(
          reps, [&] { nn::matmul_backward_weight_bf16(dw, db, dout16, inp16, N, IC, OC); });
      t.conv = time_median(reps, [&] { nn::float_to_bf16(act16, dout); });
      break;
  }
  return t;
}

std::vector<Size> parse_sizes(const std::string& list, bool& ok) {
  std::vector<Size> out;
  std::stringstream ss(list);
  std::string item;
  ok = true;
  while (std::getline(ss, item, ',')) {
    if (item == "4x128") {
      out.push_back({4, 128, 128, 8});
    } else if (item == "8x256") {
      out.push_back({8, 256, 256, 8});
    } else if (item == "12x512") {
      out.push_back({12, 512, 256, 4});
    } else {
      std::fprintf(stderr,
                   "matmul_bf16_bench: --sizes: unknown size '%s'; hint: choose from 4x128, "
                   "8x256, 12x512\n",
                   item.c_str());
      ok = false;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tightpipe::bench::Flags flags(
      "GPT matmul GFLOP/s, one thread: OpenBLAS sgemm vs oneDNN FP32 vs oneDNN bf16",
      "matmul_bf16_bench");
  std::string sizes = "4x128,8x256,12x512";
  int reps = 7, rounds = 1;
  flags
      .option("--sizes", sizes,
              "LxC list out of 4x128 (T=128,B=8), 8x256 (T=256,B=8), 12x512 (T=256,B=4)")
      .show_default();
  flags.option("--reps", reps, "timed calls per measurement (median)")
      .show_default()
      .range(1, 1000);
  flags
      .option("--rounds", rounds,
              "measurements per (shape, pass), in a row: GFLOP/s are their medians, dnnl/B "
              "shows the range")
      .show_default()
      .range(1, 100);
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  bool ok = true;
  const std::vector<Size> list = parse_sizes(sizes, ok);
  if (!ok) return tightpipe::bench::kExitUsage;

  nn::set_blas_threads(1);
  nn::set_dnnl_threads(1);
  const char* core_env = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS core %s (OPENBLAS_CORETYPE=%s), 1 thread; median of %d calls\n",
              nn::blas_core_name(), core_env ? core_env : "(unset)", reps);
  std::printf("%s\n", nn::bf16_matmul_isa().c_str());
  std::printf(
      "GFLOP/s (median of %d round(s)); bf16+conv includes converting the FP32 activation operand "
      "(fwd: inp, bwd: dout), conv ms is that conversion alone; dnnl/B = oneDNN FP32 rate / "
      "OpenBLAS rate, median [min-max] over the rounds; faster: the FP32 kernel ahead by more "
      "than 10%% in every round (= when neither is)\n\n",
      rounds);
  std::printf("%-7s %5s %5s %5s %-6s | %8s %8s %8s %9s %7s | %6s %6s | %-18s %6s\n", "size", "N",
              "IC", "OC", "pass", "OpenBLAS", "dnnl f32", "dnnl bf16", "bf16+conv", "conv ms",
              "bf16/B", "bf16/D", "dnnl/B", "faster");
  const Pass passes[] = {Pass::kForward, Pass::kBackwardInput, Pass::kBackwardWeight};
  int dnnl_ahead = 0, blas_ahead = 0, judged = 0;
  for (const Size& s : list) {
    const int N = s.B * s.T, C = s.C;
    const int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    double flops = 0;
    Times total;
    char name[16];
    std::snprintf(name, sizeof(name), "%dx%d", s.L, s.C);
    for (const auto& sh : shapes) {
      for (const Pass p : passes) {
        const int IC = sh[0], OC = sh[1];
        const double f = 2.0 * N * IC * OC;
        std::vector<double> blas, dnnl, bf16, conv, dnnl_over_blas;
        for (int r = 0; r < rounds; ++r) {
          const Times t = measure(p, N, IC, OC, reps);
          blas.push_back(t.blas);
          dnnl.push_back(t.dnnl_f32);
          bf16.push_back(t.bf16);
          conv.push_back(t.conv);
          dnnl_over_blas.push_back(t.blas / t.dnnl_f32);
        }
        const Times t{median(blas), median(dnnl), median(bf16), median(conv)};
        const auto [lo, hi] = std::minmax_element(dnnl_over_blas.begin(), dnnl_over_blas.end());
        const char* faster = *lo > 1.1 ? "dnnl" : *hi < 1 / 1.1 ? "blas" : "=";
        ++judged;
        dnnl_ahead += *lo > 1.1;
        blas_ahead += *hi < 1 / 1.1;
        flops += f;
        total.blas += t.blas;
        total.dnnl_f32 += t.dnnl_f32;
        total.bf16 += t.bf16;
        total.conv += t.conv;
        char range[32];
        std::snprintf(range, sizeof(range), "%.2f [%.2f-%.2f]", median(dnnl_over_blas), *lo, *hi);
        std::printf(
            "%-7s %5d %5d %5d %-6s | %8.1f %8.1f %9.1f %9.1f %7.3f | %5.2fx %5.2fx | %-18s %6s\n",
            name, N, IC, OC, pass_name(p), f / t.blas / 1e9, f / t.dnnl_f32 / 1e9, f / t.bf16 / 1e9,
            f / (t.bf16 + t.conv) / 1e9, t.conv * 1e3, t.blas / t.bf16, t.dnnl_f32 / t.bf16, range,
            faster);
      }
    }
    std::printf("%-7s %5d %-18s | %8.1f %8.1f %9.1f %9.1f %7.3f | %5.2fx %5.2fx | %-18.2f\n\n",
                name, N, "all 12 (per layer)", flops / total.blas / 1e9,
                flops / total.dnnl_f32 / 1e9, flops / total.bf16 / 1e9,
                flops / (total.bf16 + total.conv) / 1e9, total.conv * 1e3, total.blas / total.bf16,
                total.dnnl_f32 / total.bf16, total.blas / total.dnnl_f32);
  }
  std::printf(
      "FP32 kernel: oneDNN FP32 more than 10%% faster than OpenBLAS in every round on %d of %d "
      "(shape, pass), OpenBLAS more than 10%% faster on %d; the model's FP32 matmuls run on "
      "OpenBLAS (docs/bf16.md, \"FP32 kernel choice\")\n",
      dnnl_ahead, judged, blas_ahead);
  return 0;
}
