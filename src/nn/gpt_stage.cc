// GptStage: wires the kernels over one parameter arena, one gradient arena and a per-microbatch
// stash. See include/tightpipe/model.h for the contract.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tightpipe/base.h"
#include "tightpipe/check.h"
#include "tightpipe/kernels.h"
#include "tightpipe/model.h"

namespace tightpipe::nn {
namespace {
using Buf = std::vector<float>;
using Buf16 = std::vector<Bf16>;

// Parameter slots of one transformer block, in arena order.
enum LayerSlot {
  kLn1W,
  kLn1B,
  kQkvW,
  kQkvB,
  kProjW,
  kProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kFc2W,
  kFc2B,
  kNumSlots
};
constexpr const char* kSlotNames[kNumSlots] = {
    "ln1.weight",       "ln1.bias",       "attn.qkv.weight", "attn.qkv.bias",
    "attn.proj.weight", "attn.proj.bias", "ln2.weight",      "ln2.bias",
    "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};
// Init stream ids: the parameter values depend only on (seed, this id).
constexpr uint64_t kIdWte = 1, kIdWpe = 2, kIdLnfW = 3, kIdLnfB = 4, kIdHead = 5;
uint64_t layer_tensor_id(int global_layer, int slot) {
  return 100 + uint64_t(global_layer) * 16 + slot;
}
}  // namespace

struct GptStage::LayerActs {
  // Kept by F (what I and W read).
  Buf ln1, mean1, rstd1, qkv, atty, att, res2, ln2, mean2, rstd2, fch, fchg;
  // Made by I for W: matmul output gradients, and the LayerNorm weight/bias gradients of this
  // microbatch as partial sums (C each) that W adds into the arena (I never touches the arena).
  Buf dres2, dqkv, dfch, dln1w, dln1b, dln2w, dln2b;
  // bf16 (Precision::kBf16): the matmul inputs above in bf16, and fch (GELU's input; GELU then
  // runs on the rounded value). qkv and att are head-major (kernels_bf16.h qkv_to_heads_bf16).
  Buf16 ln1h, qkvh, attyh, atth, ln2h, fchh, fchgh, dres2h, dqkvh, dfchh;
  template <typename Fn>
  void for_each(Fn&& fn) {
    for (Buf* b : {&ln1, &mean1, &rstd1, &qkv, &atty, &att, &res2, &ln2, &mean2, &rstd2, &fch,
                   &fchg, &dres2, &dqkv, &dfch, &dln1w, &dln1b, &dln2w, &dln2b})
      fn(*b);
  }
  template <typename Fn>
  void for_each16(Fn&& fn) {
    for (Buf16* b : {&ln1h, &qkvh, &attyh, &atth, &ln2h, &fchh, &fchgh, &dres2h, &dqkvh, &dfchh})
      fn(*b);
  }
};

struct GptStage::Stash {
  std::vector<int32_t> tokens, targets;  // (B*T) first / last stage
  float loss_scale = 0;
  std::vector<Buf> x;   // x[l] (B,T,C): input of local block l; x[nl] output
  std::vector<Buf> dx;  // dx[l] (B,T,C): gradient of x[l]
  std::vector<LayerActs> layers;
  Buf lnf, meanf, rstdf, probs;  // last stage: (B,T,C), (B,T), (B,T), (B*T,V)
  Buf dlnfw, dlnfb;              // last stage: final LayerNorm gradient partials (C)
  // bf16: the residual stream at block boundaries (x16[l], dx16[l], l = 0..nl) is bf16; x[nl]
  // (the output of a stage without head) and dx[0] (returned, and the embedding's W input) stay
  // FP32 spans of bf16-exact values because the API hands them out as floats.
  std::vector<Buf16> x16, dx16;
  Buf16 lnfh, dlogitsh;  // last stage: LayerNorm output (B,T,C) and dlogits (B*T,V) after I
  bool input_done = false;
  size_t bytes = 0;
};

struct GptStage::Impl {
  struct LayerPtrs {
    std::array<float*, kNumSlots> p, g;
  };
  std::vector<LayerPtrs> layers;
  float *wte = nullptr, *wpe = nullptr, *lnfw = nullptr, *lnfb = nullptr, *head = nullptr;
  float *dwte = nullptr, *dwpe = nullptr, *dlnfw = nullptr, *dlnfb = nullptr, *dhead = nullptr;
  std::unordered_map<size_t, std::vector<Buf>> pool;  // released stash buffers by size
  Buf scratch_tt;                                     // (T,T) attention backward work space
  Buf tmp;                                            // (B,T,C) transient
  Buf grad_in;                                        // (B,T,C) what backward() returns
  // bf16 only.
  std::unordered_map<size_t, std::vector<Buf16>> pool16;  // released bf16 stash buffers by size
  struct Weights16 {
    const Bf16 *qkv = nullptr, *proj = nullptr, *fc = nullptr, *fc2 = nullptr;
  };
  std::vector<Weights16> w16;    // per local block
  const Bf16* head16 = nullptr;  // (V,C)
  Buf16 w16_arena;               // every matmul weight of the stage, converted once per step
  bool w16_stale = true;         // set by optimizer_step() and the non-const params()
  Buf xf, lnt, dres2f;           // (B,T,C) FP32 transients
  Buf big, big2;                 // (B,T,4C) FP32 transients
  Buf att_scratch;               // attention_bf16_scratch_floats
  Buf16 att_scratch16;           // attention_bf16_scratch_halves
};

GptStage::GptStage(const GptConfig& config, const StageSpec& spec, uint64_t seed,
                   const RecomputeOptions& recompute)
    : config_(config), spec_(spec), recompute_(recompute), impl_(std::make_unique<Impl>()) {
  TP_CHECK(config.validate().ok(), config.validate().to_string());
  TP_CHECK(recompute.validate().ok(), recompute.validate().to_string());
  TP_CHECK(spec.first_layer >= 0 && spec.num_layers >= 0 &&
               spec.first_layer + spec.num_layers <= config.num_layers,
           "stage layers [", spec.first_layer, ", ", spec.first_layer + spec.num_layers,
           ") outside the model's ", config.num_layers);
  const int V = config.vocab_size, T = config.seq_length, C = config.hidden_size;
  const double resid_std = 0.02 / std::sqrt(2.0 * config.num_layers);
  struct Pending {
    uint64_t id;
    float init_std;  // < 0: constant fill with -init_std - 1 (LayerNorm weight 1, bias 0)
  };
  std::vector<Pending> pending;
  size_t offset = 0;
  auto add = [&](std::string name, std::vector<int> shape, bool decay, uint64_t id, float std_) {
    size_t n = 1;
    for (int d : shape) n *= size_t(d);
    tensors_.push_back(ParamTensor{std::move(name), offset, n, std::move(shape), decay});
    pending.push_back({id, std_});
    offset += n;
  };
  constexpr float kOnes = -2.0f, kZeros = -1.0f;
  if (spec.has_embedding) {
    add("wte", {V, C}, true, kIdWte, 0.02f);
    add("wpe", {T, C}, true, kIdWpe, 0.02f);
  }
  for (int i = 0; i < spec.num_layers; ++i) {
    const int gl = spec.first_layer + i;
    // GCC 12 false positive (-O2): -Wrestrict on the inlined memcpy of "literal" +
    // std::string&& (a known libstdc++/GCC 12 bug). Clang has no -Wrestrict.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wrestrict"
#endif
    const std::string p = "h" + std::to_string(gl) + ".";
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
    const std::vector<std::vector<int>> shapes = {{C}, {C}, {3 * C, C}, {3 * C}, {C, C},     {C},
                                                  {C}, {C}, {4 * C, C}, {4 * C}, {C, 4 * C}, {C}};
    for (int s = 0; s < kNumSlots; ++s) {
      const bool matrix = shapes[s].size() == 2;
      float std_ = matrix ? 0.02f : kZeros;
      if (s == kProjW || s == kFc2W) std_ = static_cast<float>(resid_std);
      if (s == kLn1W || s == kLn2W) std_ = kOnes;
      add(p + kSlotNames[s], shapes[s], matrix, layer_tensor_id(gl, s), std_);
    }
  }
  if (spec.has_head) {
    add("lnf.weight", {C}, false, kIdLnfW, kOnes);
    add("lnf.bias", {C}, false, kIdLnfB, kZeros);
    add("lm_head.weight", {V, C}, true, kIdHead, 0.02f);
  }
  params_.assign(offset, 0.0f);
  grads_.assign(offset, 0.0f);
  m_.assign(offset, 0.0f);
  v_.assign(offset, 0.0f);
  const Rng base(seed);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    float* p = params_.data() + tensors_[t].offset;
    const float s = pending[t].init_std;
    if (s == kOnes || s == kZeros) {
      std::fill(p, p + tensors_[t].size, s == kOnes ? 1.0f : 0.0f);
    } else {
      Rng r = base.fork(pending[t].id);
      for (size_t i = 0; i < tensors_[t].size; ++i) p[i] = s * r.normal();
    }
  }
  // Wire pointers.
  size_t k = 0;
  auto next = [&](float*& pp, float*& gp) {
    pp = params_.data() + tensors_[k].offset;
    gp = grads_.data() + tensors_[k].offset;
    ++k;
  };
  if (spec.has_embedding) {
    next(impl_->wte, impl_->dwte);
    next(impl_->wpe, impl_->dwpe);
  }
  impl_->layers.resize(spec.num_layers);
  for (auto& lp : impl_->layers)
    for (int s = 0; s < kNumSlots; ++s) next(lp.p[s], lp.g[s]);
  if (spec.has_head) {
    next(impl_->lnfw, impl_->dlnfw);
    next(impl_->lnfb, impl_->dlnfb);
    next(impl_->head, impl_->dhead);
  }
  impl_->scratch_tt.assign(size_t(T) * T, 0.0f);
  impl_->tmp.assign(size_t(config.micro_batch_size) * T * C, 0.0f);
  if (bf16()) {
    const int B = config.micro_batch_size, NH = config.num_heads;
    const size_t NC = size_t(B) * T * C;
    size_t n16 = 0;
    for (auto& lp : impl_->layers) {
      (void)lp;
      n16 += 12 * size_t(C) * C;
    }
    if (spec.has_head) n16 += size_t(V) * C;
    impl_->w16_arena.resize(n16);
    impl_->w16.resize(spec.num_layers);
    size_t o = 0;
    const Bf16* base16 = impl_->w16_arena.data();
    for (auto& w : impl_->w16) {
      w.qkv = base16 + o;
      o += 3 * size_t(C) * C;
      w.proj = base16 + o;
      o += size_t(C) * C;
      w.fc = base16 + o;
      o += 4 * size_t(C) * C;
      w.fc2 = base16 + o;
      o += 4 * size_t(C) * C;
    }
    if (spec.has_head) impl_->head16 = base16 + o;
    for (Buf* b : {&impl_->xf, &impl_->lnt, &impl_->dres2f}) b->assign(NC, 0.0f);
    impl_->big.assign(4 * NC, 0.0f);
    impl_->big2.assign(4 * NC, 0.0f);
    if (spec.num_layers > 0) {
      impl_->att_scratch.assign(attention_bf16_scratch_floats(B, T, C, NH), 0.0f);
      impl_->att_scratch16.resize(attention_bf16_scratch_halves(B, T, C, NH));
    }
  }
}

size_t GptStage::bf16_weight_bytes() const { return impl_->w16_arena.size() * sizeof(Bf16); }

// One conversion of every matmul weight per optimizer step, shared by all microbatches' F and I.
void GptStage::refresh_bf16_weights() {
  if (!bf16() || !impl_->w16_stale) return;
  const int C = config_.hidden_size, V = config_.vocab_size;
  const size_t c = size_t(C);
  auto conv = [](const Bf16* dst, const float* src, size_t n) {
    float_to_bf16({const_cast<Bf16*>(dst), n}, {src, n});
  };
  for (size_t l = 0; l < impl_->w16.size(); ++l) {
    const auto& P = impl_->layers[l].p;
    const auto& w = impl_->w16[l];
    conv(w.qkv, P[kQkvW], 3 * c * c);
    conv(w.proj, P[kProjW], c * c);
    conv(w.fc, P[kFcW], 4 * c * c);
    conv(w.fc2, P[kFc2W], 4 * c * c);
  }
  if (spec_.has_head) conv(impl_->head16, impl_->head, size_t(V) * c);
  impl_->w16_stale = false;
}

GptStage::~GptStage() = default;
GptStage::GptStage(GptStage&&) noexcept = default;
GptStage& GptStage::operator=(GptStage&&) noexcept = default;

std::span<float> GptStage::params() {
  impl_->w16_stale = true;
  return params_;
}
std::span<const float> GptStage::params() const { return params_; }
std::span<float> GptStage::grads() { return grads_; }
std::span<const float> GptStage::grads() const { return grads_; }

namespace {
// A released stash buffer of n elements from the pool, or a new one.
template <typename T>
std::vector<T> pool_take(std::unordered_map<size_t, std::vector<std::vector<T>>>& pool, size_t n) {
  auto it = pool.find(n);
  if (it == pool.end() || it->second.empty()) return std::vector<T>(n);
  std::vector<T> b = std::move(it->second.back());
  it->second.pop_back();
  return b;
}
// Returns buf to the pool (leaving it empty) and its bytes; 0 for an empty buffer.
template <typename T>
size_t pool_give(std::unordered_map<size_t, std::vector<std::vector<T>>>& pool,
                 std::vector<T>& buf) {
  const size_t n = buf.size();
  if (n == 0) return 0;
  pool[n].push_back(std::move(buf));
  buf = std::vector<T>();
  return n * sizeof(T);
}
}  // namespace

std::vector<float> GptStage::take(size_t n, Stash& s) {
  count_stash(s, n * sizeof(float), true);
  return pool_take(impl_->pool, n);
}

std::vector<Bf16> GptStage::take16(size_t n, Stash& s) {
  count_stash(s, n * sizeof(Bf16), true);
  return pool_take(impl_->pool16, n);
}

void GptStage::give(std::vector<float>& buf, Stash& s) {
  count_stash(s, pool_give(impl_->pool, buf), false);
}

void GptStage::give16(std::vector<Bf16>& buf, Stash& s) {
  count_stash(s, pool_give(impl_->pool16, buf), false);
}

void GptStage::count_stash(Stash& s, size_t bytes, bool taken) {
  if (taken) {
    s.bytes += bytes;
    stash_bytes_ += bytes;
    peak_stash_bytes_ = std::max(peak_stash_bytes_, stash_bytes_);
    return;
  }
  TP_CHECK(s.bytes >= bytes && stash_bytes_ >= bytes);
  s.bytes -= bytes;
  stash_bytes_ -= bytes;
}

void GptStage::layer_forward(int l, Stash& s, bool keep, bool make_output) {
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            NH = config_.num_heads;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  auto& P = impl_->layers[l].p;
  LayerActs& a = s.layers[l];
  const Buf& x = s.x[l];
  a.ln1 = take(NC, s);
  a.mean1 = take(N, s);
  a.rstd1 = take(N, s);
  layernorm_forward(a.ln1, a.mean1, a.rstd1, x, {P[kLn1W], size_t(C)}, {P[kLn1B], size_t(C)}, N, C);
  a.qkv = take(3 * NC, s);
  matmul_forward(a.qkv, a.ln1, {P[kQkvW], size_t(3 * C) * C}, {P[kQkvB], size_t(3 * C)}, N, C,
                 3 * C);
  a.atty = take(NC, s);
  a.att = take(size_t(B) * NH * T * T, s);
  attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
  Buf& tmp = impl_->tmp;
  matmul_forward(tmp, a.atty, {P[kProjW], size_t(C) * C}, {P[kProjB], size_t(C)}, N, C, C);
  a.res2 = take(NC, s);
  residual_forward(a.res2, x, tmp, int64_t(NC));
  a.ln2 = take(NC, s);
  a.mean2 = take(N, s);
  a.rstd2 = take(N, s);
  layernorm_forward(a.ln2, a.mean2, a.rstd2, a.res2, {P[kLn2W], size_t(C)}, {P[kLn2B], size_t(C)},
                    N, C);
  a.fch = take(4 * NC, s);
  matmul_forward(a.fch, a.ln2, {P[kFcW], size_t(4 * C) * C}, {P[kFcB], size_t(4 * C)}, N, C, 4 * C);
  a.fchg = take(4 * NC, s);
  gelu_forward(a.fchg, a.fch, int64_t(4 * NC));
  if (make_output) {  // a recompute pass does not redo the group's output (the next group's input)
    matmul_forward(tmp, a.fchg, {P[kFc2W], size_t(C) * 4 * C}, {P[kFc2B], size_t(C)}, N, 4 * C, C);
    s.x[l + 1] = take(NC, s);
    residual_forward(s.x[l + 1], a.res2, tmp, int64_t(NC));
  }
  if (!keep) a.for_each([&](Buf& b) { give(b, s); });
}

void GptStage::layer_backward_input(int l, Stash& s) {
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            NH = config_.num_heads;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  auto& P = impl_->layers[l].p;
  LayerActs& a = s.layers[l];
  const Buf& dout = s.dx[l + 1];
  auto partial = [&](Buf& b) {
    b = take(size_t(C), s);
    std::fill(b.begin(), b.end(), 0.0f);
  };
  // MLP: d fchg = dout @ fc2; d fch = gelu'(fch) * d fchg (in place); d ln2 = d fch @ fc.
  a.dfch = take(4 * NC, s);
  matmul_backward_input(a.dfch, dout, {P[kFc2W], size_t(C) * 4 * C}, N, 4 * C, C);
  gelu_backward_input(a.dfch, a.dfch, a.fch, int64_t(4 * NC));
  Buf dln = take(NC, s);
  matmul_backward_input(dln, a.dfch, {P[kFcW], size_t(4 * C) * C}, N, C, 4 * C);
  a.dres2 = take(NC, s);
  layernorm_backward_input(a.dres2, dln, a.res2, a.mean2, a.rstd2, {P[kLn2W], size_t(C)}, N, C);
  residual_backward_input(a.dres2, dout, int64_t(NC));
  partial(a.dln2w);
  partial(a.dln2b);
  layernorm_backward_weight(a.dln2w, a.dln2b, dln, a.res2, a.mean2, a.rstd2, N, C);
  // Attention: d atty = d res2 @ proj; d qkv; d ln1 = d qkv @ qkv_w.
  Buf& datty = impl_->tmp;
  matmul_backward_input(datty, a.dres2, {P[kProjW], size_t(C) * C}, N, C, C);
  a.dqkv = take(3 * NC, s);
  attention_backward_input(a.dqkv, impl_->scratch_tt, datty, a.qkv, a.att, B, T, C, NH);
  matmul_backward_input(dln, a.dqkv, {P[kQkvW], size_t(3 * C) * C}, N, C, 3 * C);
  s.dx[l] = take(NC, s);
  layernorm_backward_input(s.dx[l], dln, s.x[l], a.mean1, a.rstd1, {P[kLn1W], size_t(C)}, N, C);
  residual_backward_input(s.dx[l], a.dres2, int64_t(NC));
  partial(a.dln1w);
  partial(a.dln1b);
  layernorm_backward_weight(a.dln1w, a.dln1b, dln, s.x[l], a.mean1, a.rstd1, N, C);
  // W reads only ln1, atty, ln2, fchg and the gradients made here: free the rest.
  give(dln, s);
  for (Buf* b : {&a.qkv, &a.att, &a.fch, &a.res2, &a.mean1, &a.rstd1, &a.mean2, &a.rstd2})
    give(*b, s);
  give(s.x[l], s);
}

void GptStage::layer_backward_weight(int l, Stash& s) {
  const int N = config_.micro_batch_size * config_.seq_length, C = config_.hidden_size;
  auto& G = impl_->layers[l].g;
  LayerActs& a = s.layers[l];
  const size_t c = size_t(C);
  matmul_backward_weight({G[kFc2W], c * 4 * c}, {G[kFc2B], c}, s.dx[l + 1], a.fchg, N, 4 * C, C);
  matmul_backward_weight({G[kFcW], 4 * c * c}, {G[kFcB], 4 * c}, a.dfch, a.ln2, N, C, 4 * C);
  matmul_backward_weight({G[kProjW], c * c}, {G[kProjB], c}, a.dres2, a.atty, N, C, C);
  matmul_backward_weight({G[kQkvW], 3 * c * c}, {G[kQkvB], 3 * c}, a.dqkv, a.ln1, N, C, 3 * C);
  for (int i = 0; i < C; ++i) {
    G[kLn2W][i] += a.dln2w[i];
    G[kLn2B][i] += a.dln2b[i];
    G[kLn1W][i] += a.dln1w[i];
    G[kLn1B][i] += a.dln1b[i];
  }
}

// ---- bf16 (docs/bf16.md) ------------------------------------------------------------------------
// Matmul inputs are bf16 (weights from the per-step copy, activations converted once where they
// are made) with FP32 accumulation; LayerNorm, attention softmax, GELU, residual adds and the loss
// are FP32 arithmetic on FP32 transients. The block input x16[l] and output x16[l+1] are bf16.

void GptStage::layer_forward_bf16(int l, Stash& s, bool keep, bool make_output) {
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            NH = config_.num_heads;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  auto& P = impl_->layers[l].p;
  const auto& W = impl_->w16[l];
  const size_t c = size_t(C);
  LayerActs& a = s.layers[l];
  Buf& xf = impl_->xf;
  Buf& tmp = impl_->tmp;
  const std::span<float> big(impl_->big);
  bf16_to_float(xf, s.x16[l]);
  a.mean1 = take(N, s);
  a.rstd1 = take(N, s);
  layernorm_forward(tmp, a.mean1, a.rstd1, xf, {P[kLn1W], c}, {P[kLn1B], c}, N, C);
  a.ln1h = take16(NC, s);
  float_to_bf16(a.ln1h, tmp);
  matmul_forward_bf16(big.first(3 * NC), a.ln1h, {W.qkv, 3 * c * c}, {P[kQkvB], 3 * c}, N, C,
                      3 * C);
  a.qkvh = take16(3 * NC, s);
  qkv_to_heads_bf16(a.qkvh, big.first(3 * NC), B, T, C, NH);
  a.attyh = take16(NC, s);
  a.atth = take16(size_t(B) * NH * T * T, s);
  attention_forward_bf16(a.attyh, a.atth, a.qkvh, impl_->att_scratch, B, T, C, NH);
  matmul_forward_bf16(tmp, a.attyh, {W.proj, c * c}, {P[kProjB], c}, N, C, C);
  a.res2 = take(NC, s);
  residual_forward(a.res2, xf, tmp, int64_t(NC));
  a.mean2 = take(N, s);
  a.rstd2 = take(N, s);
  layernorm_forward(tmp, a.mean2, a.rstd2, a.res2, {P[kLn2W], c}, {P[kLn2B], c}, N, C);
  a.ln2h = take16(NC, s);
  float_to_bf16(a.ln2h, tmp);
  matmul_forward_bf16(big, a.ln2h, {W.fc, 4 * c * c}, {P[kFcB], 4 * c}, N, C, 4 * C);
  // fch is kept in bf16 and GELU runs on the rounded value, so I's gelu' sees the same input.
  a.fchh = take16(4 * NC, s);
  round_to_bf16(a.fchh, big);
  gelu_forward(big, big, int64_t(4 * NC));
  a.fchgh = take16(4 * NC, s);
  float_to_bf16(a.fchgh, big);
  if (make_output) {
    matmul_forward_bf16(tmp, a.fchgh, {W.fc2, 4 * c * c}, {P[kFc2B], c}, N, 4 * C, C);
    s.x16[l + 1] = take16(NC, s);
    add_to_bf16(s.x16[l + 1], a.res2, tmp);
  }
  if (!keep) {
    a.for_each([&](Buf& b) { give(b, s); });
    a.for_each16([&](Buf16& b) { give16(b, s); });
  }
}

void GptStage::layer_backward_input_bf16(int l, Stash& s) {
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            NH = config_.num_heads;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  auto& P = impl_->layers[l].p;
  const auto& W = impl_->w16[l];
  const size_t c = size_t(C);
  LayerActs& a = s.layers[l];
  const Buf16& dout = s.dx16[l + 1];
  Buf& tmp = impl_->tmp;
  Buf& dln = impl_->lnt;
  Buf& dres2 = impl_->dres2f;
  Buf& big = impl_->big;
  Buf& big2 = impl_->big2;
  auto partial = [&](Buf& b) {
    b = take(c, s);
    std::fill(b.begin(), b.end(), 0.0f);
  };
  // MLP: d fchg = dout @ fc2; d fch = gelu'(fch) * d fchg; d ln2 = d fch @ fc.
  matmul_backward_input_bf16(big, dout, {W.fc2, 4 * c * c}, N, 4 * C, C);
  bf16_to_float(big2, a.fchh);
  gelu_backward_input(big, big, big2, int64_t(4 * NC));
  a.dfchh = take16(4 * NC, s);
  float_to_bf16(a.dfchh, big);
  matmul_backward_input_bf16(dln, a.dfchh, {W.fc, 4 * c * c}, N, C, 4 * C);
  layernorm_backward_input(dres2, dln, a.res2, a.mean2, a.rstd2, {P[kLn2W], c}, N, C);
  accumulate_bf16(dres2, dout);
  a.dres2h = take16(NC, s);
  float_to_bf16(a.dres2h, dres2);
  partial(a.dln2w);
  partial(a.dln2b);
  layernorm_backward_weight(a.dln2w, a.dln2b, dln, a.res2, a.mean2, a.rstd2, N, C);
  // Attention: d atty = d res2 @ proj; d qkv; d ln1 = d qkv @ qkv_w.
  matmul_backward_input_bf16(tmp, a.dres2h, {W.proj, c * c}, N, C, C);
  a.dqkvh = take16(3 * NC, s);
  attention_backward_input_bf16(a.dqkvh, tmp, a.qkvh, a.atth, impl_->att_scratch,
                                impl_->att_scratch16, B, T, C, NH);
  matmul_backward_input_bf16(dln, a.dqkvh, {W.qkv, 3 * c * c}, N, C, 3 * C);
  Buf& xf = impl_->xf;
  bf16_to_float(xf, s.x16[l]);
  layernorm_backward_input(tmp, dln, xf, a.mean1, a.rstd1, {P[kLn1W], c}, N, C);
  s.dx16[l] = take16(NC, s);
  add_to_bf16(s.dx16[l], tmp, dres2);
  partial(a.dln1w);
  partial(a.dln1b);
  layernorm_backward_weight(a.dln1w, a.dln1b, dln, xf, a.mean1, a.rstd1, N, C);
  // W reads only ln1, atty, ln2, fchg and the gradients made here: free the rest.
  for (Buf* b : {&a.res2, &a.mean1, &a.rstd1, &a.mean2, &a.rstd2}) give(*b, s);
  for (Buf16* b : {&a.qkvh, &a.atth, &a.fchh}) give16(*b, s);
  give16(s.x16[l], s);
}

void GptStage::layer_backward_weight_bf16(int l, Stash& s) {
  const int N = config_.micro_batch_size * config_.seq_length, C = config_.hidden_size;
  auto& G = impl_->layers[l].g;
  LayerActs& a = s.layers[l];
  const size_t c = size_t(C);
  matmul_backward_weight_bf16({G[kFc2W], c * 4 * c}, {G[kFc2B], c}, s.dx16[l + 1], a.fchgh, N,
                              4 * C, C);
  matmul_backward_weight_bf16({G[kFcW], 4 * c * c}, {G[kFcB], 4 * c}, a.dfchh, a.ln2h, N, C, 4 * C);
  matmul_backward_weight_bf16({G[kProjW], c * c}, {G[kProjB], c}, a.dres2h, a.attyh, N, C, C);
  matmul_backward_weight_bf16({G[kQkvW], 3 * c * c}, {G[kQkvB], 3 * c}, a.dqkvh, a.ln1h, N, C,
                              3 * C);
  for (int i = 0; i < C; ++i) {
    G[kLn2W][i] += a.dln2w[i];
    G[kLn2B][i] += a.dln2b[i];
    G[kLn1W][i] += a.dln1w[i];
    G[kLn1B][i] += a.dln1b[i];
  }
}

double GptStage::head_forward_bf16(Stash& s) {
  const int N = config_.micro_batch_size * config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  const size_t NC = size_t(N) * C;
  const int nl = spec_.num_layers;
  Buf& xf = impl_->xf;
  Buf& tmp = impl_->tmp;
  bf16_to_float(xf, s.x16[nl]);
  s.meanf = take(N, s);
  s.rstdf = take(N, s);
  layernorm_forward(tmp, s.meanf, s.rstdf, xf, {impl_->lnfw, size_t(C)}, {impl_->lnfb, size_t(C)},
                    N, C);
  s.lnfh = take16(NC, s);
  float_to_bf16(s.lnfh, tmp);
  s.probs = take(size_t(N) * V, s);
  matmul_forward_bf16(s.probs, s.lnfh, {impl_->head16, size_t(V) * C}, {}, N, C, V);
  return softmax_xent_forward(s.probs, s.probs, s.targets, N, V);
}

void GptStage::head_backward_input_bf16(Stash& s) {
  const int N = config_.micro_batch_size * config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  const size_t NC = size_t(N) * C;
  const int nl = spec_.num_layers;
  // dlogits in FP32 once, then bf16 (what both matmuls read); the (N,V) FP32 buffer goes at once.
  softmax_xent_backward_input(s.probs, s.probs, s.targets, s.loss_scale, N, V);
  s.dlogitsh = take16(size_t(N) * V, s);
  float_to_bf16(s.dlogitsh, s.probs);
  give(s.probs, s);
  Buf& dlnf = impl_->lnt;
  matmul_backward_input_bf16(dlnf, s.dlogitsh, {impl_->head16, size_t(V) * C}, N, C, V);
  Buf& xf = impl_->xf;
  Buf& tmp = impl_->tmp;
  bf16_to_float(xf, s.x16[nl]);
  layernorm_backward_input(tmp, dlnf, xf, s.meanf, s.rstdf, {impl_->lnfw, size_t(C)}, N, C);
  s.dx16[nl] = take16(NC, s);
  float_to_bf16(s.dx16[nl], tmp);
  s.dlnfw = take(size_t(C), s);
  s.dlnfb = take(size_t(C), s);
  std::fill(s.dlnfw.begin(), s.dlnfw.end(), 0.0f);
  std::fill(s.dlnfb.begin(), s.dlnfb.end(), 0.0f);
  layernorm_backward_weight(s.dlnfw, s.dlnfb, dlnf, xf, s.meanf, s.rstdf, N, C);
  give(s.meanf, s);
  give(s.rstdf, s);
  give16(s.x16[nl], s);
}

void GptStage::head_backward_weight_bf16(Stash& s) {
  const int N = config_.micro_batch_size * config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  matmul_backward_weight_bf16({impl_->dhead, size_t(V) * C}, {}, s.dlogitsh, s.lnfh, N, C, V);
  for (int i = 0; i < C; ++i) {
    impl_->dlnfw[i] += s.dlnfw[i];
    impl_->dlnfb[i] += s.dlnfb[i];
  }
  for (Buf* b : {&s.dlnfw, &s.dlnfb}) give(*b, s);
  give16(s.dlogitsh, s);
  give16(s.lnfh, s);
}

StageOutput GptStage::forward(int mb, StageInput input, std::span<const int32_t> targets,
                              float loss_scale) {
  TP_CHECK(!stash_.contains(mb), "forward of microbatch ", mb, " twice without backward");
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  const int nl = spec_.num_layers;
  auto owned = std::make_unique<Stash>();
  Stash& s = *owned;
  s.x.resize(nl + 1);
  s.dx.resize(nl + 1);
  s.layers.resize(nl);
  const bool h = bf16();
  if (h) {
    refresh_bf16_weights();
    s.x16.resize(nl + 1);
    s.dx16.resize(nl + 1);
  } else {
    s.x[0] = take(NC, s);
  }
  // bf16: the input goes through an FP32 transient and is stored rounded to bf16.
  std::span<float> x0 = h ? std::span<float>(impl_->xf) : std::span<float>(s.x[0]);
  if (spec_.has_embedding) {
    const auto* tok = std::get_if<std::span<const int32_t>>(&input);
    TP_CHECK(tok != nullptr && tok->size() == size_t(N), "first stage expects B*T=", N, " tokens");
    s.tokens.assign(tok->begin(), tok->end());
    encoder_forward(x0, s.tokens, {impl_->wte, size_t(V) * C}, {impl_->wpe, size_t(T) * C}, B, T, C,
                    V);
  } else {
    const auto* act = std::get_if<std::span<const float>>(&input);
    TP_CHECK(act != nullptr && act->size() == NC, "stage expects (B,T,C) activations of ", NC,
             " floats");
    std::copy(act->begin(), act->end(), x0.begin());
  }
  if (h) {
    s.x16[0] = take16(NC, s);
    float_to_bf16(s.x16[0], x0);
  }
  const bool rc = recompute_.enabled();
  const int group = recompute_.num_layers;
  for (int l = 0; l < nl; ++l) {
    if (h) {
      layer_forward_bf16(l, s, /*keep=*/!rc, /*make_output=*/true);
      if (rc && l % group != 0) give16(s.x16[l], s);
      continue;
    }
    layer_forward(l, s, /*keep=*/!rc, /*make_output=*/true);
    if (rc && l % group != 0) give(s.x[l], s);  // only group inputs survive F
  }
  StageOutput out;
  if (spec_.has_head) {
    TP_CHECK(targets.size() == size_t(N), "last stage expects B*T=", N, " targets");
    s.targets.assign(targets.begin(), targets.end());
    s.loss_scale = loss_scale;
  }
  if (h) {
    if (spec_.has_head) {
      out.loss = head_forward_bf16(s) * loss_scale;
    } else {
      s.x[nl] = take(NC, s);
      bf16_to_float(s.x[nl], s.x16[nl]);
      give16(s.x16[nl], s);
      out.activations = s.x[nl];
    }
  } else if (spec_.has_head) {
    s.lnf = take(NC, s);
    s.meanf = take(N, s);
    s.rstdf = take(N, s);
    layernorm_forward(s.lnf, s.meanf, s.rstdf, s.x[nl], {impl_->lnfw, size_t(C)},
                      {impl_->lnfb, size_t(C)}, N, C);
    s.probs = take(size_t(N) * V, s);
    matmul_forward(s.probs, s.lnf, {impl_->head, size_t(V) * C}, {}, N, C, V);
    out.loss = softmax_xent_forward(s.probs, s.probs, s.targets, N, V) * loss_scale;
  } else {
    out.activations = s.x[nl];
  }
  stash_.emplace(mb, std::move(owned));
  return out;
}

std::span<const float> GptStage::backward_input(int mb, std::span<const float> grad_output) {
  return run_backward(mb, grad_output, /*fused=*/false);
}

// I of the whole stage; with `fused`, W of each part right after its I, releasing that part's
// stash at once. Every gradient tensor receives the same single += per microbatch either way, so
// fused B is bit-identical to I then W (tested) while holding far less memory.
std::span<const float> GptStage::run_backward(int mb, std::span<const float> grad_output,
                                              bool fused) {
  auto it = stash_.find(mb);
  TP_CHECK(it != stash_.end(), "backward of microbatch ", mb, " without forward");
  Stash& s = *it->second;
  TP_CHECK(!s.input_done, "backward_input of microbatch ", mb, " twice");
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  const int nl = spec_.num_layers;
  const bool h = bf16();
  if (h) refresh_bf16_weights();
  if (h && spec_.has_head) {
    TP_CHECK(grad_output.empty(), "the last stage takes no grad_output");
    head_backward_input_bf16(s);
    if (fused) head_backward_weight_bf16(s);
  } else if (h) {
    TP_CHECK(grad_output.size() == NC, "grad_output must be (B,T,C) = ", NC, " floats, got ",
             grad_output.size());
    // Rounded as received: a pipeline computes exactly what one stage does (docs/bf16.md).
    s.dx16[nl] = take16(NC, s);
    float_to_bf16(s.dx16[nl], grad_output);
    give(s.x[nl], s);
  } else if (spec_.has_head) {
    TP_CHECK(grad_output.empty(), "the last stage takes no grad_output");
    softmax_xent_backward_input(s.probs, s.probs, s.targets, s.loss_scale, N, V);  // -> dlogits
    Buf dlnf = take(NC, s);
    matmul_backward_input(dlnf, s.probs, {impl_->head, size_t(V) * C}, N, C, V);
    s.dx[nl] = take(NC, s);
    layernorm_backward_input(s.dx[nl], dlnf, s.x[nl], s.meanf, s.rstdf, {impl_->lnfw, size_t(C)}, N,
                             C);
    s.dlnfw = take(size_t(C), s);
    s.dlnfb = take(size_t(C), s);
    std::fill(s.dlnfw.begin(), s.dlnfw.end(), 0.0f);
    std::fill(s.dlnfb.begin(), s.dlnfb.end(), 0.0f);
    layernorm_backward_weight(s.dlnfw, s.dlnfb, dlnf, s.x[nl], s.meanf, s.rstdf, N, C);
    give(dlnf, s);
    give(s.meanf, s);
    give(s.rstdf, s);
    give(s.x[nl], s);
    if (fused) head_backward_weight(s);
  } else {
    TP_CHECK(grad_output.size() == NC, "grad_output must be (B,T,C) = ", NC, " floats, got ",
             grad_output.size());
    s.dx[nl] = take(NC, s);
    std::copy(grad_output.begin(), grad_output.end(), s.dx[nl].begin());
    give(s.x[nl], s);  // the output is no input of any W
  }
  auto layer_backward = [&](int l) {
    if (h) {
      layer_backward_input_bf16(l, s);
    } else {
      layer_backward_input(l, s);
    }
    if (!fused) return;
    if (h) {
      layer_backward_weight_bf16(l, s);
    } else {
      layer_backward_weight(l, s);
    }
    s.layers[l].for_each([&](Buf& buf) { give(buf, s); });
    s.layers[l].for_each16([&](Buf16& buf) { give16(buf, s); });
    give(s.dx[l + 1], s);
    if (h) give16(s.dx16[l + 1], s);
  };
  if (recompute_.enabled()) {
    const int group = recompute_.num_layers;
    for (int g1 = nl; g1 > 0;) {
      const int g0 = ((g1 - 1) / group) * group;
      for (int l = g0; l < g1; ++l) {
        if (h) {
          layer_forward_bf16(l, s, /*keep=*/true, /*make_output=*/l + 1 < g1);
        } else {
          layer_forward(l, s, /*keep=*/true, /*make_output=*/l + 1 < g1);
        }
      }
      for (int l = g1 - 1; l >= g0; --l) layer_backward(l);
      g1 = g0;
    }
  } else {
    for (int l = nl - 1; l >= 0; --l) layer_backward(l);
  }
  if (h) {  // the returned gradient and the embedding's W input, as bf16-exact floats
    s.dx[0] = take(NC, s);
    bf16_to_float(s.dx[0], s.dx16[0]);
    give16(s.dx16[0], s);
  }
  s.input_done = true;
  if (spec_.has_embedding) return {};
  return s.dx[0];
}

void GptStage::head_backward_weight(Stash& s) {
  const int N = config_.micro_batch_size * config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  matmul_backward_weight({impl_->dhead, size_t(V) * C}, {}, s.probs, s.lnf, N, C, V);
  for (int i = 0; i < C; ++i) {
    impl_->dlnfw[i] += s.dlnfw[i];
    impl_->dlnfb[i] += s.dlnfb[i];
  }
  for (Buf* b : {&s.probs, &s.lnf, &s.dlnfw, &s.dlnfb}) give(*b, s);
}

void GptStage::backward_weight(int mb) {
  auto it = stash_.find(mb);
  TP_CHECK(it != stash_.end() && it->second->input_done, "backward_weight of microbatch ", mb,
           " before its backward_input");
  Stash& s = *it->second;
  const int B = config_.micro_batch_size, T = config_.seq_length, C = config_.hidden_size,
            V = config_.vocab_size;
  // Parts already done by a fused backward have no stash left and are skipped.
  if (bf16()) {
    if (spec_.has_head && !s.dlogitsh.empty()) head_backward_weight_bf16(s);
    for (int l = spec_.num_layers - 1; l >= 0; --l)
      if (!s.layers[l].dqkvh.empty()) layer_backward_weight_bf16(l, s);
  } else {
    if (spec_.has_head && !s.probs.empty()) head_backward_weight(s);
    for (int l = spec_.num_layers - 1; l >= 0; --l)
      if (!s.layers[l].dqkv.empty()) layer_backward_weight(l, s);
  }
  if (spec_.has_embedding) {
    encoder_backward_weight({impl_->dwte, size_t(V) * C}, {impl_->dwpe, size_t(T) * C}, s.dx[0],
                            s.tokens, B, T, C, V);
  }
  discard(mb);
}

std::span<const float> GptStage::backward(int mb, std::span<const float> grad_output) {
  std::span<const float> d = run_backward(mb, grad_output, /*fused=*/true);
  // The returned span must outlive the stash: copy it out first.
  impl_->grad_in.assign(d.begin(), d.end());
  backward_weight(mb);  // the embedding's W, then release
  return impl_->grad_in;
}

void GptStage::discard(int mb) {
  auto it = stash_.find(mb);
  if (it == stash_.end()) return;
  Stash& s = *it->second;
  for (Buf& b : s.x) give(b, s);
  for (Buf& b : s.dx) give(b, s);
  for (Buf16& b : s.x16) give16(b, s);
  for (Buf16& b : s.dx16) give16(b, s);
  for (LayerActs& a : s.layers) {
    a.for_each([&](Buf& b) { give(b, s); });
    a.for_each16([&](Buf16& b) { give16(b, s); });
  }
  for (Buf* b : {&s.lnf, &s.meanf, &s.rstdf, &s.probs, &s.dlnfw, &s.dlnfb}) give(*b, s);
  give16(s.lnfh, s);
  give16(s.dlogitsh, s);
  TP_CHECK(s.bytes == 0, "stash accounting of microbatch ", mb, " is off by ", s.bytes);
  stash_.erase(it);
}

std::span<const float> GptStage::probs(int mb) const {
  auto it = stash_.find(mb);
  TP_CHECK(spec_.has_head && it != stash_.end() && !it->second->input_done,
           "probs() needs the last stage between forward and backward_input");
  return it->second->probs;
}

bool GptStage::in_flight(int mb) const { return stash_.contains(mb); }

double GptStage::grad_sq_norm() const {
  // Eight running sums, element i into sum i % 8, then added in order: a fixed order (the same
  // value on every rank and run), and one the compiler vectorizes; a single running sum waits for
  // each add (measured 1.4% of a 12 x 512 step).
  constexpr size_t kLanes = 8;
  double lane[kLanes] = {};
  const float* g = grads_.data();
  const size_t n = grads_.size(), whole = n - n % kLanes;
  for (size_t i = 0; i < whole; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k) lane[k] += double(g[i + k]) * g[i + k];
  double s = 0;
  for (size_t k = 0; k < kLanes; ++k) s += lane[k];
  for (size_t i = whole; i < n; ++i) s += double(g[i]) * g[i];
  return s;
}

void GptStage::scale_grads(float scale) {
  for (float& g : grads_) g *= scale;
}

void GptStage::zero_grads() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void GptStage::optimizer_step(const AdamWConfig& opt, float lr) {
  ++adam_step_;
  impl_->w16_stale = true;
  for (const ParamTensor& t : tensors_) {
    AdamWHyper h{lr, opt.beta1, opt.beta2, opt.eps, t.decay ? opt.weight_decay : 0.0f, adam_step_};
    adamw_update(std::span<float>(params_).subspan(t.offset, t.size),
                 std::span<const float>(grads_).subspan(t.offset, t.size),
                 std::span<float>(m_).subspan(t.offset, t.size),
                 std::span<float>(v_).subspan(t.offset, t.size), h);
  }
}

}  // namespace tightpipe::nn
