// The model learns: a short single-rank run of the tiny config (4 layers, hidden 128,
// 4 heads, T=128) on tinyshakespeare must reach a validation loss below 2.5 nats per byte.
// (The README documents the longer run.) Label: slow.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace tightpipe::testing_nn {
namespace {

TEST(TrainSlow, TinyConfigReachesValidationLossBelow2p5) {
  const std::string dir = fresh_dir("slow");
  RunResult r = run_tightpipe(
      "train --pp 1 --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 "
      "--micro-batch-size 8 --num-microbatches 1 --train-iters 300 --lr 3e-3 --min-lr 3e-4 "
      "--lr-warmup-iters 25 --clip-grad 1.0 --seed 1234 --eval-iters 8 --log-interval 50 "
      "--data-path " +
      kText + " --out-dir " + dir);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> rows;
  for (std::string l; std::getline(in, l);) rows.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(rows.size(), 300u);
  const double first = rows.front()["loss"];
  EXPECT_NEAR(first, std::log(256.0), 0.03 * std::log(256.0));
  ASSERT_TRUE(rows.back().contains("val_loss"));
  const double val = rows.back()["val_loss"];
  std::printf("step-1 loss %.4f, final train loss %.4f, validation loss %.4f\n", first,
              double(rows.back()["loss"]), val);
  EXPECT_LT(val, 2.5);
}

}  // namespace
}  // namespace tightpipe::testing_nn
