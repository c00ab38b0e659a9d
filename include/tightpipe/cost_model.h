// Cost and memory model for the simulator: what each action costs in time, what each message
// costs in time and bytes, and what each stage holds in memory per microbatch and phase.
//
// A CostModel is an immutable per-stage table (one StageCost per stage) plus one link model;
// the three ways to build one all produce that table:
//   * uniform_cost_model(): whole-rank f, i, w, b, comm; per chunk the compute costs divide by v
//     (the closed-form tests and REFERENCE.md's vectors use it);
//   * parse_cost_table(): a per-stage table from JSON (format in docs/cost_model.md);
//   * gpt_cost_model(): derived from a GPT config and device figures (the zero-bubble paper's
//     FLOPs per layer, REFERENCE.md section 3).
// Time is in the model's `time_unit` (any unit; "s" for gpt_cost_model). Bytes are bytes.
//
// Value type; const methods are thread-safe.
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tightpipe/schedule.h"
#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe {

// The largest time or byte count a cost model may hold, in its own unit (docs/cost_model.md,
// "Limits"): roomy in any unit (1e15 ns is 11 days), and small enough that every total the
// simulator forms (a rank's makespan over at most kMaxStageMicrobatches x 3 actions, plus their
// messages) stays finite, so no output reads "inf" or "nan".
inline constexpr double kMaxCostValue = 1e15;

// OK if `x` is finite and in [0, kMaxCostValue]; otherwise InvalidArgument naming `what` (a flag
// and key, or a file and entry), the value, the limit and a hint.
Status check_cost_value(std::string_view what, double x);

// Costs of one stage for one microbatch.
struct StageCost {
  double f = 1;          // forward time
  double i = 1;          // input-gradient backward time
  double w = 1;          // weight-gradient backward time
  double b = 2;          // fused backward time (usually i + w)
  double recompute = 1;  // time to re-run the forward before I or B under full recompute
  // Time of this stage's share of the optimizer phase once per step (gradient-norm reduction,
  // clipping, AdamW), run after every rank finished its program; 0: not modelled.
  double optimizer = 0;
  // Memory, in bytes, of one microbatch on this stage.
  double act_bytes = 0;          // held from the end of F until I/B (no recompute)
  double act_after_i_bytes = 0;  // of which still held after I until W (<= act_bytes)
  double input_bytes = 0;        // held after F under full recompute (the stage input)
  // Static memory of the stage, in bytes.
  double param_bytes = 0;
  double grad_bytes = 0;
  double optimizer_bytes = 0;
  // Bytes of the activation this stage sends downstream (and of the gradient it gets back).
  int64_t message_bytes = 0;
  // Bytes one data-parallel gradient all-reduce of this stage reduces (the trainer sums its
  // gradients as doubles: 8 per parameter); 0: grad_bytes. Only a simulation with a
  // data-parallel size above 1 uses it (SimOptions::data_parallel).
  double allreduce_bytes = 0;
};

// The one list of StageCost's fields that add up over stages, split over chunks and scale with
// the layers a stage holds: every time, every byte count but message_bytes (a message crosses
// whole: the largest of the stages'). add_stage_cost, scale_stage_cost and the per-layer-kind fit
// (layer_costs.cc) walk it.
inline constexpr double StageCost::*kStageCostAdditiveFields[] = {&StageCost::f,
                                                                  &StageCost::i,
                                                                  &StageCost::w,
                                                                  &StageCost::b,
                                                                  &StageCost::recompute,
                                                                  &StageCost::optimizer,
                                                                  &StageCost::act_bytes,
                                                                  &StageCost::act_after_i_bytes,
                                                                  &StageCost::input_bytes,
                                                                  &StageCost::param_bytes,
                                                                  &StageCost::grad_bytes,
                                                                  &StageCost::optimizer_bytes,
                                                                  &StageCost::allreduce_bytes};
// A new double field must be listed above or here on purpose; message_bytes is the int64 one.
static_assert(sizeof(StageCost) == (std::size(kStageCostAdditiveFields) + 1) * sizeof(double),
              "StageCost gained a field: add it to kStageCostAdditiveFields (or say why not)");

// add_stage_cost: `to` += `from` field by field (message_bytes: the larger). scale_stage_cost:
// every additive field times `factor` (message_bytes kept).
void add_stage_cost(StageCost& to, const StageCost& from);
StageCost scale_stage_cost(const StageCost& c, double factor);

