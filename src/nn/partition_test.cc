// Partitioner and configuration errors.
#include <gtest/gtest.h>

#include "tightpipe/model.h"

namespace tightpipe::nn {
namespace {

GptConfig cfg(int layers) {
  GptConfig c;
  c.num_layers = layers;
  return c;
}

TEST(Partition, BalancedCountsEmbeddingAndLoss) {
  auto r = partition_layers(cfg(11), 4, "");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(format_layout(*r), "E,t*3|t*3|t*3|t*2,L");
  r = partition_layers(cfg(4), 2, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(format_layout(*r), "E,t*2|t*2,L");
  r = partition_layers(cfg(4), 1, "");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(format_layout(*r), "E,t*4,L");
  for (int L = 1; L <= 13; ++L)
    for (int S = 1; S <= L; ++S) {
      auto p = partition_layers(cfg(L), S, "");
      ASSERT_TRUE(p.ok()) << L << " " << S;
      int next = 0;
      for (const StageSpec& s : *p) {
        EXPECT_EQ(s.first_layer, next);
        next += s.num_layers;
      }
      EXPECT_EQ(next, L) << "no layer dropped, L=" << L << " S=" << S;
      EXPECT_TRUE(p->front().has_embedding && p->back().has_head);
    }
}

TEST(Partition, ExplicitLayoutRoundTrips) {
  auto r = partition_layers(cfg(11), 4, "E,t*3|t*3|t*3|t*2,L");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[1].first_layer, 3);
  EXPECT_EQ((*r)[3].num_layers, 2);
  auto r2 = partition_layers(cfg(3), 2, "E,t,t|t,L");
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(format_layout(*r2), "E,t*2|t,L");
  auto r3 = partition_layers(cfg(2), 3, "E|t*2|L");  // embedding and loss alone are stages
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ((*r3)[0].num_layers, 0);
}

TEST(Partition, BadLayoutsAreClearErrors) {
  auto lost = partition_layers(cfg(11), 4, "E,t*3|t*3|t*3|t*1,L");
  ASSERT_FALSE(lost.ok());
  EXPECT_EQ(lost.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(lost.status().message().find("--pipeline-layout"), std::string::npos);
  EXPECT_NE(lost.status().message().find("places 10 transformer layers but --num-layers is 11"),
            std::string::npos)
      << lost.status().message();
  EXPECT_NE(lost.status().message().find("hint:"), std::string::npos);
  auto repeated = partition_layers(cfg(11), 4, "E,t*3|t*3|t*3|t*3,L");
  ASSERT_FALSE(repeated.ok());
  EXPECT_NE(repeated.status().message().find("repeated"), std::string::npos);
  auto stages = partition_layers(cfg(4), 3, "E,t*2|t*2,L");
  ASSERT_FALSE(stages.ok());
  EXPECT_NE(stages.status().message().find("2 stages but the pipeline has 3"), std::string::npos);
  EXPECT_FALSE(partition_layers(cfg(4), 2, "t*2|t*2,L").ok());      // no E
  EXPECT_FALSE(partition_layers(cfg(4), 2, "E,t*2|L,t*2").ok());    // L not last
  EXPECT_FALSE(partition_layers(cfg(4), 2, "E,t*2|E,t*2,L").ok());  // E twice
  EXPECT_FALSE(partition_layers(cfg(4), 2, "E,t*2|x*2,L").ok());    // unknown item
  EXPECT_FALSE(partition_layers(cfg(4), 3, "E,t*2||t*2,L").ok());   // empty stage
}

TEST(Partition, FewerLayersThanStages) {
  auto r = partition_layers(cfg(3), 4, "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--num-layers 3 is fewer than the 4 pipeline stages; hint: use at least one layer per "
            "stage (--num-layers >= 4) or fewer stages");
}

TEST(Config, HiddenNotDivisibleByHeads) {
  GptConfig c;
  c.hidden_size = 130;
  c.num_heads = 4;
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--hidden-size 130 is not divisible by --num-attention-heads 4"),
            std::string::npos);
  EXPECT_NE(s.message().find("hint:"), std::string::npos);
  c.hidden_size = 128;
  EXPECT_TRUE(c.validate().ok());
  c.num_layers = 0;
  EXPECT_NE(c.validate().message().find("--num-layers"), std::string::npos);
  RecomputeOptions r{"full", "block", 1};
  EXPECT_NE(r.validate().message().find("--recompute-method"), std::string::npos);
  r = {"full", "uniform", 0};
  EXPECT_NE(r.validate().message().find("--recompute-num-layers"), std::string::npos);
  r = {"selective", "uniform", 1};
  EXPECT_NE(r.validate().message().find("--recompute-granularity"), std::string::npos);
}

TEST(Optimizer, WarmupCosineAndClip) {
  LrSchedule s{1e-3f, 1e-4f, 10, 110};
  EXPECT_FLOAT_EQ(lr_at(s, 0), 1e-4f);
  EXPECT_FLOAT_EQ(lr_at(s, 9), 1e-3f);
  EXPECT_FLOAT_EQ(lr_at(s, 10), 1e-3f);
  EXPECT_NEAR(lr_at(s, 109), 1e-4f, 1e-9);
  EXPECT_NEAR(lr_at(s, 10 + 99 / 2.0), 5.5e-4f, 2e-5);
  for (int i = 11; i < 110; ++i) EXPECT_LE(lr_at(s, i), lr_at(s, i - 1));
  EXPECT_EQ(clip_scale(4.0, 1.0f), float(1.0 / (2.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.25, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);
  EXPECT_FALSE((LrSchedule{1e-3f, 1e-2f, 0, 10}).validate().ok());
}

}  // namespace
}  // namespace tightpipe::nn

namespace tightpipe::nn {
namespace {

TEST(MegatronSplit, FirstLastCountsAndAccountingFlags) {
  MegatronSplit f;
  f.first_stage_layers = 2;
  f.last_stage_layers = 1;
  auto l = megatron_layout(cfg(9), 4, f);  // 2 | 3 | 3 | 1
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(*l, "E,t*2|t*3|t*3|t,L");
  EXPECT_TRUE(partition_layers(cfg(9), 4, *l).ok());
  f = {};
  f.first_stage_layers = 1;
  EXPECT_EQ(megatron_layout(cfg(7), 4, f).value(), "E,t|t*2|t*2|t*2,L");
  f = {};
  f.account_for_embedding = true;
  f.account_for_loss = true;
  EXPECT_EQ(megatron_layout(cfg(6), 4, f).value(), "E,t|t*2|t*2|t,L");
  f.account_for_embedding = false;
  EXPECT_EQ(megatron_layout(cfg(7), 4, f).value(), "E,t*2|t*2|t*2|t,L");
}

TEST(MegatronSplit, UnevenOrMixedIsOneClearError) {
  MegatronSplit f;
  f.first_stage_layers = 2;
  auto l = megatron_layout(cfg(9), 4, f);  // 7 over 3 stages
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("--decoder-first-pipeline-num-layers 2"), std::string::npos);
  EXPECT_NE(l.status().message().find("hint:"), std::string::npos);
  f.first_stage_layers = 20;
  EXPECT_FALSE(megatron_layout(cfg(9), 4, f).ok());
  f = {};
  f.account_for_loss = true;
  l = megatron_layout(cfg(8), 4, f);  // 9 units over 4 stages
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("multiple of the stages"), std::string::npos);
  f.first_stage_layers = 1;
  EXPECT_FALSE(megatron_layout(cfg(8), 4, f).ok());
}

// Issue 13: counts beyond their limits are one error naming the flag, never wrapped to int.
TEST(Config, CountsAboveTheirLimits) {
  const std::pair<int GptConfig::*, const char*> fields[] = {
      {&GptConfig::num_layers, "--num-layers"},
      {&GptConfig::hidden_size, "--hidden-size"},
      {&GptConfig::num_heads, "--num-attention-heads"},
      {&GptConfig::seq_length, "--seq-length"},
      {&GptConfig::micro_batch_size, "--micro-batch-size"},
  };
  for (const auto& [field, flag] : fields) {
    GptConfig c;
    c.*field = 1 << 20;
    Status s = c.validate();
    ASSERT_FALSE(s.ok()) << flag;
    EXPECT_NE(s.message().find(std::string(flag) + " 1048576: must be in [1, "), std::string::npos)
        << s.message();
    EXPECT_NE(s.message().find("hint:"), std::string::npos) << s.message();
  }
  GptConfig big;  // every count at its limit: large, but its buffer sizes fit 64 bits
  big.num_layers = kMaxNumLayers;
  big.hidden_size = kMaxHiddenSize;
  big.num_heads = kMaxNumHeads;
  big.seq_length = kMaxSeqLength;
  big.micro_batch_size = kMaxMicroBatchSize;
  EXPECT_TRUE(big.validate().ok()) << big.validate().message();
}

TEST(Partition, RepeatCountsDoNotWrap) {
  // 4294967298 = 2^32 + 2 was cut to int 2 and accepted as two layers.
  auto r = partition_layers(cfg(4), 2, "E,t*4294967298|t*2,L");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("bad repeat count in 't*4294967298'"), std::string::npos)
      << r.status().message();
}

TEST(MegatronSplit, HugeCountsDoNotOverflow) {
  MegatronSplit f;
  f.first_stage_layers = 2147483647;
  f.last_stage_layers = 2147483647;  // their sum overflowed int
  auto l = megatron_layout(cfg(8), 4, f);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("--decoder-first-pipeline-num-layers 2147483647: more than "
                                      "--num-layers 8"),
            std::string::npos)
      << l.status().message();
}

}  // namespace
}  // namespace tightpipe::nn
