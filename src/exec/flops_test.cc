// The FLOPs a step does per pipeline rank (step_flops_per_rank), against a count by hand, and the
// FLOP/s and utilisation a run reports from them (issue 30).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "exec/train_internal.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tiny_train.h"

namespace tightpipe::train_internal {
namespace {

// One layer, by hand: the block's matmuls are qkv (h x 3h), the projection (h x h), fc (h x 4h)
// and fc2 (4h x h): 12h^2 multiply-adds per token, 24h^2 FLOPs forward; attention's two
// matmuls (q k^T and att v) 2 x 2Th FLOPs per token over the whole T x T square. The backward
// does twice the forward's matmul work (input and weight gradients; attention has no weights,
// so its two input gradients per matmul: 2 x forward). Per token and layer: 72h^2 + 12Th. The
// LM head: 2hV forward, 4hV backward.
TEST(StepFlops, OneLayerMatchesACountByHand) {
  TrainOptions o = testutil::tiny_train_options("", "1f1b", 2, 3);
  o.model.num_layers = 2;  // one per rank: rank 0 embedding + 1 block, rank 1 1 block + head
  o.model.hidden_size = 64;
  o.model.seq_length = 16;
  o.model.micro_batch_size = 2;
  o.model.vocab_size = 256;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  auto plan = make_plan(o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const std::vector<RankFlops> f = step_flops_per_rank(*plan);
  ASSERT_EQ(f.size(), 2u);
  const double h = 64, T = 16, V = 256, tokens = 2 * 16, m = 3;
  const double fwd_block = tokens * (2 * 12 * h * h + 2 * 2 * T * h);
  const double block = 3 * fwd_block;  // forward, then input and weight gradients
  EXPECT_DOUBLE_EQ(block, tokens * (72 * h * h + 12 * T * h));
  const double head = tokens * 6 * h * V;
  EXPECT_DOUBLE_EQ(f[0].model, m * block);
  EXPECT_DOUBLE_EQ(f[1].model, m * (block + head));
  EXPECT_EQ(f[0].recompute, 0);
  // Full recompute runs each block's forward once more: hardware FLOPs, not model FLOPs.
  o.recompute.granularity = "full";
  auto rc = make_plan(o);
  ASSERT_TRUE(rc.ok()) << rc.status().message();
  const std::vector<RankFlops> g = step_flops_per_rank(*rc);
  EXPECT_DOUBLE_EQ(g[1].model, f[1].model);
  EXPECT_DOUBLE_EQ(g[0].recompute, m * fwd_block);
  EXPECT_DOUBLE_EQ(g[1].recompute, m * fwd_block);
}

// Interleaved: a rank's two chunks both count, each microbatch once per chunk.
TEST(StepFlops, EveryChunkOfARankCounts) {
  TrainOptions o = testutil::tiny_train_options("", "interleaved", 2, 4);
  o.vpp = 2;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  auto plan = make_plan(o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const std::vector<RankFlops> f = step_flops_per_rank(*plan);
  const double h = 32, T = 32, tokens = 4 * 32, m = 4, V = o.model.vocab_size;
  const double block = tokens * (72 * h * h + 12 * T * h);
  EXPECT_DOUBLE_EQ(f[0].model, m * 2 * block);  // blocks 0 and 2
  EXPECT_DOUBLE_EQ(f[1].model, m * (2 * block + tokens * 6 * h * V));
}

// A real run reports model TFLOP/s per rank, hardware TFLOP/s and utilisation in summary.json,
// and the step lines carry the mean; emulated compute has none.
TEST(StepFlops, RunsReportTflopsAndUtilisation) {
  const std::string out = testutil::make_temp_dir("tp-flops");
  TrainOptions o = testutil::tiny_train_options(out, "1f1b", 2, 4);
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  std::vector<std::string> lines;
  o.log = [&lines](const std::string& l) { lines.push_back(l); };
  o.log_interval = 1;
  auto run = run_training(o);
  ASSERT_TRUE(run.ok()) << run.status().to_string();
  ASSERT_EQ(run->model_tflops_per_rank.size(), 2u);
  EXPECT_GT(run->matmul_tflops, 0);
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_GT(run->model_tflops_per_rank[r], 0);
    EXPECT_EQ(run->hardware_tflops_per_rank[r], run->model_tflops_per_rank[r]);  // no recompute
    EXPECT_NEAR(run->utilisation_per_rank[r], run->hardware_tflops_per_rank[r] / run->matmul_tflops,
                1e-12);
  }
  // The last rank holds the head: more FLOPs in the same step time.
  EXPECT_GT(run->model_tflops_per_rank[1], run->model_tflops_per_rank[0]);
  std::ifstream in(out + "/summary.json");
  const auto j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["model_tflops_per_rank"].size(), 2u);
  EXPECT_EQ(j["utilisation_per_rank"].size(), 2u);
  EXPECT_GT(j["matmul_tflops"].get<double>(), 0);
  EXPECT_NE(j["kernels"].get<std::string>().find("BLAS: OpenBLAS"), std::string::npos);
  bool step_line = false, header = false;
  for (const std::string& l : lines) {
    if (l.rfind("step ", 0) == 0 && l.find(" TFLOP/s/rank (") != std::string::npos)
      step_line = true;
    if (l.rfind("BLAS: ", 0) == 0) header = true;
  }
  EXPECT_TRUE(step_line && header) << join(lines, "\n");

  TrainOptions e = testutil::tiny_emulated_options(2);
  auto em = run_training(e);
  ASSERT_TRUE(em.ok()) << em.status().to_string();
  EXPECT_TRUE(em->model_tflops_per_rank.empty());
}

}  // namespace
}  // namespace tightpipe::train_internal
