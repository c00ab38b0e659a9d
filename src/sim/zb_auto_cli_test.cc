// `tightpipe schedule` and `tightpipe simulate` with zb-auto, zb-1p, zb-2p: runs the built binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "run.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

const std::string kBinary = std::string(TP_BINARY_DIR) + "/tools/tightpipe/tightpipe";

// The CLI run through the shell (testutil/run.h: exit code, stdout, stderr).
using CliRun = testutil::CommandResult;

CliRun run(const std::string& args) { return testutil::run_command(kBinary + " " + args); }

class ZbAutoCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kBinary)) GTEST_SKIP() << "no binary at " << kBinary;
  }
};

TEST_F(ZbAutoCli, ScheduleCsvIsTheLibrarysSchedule) {
  CliRun r =
      run("schedule --schedule zb-auto --pp 4 --microbatches 8 --cost f=1,i=2,w=1,comm=0.3 "
          "--memory-limit 6 --search-budget-ms 60000 --format csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = parse_csv(r.out, "stdout");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  UniformCosts u;
  u.i = 2;
  u.comm = 0.3;
  ZbAutoOptions o;
  o.memory_limit = 6;
  o.search_budget_ms = 60000;  // the search ends at a local optimum long before: deterministic
  auto lib = build_zb_auto(4, 8, uniform_cost_model(u, 4, 4), o);
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ(r.out, to_csv(*lib));
}

// Checks the CLI's schedules with the library's simulator (not the simulate output's format).
TEST_F(ZbAutoCli, SimulateZb1pMatchesZbH1AndZb2pHasNoGaps) {
  CliRun r = run("simulate --schedule zb-1p --pp 4 --microbatches 8 --cost f=1,i=1,w=1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("zb-1p"), std::string::npos) << r.out;
  r = run("schedule --schedule zb-1p --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --format csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto one = parse_csv(r.out, "stdout");
  ASSERT_TRUE(one.ok());
  auto one_sim = simulate(*one, uniform_cost_model(UniformCosts{}, 4, 4));
  ASSERT_TRUE(one_sim.ok());
  EXPECT_DOUBLE_EQ(one_sim->makespan, 27);  // ZB-H1's, REFERENCE.md section 2
  r =
      run("schedule --schedule zb-2p --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --objective span "
          "--format csv");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = parse_csv(r.out, "stdout");
  ASSERT_TRUE(s.ok());
  for (double peak : zb_peak_memory_units(*s, std::vector<double>(4, 1.0))) EXPECT_LE(peak, 8);
  auto sim = simulate(*s, uniform_cost_model(UniformCosts{}, 4, 4));
  ASSERT_TRUE(sim.ok());
  for (const RankSimStats& rs : sim->ranks) EXPECT_DOUBLE_EQ(rs.internal_idle, 0);
}

TEST_F(ZbAutoCli, CostTableFile) {
  const std::string costs = testutil::make_temp_dir("tp_zb_cli") + "/costs.json";
  ASSERT_TRUE(write_file(costs, R"({"stages": [
    {"stage": 0, "f": 1.0, "i": 1.5, "w": 0.7, "act_bytes": 10, "act_after_i_bytes": 5},
    {"stage": 1, "f": 1.2, "i": 1.1, "w": 0.9, "act_bytes": 10, "act_after_i_bytes": 5},
    {"stage": 2, "f": 0.8, "i": 1.9, "w": 0.4, "act_bytes": 10, "act_after_i_bytes": 5}]})")
                  .ok());
  CliRun r = run("simulate --schedule zb-auto --pp 3 --microbatches 6 --costs " + costs +
                 " --memory-limit 2.5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("zb-auto"), std::string::npos) << r.out;
  r = run("schedule --schedule zb-auto --pp 4 --microbatches 6 --costs " + costs);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("has 3 stage(s)"), std::string::npos) << r.err;
}

TEST_F(ZbAutoCli, BadInputIsOneLineWithAHint) {
  const std::string base = "schedule --schedule zb-auto --pp 4 --microbatches 8 ";
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--memory-limit 0.5", "--memory-limit 0.5: below 1"},
           {"--memory-limit -2", "--memory-limit -2: below 1"},
           {"--memory-limit inf", "--memory-limit inf: not a finite number"},
           {"--w-memory-fraction -0.5", "--w-memory-fraction -0.5"},
           {"--w-memory-fraction nan", "--w-memory-fraction nan"},
           {"--w-memory-fraction 2", "--w-memory-fraction 2"},
           {"--objective fastest", "--objective 'fastest'"},
           {"--vpp 2", "--vpp 2"},
           {"--search-budget-ms -1", "--search-budget-ms -1: must be a finite number"},
           {"--search-budget-ms nan", "--search-budget-ms nan"},
           {"--search-budget-ms inf", "--search-budget-ms inf"},
           {"--search-budget-ms 60001", "--search-budget-ms 60001: must be"},
       }) {
    SCOPED_TRACE(args);
    CliRun r = run(base + args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  CliRun r = run("simulate --schedule zb-2p --pp 4 --memory-limit 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'zb-2p' implies 8"), std::string::npos) << r.err;
  r = run("simulate --schedule 1f1b --pp 4 --memory-limit 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--memory-limit: only zb-auto"), std::string::npos) << r.err;
  r = run("schedule --schedule zb-h1 --pp 4 --search-budget-ms 10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--search-budget-ms: only zb-auto"), std::string::npos) << r.err;
}

