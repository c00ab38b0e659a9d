// How far the automatic schedules land from the true optimum, and how tight the lower bound is:
// over seeded random uneven per-stage costs of tiny pipelines, zb-opt's branch and bound gives
// the optimum, and the bench prints the greedy's (search budget 0) and the searched zb-auto's
// mean and worst gap to it, and the lower bound's gap below it.
//
// usage: zb_opt_gap_bench [--samples N] [--ranks 2,3,4] [--objective makespan|span] [--seed S]
//                         [--max-comm C]
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/simulator.h"

using namespace tightpipe;

namespace {

struct Gap {
  double sum = 0, worst = 0;
  int n = 0;
  void add(double g) {
    sum += g;
    worst = std::max(worst, g);
    ++n;
  }
  double mean() const { return n ? sum / n : 0; }
};

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "The greedy's and the searched zb-auto's gap to zb-opt's exact optimum, and the lower "
      "bound's gap below it, over seeded random uneven per-stage costs of tiny pipelines.",
      "zb_opt_gap_bench");
  int samples = 8;
  std::vector<int> ranks = {2, 3, 4};
  std::string objective_text = "makespan";
  uint64_t seed = 2026;
  double max_comm = 0.5;
  flags.option("--samples", samples, "random cost tables per row").show_default();
  flags.option("--ranks", ranks, "pipeline sizes p (rows: m in {p, max}, limit in {p/2, p})")
      .delimiter(',')
      .show_default();
  flags.option("--objective", objective_text, "makespan or span").show_default();
  flags.option("--seed", seed, "seed of the cost tables").show_default();
  flags.option("--max-comm", max_comm, "message latency drawn from [0, this)").show_default();
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  auto objective = parse_zb_objective(objective_text);
  if (!objective.ok()) {
    fmt::print(stderr, "zb_opt_gap_bench: {}\n", objective.status().message());
    return bench::kExitUsage;
  }
  for (int p : ranks) {
    if (p < 1 || p > kZbOptMaxRanks || samples < 1 || max_comm < 0) {
      fmt::print(stderr,
                 "zb_opt_gap_bench: --ranks {} / --samples {} / --max-comm {}: p must be in "
                 "[1, {}], samples >= 1, comm >= 0\n",
                 p, samples, max_comm, kZbOptMaxRanks);
      return bench::kExitUsage;
    }
  }
  fmt::print(
      "objective {}, {} samples per row, seed {}, latency in [0, {})\n"
      "gaps in % of the optimum: greedy = zb-auto with search budget 0, search = zb-auto with "
      "its default search, bound = how far lower_bound() lies below the optimum;\n"
      "opt ms = wall ms of one exact search, states = its expanded states\n\n",
      zb_objective_name(*objective), samples, seed, max_comm);
  fmt::print("{:>2} {:>2} {:>5} | {:>7} {:>7} | {:>7} {:>7} | {:>7} {:>7} | {:>8} {:>9}\n", "p",
             "m", "limit", "greedy", "worst", "search", "worst", "bound", "worst", "opt ms",
             "states");
  Rng rng(seed);
  Gap all_g, all_s, all_b;
  double worst_ms = 0;
  for (int p : ranks) {
    for (int m : {p, static_cast<int>(kZbOptMaxMicrobatches)}) {
      for (double limit : {std::max(1.0, std::floor(p / 2.0)), static_cast<double>(p)}) {
        Gap g, s, b;
        double ms = 0, states = 0;
        for (int k = 0; k < samples; ++k) {
          const double act_after_i = static_cast<double>(rng.below(5)) / 4;
          const CostModel c = random_cost_model(rng, p, act_after_i, max_comm);
          ZbAutoOptions o;
          o.memory_limit = limit;
          o.objective = *objective;
          ZbOptStats st;
          const double t0 = now_seconds();
          auto opt = build_zb_opt(p, m, c, o, &st);
          const double dt = 1e3 * (now_seconds() - t0);
          TP_CHECK(opt.ok(), opt.status().to_string());
          ms += dt;
          worst_ms = std::max(worst_ms, dt);
          states += static_cast<double>(st.nodes);
          const double best = simulated_objective(*opt, c, *objective).value();
          ZbAutoOptions og = o;
          og.search_budget_ms = 0;
          auto greedy = build_zb_auto(p, m, c, og);
          auto searched = build_zb_auto(p, m, c, o);
          TP_CHECK(greedy.ok() && searched.ok(), "zb-auto failed");
          g.add(100 * lower_bound_gap(simulated_objective(*greedy, c, *objective).value(), best));
          s.add(100 * lower_bound_gap(simulated_objective(*searched, c, *objective).value(), best));
          TP_CHECK(st.lower_bound <= best * (1 + 1e-9), "the lower bound ", st.lower_bound,
                   " is above the optimum ", best);
          b.add(100 * std::max(0.0, lower_bound_gap(best, st.lower_bound)));  // float residue
        }
        fmt::print(
            "{:>2} {:>2} {:>5g} | {:>6.2f}% {:>6.2f}% | {:>6.2f}% {:>6.2f}% | {:>6.2f}% {:>6.2f}% "
            "| {:>8.1f} {:>9.0f}\n",
            p, m, limit, g.mean(), g.worst, s.mean(), s.worst, b.mean(), b.worst, ms / samples,
            states / samples);
        for (auto [to, from] : {std::pair{&all_g, &g}, {&all_s, &s}, {&all_b, &b}}) {
          to->sum += from->sum;
          to->n += from->n;
          to->worst = std::max(to->worst, from->worst);
        }
      }
    }
  }
  fmt::print(
      "\nall {} cases: greedy {:.2f}% mean, {:.2f}% worst; search {:.2f}% mean, {:.2f}% worst; "
      "bound {:.2f}% mean, {:.2f}% worst below the optimum; slowest exact search {:.0f} ms\n",
      all_g.n, all_g.mean(), all_g.worst, all_s.mean(), all_s.worst, all_b.mean(), all_b.worst,
      worst_ms);
  return 0;
}
