// zb-auto's local search against its plain greedy: over seeded random uneven per-stage costs,
// how often improve_schedule() beats the greedy's best candidate, by how much (in % of the
// objective), and what it costs in time.
//
// usage: zb_search_bench [--samples N] [--ranks 2,4,8] [--budget-ms B] [--objective makespan|span]
//                        [--seed S] [--max-comm C]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/simulator.h"

using namespace tightpipe;

namespace {

double wall_ms() { return now_seconds() * 1e3; }

// Uneven per-stage costs (random_cost_model) with a random share of activations kept by I.
CostModel random_costs(Rng& rng, int32_t p, double max_comm) {
  const double act_after_i = static_cast<double>(rng.below(5)) / 4;  // 0, .25, .., 1
  return random_cost_model(rng, p, act_after_i, max_comm);
}

struct Row {
  int better = 0;
  double gain_sum = 0, gain_max = 0;  // % of the greedy's objective
  double greedy_gap = 0;              // % the greedy's objective lies above lower_bound()
  double greedy_ms = 0, search_ms = 0;
  int64_t evaluations = 0, accepted = 0;
  int local_optimum = 0, time_limited = 0;
};

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "zb-auto's local search (improve_schedule) against the plain greedy over seeded random "
      "uneven per-stage costs: how often and by how much it improves the objective, and its time.",
      "zb_search_bench");
  int samples = 12;
  std::vector<int> ranks = {2, 4, 8};
  double budget_ms = -1;  // < 0: the library's default budget (a fixed number of simulations)
  std::string objective_text = "makespan";
  uint64_t seed = 2026;
  double max_comm = 0.5;
  flags.option("--samples", samples, "random cost tables per row").range(1, 10000).show_default();
  flags.option("--ranks", ranks, "pipeline sizes p (rows: m in {2p, 4p}, limit in {p, 2p})")
      .range(1, 64)
      .delimiter(',')
      .show_default();
  flags
      .option("--budget-ms", budget_ms,
              "search budget per schedule, wall ms (default: zb-auto's own, a fixed number of "
              "simulations)")
      .range(0.0, kZbMaxSearchBudgetMs);
  flags.option("--objective", objective_text, "makespan or span").show_default();
  flags.option("--seed", seed, "seed of the cost tables").show_default();
  flags.option("--max-comm", max_comm, "message latency drawn from [0, this)")
      .range(0.0, 100.0)
      .show_default();
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  auto objective = parse_zb_objective(objective_text);
  if (!objective.ok()) {
    fmt::print(stderr, "zb_search_bench: {}\n", objective.status().message());
    return bench::kExitUsage;
  }

  fmt::print(
      "objective {}, search budget {}, {} samples per row, seed {}, latency in [0, {})\n"
      "better = search strictly below the greedy; gain = % of the greedy's objective;\n"
      "LB gap = the greedy's objective above lower_bound() in it (lower_bound.h: no schedule of\n"
      "the shape within the row's memory limit does better);\n"
      "times are wall ms per schedule; moves = kept moves (tie-breaks included)\n\n",
      zb_objective_name(*objective),
      budget_ms < 0 ? fmt::format("{} simulations (the default)", kZbDefaultSearchEvaluations)
                    : fmt::format("{} ms", budget_ms),
      samples, seed, max_comm);
  fmt::print("{:>3} {:>4} {:>5} | {:>7} {:>9} {:>8} {:>7} | {:>9} {:>9} {:>7} {:>6} {:>6} {:>6}\n",
             "p", "m", "limit", "better", "mean gain", "max gain", "LB gap", "greedy ms",
             "search ms", "evals", "moves", "l.opt", "t.out");
  Rng rng(seed);
  Row all;
  int total = 0;
  for (int p : ranks) {
    for (int m : {2 * p, 4 * p}) {
      for (int limit : {p, 2 * p}) {
        Row row;
        for (int k = 0; k < samples; ++k) {
          const CostModel c = random_costs(rng, p, max_comm);
          ZbAutoOptions o;
          o.memory_limit = limit;
          o.objective = *objective;
          o.search_budget_ms = 0;
          double t0 = wall_ms();
          auto greedy = build_zb_auto(p, m, c, o);
          row.greedy_ms += wall_ms() - t0;
          TP_CHECK(greedy.ok(), greedy.status().to_string());
          SearchStats st;
          t0 = wall_ms();
          auto better = improve_schedule(
              *greedy, c, zb_w_memory_fractions(c, o), limit, *objective,
              budget_ms < 0 ? zb_search_budget(ZbAutoOptions{}) : SearchBudget{.ms = budget_ms},
              &st);
          row.search_ms += wall_ms() - t0;
          TP_CHECK(better.ok(), better.status().to_string());
          const double before = simulated_objective(*greedy, c, *objective).value();
          const double after = simulated_objective(*better, c, *objective).value();
          TP_CHECK(after <= before, "the search made the objective worse");
          const double gain = 100 * (before - after) / before;
          // The shape's bound at the row's memory limit (the fractions the search counted with:
          // LowerBoundOptions' default, zb_w_memory_fractions(c, {})), in the objective.
          LowerBoundOptions lo;
          lo.memory_limit = limit;
          const LowerBound lb = lower_bound(*greedy, c, lo).value();
          const double bound = *objective == ZbObjective::kSpan ? lb.span : lb.makespan;
          TP_CHECK(after >= bound * (1 - 1e-9), "the searched schedule's ", after,
                   " is below the lower bound ", bound);
          row.greedy_gap += 100 * std::max(0.0, lower_bound_gap(before, bound));  // float residue
          if (after < before) ++row.better;
          row.gain_sum += gain;
          row.gain_max = std::max(row.gain_max, gain);
          row.evaluations += st.evaluations;
          row.accepted += st.accepted;
          row.local_optimum += st.local_optimum ? 1 : 0;
          row.time_limited += st.time_limited ? 1 : 0;
        }
        const double n = samples;
        fmt::print(
            "{:>3} {:>4} {:>5} | {:>6.0f}% {:>8.2f}% {:>7.2f}% {:>6.2f}% | {:>9.1f} {:>9.1f} "
            "{:>7.0f} "
            "{:>6.1f} {:>5.0f}% {:>5.0f}%\n",
            p, m, limit, 100 * row.better / n, row.gain_sum / n, row.gain_max, row.greedy_gap / n,
            row.greedy_ms / n, row.search_ms / n, row.evaluations / n, row.accepted / n,
            100 * row.local_optimum / n, 100 * row.time_limited / n);
        all.better += row.better;
        all.gain_sum += row.gain_sum;
        all.gain_max = std::max(all.gain_max, row.gain_max);
        all.greedy_ms += row.greedy_ms;
        all.search_ms += row.search_ms;
        total += samples;
      }
    }
  }
  const double n = total;
  fmt::print(
      "\nall {} schedules: better in {:.0f}%, mean gain {:.2f}%, max gain {:.2f}%, mean "
      "greedy {:.1f} ms, mean search {:.1f} ms\n",
      total, 100 * all.better / n, all.gain_sum / n, all.gain_max, all.greedy_ms / n,
      all.search_ms / n);
  return 0;
}