TEST_F(ZbAutoCli, ZbVAutoCsvPassesCheckAndIsTheLibrarysSchedule) {
  const std::string csv = testutil::make_temp_dir("tp_zbv_cli") + "/zbv.csv";
  CliRun r =
      run("schedule --schedule zb-v-auto --pp 3 --microbatches 6 "
          "--cost f=1,i=2,w=1,comm=0.2 --memory-limit 4 --objective span --format csv "
          "--out " +
          csv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run("schedule --check " + csv);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("valid schedule, 3 ranks, 6 stages, 6 microbatches"), std::string::npos)
      << r.out;
  auto text = read_file(csv);
  ASSERT_TRUE(text.ok());
  UniformCosts u;
  u.i = 2;
  u.comm = 0.2;
  ZbAutoOptions o;
  o.memory_limit = 4;
  o.objective = ZbObjective::kSpan;
  // --cost is whole-rank: per chunk the times halve (uniform_cost_model with 2p stages).
  auto lib = build_zb_v_auto(3, 6, uniform_cost_model(u, 3, 6), o);
  ASSERT_TRUE(lib.ok());
  EXPECT_EQ(*text, to_csv(*lib));
  r = run("simulate --schedule zb-v-auto --pp 3 --microbatches 6 --cost f=1,i=1,w=1 --vpp 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("zb-v-auto"), std::string::npos) << r.out;
}

TEST_F(ZbAutoCli, ZbVAutoBadInput) {
  const std::string costs = testutil::make_temp_dir("tp_zbv_cli") + "/costs.json";
  ASSERT_TRUE(write_file(costs, R"({"stages": [
    {"stage": 0, "f": 1.0, "i": 1.5, "w": 0.7},
    {"stage": 1, "f": 1.2, "i": 1.1, "w": 0.9},
    {"stage": 2, "f": 0.8, "i": 1.9, "w": 0.4}]})")
                  .ok());
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--pp 3 --costs " + costs, "has 3 stage(s)"},
           {"--pp 3 --vpp 3", "--vpp 3: schedule 'zb-v-auto' runs exactly 2 chunks"},
           {"--pp 3 --vpp 1", "--vpp 1"},
           {"--pp 3 --memory-limit 0.5", "--memory-limit 0.5: below 1"},
       }) {
    SCOPED_TRACE(args);
    CliRun r = run("schedule --schedule zb-v-auto --microbatches 6 " + args);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// Post-validated runs build the automatic schedules for the span (zb_objective_for): `--engine
// zb` without --objective prints what `--objective span` prints, and differs from
// `--objective makespan` at the zero-bubble paper's 28.3B p = 32 m = 96 costs (docs/cost_model.md,
// "Table 4": period 2899.39 against 3045.98). Synchronous engines keep the makespan.
TEST_F(ZbAutoCli, PostValidatedRunsBuildForTheSpan) {
  const std::string base =
      "simulate --schedule zb-2p --pp 32 --microbatches 96 --cost "
      "f=10.419,i=10.207,w=7.715,comm=0.408 ";
  CliRun dflt = run(base + "--engine zb");
  CliRun span = run(base + "--engine zb --objective span");
  CliRun mk = run(base + "--engine zb --objective makespan");
  ASSERT_EQ(dflt.exit_code, 0) << dflt.err;
  ASSERT_EQ(span.exit_code, 0) << span.err;
  ASSERT_EQ(mk.exit_code, 0) << mk.err;
  EXPECT_EQ(dflt.out, span.out);
  EXPECT_NE(dflt.out, mk.out);
  CliRun pv = run(base + "--optimizer-post-validation");
  CliRun pv_span = run(base + "--optimizer-post-validation --objective span");
  EXPECT_EQ(pv.out, pv_span.out);
  CliRun sync = run(base);
  CliRun sync_mk = run(base + "--objective makespan");
  EXPECT_EQ(sync.out, sync_mk.out);
}

}  // namespace
}  // namespace tightpipe
