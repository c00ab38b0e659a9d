// The memory check before allocation (train_internal.h check_memory, issue 13): the estimate's
// weights are the model's real parameter count, and a model over the available memory is one
// error naming the flags, the parts and the source of the limit.
#include <gtest/gtest.h>

#include "exec/train_internal.h"
#include "tightpipe/model.h"
#include "tiny_train.h"

namespace tightpipe::train_internal {
namespace {

TrainOptions small_run() {
  TrainOptions o = testutil::tiny_train_options("");
  o.data.path = TP_SHARED_DIR "/data/tinyshakespeare.txt";
  return o;
}

TEST(MemoryCheck, WeightsAreTheModelsParameters) {
  auto plan = make_plan(small_run());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto e = estimate_memory(*plan);
  ASSERT_TRUE(e.ok()) << e.status().message();
  size_t params = 0;
  for (const nn::StageSpec& s : plan->specs)
    params += nn::GptStage(plan->opt.model, s, 1).num_params();
  // float32 weights, gradients, and AdamW's m and v: 4, 4 and 8 bytes per parameter (the analytic
  // count leaves out the final LayerNorm: within 1%).
  EXPECT_NEAR(e->weights, 4.0 * params, 0.01 * 4 * params);
  EXPECT_NEAR(e->gradients, 4.0 * params, 0.01 * 4 * params);
  EXPECT_NEAR(e->adamw, 8.0 * params, 0.01 * 8 * params);
  EXPECT_GT(e->activations, 0);
  EXPECT_GT(e->buffers, 0);
}

TEST(MemoryCheck, RefusesWhatDoesNotFitNamingTheFlags) {
  auto plan = make_plan(small_run());
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_TRUE(check_memory(*plan, {1e12, "test"}).ok());
  Status s = check_memory(*plan, {1024, "a test limit"});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* part : {"--num-layers 4 --hidden-size 32 --seq-length 32 --micro-batch-size 4",
                           "--num-microbatches 4 --pp 2", "the model needs", "in this process",
                           "weights", "AdamW state", "activations",
                           "1.0 KiB is available (a test "
                           "limit)",
                           "hint:"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in: " << s.message();
  }
  // Emulated compute allocates no model: nothing to refuse.
  plan->opt.exec.emulated = true;
  EXPECT_TRUE(check_memory(*plan, {1024, "a test limit"}).ok());
}

}  // namespace
}  // namespace tightpipe::train_internal
