// The pipeline simulator: a discrete-event replay of a schedule's per-rank programs under a
// CostModel (cost_model.h), producing the same Timeline type (timeline.h) the executor measures,
// plus makespan, bubble ratio, per-rank busy/idle, peak memory and message counts.
//
// Semantics (docs/cost_model.md has the long form):
//   * Each rank runs its program in order on one compute lane. A compute action starts when the
//     lane is free and every requirement from dependencies() (schedule.h, the single source of
//     truth) has completed (CompletionSet::has: a B satisfies I requirements).
//   * Events sit in a queue ordered by (time, sequence number): equal times resolve in the order
//     the events were created, so results are deterministic.
//   * Lowered schedules carry SEND/RECV. kOverlap: a SEND is posted when its producer is done
//     and completes message_time later; the sender's compute lane is not held; a RECV is a post
//     that completes when its SEND has (the message time sits on the dependency edge).
//     kBlocking: a SEND holds the sender's compute lane for the message time (a blocking send
//     right after its producer); a RECV is still a post, and the compute action that consumes the
//     message waits for it (a blocking receive just before use), as the executor does without
//     --overlap-p2p-communication. Messages are eager (buffered): a SEND does not wait for its
//     RECV to be posted. Links have no contention.
//   * Message overhead (LinkCost::overhead, o): a compute action that sends a message to another
//     rank (F of s with s + 1 remote; I or B of s with s - 1 remote) or consumes one from another
//     rank (F of s with s - 1 remote; I or B of s with s + 1 remote) runs o longer per such
//     message (CostModel::action_time, counted by remote_messages() in schedule.h); the extra
//     time is busy time. A hand-off between stages of one rank costs nothing.
//   * A compute-only (not lowered) schedule is replayed with free messages; one whose cost model
//     gives messages a time or an overhead, or run in kBlocking mode, is rejected: lower() it
//     first.
//   * An OVERLAP_F_B pair holds the lane once for overlap_fb_time(F, B, overlap_fb_factor), where
//     F and B are its sub-actions' action_time; it starts when both sub-actions' dependencies are
//     met. Its timeline shows the F then the B, each scaled to its share of the pair's time.
//     Memory follows the sub-actions: the F adds, then the B frees.
//   * Shared cores (SimOptions::core_sharing, off by default): a compute action's time is work
//     done at shared_core_rate(k) while k ranks compute, so its end is known only when it comes;
//     it is recorded then, with the start it had.
//   * Memory per rank follows program order: F adds act_bytes (input_bytes under full
//     recompute), I re-materializes the activation under full recompute and then keeps only
//     act_after_i_bytes, W frees the rest, B frees all. Static bytes = params + grads + optimizer.
//   * The optimizer: when the cost model gives stages an `optimizer` time, every rank runs its
//     stages' sum once all ranks finished their programs (an "optimizer" event from the rank's
//     program end to sync + its time, as measured runs record it).
//   * Data parallelism (SimOptions::data_parallel, d > 1): d replicas run the same program, so
//     they stay in step and only the gradient all-reduce is added. Each stage's reduction over
//     its d replicas costs ring_allreduce_time() of its StageCost::allreduce_bytes (0:
//     grad_bytes) on the cost model's link, on a per-rank all-reduce lane (one reduction at a
//     time per rank). Without overlap a rank reduces its stages in ascending order once its
//     program has ended; with overlap each stage's reduction starts when its last W or B has
//     ended (or the lane is free), in the order the stages finish. The rank's optimizer starts
//     when its program and its reductions have ended; the idle time its optimizer waits on
//     them is the exposed all-reduce (prof.h exposed_allreduce).
//   * The bubble ratio is prof.h's step_bubble() over the same quantities a measured step has
//     (the makespan measure); span_bubble_ratio is prof.h's span_bubble() (each rank timed from
//     its first compute action, the zero-bubble paper's measure).
//   * A schedule that cannot finish returns FailedPrecondition naming each blocked rank's action
//     and what it waits for; it never hangs.
//
// simulate() is a pure function; thread-safe for distinct inputs. O(N log N) in the number of
// actions N (no per-event scans); with shared cores (SimOptions::core_sharing) O(N P log N): each
// compute start or end re-times the P ranks' running actions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe {

enum class CommMode { kOverlap, kBlocking };

std::string_view comm_mode_name(CommMode mode);  // "overlap", "blocking"
Result<CommMode> parse_comm_mode(std::string_view text);
std::string_view recompute_name(Recompute recompute);  // "none", "full"
Result<Recompute> parse_recompute(std::string_view text);

