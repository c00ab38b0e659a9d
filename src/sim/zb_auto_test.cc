#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

CostModel uniform(int32_t p, double comm = 0) {
  UniformCosts u;
  u.comm = comm;
  return uniform_cost_model(u, p, p);
}

ZbAutoOptions opts(std::optional<double> limit, std::optional<double> frac = {},
                   ZbObjective objective = ZbObjective::kMakespan) {
  ZbAutoOptions o;
  o.memory_limit = limit;
  o.w_memory_fraction = frac;
  o.objective = objective;
  return o;
}

struct Sim {
  double makespan = 0;
  double span = 0;
  std::vector<double> peak_bytes;  // per rank
  std::vector<double> internal_idle;
};

Sim run(const Schedule& s, const CostModel& costs) {
  auto low = lower(s);
  EXPECT_TRUE(low.ok()) << low.status().to_string();
  auto r = simulate(*low, costs);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  Sim out;
  out.makespan = r->makespan;
  for (const RankSimStats& rs : r->ranks) {
    out.span = std::max(out.span, rs.last_end - rs.first_start);
    out.peak_bytes.push_back(rs.peak_activation_bytes);
    out.internal_idle.push_back(rs.internal_idle);
  }
  return out;
}

Schedule zb_h1(int32_t p, int32_t m) {
  auto s = generate_schedule("zb-h1", {.ranks = p, .microbatches = m});
  EXPECT_TRUE(s.ok());
  return *s;
}

// Validates, lowers, and round-trips through CSV exactly.
void expect_ordinary(const Schedule& s) {
  EXPECT_EQ(s.name, "zb-auto");
  EXPECT_FALSE(s.lowered);
  ASSERT_TRUE(validate(s).ok()) << validate(s).to_string();
  for (const auto& prog : s.programs) {
    for (const Action& a : prog) EXPECT_NE(a.type, ActionType::kBackward) << to_string(a);
  }
  auto low = lower(s);
  ASSERT_TRUE(low.ok()) << low.status().to_string();
  EXPECT_TRUE(validate(*low).ok());
  auto back = parse_csv(to_csv(s), "zb-auto.csv");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->programs, s.programs);
  EXPECT_EQ(back->stage_to_rank, s.stage_to_rank);
  EXPECT_EQ(to_csv(*back), to_csv(s));
}

TEST(ZbAuto, UniformLimitPHasZbH1Makespan) {
  for (auto [p, m] : {std::pair{4, 8}, {2, 5}, {3, 3}, {4, 12}, {5, 7}}) {
    for (std::optional<double> frac : {std::optional<double>(), std::optional<double>(0.5)}) {
      // from the model (1: I frees nothing), and 0.5
      SCOPED_TRACE(fmt::format("p={} m={} frac={}", p, m, frac.value_or(-1)));
      const CostModel c = uniform(p);
      auto s = build_zb_auto(p, m, c, opts(p, frac));
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      expect_ordinary(*s);
      EXPECT_NEAR(run(*s, c).makespan, run(zb_h1(p, m), c).makespan, 1e-9);
      if (p == 4 && m == 8) {
        EXPECT_NEAR(run(*s, c).makespan, 27, 1e-9);  // REFERENCE.md section 2
      }
    }
  }
}

TEST(ZbAuto, UniformLimit2PHasNoBubbleInsideAnyStage) {
  for (auto [p, m] : {std::pair{4, 8}, {2, 4}, {3, 6}, {4, 13}, {6, 12}}) {
    for (std::optional<double> frac : {std::optional<double>(), std::optional<double>(0.5)}) {
      SCOPED_TRACE(fmt::format("p={} m={} frac={}", p, m, frac.value_or(-1)));
      const CostModel c = uniform(p);
      auto s = build_zb_auto(p, m, c, opts(2.0 * p, frac, ZbObjective::kSpan));
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      expect_ordinary(*s);
      const Sim r = run(*s, c);
      EXPECT_NEAR(r.span, 3.0 * m, 1e-9);
      for (double idle : r.internal_idle) EXPECT_NEAR(idle, 0, 1e-9);
    }
  }
}

// Random uneven per-stage costs, activations of 1 byte per stage so the simulator's peak bytes
// are microbatch units.
CostModel random_costs(Rng& rng, int32_t p, double frac, bool comm) {
  std::vector<StageCost> stages(p);
  for (StageCost& c : stages) {
    c.f = 0.5 + rng.uniform_double() * 1.5;
    c.i = 0.5 + rng.uniform_double() * 2.0;
    c.w = 0.2 + rng.uniform_double() * 1.5;
    c.b = c.i + c.w;
    c.recompute = c.f;
    c.act_bytes = 1;
    c.act_after_i_bytes = frac;
    c.message_bytes = 1;
  }
  LinkCost link{.latency = comm ? rng.uniform_double() * 0.8 : 0, .bandwidth = 0};
  return CostModel(stages, link, "unit", "random", /*real_bytes=*/true);
}

