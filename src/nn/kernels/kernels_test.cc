// Rung 1 of the test ladder: every optimized kernel against its naive twin (float), and the twins'
// backward_input / backward_weight against central finite differences in double precision.
#include "tightpipe/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "tightpipe/base.h"

namespace tightpipe::nn {
namespace {

template <typename F = float>
std::vector<F> randn(size_t n, uint64_t seed, double scale = 1.0) {
  Rng r(seed);
  std::vector<F> v(n);
  for (auto& x : v) x = F(scale * r.normal());
  return v;
}
std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
void expect_close(std::span<const float> a, std::span<const float> b, double atol, double rtol,
                  const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], atol + rtol * std::abs(b[i])) << what << " at " << i;
  }
}
void expect_close_d(std::span<const double> a, std::span<const double> b, double atol, double rtol,
                    const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], atol + rtol * std::abs(b[i])) << what << " at " << i;
  }
}
// Central differences of loss() w.r.t. every element of x (double).
std::vector<double> fd_grad(std::vector<double>& x, const std::function<double()>& loss,
                            double eps = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + eps;
    const double lp = loss();
    x[i] = keep - eps;
    const double lm = loss();
    x[i] = keep;
    g[i] = (lp - lm) / (2 * eps);
  }
  return g;
}
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
using DS = std::span<const double>;
using FS = std::span<const float>;