// The engine that will run the job (--engine; docs/cost_model.md "Engine profiles"): how its
// schedules' messages meet compute and when its optimizer runs, each read from that engine's code.
//   tightpipe         this executor: --comm-mode and --optimizer-post-validation as given
//   megatron          Megatron-LM's p2p calls (megatron_p2p_calls, schedule.h): a call's sends
//                     and receives are posted together and the rank computes nothing until all
//                     have completed; a send completes only once its receiver has posted the
//                     receive (NCCL p2p is a rendezvous) and the message has crossed; optimizer
//                     synchronous (the grad-norm and found-inf all-reduces over the pipeline)
//   megatron-overlap  --overlap-p2p-communication: interleaved schedules post sends and receives
//                     asynchronously and wait a receive just before its compute (overlap); one
//                     stage per rank runs as `megatron` (Megatron turns overlap off without
//                     virtual stages); optimizer synchronous
//   torch             torch.distributed.pipelining: sends asynchronous, a receive waited just
//                     before its compute (overlap); optimizer synchronous (the user's step after
//                     schedule.step())
//   zb                the zero-bubble runtime: asynchronous p2p (overlap) and the post-validated
//                     optimizer (each rank steps at its own end)
//   deepspeed         DeepSpeed's PipelineEngine (deepspeed_p2p_calls below): every send and
//                     receive a blocking call of its own in TrainSchedule's order; optimizer
//                     synchronous
// Send semantics (every profile with calls): a send completes only once its receiver has posted
// the receive, then the message time: a rendezvous. NCCL documents it for ncclSend/ncclRecv
// (megatron, megatron-overlap on GPUs); gloo's TCP pair does the same (tcp/pair.cc: a send waits
// for the receiver's recv-ready notice): the CPU runs of docs/peers.md.
enum class Engine { kTightpipe, kMegatron, kMegatronOverlap, kTorch, kZb, kDeepSpeed };
std::string_view engine_name(Engine engine);
// Errors (InvalidArgument): an unknown name; the message lists the known ones.
Result<Engine> parse_engine(std::string_view text);

// How a simulation runs one schedule under an engine: the one mapping every prediction uses.
struct EngineProfile {
  Engine engine = Engine::kTightpipe;
  bool megatron_calls = false;              // messages run as Megatron's p2p calls (above)
  bool deepspeed_calls = false;             // messages run as DeepSpeed's blocking calls (above)
  CommMode comm_mode = CommMode::kOverlap;  // otherwise, how messages use the compute lanes
  bool optimizer_post_validation = false;
  std::string description;  // one line naming the engine and what it waits for
};
struct SimOptions;
// DeepSpeed's order of blocking sends and receives (deepspeed/runtime/pipe/schedule.py
// TrainSchedule, p2p.py): before a compute that follows another, the receive for it first when a
// forward is followed by a backward (RecvGrad, then SendActivation of the forward), the previous
// compute's send first otherwise; each instruction a call of its own (P2pCalls, schedule.h).
// Errors (InvalidArgument): a lowered schedule, virtual stages, two directions, I/W actions.
Result<P2pCalls> deepspeed_p2p_calls(const Schedule& compute_only);
// Whether the optimizer steps post-validated under `engine` (zb always; tightpipe when
// --optimizer-post-validation asks; the others synchronous): the one statement engine_profile()
// and the CLIs' choice of zb-auto's objective (zb_objective_for) use.
bool optimizer_post_validated(Engine engine, bool optimizer_post_validation);
// Errors (InvalidArgument): megatron / megatron-overlap with a schedule Megatron does not run
// (I/W split, OVERLAP_F_B pairs, two directions), naming it and the engines that run it.
Result<EngineProfile> engine_profile(Engine engine, const Schedule& schedule,
                                     const SimOptions& options);

// The data-parallel gradient all-reduce (issue 19, docs/cost_model.md "Data parallel").
struct DataParallelSim {
  int32_t size = 1;         // d replicas of the pipeline (--data-parallel-size); 1: none
  bool overlap = false;     // --overlap-grad-reduce: a stage's reduction starts after its last W/B
  double bucket_bytes = 0;  // bytes per bucket (trainer_data_parallel); 0: one per stage
  // The link within a data-parallel group (latency, bandwidth); none: the cost model's link.
  std::optional<LinkCost> link = std::nullopt;
};

// The trainer's gradient reduction carries each gradient value as a double (it sums doubles:
// DP = 2 gives exactly the float sum): the bytes per value on the wire.
inline constexpr double kGradReduceBytesPerValue = sizeof(double);
// The trainer's reduction as the simulator prices it: `size` replicas, `--bucket-size` values per
// bucket (kGradReduceBytesPerValue each), overlapped or after the program; the cost model's link.
DataParallelSim trainer_data_parallel(int32_t size, bool overlap, int64_t bucket_values);

