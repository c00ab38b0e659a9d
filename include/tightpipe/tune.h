// tune: from a PyTorch user's model and run to a faster split and schedule in their own runtime
// (`tightpipe tune`, tightpipe.torch.tune; docs/torch.md "Measure, decide, apply").
//
// The input is what a PyTorch user has: the model's top-level modules, each measured on one
// microbatch (tightpipe.torch.measure_layers: F, I and W through PyTorch's own split backward,
// activation, output and parameter bytes), optionally refitted to the per-stage costs of their
// current run's traces. The search is the planner's own (plan.h: balanced_layer_split, the
// generators and automatic schedules, the memory check, the lower bound) with the modules as its
// layers (PlanOptions::module_costs): the first module stands where the embedding does, the last
// where the head does, each one between is a block of its own cost. The output is what the user
// applies: module names per stage, the schedule in PyTorch's forms, the prediction.
//
// Pure functions of their inputs; thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/plan.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/status.h"

namespace tightpipe {

// One top-level module as measure_layers wrote it (one microbatch, seconds and bytes).
struct ModuleCost {
  std::string name;          // its fully qualified name in the user's model ("layers.3")
  StageCost cost;            // f, i, w, b (measured, or i + w), act/act_after_i bytes, static
  int64_t output_bytes = 0;  // the message to the next stage when a stage ends here
};

// A "tightpipe-layers/1" file (docs/torch.md lists its keys).
struct MeasuredModules {
  std::vector<ModuleCost> modules;   // in model order
  std::vector<int64_t> input_shape;  // the microbatch input of module 0 ([B, T] for tokens)
  int64_t micro_batch_size = 1;      // input_shape[0]: sequences per microbatch
  std::string source;                // the file, for errors and the cost model's source
  std::string device;                // "cpu", "cuda", ... ("" when the file does not say)
  std::string malloc_mode;           // "steady" or "default" ("" when the file does not say)
};

// Errors (InvalidArgument naming `source`, the entry and the value, with a hint): not JSON, another
// format, fewer than two modules, a duplicated or empty name, a missing, negative or non-finite
// number, an empty input shape.
Result<MeasuredModules> parse_measured_modules(std::string_view json_text, std::string_view source);

// Per stage of a run, seconds per microbatch: forward, input-gradient and weight-gradient times
// (as fitted from that run's traces: GpuFittedCosts f_s, b_s - w_s, w_s; w empty: fused, i is
// the whole backward).
struct StageTimes {
  std::vector<double> f, i, w;
};

// The modules' times refitted to a run: each module's f times its stage's measured f over the
// sum of the probe's f of the modules that stage held, and its i, w and b times the stage's
// measured backward over the probe's: i + w for a split run, b for a fused one (w empty;
// PyTorch's first stage runs its whole backward in W), so the probe's own I : W share and its
// fused-over-split ratio are kept; a stage the probe measured as 0 keeps the probe's times. Errors:
// a split that does not cover the modules, a stage count other than the run's.
Result<MeasuredModules> fit_modules_to_run(const MeasuredModules& probe,
                                           const std::vector<int32_t>& modules_per_stage,
                                           const StageTimes& run);

// The modules as the planner's layer costs: module 0 the embedding, the last the head, the
// others LayerCosts::block_each (block = their mean); message bytes the largest output of any
// module but the last.
LayerCosts module_layer_costs(const MeasuredModules& m);

// The user's current setup.
struct TuneCurrent {
  std::vector<int32_t> modules_per_stage;  // contiguous modules per stage, stage order
  std::string schedule;                    // generator name ("1f1b", "interleaved", "zb-v")
  int32_t vpp = 0;                         // chunks (0: the generator's default)
  std::optional<Schedule> file;            // or the schedule that ran (compute-only or lowered)
};

struct TuneOptions {
  MeasuredModules modules;  // measured (and maybe refitted to the run)
  int32_t pp = 0;
  int64_t microbatches = 0;  // at modules.micro_batch_size sequences each
  // Other microbatch sizes to try (the global batch kept: m = batch / size); empty: the measured.
  std::vector<int64_t> micro_batch_sizes;
  double memory_limit_bytes = 0;       // per rank; 0: no limit
  std::vector<std::string> schedules;  // empty: every one PyTorch's runtime runs
  LinkCost link;                       // between ranks (0: free)
  RuntimeHostTime host_time;           // the runtime's host time around each compute action
  CoreSharing core_sharing;            // the ranks share cores (--cores, --core-slowdown)
  std::optional<TuneCurrent> current;
  double min_gain = 0.03;  // recommend a change only when it is predicted this much faster
  int32_t top = 5;
};

// One setup, simulated as PyTorch's runtime runs it (--engine torch).
struct TuneSetup {
  std::string schedule;  // generator name
  int32_t pp = 0, vpp = 1;
  int64_t micro_batch_size = 0, microbatches = 0;
  std::string placement;                               // "loop" or "v"
  std::vector<int32_t> stage_to_rank;                  // [S]
  std::vector<std::vector<std::string>> module_names;  // [S] the modules of each stage
  std::shared_ptr<const Schedule> compute_schedule;    // compute-only
  std::shared_ptr<const CostModel> costs;              // per stage
  SimResult sim;      // with the lower bound attached (simulate --json's numbers)
  double step_s = 0;  // sim.makespan
  double lower_bound_s = 0;
};

// Rank r's compute in one step of `setup`, by kind of action: its F, I, W and B actions' times
// from setup.costs (host time included where tune was given one), an OVERLAP_F_B pair counted
// as its F and its B. Their sum is the rank's simulated busy time less its optimizer (where the
// ranks do not share cores: with TuneOptions::core_sharing the busy time also holds what the
// sharing stretched, and these stay each action's time alone); tune.json's
// per-rank "compute_s". What a run's time inside each kind of PyTorch call is held against
// (bench/torch/tune_bench.py). REQUIRES: 0 <= rank < setup.pp.
struct ComputeByKind {
  double f = 0, i = 0, w = 0, b = 0;
};
ComputeByKind compute_by_kind(const TuneSetup& setup, int32_t rank);

struct TuneResult {
  std::optional<TuneSetup> current;
  std::vector<TuneSetup> candidates;  // fastest first (at most top)
  int32_t recommended = 0;            // index into candidates
  bool change = true;                 // false: keep the current setup
  std::string why;
  PlanSearchStats stats;
  RuntimeHostTime host_time;  // TuneOptions::host_time, in every prediction
  // What the user should know about the inputs, one line each (format_tune prints them after the
  // recommendation; tune.json's "notes"): a CPU table measured under glibc's default malloc.
  std::vector<std::string> notes;
};

// Errors (InvalidArgument, one line naming the input, the value and the fix): more stages than
// modules, a current split that does not match the modules, a memory limit no candidate fits (the
// smallest peak named), and plan()'s.
Result<TuneResult> tune(const TuneOptions& options);

// The table: the current setup and the candidates side by side (predicted step, bubble per rank,
// peak memory per rank, lower bound), then the recommendation and why.
std::string format_tune(const TuneResult& result);

// The setup as "tightpipe-tune/1" JSON (docs/torch.md): shape, placement, module names per stage
// (torchtitan's module_fqns_per_model_part), the files, the prediction; `files` are the names of
// the compute_comms and compute-only CSVs beside it.
std::string tune_setup_json(const TuneResult& result, const TuneSetup& setup,
                            std::string_view compute_comms_file, std::string_view compute_file);

}  // namespace tightpipe