TEST(Kernels, MatmulMatchesRefAndFiniteDifferences) {
  const int N = 7, IC = 5, OC = 6;
  auto inp = randn(N * IC, 1), w = randn(OC * IC, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
  std::vector<float> out(N * OC), out_ref(N * OC);
  matmul_forward(out, inp, w, b, N, IC, OC);
  matmul_forward_ref<float>(out_ref, FS(inp), FS(w), FS(b), N, IC, OC);
  expect_close(out, out_ref, 1e-5, 1e-5, "forward");
  matmul_forward(out, inp, w, {}, N, IC, OC);  // no bias
  matmul_forward_ref<float>(out_ref, FS(inp), FS(w), {}, N, IC, OC);
  expect_close(out, out_ref, 1e-5, 1e-5, "forward without bias");
  std::vector<float> dinp(N * IC, 99.f), dinp_ref(N * IC);
  matmul_backward_input(dinp, dout, w, N, IC, OC);
  matmul_backward_input_ref<float>(dinp_ref, FS(dout), FS(w), N, IC, OC);
  expect_close(dinp, dinp_ref, 1e-5, 1e-5, "backward_input");
  std::vector<float> dw(OC * IC, 0.5f), db(OC, 0.25f), dw_ref = dw, db_ref = db;
  matmul_backward_weight(dw, db, dout, inp, N, IC, OC);
  matmul_backward_weight_ref<float>(dw_ref, db_ref, FS(dout), FS(inp), N, IC, OC);
  expect_close(dw, dw_ref, 1e-5, 1e-5, "backward_weight (accumulates onto 0.5)");
  expect_close(db, db_ref, 1e-5, 1e-5, "bias grad");
  // FD in double of loss = <dout, out>.
  auto xi = to_double(inp), xw = to_double(w), xb = to_double(b), R = to_double(dout);
  std::vector<double> o(N * OC);
  auto loss = [&] {
    matmul_forward_ref<double>(o, DS(xi), DS(xw), DS(xb), N, IC, OC);
    return dot(o, R);
  };
  std::vector<double> gi(N * IC), gw(OC * IC, 0.0), gb(OC, 0.0);
  matmul_backward_input_ref<double>(gi, DS(R), DS(xw), N, IC, OC);
  matmul_backward_weight_ref<double>(gw, gb, DS(R), DS(xi), N, IC, OC);
  expect_close_d(gi, fd_grad(xi, loss), 1e-7, 1e-6, "fd input");
  expect_close_d(gw, fd_grad(xw, loss), 1e-7, 1e-6, "fd weight");
  expect_close_d(gb, fd_grad(xb, loss), 1e-7, 1e-6, "fd bias");
}

TEST(Kernels, LayernormMatchesRefAndFiniteDifferences) {
  const int N = 5, C = 12;  // C not a multiple of 8 exercises the tails
  auto inp = randn(N * C, 5, 2.0), w = randn(C, 6), b = randn(C, 7), dout = randn(N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N), out_r(N * C), mean_r(N), rstd_r(N);
  layernorm_forward(out, mean, rstd, inp, w, b, N, C);
  layernorm_forward_ref<float>(out_r, mean_r, rstd_r, FS(inp), FS(w), FS(b), N, C);
  expect_close(out, out_r, 1e-5, 1e-5, "forward");
  std::vector<float> di(N * C), di_r(N * C);
  layernorm_backward_input(di, dout, inp, mean, rstd, w, N, C);
  layernorm_backward_input_ref<float>(di_r, FS(dout), FS(inp), FS(mean), FS(rstd), FS(w), N, C);
  expect_close(di, di_r, 1e-5, 1e-4, "backward_input");
  std::vector<float> dw(C, 1.f), db(C, 2.f), dw_r = dw, db_r = db;
  layernorm_backward_weight(dw, db, dout, inp, mean, rstd, N, C);
  layernorm_backward_weight_ref<float>(dw_r, db_r, FS(dout), FS(inp), FS(mean), FS(rstd), N, C);
  expect_close(dw, dw_r, 1e-5, 1e-5, "dweight");
  expect_close(db, db_r, 1e-5, 1e-5, "dbias");
  auto xi = to_double(inp), xw = to_double(w), xb = to_double(b), R = to_double(dout);
  std::vector<double> o(N * C), m(N), s(N);
  auto loss = [&] {
    layernorm_forward_ref<double>(o, m, s, DS(xi), DS(xw), DS(xb), N, C);
    return dot(o, R);
  };
  loss();
  std::vector<double> gi(N * C), gw(C, 0.0), gb(C, 0.0);
  const auto m0 = m, s0 = s;
  layernorm_backward_input_ref<double>(gi, DS(R), DS(xi), DS(m0), DS(s0), DS(xw), N, C);
  layernorm_backward_weight_ref<double>(gw, gb, DS(R), DS(xi), DS(m0), DS(s0), N, C);
  expect_close_d(gi, fd_grad(xi, loss), 1e-7, 1e-5, "fd input");
  expect_close_d(gw, fd_grad(xw, loss), 1e-7, 1e-6, "fd weight");
  expect_close_d(gb, fd_grad(xb, loss), 1e-7, 1e-6, "fd bias");
}

TEST(Kernels, AttentionMatchesRefAndFiniteDifferences) {
  // T = 70 > the 64-row block, so the blocked path is exercised across a block edge.
  for (const auto& shape : std::vector<std::array<int, 4>>{{2, 5, 8, 2}, {1, 70, 8, 2}}) {
    // Plain ints, not a structured binding: clang 14 (the sanitizer lane) cannot capture one.
    const int B = shape[0], T = shape[1], C = shape[2], NH = shape[3];
    auto qkv = randn(B * T * 3 * C, 9, 0.7), dout = randn(B * T * C, 10);
    std::vector<float> out(B * T * C), att(B * NH * T * T, 7.f), out_r(B * T * C),
        att_r(B * NH * T * T);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_forward_ref<float>(out_r, att_r, FS(qkv), B, T, C, NH);
    expect_close(out, out_r, 1e-5, 1e-4, "forward");
    expect_close(att, att_r, 1e-6, 1e-4, "att");
    std::vector<float> dq(B * T * 3 * C, 5.f), dq_r(B * T * 3 * C), scratch(T * T);
    attention_backward_input(dq, scratch, dout, qkv, att, B, T, C, NH);
    attention_backward_input_ref<float>(dq_r, FS(dout), FS(qkv), FS(att_r), B, T, C, NH);
    expect_close(dq, dq_r, 1e-5, 1e-4, "backward_input");
    if (T > 10) continue;  // FD on the small shape only
    auto xq = to_double(qkv), R = to_double(dout);
    std::vector<double> o(B * T * C), a(B * NH * T * T);
    auto loss = [&] {
      attention_forward_ref<double>(o, a, DS(xq), B, T, C, NH);
      return dot(o, R);
    };
    loss();
    std::vector<double> g(B * T * 3 * C);
    attention_backward_input_ref<double>(g, DS(R), DS(xq), DS(a), B, T, C, NH);
    expect_close_d(g, fd_grad(xq, loss), 1e-7, 1e-5, "fd qkv");
  }
}

TEST(Kernels, GeluMatchesRefAndFiniteDifferences) {
  const int N = 1000;
  auto x = randn(N, 11, 3.0), dout = randn(N, 12);
  x[0] = 0;
  x[1] = -9;
  x[2] = 9;
  std::vector<float> o(N), o_r(N), d(N), d_r(N);
  gelu_forward(o, x, N);
  gelu_forward_ref<float>(o_r, FS(x), N);
  expect_close(o, o_r, 3e-6, 1e-5, "forward");
  gelu_backward_input(d, dout, x, N);
  gelu_backward_input_ref<float>(d_r, FS(dout), FS(x), N);
  expect_close(d, d_r, 3e-6, 1e-5, "backward_input");
  auto xd = to_double(std::vector<float>(x.begin(), x.begin() + 50));
  auto R = to_double(std::vector<float>(dout.begin(), dout.begin() + 50));
  std::vector<double> od(50), g(50);
  auto loss = [&] {
    gelu_forward_ref<double>(od, DS(xd), 50);
    return dot(od, R);
  };
  gelu_backward_input_ref<double>(g, DS(R), DS(xd), 50);
  expect_close_d(g, fd_grad(xd, loss), 1e-7, 1e-6, "fd");
}

TEST(Kernels, ResidualForwardAndBackwardAccumulate) {
  const int N = 9;
  auto a = randn(N, 13), b = randn(N, 14), d = randn(N, 15);
  std::vector<float> o(N), o_r(N), g(N, 1.f), g_r(N, 1.f);
  residual_forward(o, a, b, N);
  residual_forward_ref<float>(o_r, FS(a), FS(b), N);
  EXPECT_EQ(o, o_r);
  residual_backward_input(g, d, N);
  residual_backward_input_ref<float>(g_r, FS(d), N);
  EXPECT_EQ(g, g_r);
  EXPECT_FLOAT_EQ(g[3], 1.f + d[3]);
  auto xa = to_double(a), xb = to_double(b), R = to_double(d);
  std::vector<double> od(N), ga(N, 0.0);
  auto loss = [&] {
    residual_forward_ref<double>(od, DS(xa), DS(xb), N);
    return dot(od, R);
  };
  residual_backward_input_ref<double>(ga, DS(R), N);
  expect_close_d(ga, fd_grad(xa, loss), 1e-7, 1e-6, "fd a");
  expect_close_d(ga, fd_grad(xb, loss), 1e-7, 1e-6, "fd b");
}

TEST(Kernels, EncoderMatchesRefAndFiniteDifferences) {
  const int B = 2, T = 3, C = 4, V = 5;
  std::vector<int32_t> tok = {0, 4, 4, 2, 1, 0};
  auto wte = randn(V * C, 16), wpe = randn(T * C, 17), dout = randn(B * T * C, 18);
  std::vector<float> o(B * T * C), o_r(B * T * C);
  encoder_forward(o, tok, wte, wpe, B, T, C, V);
  encoder_forward_ref<float>(o_r, tok, FS(wte), FS(wpe), B, T, C, V);
  EXPECT_EQ(o, o_r);
  std::vector<float> de(V * C, 1.f), dp(T * C, 1.f), de_r = de, dp_r = dp;
  encoder_backward_weight(de, dp, dout, tok, B, T, C, V);
  encoder_backward_weight_ref<float>(de_r, dp_r, FS(dout), tok, B, T, C, V);
  expect_close(de, de_r, 1e-6, 1e-6, "dwte");
  expect_close(dp, dp_r, 1e-6, 1e-6, "dwpe");
  auto xe = to_double(wte), xp = to_double(wpe), R = to_double(dout);
  std::vector<double> od(B * T * C), ge(V * C, 0.0), gp(T * C, 0.0);
  auto loss = [&] {
    encoder_forward_ref<double>(od, tok, DS(xe), DS(xp), B, T, C, V);
    return dot(od, R);
  };
  encoder_backward_weight_ref<double>(ge, gp, DS(R), tok, B, T, C, V);
  expect_close_d(ge, fd_grad(xe, loss), 1e-7, 1e-6, "fd wte");
  expect_close_d(gp, fd_grad(xp, loss), 1e-7, 1e-6, "fd wpe");
}

TEST(Kernels, SoftmaxXentMatchesRefAndFiniteDifferences) {
  const int N = 4, V = 13;
  auto logits = randn(N * V, 19, 3.0);
  std::vector<int32_t> tgt = {0, 12, 5, 5};
  std::vector<float> p(N * V), p_r(N * V);
  const double l = softmax_xent_forward(p, logits, tgt, N, V);
  const double l_r = softmax_xent_forward_ref<float>(p_r, FS(logits), tgt, N, V);
  EXPECT_NEAR(l, l_r, 1e-5 * std::abs(l_r));
  expect_close(p, p_r, 1e-7, 1e-5, "probs");
  std::vector<float> d(N * V), d_r(N * V);
  softmax_xent_backward_input(d, p, tgt, 0.25f, N, V);
  softmax_xent_backward_input_ref<float>(d_r, FS(p_r), tgt, 0.25f, N, V);
  expect_close(d, d_r, 1e-7, 1e-5, "dlogits");
  // in place (probs aliases logits), as the model uses it
  std::vector<float> inplace = logits;
  EXPECT_NEAR(softmax_xent_forward(inplace, inplace, tgt, N, V), l, 1e-9);
  auto x = to_double(logits);
  std::vector<double> pd(N * V), g(N * V);
  auto loss = [&] { return 0.25 * softmax_xent_forward_ref<double>(pd, DS(x), tgt, N, V); };
  loss();
  const auto p0 = pd;
  softmax_xent_backward_input_ref<double>(g, DS(p0), tgt, 0.25, N, V);
  expect_close_d(g, fd_grad(x, loss), 1e-8, 1e-6, "fd logits");
}

TEST(Kernels, AdamWMatchesRef) {
  const int N = 100;
  auto p = randn(N, 20), g = randn(N, 21);
  std::vector<float> m(N, 0.f), v(N, 0.f), p2 = p, m2 = m, v2 = v;
  for (int step = 1; step <= 3; ++step) {
    AdamWHyper h{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
    adamw_update(p, g, m, v, h);
    adamw_update_ref(p2, g, m2, v2, h);
  }
  expect_close(p, p2, 1e-6, 1e-5, "params");
  expect_close(m, m2, 1e-7, 1e-6, "m");
  expect_close(v, v2, 1e-7, 1e-6, "v");
  // First step of Adam moves each weight by about lr (times sign of g) plus decay.
  std::vector<float> q = {1.f}, gg = {0.5f}, mm = {0.f}, vv = {0.f};
  adamw_update(q, gg, mm, vv, AdamWHyper{0.1f, 0.9f, 0.95f, 1e-8f, 0.0f, 1});
  EXPECT_NEAR(q[0], 0.9f, 1e-5);
}

}  // namespace
}  // namespace tightpipe::nn
