// The model learns: a short single-rank run of the tiny config (4 layers, hidden 128,
// 4 heads, T=128) on tinyshakespeare must reach a validation loss below 2.5 nats per byte, and
// with --bf16 within 0.03 of that FP32 run. (docs/model.md documents the longer run.) Label: slow.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace tightpipe::testing_nn {
namespace {

struct SlowRun {
  double first = 0, final_train = 0, val = -1;
};

// The 300-step run of the tiny config on one rank, with `extra` flags (e.g. --bf16).
SlowRun run_tiny(const std::string& name, const std::string& extra) {
  const std::string dir = fresh_dir(name);
  RunResult r = run_tightpipe(
      "train --pp 1 --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 "
      "--micro-batch-size 8 --num-microbatches 1 --train-iters 300 --lr 3e-3 --min-lr 3e-4 "
      "--lr-warmup-iters 25 --clip-grad 1.0 --seed 1234 --eval-iters 8 --log-interval 50 "
      "--data-path " +
      kText + " --out-dir " + dir + " " + extra);
  EXPECT_EQ(r.code, 0) << r.output;
  SlowRun out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::vector<nlohmann::json> rows;
  for (std::string l; std::getline(in, l);) rows.push_back(nlohmann::json::parse(l));
  EXPECT_EQ(rows.size(), 300u);
  if (rows.empty()) return out;
  out.first = rows.front()["loss"];
  out.final_train = rows.back()["loss"];
  if (rows.back().contains("val_loss")) out.val = rows.back()["val_loss"];
  return out;
}

// One test, so the FP32 run that both checks need runs once (ctest runs each test in a process
// of its own: as two tests, the FP32 run ran twice, 80-170 s each on 2 cores).
TEST(TrainSlow, TinyConfigReachesValidationLossBelow2p5AndBf16Within0p03) {
  const SlowRun f = run_tiny("slow", "");
  EXPECT_NEAR(f.first, std::log(256.0), 0.03 * std::log(256.0));
  ASSERT_GE(f.val, 0) << "no FP32 validation loss";
  std::printf("step-1 loss %.4f, final train loss %.4f, validation loss %.4f\n", f.first,
              f.final_train, f.val);
  EXPECT_LT(f.val, 2.5);

  // Issue 17: the same run with --bf16 (bf16 matmul inputs, FP32 master weights) reaches a
  // validation loss within 0.03 of the FP32 run's.
  const SlowRun b = run_tiny("slow_bf16", "--bf16");
  ASSERT_GE(b.val, 0) << "no bf16 validation loss";
  std::printf("validation loss after 300 steps: fp32 %.4f, bf16 %.4f (difference %+.4f)\n", f.val,
              b.val, b.val - f.val);
  EXPECT_NEAR(b.val, f.val, 0.03);
}

}  // namespace
}  // namespace tightpipe::testing_nn
