// What no schedule can beat, and the best one for tiny shapes (docs/cost_model.md, "Lower bound"
// and "Exact optimum").
//
// lower_bound(): for a shape (ranks, stages, their placement, microbatches, directions: the
// fields of a Schedule; its programs are not read), a cost table, the simulator's options (comm
// mode, recompute, OVERLAP_F_B factor, data parallelism) and an optional memory limit, a time that
// every valid schedule of that shape simulates to at least, in both objectives: the makespan
// (SimResult::makespan) and the longest rank span (SimResult::max_span). The argument, term by
// term, is in docs/cost_model.md: each rank's own work; the chains every microbatch travels
// (forward through the stages, back through them), counted per stage as order statistics
// because microbatches are interchangeable; the memory limit's forced frees before a rank's
// next F; combined per rank by the preemptive one-lane relaxation (Jackson's rule, exact for the
// relaxation), so the rank's head and tail idle are counted together with its work.
//
// build_zb_opt(): the optimum by branch and bound (schedule name `zb-opt`): single chunk, every
// backward split into I and W, the zb-auto memory count within the limit, the objective of the
// options; for p <= kZbOptMaxRanks and m <= kZbOptMaxMicrobatches.
//
// Pure functions; thread-safe for distinct inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/status.h"

namespace tightpipe {

struct LowerBoundOptions {
  // As the schedules are simulated: comm mode (blocking SENDs hold the sender's lane), recompute,
  // OVERLAP_F_B factor, data-parallel all-reduce. record_timeline is not read.
  SimOptions sim;
  // The most whole-rank microbatch activations a rank may hold, counted as zb_peak_memory_units()
  // counts them (auto_schedule.h): the bound then holds for every schedule whose count stays
  // within it. nullopt: no limit.
  std::optional<double> memory_limit;
  // Per stage: what an F adds (empty: zb_f_memory_units(costs, shape)) and the share of it I
  // keeps until W (empty: zb_w_memory_fractions(costs, {})).
  std::vector<double> f_memory_units;
  std::vector<double> w_memory_fractions;
  // Only the terms that cost O(S + p): each rank's work between its shortest head and tail (no
  // per-microbatch order statistics, no memory term, no one-lane relaxation, no span beyond the
  // work). The planner's pruning bound.
  bool fast = false;
  // false: the span bound is term 1's work only, skipping the per-rank pass (O(p S m)) that
  // bounds each rank's span: for callers that print only the makespan (the planner).
  bool span = true;
};

struct LowerBound {
  double makespan = 0;  // no valid schedule's SimResult::makespan is below it
  double span = 0;      // nor its SimResult::max_span
  // Nor the end of its last compute action (makespan before the data-parallel all-reduce and
  // the optimizer): what the automatic schedulers compare (zb_timing.h).
  double compute_end = 0;
  // Which argument sets each: "work" (a rank's own busy time), "chains" (work with the head and
  // tail every rank must idle), "memory" (the limit's forced frees raised it further).
  std::string makespan_term;
  std::string span_term;
  std::vector<double> rank_work;  // [P] the busy time each rank must spend (lane time)
  double memory_limit = 0;        // the limit assumed; 0: none
};

// REQUIRES: nothing. Errors (InvalidArgument, one line): an inconsistent shape, a cost model that
// does not cover it or fails CostModel::validate(), bad options (overlap factor, data parallel),
// a memory limit that is not finite or below one stage's F (no schedule fits it).
Result<LowerBound> lower_bound(const Schedule& shape, const CostModel& costs,
                               const LowerBoundOptions& options = {});

// lower_bound() of one shape, cost table and options at several memory limits (the builders walk
// a grid of them): at(L) equals lower_bound() with memory_limit L, and the shape's checks and the
// terms no limit changes are computed once. `shape` and `costs` must outlive it; not
// thread-safe.
class LowerBoundSweep {
 public:
  LowerBoundSweep(const Schedule& shape, const CostModel& costs, const LowerBoundOptions& options);
  ~LowerBoundSweep();
  LowerBoundSweep(LowerBoundSweep&&) noexcept;
  LowerBoundSweep& operator=(LowerBoundSweep&&) noexcept;
  // options.memory_limit is replaced by `memory_limit` (nullopt: none).
  Result<LowerBound> at(std::optional<double> memory_limit);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};
// The bound a printed schedule is compared with: lower_bound() at the schedule's own memory (its
// highest zb_peak_memory_units() peak, default units and fractions), so it reads "no schedule of
// this shape holding at most as much memory is faster".
Result<LowerBound> lower_bound_for(const Schedule& schedule, const CostModel& costs,
                                   const SimOptions& sim, bool span = true);

// OK when `bound` is at most `value` (within 1e-9 relative, float sums in another order); else
// Internal, one line naming both numbers and `what` ("makespan of schedule 'zb-h1'"): a bound
// above what a schedule reached is a bug in the bound, and is never printed as if it held.
Status check_lower_bound(double value, double bound, std::string_view what);
// Simulates nothing: fills result's lower_bound_* fields from `lb`, after check_lower_bound()
// of the makespan and the span (`schedule` names the schedule in its error).
[[nodiscard]] Status attach_lower_bound(SimResult& result, const LowerBound& lb,
                                        std::string_view schedule);

// (value - bound) / bound, the share a schedule is above its bound; 0 when bound <= 0.
double lower_bound_gap(double value, double bound);
// "(lower bound 1141: within 1.0%)": what the tables print after a makespan or a span.
std::string format_lower_bound(double value, double bound);
// The same with the bound written as `bound_text` (e.g. with its unit: "30.45 ms").
std::string format_lower_bound(double value, double bound, std::string_view bound_text);

// ----- exact optimum (zb-opt) ------------------------------------------------------------------

// The largest shape build_zb_opt() takes: its branch and bound proves the optimum within a few
// seconds here (docs/cost_model.md, "Exact optimum").
inline constexpr int32_t kZbOptMaxRanks = 4;
inline constexpr int32_t kZbOptMaxMicrobatches = 6;

// "zb-opt", case-insensitive.
bool is_zb_opt_name(std::string_view name);

struct ZbOptStats {
  int64_t nodes = 0;       // search states expanded
  int64_t pruned = 0;      // cut by the lower bound or the incumbent
  int64_t dominated = 0;   // cut because an equal or earlier state was already expanded
  double incumbent = 0;    // the objective of the starting schedule (zb-auto at the same limit)
  double optimum = 0;      // the objective of the result
  double lower_bound = 0;  // lower_bound() at the same limit, in the objective
};

// The schedule of p ranks (one stage each) and m microbatches with the least makespan (or span,
// options.objective) under `costs` (overlap mode, no recompute: how zb-auto scores), every
// backward split into I and W and the zb-auto memory count (zb_peak_memory_units with
// zb_w_memory_fractions(costs, options)) within options.memory_limit (default p). Ties: the
// zb-auto schedule the search starts from. Errors (InvalidArgument, one line): p or m over the
// limits above (naming them), and build_zb_auto()'s.
Result<Schedule> build_zb_opt(int32_t p, int32_t m, const CostModel& costs,
                              const ZbAutoOptions& options = {}, ZbOptStats* stats = nullptr);

}  // namespace tightpipe
