// `tightpipe report PATH` when PATH is not a run directory: one line that says what PATH is and
// which directory to pass instead.
#include <fmt/format.h>
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

// Other engines' GPU traces: docs/report.md's command on the bundled traces, report.json's keys,
// the pipeline flags, and what a user gets wrong.
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
  EXPECT_TRUE(nlohmann::json::accept(*read_file(dir + "/out/report-trace.json")));

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

// A trace that was not said to be a pipeline: "idle", never "bubble", in the terminal, report.json
// and the page; its damaged times are one warning line (count, first event, the file) in the
// terminal and in report.json. `--pp` over ranks that are not one pipeline is refused.
TEST(CliReportTest, GpuTraceIdleLabelWarningsAndPipelineRanks) {
  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built";
  const std::string dir = testutil::make_temp_dir("tp-cli-report-idle");
  auto trace = [&](const std::string& name, const std::string& info, const std::string& bad_ts) {
    const std::string p = dir + "/" + name;
    std::string ev =
        R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 50},)"
        R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, )"
        R"("args": {"correlation": 1}},)"
        R"({"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100, "dur": 10, )"
        R"("args": {"device": 0, "stream": 7, "correlation": 1}},)"
        R"({"ph": "X", "cat": "kernel", "name": "gemm", "ts": 130, "dur": 10, )"
        R"("args": {"device": 0, "stream": 7}})";
    for (int i = 0; i < 3 && !bad_ts.empty(); ++i) {
      ev += R"(,{"ph": "X", "cat": "kernel", "name": "bad", "ts": )" + bad_ts +
            R"(, "dur": 1, "args": {"device": 0, "stream": 7}})";
    }
    EXPECT_TRUE(write_file(p, "{" + info + "\"traceEvents\": [" + ev + "]}").ok());
    return p;
  };
  const std::string t = trace("t.json", "", "\"12\"");
  auto r = run_command(tp + " report " + t + " --out " + dir + "/out");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("bubble"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("idle %"), std::string::npos) << r.out;
  size_t lines = 0, at = 0;
  for (; (at = r.out.find("with a time that is missing or not a number", at)) != std::string::npos;
       ++at) {
    ++lines;
  }
  EXPECT_EQ(lines, 1u) << r.out;
  for (const char* part : {"warning: rank 0 (", "3 event(s) with a time",
                           "first: kernel 'bad' (traceEvents[4]) \"ts\": \"12\""})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  EXPECT_NE(r.out.find(t), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(*read_file(dir + "/out/report.json"));
  EXPECT_EQ(j["ratio_name"], "idle");
  EXPECT_EQ(j["pipelined"], false);
  bool in_json = false;
  for (const auto& w : j["warnings"])
    in_json |= w.get<std::string>().find("3 event(s) with a time") != std::string::npos;
  EXPECT_TRUE(in_json) << j["warnings"].dump();
  const auto html = read_file(dir + "/out/report.html");
  ASSERT_TRUE(html.ok());
  EXPECT_EQ(html->find("bubble"), std::string::npos);

  // --pp 3 over ranks 0, 1 and 3 of a world of 4: one line naming them.
  std::string files;
  for (int rank : {0, 1, 3}) {
    files += " " +
             trace(fmt::format("rank{}.json", rank),
                   fmt::format(
                       R"("distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": 4}}, )",
                       rank),
                   "");
  }
  r = run_command(tp + " report" + files + " --pp 3 --schedule 1f1b --num-microbatches 4 --out " +
                  dir + "/pp");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char* part : {"--pp 3", "ranks 0, 1, 3 of a world of 4", "hint:"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
  EXPECT_FALSE(fs::exists(dir + "/pp/report.json"));
}

}  // namespace
}  // namespace tightpipe
