// One run directory, one bubble: the measured and the predicted bubble ratio are the same number
// in the run's printed summary line, summary.json, metrics.jsonl and `tightpipe report`'s
// report.json (docs/bubble.md), for a threads run and an MPI run. Runs the binary as a user would.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

using nlohmann::json;
using testutil::run_command;

const std::string kTrain = fmt::format(
    "{} train --num-layers 4 --hidden-size 32 --num-attention-heads 2 --seq-length 32 "
    "--micro-batch-size 4 --num-microbatches 4 --train-iters 5 --pp 2 --schedule zb-h1 "
    "--data-path {}/data/tinyshakespeare.txt",
    testutil::tightpipe_binary(), TP_SHARED_DIR);

json read_json(const std::string& path) {
  auto text = read_file(path);
  EXPECT_TRUE(text.ok()) << path;
  return json::parse(text.ok() ? *text : std::string("{}"));
}

void expect_one_bubble(const std::string& dir, const std::string& train_stdout) {
  auto rep = run_command(
      fmt::format("{} report {} --out {}/report", testutil::tightpipe_binary(), dir, dir));
  ASSERT_EQ(rep.exit_code, 0) << rep.err;
  const json s = read_json(dir + "/summary.json");
  const json r = read_json(dir + "/report/report.json");
  for (const char* key : {"measured_bubble_ratio", "predicted_bubble_ratio",
                          "measured_bubble_ratio_per_rank", "predicted_bubble_ratio_per_rank"}) {
    ASSERT_TRUE(s.contains(key) && r.contains(key)) << key;
    EXPECT_EQ(s[key], r[key]) << key << ": summary.json " << s[key] << ", report.json " << r[key];
  }
  EXPECT_GT(s["measured_bubble_ratio"].get<double>(), 0.0);
  EXPECT_GT(s["predicted_bubble_ratio"].get<double>(), 0.0);
  // The printed summary line and the report's text show the same digits.
  const std::string line = fmt::format("bubble: measured {:.1f}%, predicted {:.1f}%",
                                       100 * s["measured_bubble_ratio"].get<double>(),
                                       100 * s["predicted_bubble_ratio"].get<double>());
  EXPECT_NE(train_stdout.find(line), std::string::npos) << line << "\n" << train_stdout;
  EXPECT_NE(rep.out.find(fmt::format("bubble: measured {:.1f}%",
                                     100 * r["measured_bubble_ratio"].get<double>())),
            std::string::npos)
      << rep.out;
  EXPECT_NE(rep.out.find(
                fmt::format("predicted {:.1f}%", 100 * r["predicted_bubble_ratio"].get<double>())),
            std::string::npos)
      << rep.out;
  // Every step's bubble in metrics.jsonl is the report's step bubble: the median of the measured
  // ones (steps 2..5) is summary.json's.
  std::vector<double> steps;
  for (const std::string& l : split(read_file(dir + "/metrics.jsonl").value(), '\n')) {
    if (trim(l).empty()) continue;
    steps.push_back(json::parse(l)["bubble_ratio"].get<double>());
  }
  ASSERT_EQ(steps.size(), 5u);
  steps.erase(steps.begin());
  EXPECT_EQ(median(steps), s["measured_bubble_ratio"].get<double>());
}

TEST(BubbleConsistency, ThreadsRun) {
  const std::string dir = testutil::make_temp_dir("bubble_threads");
  auto r = run_command(kTrain + " --out-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_one_bubble(dir, r.out);
}

TEST(BubbleConsistency, MpiRun) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  const std::string dir = testutil::make_temp_dir("bubble_mpi");
  auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 2 " + kTrain +
                       " --transport mpi --out-dir " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  expect_one_bubble(dir, r.out);
}

}  // namespace
}  // namespace tightpipe
