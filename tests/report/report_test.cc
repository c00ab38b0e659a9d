// The bubble report: idle causes on hand-built and emulated timelines with known injected delays
// (slow link, slow loader), bad run directories, the Chrome trace of a real run, the CLI.
#include "tightpipe/report.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "run.h"
#include "sanitizer.h"
#include "tightpipe/base.h"
#include "tightpipe/trainer.h"
#include "tiny_train.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
constexpr double kMs = 1e-3;

double cause(const StepBreakdown& s, IdleCause c) { return s.cause_ratio[static_cast<int>(c)]; }

TimelineEvent ev(const std::string& name, EventKind kind, Lane lane, double t0, double t1) {
  TimelineEvent e;
  auto a = parse_action(name);
  if (a.ok()) {
    e.stage = a->stage;
    e.microbatch = a->microbatch;
  }
  e.name = name;
  e.kind = kind;
  e.lane = lane;
  e.start = t0;
  e.end = t1;
  return e;
}

// An empty timeline of ranks 0..n-1, for hand-built events.
Timeline ranks_timeline(int32_t n) {
  Timeline tl;
  tl.ranks.resize(n);
  for (int32_t r = 0; r < n; ++r) tl.ranks[r].rank = r;
  return tl;
}

// GPipe p = 2, m = 1, F = 4, B = 8, link 3 (ms): every cause at a known place.
TEST(BreakdownTest, HandBuiltTimelineGetsEveryCauseRight) {
  Timeline tl = ranks_timeline(2);
  auto& r0 = tl.ranks[0].events;
  auto& r1 = tl.ranks[1].events;
  r0.push_back(ev("data", EventKind::kData, Lane::kData, 0, 1));
  r0.push_back(ev("0F0", EventKind::kForward, Lane::kCompute, 1, 5));
  r0.push_back(ev("0SEND_F0", EventKind::kSend, Lane::kComm, 5, 8));
  r0.push_back(ev("0RECV_B0", EventKind::kRecv, Lane::kComm, 5, 23));
  r0.push_back(ev("0B0", EventKind::kBackward, Lane::kCompute, 23, 31));
  r0.push_back(ev("optimizer", EventKind::kOptimizer, Lane::kCompute, 31, 32));
  r1.push_back(ev("1RECV_F0", EventKind::kRecv, Lane::kComm, 0, 8));
  r1.push_back(ev("1F0", EventKind::kForward, Lane::kCompute, 8, 12));
  r1.push_back(ev("1B0", EventKind::kBackward, Lane::kCompute, 12, 20));
  r1.push_back(ev("1SEND_B0", EventKind::kSend, Lane::kComm, 20, 23));
  r1.push_back(ev("optimizer", EventKind::kOptimizer, Lane::kCompute, 20, 32));
  auto s = breakdown_step(tl, 2, 0);
  EXPECT_DOUBLE_EQ(s.step_time, 32);
  const auto& a = s.ranks[0];
  EXPECT_DOUBLE_EQ(a.busy[0], 4);
  EXPECT_DOUBLE_EQ(a.busy[3], 8);
  EXPECT_DOUBLE_EQ(a.busy[4], 1);  // optimizer past the sync point (31)
  EXPECT_DOUBLE_EQ(a.idle[static_cast<int>(IdleCause::kData)], 1);
  EXPECT_DOUBLE_EQ(a.idle[static_cast<int>(IdleCause::kDependency)], 15);  // 5..20
  EXPECT_DOUBLE_EQ(a.idle[static_cast<int>(IdleCause::kExposedComm)], 3);  // 20..23
  EXPECT_DOUBLE_EQ(a.idle_total(), 19);
  const auto& b = s.ranks[1];
  EXPECT_DOUBLE_EQ(b.idle[static_cast<int>(IdleCause::kFill)], 5);         // 0..5
  EXPECT_DOUBLE_EQ(b.idle[static_cast<int>(IdleCause::kExposedComm)], 3);  // 5..8
  EXPECT_DOUBLE_EQ(b.idle[static_cast<int>(IdleCause::kDrain)], 11);       // 20..31
  EXPECT_DOUBLE_EQ(b.busy[4], 1);
  EXPECT_NEAR(s.bubble_ratio, (19.0 + 19.0) / 64, 1e-12);
  EXPECT_NEAR(cause(s, IdleCause::kExposedComm), 6.0 / 64, 1e-12);
  // The span measure (prof.h span_bubble): rank 0 spans [1, 31], rank 1 [8, 20], 12 busy each.
  EXPECT_DOUBLE_EQ(s.span.max_span, 30);
  EXPECT_DOUBLE_EQ(s.span.span[1], 12);
  EXPECT_DOUBLE_EQ(s.span.ratio, 1 - 24.0 / 60);
  // A missing peer: the wait cannot be split and is "other"; the rank is marked missing.
  Timeline only0;
  only0.ranks = {tl.ranks[0]};
  auto m = breakdown_step(only0, 2, 0);
  EXPECT_FALSE(m.ranks[1].present);
  EXPECT_DOUBLE_EQ(m.ranks[0].idle[static_cast<int>(IdleCause::kOther)], 18);
}

