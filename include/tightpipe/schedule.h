// The schedule IR: one ordered program of actions per rank, shared by the generators, the
// validator, the lowering pass, the simulator and the executor.
//
// An Action is a value (type, stage, microbatch) whose text form is PyTorch's: `2F0` (stage 2,
// forward of microbatch 0), `1I3` (input-gradient backward), `0W3` (weight-gradient backward),
// `2B1` (fused backward = I then W), `1SEND_F3`, `2RECV_B0` (communication), and the composite
// `(0F5;7B2)OVERLAP_F_B`: a forward and a full backward of another (stage, microbatch) on the same
// rank, run as one unit (DualPipe's overlapped pair; docs/schedule_ir.md). A Schedule holds
// the shape, the stage-to-rank map and the programs; it has no timesteps and no idle slots:
// timing is the simulator's or the executor's business.
//
// Everything here is pure (no tensors, no transport) and thread-compatible: const methods may be
// called concurrently, mutation needs external synchronization.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

namespace tightpipe {

enum class ActionType {
  kForward,         // F: forward of one stage for one microbatch
  kBackwardInput,   // I: gradient w.r.t. the stage input (the upstream stage waits for it)
  kBackwardWeight,  // W: gradient w.r.t. the stage weights (can wait)
  kBackward,        // B: fused I then W
  kSendAct,         // SEND_F: send the forward output of (stage, mb) to stage + 1
  kRecvAct,         // RECV_F: receive the forward input of (stage, mb) from stage - 1
  kSendGrad,        // SEND_B: send the input gradient of (stage, mb) to stage - 1
  kRecvGrad,        // RECV_B: receive the output gradient of (stage, mb) from stage + 1
  kOverlapFB,       // OVERLAP_F_B: F of (stage, mb) paired with B of (b_stage, b_microbatch)
};
// How many action types there are: the size of every table indexed by ActionType.
inline constexpr int kNumActionTypes = 9;
static_assert(kNumActionTypes == static_cast<int>(ActionType::kOverlapFB) + 1,
              "kNumActionTypes must follow the last ActionType");

struct Action {
  ActionType type = ActionType::kForward;
  int32_t stage = 0;
  int32_t microbatch = 0;
  // kOverlapFB only: the backward sub-action's stage and microbatch (stage and microbatch above
  // are the forward's). 0 for every other type, so that == and the text form stay exact.
  int32_t b_stage = 0;
  int32_t b_microbatch = 0;

  friend bool operator==(const Action&, const Action&) = default;
};

// True for F, I, W, B and the OVERLAP_F_B pair.
bool is_compute(ActionType t);
bool is_comm(ActionType t);
// "F", "I", "W", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "OVERLAP_F_B".
std::string_view action_type_name(ActionType t);
// Text form: "2F0", "1SEND_F3", "(0F5;7B2)OVERLAP_F_B".
std::string to_string(const Action& a);
// Exact inverse of to_string. Errors name the token and say what was expected.
Result<Action> parse_action(std::string_view token);

// The pair `(f;b)OVERLAP_F_B`. REQUIRES: f is an F and b a B (TP_CHECK).
Action overlap_f_b(const Action& f, const Action& b);
// The actions `a` stands for: its F and its B for a pair (in that order: the pair runs them back
// to back), else `a` alone. Every per-(stage, microbatch) rule (dependencies, messages, memory,
// costs) is asked about these, never about the pair itself.
struct SubActions {
  Action at[2];
  int32_t count = 1;
  const Action* begin() const { return at; }
  const Action* end() const { return at + count; }
};
SubActions sub_actions(const Action& a);

// Where stage s lives. kLoop: rank s mod P (interleaved). kV: stages r and 2P-1-r on rank r
// (ZB-V and DualPipeV; DualPipe too: its reverse pipeline's stage id P+k, which computes model
// stage k, lives on rank P-1-k, that is 2P-1-r for r = P-1-k).
enum class Placement { kLoop, kV };
// REQUIRES: stages % ranks == 0 (and stages == 2 * ranks for kV).
std::vector<int32_t> place_stages(Placement placement, int32_t ranks, int32_t stages);

struct Schedule {
  int32_t num_ranks = 0;
  int32_t num_stages = 0;
  int32_t num_microbatches = 0;
  std::vector<int32_t> stage_to_rank;         // [S]
  std::vector<std::vector<Action>> programs;  // [P][steps]
  std::string name;                           // generator name, or the source file
  // Went through lower() (or parsed with SEND/RECV): cross-rank edges are RECVs.
  bool lowered = false;
  // Independent pipelines in the schedule (DualPipe: 2). The stage ids split into `directions`
  // runs of num_stages / directions consecutive ids, each a pipeline of its own (no message
  // crosses from one run to the next), and the microbatch ids into as many consecutive runs:
  // direction d runs microbatches [d M / directions, (d + 1) M / directions) only. Stage id s
  // computes model stage model_stage(s) = s mod (num_stages / directions): DualPipe's reverse
  // pipeline holds the second copy of every model stage (docs/schedule_ir.md, "DualPipe").
  int32_t directions = 1;

