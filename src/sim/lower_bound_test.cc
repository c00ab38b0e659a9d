// lower_bound(): no schedule the project builds ever simulates below it (seeded random shapes,
// uneven costs, comm on and off, blocking and overlap, memory limits), and its terms on the
// shapes where they are exact.
#include "tightpipe/lower_bound.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "sanitizer.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

constexpr double kRel = 1e-9;  // float sums in another order

struct Checked {
  int64_t schedules = 0;
  double tightest = 1e300;  // smallest makespan gap seen
  bool engines = false;     // also under every other engine that runs the schedule
  int64_t engine_runs = 0;
};

// Simulates `s` (lowered) and checks it against lower_bound_for (its own memory) and against
// lower_bound at a larger limit (which can only be lower).
void check_one(const Schedule& s, const CostModel& costs, const SimOptions& so,
               const std::string& what, Checked& c) {
  auto low = lower(s);
  ASSERT_TRUE(low.ok()) << what << ": " << low.status().to_string();
  auto r = simulate(*low, costs, so);
  ASSERT_TRUE(r.ok()) << what << ": " << r.status().to_string();
  auto lb = lower_bound_for(s, costs, so);
  ASSERT_TRUE(lb.ok()) << what << ": " << lb.status().to_string();
  EXPECT_GE(r->makespan, lb->makespan * (1 - kRel) - 1e-12)
      << what << ": makespan beats the bound (" << lb->makespan_term << ")";
  EXPECT_GE(r->max_span, lb->span * (1 - kRel) - 1e-12)
      << what << ": span beats the bound (" << lb->span_term << ")";
  LowerBoundOptions free;
  free.sim = so;
  auto lb_free = lower_bound(s, costs, free);
  ASSERT_TRUE(lb_free.ok()) << lb_free.status().to_string();
  EXPECT_LE(lb_free->makespan, lb->makespan * (1 + kRel) + 1e-12) << what;
  EXPECT_LE(lb_free->span, lb->span * (1 + kRel) + 1e-12) << what;
  free.fast = true;
  auto lb_fast = lower_bound(s, costs, free);
  ASSERT_TRUE(lb_fast.ok());
  EXPECT_LE(lb_fast->makespan, lb_free->makespan * (1 + kRel) + 1e-12) << what;
  // What simulate, schedule and report print beside the makespan passes the same check there.
  SimResult printed = *r;
  EXPECT_TRUE(attach_lower_bound(printed, *lb, what).ok()) << what;
  // Issue 45: the engines' profiles change the messages and the optimizer; their bound (the
  // profile's comm mode and optimizer) holds for their makespan too.
  for (Engine e : {Engine::kTorch, Engine::kZb, Engine::kMegatron, Engine::kMegatronOverlap,
                   Engine::kDeepSpeed}) {
    if (!c.engines || so.comm_mode != CommMode::kOverlap) break;
    SimOptions eo = so;
    eo.engine = e;
    auto er = simulate(*low, costs, eo);
    if (!er.ok()) continue;  // an engine that does not run this schedule (one line, tested)
    auto elb = lower_bound_for(s, costs, eo);
    ASSERT_TRUE(elb.ok()) << what << " " << engine_name(e) << ": " << elb.status().to_string();
    EXPECT_TRUE(check_lower_bound(er->makespan, elb->makespan, what).ok())
        << what << " --engine " << engine_name(e) << ": makespan " << er->makespan
        << " beats the bound " << elb->makespan;
    ++c.engine_runs;
  }
  ++c.schedules;
  c.tightest = std::min(c.tightest, lower_bound_gap(r->makespan, lb->makespan));
}

