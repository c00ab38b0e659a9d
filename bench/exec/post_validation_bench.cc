// Post-validation bench (issue 29), measured side by side in one run: the steady-state step of
// zb-h1, zb-h2 and zb-2p at p = 2 and 4 on thread ranks, with the synchronous optimizer and with
// --enable-optimizer-post-validation, on emulated compute (each action sleeps its cost) and on
// real compute (the small GPT model), beside the simulator's prediction from the run's own
// measured costs (costs.json): the makespan when synchronous, steady_state_step_time() when
// post-validated. The measured step is the median of metrics.jsonl's step_time_s after the first
// steps (a post-validated step is timed from the rank's own start: there is no barrier).
// Points: 100 x (measured - predicted) / measured, the bubble points the prediction misses.
// Real compute runs with --clip-grad 0 (see run()).
// Usage: post_validation_bench [--steps N] [--no-real] [--cost f=10,i=10,w=10]
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/trainer.h"

using namespace tightpipe;

namespace {

struct Measured {
  double step_s = 0;       // median step_time_s after the warm-up steps
  double predicted_s = 0;  // the simulator's, from the run's costs.json
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// `schedule`: a name, or a schedule file (the post-validated zb-2p runs the schedule its
// synchronous run built: a run that profiles and switches schedules is not post-validated).
Measured run(const std::string& label, const std::string& schedule, int p, int m, bool pv,
             bool emulated, const std::string& cost, int steps) {
  TrainOptions o;
  o.model.num_layers = 2 * p;
  o.model.hidden_size = 128;
  o.model.num_heads = 4;
  o.model.seq_length = 128;
  o.model.micro_batch_size = 4;
  o.microbatches = m;
  o.pp = p;
  o.schedule = schedule;
  o.train_iters = steps;
  o.warmup_steps_excluded = 2;
  o.optimizer_post_validation = pv;
  // The small model's gradient norm stays over 1 for these steps: with --clip-grad 1 no step
  // would be post-validated (--post-validation-stable-steps), so clipping is off here.
  o.clip_grad = 0;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  if (emulated) {
    o.exec.emulated = true;
    o.exec.costs = EmulatedCompute::parse(cost).value();
  }
  o.out_dir = fmt::format("/tmp/tp-pvbench-{}-{}-{}-{}", label, p, pv ? "pv" : "sync",
                          emulated ? "emu" : "real");
  auto s = run_training(o);
  if (!s.ok()) {
    std::fprintf(stderr, "%s p=%d: %s\n", label.c_str(), p, s.status().to_string().c_str());
    std::exit(1);
  }
  Measured out;
  std::vector<double> steps_s;
  std::istringstream lines(read_file(o.out_dir + "/metrics.jsonl").value());
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step_time_s")) continue;
    if (j["step"].get<int>() > o.warmup_steps_excluded)
      steps_s.push_back(j["step_time_s"].get<double>());
  }
  out.step_s = median(steps_s);
  // The prediction from what the run measured.
  auto costs = parse_cost_table(read_file(o.out_dir + "/costs.json").value(), "costs.json").value();
  auto sched = read_file(o.out_dir + "/schedule.csv").value();
  auto parsed = parse_csv(sched, "schedule.csv").value();
  const Schedule low = parsed.lowered ? parsed : lower(parsed).value();
  SimOptions so;
  so.record_timeline = false;
  so.optimizer_post_validation = pv;
  out.predicted_s = steady_state_step_time(low, costs, so).value().step_time;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 14;
  bool no_real = false;
  std::string cost = "f=10,i=10,w=10";
  bench::Flags flags("post_validation_bench",
                     "Steady-state step of zb-h1, zb-h2, zb-2p at p = 2, 4: synchronous vs "
                     "--enable-optimizer-post-validation, emulated and real compute, beside the "
                     "simulator's prediction. About 2 minutes with the defaults.");
  flags.option("--steps", steps, "training steps per run").show_default().range(6, 1000);
  flags.flag("--no-real", no_real, "emulated compute only");
  flags.option("--cost", cost, "emulated costs in ms per microbatch through a whole rank")
      .show_default();
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  std::fflush(stdout);
  if (std::system("lscpu | grep -m1 'Model name'") != 0) std::printf("(lscpu failed)\n");
  for (int emulated = 1; emulated >= (no_real ? 1 : 0); --emulated) {
    const std::string what = emulated ? " (" + cost + " ms)" : " (2p x 128, T=128, B=4)";
    std::printf("\n%s compute%s, thread ranks, m = 2p (p = 2: m = 4; p = 4: m = 8)\n",
                emulated ? "emulated" : "real", what.c_str());
    std::printf("%-6s %2s  %10s %10s %7s  %10s %10s %7s  %8s\n", "", "p", "sync ms", "predicted",
                "points", "pv ms", "predicted", "points", "pv/sync");
    for (int p : {2, 4}) {
      double pv_step[3] = {0, 0, 0};
      int k = 0;
      for (const char* name : {"zb-h1", "zb-h2", "zb-2p"}) {
        const Measured s = run(name, name, p, 2 * p, false, emulated, cost, steps);
        const std::string built = fmt::format("/tmp/tp-pvbench-{}-{}-sync-{}/schedule.csv", name, p,
                                              emulated ? "emu" : "real");
        const bool switches = std::string(name) == "zb-2p";
        const Measured v =
            run(name, switches ? built : name, p, 2 * p, true, emulated, cost, steps);
        pv_step[k++] = v.step_s;
        std::printf("%-6s %2d  %10.2f %10.2f %+7.1f  %10.2f %10.2f %+7.1f  %8.3f\n", name, p,
                    1e3 * s.step_s, 1e3 * s.predicted_s,
                    100 * (s.step_s - s.predicted_s) / s.step_s, 1e3 * v.step_s,
                    1e3 * v.predicted_s, 100 * (v.step_s - v.predicted_s) / v.step_s,
                    v.step_s / s.step_s);
      }
      std::printf("       %2d  post-validated zb-h2 / zb-h1: %.3f, zb-2p / zb-h1: %.3f\n", p,
                  pv_step[1] / pv_step[0], pv_step[2] / pv_step[0]);
    }
  }
  return 0;
}