// The time of a ring all-reduce of `bytes` over d ranks on `link`, in `bucket_bytes` buckets
// (0: one): per bucket of b bytes 2(d-1)/d x b / bandwidth + 2(d-1) x latency (bandwidth 0:
// bytes are free). 0 when d <= 1 or bytes <= 0.
double ring_allreduce_time(double bytes, int32_t d, const LinkCost& link, double bucket_bytes);
// The bytes one data-parallel all-reduce of a stage reduces: allreduce_bytes, or grad_bytes when
// that is 0 (StageCost).
double stage_allreduce_bytes(const StageCost& c);
// OK, or InvalidArgument naming --data-parallel-size or --bucket-size and the value.
Status check_data_parallel(const DataParallelSim& dp);

// Ranks whose compute shares cores (issue 48, docs/cost_model.md "Shared cores"): CPU ranks on
// fewer cores than ranks, or on cores that slow each other (SMT siblings; a VM whose vCPUs the
// host runs on one physical core). While k ranks run compute actions at once, each progresses at
// shared_core_rate(k) of its cost-model speed (processor sharing: a rank's action stretches
// while others compute, and shrinks back when they stop). Off by default: every rank has a core.
struct CoreSharing {
  // The cores the ranks' compute runs on (--cores); 0: as many as ranks. With k > cores ranks
  // computing, each gets cores / k of one.
  int32_t cores = 0;
  // How much longer each of several ranks computing at once takes than one alone, on top of the
  // core count (--core-slowdown, >= 1; measured as that many one-thread processes at once over
  // one alone, e.g. bench/torch/tune_bench.py's contention lines). 1: cores do not slow each
  // other.
  double slowdown = 1.0;
};
// The speed of each of `computing` ranks computing at once, as a fraction of one alone:
// 1 for one (or none); otherwise min(1, cores / computing) / slowdown (cores 0: no cap). The one
// definition the simulator steps every shared compute action by.
double shared_core_rate(const CoreSharing& sharing, int32_t computing);
// Whether `sharing` changes any action's time for `ranks` ranks (slowdown above 1, or fewer
// cores than ranks).
bool cores_shared(const CoreSharing& sharing, int32_t ranks);
// OK, or InvalidArgument naming --cores (negative) or --core-slowdown (below 1, not finite).
Status check_core_sharing(const CoreSharing& sharing);
// What simulate's, plan's and tune's tables say of `sharing`: "the ranks share 2 core(s); each of
// several computing at once 1.25x slower than one alone".
std::string core_sharing_text(const CoreSharing& sharing);

struct SimOptions {
  CommMode comm_mode = CommMode::kOverlap;  // how messages use the compute lanes
  Recompute recompute = Recompute::kNone;   // full: F keeps only its input, I/B re-run F first
  bool record_timeline = true;              // false: statistics only (faster, less memory)
  // How much of an OVERLAP_F_B pair's shorter sub-action the hardware hides, in [0, 1]
  // (--overlap-fb-factor): 0 runs them back to back (F + B), 1 hides min(F, B) entirely.
  double overlap_fb_factor = 0;
  DataParallelSim data_parallel = {};  // the gradient all-reduce across replicas; default: none
  // Optimizer post-validation (--optimizer-post-validation; the zero-bubble runtime's
  // --enable-optimizer-post-validation, REFERENCE.md section 4): each rank runs its optimizer as
  // soon as its own program and all-reduces end, without waiting for the other ranks (its
  // inf/NaN and gradient-norm check is validated later, off the critical path). false: every
  // rank waits for the slowest before its optimizer, as the executor's synchronous step does.
  bool optimizer_post_validation = false;
  // The engine whose behaviour is simulated (engine_profile): tightpipe keeps comm_mode and
  // optimizer_post_validation; every other engine sets both its own way.
  Engine engine = Engine::kTightpipe;
  // When each rank's program starts (empty: every rank at 0): the later iterations of a
  // post-validated run, where a rank starts as soon as its previous step ended
  // (steady_state_step_time). Non-negative and finite, one per rank.
  std::vector<double> rank_start = {};
  // Ranks sharing cores (CoreSharing): the program's compute actions (F, I, W, B, OVERLAP_F_B,
  // with their message overhead and host time) progress at shared_core_rate() of the number of
  // ranks computing at that moment (times data_parallel.size: the replicas run in step and
  // share the same cores). Messages, the all-reduce and the optimizer phase are not shared.
  // Default: off.
  CoreSharing core_sharing = {};
};

