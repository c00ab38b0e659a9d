// The GPT model of tightpipe, cut into pipeline stages.
//
// A GPT (token + learned position embedding, pre-LN blocks with causal multi-head attention and a
// 4x GELU MLP, final LayerNorm, UNTIED LM head, softmax cross-entropy; the model of
// ../shared/peers/torch_gpt_bench.py --untied) is split into stages, each a contiguous range of
// blocks; the first stage also owns the embedding, the last the final LayerNorm, LM head and loss.
// One stage = one GptStage object, which owns one contiguous parameter arena, one gradient arena
// of the same layout, the AdamW moments, and the stash of every microbatch in flight.
//
// Per microbatch id `mb` (any int; several may be in flight, in any order a schedule dictates):
//   forward(mb, in)          F: input is tokens (B*T) on the first stage, activations (B,T,C)
//                            otherwise; the last stage also gets targets (B*T) and loss_scale and
//                            returns the scaled loss instead of activations.
//   backward_input(mb, g)    I: g = gradient of the stage output (B,T,C) (empty on the last stage);
//                            returns the gradient of the stage input (B,T,C) (empty on the first
//                            stage). Never touches parameter gradients. Frees what W does not need.
//   backward_weight(mb)      W: only accumulates (+=) into the gradient arena; releases the stash.
//   backward(mb, g)          B = I then W (bit-identical to calling them separately); it runs
//                            each block's W right after its I, so its peak stash is lower.
// forward and backward_input copy their inputs (tokens, targets, activations, grad_output): the
// caller may reuse its buffers as soon as they return.
// The span forward returns is owned by the stash of `mb` and stays valid until backward_input(mb);
// the one backward_input returns until backward_weight(mb); the one backward returns until the
// next backward on this stage. discard(mb) drops everything of mb.
//
// Parameter init depends only on (seed, global tensor identity: layer index and slot, embedding,
// head), never on a stream shared across stages, so any split has the same initial weights as the
// one-stage model.
//
// Thread safety: a GptStage is used by one thread at a time; distinct stages are independent.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tightpipe/kernels_bf16.h"
#include "tightpipe/optimizer.h"
#include "tightpipe/status.h"

