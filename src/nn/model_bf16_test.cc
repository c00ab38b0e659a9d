// The GPT stage in bf16 (Precision::kBf16, docs/bf16.md): pipeline splits, fused B, recompute and
// microbatch order are bit-identical to the one-stage model; gradients against the FP32 model; the
// stash about half of FP32's; the bf16 weight copy follows every weight change; training works.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "bf16_testing.h"
#include "model_testing.h"
#include "tightpipe/base.h"
#include "tightpipe/kernels.h"
#include "tightpipe/kernels_bf16.h"
#include "tightpipe/model.h"

namespace tightpipe::nn {
namespace {

using model_testing::Data;
using model_testing::make_stages;
using model_testing::named;
using model_testing::text_batch;

using bf16_testing::kU16;

GptConfig tiny16(int layers = 4) {
  GptConfig c;
  c.num_layers = layers;
  c.hidden_size = 32;
  c.num_heads = 2;
  c.seq_length = 16;
  c.micro_batch_size = 2;
  c.precision = Precision::kBf16;
  return c;
}

bool bf16_exact(std::span<const float> v) {
  for (float x : v)
    if (bf16_to_float(bf16_from_float(x)) != x) return false;
  return true;
}

// F, I, W of one microbatch through the stages; checks that every boundary value is bf16-exact and
// collects the gradients each stage returns.
double run_checked(std::vector<GptStage>& stages, int mb, const Data& d, float scale, bool fused,
                   std::vector<std::vector<float>>* returned = nullptr) {
  return model_testing::run_pipeline(
      stages, mb, d, scale, fused,
      [](std::span<const float> v, bool gradient, size_t from) {
        EXPECT_TRUE(bf16_exact(v))
            << (gradient ? "gradient" : "activation") << " out of stage " << from;
      },
      returned);
}

TEST(ModelBf16, AnySplitIsBitIdenticalToOneStage) {
  const GptConfig c = tiny16(4);
  const Data d = text_batch(c, 4);
  auto one = make_stages(c, 1);
  const double l1 = run_checked(one, 0, d, 0.02f, true);
  const auto g1 = named(one, true);
  for (int S : {2, 3}) {
    auto many = make_stages(c, S);
    EXPECT_EQ(run_checked(many, 0, d, 0.02f, /*fused=*/S == 3), l1) << S << " stages";
    EXPECT_EQ(named(many, true), g1) << S << " stages";
  }  // Stages without blocks: the embedding alone, the head alone.
  auto specs = partition_layers(c, 4, "E|t*2|t*2|L");
  ASSERT_TRUE(specs.ok()) << specs.status().message();
  std::vector<GptStage> edge;
  for (const StageSpec& s : *specs) edge.emplace_back(c, s, 42);
  EXPECT_EQ(run_checked(edge, 0, d, 0.02f, false), l1);
  EXPECT_EQ(named(edge, true), g1);
}

TEST(ModelBf16, ReturnedGradientsAgreeAcrossSplitsWithTheSameCut) {
  const GptConfig c = tiny16(4);
  const Data d = text_batch(c, 5);
  // Same cut after block 2, reached by two different layouts of the front part.
  auto two = partition_layers(c, 2, "E,t*2|t*2,L");
  auto three = partition_layers(c, 3, "E,t|t|t*2,L");
  ASSERT_TRUE(two.ok() && three.ok());
  std::vector<GptStage> a, b;
  for (const StageSpec& s : *two) a.emplace_back(c, s, 42);
  for (const StageSpec& s : *three) b.emplace_back(c, s, 42);
  std::vector<std::vector<float>> ra, rb;
  EXPECT_EQ(run_checked(a, 0, d, 0.02f, false, &ra), run_checked(b, 0, d, 0.02f, false, &rb));
  ASSERT_EQ(ra.size(), 1u);
  ASSERT_EQ(rb.size(), 2u);
  EXPECT_EQ(ra[0], rb[0]) << "gradient at the cut after block 2";
  EXPECT_EQ(named(a, true), named(b, true));
}

TEST(ModelBf16, FusedBackwardEqualsInputThenWeightBitForBit) {
  const GptConfig c = tiny16(3);
  auto a = make_stages(c, 2), b = make_stages(c, 2);
  const Data d = text_batch(c, 3);
  std::vector<std::vector<float>> ra, rb;
  EXPECT_EQ(run_checked(a, 0, d, 0.01f, true, &ra), run_checked(b, 0, d, 0.01f, false, &rb));
  EXPECT_EQ(ra, rb);
  EXPECT_EQ(named(a, true), named(b, true));
}

TEST(ModelBf16, RecomputeIsBitIdentical) {
  const GptConfig c = tiny16(4);
  const Data d = text_batch(c, 6);
  auto base = make_stages(c, 2);
  std::vector<std::vector<float>> r0;
  const double l0 = run_checked(base, 0, d, 0.03f, false, &r0);
  for (int n : {1, 2}) {
    auto rc = make_stages(c, 2, {"full", "uniform", n});
    std::vector<std::vector<float>> r;
    EXPECT_EQ(run_checked(rc, 0, d, 0.03f, n == 2, &r), l0) << "N=" << n;
    EXPECT_EQ(r, r0) << "N=" << n;
    EXPECT_EQ(named(rc, true), named(base, true)) << "N=" << n;
  }
}

TEST(ModelBf16, MicrobatchesInFlightInAnyOrderAreBitIdentical) {
  const GptConfig c = tiny16(2);
  auto seq = make_stages(c, 1), ooo = make_stages(c, 1);
  std::vector<Data> d = {text_batch(c, 10), text_batch(c, 11), text_batch(c, 12)};
  const float scale = 1.0f / 96;
  for (int mb = 0; mb < 3; ++mb) {
    seq[0].forward(mb, std::span<const int32_t>(d[mb].tokens), d[mb].targets, scale);
    seq[0].backward(mb);
  }
  GptStage& s = ooo[0];
  for (int mb : {2, 0, 1})
    s.forward(mb, std::span<const int32_t>(d[mb].tokens), d[mb].targets, scale);
  s.backward_input(0);
  s.backward_input(2);
  s.backward_weight(2);
  s.backward_input(1);
  s.backward_weight(0);
  s.backward_weight(1);
  EXPECT_EQ(s.stash_bytes(), 0u);
  // Gradient sums in another order differ by FP32 rounding only.
  auto ga = named(seq, true), gb = named(ooo, true);
  for (auto& [name, g] : ga)
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(gb[name][i], g[i], 1e-6 + 1e-5 * std::abs(g[i])) << name;
}

// Gradients of the bf16 model against the FP32 model with the same weights. Bound, normwise per
// tensor: every bf16 rounding perturbs one value by at most u16 relative; a gradient depends on R
// rounded values along its longest chain (forward per block: x, ln1, qkv, att, atty, ln2, fch,
// fchg = 8; the head: lnf; backward per block: dfch, dres2, ds (attention), dqkv, dx = 5; the
// head: dlogits, dx): R = 13 L + 3. To first order the relative error of the tensor is at most
// R u16 times the gain of the chain; at init the model is near linear with unit gain (LayerNorm
// renormalizes, residual weights are small), which is the assumption this bound rests on.
TEST(ModelBf16, GradientsMatchFp32WithinDerivedBound) {
  GptConfig c16 = tiny16(2);
  GptConfig c32 = c16;
  c32.precision = Precision::kFp32;
  GptStage m16(c16, StageSpec{0, 2, true, true}, 9), m32(c32, StageSpec{0, 2, true, true}, 9);
  ASSERT_TRUE(std::equal(m16.params().begin(), m16.params().end(), m32.params().begin()));
  const Data d = text_batch(c16, 7);
  const float scale = 1.0f / float(c16.tokens_per_microbatch());
  const double l16 = m16.forward(0, std::span<const int32_t>(d.tokens), d.targets, scale).loss;
  const double l32 = m32.forward(0, std::span<const int32_t>(d.tokens), d.targets, scale).loss;
  m16.backward_input(0);
  m16.backward_weight(0);
  m32.backward(0);
  const double R = 13.0 * c16.num_layers + 3;
  EXPECT_NE(l16, l32) << "bf16 must not silently run FP32";
  EXPECT_NEAR(l16, l32, R * kU16 * std::abs(l32));
  double worst = 0;
  for (const ParamTensor& t : m32.tensors()) {
    double num = 0, den = 0;
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      const double e = double(m16.grads()[i]) - m32.grads()[i];
      num += e * e;
      den += double(m32.grads()[i]) * m32.grads()[i];
    }
    const double rel = std::sqrt(num / den);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, R * kU16) << t.name;
  }
  std::printf("worst per-tensor relative L2 gradient error bf16 vs FP32: %.4f (bound %.4f)\n",
              worst, R * kU16);
}

