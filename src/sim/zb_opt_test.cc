// zb-opt: the branch and bound's optimum is valid, within its memory, never worse than zb-auto
// or zb-1p at the same limit, and never below the lower bound.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sanitizer.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

struct Sim {
  double makespan = 0, span = 0;
};

Sim run(const Schedule& s, const CostModel& c) {
  auto r = simulate(*lower(s), c);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return {r->makespan, r->max_span};
}

double peak(const Schedule& s, const CostModel& c, const ZbAutoOptions& o) {
  const std::vector<double> p = zb_peak_memory_units(s, zb_w_memory_fractions(c, o));
  return *std::max_element(p.begin(), p.end());
}

TEST(ZbOpt, OptimalWithinMemoryAndNeverWorseThanTheGreedy) {
  Rng rng(7);
  int cases = 0;
  for (int32_t p = 2; p <= kZbOptMaxRanks; ++p) {
    for (int32_t m = 1; m <= kZbOptMaxMicrobatches; m += testutil::kCaseStride) {
      for (ZbObjective obj : {ZbObjective::kMakespan, ZbObjective::kSpan}) {
        Rng crng = rng.fork(static_cast<uint64_t>(p * 100 + m));
        const double latency = (p + m) % 2 ? 0.3 : 0.0;
        const CostModel costs = random_cost_model(crng, p, (m % 2) ? 0.5 : 1.0, latency);
        for (double limit : {static_cast<double>(p), std::max(1.0, p / 2.0)}) {
          ZbAutoOptions o;
          o.memory_limit = limit;
          o.objective = obj;
          const std::string what =
              fmt::format("p={} m={} limit={} {}", p, m, limit, zb_objective_name(obj));
          ZbOptStats st;
          auto opt = build_zb_opt(p, m, costs, o, &st);
          ASSERT_TRUE(opt.ok()) << what << ": " << opt.status().to_string();
          ASSERT_TRUE(validate(*opt).ok()) << what;
          EXPECT_EQ(opt->name, "zb-opt");
          EXPECT_LE(peak(*opt, costs, o), limit + 1e-9) << what;
          const Sim so = run(*opt, costs);
          const double v = obj == ZbObjective::kMakespan ? so.makespan : so.span;
          EXPECT_NEAR(v, st.optimum, 1e-9) << what;
          auto greedy = build_auto_schedule("zb-auto", p, m, costs, o);
          ASSERT_TRUE(greedy.ok()) << greedy.status().to_string();
          const Sim sg = run(*greedy, costs);
          EXPECT_LE(v, (obj == ZbObjective::kMakespan ? sg.makespan : sg.span) + 1e-9) << what;
          if (limit == p) {
            ZbAutoOptions o1 = o;
            o1.memory_limit.reset();
            auto one_p = build_auto_schedule("zb-1p", p, m, costs, o1);
            ASSERT_TRUE(one_p.ok());
            const Sim s1 = run(*one_p, costs);
            EXPECT_LE(v, (obj == ZbObjective::kMakespan ? s1.makespan : s1.span) + 1e-9) << what;
          }
          LowerBoundOptions lo;
          lo.memory_limit = limit;
          lo.w_memory_fractions = zb_w_memory_fractions(costs, o);
          auto lb = lower_bound(*opt, costs, lo);
          ASSERT_TRUE(lb.ok());
          EXPECT_LE(obj == ZbObjective::kMakespan ? lb->makespan : lb->span, v + 1e-9) << what;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 20 / testutil::kCaseStride);
}

// At F = I = W and no comm, ZB-H1 is optimal at memory p: zb-opt finds its makespan, which is
// the lower bound 3m + p - 1.
TEST(ZbOpt, UniformCostsMeetTheBound) {
  for (int32_t p : {2, 3, 4}) {
    for (int32_t m : {p, kZbOptMaxMicrobatches}) {
      UniformCosts u;
      const CostModel c = uniform_cost_model(u, p, p);
      auto opt = build_auto_schedule("zb-opt", p, m, c, {});
      ASSERT_TRUE(opt.ok()) << opt.status().to_string();
      EXPECT_NEAR(run(*opt, c).makespan, 3.0 * m + p - 1, 1e-9) << p << " " << m;
    }
  }
}

TEST(ZbOpt, RefusesLargerShapesNamingTheLimit) {
  UniformCosts u;
  auto r = build_auto_schedule("zb-opt", kZbOptMaxRanks + 1, 4,
                               uniform_cost_model(u, kZbOptMaxRanks + 1, kZbOptMaxRanks + 1), {});
  ASSERT_FALSE(r.ok());
  const std::string msg(r.status().message());
  EXPECT_NE(msg.find(fmt::format("at most --pp {} and --microbatches {}", kZbOptMaxRanks,
                                 kZbOptMaxMicrobatches)),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  EXPECT_TRUE(is_auto_schedule_name("ZB-OPT"));
  EXPECT_EQ(auto_schedule_chunks("zb-opt"), 1);
}

}  // namespace
}  // namespace tightpipe