  int32_t chunks() const { return num_ranks ? num_stages / num_ranks : 0; }
  int32_t rank_of(int32_t stage) const { return stage_to_rank[stage]; }
  // Stages in one direction's pipeline. REQUIRES: directions >= 1 (validate checks it divides).
  int32_t stages_per_direction() const { return num_stages / directions; }
  int32_t direction_of_stage(int32_t stage) const { return stage / stages_per_direction(); }
  int32_t direction_of_microbatch(int32_t mb) const { return mb / (num_microbatches / directions); }
  // Which model stage (block of layers) stage id `stage` computes: the stage itself when there
  // is one direction; DualPipe's stage ids p + k compute model stage k. The one statement of it.
  int32_t model_stage(int32_t stage) const { return stage % stages_per_direction(); }
  // Whether `stage` runs microbatch `mb` at all (both in the same direction).
  bool runs(int32_t stage, int32_t mb) const {
    return direction_of_stage(stage) == direction_of_microbatch(mb);
  }
  // True if any program holds a SEND or RECV (a scan; `lowered` is the cached answer).
  bool has_comm_actions() const;
  // Total number of actions over all ranks.
  size_t size() const;
  // The local stages of `rank` in ascending order.
  std::vector<int32_t> stages_of(int32_t rank) const;
};

// ----- limits ----------------------------------------------------------------------------------
//
// The largest pipeline a schedule may describe. Every generator, reader (CSV, JSON) and validate()
// refuses more before allocating anything of that size, so no input can make a command allocate
// gigabytes or run for minutes before its error (docs/schedule_ir.md, "Limits").
inline constexpr int32_t kMaxRanks = 1024;                          // p
inline constexpr int32_t kMaxChunks = 64;                           // v, virtual stages per rank
inline constexpr int32_t kMaxStages = 8192;                         // S = p x v
inline constexpr int32_t kMaxMicrobatches = 65536;                  // m
inline constexpr int64_t kMaxStageMicrobatches = int64_t{1} << 18;  // S x m (x3 compute actions)

// OK, or InvalidArgument naming `what` (a flag or a file), the count over its limit and a hint.
Status check_schedule_shape(std::string_view what, int64_t ranks, int64_t stages,
                            int64_t microbatches);

// ----- generators ----------------------------------------------------------------------------

// Generators dualpipev and dualpipe (DeepSeek; docs/schedule_ir.md "DualPipeV and DualPipe") use
// OVERLAP_F_B pairs and need m >= 2p; dualpipe needs p and m even and has 2 directions.
struct GeneratorOptions {
  int32_t ranks = 1;         // p: pipeline ranks
  int32_t microbatches = 1;  // m: microbatches per step
  int32_t chunks = 1;        // v: virtual stages (chunks) per rank
  int32_t group_size = 0;    // interleaved: microbatches per group (0: p, as Megatron)
};

using GeneratorFn = std::function<Result<Schedule>(const GeneratorOptions&)>;

struct GeneratorInfo {
  std::string name;      // registry name, e.g. "zb-h1"
  std::string summary;   // one line for --help
  bool takes_chunks;     // accepts v > 1 (interleaved, looped-bfs) or needs v == 2 (zb-v)
  int32_t fixed_chunks;  // 0: any v; otherwise the only v accepted (zb-v: 2; 1f1b: 1)
  GeneratorFn fn;
};

// All registered generators, in a stable order.
const std::vector<GeneratorInfo>& schedule_generators();
// The generator a name or alias refers to (case-insensitive), or nullptr.
const GeneratorInfo* find_generator(std::string_view name);
// Looks a generator up by name (case-insensitive; a few aliases such as "1F1B", "zbv") and runs
// it. Unknown names and shapes a generator cannot take are InvalidArgument naming the value and
// a hint.
Result<Schedule> generate_schedule(std::string_view name, const GeneratorOptions& options);

// The registered names, "gpipe, 1f1b, interleaved, ...", for hints and --help texts.
std::string generator_names();

// One item of a schedule list such as `--compare gpipe,1f1b,interleaved:2` or `--what-if
// zb-v,interleaved:4`: a generator and, after ':', the chunks (virtual stages) per rank.
struct ScheduleSpec {
  std::string name;    // the generator's registry name ("zb-h1" for "ZBH1")
  int32_t chunks = 0;  // v after ':'; 0: not given (the caller picks the default)