// Message time = latency + bytes / bandwidth (bandwidth 0 = infinite), the same for every link.
// `overhead` is what a message costs the compute lanes rather than the link: the simulator adds
// it to the compute action that produces a message for another rank and to the one that consumes
// a message from another rank (CostModel::action_time; a hand-off between two stages of one rank
// is free). GPU P2P kernels occupy SMs; a CPU rank spends cycles copying.
struct LinkCost {
  double latency = 0;    // time units per message
  double bandwidth = 0;  // bytes per time unit; 0: bytes cost nothing
  double overhead = 0;   // compute-lane time per message at each end (sender and receiver), in
                         // the model's time unit
};

// Every time and size of `c` under its cost-table key (docs/cost_model.md), in table order.
std::vector<std::pair<std::string_view, double>> stage_cost_fields(const StageCost& c);

enum class Recompute { kNone, kFull };

class CostModel {
 public:
  CostModel() = default;
  CostModel(std::vector<StageCost> stages, LinkCost link, std::string time_unit, std::string source,
            bool real_bytes = true);

  int32_t num_stages() const { return static_cast<int32_t>(stages_.size()); }
  const StageCost& stage(int32_t s) const;
  const LinkCost& link() const { return link_; }
  const std::string& time_unit() const { return time_unit_; }
  // Where the model came from ("--cost f=1,i=1,w=1", "costs.json", "--model ..."), for errors.
  const std::string& source() const { return source_; }
  // False for the uniform model, whose memory sizes are abstract activation units, not bytes.
  bool real_bytes() const { return real_bytes_; }

  // Time of a compute action (F, I, W, B) of `stage`; with full recompute I and B include the
  // re-run forward. REQUIRES: is_compute(type), 0 <= stage < num_stages().
  double compute_time(int32_t stage, ActionType type, Recompute recompute = Recompute::kNone) const;
  // Time a compute action of `schedule` holds its rank's compute lane: compute_time() plus
  // link().overhead for each message it sends to or consumes from another rank
  // (remote_messages(), schedule.h). The simulator's duration of F, I, W and B.
  // REQUIRES: is_compute(a.type), 0 <= a.stage < num_stages() and schedule's stage count.
  double action_time(const Schedule& schedule, const Action& a,
                     Recompute recompute = Recompute::kNone) const;
  // Bytes moved between adjacent stages `from` and `to` (activation if to = from + 1, gradient
  // if to = from - 1): the activation size at the boundary, message_bytes of the lower stage.
  int64_t message_bytes(int32_t from_stage, int32_t to_stage) const;
  // latency + message_bytes / bandwidth.
  double message_time(int32_t from_stage, int32_t to_stage) const;

  // One whole-rank microbatch activation in bytes: sum of act_bytes over all stages / ranks.
  // The unit of SimResult's peak activations. 0 when the table holds no activation bytes.
  double activation_unit_bytes(int32_t ranks) const;

  // OK if this model has exactly one entry per stage of `schedule`; otherwise InvalidArgument
  // naming the source, the stage counts and a hint.
  Status covers(const Schedule& schedule) const;
  // OK if every time and size of every stage, the link (latency, bandwidth, overhead), and each
  // message time between adjacent stages pass check_cost_value(); otherwise the first that does
  // not, naming source(), the stage and the key. make_costs (the CLI) and simulate() check it.
  Status validate() const;

 private:
  std::vector<StageCost> stages_;
  LinkCost link_;
  std::string time_unit_ = "unit";
  std::string source_;
  bool real_bytes_ = true;
};

// The cost model of `schedule`'s stage ids built from one of its model stages: stage id s costs
// what model stage schedule.model_stage(s) does (DualPipe's two copies of a model stage cost the
// same, and each holds its own parameters). REQUIRES: per_model_stage.num_stages() ==
// schedule.stages_per_direction(). With one direction it returns the model unchanged.
CostModel expand_to_directions(const CostModel& per_model_stage, const Schedule& schedule);

// PyTorch's pipelining runtime's host time around each compute action, seconds: what a step
// costs beside the modules' compute (the runtime's bookkeeping, its p2p calls beside the action,
// autograd's own calls, each module's Python). A fixed part per kind of action and a part per
// module the stage holds: an F over three modules costs f + 3 * f_module more than its compute.
// Measured once per machine, outside the run it predicts (tightpipe.torch.measure_host_time;
// tune --host-time-us). docs/torch.md section 8 has the measurements behind the form. The same
// form holds Megatron-Core's and DeepSpeed's host time around each F and B
// (tightpipe.peers.compare.measure_engine_host_time; simulate --host-time-us, docs/peers.md).
struct RuntimeHostTime {
  double f = 0, i = 0, w = 0, b = 0;
  double f_module = 0, i_module = 0, w_module = 0, b_module = 0;

