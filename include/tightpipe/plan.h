// The planner behind `tightpipe plan`: given a GPT-shaped model, a global batch, a number of
// devices, the device (a preset from datasheet figures or costs measured in a run) and the price,
// it enumerates every configuration (pipeline size p with data-parallel size devices / p, virtual
// stages v, microbatch size and count, schedule, activation recomputation, the balanced layer
// split), works out each one's peak memory per rank, simulates the ones that fit (simulator.h),
// adds the data-parallel gradient all-reduce, prices the whole training run and ranks them.
// docs/plan.md has the model in full: the formulas, the presets and their sources, the pruning.
//
// One candidate's numbers come from the same functions a `simulate` run uses: the cost model per
// layer kind (cost_model.h gpt_layer_costs, or fit_layer_costs of a measured run), the layer split
// (balanced_layer_split), the generators and build_auto_schedule, lower(), simulate().
//
// Pure functions of their inputs (no clock in the results but PlanResult::search_seconds);
// thread-safe for distinct inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/simulator.h"
#include "tightpipe/status.h"

namespace tightpipe {

// ----- hardware
// -----------------------------------------------------------------------------------

// One kind of link: a message of n bytes takes latency + n / bandwidth.
struct LinkSpec {
  std::string name;             // "nvlink", "pcie", "infiniband", "ethernet-25g", "threads"
  double latency_s = 0;         // seconds per message
  double bandwidth = 0;         // bytes per second, one direction (0: bytes cost nothing)
  std::string source;           // where the figure comes from (docs/plan.md)
  bool shared_by_node = false;  // the bandwidth is per node, shared by its devices
};

// A device type: datasheet figures (docs/plan.md cites each one).
struct DevicePreset {
  std::string name;            // --device value: "h100-sxm", "h200", "a100-80g", "l40s", "this-cpu"
  std::string description;     // "NVIDIA H100 SXM5 80 GB"
  double peak_flops_bf16 = 0;  // dense BF16 FLOP/s (tensor cores)
  double peak_flops_fp32 = 0;  // dense FP32 FLOP/s
  bool bf16 = true;            // trains in BF16 mixed precision (GPUs); false: FP32 (this-cpu)
  double memory_bytes = 0;     // device memory
  int32_t devices_per_node = 8;        // devices sharing the fast intra-node link
  LinkSpec intra_node;                 // between devices of one node (NVLink, PCIe, threads)
  std::string network = "infiniband";  // the default --network between nodes
  // Compute-lane time per point-to-point message on the sending and on the receiving device (GPU
  // P2P kernels occupy SMs; a CPU rank spends cycles copying): LinkCost::overhead.
  double message_overhead_s = 0;
  // Plus bytes / this per message (a CPU copies the bytes; 0: the overhead is fixed).
  double message_overhead_bandwidth = 0;
  std::string source;  // datasheet, or how it was measured
};

// Every preset, in a stable order (h100-sxm, h200, a100-80g, l40s, this-cpu).
const std::vector<DevicePreset>& device_presets();
// The preset `name` (case-insensitive); InvalidArgument naming --device, the value and listing
// the presets otherwise.
Result<DevicePreset> find_device_preset(std::string_view name);
// The links --network takes: nvlink, pcie, infiniband, ethernet-25g (a 25 Gbit/s cloud network).
const std::vector<LinkSpec>& network_presets();
Result<LinkSpec> find_network(std::string_view name);

// ----- what is planned
// ----------------------------------------------------------------------------

// GPT-2's BPE vocabulary and the LM head's rows Megatron-LM makes of it (padded to a multiple of
// --make-vocab-size-divisible-by 128): `plan`'s default vocabulary, and what `train` runs with
// GPT2BPETokenizer.
inline constexpr int64_t kGpt2VocabSize = 50257;
inline constexpr int64_t kGpt2PaddedVocabSize = 50304;

// The model, in Megatron-LM's flag terms.
struct PlanModel {
  int64_t num_layers = 0;           // --num-layers
  int64_t hidden_size = 0;          // --hidden-size
  int64_t num_attention_heads = 0;  // --num-attention-heads
  int64_t seq_length = 0;           // --seq-length
  int64_t vocab_size = 0;           // --vocab-size (0: no embedding and LM head)
  int64_t ffn_hidden_size = 0;      // --ffn-hidden-size (0: 4 x hidden)
  // Parameters of the whole model (embedding, blocks, head).
  double parameters() const;
};

// Activation recomputation of one candidate (Megatron --recompute-granularity full):
//   none;  full: every block of a stage re-runs its forward before its backward, keeping only
//   each block's input (--recompute-method uniform --recompute-num-layers 1);  block:N: the first
//   N blocks of every stage do that, the others keep all (--recompute-method block
//   --recompute-num-layers N).
struct RecomputeChoice {
  enum class Kind { kNone, kFull, kBlock };
  Kind kind = Kind::kNone;
  int32_t layers = 0;         // N of block:N
  std::string label() const;  // "none", "full", "block:2"
};
// "none", "full" or "block:N" (N >= 1); InvalidArgument naming --recompute otherwise.
Result<RecomputeChoice> parse_recompute_choice(std::string_view text);

// The ranges of plan's real-valued flags (a value outside is an error naming the range): a
// petabyte per device, $10k per device-hour, 1e16 tokens (some 700 x Llama 3's 15T).
inline constexpr double kMaxPlanMemoryBudgetGib = 1 << 20;
inline constexpr double kMaxPlanPricePerDeviceHour = 1e4;
inline constexpr double kMaxPlanTrainTokens = 1e16;
inline constexpr int32_t kMaxPlanTop = 10000;  // --top: rows of the table

struct PlanOptions {
  PlanModel model;
  int64_t global_batch_size = 0;           // --global-batch-size, sequences per step
  std::vector<int64_t> micro_batch_sizes;  // --micro-batch-size candidates (empty: 1, 2, 4, 8)
  int64_t devices = 0;                     // --devices
  DevicePreset device;                     // --device (resolved)
  double mfu = 0.5;                        // --mfu: achieved fraction of the peak FLOP/s
  LinkSpec network;                        // --network between nodes (resolved)
  double memory_budget_bytes = 0;          // per device; 0: 0.9 x device.memory_bytes
  bool distributed_optimizer = false;      // --use-distributed-optimizer: state sharded over dp
  bool flash_attention = true;             // --use-flash-attn: attention scores not stored
  // --costs: costs measured in a run, per layer kind, at `measured_micro_batch_size` sequences
  // per microbatch; times scale linearly with the microbatch size, bytes too. nullopt: the
  // analytic costs of the device preset.
  std::optional<LayerCosts> measured;
  int64_t measured_micro_batch_size = 0;
  // `measured` holds a PyTorch model's measured modules (`tightpipe tune`): the first module in
  // the embedding's place, the last in the head's, each one between a block of its own
  // (LayerCosts::block_each, one per model.num_layers); their static bytes are the measured ones
  // (not the GPT's parameter counts), the GPT shape flags are not needed, and recompute is none.
  bool module_costs = false;
  // --engine torch: the runtime's host time around each compute action (torch_runtime_costs).
  RuntimeHostTime host_time;
  double price_per_device_hour = 0;  // --price-per-device-hour, dollars
  double train_tokens = 0;           // --train-tokens of the whole training run
  // Filters (empty: everything): --pp, --vpp, --schedules, --recompute candidates.
  std::vector<int32_t> pp;
  std::vector<int32_t> vpp;
  // --num-layers-per-virtual-pipeline-stage (Megatron's): the schedules whose v is free
  // (interleaved, looped-bfs) take v = layers / (p x this) only, and only at the pipeline sizes
  // where that divides (chunks_from_layers_per_virtual_stage); 0: not given. Not with vpp.
  int64_t layers_per_virtual_stage = 0;
  std::vector<std::string> schedules;
  std::vector<RecomputeChoice> recompute;
  int32_t top = 10;  // --top: rows of the table
  // The automatic schedules' local search after their greedy, in wall ms per start
  // (ZbAutoOptions::search_budget_ms); nullopt or 0: the greedy's schedule (the planner builds
  // one per shape it simulates; docs/plan.md).
  std::optional<double> auto_search_budget_ms;
  double simpler_within = 0.01;  // a simpler schedule this close to the best is recommended
  // --engine: the engine that runs the job (simulator.h engine_profile): how each candidate's
  // messages and optimizer are simulated; megatron and megatron-overlap plan only the schedules
  // Megatron-LM runs (1f1b, interleaved); zb always post-validates.
  Engine engine = Engine::kTightpipe;
  // --cores, --core-slowdown: the ranks (all p x d of a candidate) share cores (simulator.h
  // CoreSharing); every candidate is simulated so. Default: a core per rank.
  CoreSharing core_sharing;
  // --enable-optimizer-post-validation (engine tightpipe): the zero-bubble schedules are also
  // tried post-validated (steady-state step of back-to-back iterations, the kept copy's memory)
  // and keep it where it is faster and fits.
  bool optimizer_post_validation = false;
  // Errors name the flag, the value and a hint.
  Status validate() const;
};

// One configuration and what it costs.
struct PlanCandidate {
  std::string schedule;  // registry name: "1f1b", "interleaved", "zb-v", "zb-2p", ...
  int32_t pp = 0, vpp = 1, dp = 0;
  int64_t micro_batch_size = 0;
  int64_t num_microbatches = 0;
  std::string recompute;                  // RecomputeChoice::label()
  std::string layout;                     // the layer split, Megatron layout string "E,t*4|t*4,L"
  std::vector<int32_t> blocks_per_stage;  // the same split: blocks per model stage
  // Simulated candidates: the compute-only schedule that was simulated and its stage costs
  // (expanded to its directions), so a caller can write, lower or re-simulate exactly it.
  std::shared_ptr<const Schedule> compute_schedule;
  std::shared_ptr<const CostModel> stage_costs;
  bool fits = false;            // within the memory budget on every rank
  std::string reason;           // why not, when !fits ("out of memory on rank 0 by 3.2 GiB")
  bool simulated = false;       // step time and bubble come from a simulation
  double pipeline_time_s = 0;   // the pipeline's makespan (simulated)
  double allreduce_time_s = 0;  // the slowest rank's DP gradient all-reduce (+ DualPipe's copy sum)
  // The step's exposed all-reduce in bubble points (SimResult::exposed_allreduce_ratio).
  double exposed_allreduce_ratio = 0;
  // The simulated step: the pipeline, then each rank's all-reduce (simulator.h, data parallel),
  // then the optimizer phase when the costs have one.
  double step_time_s = 0;
  // No schedule of this configuration's stages and placement holding at most its memory has a
  // shorter step (lower_bound.h; + DualPipe's copy sum as step_time_s); 0: not simulated.
  double lower_bound_s = 0;
  double bubble_ratio = 0;                // the simulated pipeline's (docs/bubble.md)
  std::vector<double> peak_memory_bytes;  // [pp] per rank
  double tokens_per_s = 0;
  double train_hours = 0;  // steps x step time / 3600
  double cost_usd = 0;     // train_hours x devices x price
  int32_t complexity = 0;  // 0 simplest (1f1b, no recompute); used for the 1% rule
  // Runs with the post-validated optimizer: step_time_s is the steady-state step of back-to-back
  // iterations (steady_state_step_time) and peak_memory_bytes holds the kept copy.
  bool optimizer_post_validation = false;
  std::string engine_profile;  // EngineProfile::description of its simulation
};

struct PlanSearchStats {
  int64_t configurations = 0;  // every (p, v, mbs, schedule, recompute) looked at
  int64_t infeasible = 0;      // refused by shape or memory
  int64_t dominated = 0;       // a lighter recompute of the same configuration fits
  int64_t pruned = 0;          // their lower bound cannot reach the top: not simulated
  int64_t simulated = 0;
};

struct PlanResult {
  PlanOptions options;
  double steps = 0;  // optimizer steps of the run: train_tokens / (global batch x seq)
  double memory_budget_bytes = 0;
  // Candidates with fits first, by step time (ties: simpler, then by key), then the ones that do
  // not fit.
  std::vector<PlanCandidate> candidates;
  int32_t recommended = -1;  // index into candidates; -1 when nothing fits
  int32_t fastest = -1;      // the fastest that fits
  int32_t baseline = -1;     // plain 1F1B of the recommended's p, dp, m, mbs (or the best 1F1B)
  std::string why;           // the recommendation in words
  PlanSearchStats stats;
  double search_seconds = 0;
};

// Searches the space. Errors (InvalidArgument, one line naming the flags): devices that no
// pipeline size divides (with the model's layers), no microbatch size dividing the batch, nothing
// that fits the memory budget (naming the smallest need and the configuration), and the options'
// own errors.
Result<PlanResult> plan(const PlanOptions& options);

// Output: docs/plan.md. The table prints the top rows, the 1F1B baseline, the recommendation with
// its reason, the flags that run it and the infeasible ones with reasons.
std::string format_plan(const PlanResult& result);
std::string plan_to_json(const PlanResult& result, int indent = 2);
// A self-contained HTML page: step time against peak memory per candidate (cost on the second
// axis), the memory budget, the recommended point marked; the table.
std::string plan_to_html(const PlanResult& result);
// The command lines that run `c`: `tightpipe train ...` when tightpipe's model can train it
// (vocab 256, ffn 4h, a schedule and recompute train takes), and Megatron-LM's flags.
std::vector<std::string> plan_command_lines(const PlanResult& result, const PlanCandidate& c);

}  // namespace tightpipe