// The time of an OVERLAP_F_B pair whose F takes f and B takes b: f + b - factor * min(f, b).
double overlap_fb_time(double f, double b, double factor);
// OK, or InvalidArgument naming --overlap-fb-factor and its value when it is outside [0, 1].
Status check_overlap_fb_factor(double factor);

// The kind of the Timeline event that records an action of this type: F, I, W, B as themselves,
// SEND and RECV of either direction as kSend and kRecv, OVERLAP_F_B as kOther (the timeline
// records its two sub-actions). The simulator's mapping; calibration samples use it too.
// (timeline.h cannot declare it: prof does not depend on schedule.)
EventKind event_kind(ActionType type);

struct RankSimStats {
  int32_t rank = 0;
  double first_start = 0;        // start of the first compute action
  double last_end = 0;           // end of the last compute action
  double busy = 0;               // busy time (compute and the optimizer after sync; prof.h)
  double idle = 0;               // makespan - busy
  double bubble_ratio = 0;       // idle / makespan (step_bubble: the one definition)
  double internal_idle = 0;      // last_end - first_start - busy
  double span = 0;               // last_end - first_start (prof.h span_bubble)
  double span_bubble_ratio = 0;  // (max_span - compute) / max_span (prof.h span_bubble)
  double comm = 0;               // time of this rank's SEND and RECV events
  double program_end = 0;        // end of its program's events (before all-reduce and optimizer)
  double step_end = 0;           // end of its step: program, all-reduces and optimizer
  double allreduce = 0;          // time of its data-parallel all-reduces (hidden or not)
  double exposed_allreduce = 0;  // of it, idle time its optimizer waited (prof.h)
  int64_t compute_actions = 0;
  int64_t messages_sent = 0;
  int64_t bytes_sent = 0;
  double peak_activation_bytes = 0;  // peak of the per-microbatch bytes held
  double peak_activations = 0;       // the same in whole-rank microbatch activations
  double static_bytes = 0;           // params + grads + optimizer state of the rank's stages
  double peak_bytes = 0;             // peak_activation_bytes + static_bytes
};

struct SimResult {
  std::string schedule;  // Schedule::name
  int32_t num_ranks = 0;
  int32_t num_stages = 0;
  int32_t num_microbatches = 0;
  CommMode comm_mode = CommMode::kOverlap;
  Recompute recompute = Recompute::kNone;
  std::string cost_source;  // CostModel::source()
  // The layer split the costs assume ("E,t*2|t*2,L"), when they are per layer kind; "" otherwise.
  // simulate() leaves it empty: the caller that built the costs from a split fills it in.
  std::string layout;
  std::string time_unit;         // CostModel::time_unit()
  double makespan = 0;           // latest end of any event, from 0 (the optimizer's included)
  double total_compute = 0;      // busy time summed over ranks (step_bubble)
  double bubble_ratio = 0;       // step_bubble(...).ratio (prof.h): the makespan measure
  double max_span = 0;           // the longest rank span, first compute start to last compute end
  double span_bubble_ratio = 0;  // span_bubble(...).ratio (prof.h): the per-rank span measure
  bool optimizer = false;        // the cost model gave the optimizer a time: its phase is simulated
  bool optimizer_post_validation = false;  // as simulated (SimOptions)
  Engine engine = Engine::kTightpipe;      // as simulated (SimOptions)
  std::string engine_description;          // EngineProfile::description
  // The step's period when steps run back to back (steady_state_step_time); simulate() leaves it
  // 0: the caller that computed it fills it in (the JSON's steady_state_step_time, when set).
  double steady_state_step_time = 0;
  DataParallelSim data_parallel;  // as simulated
  CoreSharing core_sharing;       // as simulated (SimOptions); cores_shared() says if it acted
  // Sum over ranks of exposed_allreduce / (P x makespan): the breakdown's "exposed all-reduce"
  // share of the step (report.h), in bubble-ratio points.
  double exposed_allreduce_ratio = 0;
  // One whole-rank microbatch activation (CostModel), divided by Schedule::directions (DualPipe:
  // a microbatch passes through one of a rank's two copies), so units compare across schedules.
  double activation_unit_bytes = 0;
  bool real_bytes = true;  // false: memory sizes are abstract units (uniform model), not bytes
  // The shape's lower bound at the schedule's memory (lower_bound.h, lower_bound_for), when the
  // caller computed one: simulate() leaves it unset, as `layout`. The tables print it next to the
  // makespan and the span; the JSON adds lower_bound_* and gap_to_lower_bound* keys.
  bool has_lower_bound = false;
  double lower_bound_makespan = 0;
  double lower_bound_span = 0;
  double lower_bound_memory = 0;  // the memory limit it assumed (whole-rank activations)
  int64_t messages = 0;           // SENDs simulated
  int64_t message_bytes = 0;
  int64_t actions = 0;              // actions simulated (compute and comm)
  int64_t events = 0;               // queue events processed
  std::vector<RankSimStats> ranks;  // [P]
  Timeline timeline;                // empty ranks when !record_timeline; time_unit = cost time unit
};

