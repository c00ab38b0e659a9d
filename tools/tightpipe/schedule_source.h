// Shared by the subcommands that take a schedule: a registry name with a shape, a CSV/JSON file
// of the user's own, or a cost-aware schedule (zb-auto, zb-1p, zb-2p, zb-v-auto) built from the
// cost flags.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe::cli {

// Where the costs come from; at most one is given (uniform f=1,i=1,w=1 when none is).
struct CostFlags {
  std::optional<std::string> cost;  // --cost f=1,i=1,w=1[,b=2][,comm=0] (nullopt: not given)
  std::string costs;                // --costs FILE.json
  std::string model;                // --model layers=..,hidden=..,...
  std::string layout;  // --pipeline-layout (with --model): "" (even split), "auto" or a layout
  // --bf16: --model's activations, messages and parameters are 2 bytes (its default; an explicit
  // act_bytes=/param_bytes= other than 2 is an error); --cost/--costs carry their own bytes.
  bool bf16 = false;
  // --host-time-us (simulate): the engine's host time around each compute action, microseconds,
  // in parse_runtime_host_time_us's form ("": not given). make_costs adds it to every stage
  // (with_host_time, one module per stage) in the costs' own time unit.
  std::string host_time_us;
};

// zb-auto's options as given (nullopt: the default, ZbAutoOptions in auto_schedule.h).
struct ZbAutoFlags {
  std::optional<double> memory_limit;       // --memory-limit: whole-rank microbatch activations
  std::optional<double> w_memory_fraction;  // --w-memory-fraction: share of F's kept by I until W
  std::string objective;  // --objective makespan|span ("": zb_objective_for(post_validated))
  std::optional<double> search_budget_ms;  // --search-budget-ms: the search after the greedy
  bool post_validated = false;  // not a flag: the run steps post-validated (the command's engine)
};

struct ScheduleFlags {
  std::string schedule = "1f1b";  // registry name, zb-auto name, or a .csv / .json file
  int32_t pp = 4;                 // pipeline ranks
  int32_t microbatches = 8;       // microbatches per step
  int32_t vpp = 0;                // chunks per rank (0: the schedule's default)
  int32_t group_size = 0;         // interleaved microbatch group size (0: --pp)
  // --num-layers-per-virtual-pipeline-stage and --num-layers (Megatron's way to set v; 0: not
  // given): resolve_chunks() turns them into vpp.
  int64_t layers_per_virtual_stage = 0;
  int64_t num_layers = 0;
  CostFlags costs;  // the costs zb-auto is built from (and simulate runs with)
  ZbAutoFlags zb;   // zb-auto's memory limit, fraction, objective, search
};

// Adds --schedule, --pp, --microbatches, --vpp, --microbatch-group-size with Megatron's
// spellings as aliases.
void add_schedule_flags(CLI::App& app, ScheduleFlags& flags);
// Adds --vpp, --num-layers-per-virtual-pipeline-stage (Megatron's; not with --vpp) and
// --microbatch-group-size (schedule, simulate, train): given, each must be in [1, limit]; 0 is
// refused (it used to mean the default silently: leave the flag out for that).
void add_chunk_flags(CLI::App& app, int32_t& vpp, int32_t& group_size,
                     int64_t& layers_per_virtual_stage);
// Sets `vpp` from --num-layers-per-virtual-pipeline-stage when it was given (Megatron's rule,
// chunks_from_layers_per_virtual_stage in flag_checks.h); a no-op otherwise.
Status resolve_chunks(int32_t& vpp, int64_t layers_per_virtual_stage, int64_t num_layers,
                      int32_t pp);
// A CLI11 check for an integer count flag: a whole number in [1, limit], else "<value> is outside
// [1, limit] (<what>, tightpipe's limit); hint: <hint>".
CLI::Validator count_flag(int64_t limit, const std::string& what, const std::string& hint);
// Adds --cost, --costs, --model (mutually exclusive), --pipeline-layout and --bf16.
void add_cost_flags(CLI::App& app, CostFlags& flags);
// Adds --host-time-us (simulate).
void add_host_time_flag(CLI::App& app, CostFlags& flags);
// Adds --memory-limit, --w-memory-fraction, --objective, --search-budget-ms.
void add_zb_auto_flags(CLI::App& app, ZbAutoFlags& flags);
// The one conversion of those flags (schedule, simulate, train): the options for an auto
// `schedule` (build_auto_schedule applies the limit zb-1p and zb-2p imply); for any other schedule
// default options, or an error naming the first zb flag given.
Result<ZbAutoOptions> zb_auto_options(const ZbAutoFlags& flags, const std::string& schedule);

// The cost model for `schedule` from whichever of --cost, --costs, --model was given, plus
// --host-time-us where it was.
struct CostChoice {
  CostModel model;
  std::string layout;  // with --model: the layer split the costs assume ("E,t*2|t*2,L")
};
// With --model the layers split as --pipeline-layout says: "" the even split of gpt_cost_model,
// "auto" the split choose_layer_split() finds for `schedule` simulated with `sim` (the schedule
// must have its programs), otherwise the layout string (nn::partition_layers checks it).
Result<CostChoice> make_costs(const CostFlags& flags, const Schedule& schedule,
                              const SimOptions& sim = {});
Result<CostModel> make_cost_model(const CostFlags& flags, const Schedule& schedule);

// Generates (or loads and validates) the compute-only schedule the flags name; the cost-aware
// names (zb-auto, zb-1p, zb-2p, zb-v-auto) are built from the cost flags (auto_schedule.h).
Result<Schedule> load_schedule(const ScheduleFlags& flags);

}  // namespace tightpipe::cli
