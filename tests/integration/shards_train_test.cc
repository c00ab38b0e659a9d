// Training from WebDataset shards end to end: `tightpipe data shard`, then `tightpipe train` with
// a brace pattern, on one rank and on a pipeline.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

using testutil::run_command;

// `tightpipe data shard` of the bundled text into DIR/shards (at least two shards); the quoted
// brace pattern naming them all, or "" after a failed expectation.
std::string shard_tinyshakespeare(const std::string& dir, int seq_length, int per_shard) {
  auto w = run_command(fmt::format(
      "{} data shard --input {}/data/tinyshakespeare.txt --out {}/shards --seq-length {} "
      "--samples-per-shard {}",
      testutil::tightpipe_binary(), TP_SHARED_DIR, dir, seq_length, per_shard));
  EXPECT_EQ(w.exit_code, 0) << w.err;
  int shards = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/shards"))
    if (e.path().extension() == ".tar") ++shards;
  EXPECT_GE(shards, 2);
  if (w.exit_code != 0 || shards < 2) return "";
  return fmt::format("'{}/shards/shard-{{000000..{:06d}}}.tar'", dir, shards - 1);
}

TEST(ShardsTrainTest, TrainsFromABracePatternOnOneRankAndOnAPipeline) {
  const std::string tp = testutil::tightpipe_binary();
  const std::string dir = testutil::make_temp_dir("tp-shards");
  const std::string pattern = shard_tinyshakespeare(dir, 128, 1000);
  ASSERT_FALSE(pattern.empty());
  for (const char* pp : {"1", "2"}) {
    const std::string out = dir + "/run" + pp;
    auto r = run_command(tp + " train --pp " + pp +
                         " --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
                         "--seq-length 64 --micro-batch-size 4 --num-microbatches 4 "
                         "--train-iters 4 --eval-iters 2 --data-path " +
                         pattern + " --out-dir " + out);
    ASSERT_EQ(r.exit_code, 0) << "pp " << pp << "\n" << r.err << r.out;
    auto sum = nlohmann::json::parse(read_file(out + "/summary.json").value());
    EXPECT_EQ(sum["steps"].get<int>(), 4);
    EXPECT_NEAR(sum["final_loss"].get<double>(), std::log(256.0), 1.0);
    EXPECT_GT(sum["final_val_loss"].get<double>(), 0.0);
  }
}

// Data parallel from shards: DP 2 x PP 2 (replica d takes its slice of each global batch from the
// tar stream) trains as one rank reading the whole global batch (--num-microbatches DP x m) from
// the same shards: the same loss at every step within 1e-6 relative.
TEST(ShardsTrainTest, DataParallelReplicasSliceTheShardStreamLikeOneRank) {
  const std::string tp = testutil::tightpipe_binary();
  const std::string dir = testutil::make_temp_dir("tp-shards-dp");
  const std::string pattern = shard_tinyshakespeare(dir, 64, 500);
  ASSERT_FALSE(pattern.empty());
  auto train = [&](const std::string& name, const std::string& shape) {
    const std::string out = dir + "/" + name;
    auto r = run_command(tp + " train " + shape +
                         " --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
                         "--seq-length 64 --micro-batch-size 2 --train-iters 4 --eval-iters 0 "
                         "--data-path " +
                         pattern + " --out-dir " + out);
    EXPECT_EQ(r.exit_code, 0) << name << "\n" << r.err << r.out;
    std::vector<double> losses;
    auto text = read_file(out + "/metrics.jsonl");
    EXPECT_TRUE(text.ok()) << name;
    std::istringstream in(text.ok() ? *text : std::string());
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
    }
    return losses;
  };
  const std::vector<double> one = train("one", "--pp 1 --num-microbatches 8");
  const std::vector<double> dp = train("dp", "--pp 2 --data-parallel-size 2 --num-microbatches 4");
  ASSERT_EQ(one.size(), 4u);
  ASSERT_EQ(dp.size(), one.size());
  for (size_t k = 0; k < one.size(); ++k) EXPECT_NEAR(dp[k], one[k], 1e-6 * one[k]) << k;
}

}  // namespace
}  // namespace tightpipe
