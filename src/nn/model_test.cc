// Rung 2 of the test ladder: the whole model on one rank (finite-difference gradient check against
// a double-precision reference built from the *_ref kernels, step-0 loss), the I/W contract,
// stage splits, microbatches in flight, recomputation and the stash accounting.
#include "tightpipe/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "model_testing.h"
#include "tightpipe/base.h"
#include "tightpipe/kernels.h"

namespace tightpipe::nn {
namespace {

using DS = std::span<const double>;
using namespace model_testing;  // NOLINT(build/namespaces): the shared model test helpers

double reference_loss(const GptConfig& c, const std::vector<ParamTensor>& ts,
                      const std::vector<double>& P, const Data& d) {
  std::map<std::string, DS> w;
  for (const auto& t : ts) w[t.name] = DS(P).subspan(t.offset, t.size);
  const int B = c.micro_batch_size, T = c.seq_length, C = c.hidden_size, V = c.vocab_size,
            NH = c.num_heads, N = B * T;
  std::vector<double> x(N * C), ln(N * C), mean(N), rstd(N), qkv(N * 3 * C), y(N * C),
      att(size_t(B) * NH * T * T), tmp(N * C), res2(N * C), fch(N * 4 * C), fcg(N * 4 * C),
      logits(N * V), probs(N * V);
  encoder_forward_ref<double>(x, d.tokens, w["wte"], w["wpe"], B, T, C, V);
  for (int l = 0; l < c.num_layers; ++l) {
    auto W = [&](const char* s) { return w["h" + std::to_string(l) + "." + s]; };
    layernorm_forward_ref<double>(ln, mean, rstd, DS(x), W("ln1.weight"), W("ln1.bias"), N, C);
    matmul_forward_ref<double>(qkv, DS(ln), W("attn.qkv.weight"), W("attn.qkv.bias"), N, C, 3 * C);
    attention_forward_ref<double>(y, att, DS(qkv), B, T, C, NH);
    matmul_forward_ref<double>(tmp, DS(y), W("attn.proj.weight"), W("attn.proj.bias"), N, C, C);
    residual_forward_ref<double>(res2, DS(x), DS(tmp), N * C);
    layernorm_forward_ref<double>(ln, mean, rstd, DS(res2), W("ln2.weight"), W("ln2.bias"), N, C);
    matmul_forward_ref<double>(fch, DS(ln), W("mlp.fc.weight"), W("mlp.fc.bias"), N, C, 4 * C);
    gelu_forward_ref<double>(fcg, DS(fch), N * 4 * C);
    matmul_forward_ref<double>(tmp, DS(fcg), W("mlp.proj.weight"), W("mlp.proj.bias"), N, 4 * C, C);
    residual_forward_ref<double>(x, DS(res2), DS(tmp), N * C);
  }
  layernorm_forward_ref<double>(ln, mean, rstd, DS(x), w["lnf.weight"], w["lnf.bias"], N, C);
  matmul_forward_ref<double>(logits, DS(ln), w["lm_head.weight"], {}, N, C, V);
  return softmax_xent_forward_ref<double>(probs, DS(logits), d.targets, N, V) / N;
}

GptConfig tiny() {
  GptConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_heads = 2;
  c.seq_length = 8;
  c.micro_batch_size = 2;
  return c;
}
StageSpec whole(const GptConfig& c) { return StageSpec{0, c.num_layers, true, true}; }

TEST(Model, Step0LossIsNearLn256) {
  GptConfig c;  // 4 layers, 128 wide, 4 heads, T=128
  c.micro_batch_size = 4;
  GptStage m(c, whole(c), 1234);
  Data d = text_batch(c, 1);
  const float scale = 1.0f / float(c.tokens_per_microbatch());
  const double loss = m.forward(0, std::span<const int32_t>(d.tokens), d.targets, scale).loss;
  m.discard(0);
  EXPECT_NEAR(loss, std::log(256.0), 0.03 * std::log(256.0)) << "step-0 loss " << loss;
}

TEST(Model, WholeModelFiniteDifferenceGradientCheck) {
  const GptConfig c = tiny();
  GptStage m(c, whole(c), 7);
  // Larger weights than the init so every nonlinearity is exercised.
  Rng r(99);
  for (const ParamTensor& t : m.tensors()) {
    const bool ln_weight =
        t.name.find("ln") != std::string::npos && t.name.find("weight") != std::string::npos;
    for (size_t i = 0; i < t.size; ++i)
      m.params()[t.offset + i] = (ln_weight ? 1.0f : 0.0f) + 0.3f * r.normal();
  }
  Data d = text_batch(c, 2);
  const float scale = 1.0f / float(c.tokens_per_microbatch());
  m.zero_grads();
  const double loss = m.forward(0, std::span<const int32_t>(d.tokens), d.targets, scale).loss;
  m.backward(0);
  std::vector<double> P(m.params().begin(), m.params().end());
  const double ref = reference_loss(c, m.tensors(), P, d);
  EXPECT_NEAR(loss, ref, 1e-5 * ref);
  Rng pick(5);
  int checked = 0;
  for (const ParamTensor& t : m.tensors()) {
    double gmax = 0;
    for (size_t i = 0; i < t.size; ++i)
      gmax = std::max(gmax, double(std::abs(m.grads()[t.offset + i])));
    for (int k = 0; k < 6; ++k) {
      size_t i = t.offset + pick.below(t.size);
      if (t.name == "wte") i = t.offset + size_t(d.tokens[k]) * c.hidden_size + k;  // used rows
      const double keep = P[i], eps = 1e-5;
      P[i] = keep + eps;
      const double lp = reference_loss(c, m.tensors(), P, d);
      P[i] = keep - eps;
      const double lm = reference_loss(c, m.tensors(), P, d);
      P[i] = keep;
      const double fd = (lp - lm) / (2 * eps);
      EXPECT_NEAR(m.grads()[i], fd, 2e-3 * std::abs(fd) + 1e-4 * gmax + 1e-7)
          << t.name << " element " << i - t.offset;
      ++checked;
    }
  }
  EXPECT_GE(checked, 6 * 29);
}

TEST(Model, FusedBackwardEqualsInputThenWeightBitForBit) {
  GptConfig c = tiny();
  c.num_layers = 3;
  auto a = make_stages(c, 2), b = make_stages(c, 2);
  Data d = text_batch(c, 3);
  const double la = run_pipeline(a, 0, d, 0.01f, /*fused=*/true);
  const double lb = run_pipeline(b, 0, d, 0.01f, /*fused=*/false);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(named(a, true), named(b, true));
}

TEST(Model, AnySplitHasTheSameWeightsLossAndGradients) {
  GptConfig c = tiny();
  c.num_layers = 4;
  auto one = make_stages(c, 1);
  const auto w1 = named(one, false);
  Data d = text_batch(c, 4);
  const double l1 = run_pipeline(one, 0, d, 0.02f, true);
  const auto g1 = named(one, true);
  for (int S : {2, 3, 4}) {
    auto many = make_stages(c, S);
    EXPECT_EQ(named(many, false), w1) << S << " stages: initial weights differ";
    EXPECT_EQ(run_pipeline(many, 0, d, 0.02f, false), l1) << S << " stages";
    EXPECT_EQ(named(many, true), g1) << S << " stages";
  }
}

TEST(Model, MicrobatchesInFlightInAnyOrder) {
  const GptConfig c = tiny();
  auto seq = make_stages(c, 1), ooo = make_stages(c, 1);
  std::vector<Data> d = {text_batch(c, 10), text_batch(c, 11), text_batch(c, 12)};
  const float scale = 1.0f / 48;
  double l_seq = 0, l_ooo = 0;
  for (int mb = 0; mb < 3; ++mb) {
    l_seq += seq[0].forward(mb, std::span<const int32_t>(d[mb].tokens), d[mb].targets, scale).loss;
    seq[0].backward(mb);
  }
  GptStage& s = ooo[0];
  for (int mb : {2, 0, 1})
    l_ooo += s.forward(mb, std::span<const int32_t>(d[mb].tokens), d[mb].targets, scale).loss;
  const size_t after_f = s.stash_bytes();
  s.backward_input(0);
  EXPECT_LT(s.stash_bytes(), after_f) << "I must free what W does not need";
  s.backward_input(2);
  s.backward_weight(2);
  s.backward_input(1);
  s.backward_weight(0);
  s.backward_weight(1);
  EXPECT_EQ(s.stash_bytes(), 0u);
  EXPECT_NEAR(l_ooo, l_seq, 1e-6);
  auto ga = named(seq, true), gb = named(ooo, true);
  for (auto& [name, g] : ga)
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(gb[name][i], g[i], 1e-6 + 1e-5 * std::abs(g[i])) << name;
}

TEST(Model, RecomputeGivesIdenticalResultsAndLowerStash) {
  GptConfig c = tiny();
  c.num_layers = 4;
  std::vector<Data> d = {text_batch(c, 20), text_batch(c, 21)};
  // Straight version: F of 2 microbatches on both stages, then I and W.
  auto drive = [&](const RecomputeOptions& rc, size_t& peak_f, size_t& peak_all) {
    auto st = make_stages(c, 2, rc);
    double loss = 0;
    std::vector<std::vector<float>> act(2);
    for (int mb = 0; mb < 2; ++mb) {
      auto o = st[0].forward(mb, std::span<const int32_t>(d[mb].tokens));
      act[mb].assign(o.activations.begin(), o.activations.end());
      loss += st[1].forward(mb, std::span<const float>(act[mb]), d[mb].targets, 1.0f / 32).loss;
    }
    peak_f = st[0].peak_stash_bytes() + st[1].peak_stash_bytes();
    for (int mb = 0; mb < 2; ++mb) {
      auto g = st[1].backward_input(mb);
      std::vector<float> gc(g.begin(), g.end());
      st[1].backward_weight(mb);
      st[0].backward(mb, gc);
    }
    peak_all = st[0].peak_stash_bytes() + st[1].peak_stash_bytes();
    EXPECT_EQ(st[0].stash_bytes() + st[1].stash_bytes(), 0u);
    auto g = named(st, true);
    return std::make_pair(loss, g);
  };
  size_t pf0, pa0, pf1, pa1, pf2, pa2;
  auto base = drive({}, pf0, pa0);
  auto rc1 = drive({"full", "uniform", 1}, pf1, pa1);
  auto rc2 = drive({"full", "uniform", 2}, pf2, pa2);
  EXPECT_EQ(rc1.first, base.first);
  EXPECT_EQ(rc2.first, base.first);
  EXPECT_EQ(rc1.second, base.second);
  EXPECT_EQ(rc2.second, base.second);
  EXPECT_LT(pf1, pf0 / 2) << "recompute must cut the stash held after F";
  EXPECT_LT(pf2, pf0);
  EXPECT_LT(pa1, pa0);
  std::printf("peak stash after F: plain %zu, recompute N=2 %zu, N=1 %zu bytes\n", pf0, pf2, pf1);
}

TEST(Model, TrainingStepsReduceLossOnAFixedBatch) {
  const GptConfig c = tiny();
  GptStage m(c, whole(c), 3);
  Data d = text_batch(c, 30);
  std::vector<MicroBatch> mbs = {{d.tokens, d.targets}};
  AdamWConfig opt;
  const double first = train_step(m, mbs, opt, 3e-3f, 1.0f).loss;
  double last = first;
  for (int i = 0; i < 30; ++i) last = train_step(m, mbs, opt, 3e-3f, 1.0f).loss;
  EXPECT_LT(last, first - 1.0);
  EXPECT_NEAR(evaluate_loss(m, mbs), train_step(m, mbs, opt, 0.0f, 0.0f).loss, 1e-9);
  auto p = next_token_probs(m, std::vector<int32_t>(d.tokens.begin(), d.tokens.begin() + 5));
  double sum = 0;
  for (float x : p) sum += x;
  EXPECT_NEAR(sum, 1.0, 1e-4);
  EXPECT_EQ(m.stash_bytes(), 0u);
}

TEST(Model, ClippingAcrossStagesMatchesOneStage) {
  GptConfig c = tiny();
  c.num_layers = 3;
  auto one = make_stages(c, 1), many = make_stages(c, 3);
  Data d = text_batch(c, 40);
  run_pipeline(one, 0, d, 0.05f, true);
  run_pipeline(many, 0, d, 0.05f, true);
  double sq = 0;
  for (auto& s : many) sq += s.grad_sq_norm();  // what the executor reduces across ranks
  EXPECT_NEAR(sq, one[0].grad_sq_norm(), 1e-9 * sq);
  const float k = clip_scale(sq, 0.1f);
  ASSERT_LT(k, 1.0f);
  one[0].scale_grads(clip_scale(one[0].grad_sq_norm(), 0.1f));
  for (auto& s : many) s.scale_grads(k);
  for (auto& s : many) s.optimizer_step(AdamWConfig{}, 1e-3f);
  one[0].optimizer_step(AdamWConfig{}, 1e-3f);
  auto pa = named(many, false), pb = named(one, false);
  for (auto& [name, w] : pb)
    for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(pa[name][i], w[i], 1e-6) << name;
}

}  // namespace
}  // namespace tightpipe::nn