  // The same time for every action, none per module (tune --action-overhead-us).
  static RuntimeHostTime uniform(double per_action) {
    return {per_action, per_action, per_action, per_action, 0, 0, 0, 0};
  }
  bool any() const {
    return f > 0 || i > 0 || w > 0 || b > 0 || f_module > 0 || i_module > 0 || w_module > 0 ||
           b_module > 0;
  }
  bool per_module() const { return f_module > 0 || i_module > 0 || w_module > 0 || b_module > 0; }
};

// "f=480,i=520,w=390,b=620,f_module=135,i_module=200,w_module=340,b_module=215", microseconds;
// keys left out are 0. Errors name `flag`, the key and the value.
Result<RuntimeHostTime> parse_runtime_host_time_us(std::string_view text, std::string_view flag);

// `seconds` in a cost model's `time_unit` (s, ms, us or ns): every part divided by the unit's
// seconds. InvalidArgument naming `flag`, the unit and `costs_source` for any other unit (--cost's
// abstract "unit" has no seconds to add microseconds to).
Result<RuntimeHostTime> host_time_in_unit(const RuntimeHostTime& seconds,
                                          std::string_view time_unit, std::string_view flag,
                                          std::string_view costs_source);

// Every stage's f, i, w and b plus the host time for that kind of action, with
// modules_per_stage[s] modules on stage s (REQUIRES: one count per stage where `host` has a
// per-module part). Any engine's host time goes through here.
CostModel with_host_time(const CostModel& costs, const RuntimeHostTime& host,
                         const std::vector<int32_t>& modules_per_stage = {});

// The costs as PyTorch 2.15's pipelining runtime runs them. The first stage (stage 0, which has
// no upstream): its I action computes nothing (PipelineStage.backward_one_chunk skips the input
// gradient there) and its W action runs the stage's whole backward (stage_backward, fused), so
// stage 0's w becomes its b (the whole backward: i + w unless measured as one pass) and its i 0;
// b is unchanged. Then with_host_time adds the runtime's
// host time. The planner applies it under --engine torch (tune's search and its current setup).
CostModel torch_runtime_costs(const CostModel& costs, const RuntimeHostTime& host = {},
                              const std::vector<int32_t>& modules_per_stage = {});

// ----- the step besides the pipeline (docs/cost_model.md "Table 4", step costs) ----------------
//
// What a rank does once per step besides its program goes into StageCost::optimizer, and the
// simulator places it as the engine does (after every rank's program under a synchronous
// optimizer, at the rank's own end when post-validated). Two parts are derived here: the
// optimizer's pass over its parameters' state, bound by device memory bandwidth, and, for a GPT
// whose input and output embeddings are one tied matrix, the all-reduce of that matrix's gradient
// between the first and the last stage (ring_allreduce_time over 2 ranks, simulator.h).

// Device-memory bytes one optimizer step moves per parameter under Megatron-LM's fp16 mixed
// precision with Adam (Float16OptimizerWithFloat16Params, apex FusedAdam): fp16 grad to fp32
// (2 read + 4 written), unscale and inf check (4 + 4), the local grad norm (4), Adam (param, grad,
// m, v read and param, m, v written: 28), fp32 param to fp16 (4 + 2), the grad buffer zeroed (2).
inline constexpr double kMegatronFp16AdamStepBytes = 54;
// NVIDIA A100 SXM4 80GB: 2,039 GB/s of HBM2e (NVIDIA's A100 Tensor Core GPU datasheet), bytes/s.
inline constexpr double kA100Sxm80GbHbmBytesPerSecond = 2.039e12;

// The optimizer step of `params` parameters: params x bytes_per_param / memory_bandwidth (one
// streaming pass; the kernels' launch costs and the norm's all-reduce latency are left out).
// REQUIRES: memory_bandwidth > 0, params >= 0, bytes_per_param >= 0.
double optimizer_step_time(double params, double bytes_per_param, double memory_bandwidth);

// ----- uniform ---------------------------------------------------------------------------------