// REQUIRES: nothing; bad input (out-of-range stages, actions on the wrong rank, a cost model
// that does not cover the schedule, an unlowered schedule with costly messages) is an error.
Result<SimResult> simulate(const Schedule& schedule, const CostModel& cost,
                           const SimOptions& options = {});

// The time one step takes when steps run back to back (docs/cost_model.md, "Optimizer"). With the
// synchronous optimizer every step starts together after the last rank's optimizer: the
// makespan. With options.optimizer_post_validation each rank starts its next step as soon as its
// own ended, so a step's warm-up overlaps the previous one's cool-down on other ranks: the
// iterations are simulated one after another, each rank starting at its previous step_end, until
// every rank's step ends the same time after its previous one (from then on each iteration is the
// last one shifted: an exact period), or at most kSteadyStateMaxIterations (then the mean of the
// last p periods of the latest end). Messages of the post-validation (the full inf/NaN and norm
// state) are not timed.
// Errors: simulate()'s.
inline constexpr int32_t kSteadyStateMaxIterations = 64;
struct SteadyState {
  double step_time = 0;    // the period
  int32_t iterations = 0;  // simulated to find it
  bool converged = false;  // two consecutive periods agreed (relative 1e-9)
};
Result<SteadyState> steady_state_step_time(const Schedule& schedule, const CostModel& cost,
                                           const SimOptions& options = {});

// Stable JSON (docs/simulate_json.md): one object per result.
std::string sim_result_to_json(const SimResult& result, int indent = 2);
// A human table: the summary lines plus one row per rank.
std::string format_sim_table(const SimResult& result);
// One row per result: schedule, v, makespan, bubble %, peak activations per rank, peak memory per
// rank, messages (the `--compare` table).
std::string format_compare_table(const std::vector<SimResult>& results);
std::string compare_results_to_json(const std::vector<SimResult>& results, int indent = 2);

// ----- choosing the layer split ------------------------------------------------------------------
//
// choose_layer_split(): the split of `num_layers` transformer blocks over the schedule's stages
// (the embedding on stage 0, the head on the last, every block once and in order; a middle stage
// holds at least one block, the first and the last may hold none) whose simulated makespan under
// cost_model_for_layout(costs, split) is the smallest. Ties (within 1e-9 relative): the more even
// block counts (smaller sum of squares), then the lexicographically first. When there are at most
// max_exhaustive splits every one is simulated (C(L+1, S-1) for S >= 2 stages); otherwise the
// search starts from the better of the even split and the split that minimizes the largest stage
// time (F + B, a DP), and moves one block across a stage boundary while that improves (a local
// optimum, never worse than the even split). Deterministic.

struct LayerSplitOptions {
  SimOptions sim;                 // how each split is simulated (no timeline is recorded)
  int64_t max_exhaustive = 4096;  // simulate every split when there are at most this many
};

struct LayerSplit {
  std::vector<StageLayers> stages;  // [S]
  double makespan = 0;              // the schedule's simulated makespan under this split
  double bubble_ratio = 0;          // and its bubble ratio (SimResult::bubble_ratio)
  int64_t simulated = 0;            // splits simulated
  bool exhaustive = false;          // every valid split was simulated: the minimum is global
};

// The split of `num_layers` blocks over `stages` stages (embedding on stage 0, head on the last,
// a middle stage holds at least one block) that minimizes the largest stage time F + B under
// `costs` (a DP over stages and blocks; the smallest count wins ties at each stage): the balanced
// split choose_layer_split() starts from, and `plan`'s split. REQUIRES: stages >= 1,
// num_layers >= stages - 2.
std::vector<StageLayers> balanced_layer_split(const LayerCosts& costs, int32_t num_layers,
                                              int32_t stages);

// `schedule` may be compute-only (it is lowered first) or lowered. Errors (InvalidArgument):
// fewer blocks than middle stages, a negative count, max_exhaustive < 1; and simulate()'s errors.
Result<LayerSplit> choose_layer_split(const LayerCosts& costs, const Schedule& schedule,
                                      int32_t num_layers, const LayerSplitOptions& options = {});

}  // namespace tightpipe
