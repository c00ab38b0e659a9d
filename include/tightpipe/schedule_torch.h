// PyTorch's `compute_comms` schedule form (torch/distributed/pipelining/schedules.py; the commit
// read is named in docs/schedule_ir.md, "PyTorch's compute_comms form"): a lowered schedule plus
// three actions that tightpipe's IR does not hold, because they change no dependency:
//
//   <stage>UNSHARD      FSDP: gather the stage's sharded parameters (an all-gather, async)
//   <stage>RESHARD      FSDP: free them again (no communication)
//   <stage>REDUCE_GRAD  reduce (and scale) the stage's gradients, accumulated over the step's
//                       microbatches, across data-parallel replicas
//
// PyTorch's `_PipelineScheduleRuntime` loaded with format="compute_comms" runs each rank's row as
// written and adds nothing: a stage's gradients are reduced only at its REDUCE_GRAD, and an FSDP
// stage computes only between an UNSHARD and a RESHARD of it. `to_torch_csv` writes that form;
// the CSV reader (parse_csv) takes the three actions, checks they sit where PyTorch's runtime
// needs them, and leaves them out of the Schedule: tightpipe shards no parameters, and its
// executor reduces a stage's gradients at that same point by itself (docs/schedule_ir.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "tightpipe/schedule.h"
#include "tightpipe/status.h"

namespace tightpipe {

enum class TorchActionType { kUnshard, kReshard, kReduceGrad };

struct TorchAction {
  TorchActionType type = TorchActionType::kUnshard;
  int32_t stage = 0;

  friend bool operator==(const TorchAction&, const TorchAction&) = default;
};

// "UNSHARD", "RESHARD", "REDUCE_GRAD" (PyTorch's short strings).
std::string_view torch_action_type_name(TorchActionType t);
// "0UNSHARD", "3REDUCE_GRAD": the stage, then the type, no microbatch (PyTorch's repr).
std::string to_string(const TorchAction& a);
// nullopt when `token` is not one of the three (any other action, or text that names none of
// them); the action when it is; an error naming the token when it is one of them but malformed:
// a microbatch after it ("0UNSHARD3"), a stage with a leading zero or over tightpipe's limit.
Result<std::optional<TorchAction>> parse_torch_action(std::string_view token);

// How many of PyTorch's actions a CSV held (parse_csv drops them from the Schedule).
struct TorchActionCounts {
  int64_t unshard = 0;
  int64_t reshard = 0;
  int64_t reduce_grad = 0;

  int64_t total() const { return unshard + reshard + reduce_grad; }
};

// parse_csv and load_schedule_file that also say how many UNSHARD, RESHARD and REDUCE_GRAD cells
// the file held (`counts` may be null). The rules those cells are held to, each refused in one
// line naming the file, the row:column, the cell and a hint:
// - the stage exists and lives on the row's rank;
// - per stage, UNSHARD and RESHARD alternate, starting with UNSHARD; each RESHARD follows a
//   compute on the stage since its UNSHARD; no stage is left unsharded at the end of its row; a
//   stage with any of them computes only while unsharded;
// - REDUCE_GRAD: at most one per stage, after the stage's last backward (B or W, a pair's B);
//   when any stage has one, every stage has one.
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
//   B) and the SENDs of that action.
// Errors: InvalidArgument for a schedule of two directions (dualpipe), which PyTorch's
// pipelining has no form for; the errors of lower().
Result<std::string> to_torch_csv(const Schedule& schedule);

}  // namespace tightpipe
