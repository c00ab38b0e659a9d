// Cost-aware schedules on real compute, measured side by side in one run (issue 12's bench):
// p = 2 thread ranks on this 2-core machine, a GPT of 8 layers x 128, m = 8. Each round runs
//   zb-h1 (the default even split), zb-1p and zb-2p (built by `train` from 3 profile steps on
//   zb-h1), zb-v (the default split) and zb-v-auto with --pipeline-layout auto (the split chosen
//   from the zb-h1 run's measured per-layer-kind costs),
// and prints per schedule the measured bubble (median over the rounds of each run's median), the
// run's own prediction, and the what-if `tightpipe report --what-if` computes for it from the
// zb-h1 run of the same round, with the gap between what-if and measurement in points.
// Usage: auto_schedule_bench [--steps N] [--rounds R]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/report.h"
#include "tightpipe/trainer.h"

using namespace tightpipe;

namespace {

TrainOptions base_options(int steps, const std::string& out) {
  TrainOptions o;
  o.model.num_layers = 8;
  o.model.hidden_size = 128;
  o.model.num_heads = 4;
  o.model.seq_length = 128;
  o.model.micro_batch_size = 8;
  o.pp = 2;
  o.microbatches = 8;
  o.train_iters = steps;
  o.eval_iters = 0;
  o.warmup_steps_excluded = 1;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  o.out_dir = out;
  return o;
}

template <typename T>
T or_die(Result<T> r, const std::string& what) {
  if (!r.ok()) {
    std::fprintf(stderr, "auto_schedule_bench: %s: %s\n", what.c_str(),
                 r.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(r).value();
}

struct Case {
  std::string label;     // the row: schedule and layout choice
  std::string schedule;  // --schedule
  std::string what_if;   // the report's --what-if item for it
  bool auto_layout = false;
  std::vector<double> measured, predicted, what_if_pred;
  std::vector<double> skew;  // slowest rank's F+I+W per microbatch / fastest's - 1
  std::string layout;
};

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "zb-h1, zb-1p, zb-2p, zb-v and zb-v-auto with the auto layer split on real compute (p = 2, "
      "8 layers x 128, m = 8): measured bubble, the run's prediction, and the what-if from the "
      "zb-h1 run, side by side. About 4 minutes with the defaults.",
      "auto_schedule_bench");
  int steps = 10, rounds = 5;
  flags.option("--steps", steps, "training steps per run (for zb-1p/zb-2p: 3 profile steps first)")
      .show_default()
      .range(6, 1000);
  flags.option("--rounds", rounds, "rounds over every schedule (medians)")
      .show_default()
      .range(1, 100);
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  char tmpl[] = "/tmp/tp-auto-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);

  std::vector<Case> cases(5);
  const char* rows[][3] = {{"zb-h1", "zb-h1", "zb-h1"},
                           {"zb-1p", "zb-1p", "zb-1p"},
                           {"zb-2p", "zb-2p", "zb-2p"},
                           {"zb-v (default split)", "zb-v", "zb-v"},
                           {"zb-v-auto (auto split)", "zb-v-auto", "zb-v-auto@auto"}};
  for (size_t k = 0; k < cases.size(); ++k) {
    cases[k].label = rows[k][0];
    cases[k].schedule = rows[k][1];
    cases[k].what_if = rows[k][2];
    cases[k].auto_layout = cases[k].what_if.ends_with("@auto");
  }

  std::string what_if_list;
  for (const Case& c : cases) what_if_list += (what_if_list.empty() ? "" : ",") + c.what_if;
  const auto what_if = or_die(parse_what_if(what_if_list), "--what-if");

  for (int round = 0; round < rounds; ++round) {
    const std::string base = fmt::format("{}/round{}", dir, round);
    const std::string h1_dir = base + "/zb-h1";
    std::map<std::string, WhatIfResult> predicted;  // what-if label -> result, from zb-h1's run
    for (Case& c : cases) {
      TrainOptions o = base_options(steps, base + "/" + c.schedule);
      o.schedule = c.schedule;
      if (c.auto_layout) {
        o.pipeline_layout = "auto";
        o.layout_costs = or_die(run_layer_costs(or_die(load_run(h1_dir), "load zb-h1 run")),
                                "zb-h1 layer costs");
      }
      const TrainSummary s = or_die(run_training(o), c.schedule + " run");
      const auto j = nlohmann::json::parse(read_file(o.out_dir + "/summary.json").value());
      c.layout = j["layout"].get<std::string>();
      std::vector<double> work(o.pp, 0.0);
      for (const auto& st : j["measured_costs"]) {
        work[st["rank"].get<int>()] +=
            st["f_s"].get<double>() + st["i_s"].get<double>() + st["w_s"].get<double>();
      }
      c.skew.push_back(*std::max_element(work.begin(), work.end()) /
                           *std::min_element(work.begin(), work.end()) -
                       1);
      c.measured.push_back(s.measured_bubble_ratio);
      c.predicted.push_back(s.predicted_bubble_ratio);
      if (c.schedule == "zb-h1") {  // the what-ifs of every schedule, from this run
        ReportOptions ro;
        ro.what_if = what_if;
        const Report rep = or_die(build_report(h1_dir, ro), "report of the zb-h1 run");
        for (const WhatIfResult& w : rep.what_ifs) predicted[w.label] = w;
      }
      const WhatIfResult& w = predicted.at(c.what_if);
      if (!w.error.empty())
        std::fprintf(stderr, "what-if %s: %s\n", c.what_if.c_str(), w.error.c_str());
      c.what_if_pred.push_back(w.bubble_ratio);
    }
    std::fprintf(stderr, "round %d of %d done\n", round + 1, rounds);
  }

  std::printf(
      "p=2 thread ranks, GPT 8 layers x 128 (4 heads, T=128, B=8), m=8, %d steps per run "
      "(medians after the warm-up and profile steps), %d rounds; bubble = the one "
      "definition (docs/bubble.md), median over the rounds\n\n",
      steps, rounds);
  std::printf("%-24s %-22s %9s %9s %10s %16s %9s %10s\n", "schedule", "layout", "measured",
              "best rnd", "predicted", "what-if (zb-h1)", "|gap| pp", "rank skew");
  double best = 1, v_even = 0, v_auto = 0, worst_gap = 0;
  for (const Case& c : cases) {
    const double m = median(c.measured), p = median(c.predicted), w = median(c.what_if_pred);
    const double low = *std::min_element(c.measured.begin(), c.measured.end());
    std::printf("%-24s %-22s %8.1f%% %8.1f%% %9.1f%% %15.1f%% %9.1f %9.1f%%\n", c.label.c_str(),
                c.layout.c_str(), 100 * m, 100 * low, 100 * p, 100 * w, 100 * std::abs(w - m),
                100 * median(c.skew));
    best = std::min(best, m);
    if (c.schedule == "zb-v") v_even = m;
    if (c.schedule == "zb-v-auto") v_auto = m;
    if (c.schedule == "zb-v" || c.schedule == "zb-v-auto") {
      worst_gap = std::max(worst_gap, std::abs(w - m));
    }
  }
  std::printf(
      "\nbest measured bubble %.1f%% (target < 5%%); zb-v-auto with the auto split %.1f%% "
      "vs zb-v with the default split %.1f%%; zb-v what-ifs from the zb-h1 run within "
      "%.1f points of the runs (target 3)\n"
      "rank skew: how much slower the slowest rank computed its F+I+W per microbatch than "
      "the fastest, in that run (the same work on both ranks but for zb-v's default split: "
      "what the shared machine adds)\n",
      100 * best, 100 * v_auto, 100 * v_even, 100 * worst_gap);
  return 0;
}