TEST(ZbAuto, RandomCostsNeverWorseThanZbH1NorAtMoreMemory) {
  Rng rng(20261130);
  for (int trial = 0; trial < 24; ++trial) {
    const int32_t p = 2 + static_cast<int32_t>(rng.uniform_double() * 4);   // 2..5
    const int32_t m = 1 + static_cast<int32_t>(rng.uniform_double() * 11);  // 1..11
    const double frac = std::round(rng.uniform_double() * 4) / 4;           // 0, .25, .., 1
    const bool comm = trial % 2 == 1;
    const CostModel c = random_costs(rng, p, frac, comm);
    SCOPED_TRACE(
        fmt::format("trial {} p={} m={} frac={} comm={}", trial, p, m, frac, c.link().latency));
    const Sim h1 = run(zb_h1(p, m), c);
    double previous = std::numeric_limits<double>::infinity();
    for (int32_t limit = 1; limit <= 2 * p + 1; ++limit) {
      auto s = build_zb_auto(p, m, c, opts(limit));
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      expect_ordinary(*s);
      const Sim r = run(*s, c);
      for (double peak : r.peak_bytes) EXPECT_LE(peak, limit + 1e-9) << "limit " << limit;
      for (double peak : zb_peak_memory_units(*s, zb_w_memory_fractions(c, {}))) {
        EXPECT_LE(peak, limit + 1e-9);
      }
      if (limit >= p) {
        EXPECT_LE(r.makespan, h1.makespan + 1e-9) << "limit " << limit;
      }
      EXPECT_LE(r.makespan, previous + 1e-9) << "limit " << limit;
      previous = r.makespan;
    }
    // The span objective is monotone too.
    double prev_span = std::numeric_limits<double>::infinity();
    for (int32_t limit = p; limit <= 2 * p; limit += p) {
      auto s = build_zb_auto(p, m, c, opts(limit, {}, ZbObjective::kSpan));
      ASSERT_TRUE(s.ok());
      const double span = run(*s, c).span;
      EXPECT_LE(span, prev_span + 1e-9);
      prev_span = span;
    }
  }
}

TEST(ZbAuto, ExplicitFractionBoundsTheSimulatorsPeak) {
  // The fraction given overrides the table's; with act_after_i = fraction they agree.
  Rng rng(7);
  const CostModel c = random_costs(rng, 4, 0.25, true);
  auto s = build_zb_auto(4, 10, c, opts(3, 0.25));
  ASSERT_TRUE(s.ok());
  for (double peak : run(*s, c).peak_bytes) EXPECT_LE(peak, 3 + 1e-9);
}

TEST(ZbAuto, LimitOneRunsEachMicrobatchThrough) {
  const CostModel c = uniform(3);
  auto s = build_zb_auto(3, 4, c, opts(1));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  expect_ordinary(*s);
  for (double peak : run(*s, c).peak_bytes) EXPECT_LE(peak, 1 + 1e-9);
}

TEST(ZbAuto, BadInputIsOneLineNamingTheFlag) {
  const CostModel c = uniform(4);
  auto expect_error = [&](const Status& st, std::string_view flag) {
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(flag), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("hint:"), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  };
  for (double bad : {0.5, 0.0, -3.0}) {
    auto low = build_zb_auto(4, 8, c, opts(bad));
    expect_error(low.status(), fmt::format("--memory-limit {}", bad));
    EXPECT_NE(low.status().message().find("below 1"), std::string::npos);
  }
  expect_error(build_zb_auto(4, 8, c, opts(std::nan(""))).status(), "--memory-limit");
  expect_error(build_zb_auto(4, 8, c, opts({}, std::nan(""))).status(), "--w-memory-fraction");
  expect_error(build_zb_auto(4, 8, c, opts({}, std::numeric_limits<double>::infinity())).status(),
               "--w-memory-fraction");
  expect_error(build_zb_auto(4, 8, c, opts({}, 1.5)).status(), "--w-memory-fraction 1.5");
  expect_error(build_zb_auto(4, 8, c, opts({}, -0.1)).status(), "--w-memory-fraction -0.1");
  expect_error(parse_zb_objective("fastest").status(), "--objective 'fastest'");
  expect_error(build_zb_auto(4, 0, c).status(), "--microbatches 0");
  expect_error(build_zb_auto(3, 8, c).status(), "4 stage(s)");
  EXPECT_EQ(*parse_zb_objective("Span"), ZbObjective::kSpan);
}

TEST(ZbAuto, Names) {
  EXPECT_TRUE(is_zb_auto_name("zb-auto"));
  EXPECT_TRUE(is_zb_auto_name("ZB-1P"));
  EXPECT_TRUE(is_zb_auto_name("zb-2p"));
  EXPECT_FALSE(is_zb_auto_name("zb-h1"));
  EXPECT_EQ(zb_auto_name_memory_limit("zb-1p", 4), 4);
  EXPECT_EQ(zb_auto_name_memory_limit("zb-2p", 4), 8);
  EXPECT_EQ(zb_auto_name_memory_limit("zb-auto", 4), 0);
}

}  // namespace
}  // namespace tightpipe
