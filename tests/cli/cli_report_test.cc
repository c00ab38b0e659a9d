// `tightpipe report PATH` when PATH is not a run directory: one line that says what PATH is and
// which directory to pass instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/report.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using testutil::run_command;

TEST(CliReportTest, FileIsNotARunDirectory) {
  const std::string dir = testutil::make_temp_dir("tp-cli-report");
  const std::string file = dir + "/summary.json";
  ASSERT_TRUE(write_file(file, "{}\n").ok());

  auto lib = load_run(file);
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lib.status().message().find("is a file, not a run directory"), std::string::npos)
      << lib.status().message();
  EXPECT_EQ(lib.status().message().find("does not exist"), std::string::npos)
      << lib.status().message();

  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built";
  auto r = run_command(tp + " report " + file);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char* part : {file.c_str(), "is a file, not a run directory", "hint:", "--out-dir"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
  EXPECT_EQ(r.err.find("does not exist"), std::string::npos) << r.err;

  // A file inside a run directory: the hint names that directory.
  const std::string run_dir = dir + "/run";
  fs::create_directory(run_dir);
  ASSERT_TRUE(write_file(run_dir + "/timeline_rank0.jsonl", "").ok());
  r = run_command(tp + " report " + run_dir + "/timeline_rank0.jsonl");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("('" + run_dir + "' here)"), std::string::npos) << r.err;

  // A path that is not there still says so.
  r = run_command(tp + " report " + dir + "/nope");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dir + "/nope"), std::string::npos) << r.err;
}

// Other engines' GPU traces: the README's command on the bundled traces, report.json's keys, the
// pipeline flags, and what a user gets wrong.
TEST(CliReportTest, GpuTraces) {
  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built";
  const std::string traces = std::string(TP_SHARED_DIR) + "/data/traces/";
  const std::string dir = testutil::make_temp_dir("tp-cli-report-gpu");
  auto r = run_command(tp + " report " + traces + "dp128_rank0.json.gz " + traces +
                       "dp128_rank1.json.gz --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"GPU trace report: 2 rank(s)", "step 551", "step 552",
                           "worst step: rank", "exposed comm", "wrote "})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  for (const char* f : {"report.html", "report.json", "report-trace.json"})
    EXPECT_TRUE(fs::exists(dir + "/out/" + f)) << f;
  auto text = read_file(dir + "/out/report.json");
  ASSERT_TRUE(text.ok());
  const auto j = nlohmann::json::parse(*text);
  ASSERT_EQ(j["ranks"].size(), 2u);
  for (const auto& rank : j["ranks"]) {
    for (const char* key : {"rank", "window_s", "busy_s", "idle_s", "compute_s", "communication_s",
                            "exposed_communication_s", "memory_s", "bubble_ratio", "steps"})
      EXPECT_TRUE(rank.contains(key)) << key;
    ASSERT_EQ(rank["steps"].size(), 2u);
    EXPECT_TRUE(rank["steps"][0].contains("step"));
    EXPECT_TRUE(rank["steps"][0].contains("exposed_communication_s"));
  }
  EXPECT_NO_THROW((void)nlohmann::json::parse(*read_file(dir + "/out/report-trace.json")));

  // Without --out: one line saying so.
  r = run_command(tp + " report " + traces + "dp2_rank0.json.gz");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--out is required"), std::string::npos) << r.err;
  // Two jobs mixed: refused, naming both files.
  r = run_command(tp + " report " + traces + "dp128_rank0.json.gz " + traces +
                  "dp2_rank0.json.gz --out " + dir + "/mixed");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("dp128_rank0.json.gz"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("dp2_rank0.json.gz"), std::string::npos) << r.err;
  // Pipeline flags belong to traces, not to a run directory.
  const std::string run_dir = dir + "/run";
  fs::create_directory(run_dir);
  r = run_command(tp + " report " + run_dir + " --pp 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--pp"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tightpipe
