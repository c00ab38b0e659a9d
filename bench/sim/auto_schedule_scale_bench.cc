// How the automatic schedules' build time grows with the pipeline: for p in {4, 8, 16, 32, 64}
// and m in {2p, 4p, 8p}, the wall time of zb-1p, zb-2p and zb-v-auto built from seeded uneven
// per-stage costs (random_cost_model, with message latency), the greedy alone and with the
// default search (a fixed number of evaluations per grid limit), the span bubble of the result,
// its span's gap to the lower bound at its own memory (lower_bound_for: no schedule of that shape
// holding at most as much memory spans less), and the growth exponent e of time ~ (stages x
// microbatches)^e fitted by least squares over the rows of each name.
//
// usage: auto_schedule_scale_bench [--ranks 4,8,16,32,64] [--ratios 2,4,8]
//                                  [--names zb-1p,zb-2p,zb-v-auto] [--seed S] [--no-search]
//                                  [--clock wall|cpu]
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <string>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/simulator.h"

using namespace tightpipe;

namespace {

// Wall seconds, or this process's CPU seconds (--clock cpu: steadier on a shared machine).
bool g_cpu_clock = false;
double wall_s() {
  if (g_cpu_clock) return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
  return now_seconds();
}

// Least-squares slope of log(t) over log(n).
double fitted_exponent(const std::vector<std::pair<double, double>>& pts) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (auto [x, t] : pts) {
    if (!(t > 0)) continue;
    const double lx = std::log(x), ly = std::log(t);
    sx += lx, sy += ly, sxx += lx * lx, sxy += lx * ly;
    ++n;
  }
  if (n < 2) return std::nan("");
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "Build time of the automatic schedules (zb-1p, zb-2p, zb-v-auto) against the pipeline's "
      "size, greedy alone and with the default search, and the fitted growth exponent.",
      "auto_schedule_scale_bench");
  std::vector<int> ranks = {4, 8, 16, 32, 64};
  std::vector<int> ratios = {2, 4, 8};
  std::vector<std::string> names = {"zb-1p", "zb-2p", "zb-v-auto"};
  uint64_t seed = 2026;
  bool no_search = false;
  std::string clock = "wall";
  flags.option("--ranks", ranks, "pipeline sizes p").range(1, 128).delimiter(',').show_default();
  flags.option("--ratios", ratios, "microbatches m = ratio x p")
      .range(1, 64)
      .delimiter(',')
      .show_default();
  flags.option("--names", names, "automatic schedule names").delimiter(',').show_default();
  flags.option("--seed", seed, "seed of the cost tables").show_default();
  flags.flag("--no-search", no_search, "time the greedy alone");
  flags.option("--clock", clock, "wall, or cpu (this process's CPU time)")
      .one_of({"wall", "cpu"})
      .show_default();
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  g_cpu_clock = clock == "cpu";
  for (const std::string& n : names) {
    if (!is_auto_schedule_name(n)) {
      fmt::print(stderr,
                 "auto_schedule_scale_bench: --names '{}': not an automatic schedule; hint: "
                 "zb-1p, zb-2p, zb-auto, zb-v-auto\n",
                 n);
      return bench::kExitUsage;
    }
  }

  fmt::print(
      "uneven costs (random_cost_model, seed {}, latency in [0, 0.5)); times are {} seconds "
      "per build; bubble = span bubble of the searched schedule (simulate, overlap mode)\n\n",
      seed, clock);
  // LB gap: the searched schedule's span over lower_bound_for() (the span bound at the
  // schedule's own memory: no schedule of the shape holding at most as much memory spans less).
  fmt::print("{:>3} {:>5} {:>10} {:>7} | {:>9} {:>9} | {:>9} {:>8} {:>7}\n", "p", "m", "name",
             "S x m", "greedy s", "search s", "makespan", "bubble", "LB gap");
  std::map<std::string, std::vector<std::pair<double, double>>> greedy_pts, search_pts;
  for (int p : ranks) {
    for (int ratio : ratios) {
      const int m = ratio * p;
      for (const std::string& name : names) {
        const int32_t S = auto_schedule_chunks(name) * p;
        Rng rng(seed + 1000003ull * p + 17ull * m);
        const CostModel c = random_cost_model(rng, S, 0.5, 0.5);
        ZbAutoOptions o;
        o.search_budget_ms = 0;
        double t0 = wall_s();
        auto greedy = build_auto_schedule(name, p, m, c, o);
        const double tg = wall_s() - t0;
        TP_CHECK(greedy.ok(), greedy.status().to_string());
        double ts = std::nan("");
        Schedule best = *greedy;
        if (!no_search) {
          t0 = wall_s();
          auto searched = build_auto_schedule(name, p, m, c, ZbAutoOptions{});
          ts = wall_s() - t0;
          TP_CHECK(searched.ok(), searched.status().to_string());
          best = std::move(searched).value();
        }
        auto low = lower(best);
        TP_CHECK(low.ok(), low.status().to_string());
        SimOptions so;
        so.record_timeline = false;
        auto r = simulate(*low, c, so);
        TP_CHECK(r.ok(), r.status().to_string());
        auto lb = lower_bound_for(best, c, so);
        TP_CHECK(lb.ok(), lb.status().to_string());
        double gap = lower_bound_gap(r->max_span, lb->span);
        if (gap < 0 && gap > -1e-9) gap = 0;  // rounding: "-0.00%" is a tie, not a violation
        const double n = static_cast<double>(S) * m;
        greedy_pts[name].push_back({n, tg});
        if (!no_search) search_pts[name].push_back({n, ts});
        fmt::print("{:>3} {:>5} {:>10} {:>7} | {:>9.3f} {:>9} | {:>9.2f} {:>7.2f}% {:>7}\n", p, m,
                   name, S * m, tg, no_search ? "-" : fmt::format("{:.3f}", ts), r->makespan,
                   100 * r->span_bubble_ratio, fmt::format("{:.2f}%", 100 * gap));
        std::fflush(stdout);
      }
    }
  }
  fmt::print("\nfitted growth exponent e (time ~ (S x m)^e):\n");
  for (const std::string& name : names) {
    fmt::print("  {:>10}: greedy {:.2f}", name, fitted_exponent(greedy_pts[name]));
    if (!no_search) fmt::print(", with search {:.2f}", fitted_exponent(search_pts[name]));
    fmt::print("\n");
  }
  return 0;
}