// One drawn shape (p ranks, m microbatches; comm, costs and overheads drawn from `rng`): every
// generator that takes it, then the automatic schedules, greedy alone and with the default search
// (kZbDefaultSearchEvaluations per start) unless `search` says no, at several limits.
void check_shape(Rng& rng, int trial, int32_t p, int32_t m, bool search, Checked& c) {
  const double latency = rng.below(2) ? 0.6 : 0.0;
  const double act_after_i = rng.below(2) ? 0.5 : 1.0;
  SimOptions so;
  so.record_timeline = false;
  so.comm_mode = rng.below(4) == 0 ? CommMode::kBlocking : CommMode::kOverlap;
  const double overhead = rng.below(4) == 0 ? 0.05 : 0.0;
  for (const GeneratorInfo& g : schedule_generators()) {
    for (int32_t v : {1, 2, 3}) {
      if (g.fixed_chunks != 0 && v != g.fixed_chunks) continue;
      if (g.fixed_chunks == 0 && !g.takes_chunks && v != 1) continue;
      auto s = generate_schedule(g.name, {.ranks = p, .microbatches = m, .chunks = v});
      if (!s.ok()) continue;
      Rng crng = rng.fork(static_cast<uint64_t>(trial * 100 + v));
      CostModel costs = random_cost_model(crng, s->num_stages, act_after_i, latency);
      if (overhead > 0) {
        std::vector<StageCost> st;
        for (int32_t k = 0; k < costs.num_stages(); ++k) st.push_back(costs.stage(k));
        costs = CostModel(st, {costs.link().latency, 0, overhead}, "unit", "random");
      }
      SimOptions one = so;
      if (s->directions > 1 || g.name == "dualpipev") one.overlap_fb_factor = 0.5;
      check_one(*s, costs, one,
                fmt::format("trial {} {} p={} v={} m={} {}", trial, g.name, p, v, m,
                            comm_mode_name(so.comm_mode)),
                c);
    }
  }
  // The automatic schedules are built for (and scored in) overlap mode.
  if (so.comm_mode == CommMode::kBlocking) return;
  for (const char* name : {"zb-auto", "zb-1p", "zb-2p", "zb-v-auto", "v-half", "v-min"}) {
    const int32_t chunks = auto_schedule_chunks(name);
    Rng crng = rng.fork(static_cast<uint64_t>(trial * 100 + 50 + chunks));
    const CostModel costs = random_cost_model(crng, chunks * p, act_after_i, latency);
    for (bool searched : {false, true}) {
      if (searched && !search) continue;
      ZbAutoOptions o;
      if (std::string(name) == "zb-auto") o.memory_limit = 1 + static_cast<double>(rng.below(p));
      if (!searched) o.search_budget_ms = 0;
      auto s = build_auto_schedule(name, p, m, costs, o);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      check_one(*s, costs, so,
                fmt::format("trial {} {} p={} m={} search={}", trial, name, p, m, searched), c);
    }
  }
  // The exact optimum where it is defined: the bound is below the best schedule too.
  if (search && p <= kZbOptMaxRanks && m <= kZbOptMaxMicrobatches && p * m <= 12) {
    Rng crng = rng.fork(static_cast<uint64_t>(trial * 100 + 99));
    const CostModel costs = random_cost_model(crng, p, act_after_i, latency);
    auto s = build_zb_opt(p, m, costs);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    check_one(*s, costs, so, fmt::format("trial {} zb-opt p={} m={}", trial, p, m), c);
  }
}

TEST(LowerBoundProperty, NoScheduleBeatsTheBound) {
  Rng rng(20261202);
  Checked c;
  c.engines = true;
  const int shapes = testutil::kBuiltWithSanitizer ? 10 : 30;
  for (int trial = 0; trial < shapes; ++trial) {
    const int32_t p = 1 + static_cast<int32_t>(rng.below(6));
    const int32_t m = 1 + static_cast<int32_t>(rng.below(4 * p + 4));
    check_shape(rng, trial, p, m, /*search=*/p * m <= 64, c);
  }
  EXPECT_GT(c.schedules, shapes * 8);
  EXPECT_GT(c.engine_runs, c.schedules);
  // Some schedule meets its bound (1f1b with p = 1, zb-h1 at uniform costs ...): the test can
  // tell a tight bound from a loose one.
  EXPECT_LT(c.tightest, 0.02);
}

