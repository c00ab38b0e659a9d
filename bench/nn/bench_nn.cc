// bench_nn: tightpipe's single-rank training tokens/s vs PyTorch's (../shared/peers/
// torch_gpt_bench.py --untied) on the same GPT (layers, width, heads, T, batch, vocab 256, untied
// LM head, AdamW), one thread each, measured in the same run and the same environment, next to the
// single-thread SGEMM GFLOP/s of this run. Prints one table and optionally writes JSON.
//
//   build-nn/bench/nn/bench_nn                       # the three sizes of issue 4
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build-nn/bench/nn/bench_nn   # both sides alike
#include <cblas.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/kernels.h"
#include "tightpipe/model.h"

namespace {
using namespace tightpipe;

struct Size {
  int L, C, NH, T, B;
};

// Single-thread SGEMM GFLOP/s on a square 512 problem and on the model's largest matmul shape.
double sgemm_gflops(int M, int N, int K) {
  std::vector<float> a(size_t(M) * K, 0.5f), b(size_t(K) * N, 0.25f), c(size_t(M) * N);
  std::vector<double> t;
  for (int rep = 0; rep < 7; ++rep) {
    const double t0 = now_seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a.data(), K, b.data(), K,
                0.0f, c.data(), N);
    t.push_back(now_seconds() - t0);
  }
  return 2.0 * M * N * K / median(t) / 1e9;
}

struct Measured {
  double tokens_per_s = 0, gflops = 0, ms_step = 0, loss_first = 0, loss_last = 0;
};

Measured run_tightpipe(const Size& s, int warmup, int steps, double flops_per_token, bool bf16) {
  nn::GptConfig c;
  c.num_layers = s.L;
  c.hidden_size = s.C;
  c.num_heads = s.NH;
  c.seq_length = s.T;
  c.micro_batch_size = s.B;
  c.precision = bf16 ? nn::Precision::kBf16 : nn::Precision::kFp32;
  nn::GptStage model(c, nn::StageSpec{0, s.L, true, true}, 0);
  // Uniformly random tokens, pre-generated (as the PyTorch side does).
  Rng rng(0);
  std::vector<std::vector<int32_t>> tok(8), tgt(8);
  for (int i = 0; i < 8; ++i)
    for (int k = 0; k < s.B * s.T; ++k) {
      tok[i].push_back(int32_t(rng.below(256)));
      tgt[i].push_back(int32_t(rng.below(256)));
    }
  nn::AdamWConfig opt;  // betas (0.9, 0.95), weight decay 0.1 as the PyTorch side
  std::vector<double> times;
  Measured m;
  for (int i = 0; i < warmup + steps; ++i) {
    nn::MicroBatch mb{tok[i % 8], tgt[i % 8]};
    const double t0 = now_seconds();
    auto r = nn::train_step(model, std::span<const nn::MicroBatch>(&mb, 1), opt, 3e-4f, 0.0f);
    const double dt = now_seconds() - t0;
    if (i == 0) m.loss_first = r.loss;
    m.loss_last = r.loss;
    if (i >= warmup) times.push_back(dt);
  }
  m.ms_step = median(times) * 1e3;
  m.tokens_per_s = double(s.B) * s.T / median(times);
  m.gflops = m.tokens_per_s * flops_per_token / 1e9;
  return m;
}

