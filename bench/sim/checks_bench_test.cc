// The benches' verdict rule (bench/verdict.h) and checks_bench's smoke test: the table's shape on
// its cheap group (reference: the simulator on uniform costs, milliseconds), and its exit codes
// on plan_check_bench --json files written here: a noisy calibration gives COULD NOT JUDGE (exit
// 3), never PASS; a quiet one with an error beyond the tolerance FAIL (exit 1). Nothing here is
// timed: the plan "runs" are numbers this test writes.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run.h"
#include "tightpipe/base.h"
#include "verdict.h"

namespace tightpipe {
namespace {

using bench::Verdict;

TEST(BenchVerdict, NoiseAboveTheToleranceIsNeverAPass) {
  // Computed figures (noise 0): the error alone.
  EXPECT_EQ(bench::judge(0.049, 0.05, 0.0), Verdict::kPass);
  EXPECT_EQ(bench::judge(-0.05, 0.05, 0.0), Verdict::kPass);
  EXPECT_EQ(bench::judge(0.051, 0.05, 0.0), Verdict::kFail);
  EXPECT_EQ(bench::judge(-0.2, 0.05, 0.0), Verdict::kFail);
  // Measured: judged while the identical runs' spread is within the tolerance...
  EXPECT_EQ(bench::judge(0.01, 0.10, 0.10), Verdict::kPass);
  EXPECT_EQ(bench::judge(0.12, 0.10, 0.03), Verdict::kFail);
  // ... and not beyond it, whatever the error: the tolerance is never widened to the noise.
  EXPECT_EQ(bench::judge(0.0, 0.10, 0.11), Verdict::kCouldNotJudge);
  EXPECT_EQ(bench::judge(0.5, 0.10, 0.20), Verdict::kCouldNotJudge);
  EXPECT_EQ(bench::judge(0.0, 0.10, std::nullopt), Verdict::kCouldNotJudge);  // one run

  EXPECT_FALSE(bench::spread(std::vector<double>{}));
  EXPECT_FALSE(bench::spread(std::vector<double>{1.0}));
  EXPECT_NEAR(*bench::spread(std::vector<double>{1.2, 1.0, 1.1}), 0.2, 1e-12);

  EXPECT_EQ(bench::combine(Verdict::kPass, Verdict::kPass), Verdict::kPass);
  EXPECT_EQ(bench::combine(Verdict::kPass, Verdict::kCouldNotJudge), Verdict::kCouldNotJudge);
  EXPECT_EQ(bench::combine(Verdict::kCouldNotJudge, Verdict::kFail), Verdict::kFail);
  EXPECT_EQ(bench::combine(Verdict::kFail, Verdict::kPass), Verdict::kFail);
  EXPECT_EQ(bench::exit_code(Verdict::kPass), 0);
  EXPECT_EQ(bench::exit_code(Verdict::kFail), 1);
  EXPECT_EQ(bench::exit_code(Verdict::kCouldNotJudge), 3);
  EXPECT_EQ(bench::verdict_name(Verdict::kCouldNotJudge), "COULD NOT JUDGE");

  const std::string why = bench::could_not_judge_reason(0.2, 0.1, "more rounds");
  EXPECT_NE(why.find("spread 20.0%"), std::string::npos) << why;
  EXPECT_NE(why.find("tolerance 10.0%"), std::string::npos) << why;
  EXPECT_NE(why.find("hint: more rounds"), std::string::npos) << why;
  EXPECT_EQ(bench::could_not_judge_reason(0.05, 0.1, "x"), "");
  EXPECT_NE(bench::could_not_judge_reason(std::nullopt, 0.1, "").find("unknown"),
            std::string::npos);
}

std::string checks_bench() { return std::string(TP_BINARY_DIR) + "/bench/sim/checks_bench"; }

// The table's rows of group `group` (lines starting "| group |"), split into cells.
std::vector<std::vector<std::string>> rows_of(const std::string& out, const std::string& group) {
  std::vector<std::vector<std::string>> rows;
  bool in_checks = false;
  for (const std::string& line : split(out, '\n')) {
    if (line.starts_with("| group | check |")) in_checks = true;
    if (line.starts_with("| group | checks |")) in_checks = false;
    if (!in_checks || !line.starts_with("| " + group + " |")) continue;
    std::vector<std::string> cells;
    for (const std::string& c : split(line, '|')) cells.emplace_back(trim(c));
    // "| a | b |" splits into "", a, b, "": the cells are the ones between.
    rows.emplace_back(cells.begin() + 1, cells.end() - 1);
  }
  return rows;
}

TEST(ChecksBench, ReferenceGroupIsOneTableWithAVerdictPerRowAndTheCpuNamed) {
  const testutil::CommandResult r = testutil::run_command(checks_bench() + " --group reference");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("CPU "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(family "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("load average"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| group | check | source | predicted | published / measured | error | "
                       "tolerance | noise | verdict |"),
            std::string::npos)
      << r.out;
  const auto rows = rows_of(r.out, "reference");
  // REFERENCE.md section 2: 7 vectors x (makespan, peak) + 5 bubbles + 2 busy spans; sections 1
  // and 3: 18 closed forms.
  EXPECT_EQ(rows.size(), 39u) << r.out;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 9u) << join(row, " | ");
    EXPECT_EQ(row[8], "PASS") << join(row, " | ");
    EXPECT_EQ(row[7], "-") << join(row, " | ");  // computed: no noise
    EXPECT_FALSE(row[3].empty());
    EXPECT_FALSE(row[4].empty());
  }
  EXPECT_TRUE(r.out.find("table4 |") == std::string::npos) << "only the group asked for";
  EXPECT_NE(r.out.find("\nPASS: reference;"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("not passing"), std::string::npos) << r.out;
}

// One directory for the files this test writes, removed at exit.
const std::string& scratch() {
  struct Dir {
    std::string path = testutil::make_temp_dir("checks_bench_test");
    ~Dir() { std::filesystem::remove_all(path); }
  };
  static const Dir dir;
  return dir.path;
}

// A plan_check_bench --json file: two held candidates and the 1-device one.
std::string plan_json(const std::vector<double>& calibration, double error) {
  nlohmann::json c = nlohmann::json::array();
  for (const char* role : {"top 1", "5 of 9"}) {
    c.push_back({{"candidate", "zb-h1 p=2 v=1 mbs=4 m=8 none"},
                 {"role", role},
                 {"devices", 2},
                 {"held", true},
                 {"predicted_s", {0.1 * (1 + error), 0.1 * (1 + error)}},
                 {"measured_s", {0.1, 0.1}},
                 {"error", error}});
  }
  c.push_back({{"candidate", "1f1b p=1 v=1 mbs=4 m=8 none"},
               {"role", "1 device: top 1"},
               {"devices", 1},
               {"held", false},
               {"predicted_s", {0.3}},
               {"measured_s", {0.2}},
               {"error", 0.5}});
  const nlohmann::json j = {{"bench", "plan_check_bench"},
                            {"machine", "CPU test (family 0, model 0)"},
                            {"tolerance", 0.10},
                            {"calibration_step_s", calibration},
                            {"candidates", c},
                            {"pairs_judged", 1},
                            {"pairs_wrong", 0},
                            {"verdict", "whatever"}};
  static int files = 0;
  const std::string path = fmt::format("{}/plan{}.json", scratch(), files++);
  EXPECT_TRUE(write_file(path, j.dump()).ok());
  return path;
}

TEST(ChecksBench, NoisyPlanRunCouldNotBeJudgedAndExitsThree) {
  // The calibration's identical runs spread 20%, the tolerance is 10%: every held candidate could
  // not be judged, even the one within the tolerance; the reference group still passes.
  const std::string path = plan_json({0.100, 0.120, 0.110}, 0.02);
  const auto r = testutil::run_command(checks_bench() + " --group reference --plan-json " + path);
  EXPECT_EQ(r.exit_code, bench::kExitCouldNotJudge) << r.out << r.err;
  const auto rows = rows_of(r.out, "plan");
  ASSERT_EQ(rows.size(), 4u) << r.out;  // 3 candidates and the ranking
  EXPECT_EQ(rows[0][8], "COULD NOT JUDGE");
  EXPECT_EQ(rows[1][8], "COULD NOT JUDGE");
  EXPECT_EQ(rows[0][7], "20.0%");
  EXPECT_EQ(rows[0][6], "10.00%");  // the tolerance as given, not widened
  EXPECT_EQ(rows[2][8], "not held");
  EXPECT_NE(r.out.find("identical runs spread 20.0%, above the tolerance 10.0%"), std::string::npos)
      << r.out;
  // the last line names the groups run, then the one that did not pass
  EXPECT_NE(r.out.find("\nCOULD NOT JUDGE: reference, plan; not passing: plan (COULD NOT JUDGE);"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("\nPASS"), std::string::npos) << r.out;
}

TEST(ChecksBench, PlanRunMeasuredOnceCouldNotBeJudged) {
  const auto r = testutil::run_command(checks_bench() + " --group reference --plan-json " +
                                       plan_json({0.100}, 0.0));
  EXPECT_EQ(r.exit_code, bench::kExitCouldNotJudge) << r.out << r.err;
  EXPECT_EQ(rows_of(r.out, "plan").at(0).at(7), "unknown") << r.out;
}

TEST(ChecksBench, QuietPlanRunIsJudged) {
  const auto miss = testutil::run_command(checks_bench() + " --group reference --plan-json " +
                                          plan_json({0.100, 0.102}, 0.15));
  EXPECT_EQ(miss.exit_code, bench::kExitFail) << miss.out << miss.err;
  EXPECT_EQ(rows_of(miss.out, "plan").at(0).at(8), "FAIL") << miss.out;
  const auto hit = testutil::run_command(checks_bench() + " --group reference --plan-json " +
                                         plan_json({0.100, 0.102}, -0.03));
  EXPECT_EQ(hit.exit_code, bench::kExitPass) << hit.out << hit.err;
  EXPECT_EQ(rows_of(hit.out, "plan").at(0).at(8), "PASS") << hit.out;
}

TEST(ChecksBench, BadPlanFileIsOneLineAndExitOne) {
  const std::string path = scratch() + "/bad.json";
  ASSERT_TRUE(write_file(path, "{\"tolerance\": 0.1}").ok());
  const auto r = testutil::run_command(checks_bench() + " --group reference --plan-json " + path);
  EXPECT_EQ(r.exit_code, bench::kExitFail);
  EXPECT_NE(r.err.find("no \"calibration_step_s\""), std::string::npos) << r.err;
  const auto usage = testutil::run_command(checks_bench() + " --group nonsense");
  EXPECT_EQ(usage.exit_code, 2) << usage.err;
}

// A shared_cores_bench.py --json file: one schedule, its plan with the cores shared off by
// `shared`, with a core per rank by `alone`; the calibration quiet (1% apart).
std::string shared_cores_json(double shared, double alone) {
  const nlohmann::json s = {{"schedule", "1f1b"},
                            {"layout", "E,t*2|t*2|t*2|t*2,L"},
                            {"measured_s", {0.35, 0.35}},
                            {"alone_s", {0.35 * (1 + alone), 0.35 * (1 + alone)}},
                            {"shared_s", {0.35 * (1 + shared), 0.35 * (1 + shared)}},
                            {"error_alone", alone},
                            {"error_shared", shared},
                            {"verdict", "whatever"}};
  const nlohmann::json j = {{"machine", "CPU test (family 0, model 0)"},
                            {"pp", 4},
                            {"cores", 2},
                            {"core_slowdown", 1.0},
                            {"tolerance", 0.05},
                            {"calibration_step_s", {0.330, 0.333}},
                            {"schedules", nlohmann::json::array({s})},
                            {"verdict", "whatever"}};
  static int files = 0;
  const std::string path = fmt::format("{}/shared{}.json", scratch(), files++);
  EXPECT_TRUE(write_file(path, j.dump()).ok());
  return path;
}

TEST(ChecksBench, SharedCoresGroupHoldsThePlanWithTheCoresShared) {
  // Within the tolerance with the cores shared: PASS, whatever the plan with a core per rank
  // missed by (printed beside, not held).
  auto r = testutil::run_command(checks_bench() + " --group reference --shared-cores-json " +
                                 shared_cores_json(-0.03, -0.40));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  auto rows = rows_of(r.out, "shared-cores");
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_NE(rows[0][1].find("1f1b p=4 on 2 cores, plan with cores shared"), std::string::npos);
  EXPECT_EQ(rows[0][5], "-3.00%");
  EXPECT_EQ(rows[0][8], "PASS");
  EXPECT_EQ(rows[1][5], "-40.00%");
  EXPECT_EQ(rows[1][8], "not held");
  // Beyond it on a quiet machine: FAIL (exit 1).
  r = testutil::run_command(checks_bench() + " --group reference --shared-cores-json " +
                            shared_cores_json(-0.08, -0.40));
  EXPECT_EQ(r.exit_code, bench::kExitFail) << r.out << r.err;
  rows = rows_of(r.out, "shared-cores");
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_EQ(rows[0][8], "FAIL");
  // A file that is not the bench's: one line naming it and the fix.
  const std::string bad = scratch() + "/not_shared.json";
  ASSERT_TRUE(write_file(bad, "{\"tolerance\": 0.05}").ok());
  r = testutil::run_command(checks_bench() + " --group reference --shared-cores-json " + bad);
  EXPECT_EQ(r.exit_code, bench::kExitFail) << r.out << r.err;
  EXPECT_NE(r.err.find(bad + ": no \"calibration_step_s\"; hint: give the file "
                             "`shared_cores_bench.py --json` writes"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace tightpipe