namespace tightpipe::nn {

// Limits of the model flags (docs/train_limits.md): GptConfig::validate() refuses a value above
// them with one line naming the flag. Whether a model within them fits in memory is the trainer's
// memory check (trainer.h), before anything of its size is allocated.
inline constexpr int kMaxNumLayers = 1024;        // --num-layers
inline constexpr int kMaxHiddenSize = 65536;      // --hidden-size
inline constexpr int kMaxNumHeads = 1024;         // --num-attention-heads
inline constexpr int kMaxSeqLength = 65536;       // --seq-length
inline constexpr int kMaxMicroBatchSize = 65536;  // --micro-batch-size
inline constexpr int kMaxVocabSize = 1 << 20;     // V (256 for the byte tokenizer)

// The arithmetic of the model's matmuls (docs/bf16.md). kBf16 (train --bf16, Megatron's flag):
// matmul inputs in bf16 with FP32 accumulation; FP32 master weights, gradients and AdamW moments.
enum class Precision { kFp32, kBf16 };
// "fp32" / "bf16": the names in checkpoints (the manifest's precision line) and summary.json.
std::string_view precision_name(Precision p);
// The inverse of precision_name; anything else is an InvalidArgument naming the value.
Result<Precision> parse_precision(std::string_view name);

struct GptConfig {
  int vocab_size = 256;                    // V (byte tokenizer)
  int seq_length = 128;                    // T (--seq-length)
  int num_layers = 4;                      // L (--num-layers)
  int hidden_size = 128;                   // C (--hidden-size)
  int num_heads = 4;                       // NH (--num-attention-heads)
  int micro_batch_size = 8;                // B (--micro-batch-size)
  Precision precision = Precision::kFp32;  // --bf16
  // Errors name the Megatron flag, the value, the limit and a hint (e.g. hidden not divisible by
  // heads, a count above its kMax* limit, a buffer whose element count overflows 64 bits).
  Status validate() const;
  int64_t tokens_per_microbatch() const { return int64_t(micro_batch_size) * seq_length; }
};

struct StageSpec {
  int first_layer = 0;         // global index of the first transformer block of the stage
  int num_layers = 0;          // contiguous blocks [first_layer, first_layer + num_layers)
  bool has_embedding = false;  // stage 0: token + position embedding
  bool has_head = false;       // last stage: final LayerNorm, LM head, loss
  bool operator==(const StageSpec&) const = default;
};

// Splits config.num_layers over num_stages. Empty layout: balanced, counting the embedding and the
// loss as one layer each (Megatron's account_for_embedding/loss_in_pipeline_split); remainders go
// to the first stages. Otherwise a layout like "E,t*3|t*3|t*3|t*2,L": stages separated by '|',
// items by ',': E (embedding, first item of stage 0), L (loss/head, last item of the last stage),
// t or t*N (N blocks). A layout that loses or repeats a layer, or has the wrong number of stages,
// is an InvalidArgument naming --pipeline-layout.
Result<std::vector<StageSpec>> partition_layers(const GptConfig& config, int num_stages,
                                                std::string_view layout);
// "E,t*3|t*3|t*2,L": the inverse of the layout parser.
std::string format_layout(const std::vector<StageSpec>& stages);
// The layout of a split given as blocks per stage, the embedding on the first stage and the loss
// on the last: {3, 2, 3} -> "E,t*3|t*2|t*3,L".
std::string layout_from_blocks(const std::vector<int>& blocks);

// Megatron-LM's flags for an uneven layer split. Unset (-1 / false): not given.
struct MegatronSplit {
  int first_stage_layers = -1;         // --decoder-first-pipeline-num-layers
  int last_stage_layers = -1;          // --decoder-last-pipeline-num-layers
  bool account_for_embedding = false;  // --account-for-embedding-in-pipeline-split
  bool account_for_loss = false;       // --account-for-loss-in-pipeline-split
  bool any() const {
    return first_stage_layers >= 0 || last_stage_layers >= 0 || account_for_embedding ||
           account_for_loss;
  }
};
// The layout string those flags mean, as Megatron-LM splits: with a first/last stage count the
// remaining blocks divide evenly over the other stages; with the accounting flags the embedding
// and/or the loss count as one layer each and (blocks + accounted) divide evenly over the stages.
// Errors (InvalidArgument naming the flags, the counts and a hint): an uneven remainder, counts
// above --num-layers, first/last counts together with the accounting flags (Megatron refuses
// the mix), one stage. REQUIRES: num_stages >= 1.
Result<std::string> megatron_layout(const GptConfig& config, int num_stages,
                                    const MegatronSplit& split);

// Activation recomputation, Megatron's spelling.
struct RecomputeOptions {
  std::string granularity;         // "" (off) or "full" (--recompute-granularity)
  std::string method = "uniform";  // only "uniform" (--recompute-method)
  int num_layers = 1;  // N: F keeps the input of each group of N blocks (--recompute-num-layers)
  bool enabled() const { return granularity == "full"; }
  Status validate() const;
};

// One named tensor of the arena.
struct ParamTensor {
  std::string name;   // e.g. "h3.attn.qkv.weight", "wte"
  size_t offset = 0;  // in floats, into params()/grads()
  size_t size = 0;    // in floats
  std::vector<int> shape;
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings)
};

// What a stage consumes: tokens (B*T) on the first stage, activations (B,T,C) otherwise.
using StageInput = std::variant<std::span<const int32_t>, std::span<const float>>;

struct StageOutput {
  std::span<const float> activations;  // (B,T,C); empty on the last stage
  double loss = 0;                     // last stage: loss_scale * sum of token losses
};

class GptStage {
 public:
  // REQUIRES: config.validate().ok(), recompute.validate().ok(), spec within config.
  GptStage(const GptConfig& config, const StageSpec& spec, uint64_t seed,
           const RecomputeOptions& recompute = {});
  ~GptStage();
  GptStage(GptStage&&) noexcept;
  GptStage& operator=(GptStage&&) noexcept;
  GptStage(const GptStage&) = delete;
  GptStage& operator=(const GptStage&) = delete;

  const GptConfig& config() const { return config_; }
  const StageSpec& spec() const { return spec_; }

  // F. targets (B*T) and loss_scale only on the last stage.
  StageOutput forward(int mb, StageInput input, std::span<const int32_t> targets = {},
                      float loss_scale = 0.0f);
  // I. grad_output (B,T,C), empty on the last stage. Returns d input (B,T,C); empty on stage 0.
  std::span<const float> backward_input(int mb, std::span<const float> grad_output = {});
  // W. Accumulates parameter gradients of mb; releases its stash entry.
  void backward_weight(int mb);
  // B = I then W.
  std::span<const float> backward(int mb, std::span<const float> grad_output = {});
  // Drops the stash of mb without a backward (evaluation).
  void discard(int mb);
  // Last stage, between forward and backward_input: the softmax (B*T, V) of mb.
  std::span<const float> probs(int mb) const;
  bool in_flight(int mb) const;

