// PyTorch's `compute_comms` schedule form (torch/distributed/pipelining/schedules.py; the commit
// read is named in docs/schedule_ir.md, "PyTorch's compute_comms form"; PyTorch 2.15's rules are
// in docs/torch.md): a lowered schedule plus six actions that tightpipe's IR does not hold, because
// they change no dependency:
//
//   <stage>UNSHARD            FSDP: gather the stage's sharded parameters (an all-gather, async)
//   <stage>RESHARD            FSDP: free them again (no communication)
//   <stage>REDUCE_GRAD        reduce (and scale) the stage's gradients, accumulated over the
//                             step's microbatches, across data-parallel replicas
//   <stage>WAIT_REDUCE_GRAD   (2.15) finish that reduction; one pending per rank at a time
//   <stage>WAIT_SEND_F<mb>    (2.15) wait for the row's earlier <stage>SEND_F<mb> to complete
//   <stage>WAIT_SEND_B<mb>    (2.15) the same for a <stage>SEND_B<mb>
//
// PyTorch's `_PipelineScheduleRuntime` loaded with format="compute_comms" runs each rank's row as
// written and adds nothing: a stage's gradients are reduced (and divided by m) only at its
// REDUCE_GRAD, an FSDP stage computes only between an UNSHARD and a RESHARD of it, and from 2.15
// on each send is retired only by its own WAIT_SEND. `to_torch_csv` writes that form; the CSV
// reader (parse_csv) takes the six actions, checks they sit where PyTorch's runtime needs them,
// and leaves them out of the Schedule: tightpipe shards no parameters, and its executor reduces a
// stage's gradients and completes its sends by itself (docs/schedule_ir.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tightpipe/schedule.h"
#include "tightpipe/status.h"

namespace tightpipe {

enum class TorchActionType {
  kUnshard,
  kReshard,
  kReduceGrad,
  kWaitReduceGrad,  // PyTorch 2.15
  kWaitSendF,       // PyTorch 2.15; the only two with a microbatch
  kWaitSendB,       // PyTorch 2.15
};

struct TorchAction {
  TorchActionType type = TorchActionType::kUnshard;
  int32_t stage = 0;
  int32_t microbatch = -1;  // kWaitSendF / kWaitSendB only; -1 for the others

  friend bool operator==(const TorchAction&, const TorchAction&) = default;
};

// "UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_REDUCE_GRAD", "WAIT_SEND_F", "WAIT_SEND_B"
// (PyTorch's short strings).
std::string_view torch_action_type_name(TorchActionType t);
// Whether the type carries a microbatch (the two WAIT_SENDs).
bool torch_action_has_microbatch(TorchActionType t);
// "0UNSHARD", "3REDUCE_GRAD", "1WAIT_SEND_B3": the stage, then the type, then the microbatch
// for the WAIT_SENDs (PyTorch's repr).
std::string to_string(const TorchAction& a);
// nullopt when `token` is not one of the six (any other action, or text that names none of
// them); the action when it is; an error naming the token when it is one of them but malformed:
// a microbatch after one that takes none ("0UNSHARD3"), none after a WAIT_SEND ("0WAIT_SEND_F"),
// a stage or microbatch with a leading zero or over tightpipe's limit.
Result<std::optional<TorchAction>> parse_torch_action(std::string_view token);

// How many of PyTorch's actions a CSV held (parse_csv drops them from the Schedule).
struct TorchActionCounts {
  int64_t unshard = 0;
  int64_t reshard = 0;
  int64_t reduce_grad = 0;
  int64_t wait_reduce_grad = 0;
  int64_t wait_send = 0;  // WAIT_SEND_F and WAIT_SEND_B

  int64_t total() const { return unshard + reshard + reduce_grad + wait_reduce_grad + wait_send; }
  // Whether the file is in PyTorch 2.15's form (it holds a WAIT_*).
  bool has_waits() const { return wait_reduce_grad + wait_send > 0; }
};

// parse_csv and load_schedule_file that also say how many UNSHARD, RESHARD and REDUCE_GRAD cells
// (and WAIT_*) cells the file held (`counts` may be null). The rules those cells are held to,
// each refused in one line naming the file, the row:column (or the stage), the cell and a hint:
// - the stage exists and lives on the row's rank;
// - per stage, UNSHARD and RESHARD alternate, starting with UNSHARD; each RESHARD follows a
//   compute on the stage since its UNSHARD; no stage is left unsharded at the end of its row; a
//   stage with any of them computes only while unsharded;
// - REDUCE_GRAD (gradient scaling: PyTorch divides by m there): when the file holds any of the
//   six, every stage has exactly one, after the stage's last backward (B or W, a pair's B);
// - WAIT_REDUCE_GRAD: follows its stage's REDUCE_GRAD before the row's next REDUCE_GRAD; when the
//   file holds any WAIT_*, every REDUCE_GRAD has one (PyTorch 2.15);
// - WAIT_SEND_F/B: retires an earlier, not yet retired SEND_F/B of the same stage and microbatch
//   on the same row; when the file holds any WAIT_*, every SEND has exactly one (PyTorch 2.15).
Result<Schedule> parse_csv(std::string_view text, std::string_view source,
                           TorchActionCounts* counts);
Result<Schedule> load_schedule_file(const std::string& path, TorchActionCounts* counts);

// How many stages PyTorch's own lowering keeps unsharded ahead of use (the default
// `max_active_stages` of its `_add_unshard_reshard`).
inline constexpr int32_t kTorchUnshardWindow = 3;

// The schedule in PyTorch's compute_comms form, one CSV row per rank, no empty cell (that form
// has no idle slots). The SEND/RECV are tightpipe's (`lower()` is run first when the schedule is
// compute-only); added to them, where PyTorch's own lowering of a compute-only schedule puts them:
// - before each compute action, the RESHARD of every stage that is not among the next
//   kTorchUnshardWindow distinct stages the rank computes (from that action on), then the UNSHARD
//   of each of those not yet unsharded, in the order they come; after the row's last action the
//   RESHARD of every stage still unsharded (RESHARDs in ascending stage order);
// - REDUCE_GRAD of a stage right after the action holding its last backward (B or W, a pair's
//   B) and the SENDs of that action, WAIT_REDUCE_GRAD right after it;
// - WAIT_SEND_F of (s, mb) right after the action holding the row's B or I of (s, mb), before
//   that action's SENDs (the gradient came back, so the peer consumed the activation); at the
//   row's end (after the last RESHARDs), in send order, the WAIT_SEND_B of every SEND_B and of
//   any SEND_F with no backward on the row. That is PyTorch 2.15's own placement
//   (`_add_wait_send`); PyTorch 2.15's loader needs every one of them.
// Errors: InvalidArgument for a schedule of two directions (dualpipe), which PyTorch's
// pipelining has no form for; the errors of lower().
Result<std::string> to_torch_csv(const Schedule& schedule);

// OK for a one-direction schedule; else InvalidArgument, one line: "schedule 'dualpipe' runs 2
// directions (...), which PyTorch's pipelining has no form for; hint: <hint>" (to_torch_csv, and
// the simulator's --engine torch, say it once).
Status check_torch_directions(const Schedule& schedule, std::string_view hint);

}  // namespace tightpipe