// Whole-rank costs: one microbatch through all of a rank's layers. b < 0 means i + w.
struct UniformCosts {
  double f = 1;
  double i = 1;
  double w = 1;
  double b = -1;
  double comm = 0;         // time of one message (not divided by v: a boundary is a boundary)
  double overhead = 0;     // compute time per message at each end (LinkCost::overhead)
  int64_t bytes = 0;       // bytes of one message (for the byte counts only)
  double act = 1;          // activation held per whole-rank microbatch after F (any unit)
  double act_after_i = 1;  // fraction of it still held after I until W (1: I frees nothing)
  double input = 0;        // held after F under full recompute, as a fraction of act
  // The optimizer step (optimizer_step_time): parameters per rank and the device's memory
  // bandwidth in bytes per time unit; both or neither (0: the step is not timed).
  double params = 0;
  double memory_bandwidth = 0;
};

// Parses "f=1,i=1,w=1[,b=2][,comm=0][,overhead=0][,bytes=N][,act=..][,act_after_i=..][,input=..]
// [,params=N,hbm=BYTES_PER_UNIT]". Unknown keys, non-numeric or negative values are
// InvalidArgument naming the key and value; params without hbm (or hbm without params) names the
// missing one.
Result<UniformCosts> parse_uniform_costs(std::string_view text);

// Per chunk (stage) the compute times, activation sizes and the optimizer step are the whole-rank
// ones divided by v = stages / ranks. act is taken as bytes (activation_unit_bytes() == act).
CostModel uniform_cost_model(const UniformCosts& costs, int32_t ranks, int32_t stages);

class Rng;  // base.h
// Seeded random uneven per-stage costs, for the tests and benches of cost-aware schedules: per
// stage F in [0.5, 2), I in [0.5, 2.5), W in [0.2, 1.7), B = I + W; 1 activation byte of which
// `act_after_i` stays after I (so the simulator's peaks are microbatch units); 1 message byte and
// one link latency in [0, max_latency) (none drawn when max_latency is 0). Source "random".
CostModel random_cost_model(Rng& rng, int32_t stages, double act_after_i, double max_latency);

// ----- per-stage table (JSON) ------------------------------------------------------------------

// docs/cost_model.md. Unknown keys, missing or duplicate stages, non-numeric or negative values
// are InvalidArgument naming `source`, the key and the value.
Result<CostModel> parse_cost_table(std::string_view json_text, std::string_view source);
std::string cost_table_to_json(const CostModel& model);

// ----- calibration: measured timelines -> cost table -------------------------------------------
//
// The one way a run's measured costs become a CostModel: the trainer's end-of-run prediction, the
// report, the benches and the automatic schedules all call calibrate(). Rules (docs/cost_model.md,
// "Calibration"), per stage, over the measured steps' samples:
//   f, i, w, b = the median duration of that stage's F, I, W, B events; b = i + w when the run
//   split every backward, i = b / 2 and w = b - i when it fused them (the split is unknown);
//   recompute = f (a measured I or B already includes any re-run forward);
//   act_bytes = the median stash growth of F; act_after_i_bytes = act_bytes + the median (negative)
//   stash change of I, clamped to [0, act_bytes]; input_bytes = act_bytes;
//   message_bytes = the median bytes of the stage's activation SENDs (else of the gradient SENDs
//   of the next stage, else 0: a hand-off on one rank);
//   optimizer = the median optimizer busy time (prof.h, after sync) of the stage's rank, shared
//   evenly by the rank's stages;
//   allreduce_bytes = the median bytes of the stage's data-parallel ALLREDUCE events (0: none).

// Samples of the measured steps, gathered where the events are (one rank's, or every rank's from
// its timeline file). Plain data; merge() combines ranks.
struct CostSamples {
  // (stage, cost_slot F=0 I=1 W=2 B=3) -> durations and stash-byte changes, in event order;
  // time_step: the training step of each duration (calibrate() takes the median over steps of
  // each step's mean).
  std::map<std::pair<int32_t, int>, std::vector<double>> time, stash;
  std::map<std::pair<int32_t, int>, std::vector<int32_t>> time_step;
  std::map<std::pair<int32_t, bool>, std::vector<double>> sent;  // (stage, gradient?) -> bytes
  std::map<int32_t, std::vector<double>> optimizer;              // rank -> busy time after sync
  std::map<int32_t, std::vector<double>> allreduce;  // stage -> bytes of its DP all-reduces