// Issue 19: the optimizer waiting on the data-parallel all-reduce is "exposed all-reduce", one
// more idle cause that the causes still sum to. Rank 0: F [0,2], B [6,10], all-reduce [10,13],
// optimizer [13,15]; rank 1: F [2,4], B [4,8], all-reduce [8,11], optimizer [11,15]. T = 15,
// sync = 13. Rank 0 idles [2,6] (no message events: other) and [10,13] (exposed all-reduce);
// rank 1 [0,2] (fill), [8,11] (exposed all-reduce), [11,13] (drain: waits for rank 0).
TEST(BreakdownTest, ExposedAllReduceIsTheOptimizersWaitOnTheReduction) {
  Timeline tl = ranks_timeline(2);
  auto& r0 = tl.ranks[0].events;
  auto& r1 = tl.ranks[1].events;
  r0.push_back(ev("0F0", EventKind::kForward, Lane::kCompute, 0, 2));
  r0.push_back(ev("0B0", EventKind::kBackward, Lane::kCompute, 6, 10));
  r0.push_back(ev("optimizer", EventKind::kOptimizer, Lane::kCompute, 13, 15));
  r0.push_back(ev("0ALLREDUCE", EventKind::kAllReduce, Lane::kAllReduce, 10, 13));
  r1.push_back(ev("1F0", EventKind::kForward, Lane::kCompute, 2, 4));
  r1.push_back(ev("1B0", EventKind::kBackward, Lane::kCompute, 4, 8));
  r1.push_back(ev("optimizer", EventKind::kOptimizer, Lane::kCompute, 11, 15));
  r1.push_back(ev("1ALLREDUCE", EventKind::kAllReduce, Lane::kAllReduce, 8, 11));
  constexpr int kAr = static_cast<int>(IdleCause::kExposedAllReduce);
  auto s = breakdown_step(tl, 2, 0);
  EXPECT_DOUBLE_EQ(s.step_time, 15);
  EXPECT_DOUBLE_EQ(s.ranks[0].idle[kAr], 3);
  EXPECT_DOUBLE_EQ(s.ranks[0].idle[static_cast<int>(IdleCause::kOther)], 4);
  EXPECT_DOUBLE_EQ(s.ranks[1].idle[kAr], 3);
  EXPECT_DOUBLE_EQ(s.ranks[1].idle[static_cast<int>(IdleCause::kFill)], 2);
  EXPECT_DOUBLE_EQ(s.ranks[1].idle[static_cast<int>(IdleCause::kDrain)], 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_DOUBLE_EQ(s.ranks[r].idle_total(), 7) << r;  // T - 6 compute - 2 optimizer after sync
    EXPECT_DOUBLE_EQ(s.ranks[r].idle_total(), s.bubble.idle[r]) << r;
    EXPECT_DOUBLE_EQ(s.ranks[r].idle[kAr], exposed_allreduce(tl.ranks[r].events)) << r;
  }
  EXPECT_NEAR(cause(s, IdleCause::kExposedAllReduce), 6.0 / 30, 1e-12);
  EXPECT_NEAR(s.bubble_ratio, 14.0 / 30, 1e-12);
  EXPECT_EQ(idle_cause_name(IdleCause::kExposedAllReduce), "exposed all-reduce");
  // Overlapped with compute (rank 1 reduces during [5, 7] of a B that ends at 8): hidden, and
  // its [8, 11] wait becomes drain.
  r1.back().start = 5;
  r1.back().end = 7;
  s = breakdown_step(tl, 2, 0);
  EXPECT_DOUBLE_EQ(s.ranks[1].idle[kAr], 0);
  EXPECT_DOUBLE_EQ(s.ranks[1].idle[static_cast<int>(IdleCause::kDrain)], 5);
  EXPECT_DOUBLE_EQ(s.ranks[1].idle_total(), 7);
}