  // The non-const params() marks the bf16 weight copy stale (the caller may write through it, as a
  // checkpoint load does): the next F or I remakes it.
  std::span<float> params();
  std::span<const float> params() const;
  std::span<float> grads();
  std::span<const float> grads() const;
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t num_params() const { return params_.size(); }

  double grad_sq_norm() const;  // local sum of squares of the gradient arena
  void scale_grads(float scale);
  void zero_grads();
  // One AdamW step on this stage's arena with learning rate lr (increments the step count).
  void optimizer_step(const AdamWConfig& opt, float lr);
  // AdamW state, for checkpoints.
  std::span<float> adam_m() { return m_; }
  std::span<float> adam_v() { return v_; }
  std::span<const float> adam_m() const { return m_; }
  std::span<const float> adam_v() const { return v_; }
  int64_t adam_step() const { return adam_step_; }
  void set_adam_step(int64_t t) { adam_step_ = t; }

  // Bytes of the bf16 copy of the matmul weights (0 in FP32): static memory beside the arena.
  size_t bf16_weight_bytes() const;

  // Bytes held by the stash of all in-flight microbatches (what survives between F, I and W),
  // real bytes: 4 per FP32 element, 2 per bf16 element.
  size_t stash_bytes() const { return stash_bytes_; }
  size_t peak_stash_bytes() const { return peak_stash_bytes_; }
  void reset_peak() { peak_stash_bytes_ = stash_bytes_; }

 private:
  struct Stash;
  struct LayerActs;
  struct Impl;
  std::vector<float> take(size_t n, Stash& s);
  void give(std::vector<float>& buf, Stash& s);
  std::vector<Bf16> take16(size_t n, Stash& s);
  void give16(std::vector<Bf16>& buf, Stash& s);
  void count_stash(Stash& s, size_t bytes, bool taken);  // the accounting of take*/give*
  bool bf16() const { return config_.precision == Precision::kBf16; }
  void refresh_bf16_weights();
  void layer_forward(int l, Stash& s, bool keep, bool make_output);
  void layer_backward_input(int l, Stash& s);
  void layer_backward_weight(int l, Stash& s);
  void head_backward_weight(Stash& s);
  // The same three (and the head's parts) in bf16 (docs/bf16.md).
  void layer_forward_bf16(int l, Stash& s, bool keep, bool make_output);
  void layer_backward_input_bf16(int l, Stash& s);
  void layer_backward_weight_bf16(int l, Stash& s);
  double head_forward_bf16(Stash& s);  // the unscaled loss sum
  void head_backward_input_bf16(Stash& s);
  void head_backward_weight_bf16(Stash& s);
  std::span<const float> run_backward(int mb, std::span<const float> grad_output, bool fused);

  GptConfig config_;
  StageSpec spec_;
  RecomputeOptions recompute_;
  std::vector<float> params_, grads_, m_, v_;
  int64_t adam_step_ = 0;
  std::vector<ParamTensor> tensors_;
  std::unique_ptr<Impl> impl_;
  std::map<int, std::unique_ptr<Stash>> stash_;
  size_t stash_bytes_ = 0;
  size_t peak_stash_bytes_ = 0;
};

// ---- single-rank (one stage holding the whole model) --------------------------------------------
struct MicroBatch {
  std::span<const int32_t> tokens;   // (B*T)
  std::span<const int32_t> targets;  // (B*T)
};

struct TrainStepResult {
  double loss = 0;       // mean over all tokens of all microbatches
  double grad_norm = 0;  // global L2 norm before clipping
};

// One optimizer step over microbatches: F+B of each (loss mean over all tokens), clip, AdamW.
// REQUIRES: model holds the whole model (embedding and head), !microbatches.empty().
TrainStepResult train_step(GptStage& model, std::span<const MicroBatch> microbatches,
                           const AdamWConfig& opt, float lr, float clip);
// Mean loss over all tokens of the microbatches, no gradients.
double evaluate_loss(GptStage& model, std::span<const MicroBatch> microbatches);
// Next-token distribution (V) after context (1..T tokens, the last T are used).
// REQUIRES: model holds the whole model.
std::vector<float> next_token_probs(GptStage& model, std::span<const int32_t> context);

}  // namespace tightpipe::nn
