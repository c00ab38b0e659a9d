// The zero-bubble paper's Table 4 (measured throughput of ZB-2p over 1F1B, Megatron-LM on A100s)
// at p = 16 and 32: which part of the model made our prediction miss, checked per setting
// (docs/cost_model.md, "Table 4"). Inputs: the paper's own profiled T_F, T_B, T_W, T_comm and
// memory model per setting (testutil/zb_paper_settings.h); nothing here is fitted to a throughput.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "sanitizer.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "zb_paper_settings.h"

namespace tightpipe {
namespace {

// The step's period of `compute_only` under `engine`: the steady state's (post-validated runs
// start each step at their own end) or, synchronous, the makespan.
double period(const Schedule& compute_only, const CostModel& c, Engine engine, bool steady) {
  auto low = lower(compute_only);
  EXPECT_TRUE(low.ok()) << low.status().to_string();
  if (!low.ok()) return 0;
  SimOptions o;
  o.engine = engine;
  o.record_timeline = false;
  if (steady) {
    auto ss = steady_state_step_time(*low, c, o);
    EXPECT_TRUE(ss.ok()) << ss.status().to_string();
    return ss.ok() ? ss->step_time : 0;
  }
  auto r = simulate(*low, c, o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->makespan : 0;
}
double steady_step(const Schedule& s, const CostModel& c, Engine e) {
  return period(s, c, e, true);
}
double makespan(const Schedule& s, const CostModel& c, Engine e) { return period(s, c, e, false); }

// The miss was the automatic schedule at 2p, built for the wrong quantity: post-validated (the
// paper's ZB-2p runs with optimizer post-validation) each rank starts its next step at its own
// end, so the period is the largest per-stage span, and a schedule built to shorten the makespan
// wastes that freedom. Per setting at p = 16 and 32: the default objective under `--engine zb` is
// the span, and the schedule built for it steps no slower than the one built for the makespan,
// at the paper's memory (2p, I keeping 32h of 34h + 5as).
TEST(Table4, PostValidatedZb2pIsBuiltForTheSpan) {
  EXPECT_EQ(zb_objective_for(optimizer_post_validated(Engine::kZb, false)), ZbObjective::kSpan);
  EXPECT_EQ(zb_objective_for(optimizer_post_validated(Engine::kMegatron, true)),
            ZbObjective::kMakespan);
  EXPECT_EQ(zb_objective_for(optimizer_post_validated(Engine::kTightpipe, true)),
            ZbObjective::kSpan);
  int k = 0;
  for (const auto& row : testutil::zb_paper_settings()) {
    if (row.p < 16 || row.zb2p < 0) continue;
    if (k++ % testutil::kSweepStride != 0) continue;
    SCOPED_TRACE(fmt::format("{} p={} m={}", row.model, row.p, row.m));
    auto [c, o] = testutil::zb_paper_problem(row, "zb-2p");
    o.objective = zb_objective_for(optimizer_post_validated(Engine::kZb, false));
    auto span_built = build_auto_schedule("zb-2p", row.p, row.m, c, o);
    ASSERT_TRUE(span_built.ok()) << span_built.status().to_string();
    o.objective = ZbObjective::kMakespan;
    auto makespan_built = build_auto_schedule("zb-2p", row.p, row.m, c, o);
    ASSERT_TRUE(makespan_built.ok()) << makespan_built.status().to_string();
    const double span_step = steady_step(*span_built, c, Engine::kZb);
    const double makespan_step = steady_step(*makespan_built, c, Engine::kZb);
    EXPECT_LE(span_step, makespan_step * (1 + 1e-9)) << span_step << " " << makespan_step;
    // ... and reaches the paper's own ZB-2p bubble: the period within the published rate of the
    // compute (T_F + T_B + T_W per microbatch on every rank).
    const double compute = row.m * (row.f + row.b + row.w);
    EXPECT_LE(span_step, compute / (1 - row.zb2p) * (1 + 5e-4)) << span_step << " " << compute;
  }
}

// The one measured ratio the issue quotes (28.3B, p = 32, m = 96: ZB-2p 1.30x over 1F1B). ZB-2p
// as above under `--engine zb` (post-validated period), 1F1B under `--engine megatron` (its
// batched p2p calls and synchronous optimizer), both from the paper's profiled costs: within 5%.
// The makespan-built zb-2p with `--cost`'s memory default (I frees nothing) predicted 1.22x (-6%).
TEST(Table4, Zb2pOver1F1BAtP32M96WithinFivePercentOfThePapers) {
  const testutil::ZbPaperSetting* row = nullptr;
  for (const auto& s : testutil::zb_paper_settings()) {
    if (s.p == 32 && s.m == 96 && s.zb2p >= 0) row = &s;
  }
  ASSERT_NE(row, nullptr);
  auto [c, o] = testutil::zb_paper_problem(*row, "zb-2p");
  o.objective = zb_objective_for(optimizer_post_validated(Engine::kZb, false));
  auto zb2p = build_auto_schedule("zb-2p", row->p, row->m, c, o);
  ASSERT_TRUE(zb2p.ok()) << zb2p.status().to_string();
  auto one_f_one_b = generate_schedule("1f1b", {.ranks = row->p, .microbatches = row->m});
  ASSERT_TRUE(one_f_one_b.ok());
  const double ratio =
      makespan(*one_f_one_b, c, Engine::kMegatron) / steady_step(*zb2p, c, Engine::kZb);
  constexpr double kMeasured = 1.30;
  EXPECT_LE(std::abs(ratio / kMeasured - 1), 0.05) << ratio;
}

}  // namespace
}  // namespace tightpipe