TEST(BreakdownTest, SpreadAndWarmup) {
  auto s = spread_of({5, 1, 3, 2, 4});
  EXPECT_DOUBLE_EQ(s.median, 3);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 5);
  std::vector<StepBreakdown> steps(4);
  for (int k = 0; k < 4; ++k) {
    steps[k].step = k;
    steps[k].step_time = k == 0 ? 100 : 10 + k;
    steps[k].ranks.resize(1);
  }
  auto sum = summarize_steps(steps, 1);
  EXPECT_EQ(sum.warmup_steps, std::vector<int32_t>{0});
  EXPECT_EQ(sum.steps.size(), 3u);
  EXPECT_DOUBLE_EQ(sum.step_time.median, 12);
}

TEST(WhatIfTest, Parse) {
  auto w = parse_what_if("zb-h1, zb-v,interleaved:2");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->size(), 3u);
  EXPECT_EQ((*w)[2].name, "interleaved");
  EXPECT_EQ((*w)[2].chunks, 2);
  EXPECT_FALSE(parse_what_if("nope").ok());
  EXPECT_FALSE(parse_what_if("interleaved:x").ok());
  EXPECT_NE(parse_what_if("nope").status().message().find("nope"), std::string::npos);
  // The auto names (built from the run's costs) and the auto layer split.
  w = parse_what_if("ZB-V-Auto@auto,zb-1p,zb-v@auto");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->size(), 3u);
  EXPECT_EQ((*w)[0].name, "zb-v-auto");
  EXPECT_TRUE((*w)[0].auto_layout);
  EXPECT_EQ((*w)[0].label(), "zb-v-auto@auto");
  EXPECT_FALSE((*w)[1].auto_layout);
  EXPECT_EQ((*w)[2].name, "zb-v");
  EXPECT_NE(parse_what_if("zb-v@even").status().message().find("@even"), std::string::npos);
  EXPECT_FALSE(parse_what_if(" , ").ok());
}

TrainOptions emulated(const std::string& out, const std::string& schedule, int pp, int m) {
  TrainOptions o = testutil::tiny_train_options(out, schedule, pp, m);
  o.exec.emulated = true;
  o.exec.costs = EmulatedCompute::parse("f=4,b=8").value();
  return o;
}