  // An F/I/W/B, SEND or ALLREDUCE event of a measured step (other kinds are ignored).
  void add_event(const TimelineEvent& event);
  // Every event of one step of every rank, and each rank's optimizer busy time (step_bubble).
  void add_step(const Timeline& step);
  // Appends `other`'s samples after this one's (ranks hold disjoint stages).
  void merge(const CostSamples& other);
  std::string to_json() const;
  static Result<CostSamples> from_json(std::string_view text);
};

// The cost of one action kind of a stage from its measured durations: for each training step
// the mean of its durations in that step, then the median over the steps (docs/cost_model.md 4b).
// A step is a sum of its actions, so a right-skewed duration (a few slow actions in every step,
// which the median action leaves out) is paid in full, while a step slow as a whole (a stall) is
// left out as the measured median step leaves it out. `steps`: each duration's step; empty (or of
// another length): one step.
double step_cost(std::span<const double> durations, std::span<const int32_t> steps);

// How calibrate() turns a stage's durations of one action kind into its cost.
enum class DurationStatistic {
  kStepCost,  // step_cost(): measured timelines (a step pays every action it ran)
  kMedian,    // the median action: costs fitted to GPU traces, whose samples carry the fit's
              // attribution errors (docs/gpu_trace.md), which the median leaves out
};

struct CalibrationOptions {
  LinkCost link;  // the link, when known (an emulated one); else free
  DurationStatistic durations = DurationStatistic::kStepCost;
  std::string time_unit = "s";
  std::string source = "measured";  // CostModel::source()
};

// REQUIRES: lowered is the schedule the samples were measured on. Errors: a stage without F
// samples or without I or B samples (NotFound, naming the stage: its rank's timeline is missing).
Result<CostModel> calibrate(const CostSamples& samples, const Schedule& lowered,
                            const CalibrationOptions& options = {});

// ----- per layer kind: costs for another layer split ---------------------------------------------
//
// A GPT stage holds the embedding (first stage), a run of transformer blocks and the head (final
// LayerNorm, LM head and loss; last stage). Measured stage costs say what each kind costs:
// fit_layer_costs() solves stage cost = embedding + blocks x block + head, field by field (least
// squares, non-negative; with fewer distinct stages than kinds the embedding, then the head, is
// taken as free, the cheapest assumption the data cannot refute), and cost_model_for_layout()
// builds the cost table of any other split from it: what a what-if needs to predict a schedule
// whose chunks hold other layers than the run's stages did.

// What one stage of a layer split holds.
struct StageLayers {
  bool embedding = false;
  int32_t blocks = 0;
  bool head = false;
};

struct LayerCosts {
  StageCost embedding, block, head;  // per kind, every time and byte field (message_bytes unused)
  // Per block, when the blocks differ (a PyTorch model's measured modules: `tightpipe tune`):
  // block_each[k] is block k's cost, and `block` their mean; empty: every block costs `block`.
  // cost_model_for_layout and balanced_layer_split place each block by its position.
  std::vector<StageCost> block_each;
  int64_t message_bytes = 0;  // one activation between stages (the same at every boundary)
  LinkCost link;
  std::string time_unit = "s";
  std::string source;
};

// REQUIRES: layout.size() == stage_costs.num_stages(). Errors: empty layout, a stage with no layer.
Result<LayerCosts> fit_layer_costs(const CostModel& stage_costs,
                                   const std::vector<StageLayers>& layout);
// The per-stage table of `layout` (stage cost = the sum of its layers' costs); `layout_name` (the
// Megatron layout string, nn::format_layout) goes into the model's source.
CostModel cost_model_for_layout(const LayerCosts& layers, const std::vector<StageLayers>& layout,
                                const std::string& layout_name);

// ----- GPT config + device ---------------------------------------------------------------------

// The most transformer layers --model takes (the layer split's search is quadratic in them).
inline constexpr int64_t kMaxGptLayers = 1024;

