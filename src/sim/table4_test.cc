// The zero-bubble paper's Table 4 (measured throughput of ZB-1p, ZB-2p and 1F1B-I over 1F1B,
// Megatron-LM on A100s) at p = 16 and 32: every ratio predicted per setting, and which part of the
// model made earlier predictions miss (docs/cost_model.md, "Table 4"). Inputs: the paper's own
// profiled T_F, T_B, T_W, T_comm and memory model per setting (testutil/zb_paper_settings.h) and
// the model shapes it states; nothing here is fitted to a throughput. The table and the
// prediction are testutil/table4.h's, shared with checks_bench's table4 group.
#include "table4.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "sanitizer.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "zb_paper_settings.h"

namespace tightpipe {
namespace testutil {
// gtest prints a setting by its name, not its bytes (found by argument-dependent lookup).
inline void PrintTo(const Table4Row& t, std::ostream* os) {
  *os << t.model << " p=" << t.p << " m=" << t.m << " v=" << t.v;
}
}  // namespace testutil
namespace {

// The step's period of `compute_only` under `engine` (testutil/table4.h), its error a failure.
double steady_step(const Schedule& s, const CostModel& c, Engine e) {
  auto r = testutil::table4_steady_step(s, c, e);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : 0;
}
double makespan(const Schedule& s, const CostModel& c, Engine e) {
  auto r = testutil::table4_makespan(s, c, e);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : 0;
}

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
    if (k++ % testutil::kCaseStride != 0) continue;
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

// ----- every ratio of Table 4 (REFERENCE.md section 5) -------------------------------------------
//
// ZB-1p, ZB-2p and 1F1B-I over 1F1B at the six settings, predicted from the paper's inputs alone
// by testutil::predict_table4 (testutil/table4.h: the table, the step's costs, the prediction;
// checks_bench prints the same numbers): its profiled T_F, T_B, T_W, T_comm per setting and its
// memory model (zb_paper_settings.h), and the model shapes it states for the step's costs besides
// the pipeline. ZB-1p and ZB-2p post-validated under `--engine zb`, 1F1B and 1F1B-I under
// `--engine megatron`.
using testutil::kTable4Seq;
using testutil::kTable4Vocab;
using testutil::kZbPaperTable4;
using testutil::Table4Compared;
using testutil::Table4Row;

constexpr double kRatioTolerance = 0.05;   // each ratio
constexpr double kMedianTolerance = 0.03;  // the median over the 18

// The setting's prediction, its error a failure (all ratios 0).
testutil::Table4Prediction predict(const Table4Row& t) {
  auto p = testutil::predict_table4(t);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  return p.ok() ? *p : testutil::Table4Prediction{};
}

// The ratio the model still misses by more than 5% (docs/cost_model.md "Table 4", what remains):
// 1F1B-I at 14.6B, p = 16, m = 48, 5.4% high; the measurements put a time per chunk and
// microbatch on Megatron's interleaved runs that the paper's inputs do not hold. Held at its
// current error so that a change that moves it is seen.
struct OpenMiss {
  int32_t p, m;
  const char* ratio;
  double bound;  // the error it must stay under
};
constexpr OpenMiss kOpenMisses[] = {{16, 48, "1F1B-I", 0.06}};

const OpenMiss* open_miss(const Table4Row& t, const Table4Compared& c) {
  for (const OpenMiss& o : kOpenMisses) {
    if (o.p == t.p && o.m == t.m && std::string_view(o.ratio) == c.name) return &o;
  }
  return nullptr;
}

class Table4Setting : public ::testing::TestWithParam<Table4Row> {};

// Each of the setting's three ratios within 5% of the measured one (an open miss within its
// bound, and still outside 5%: inside, drop it from kOpenMisses).
TEST_P(Table4Setting, RatiosOver1F1BWithinFivePercentOfThePapers) {
  const Table4Row& t = GetParam();
  for (const Table4Compared& c : testutil::table4_compared(t, predict(t).full)) {
    SCOPED_TRACE(c.name);
    const std::string what = fmt::format("{} predicted {:.4f} measured {:.4f} error {:+.2f}%",
                                         c.name, c.predicted, c.measured, 100 * c.error());
    if (const OpenMiss* o = open_miss(t, c)) {
      EXPECT_LE(std::abs(c.error()), o->bound) << what;
      EXPECT_GT(std::abs(c.error()), kRatioTolerance)
          << what << ": now within 5%; drop it from kOpenMisses and the docs' open miss";
      continue;
    }
    EXPECT_LE(std::abs(c.error()), kRatioTolerance) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Paper, Table4Setting, ::testing::ValuesIn(kZbPaperTable4),
                         [](const ::testing::TestParamInfo<Table4Row>& info) {
                           std::string model = info.param.model;
                           std::replace(model.begin(), model.end(), '.', 'p');
                           return fmt::format("{}_p{}_m{}", model, info.param.p, info.param.m);
                         });

// The median error over the 18 ratios within 3%; prints the table (docs/cost_model.md copies it),
// with the ratio from the pipeline alone beside it.
TEST(Table4, MedianErrorOverTheEighteenRatiosWithinThreePercent) {
  std::vector<double> errors;
  fmt::print("| model | p | m | ratio | pipeline alone | predicted | measured | error |\n");
  for (const Table4Row& t : kZbPaperTable4) {
    const testutil::Table4Prediction both = predict(t);
    const std::vector<Table4Compared> pipeline = testutil::table4_compared(t, both.pipeline);
    const std::vector<Table4Compared> full = testutil::table4_compared(t, both.full);
    for (size_t k = 0; k < full.size(); ++k) {
      errors.push_back(std::abs(full[k].error()));
      fmt::print("| {} | {} | {} | {} | {:.3f} | {:.3f} | {:.3f} | {:+.1f}% |\n", t.model, t.p, t.m,
                 full[k].name, pipeline[k].predicted, full[k].predicted, full[k].measured,
                 100 * full[k].error());
    }
  }
  ASSERT_EQ(errors.size(), 18u);
  std::sort(errors.begin(), errors.end());
  const double median = (errors[8] + errors[9]) / 2;
  const auto within =
      std::count_if(errors.begin(), errors.end(), [](double e) { return e <= kRatioTolerance; });
  fmt::print("median |error| {:.2f}%, largest {:.2f}%, {} of 18 within 5%\n", 100 * median,
             100 * errors.back(), within);
  EXPECT_LE(median, kMedianTolerance);
}

// The embedding and the loss are inside the profiled costs: the paper's first and last stage hold
// a layer fewer for them (testutil::table4_layout). Costing the ends by their FLOPs instead (the
// embedding free, the head 2sbhV per pass, from gpt_layer_costs) lightens 1F1B's two end stages and
// interleaved's two end chunks alike, and moves 1F1B-I at 14.6B, p = 16, m = 48 away from the
// measured 1.100 (1.1620 to 1.1631): why the table keeps the uniform costs.
TEST(Table4, EndsCostedByTheirFlopsMoveInterleavedAway) {
  const Table4Row& t = kZbPaperTable4[0];
  const testutil::ZbPaperSetting& s = testutil::table4_setting(t);
  GptCostConfig g;
  g.layers = t.layers;
  g.hidden = s.h;
  g.heads = s.a;
  g.seq = kTable4Seq;
  g.vocab = kTable4Vocab;
  g.flops = 1;  // times in FLOPs: only their ratios are used
  const LayerCosts kinds = gpt_layer_costs(g);
  const int32_t per_rank = (t.layers + t.p - 1) / t.p;
  auto by_flops = [&](int32_t chunks) {
    const CostModel uniform = testutil::zb_paper_costs(s, chunks);
    const std::vector<StageLayers> layout = testutil::table4_layout(t.layers, t.p, chunks);
    std::vector<StageCost> stages;
    for (int32_t st = 0; st < uniform.num_stages(); ++st) {
      StageCost c = uniform.stage(st);
      // A stage's share of a rank's per_rank layers, its head counted by its FLOPs.
      auto units = [&](double StageCost::*field) {
        return (layout[st].blocks +
                (layout[st].head ? kinds.head.*field / kinds.block.*field : 0)) /
               (static_cast<double>(per_rank) / chunks);
      };
      c.f *= units(&StageCost::f);
      c.i *= units(&StageCost::i);
      c.w *= units(&StageCost::w);
      c.b = c.i + c.w;
      stages.push_back(c);
    }
    return CostModel(std::move(stages), uniform.link(), uniform.time_unit(), "ends by FLOPs",
                     uniform.real_bytes());
  };
  auto one = generate_schedule("1f1b", {.ranks = t.p, .microbatches = t.m});
  auto il = generate_schedule("interleaved", {.ranks = t.p, .microbatches = t.m, .chunks = t.v});
  ASSERT_TRUE(one.ok() && il.ok());
  auto ratio = [&](const CostModel& c1, const CostModel& cv) {
    return makespan(*one, c1, Engine::kMegatron) / makespan(*il, cv, Engine::kMegatron);
  };
  const double uniform = ratio(testutil::zb_paper_costs(s, 1), testutil::zb_paper_costs(s, t.v));
  const double flops = ratio(by_flops(1), by_flops(t.v));
  EXPECT_NEAR(uniform, 1.1620, 5e-5);
  EXPECT_NEAR(flops, 1.1631, 5e-5);
  EXPECT_GT(flops, uniform);
}

// Part (a) of issue 49, already in the `megatron` profile: Megatron pays interleaved's messages in
// v batched calls per microbatch (one after each forward-backward pair of its steady state,
// send_forward_backward_recv_forward_backward), where its 1F1B pays 2 (send_forward_recv_backward
// after F, send_backward_recv_forward after B); each is a rendezvous the rank waits for before it
// computes again (engine_test.cc holds their order). On rank 8 at 14.6B, p = 16, m = 48: 1F1B
// makes 2m + 2w + 1 calls (w = 7 warm-up forwards: 2 calls between two of a kind, the first
// receive and the last send), interleaved v = 3 makes m v + w + 1 (w = 2 (p - 1 - r) + (v - 1) p
// = 46 warm-up forwards, one step each, as many cool-down backwards).
TEST(Table4, MegatronPaysVCallsPerMicrobatchInterleaved) {
  auto calls_on = [](const Schedule& s, int32_t r) {
    auto calls = megatron_p2p_calls(s);
    EXPECT_TRUE(calls.ok()) << calls.status().to_string();
    if (!calls.ok()) return -1;
    return *std::max_element(calls->call[r].begin(), calls->call[r].end()) + 1;
  };
  constexpr int32_t p = 16, m = 48, v = 3, r = 8;
  auto one = generate_schedule("1f1b", {.ranks = p, .microbatches = m});
  auto il = generate_schedule("interleaved", {.ranks = p, .microbatches = m, .chunks = v});
  ASSERT_TRUE(one.ok() && il.ok());
  EXPECT_EQ(calls_on(*one, r), 2 * m + 2 * (p - 1 - r) + 1);
  const int32_t w = interleaved_warmup_forwards(p, r, v, p, m);
  EXPECT_EQ(w, 46);
  EXPECT_EQ(calls_on(*il, r), m * v + w + 1);
}

// The parts the step's costs hold at 14.6B, p = 16 (docs/cost_model.md "Table 4"): a middle
// rank's 3 layers of 12h^2 + 13h parameters at 54 bytes each over 2.039 TB/s, and the first
// rank's 2 layers with the token and position embeddings plus the tied matrix's all-reduce
// (V / s messages' worth of bytes at T_comm each).
TEST(Table4, StepCostsFromTheShape) {
  const Table4Row& t = kZbPaperTable4[0];
  const CostModel c = testutil::table4_costs(t, 1, true);
  const double layer = 12.0 * 5120 * 5120 + 13.0 * 5120;
  const double per_byte = 54 / (kA100Sxm80GbHbmBytesPerSecond / 1000);
  EXPECT_NEAR(c.stage(1).optimizer, 3 * layer * per_byte, 1e-9);
  EXPECT_NEAR(c.stage(1).optimizer, 25.0, 0.1);  // ms
  const double tied =
      static_cast<double>(kTable4Vocab) / kTable4Seq * testutil::table4_setting(t).c;
  EXPECT_NEAR(c.stage(0).optimizer,
              (2 * layer + (kTable4Vocab + kTable4Seq) * 5120.0) * per_byte + tied, 1e-9);
  EXPECT_NEAR(c.stage(15).optimizer, (2 * layer + kTable4Vocab * 5120.0) * per_byte + tied, 1e-9);
  // 48 chunks of one layer (v = 3): the ends hold the embedding and the head alone.
  const std::vector<StageLayers> v3 = testutil::table4_layout(46, 16, 3);
  EXPECT_EQ(v3.front().blocks, 0);
  EXPECT_EQ(v3.back().blocks, 0);
  EXPECT_EQ(v3[1].blocks, 1);
}

}  // namespace
}  // namespace tightpipe