  // "interleaved:2", or the name alone when no v was given.
  std::string label() const;
};

// The one parser of schedule lists `name[:v],name[:v],...`: items are trimmed, empty items
// skipped, names looked up as find_generator does. Errors are InvalidArgument, one line naming
// `flag` (e.g. "--compare"), the item and a hint listing the generator names: an unknown name,
// a v that is not an integer in [1, 64], a v the generator cannot take (1f1b:2, zb-v:3), a list
// that names no schedule.
Result<std::vector<ScheduleSpec>> parse_schedule_specs(std::string_view flag,
                                                       std::string_view text);

// A schedule file (.csv in PyTorch's layout, or .json), parsed and validated as it is (lowered
// when it holds SEND/RECV).
Result<Schedule> load_schedule_file(const std::string& path);
// What `--schedule` names: a registry name generated with `options` (chunks 0: the generator's
// default, 2 for zb-v and 1 otherwise), or a .csv/.json file; the compute-only schedule either way.
Result<Schedule> schedule_from_name_or_file(const std::string& name, GeneratorOptions options);

// ----- dependencies ----------------------------------------------------------------------------

// What must have completed before `a` may start, as actions. A requirement of type
// kBackwardInput is met by that I or by the fused B of the same (stage, microbatch); use
// CompletionSet to test. For compute-only schedules cross-rank edges name the producing compute
// action; for lowered ones they name the RECV (and a RECV requires the peer's SEND). An
// OVERLAP_F_B pair needs what its F and its B need (sub_actions), in that order; a pair whose B
// needs the pair's own F lists that F, which the pair can never meet (validate() says so).
// The single source of truth for validate, lower, the simulator and the executor.
std::vector<Action> dependencies(const Schedule& schedule, const Action& a);

// One point-to-point message of the pipeline, for one microbatch: the activation stage s sends to
// stage s + 1, or the input gradient stage s sends to stage s - 1. It exists whether or not the two
// stages share a rank (local(): handed off on the rank, no SEND/RECV).
struct MessageRoute {
  bool gradient = false;  // an input gradient (travels to stage - 1), else an activation (+ 1)
  int32_t microbatch = 0;
  int32_t src_stage = 0;  // the stage that produces it (F or I/B) and SENDs it
  int32_t dst_stage = 0;  // the stage that RECVs and consumes it (F or I/B)
  int32_t src_rank = 0;   // stage_to_rank[src_stage]
  int32_t dst_rank = 0;   // stage_to_rank[dst_stage]

  bool local() const { return src_rank == dst_rank; }
  // SEND_F/SEND_B on the source stage and the matching RECV_F/RECV_B on the destination stage.
  Action send() const;
  Action recv() const;
};

// Which end of a message an action stands at.
enum class MessageEnd {
  kOut,  // the message leaves the action's stage: a SEND, or the compute that produces it
  kIn,   // the message enters the action's stage: a RECV, or the compute that consumes it
};

// Where the message of `a` goes. kOut: SEND_F s and F s -> the activation from s to s + 1;
// SEND_B s, I s and B s -> the gradient from s to s - 1. kIn: RECV_F s and F s <- the activation
// from s - 1; RECV_B s, I s and B s <- the gradient from s + 1. nullopt where `a` has no message
// at that end: W, a SEND asked for kIn, a RECV asked for kOut, the ends of the pipeline (no
// stage -1 or S, and no message between two directions: Schedule::directions), and an
// OVERLAP_F_B pair (two messages at each end: ask about its sub_actions()). The single statement of
// the pipeline's message flow: dependencies, validate, lower, the simulator and the executor all
// ask it. REQUIRES: 0 <= a.stage < schedule.num_stages and stage_to_rank has num_stages entries.
std::optional<MessageRoute> message_route(const Schedule& schedule, const Action& a,
                                          MessageEnd end);

// The rule under message_route, for callers without a Schedule (a timeline's events): whether
// the message is a gradient, and the stage on its other end (activations go to stage + 1,
// gradients to stage - 1). nullopt when `a` has no message at that end (W; a SEND asked kIn; a
// RECV asked kOut). The other stage may be out of range: message_route checks it.
struct MessageEnds {
  bool gradient = false;
  int32_t other_stage = 0;
};
std::optional<MessageEnds> message_ends(const Action& a, MessageEnd end);

// How many messages compute action `a` sends to or consumes from another rank (message_route at
// both ends, not local()): 0, 1 or 2. F of s: the activation out (s + 1 remote) and in (s - 1
// remote); I and B of s: the gradient out (s - 1) and in (s + 1); W: none. The count that
// LinkCost::overhead is charged for (cost_model.h). REQUIRES: as message_route.
int32_t remote_messages(const Schedule& schedule, const Action& a);

// Which (type, stage, microbatch) actions have completed.
class CompletionSet {
 public:
  explicit CompletionSet(const Schedule& schedule);
  void mark(const Action& a);
  // True if `requirement` has completed (B satisfies I and W requirements).
  bool has(const Action& requirement) const;
  bool ready(const Schedule& schedule, const Action& a) const;