// GPipe p = 2, m = 4, F = 4 ms, B = 8 ms, 3 ms per message. Closed form (ms): rank 1 waits 4 for
// 0F0 to finish (fill) and 3 for it to cross the link (exposed); rank 0 waits 15 for 1B0 (from 16
// to 31: dependency) and 3 for its gradient to cross (exposed); rank 1 drains 11. Step 66.
// Sleeps and the link's delay never end early, so the program ends no earlier than 66 ms, measured
// and predicted; the prediction (from the run's costs and its link) has the 6 ms of exposed
// communication; the measured run has more of it than the same run without the link. How close
// each measured cause comes to the closed form is emulated_accuracy_bench's figure.
TEST(ReportAttributionTest, SlowLinkIsExposedCommunication) {
  const std::string out = testutil::make_temp_dir("tp-rep-link");
  TrainOptions o = emulated(out, "gpipe", 2, 4);
  o.world.link = parse_link_options("latency_us=3000").value();
  auto s = run_training(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto rep = build_report(out);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  const auto& sm = rep->summary;
  // The program ends at 66 ms at the earliest; the optimizer's all-reduce crosses the slow link
  // too (busy).
  const StepBreakdown* shown = rep->shown();
  ASSERT_NE(shown, nullptr);
  const double program_end = std::max(shown->ranks[0].last_compute, shown->ranks[1].last_compute);
  EXPECT_GE(program_end, 65 * kMs);
  for (const StepBreakdown& st : rep->steps) {
    if (std::find(sm.steps.begin(), sm.steps.end(), st.step) == sm.steps.end()) continue;
    const double PT = 2 * st.step_time;
    // Per step only the identity: the causes sum to the idle time. How much of it is exposed
    // communication depends on when each rank thread got a core (a receiver that was itself
    // late finds its message already there; seen: 3.7 of the closed form's 6 ms under load), so
    // the closed form is emulated_accuracy_bench's comparison, not a bound here.
    for (size_t r = 0; r < st.ranks.size(); ++r)
      EXPECT_NEAR(st.ranks[r].idle_total(), st.bubble.idle[r], 1e-12 * st.step_time) << st.step;
    std::printf(
        "slow link step %d: T %.2f ms, exposed %.2f%% (closed form %.2f%%), dependency %.2f%% "
        "(%.2f%%), fill %.2f%% (%.2f%%), drain %.2f%% (%.2f%%), other %.2f%%\n",
        st.step, st.step_time / kMs, 100 * cause(st, IdleCause::kExposedComm), 100 * 6 * kMs / PT,
        100 * cause(st, IdleCause::kDependency), 100 * 15 * kMs / PT,
        100 * cause(st, IdleCause::kFill), 100 * 4 * kMs / PT, 100 * cause(st, IdleCause::kDrain),
        100 * 11 * kMs / PT, 100 * cause(st, IdleCause::kOther));
  }
  // The prediction (costs.json carries the link) explains the same run: its program ends no
  // earlier than the closed form's 66 ms, and its exposed communication is the two messages'.
  ASSERT_TRUE(rep->has_prediction) << rep->prediction_error;
  EXPECT_GE(std::max(rep->predicted_breakdown.ranks[0].last_compute,
                     rep->predicted_breakdown.ranks[1].last_compute),
            65.9 * kMs);
  EXPECT_GE(rep->predicted_breakdown.cause_ratio[static_cast<int>(IdleCause::kExposedComm)] *
                (2 * rep->predicted.makespan),
            5.9 * kMs);
  // Without the slow link the same run has less exposed communication (the closed form: 6 ms
  // against none): the cause follows the link, not the schedule.
  const std::string out2 = testutil::make_temp_dir("tp-rep-nolink");
  o = emulated(out2, "gpipe", 2, 4);
  ASSERT_TRUE(run_training(o).ok());
  auto rep2 = build_report(out2);
  ASSERT_TRUE(rep2.ok()) << rep2.status().to_string();
  double exposed2 = 0;
  for (int r = 0; r < 2; ++r)
    exposed2 += rep2->summary.rank_idle[r][static_cast<int>(IdleCause::kExposedComm)];
  std::printf("no link: exposed communication %.3f ms per step (both ranks)\n", exposed2 / kMs);
  double exposed = 0;
  for (int r = 0; r < 2; ++r) exposed += sm.rank_idle[r][static_cast<int>(IdleCause::kExposedComm)];
  EXPECT_LT(exposed2, exposed);
}

// 1F1B p = 4, m = 8 with a 3 ms link: measured and predicted idle both split into every cause
// of the one definition, and the link shows as exposed communication in both. Their agreement
// cause by cause is emulated_accuracy_bench's figure (docs/plan.md "Predicted against measured").
TEST(ReportAttributionTest, SlowLinkMatchesTheSimulatorCauseByCause) {
  const std::string out = testutil::make_temp_dir("tp-rep-link4");
  TrainOptions o = emulated(out, "1f1b", 4, 8);
  o.world.link = parse_link_options("latency_us=3000").value();
  ASSERT_TRUE(run_training(o).ok());
  auto rep = build_report(out);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  ASSERT_TRUE(rep->has_prediction) << rep->prediction_error;
  const auto& sm = rep->summary;
  const double PT = 4 * sm.step_time.median;
  double predicted_idle = 0;
  for (int c = 0; c < kNumIdleCauses; ++c) {
    double measured = 0, predicted = 0;
    for (int r = 0; r < 4; ++r) {
      measured += sm.rank_idle[r][c];
      predicted += rep->predicted_breakdown.ranks[r].idle[c];
    }
    predicted_idle += predicted;
    std::printf("1f1b slow link: %-16s measured %6.2f%% predicted %6.2f%%\n",
                std::string(idle_cause_name(static_cast<IdleCause>(c))).c_str(),
                100 * measured / PT, 100 * predicted / PT);
  }
  // The predicted causes sum to the predicted bubble (one definition for both sides).
  EXPECT_NEAR(predicted_idle / (4 * rep->predicted.makespan), rep->predicted.bubble_ratio, 1e-9);
  // The first activation crosses three 3 ms links before rank 3 can start: >= 9 ms exposed in the
  // prediction; some on the measured side.
  double measured_exposed = 0, predicted_exposed = 0;
  for (int r = 0; r < 4; ++r) {
    measured_exposed += sm.rank_idle[r][static_cast<int>(IdleCause::kExposedComm)];
    predicted_exposed +=
        rep->predicted_breakdown.ranks[r].idle[static_cast<int>(IdleCause::kExposedComm)];
  }
  EXPECT_GT(measured_exposed, 0);  // how much: a receiver's own lateness hides part of it
  EXPECT_GE(predicted_exposed, 8.9 * kMs);
}

// 1F1B p = 4, m = 8; the loader sleeps 5 ms per microbatch on the first and the last rank: 2 x 8
// x 5 ms of data wait per step. Sleeps never end early, but a step's first fetch may begin before
// the step's window does (seen: 78.5 of 80 ms inside it, in a quiet run), so the test holds 7 of
// the 8 fetches per rank and step as the lower bound; how close it comes is
// emulated_accuracy_bench's figure.
TEST(ReportAttributionTest, SlowLoaderIsDataWait) {
  const std::string out = testutil::make_temp_dir("tp-rep-data");
  TrainOptions o = emulated(out, "1f1b", 4, 8);
  o.data_delay_ms = 5;
  auto s = run_training(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ReportOptions ro;
  ro.what_if = parse_what_if("zb-h1,zb-v,interleaved:2,1f1b,zb-auto,zb-1p@auto").value();
  auto rep = build_report(out, ro);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  const auto& sm = rep->summary;
  // The causes of every rank sum to its idle time of the one bubble definition, every step.
  for (const StepBreakdown& st : rep->steps) {
    double idle = 0;
    for (size_t r = 0; r < st.ranks.size(); ++r) {
      EXPECT_NEAR(st.ranks[r].idle_total(), st.bubble.idle[r], 1e-12 * st.step_time)
          << "step " << st.step << " rank " << r;
      idle += st.ranks[r].idle_total();
    }
    EXPECT_NEAR(idle / (4 * st.step_time), st.bubble_ratio, 1e-12) << "step " << st.step;
  }
  for (const StepBreakdown& st : rep->steps) {
    if (std::find(sm.steps.begin(), sm.steps.end(), st.step) == sm.steps.end()) continue;
    const double expected = 2 * 8 * 5 * kMs / (4 * st.step_time);
    EXPECT_GE(cause(st, IdleCause::kData), expected * 7 / 8) << "step " << st.step;
    std::printf(
        "slow loader step %d: T %.2f ms, data wait %.2f%% (closed form %.2f%%), other %.2f%%\n",
        st.step, st.step_time / kMs, 100 * cause(st, IdleCause::kData), 100 * expected,
        100 * cause(st, IdleCause::kOther));
  }
  // Per rank: only the first and the last rank wait for data, 35 ms or more each (7 of their 8
  // fetches); the middle ranks load nothing.
  const int kData = static_cast<int>(IdleCause::kData);
  EXPECT_GE(sm.rank_idle[0][kData], 35 * kMs);
  EXPECT_GE(sm.rank_idle[3][kData], 35 * kMs);
  EXPECT_LT(sm.rank_idle[1][kData], sm.rank_idle[0][kData] / 10);
  EXPECT_LT(sm.rank_idle[2][kData], sm.rank_idle[3][kData] / 10);
  // The prediction has no loader: the data wait is named as the gap's largest contributor.
  ASSERT_TRUE(rep->has_prediction) << rep->prediction_error;
  bool named = false;
  for (const auto& g : rep->gap_contributors) {
    std::printf("gap contributor: %s\n", g.text.c_str());
    if (g.category == "data wait" && (g.rank == 0 || g.rank == 3)) {
      named = true;
      EXPECT_GE(g.delta, 35 * kMs) << g.text;
    }
  }
  EXPECT_TRUE(named) << "the loader's 40 ms per rank is not among the gap's contributors";
  // What-if: every schedule simulated; zb-h1 does not lose to 1f1b.
  ASSERT_EQ(rep->what_ifs.size(), 6u);
  for (const auto& w : rep->what_ifs) {
    EXPECT_TRUE(w.error.empty()) << w.label << ": " << w.error;
    EXPECT_GT(w.makespan, 0) << w.label;
    // Each candidate next to its shape's lower bound (lower_bound.h), which it never beats.
    EXPECT_GT(w.lower_bound, 0) << w.label;
    EXPECT_GE(w.makespan, w.lower_bound * (1 - 1e-9)) << w.label;
    EXPECT_GE(w.max_span, w.lower_bound_span * (1 - 1e-9)) << w.label;
  }
  EXPECT_GE(rep->what_ifs[0].step_saving, -1e-9);
  EXPECT_EQ(rep->what_ifs[1].chunks, 2);
  // The run's own schedule on its own split is the run's prediction (the layer-kind fit
  // reproduces every stage); zb-auto, built from those costs, never loses to zb-h1.
  EXPECT_NEAR(rep->what_ifs[3].makespan, rep->predicted.makespan, 1e-9 * rep->predicted.makespan);
  EXPECT_LE(rep->what_ifs[4].makespan, rep->what_ifs[0].makespan * (1 + 1e-12));
  EXPECT_EQ(rep->what_ifs[5].label, "zb-1p@auto");
  EXPECT_EQ(rep->what_ifs[5].chunks, 1);
  // Each candidate is costed on a layer split it names: zb-h1 on the run's own.
  ASSERT_FALSE(rep->run.layout.empty());
  EXPECT_EQ(rep->what_ifs[0].layout, rep->run.layout);
  for (const auto& w : rep->what_ifs) EXPECT_FALSE(w.layout.empty()) << w.label;
  const std::string text = format_report_text(*rep);
  EXPECT_NE(text.find("data wait"), std::string::npos) << text;
  EXPECT_NE(text.find("what-if"), std::string::npos) << text;
  EXPECT_NE(text.find("vs bound"), std::string::npos) << text;
  EXPECT_NE(text.find("span bubble: measured"), std::string::npos) << text;
  // report.json: both measures, and which one bubble_ratio is.
  auto j = nlohmann::json::parse(report_json(*rep));
  EXPECT_EQ(j["bubble_measure"], "makespan");
  EXPECT_EQ(j["measured_bubble_ratio"].get<double>(), sm.bubble_ratio.median);
  EXPECT_EQ(j["measured_span_bubble_ratio"].get<double>(), sm.span_bubble_ratio.median);
  EXPECT_GT(j["measured_max_span_s"].get<double>(), 0);
  EXPECT_EQ(j["predicted_span_bubble_ratio"].get<double>(), rep->predicted.span_bubble_ratio);
  EXPECT_GT(j["predicted_max_span"].get<double>(), 0);
  EXPECT_EQ(j["measured_span_bubble_ratio_per_rank"].size(), 4u);
  EXPECT_TRUE(j["per_rank"][0].contains("measured_span_bubble_ratio"));
  EXPECT_TRUE(j["per_rank"][0].contains("predicted_span_bubble_ratio"));
  EXPECT_TRUE(j["what_if"][0].contains("predicted_span_bubble_ratio"));
  EXPECT_GE(rep->predicted.span_bubble_ratio, 0);
  EXPECT_LT(rep->predicted.span_bubble_ratio, 1);
  std::printf("%s", text.c_str());
}

// ----- bad input ---------------------------------------------------------------------------------

class BadRunDirTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    base_ = new std::string(testutil::make_temp_dir("tp-rep-base"));
    TrainOptions o = emulated(*base_, "1f1b", 2, 4);
    o.train_iters = 3;
    auto s = run_training(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
  }
  std::string copy() {
    const std::string d = testutil::make_temp_dir("tp-rep-bad");
    fs::copy(*base_, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return d;
  }
  static std::string* base_;
};
std::string* BadRunDirTest::base_ = nullptr;

bool has_warning(const Report& r, const std::string& needle) {
  for (const auto& w : r.run.warnings)
    if (w.find(needle) != std::string::npos) return true;
  return false;
}

TEST_F(BadRunDirTest, MissingDirectoryNamesIt) {
  auto r = build_report("/nonexistent/run-dir");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/run-dir"), std::string::npos);
  const std::string empty = testutil::make_temp_dir("tp-rep-empty");
  r = build_report(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("timeline_rank0.jsonl"), std::string::npos)
      << r.status().message();
}

TEST_F(BadRunDirTest, MissingRankIsReported) {
  const std::string d = copy();
  fs::remove(d + "/timeline_rank1.jsonl");
  auto r = build_report(d);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->run.rank_present[1]);
  EXPECT_TRUE(has_warning(*r, "timeline_rank1.jsonl"));
  const std::string text = format_report_text(*r);
  EXPECT_NE(text.find("MISSING RANKS: 1"), std::string::npos) << text;
  EXPECT_NE(report_html(*r).find("missing"), std::string::npos);
  EXPECT_TRUE(write_report(*r, d + "/out").ok());
}

TEST_F(BadRunDirTest, TruncatedTimelineKeepsCompleteSteps) {
  const std::string d = copy();
  const std::string p = d + "/timeline_rank0.jsonl";
  std::string text = read_file(p).value();
  const size_t cut = text.find('\n', text.size() * 2 / 3) + 20;  // mid-line
  ASSERT_TRUE(write_file(p, text.substr(0, cut)).ok());
  auto r = build_report(d);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(has_warning(*r, "timeline_rank0.jsonl:")) << format_report_text(*r);
  EXPECT_TRUE(has_warning(*r, "incomplete"));
  EXPECT_TRUE(r->run.rank_present[0]);
  EXPECT_LT(r->steps.size(), 3u);
  EXPECT_GE(r->steps.size(), 1u);
}

TEST_F(BadRunDirTest, CorruptTimelineMarksRankMissingWithTheLine) {
  const std::string d = copy();
  const std::string p = d + "/timeline_rank1.jsonl";
  std::string text = read_file(p).value();
  text.insert(text.find('\n') + 1, "{not json\n");
  ASSERT_TRUE(write_file(p, text).ok());
  auto r = build_report(d);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->run.rank_present[1]);
  EXPECT_TRUE(has_warning(*r, "timeline_rank1.jsonl:2")) << format_report_text(*r);
}