// The same at scale: a few drawn shapes up to p = 32, m = 128 (every third under the
// sanitizers), every generator and the automatic schedules, greedy and searched with the
// default evaluation budget (the search is most of the time: about 7 s for the five draws at
// -O1 on a 2-core machine, the largest p = 26, m = 93 about 3 s).
TEST(LowerBoundProperty, NoScheduleBeatsTheBoundAtScale) {
  constexpr int32_t kMaxP = 32, kMaxM = 128;
  // zb-v-auto's 2p stages x m of the largest draw are within what build_auto_schedule takes.
  static_assert(int64_t{2} * kMaxP * kMaxM <= kMaxAutoStageMicrobatches);
  constexpr int kDraws = 5;
  Rng rng(20261203);
  Checked c;
  int drawn = 0;
  for (int trial = 0; trial < kDraws; ++trial) {
    const int32_t p = 8 + static_cast<int32_t>(rng.below(kMaxP - 8 + 1));
    const int32_t m = p + static_cast<int32_t>(rng.below(kMaxM - p + 1));
    Rng shape_rng = rng.fork(static_cast<uint64_t>(trial));
    if (trial % testutil::kSweepStride != 0) continue;
    check_shape(shape_rng, trial, p, m, /*search=*/true, c);
    ++drawn;
  }
  EXPECT_GT(c.schedules, drawn * 8);
}

CostModel uniform(int32_t p, int32_t stages, double comm = 0) {  // F = I = W = 1
  UniformCosts u;
  u.comm = comm;
  return uniform_cost_model(u, p, stages);
}

Schedule gen(const std::string& name, int32_t p, int32_t m, int32_t v = 1) {
  auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = v});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return *s;
}

double makespan(const Schedule& s, const CostModel& c, const SimOptions& so = {}) {
  auto r = simulate(*lower(s), c, so);
  EXPECT_TRUE(r.ok());
  return r->makespan;
}

// At F = I = W = 1 and no comm the last rank cannot start before (p - 1) F and then has 3m of
// work: 3m + p - 1, which ZB-H1 meets (its bubble is all on the other ranks' spans). At ZB-H1's
// memory (p) the span bound rises to its span (the forced W before F), and ZB-H2's zero span
// bubble meets the span bound 3m at its memory.
TEST(LowerBound, TightWhereTheSchedulesAreOptimal) {
  for (int32_t p : {1, 2, 4, 8}) {
    for (int32_t m : {2 * p, 3 * p}) {
      const CostModel c = uniform(p, p);
      const Schedule h1 = gen("zb-h1", p, m);
      auto lb = lower_bound(h1, c);
      ASSERT_TRUE(lb.ok());
      EXPECT_DOUBLE_EQ(lb->rank_work[0], 3.0 * m);
      EXPECT_NEAR(lb->makespan, 3.0 * m + p - 1, 1e-9) << p << " " << m;
      EXPECT_EQ(lb->makespan_term, p == 1 ? "work" : "chains");
      auto r = simulate(*lower(h1), c);
      ASSERT_TRUE(r.ok());
      EXPECT_NEAR(r->makespan, lb->makespan, 1e-9);
      auto at_memory = lower_bound_for(h1, c, {});
      ASSERT_TRUE(at_memory.ok());
      EXPECT_DOUBLE_EQ(at_memory->memory_limit, p);
      EXPECT_NEAR(at_memory->span, r->max_span, 1e-9) << p << " " << m;
      EXPECT_EQ(at_memory->span_term, p == 1 ? "work" : "memory");
      if (p < 2) continue;
      const Schedule h2 = gen("zb-h2", p, m);
      auto r2 = simulate(*lower(h2), c);
      auto lb2 = lower_bound_for(h2, c, {});
      ASSERT_TRUE(r2.ok() && lb2.ok());
      EXPECT_NEAR(lb2->span, 3.0 * m, 1e-9);
      EXPECT_NEAR(r2->max_span, lb2->span, 1e-9);
    }
  }
}