 private:
  size_t index(ActionType t, int32_t stage, int32_t mb) const;
  int32_t stages_, microbatches_;
  std::vector<uint8_t> done_;
};

// ----- validation and lowering -----------------------------------------------------------------

// Checks: exactly one F per (stage, mb); either one B or one I and one W; F before I/B; I before
// W; each action on the rank that owns its stage; consistent stage-to-rank map; on lowered
// schedules every SEND has exactly one matching RECV and vice versa; and a dry run proving every
// rank can finish. The error message holds the rank x step grid with the offending cell marked.
Status validate(const Schedule& schedule);

// Adds SEND/RECV for every cross-rank edge. The sender places the receiver's RECV while the
// programs are replayed in dependency order, so matching operations are posted in a hang-free
// order; stages on the same rank hand off locally. REQUIRES: a compute-only schedule.
Result<Schedule> lower(const Schedule& schedule);

// The warm-up forwards of rank r in interleaved 1F1B with v chunks, m microbatches in groups of
// g: min(m v, 2 (p - 1 - r) + (v - 1) g). The one statement of it, for the generator and for
// Megatron's calls (megatron-core 0.19.2 `get_pp_rank_microbatches`; PyTorch's
// ScheduleInterleaved1F1B the same), m = p included.
int32_t interleaved_warmup_forwards(int32_t p, int32_t r, int32_t v, int32_t g, int32_t m);

// Megatron-LM's p2p calls (docs/cost_model.md "Engine profiles"): where Megatron's schedules post
// their sends and receives, as batches that are waited together before the next compute.
// megatron/core/pipeline_parallel/schedules.py:
//  * one stage per rank (forward_backward_pipelining_without_interleaving): before the first
//    compute its input's receive; between two computes of different kinds one call holds the
//    first's output send and the second's input receive (send_forward_recv_backward,
//    send_backward_recv_forward); between two of the same kind, two calls, the send then the
//    receive (send_forward then recv_forward; send_backward then recv_backward); after the last
//    compute its send.
//  * more stages than ranks (forward_backward_pipelining_with_interleaving, overlap off): the
//    rank's first interleaved_warmup_forwards() forwards are warm-up steps, with the microbatch
//    group g read from the order (rank 0's chunk-0 forwards before its first chunk-1 forward, as
//    the interleaved generator and Megatron's microbatch groups place them); after them an F
//    followed by a B is one step of the steady state (forward then backward, then p2p); every
//    other compute is a step of its own; between two steps one call holds the sends of the first's
//    outputs and the receives of the second's inputs (send_forward_recv_forward,
//    send_forward_backward_recv_forward_backward, send_backward_recv_backward).
// Only cross-rank messages are posted. `schedule` holds the SEND/RECV actions in those places
// (lowered = true); call[r][k] numbers the call of programs[r][k] (-1 for a compute action), so
// consecutive comm actions with one number are posted together.
// Errors (InvalidArgument): a schedule that is lowered already, has I/W or OVERLAP_F_B actions
// (Megatron's schedules run whole backwards) or two directions; validate()'s errors.
struct P2pCalls {
  Schedule schedule;
  std::vector<std::vector<int32_t>> call;  // [rank][program position]
};
Result<P2pCalls> megatron_p2p_calls(const Schedule& compute_only);

// Drops the SEND/RECV actions of a lowered schedule.
Schedule compute_only(const Schedule& schedule);

// ----- text forms ------------------------------------------------------------------------------

struct GridMark {
  int32_t rank = -1;
  int32_t step = -1;
};
// One row per rank: "r0: 0F0 0F1 ..." with cells padded to a column; the marked cell is
// bracketed (">>0W3<<") and a caret line follows the row. The one grid printer every error uses.
std::string format_grid(const Schedule& schedule, GridMark mark = {});

// PyTorch's CSV layout: one row per rank, one action per cell, no header.
std::string to_csv(const Schedule& schedule);
// Parses and validates a CSV; infers the stage-to-rank map from where actions appear.
// `source` names the file in errors ("schedule.csv:3:5: bad token ...").
Result<Schedule> parse_csv(std::string_view text, std::string_view source);
std::string to_json(const Schedule& schedule);
Result<Schedule> parse_json(std::string_view text, std::string_view source);

}  // namespace tightpipe