TEST(ModelBf16, StashIsAboutHalfOfFp32) {
  // Wide enough that the blocks, not the (N,V) FP32 softmax both keep after F, dominate.
  GptConfig c16 = tiny16(4);
  c16.hidden_size = 64;
  c16.num_heads = 4;
  c16.seq_length = 32;
  GptConfig c32 = c16;
  c32.precision = Precision::kFp32;
  const Data d = text_batch(c16, 8);
  auto peaks = [&](const GptConfig& c, size_t& after_f, size_t& whole) {
    GptStage m(c, StageSpec{0, c.num_layers, true, true}, 1);
    m.forward(0, std::span<const int32_t>(d.tokens), d.targets, 0.01f);
    after_f = m.stash_bytes();
    m.backward_input(0);
    m.backward_weight(0);
    whole = m.peak_stash_bytes();
    EXPECT_EQ(m.stash_bytes(), 0u);
  };
  size_t f16, w16, f32, w32;
  peaks(c16, f16, w16);
  peaks(c32, f32, w32);
  std::printf("stash after F: bf16 %zu, fp32 %zu (%.3f); peak: bf16 %zu, fp32 %zu (%.3f)\n", f16,
              f32, double(f16) / f32, w16, w32, double(w16) / w32);
  EXPECT_LT(double(f16), 0.6 * double(f32));
  EXPECT_LT(double(w16), 0.6 * double(w32));
  GptStage m(c16, StageSpec{0, 2, true, true}, 1);
  const size_t C = 64, V = 256;
  EXPECT_EQ(m.bf16_weight_bytes(), 2 * (2 * 12 * C * C + V * C));
  GptStage f(c32, StageSpec{0, 2, true, true}, 1);
  EXPECT_EQ(f.bf16_weight_bytes(), 0u);
}