Measured run_torch(const std::string& python, const std::string& script, const Size& s, int warmup,
                   int steps, std::string& error) {
  const std::string cmd = fmt::format(
      "{} {} --layers {} --d-model {} --heads {} --seq {} --batch {} --vocab 256 --steps {} "
      "--warmup {} --threads 1 --untied 2>&1",
      python, script, s.L, s.C, s.NH, s.T, s.B, steps, warmup);
  std::FILE* p = popen(cmd.c_str(), "r");
  Measured m;
  if (!p) {
    error = "cannot run " + cmd;
    return m;
  }
  std::string out, last;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    out += buf;
    if (buf[0] == '{') last = buf;
  }
  const int rc = pclose(p);
  if (rc != 0 || last.empty()) {
    error = fmt::format("'{}' failed (status {}): {}", cmd, rc, out.substr(0, 400));
    return m;
  }
  auto j = nlohmann::json::parse(last);
  m.tokens_per_s = j["tokens_per_s"];
  m.gflops = j["gflops_per_s"];
  m.ms_step = j["ms_per_step_median"];
  m.loss_first = j["loss_first"];
  m.loss_last = j["loss_last"];
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tightpipe vs PyTorch single-rank GPT training throughput, one thread each",
               "bench_nn"};
  int steps = 10, warmup = 3;
  std::string sizes = "4x128,8x256,12x512";
  std::string python = "/usr/bin/python3";
  std::string script = TP_SHARED_DIR "/peers/torch_gpt_bench.py";
  std::string json_out;
  bool no_torch = false;
  app.add_option("--steps", steps, "timed steps per side")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--sizes", sizes,
                 "LxC list out of 4x128 (T=128,B=8), 8x256 (T=256,B=8), "
                 "12x512 (T=256,B=4)")
      ->capture_default_str();
  app.add_option("--python", python)->capture_default_str();
  app.add_option("--script", script)->capture_default_str();
  app.add_option("--json", json_out, "write the results here");
  app.add_flag("--no-torch", no_torch, "only tightpipe");
  bool bf16 = false;
  app.add_flag("--bf16", bf16, "tightpipe in bf16 (GptConfig::precision)");
  if (int rc = tightpipe::bench::parse_bench_flags(app, argc, argv); rc >= 0) return rc;

  nn::set_blas_threads(1);
  const char* core_env = std::getenv("OPENBLAS_CORETYPE");
  std::printf("OpenBLAS core %s (OPENBLAS_CORETYPE=%s), 1 thread, %d timed steps after %d\n",
              nn::blas_core_name(), core_env ? core_env : "(unset)", steps, warmup);
  const double sgemm512 = sgemm_gflops(512, 512, 512);
  std::printf("single-thread SGEMM 512x512x512: %.1f GFLOP/s\n\n", sgemm512);
  std::printf("%-8s %4s %2s | %10s %10s %6s | %8s %8s | %8s %8s | %6s\n", "size", "T", "B",
              "tp tok/s", "torch tok/s", "ratio", "tp GF/s", "pt GF/s", "tp ms", "pt ms", "SGEMM");
  nlohmann::json results = nlohmann::json::array();
  bool all_ok = true;
  for (const std::string& name : split(sizes, ',')) {
    Size s;
    if (name == "4x128")
      s = {4, 128, 4, 128, 8};
    else if (name == "8x256")
      s = {8, 256, 8, 256, 8};
    else if (name == "12x512")
      s = {12, 512, 8, 256, 4};
    else {
      std::fprintf(stderr, "bench_nn: unknown size '%s'; hint: 4x128, 8x256 or 12x512\n",
                   name.c_str());
      return 2;
    }
    // FLOPs/token, the PyTorch script's convention: 6 * matmul params + 12 L T C (untied: the
    // matmul params are all but the two embeddings).
    const double n_matmul = 12.0 * s.L * s.C * s.C + 13.0 * s.L * s.C + 2.0 * s.C + 256.0 * s.C;
    const double fpt = 6 * n_matmul + 12.0 * s.L * s.T * s.C;
    const double sgemm_model = sgemm_gflops(s.B * s.T, 4 * s.C, s.C);
    Measured tp = run_tightpipe(s, warmup, steps, fpt, bf16);
    Measured pt;
    std::string err;
    if (!no_torch) pt = run_torch(python, script, s, warmup, steps, err);
    if (!err.empty()) {
      std::fprintf(stderr, "bench_nn: PyTorch side failed: %s\n", err.c_str());
      all_ok = false;
    }
    const double ratio = pt.tokens_per_s > 0 ? tp.tokens_per_s / pt.tokens_per_s : 0;
    std::printf("%-8s %4d %2d | %10.0f %10.0f %6.2f | %8.1f %8.1f | %8.1f %8.1f | %6.1f\n",
                name.c_str(), s.T, s.B, tp.tokens_per_s, pt.tokens_per_s, ratio, tp.gflops,
                pt.gflops, tp.ms_step, pt.ms_step, sgemm_model);
    std::fflush(stdout);
    results.push_back({{"size", name},
                       {"T", s.T},
                       {"B", s.B},
                       {"tightpipe_tokens_per_s", tp.tokens_per_s},
                       {"torch_tokens_per_s", pt.tokens_per_s},
                       {"ratio", ratio},
                       {"tightpipe_gflops", tp.gflops},
                       {"torch_gflops", pt.gflops},
                       {"tightpipe_ms_step", tp.ms_step},
                       {"torch_ms_step", pt.ms_step},
                       {"sgemm_gflops_model_shape", sgemm_model},
                       {"sgemm_gflops_512", sgemm512},
                       {"tightpipe_loss_first", tp.loss_first},
                       {"torch_loss_first", pt.loss_first}});
  }
  std::printf(
      "\nratio = tightpipe tokens/s / PyTorch tokens/s (target >= 1.0); SGEMM column: "
      "single-thread sgemm at (B*T) x 4C x C, this run\n");
  if (!json_out.empty()) {
    if (!write_file(json_out, results.dump(2) + "\n").ok()) return 1;
  }
  return all_ok ? 0 : 1;
}
