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
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
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

// --enable-optimizer-post-validation keeps a copy of each stage's weights, gradients and AdamW
// state until its step is checked: counted, the rest unchanged.
TEST(MemoryCheck, PostValidationCountsTheKeptCopy) {
  TrainOptions o = small_run();
  auto plain = make_plan(o);
  o.optimizer_post_validation = true;
  auto pv = make_plan(o);
  ASSERT_TRUE(plain.ok() && pv.ok());
  auto a = estimate_memory(*plain), b = estimate_memory(*pv);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->kept_copy, 0);
  EXPECT_GT(b->kept_copy, 0);
  EXPECT_NEAR(b->kept_copy, a->weights + a->gradients + a->adamw,
              1e-9 * (a->weights + a->gradients + a->adamw));
  EXPECT_NEAR(b->total() - a->total(), b->kept_copy, 1e-6 * b->total());
}

// --bf16: the weights add the bf16 copy of the matmul weights (GptStage::bf16_weight_bytes), the
// gradients and AdamW state stay FP32, the activations shrink.
TEST(MemoryCheck, Bf16CountsTheWeightCopyAndSmallerActivations) {
  TrainOptions o = small_run();
  auto p32 = make_plan(o);
  o.model.precision = nn::Precision::kBf16;
  auto p16 = make_plan(o);
  ASSERT_TRUE(p32.ok() && p16.ok());
  auto e32 = estimate_memory(*p32), e16 = estimate_memory(*p16);
  ASSERT_TRUE(e32.ok() && e16.ok());
  size_t params = 0, copy = 0;
  for (const nn::StageSpec& s : p16->specs) {
    nn::GptStage st(p16->opt.model, s, 1);
    params += st.num_params();
    copy += st.bf16_weight_bytes();
  }
  EXPECT_GT(copy, 0u);
  EXPECT_NEAR(e16->weights, 4.0 * params + copy, 0.01 * 4 * params);
  EXPECT_NEAR(e16->weights - e32->weights, double(copy), 1e-9 * copy);
  EXPECT_EQ(e16->gradients, e32->gradients);
  EXPECT_EQ(e16->adamw, e32->adamw);
  EXPECT_LT(e16->activations, e32->activations);
}

// The analytic per-block activation bytes bound what a block really stashes after F, in FP32 and
// in bf16 (measured: the stash growth of one more block on a stage without embedding and head).
TEST(MemoryCheck, AnalyticBlockActivationsCoverTheMeasuredStash) {
  for (nn::Precision p : {nn::Precision::kFp32, nn::Precision::kBf16}) {
    nn::GptConfig c = small_run().model;
    c.precision = p;
    const std::vector<float> x(size_t(c.tokens_per_microbatch()) * c.hidden_size, 0.25f);
    auto stash_of = [&](int blocks) {
      nn::GptStage st(c, nn::StageSpec{0, blocks, false, false}, 1);
      st.forward(0, std::span<const float>(x));
      return double(st.stash_bytes());
    };
    const double measured = stash_of(2) - stash_of(1);
    const double predicted = analytic_layer_costs(c).block.act_bytes;
    std::printf("%s block stash: measured %.0f, analytic %.0f bytes\n",
                std::string(nn::precision_name(p)).c_str(), measured, predicted);
    EXPECT_GE(predicted, measured) << nn::precision_name(p);
    EXPECT_LE(predicted, 1.5 * measured) << nn::precision_name(p);
  }
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

// Issue 27: 48 thread ranks (--pp 1 --data-parallel-size 48) of a tiny model fit any memory,
// but each maps OpenBLAS's 128 MiB buffer and a stack: under a 4 GB address-space limit OpenBLAS
// could not map them and retried forever. The check counts them and refuses, naming the counts.
TEST(MemoryCheck, CountsWhatEachThreadRankReservesBeyondTensors) {
  TrainOptions o = small_run();
  o.pp = 1;
  o.data_parallel_size = 48;
  auto plan = make_plan(o);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  auto e = estimate_memory(*plan);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->blas_buffers, 48);
  EXPECT_GE(e->threads, 48);
  EXPECT_GE(e->reserved(), 48 * kOpenBlasBufferBytes);
  EXPECT_LT(e->total(), 1e9) << "the tensors are small: only the address space is short";
  EXPECT_TRUE(check_memory(*plan, {1e12, "test"}).ok());
  const Status s = check_memory(*plan, {1e12, "test"}, 4e9);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  for (const char* part :
       {"--pp 1 --data-parallel-size 48 (48 thread ranks in this process)",
        "of address space but the address-space limit (ulimit -v) leaves 3.7 GiB",
        "OpenBLAS's buffer of 128.0 MiB for each of 48 BLAS thread(s)", "thread stack(s)",
        "malloc arena(s)", "hint: fewer replicas", "--transport mpi"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " not in: " << s.message();
  }
  // One replica of the same model fits the same limit.
  auto one = make_plan(small_run());
  ASSERT_TRUE(one.ok());
  EXPECT_TRUE(check_memory(*one, {1e12, "test"}, 4e9).ok());
}

}  // namespace
}  // namespace tightpipe::train_internal
