// Cost-aware schedules built from a cost table under a memory limit (the zero-bubble paper's
// automatic schedules; REFERENCE.md section 4):
//   * zb-auto (zb-1p, zb-2p): single chunk (v = 1), loop placement (docs/cost_model.md 4c);
//   * zb-v-auto: 2 chunks per rank in zb-v's V placement (docs/cost_model.md 4d); v-min and
//     v-half are zb-v-auto at the memory of "Pipeline Parallelism with Controllable Memory"
//     (Qi et al. 2024): (p + 4) / 3 and (p + 2) / 2 whole-rank microbatch activations.
// build_auto_schedule() is the one entry point for every name.
//
// The schedule module stays free of costs, so the builders live here, in the sim module: each
// greedily places F, I and W against the cost model's times and message latencies, tries several
// variants (a fixed grid of memory limits up to the requested one, yes/no knobs; one list
// scheduler for both, src/sim/zb_list.h), adds the handcrafted schedules of the same shape where
// they fit the limit (zb-h1 and zb-h2; zb-v), scores every candidate from the times it placed
// (simulate()'s times in overlap mode, without simulating), keeps the best in the requested
// objective and improves it with a local search (improve_schedule(), within a budget). The result
// is an ordinary compute-only Schedule (F, I, W) that validate() accepts and lower() lowers.
//
// Memory is counted per rank in whole-rank microbatch units, independent of timing: F adds u, the
// stage's share of its rank's activation bytes (1/v without sizes; zb_f_memory_units), I frees
// (1 - f)u, W frees fu, with f the stage's w-memory fraction; no rank's running sum ever exceeds
// the limit.
//
// Pure functions (but for the search's wall-clock budget); thread-safe for distinct inputs.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"

namespace tightpipe {

// What zb-auto and zb-v-auto minimize.
enum class ZbObjective {
  kMakespan,  // the step's makespan, every stage starting at 0 (1F1B, ZB-H1 are measured so)
  kSpan,      // max over stages of (end of its last action - start of its first F) (ZB-2p, ZB-H2)
};

// The objective to build for when none is given: what sets the step's period. Synchronous: the
// makespan (every stage waits for the step's end). Post-validated: each rank steps at its own end
// and starts the next iteration, so the period is the largest per-stage span (docs/cost_model.md,
// "Table 4").
ZbObjective zb_objective_for(bool optimizer_post_validated);
std::string_view zb_objective_name(ZbObjective objective);  // "makespan", "span"
// "makespan" or "span"; anything else is InvalidArgument naming --objective and the choices.
Result<ZbObjective> parse_zb_objective(std::string_view text);
// The objective of the compute-only `schedule` as the simulator gives it: simulate(lower(s),
// costs) with the default options (overlap mode, no timeline), its SimResult::makespan or
// SimResult::max_span. What a built schedule is judged by (zb-opt's incumbent, the benches).
// Errors: lower()'s and simulate()'s.
Result<double> simulated_objective(const Schedule& schedule, const CostModel& costs,
                                   ZbObjective objective);

// The least memory limit any schedule fits: one microbatch's activations after its F (v = 1), or
// after the F of both its chunks on a rank (zb-v-auto: chunk 0's are held until chunk 1's I).
inline constexpr double kZbAutoMinMemoryLimit = 1.0;

// The local search after the greedy, from the best candidate of each memory limit tried (so a
// larger limit is never worse): by default at most kZbDefaultSearchEvaluations evaluated
// candidates per start (deterministic: the same schedule on every machine; each is one O(N)
// direct timing), or a wall-clock budget per start the user gives
// (--search-budget-ms, at most kZbMaxSearchBudgetMs).
inline constexpr int64_t kZbDefaultSearchEvaluations = 100;
inline constexpr double kZbMaxSearchBudgetMs = 60000;

struct ZbAutoOptions {
  // The most microbatch activations of one whole rank that any rank may hold at once (1F1B's
  // first rank holds p). nullopt: p.
  std::optional<double> memory_limit;
  // The share of an F's activations that I keeps until W (I frees the rest, W frees this), in
  // [0, 1]. nullopt: from the cost model, per stage act_after_i_bytes / act_bytes, and 0.5 where
  // a stage has no activation bytes.
  std::optional<double> w_memory_fraction;
  // What the candidates are compared by.
  ZbObjective objective = ZbObjective::kMakespan;
  // Wall-clock milliseconds improve_schedule() may spend on the best greedy candidate; 0: the
  // greedy's choice as it is. nullopt: kZbDefaultSearchEvaluations simulations instead, so the
  // result never depends on the machine's speed. A given budget is deterministic only when the
  // search ends at a local optimum within it (small shapes do).
  std::optional<double> search_budget_ms;

