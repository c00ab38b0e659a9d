// Simulator throughput: simulated actions per second for p=64, m=512, v=4 and how the time grows
// with p*m*v. Generating and lowering are timed separately from simulating.
//
// usage: bench_sim [--quick]
#include <fmt/format.h>

#include <cstring>
#include <ctime>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

using namespace tightpipe;

namespace {

struct Row {
  std::string name;
  int p, m, v;
  size_t actions;
  double gen_s, lower_s, sim_s, sim_notl_s;
  double makespan;
};

// Process CPU seconds: on a shared, loaded machine wall time mostly measures the neighbours.
double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// Best-of-`reps` CPU time of f().
template <typename F>
double best_of(int reps, F f) {
  double best = 1e30;
  for (int k = 0; k < reps; ++k) {
    const double t0 = cpu_seconds();
    f();
    best = std::min(best, cpu_seconds() - t0);
  }
  return best;
}

Row run(const char* name, int p, int m, int v, int reps) {
  Row row{name, p, m, v, 0, 0, 0, 0, 0, 0};
  GeneratorOptions o{p, m, v, 0};
  Result<Schedule> s = Status::internal("unset");
  row.gen_s = best_of(reps, [&] { s = generate_schedule(name, o); });
  TP_CHECK(s.ok(), s.status().to_string());
  Result<Schedule> l = Status::internal("unset");
  row.lower_s = best_of(reps, [&] { l = lower(*s); });
  TP_CHECK(l.ok(), l.status().to_string());
  row.actions = l->size();
  UniformCosts u;
  u.comm = 0.1;
  CostModel cost = uniform_cost_model(u, l->num_ranks, l->num_stages);
  row.sim_s = best_of(reps, [&] {
    auto r = simulate(*l, cost);
    TP_CHECK(r.ok(), r.status().to_string());
    row.makespan = r->makespan;
  });
  SimOptions no_tl;
  no_tl.record_timeline = false;
  row.sim_notl_s = best_of(reps, [&] {
    auto r = simulate(*l, cost, no_tl);
    TP_CHECK(r.ok(), r.status().to_string());
  });
  return row;
}

void print(const Row& r, double base_per_action) {
  const double per = r.sim_s / static_cast<double>(r.actions);
  fmt::print(
      "{:<12} {:>3} {:>5} {:>2} {:>9} {:>10} {:>9.3f} {:>9.3f} {:>9.3f} {:>9.3f} {:>12.3g} "
      "{:>12.3g} {:>8.2f}\n",
      r.name, r.p, r.m, r.v, static_cast<int64_t>(r.p) * r.m * r.v, r.actions, r.gen_s * 1e3,
      r.lower_s * 1e3, r.sim_s * 1e3, r.sim_notl_s * 1e3, r.actions / r.sim_s,
      r.actions / r.sim_notl_s, base_per_action > 0 ? per / base_per_action : 1.0);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "Simulator throughput: generate, lower and simulate CPU times for p*m*v up to 64*1024*4 "
      "(interleaved), then 1f1b, zb-h1 and zb-v at p=64, m=512.",
      "bench_sim");
  bool quick = false;
  flags.flag("--quick", quick, "only the growth rows up to p=64, m=512, v=4, best of 1");
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  const int reps = quick ? 1 : 3;
  fmt::print("simulated actions include SEND/RECV (lowered programs); comm=0.1, overlap mode\n");
  fmt::print(
      "CPU times in ms (best of {}; CPU, not wall, so neighbours on a shared machine do "
      "not count);\nsim = with timeline, sim-stats = record_timeline=false; ratio = sim "
      "time per action relative to the first row (1.0 = linear in actions)\n\n",
      reps);
  fmt::print("{:<12} {:>3} {:>5} {:>2} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>12} {:>12} {:>8}\n",
             "schedule", "p", "m", "v", "p*m*v", "actions", "gen", "lower", "sim", "sim-stats",
             "actions/s", "stats act/s", "ratio");
  // Growth with p*m*v at fixed v=4 (interleaved), then the headline shape, then other schedules.
  struct Shape {
    const char* name;
    int p, m, v;
  };
  std::vector<Shape> shapes = {{"interleaved", 8, 64, 4},
                               {"interleaved", 16, 128, 4},
                               {"interleaved", 32, 256, 4},
                               {"interleaved", 64, 512, 4}};
  if (!quick) {
    shapes.push_back({"interleaved", 64, 1024, 4});
    shapes.push_back({"1f1b", 64, 512, 1});
    shapes.push_back({"zb-h1", 64, 512, 1});
    shapes.push_back({"zb-v", 64, 512, 2});
  }
  double base = 0;
  for (const Shape& sh : shapes) {
    Row r = run(sh.name, sh.p, sh.m, sh.v, reps);
    if (base == 0) base = r.sim_s / static_cast<double>(r.actions);
    print(r, base);
  }
  return 0;
}