// Issue 13's crashes: a time of 1e999 (an uncaught out_of_range before) and "pp": 1000000000
// (bad_alloc before) are warnings naming the file and the value.
TEST_F(BadRunDirTest, OverflowingNumbersAreWarnings) {
  const std::string d = copy();
  const std::string p = d + "/timeline_rank1.jsonl";
  std::string text = read_file(p).value();
  const size_t end = text.find("\"end\":");
  ASSERT_NE(end, std::string::npos);
  text.replace(end, 7, "\"end\":1e999,\"x\":");
  ASSERT_TRUE(write_file(p, text).ok());
  std::string summary = read_file(d + "/summary.json").value();
  const size_t pp = summary.find("\"pp\": 2");
  ASSERT_NE(pp, std::string::npos);
  summary.replace(pp, 7, "\"pp\": 1000000000");
  ASSERT_TRUE(write_file(d + "/summary.json", summary).ok());
  auto r = build_report(d);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(has_warning(*r, "timeline_rank1.jsonl:1")) << format_report_text(*r);
  EXPECT_TRUE(has_warning(*r, "\"pp\" 1000000000")) << format_report_text(*r);
  EXPECT_EQ(r->run.num_ranks, 2);  // from the timeline files
}

// A count that is not a whole number (1e300 was undefined behaviour, 2.5 read as 2; found by
// fuzz_run_dir under UBSan) makes summary.json a warning; the ranks come from the timelines.
TEST_F(BadRunDirTest, NonIntegerSummaryCountIsAWarning) {
  for (const char* bad : {"\"pp\": 1e300", "\"pp\": 2.5"}) {
    const std::string d = copy();
    std::string summary = read_file(d + "/summary.json").value();
    const size_t pp = summary.find("\"pp\": 2");
    ASSERT_NE(pp, std::string::npos);
    summary.replace(pp, 7, bad);
    ASSERT_TRUE(write_file(d + "/summary.json", summary).ok());
    auto r = build_report(d);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_TRUE(has_warning(*r, "summary.json: bad field")) << bad << format_report_text(*r);
    EXPECT_EQ(r->run.num_ranks, 2);
  }
}