  // InvalidArgument naming the flag (--memory-limit, --w-memory-fraction, --search-budget-ms),
  // the value and a hint: a limit that is not finite or below kZbAutoMinMemoryLimit, a fraction
  // that is not finite or outside [0, 1], a search budget that is not finite, negative or above
  // kZbMaxSearchBudgetMs.
  Status validate() const;
};

// The registry names that are zb-auto: "zb-auto", "zb-1p" (limit p), "zb-2p" (limit 2p);
// case-insensitive. The generator registry (schedule module) cannot build them: they need costs.
bool is_zb_auto_name(std::string_view name);
// The memory limit a zb-auto name implies for p ranks: p for zb-1p, 2p for zb-2p, 0 (use the
// options) for zb-auto.
double zb_auto_name_memory_limit(std::string_view name, int32_t p);

// The per-stage w-memory fractions the options and the cost model give (see w_memory_fraction).
std::vector<double> zb_w_memory_fractions(const CostModel& costs, const ZbAutoOptions& o);

// What one F of each stage of `placement` adds, in whole-rank microbatch units: the stage's share
// of its rank's activation bytes (act_bytes / the sum over the rank's stages), so a chunk that
// holds the LM head counts for more than one that holds a block; 1/v for every stage of a rank
// whose stages have no activation sizes (uniform costs).
// REQUIRES: costs has placement.num_stages stages.
std::vector<double> zb_f_memory_units(const CostModel& costs, const Schedule& placement);

// The peak of the running memory count (F +u, I -(1 - f)u, W -fu, B -u, with u the stage's
// f_units entry, or 1/v with v = num_stages / num_ranks when f_units is empty) over the program of
// each rank, in whole-rank microbatch units. REQUIRES: fractions (and f_units, unless empty) has
// one entry per stage.
std::vector<double> zb_peak_memory_units(const Schedule& schedule,
                                         const std::vector<double>& fractions,
                                         const std::vector<double>& f_units = {});

// zb-auto for p ranks (one stage each) and m microbatches under `costs` (p stages).
// Errors (InvalidArgument, one line, naming the flag and a hint): p < 1, m < 1, a cost model
// without p stages, and bad options (ZbAutoOptions::validate).
Result<Schedule> build_zb_auto(int32_t p, int32_t m, const CostModel& costs,
                               const ZbAutoOptions& o = {});

// zb-v-auto for p ranks (2 chunks each, V placement: stage s on rank s for s < p, on rank
// 2p-1-s from p on) and m microbatches under `costs` (2p stages, per-chunk times). Default
// memory limit p (1F1B's and zb-v's). Never worse than zb-v in the objective where zb-v fits the
// limit. Errors as build_zb_auto, with 2p stages.
Result<Schedule> build_zb_v_auto(int32_t p, int32_t m, const CostModel& costs,
                                 const ZbAutoOptions& o = {});

// ----- every cost-aware name ------------------------------------------------------------------

// The memory limits of V-Min and V-Half for p ranks, in whole-rank microbatch activations (1F1B
// and zb-v hold p): (p + 4) / 3 and (p + 2) / 2, rounded down (Qi et al. 2024). Their bubble at
// F = B = W is about 2p / 3m and p / 2m of the compute (1F1B's: p / m).
int32_t v_min_memory_limit(int32_t p);
int32_t v_half_memory_limit(int32_t p);

// "zb-auto", "zb-1p", "zb-2p", "zb-v-auto", "v-min", "v-half"; case-insensitive.
bool is_auto_schedule_name(std::string_view name);
// The memory limit an auto name implies for p ranks: zb_auto_name_memory_limit's for the
// single-chunk names, v_min_memory_limit / v_half_memory_limit for v-min / v-half, 0 (use the
// options) for zb-auto and zb-v-auto.
double auto_schedule_memory_limit(std::string_view name, int32_t p);
// The fixed schedule with the same stages and placement: "zb-h1" for the single-chunk names,
// "zb-v" for zb-v-auto, v-min and v-half; "" for other names.
std::string auto_schedule_counterpart(std::string_view name);
// Chunks per rank: 1 for the single-chunk names, 2 for zb-v-auto, v-min and v-half; 0 for
// other names.
int32_t auto_schedule_chunks(std::string_view name);
// The canonical spelling of an auto name (lower case: "ZB-1P" -> "zb-1p"), as
// build_auto_schedule() names its result.
std::string auto_schedule_name(std::string_view name);
// OK when --vpp `vpp` fits the auto schedule `name` (0: not given, or its chunk count);
// otherwise InvalidArgument naming --vpp, the value, the chunk count and a hint.
Status check_auto_schedule_vpp(std::string_view name, int32_t vpp);
// The largest stages x microbatches (p x v x m) an auto schedule is built for: 128 stages x 1024
// microbatches (zb-v-auto at p = 64, m = 1024). Derived from a build-time bound, not a memory one
// (the builder holds O(stages x microbatches) numbers, a few MB here): the list scheduler places
// each action in O(log p) and the search's evaluations are O(stages x microbatches) each, so the
// build grows about linearly; extrapolated from auto_schedule_scale_bench (zb-v-auto p = 64,
// m = 512: 29 s of CPU with the search) it takes about kAutoBuildSecondsAtBound seconds at the
// bound on a 2-core machine (docs/cost_model.md, "zb-auto"; not measured at the bound itself).
inline constexpr int64_t kMaxAutoStageMicrobatches = int64_t{128} * 1024;
inline constexpr int kAutoBuildSecondsAtBound = 60;

// Builds the named schedule (build_zb_auto or build_zb_v_auto) and names it `name` lower-cased.
// zb-1p, zb-2p, v-min and v-half set the memory limit (auto_schedule_memory_limit); a different
// options.memory_limit is an error.
// `costs` has auto_schedule_chunks(name) * p stages. Errors: an unknown name, a shape over
// check_schedule_shape() or kMaxAutoStageMicrobatches (the error names the bound), and those of the
// builders (InvalidArgument, one line, naming the flag and a hint).
Result<Schedule> build_auto_schedule(std::string_view name, int32_t p, int32_t m,
                                     const CostModel& costs, const ZbAutoOptions& o = {});

// ----- local search after the greedy ------------------------------------------------------------

struct SearchBudget;
// The budget the options give (see ZbAutoOptions::search_budget_ms).
SearchBudget zb_search_budget(const ZbAutoOptions& o);

// When improve_schedule() stops besides at a local optimum.
struct SearchBudget {
  double ms = kZbMaxSearchBudgetMs;  // wall clock, checked before every evaluation
  int64_t max_evaluations = std::numeric_limits<int64_t>::max();  // simulated candidates
};

struct SearchStats {
  // Candidate moves looked at (including those the checks refused).
  int64_t moves_tried = 0;
  // Candidates timed (evaluations): the input's own score included, not the one timing per
  // kept move that finds the critical chain.
  int64_t evaluations = 0;
  int64_t accepted = 0;             // moves kept (each strictly improved the score)
  bool local_optimum = false;       // a full pass over the moves found no improvement
  bool time_limited = false;        // the time budget cut the search short
  bool evaluation_limited = false;  // max_evaluations cut it short
  double elapsed_ms = 0;
  double start_objective = 0;  // the input's objective (makespan or span)
  double final_objective = 0;  // the result's
};

// A local search from the compute-only F/I/W schedule `compute_only` (any chunks per rank, any
// placement): moves one action of a rank's program by a few positions (this covers moving a W
// earlier or later, swapping adjacent F and I, and so the warm-up counts), in a fixed order
// (the actions on the current critical chain first, then a cyclic sweep over all positions),
// and keeps a move only if the result still passes validate() (the schedule module's dependency
// rule), every rank's zb_peak_memory_units stays within `memory_limit`, and the score strictly
// improves: the objective (simulate(lower(s))'s, overlap mode, timed directly: zb_timing.h),
// then the other one of makespan
// and span, then the highest memory peak. So the result is never worse than the input; it is
// the input itself when no move helps. Stops at a local optimum, after budget.ms or after
// budget.max_evaluations simulations. Deterministic unless the time budget cuts it short.
// Errors (InvalidArgument, one line): a lowered or invalid input, fractions not one per stage, an
// input over the memory limit, a negative or non-finite budget; and whatever simulate() says of
// the input under `costs`.
Result<Schedule> improve_schedule(const Schedule& compute_only, const CostModel& costs,
                                  const std::vector<double>& w_fractions, double memory_limit,
                                  ZbObjective objective, const SearchBudget& budget,
                                  SearchStats* stats = nullptr);

}  // namespace tightpipe