double loss_of(GptStage& m, const Data& d) {
  const double l = m.forward(0, std::span<const int32_t>(d.tokens), d.targets, 1.0f).loss;
  m.discard(0);
  return l;
}

TEST(ModelBf16, WeightCopyFollowsParamsWritesAndOptimizerSteps) {
  const GptConfig c = tiny16(2);
  const Data d = text_batch(c, 9);
  GptStage a(c, StageSpec{0, 2, true, true}, 1), b(c, StageSpec{0, 2, true, true}, 2);
  const double la = loss_of(a, d), lb = loss_of(b, d);
  ASSERT_NE(la, lb);
  // A write through params() after a forward (the copy was made): the next F uses the new weights.
  std::copy(b.params().begin(), b.params().end(), a.params().begin());
  EXPECT_EQ(loss_of(a, d), lb);
  // An optimizer step changes the weights: the next F uses them, as a fresh model holding them.
  std::vector<MicroBatch> mbs = {{d.tokens, d.targets}};
  train_step(a, mbs, AdamWConfig{}, 1e-2f, 1.0f);
  GptStage fresh(c, StageSpec{0, 2, true, true}, 3);
  const std::span<const float> pa = std::as_const(a).params();
  std::copy(pa.begin(), pa.end(), fresh.params().begin());
  const double after = loss_of(a, d);
  EXPECT_NE(after, lb);
  EXPECT_EQ(after, loss_of(fresh, d));
}

TEST(ModelBf16, TrainingReducesLossLikeFp32) {
  GptConfig c16 = tiny16(2);
  GptConfig c32 = c16;
  c32.precision = Precision::kFp32;
  GptStage m16(c16, StageSpec{0, 2, true, true}, 3), m32(c32, StageSpec{0, 2, true, true}, 3);
  const Data d = text_batch(c16, 30);
  std::vector<MicroBatch> mbs = {{d.tokens, d.targets}};
  AdamWConfig opt;
  double f16 = 0, f32 = 0, l16 = 0, l32 = 0;
  for (int i = 0; i < 30; ++i) {
    l16 = train_step(m16, mbs, opt, 3e-3f, 1.0f).loss;
    l32 = train_step(m32, mbs, opt, 3e-3f, 1.0f).loss;
    if (i == 0) {
      f16 = l16;
      f32 = l32;
    }
  }
  std::printf("30 steps: bf16 %.4f -> %.4f, fp32 %.4f -> %.4f\n", f16, l16, f32, l32);
  EXPECT_LT(l16, f16 - 1.0);
  // Same drop within 10% of FP32's.
  EXPECT_NEAR(f16 - l16, f32 - l32, 0.1 * (f32 - l32));
  EXPECT_EQ(m16.stash_bytes(), 0u);
}

}  // namespace
}  // namespace tightpipe::nn
