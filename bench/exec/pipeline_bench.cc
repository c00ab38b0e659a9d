// Pipeline bench, everything measured side by side in one run:
//  1. Real compute, p = 2 on this 2-core machine: pipeline tokens/s / (2 x single-rank tokens/s)
//     next to (1 - predicted bubble), for 1F1B, ZB-H1 and ZB-V, on threads and on MPI.
//  2. Overlap: emulated compute with an emulated slow link, step time with and without
//     --overlap-p2p-communication.
// Usage: pipeline_bench [--steps N] [--no-mpi]
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/trainer.h"

using namespace tightpipe;

namespace {

TrainOptions base_options(int steps, const std::string& out) {
  TrainOptions o;
  o.model.num_layers = 4;
  o.model.hidden_size = 128;
  o.model.num_heads = 4;
  o.model.seq_length = 128;
  o.model.micro_batch_size = 8;
  o.microbatches = 8;
  o.train_iters = steps;
  o.warmup_steps_excluded = 1;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  o.out_dir = out;
  o.progress = false;
  return o;
}

struct Run {
  double tokens_per_s = 0, predicted_bubble = 0, measured_bubble = 0, step_s = 0;
};

Run threads_run(TrainOptions o) {
  auto s = run_training(o);
  if (!s.ok()) {
    std::fprintf(stderr, "run failed: %s\n", s.status().to_string().c_str());
    std::exit(1);
  }
  auto j = nlohmann::json::parse(read_file(o.out_dir + "/summary.json").value());
  return {s->tokens_per_s, s->predicted_bubble_ratio, s->measured_bubble_ratio,
          j["step_time_s"].get<double>()};
}

Run mpi_run(const std::string& schedule, int vpp, int steps, const std::string& out) {
  const std::string cmd = fmt::format(
      "mkdir -p {} && mpirun --allow-run-as-root --oversubscribe -np 2 "
      "{}/tools/tightpipe/tightpipe train --transport mpi --pp 2 --schedule {} {} --num-layers 4 "
      "--hidden-size 128 --num-attention-heads 4 --seq-length 128 --micro-batch-size 8 "
      "--num-microbatches 8 --train-iters {} --data-path {}/data/tinyshakespeare.txt --out-dir {} "
      "> {}/log.txt 2>&1",
      out, TP_BINARY_DIR, schedule, vpp ? fmt::format("--vpp {}", vpp) : "", steps, TP_SHARED_DIR, out,
      out);
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "mpirun failed; see %s/log.txt\n", out.c_str());
    return {};
  }
  auto j = nlohmann::json::parse(read_file(out + "/summary.json").value());
  return {j["tokens_per_s"].get<double>(), j["predicted_bubble_ratio"].get<double>(),
          j["measured_bubble_ratio"].get<double>(), j["step_time_s"].get<double>()};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8;
  bool mpi = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    if (!std::strcmp(argv[i], "--no-mpi")) mpi = false;
  }
  char tmpl[] = "/tmp/tp-pipeline-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::printf("model 4 x 128, T=128, B=8, m=8, %d steps (medians after 1 warm-up step)\n\n", steps);

  TrainOptions single = base_options(steps, dir + "/single");
  single.pp = 1;
  const Run one = threads_run(single);
  std::printf("single rank: %.0f tokens/s\n\n", one.tokens_per_s);
  std::printf("%-8s %-8s %5s %12s %22s %20s %16s\n", "schedule", "transport", "p", "tokens/s",
              "tok/s / (2 x single)", "1 - predicted bubble", "measured bubble");
  struct Case {
    const char* schedule;
    int vpp;
  } cases[] = {{"1f1b", 0}, {"zb-h1", 0}, {"zb-v", 2}};
  for (const auto& c : cases) {
    TrainOptions o = base_options(steps, dir + "/" + c.schedule);
    o.pp = 2;
    o.schedule = c.schedule;
    o.vpp = c.vpp;
    const Run r = threads_run(o);
    std::printf("%-8s %-8s %5d %12.0f %22.3f %20.3f %15.1f%%\n", c.schedule, "threads", 2,
                r.tokens_per_s, r.tokens_per_s / (2 * one.tokens_per_s), 1 - r.predicted_bubble,
                100 * r.measured_bubble);
    if (mpi) {
      const Run m = mpi_run(c.schedule, c.vpp, steps, dir + "/mpi-" + c.schedule);
      std::printf("%-8s %-8s %5d %12.0f %22.3f %20.3f %15.1f%%\n", c.schedule, "mpi", 2,
                  m.tokens_per_s, m.tokens_per_s / (2 * one.tokens_per_s), 1 - m.predicted_bubble,
                  100 * m.measured_bubble);
    }
  }

  std::printf("\noverlap: emulated compute f=4,b=8 ms, p=4, m=8, 1f1b, link latency 2 ms, 1 Gbit/s\n");
  double step[2] = {0, 0};
  for (int overlap = 0; overlap < 2; ++overlap) {
    TrainOptions o = base_options(steps, dir + fmt::format("/overlap{}", overlap));
    o.pp = 4;
    o.exec.emulated = true;
    o.exec.costs = EmulatedCompute::parse("f=4,b=8").value();
    o.exec.overlap_p2p = overlap == 1;
    o.world.link = parse_link_options("latency_us=2000,gbps=1").value();
    step[overlap] = threads_run(o).step_s;
  }
  std::printf("step time: %.1f ms without overlap, %.1f ms with: overlap saves %.1f%%\n",
              1e3 * step[0], 1e3 * step[1], 100 * (1 - step[1] / step[0]));
  return 0;
}