TEST_F(BadRunDirTest, AllRanksUnreadableIsAnErrorNamingTheFiles) {
  const std::string d = copy();
  ASSERT_TRUE(write_file(d + "/timeline_rank0.jsonl", "garbage\nmore\n").ok());
  ASSERT_TRUE(write_file(d + "/timeline_rank1.jsonl", "").ok());
  auto r = build_report(d);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("timeline_rank0.jsonl:1"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("timeline_rank1.jsonl"), std::string::npos);
}

TEST_F(BadRunDirTest, CorruptOrMissingSideFilesAreWarnings) {
  const std::string d = copy();
  ASSERT_TRUE(write_file(d + "/summary.json", "{\"pp\": 2, ").ok());
  ASSERT_TRUE(write_file(d + "/costs.json", "[1,2").ok());
  fs::remove(d + "/metrics.jsonl");
  auto r = build_report(d);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(has_warning(*r, "summary.json"));
  EXPECT_TRUE(has_warning(*r, "costs.json"));
  EXPECT_TRUE(has_warning(*r, "metrics.jsonl"));
  EXPECT_EQ(r->run.num_ranks, 2);
  // costs come from the timelines instead; the prediction still runs.
  EXPECT_TRUE(r->has_prediction) << r->prediction_error;
  fs::remove(d + "/schedule.csv");
  r = build_report(d);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->has_prediction);
  EXPECT_NE(format_report_text(*r).find("no prediction"), std::string::npos);
  EXPECT_FALSE(report_html(*r).empty());
}