// A memory limit of 1 forces every rank to free its one activation before its next F: the
// pipeline runs one microbatch at a time, m x (p (F + I) + W) or so; the bound must rise.
TEST(LowerBound, MemoryLimitForcesFrees) {
  const int32_t p = 4, m = 8;
  const CostModel c = uniform(p, p);
  const Schedule shape = gen("1f1b", p, m);
  LowerBoundOptions o;
  auto free = lower_bound(shape, c, o);
  ASSERT_TRUE(free.ok());
  o.memory_limit = 1;
  o.w_memory_fractions.assign(p, 0.0);  // I frees everything
  auto tight = lower_bound(shape, c, o);
  ASSERT_TRUE(tight.ok());
  EXPECT_GT(tight->makespan, free->makespan + 1);
  EXPECT_EQ(tight->makespan_term, "memory");
  // One microbatch in flight at a time on rank 0: each next F waits for the round trip
  // p F + p I of the one before: (m - 1)(p F + p I) + p F + p I + W at least.
  EXPECT_GE(tight->makespan, (m - 1) * 2.0 * p + 2.0 * p + 1 - 1e-9);
  o.memory_limit = 0.5;
  auto bad = lower_bound(shape, c, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--memory-limit 0.5"), std::string::npos)
      << bad.status().message();
}

// Comm: each boundary crossed adds its latency to the chains, not to the work.
TEST(LowerBound, MessageTimeOnTheChains) {
  const int32_t p = 4, m = 8;
  const Schedule s = gen("zb-h1", p, m);
  auto none = lower_bound(s, uniform(p, p, 0));
  auto comm = lower_bound(s, uniform(p, p, 0.5));
  ASSERT_TRUE(none.ok() && comm.ok());
  EXPECT_NEAR(comm->makespan - none->makespan, (p - 1) * 0.5, 1e-9);  // the last rank's head
  EXPECT_EQ(comm->rank_work, none->rank_work);
  // Blocking: the sends hold the lanes, so the work grows by them.
  LowerBoundOptions o;
  o.sim.comm_mode = CommMode::kBlocking;
  auto blocking = lower_bound(s, uniform(p, p, 0.5), o);
  ASSERT_TRUE(blocking.ok());
  EXPECT_NEAR(blocking->rank_work[1], 3.0 * m + 2 * m * 0.5, 1e-9);
  EXPECT_LE(blocking->makespan, makespan(s, uniform(p, p, 0.5), o.sim) * (1 + kRel));
}

// The span bound: a single rank's span is its work; ZB-H2-like zero span bubble needs m large.
TEST(LowerBound, SpanAtLeastWork) {
  const int32_t p = 4, m = 16;
  const CostModel c = uniform(p, p);
  auto lb = lower_bound(gen("zb-h2", p, m), c);
  ASSERT_TRUE(lb.ok());
  EXPECT_GE(lb->span, 3.0 * m - 1e-9);
  auto r = simulate(*lower(gen("zb-h2", p, m)), c);
  EXPECT_GE(r->max_span, lb->span - 1e-9);
  // V placement: rank 0 holds the first and the last stage, so its span holds the whole chain.
  const CostModel v = uniform(p, 2 * p);
  auto lv = lower_bound(gen("zb-v", p, m, 2), v);
  ASSERT_TRUE(lv.ok());
  EXPECT_GE(lv->span, 3.0 * m - 1e-9);
}

TEST(LowerBound, PostValidatedOptimizerAddsEachRanksOwn) {
  // ZB-H2 at F = I = W meets the bound (27 at p = 4, m = 8) and its rank 0 ends first (24; rank
  // r ends at 24 + r). With a long optimizer on rank 0 only, post-validated it runs at 24 and the
  // step ends at 34, before the last program end plus the longest optimizer (37): the bound must
  // count each rank's own.
  const int32_t p = 4, m = 8;
  std::vector<StageCost> st(p);
  for (StageCost& c : st) c.optimizer = 0.5;
  st[0].optimizer = 10;
  const CostModel c(st, {0, 100, 0}, "unit", "test");
  for (const char* name : {"zb-h2", "zb-h1", "1f1b"}) {
    SCOPED_TRACE(name);
    const Schedule x = gen(name, p, m);
    for (bool post : {false, true}) {
      LowerBoundOptions o;
      o.sim.optimizer_post_validation = post;
      auto lb = lower_bound(x, c, o);
      auto r = simulate(*lower(x), c, o.sim);
      ASSERT_TRUE(lb.ok() && r.ok());
      EXPECT_GE(r->makespan, lb->makespan - 1e-9) << post;
      if (post && std::string(name) == "zb-h2") {
        EXPECT_DOUBLE_EQ(r->makespan, 34);
      }
    }
  }
}

TEST(LowerBound, DataParallelAndOptimizerAddAfterTheProgram) {
  const int32_t p = 2, m = 4;
  std::vector<StageCost> st(p);
  for (StageCost& c : st) {
    c.grad_bytes = 1000;
    c.optimizer = 3;
  }
  const CostModel c(st, {0, 100, 0}, "unit", "test");
  const Schedule s = gen("1f1b", p, m);
  SimOptions so;
  auto plain = lower_bound(s, c);
  so.data_parallel.size = 2;
  LowerBoundOptions o;
  o.sim = so;
  auto dp = lower_bound(s, c, o);
  ASSERT_TRUE(plain.ok() && dp.ok());
  const double ar = ring_allreduce_time(1000, 2, c.link(), 0);
  EXPECT_NEAR(dp->makespan - plain->makespan, ar, 1e-9);
  auto r = simulate(*lower(s), c, so);
  ASSERT_TRUE(r.ok());
  EXPECT_GE(r->makespan, dp->makespan - 1e-9);
}

// Issue 45: a bound above the makespan beside it is never printed: attach_lower_bound (simulate,
// report) and the schedule and plan summaries refuse it in one line naming both numbers.
TEST(LowerBound, ABoundAboveTheMakespanIsAnError) {
  EXPECT_TRUE(check_lower_bound(27, 27, "makespan").ok());
  EXPECT_TRUE(check_lower_bound(27, 27 * (1 + 1e-12), "makespan").ok());  // float sums
  EXPECT_TRUE(check_lower_bound(0, 0, "makespan").ok());
  const Status st = check_lower_bound(27, 27.5, "makespan of schedule 'x'");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  const std::string m(st.message());
  EXPECT_NE(m.find("the lower bound 27.5 is above the makespan of schedule 'x' 27"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_FALSE(check_lower_bound(27, std::nan(""), "makespan").ok());
  SimResult r;
  r.makespan = r.max_span = 10;
  LowerBound lb;
  lb.makespan = 9;
  lb.span = 11;
  const Status span = attach_lower_bound(r, lb, "x");
  ASSERT_FALSE(span.ok());
  EXPECT_NE(span.message().find("max span of schedule 'x'"), std::string::npos) << span.message();
  EXPECT_FALSE(r.has_lower_bound);
  lb.span = 10;
  ASSERT_TRUE(attach_lower_bound(r, lb, "x").ok());
  EXPECT_TRUE(r.has_lower_bound);
  EXPECT_EQ(r.lower_bound_makespan, 9);
}

TEST(LowerBound, FormatsTheGap) {
  EXPECT_EQ(format_lower_bound(1152.6, 1141.0), "(lower bound 1141: within 1.0%)");
  EXPECT_DOUBLE_EQ(lower_bound_gap(2, 1), 1.0);
  EXPECT_DOUBLE_EQ(lower_bound_gap(2, 0), 0.0);
}

}  // namespace
}  // namespace tightpipe
