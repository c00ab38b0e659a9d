// Pipeline bench, everything measured side by side in one run:
//  1. Real compute, p = 2 on this 2-core machine: pipeline tokens/s / (2 x single-rank tokens/s)
//     next to (1 - predicted bubble), for 1F1B, ZB-H1 and ZB-V, on threads and on MPI.
//  2. Overlap: emulated compute with an emulated slow link, step time with and without
//     --overlap-p2p-communication.
// Usage: pipeline_bench [--steps N] [--rounds R] [--schedules 1f1b,zb-h1,zb-v] [--no-mpi]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/schedule.h"
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
  return o;
}

struct Run {
  double tokens_per_s = 0, predicted_bubble = 0, measured_bubble = 0, step_s = 0;
  double compute_s = 0;  // one microbatch through every stage: sum of the measured F + B costs
};

Run from_summary(const std::string& dir) {
  auto j = nlohmann::json::parse(read_file(dir + "/summary.json").value());
  Run r{j["tokens_per_s"].get<double>(), j["predicted_bubble_ratio"].get<double>(),
        j["measured_bubble_ratio"].get<double>(), j["step_time_s"].get<double>()};
  for (const auto& c : j["measured_costs"])
    r.compute_s += c["f_s"].get<double>() + c["b_s"].get<double>();
  return r;
}

Run threads_run(TrainOptions o) {
  auto s = run_training(o);
  if (!s.ok()) {
    std::fprintf(stderr, "run failed: %s\n", s.status().to_string().c_str());
    std::exit(1);
  }
  return from_summary(o.out_dir);
}

Run mpi_run(const std::string& schedule, int vpp, int steps, const std::string& out) {
  const std::string cmd = fmt::format(
      "mkdir -p {} && mpirun --allow-run-as-root --oversubscribe -np 2 "
      "{}/tools/tightpipe/tightpipe train --transport mpi --pp 2 --schedule {} {} --num-layers 4 "
      "--hidden-size 128 --num-attention-heads 4 --seq-length 128 --micro-batch-size 8 "
      "--num-microbatches 8 --train-iters {} --data-path {}/data/tinyshakespeare.txt --out-dir {} "
      "> {}/log.txt 2>&1",
      out, TP_BINARY_DIR, schedule, vpp ? fmt::format("--vpp {}", vpp) : "", steps, TP_SHARED_DIR,
      out, out);
  if (std::system(cmd.c_str()) != 0) {
    std::fprintf(stderr, "mpirun failed; see %s/log.txt\n", out.c_str());
    return {};
  }
  return from_summary(out);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "Pipeline tokens/s on real compute, p = 2, next to (1 - predicted bubble) per schedule, on "
      "threads and MPI (each run compared with the single-rank runs around it), then the step "
      "time with and without p2p overlap on emulated compute. About 5 minutes with the defaults.",
      "pipeline_bench");
  int steps = 8, rounds = 5;
  std::string schedule_list = "1f1b,zb-h1,zb-v";
  bool no_mpi = false;
  flags.option("--steps", steps, "training steps per run (the first is a warm-up)")
      .show_default()
      .range(2, 1000);
  flags.option("--rounds", rounds, "rounds over every schedule and transport (medians)")
      .show_default()
      .range(1, 100);
  flags.option("--schedules", schedule_list, "schedules to run, name[:v] comma-separated")
      .show_default();
  flags.flag("--no-mpi", no_mpi, "threads only (no mpirun runs)");
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  auto specs = parse_schedule_specs("--schedules", schedule_list);
  if (!specs.ok()) {
    std::fprintf(stderr, "pipeline_bench: %s\n", specs.status().message().c_str());
    return bench::kExitUsage;
  }
  const bool mpi = !no_mpi;
  char tmpl[] = "/tmp/tp-pipeline-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::printf(
      "model 4 x 128, T=128, B=8, m=8, %d steps (medians after 1 warm-up step), %d rounds\n", steps,
      rounds);
  std::printf(
      "each pipeline run is compared with the mean of the single-rank runs just before and "
      "just after it\n(the single-rank speed drifts by up to ~20%% within a minute on this "
      "shared machine); per row the\nmedian over the rounds, and the range of the gap\n\n");

  struct Case {
    std::string schedule, label, transport;  // label: "zb-v", "interleaved:2"
    int vpp = 0;
    std::vector<double> ratio, predicted, measured, tokens, single, slower;
  };
  std::vector<Case> cases;
  for (const ScheduleSpec& spec : *specs) {
    for (const char* transport : {"threads", "mpi"}) {
      if (!mpi && std::strcmp(transport, "mpi") == 0) continue;
      Case c;
      c.schedule = spec.name;
      c.label = spec.label();
      c.transport = transport;
      c.vpp = spec.chunks;
      cases.push_back(std::move(c));
    }
  }
  TrainOptions single = base_options(steps, dir + "/single");
  single.pp = 1;
  Run single_prev = threads_run(single);
  for (int round = 0; round < rounds; ++round) {
    for (Case& c : cases) {
      Run r;
      if (c.transport == "mpi") {
        r = mpi_run(c.schedule, c.vpp, steps, dir + "/mpi-" + c.label);
      } else {
        TrainOptions o = base_options(steps, dir + "/" + c.label);
        o.pp = 2;
        o.schedule = c.schedule;
        o.vpp = c.vpp;
        r = threads_run(o);
      }
      const Run single_next = threads_run(single);
      const double one = 0.5 * (single_prev.tokens_per_s + single_next.tokens_per_s);
      const double one_compute = 0.5 * (single_prev.compute_s + single_next.compute_s);
      single_prev = single_next;
      c.slower.push_back(r.compute_s / one_compute - 1);
      c.ratio.push_back(r.tokens_per_s / (2 * one));
      c.predicted.push_back(1 - r.predicted_bubble);
      c.measured.push_back(r.measured_bubble);
      c.tokens.push_back(r.tokens_per_s);
      c.single.push_back(one);
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }
  std::printf("%-8s %-9s %3s %9s %12s %20s %20s %12s %14s %15s %15s\n", "schedule", "transport",
              "p", "tokens/s", "single tok/s", "tok/s/(2 x single)", "1 - predicted bubble",
              "gap (points)", "gap range", "measured bubble", "compute +%");
  for (const Case& c : cases) {
    std::vector<double> gap;
    for (size_t i = 0; i < c.ratio.size(); ++i) gap.push_back(100 * (c.ratio[i] - c.predicted[i]));
    const auto [lo, hi] = std::minmax_element(gap.begin(), gap.end());
    std::printf(
        "%-8s %-9s %3d %9.0f %12.0f %20.3f %20.3f %+12.1f %6.1f..%+5.1f %14.1f%% %+14.1f%%\n",
        c.label.c_str(), c.transport.c_str(), 2, median(c.tokens), median(c.single),
        median(c.ratio), median(c.predicted), median(gap), *lo, *hi, 100 * median(c.measured),
        100 * median(c.slower));
  }
  std::printf(
      "compute +%%: one microbatch's F + B summed over the stages, measured in the pipeline run, "
      "against the\nsingle-rank runs around it; tok/s/(2 x single) is about (1 - measured "
      "bubble) / (1 + compute +%%)\n");

  std::printf(
      "\noverlap: emulated compute f=4,b=8 ms, p=4, m=8, 1f1b, link latency 2 ms, 1 Gbit/s\n");
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