TEST_F(BadRunDirTest, Cli) {
  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built";
  auto r = testutil::run_command(tp + " report /nonexistent/run");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/run"), std::string::npos) << r.err;
  r = testutil::run_command(tp + " report " + *base_ + " --what-if nope");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  const std::string out = testutil::make_temp_dir("tp-rep-cli");
  r = testutil::run_command(tp + " report " + *base_ + " --out " + out +
                            " --what-if zb-h1,zb-v,interleaved:2");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("bubble"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("interleaved:2"), std::string::npos) << r.out;
  for (const char* f : {"report.html", "report-trace.json", "report-costs.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  // report-costs.json is accepted by `simulate --costs`.
  r = testutil::run_command(tp + " simulate --schedule 1f1b --pp 2 --num-microbatches 4 --costs " +
                            out + "/report-costs.json");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

// ----- Chrome trace of a real run
// ------------------------------------------------------------------

TEST(ReportTraceTest, RealRunTraceHasOneProcessPerRank) {
  const std::string out = testutil::make_temp_dir("tp-rep-real");
  TrainOptions o = emulated(out, "1f1b", 2, 4);
  o.exec.emulated = false;
  o.train_iters = 3;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  auto s = run_training(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto rep = build_report(out);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  ASSERT_TRUE(write_report(*rep, out + "/report").ok());
  auto j = nlohmann::json::parse(read_file(out + "/report/report-trace.json").value());
  ASSERT_TRUE(j.contains("traceEvents") && j["traceEvents"].is_array());
  std::set<int> pids, named;
  size_t complete = 0;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid")) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++complete;
      EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e.contains("tid") &&
                  e.contains("name"))
          << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0);
      pids.insert(e["pid"].get<int>());
    } else if (ph == "M" && e["name"] == "process_name") {
      named.insert(e["pid"].get<int>());
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(named, pids);
  EXPECT_GT(complete, 3u * 2 * 4);
  // Real compute holds activations: measured and predicted memory are both there.
  ASSERT_EQ(rep->run.measured_peak_act_bytes.size(), 2u);
  EXPECT_GT(rep->run.measured_peak_act_bytes[0], 0);
  ASSERT_TRUE(rep->has_prediction) << rep->prediction_error;
  EXPECT_GT(rep->predicted.ranks[0].peak_activation_bytes, 0);
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// report --what-if --engine zb: the what-if runs post-validated, so it is priced at its
// steady-state step (below the synchronous makespan for zb-h2) and names the zb profile;
// --engine megatron refuses a zero-bubble what-if naming it.
TEST(WhatIfTest, EngineProfilePricesPostValidationAndNamesItself) {
  const std::string out = testutil::make_temp_dir("tp-rep-engine");
  TrainOptions o = testutil::tiny_train_options(out, "zb-h2", 2, 4);
  o.train_iters = 3;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  auto run = run_training(o);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  ReportOptions sync, zb, megatron;
  sync.what_if = zb.what_if = megatron.what_if = parse_what_if("zb-h2,1f1b").value();
  zb.engine = Engine::kZb;
  megatron.engine = Engine::kMegatron;
  auto a = build_report(out, sync), b = build_report(out, zb), c = build_report(out, megatron);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const WhatIfResult &s = a->what_ifs[0], &v = b->what_ifs[0];
  ASSERT_TRUE(s.error.empty() && v.error.empty()) << s.error << v.error;
  // With the measured costs, back-to-back steps never take longer than one step from a common
  // start. They may take exactly as long: when the last stage is the heavier one (the stages are
  // tiny and timed on a shared machine, so which one is heavier varies) the first stage's start
  // of the next iteration waits on its own previous end, the whole critical path again.
  EXPECT_LE(v.makespan, s.makespan * (1 + 1e-9));
  EXPECT_NE(v.engine_profile.find("zb: "), std::string::npos) << v.engine_profile;
  EXPECT_NE(s.engine_profile.find("tightpipe: "), std::string::npos) << s.engine_profile;
  // The run's costs.json carries each stage's parameter, gradient and AdamW bytes: the
  // post-validated what-if keeps a copy of them, the synchronous one none.
  EXPECT_EQ(s.kept_copy_bytes, 0);
  EXPECT_GT(v.kept_copy_bytes, 0);
  const std::string text = format_report_text(*b);
  EXPECT_NE(text.find("its kept copy adds"), std::string::npos) << text;
  EXPECT_NE(c->what_ifs[0].error.find("Megatron-LM does not run schedule"), std::string::npos)
      << c->what_ifs[0].error;
  EXPECT_TRUE(c->what_ifs[1].error.empty()) << c->what_ifs[1].error;

  // The same run with balanced stages (its costs.json rewritten: every stage F = I = W = 1 ms):
  // zb-h2's steady-state step fills its warm-up and cool-down, so post-validated it is priced
  // strictly below the synchronous makespan.
  auto costs = nlohmann::json::parse(read_file(out + "/costs.json").value());
  for (auto& st : costs["stages"]) {
    st["f"] = st["i"] = st["w"] = st["recompute"] = 1e-3;
    st["b"] = 2e-3;
    st["optimizer"] = 1e-4;
  }
  ASSERT_TRUE(write_file(out + "/costs.json", costs.dump()).ok());
  auto balanced_sync = build_report(out, sync), balanced_zb = build_report(out, zb);
  ASSERT_TRUE(balanced_sync.ok() && balanced_zb.ok());
  const WhatIfResult &bs = balanced_sync->what_ifs[0], &bv = balanced_zb->what_ifs[0];
  ASSERT_TRUE(bs.error.empty() && bv.error.empty()) << bs.error << bv.error;
  EXPECT_LT(bv.makespan, bs.makespan * 0.95) << bv.makespan << " vs " << bs.makespan;
  EXPECT_GT(bv.kept_copy_bytes, 0);
}

}  // namespace
}  // namespace tightpipe