struct GptCostConfig {
  int64_t layers = 0;       // L transformer layers, split evenly over the stages (first get more)
  int64_t hidden = 0;       // h
  int64_t heads = 0;        // a
  int64_t seq = 0;          // s sequence length
  int64_t micro_batch = 1;  // b sequences per microbatch
  int64_t vocab = 0;        // V; 0 leaves out the embedding and the LM head
  double flops = 100e12;    // achieved device FLOP/s
  double latency = 10e-6;   // link latency in seconds
  double bandwidth = 25e9;  // link bandwidth in bytes/s
  double message_overhead = 0;    // compute seconds per message at each end (LinkCost::overhead)
  int64_t act_dtype_bytes = 2;    // bytes per activation element (bf16)
  int64_t param_dtype_bytes = 2;  // bytes per parameter and per gradient
  int64_t optimizer_bytes_per_param = 12;  // fp32 master + Adam m, v
  int64_t ffn_hidden = 0;                  // MLP width; 0: 4 x hidden
  int64_t grad_dtype_bytes = 0;            // bytes per gradient; 0: param_dtype_bytes
  // Flash attention: the a x s x s attention scores are recomputed in the backward instead of
  // stored, so F keeps sb(18h+4f) activation bytes per layer, not sb(18h+4f+5as).
  bool flash_attention = false;
  // The step besides the pipeline (StageCost::optimizer, above): device memory bytes per second
  // (hbm=; 0: the optimizer step is not timed) and the bytes its step moves per parameter
  // (opt_step_bytes=); tied=1: the input and output embeddings are one matrix, whose gradient
  // the first and the last stage all-reduce each step on the link (Megatron-LM's default).
  double memory_bandwidth = 0;
  double optimizer_step_bytes = kMegatronFp16AdamStepBytes;
  bool tied_embedding = false;
};

// "layers=24,hidden=1024,heads=16,seq=1024[,mbs=1][,vocab=..][,flops=..][,latency=..]
// [,bandwidth=..][,overhead=..][,act_bytes=2][,param_bytes=2][,optimizer_bytes=12][,hbm=..]
// [,opt_step_bytes=54][,tied=0|1]" (overhead: message_overhead). Unknown keys, negative or
// non-numeric values, missing required keys are InvalidArgument naming the key; so is a step cost
// that cannot be derived: opt_step_bytes without hbm, tied=1 without vocab or with bandwidth=0.
Result<GptCostConfig> parse_gpt_cost_config(std::string_view text);

// Per layer (REFERENCE.md section 3): F = sbh(24h+4s), I = sbh(24h+8s), W = sbh(24h) FLOPs;
// activations held after F sb(34h+5as) bytes of which 32sbh stay until W; message bytes =
// s*b*h*act_dtype_bytes; params 12h^2 per layer (+ Vh embedding on stage 0 and head on the last).
// With hbm= each kind's optimizer time is optimizer_step_time() of its parameters; with tied=1
// the embedding and the head each add the 2-rank all-reduce of V x h gradient values
// (gpt_cost_model_for_layout drops it, and the second copy, where one stage holds both ends; a
// placement that puts both ends on one rank, as zb-v's, is not seen here and pays it).
// With an MLP width f other than 4h (ffn_hidden): F = sbh(8h+4f+4s), I = sbh(8h+4f+8s),
// W = sbh(8h+4f), activations sb(18h+4f+5as) of which sb(16h+4f) stay, params 4h^2+2hf+9h+f.
// Times in seconds. The layers split as even_layer_split(config.layers, stages).
// REQUIRES: config fields positive (parse_gpt_cost_config checks).
Result<CostModel> gpt_cost_model(const GptCostConfig& config, int32_t ranks, int32_t stages);

// The same formulas per layer kind, so that any split can be costed (and chosen) before a run:
// the embedding holds parameters only (a lookup costs no FLOPs; (V + s)h of them), a block the
// per-layer costs above, the head the LM head (F = I = W = 2sbhV FLOPs, Vh parameters); with
// vocab 0 the embedding and the head cost nothing. input_bytes is 0 for every kind: the stage
// input kept under full recompute is per stage (gpt_cost_model_for_layout adds it).
LayerCosts gpt_layer_costs(const GptCostConfig& config);

// gpt_cost_model's split: `layers` / `stages` blocks per stage, the first layers % stages stages
// one more; the embedding on stage 0, the head on the last. REQUIRES: stages >= 1.
std::vector<StageLayers> even_layer_split(int64_t layers, int32_t stages);

// gpt_cost_model for any split: cost_model_for_layout(gpt_layer_costs(config), layout) with each
// stage's recompute input (s*b*h*act_dtype_bytes); the source names `layout_name` unless empty.
// REQUIRES: the layout places config.layers blocks (nn::partition_layers checks layout strings).
CostModel gpt_cost_model_for_layout(const GptCostConfig& config,
                                    const std::vector<StageLayers>& layout,
                                    const std::string& layout_name);

}  // namespace tightpipe
