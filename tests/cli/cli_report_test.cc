// `tightpipe report PATH` when PATH is not a run directory: one line that says what PATH is and
// which directory to pass instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

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

}  // namespace
}  // namespace tightpipe
