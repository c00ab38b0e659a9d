// Cost-aware schedules: zb-auto, a single-chunk (v = 1) zero-bubble schedule built from a cost
// table under a memory limit (the zero-bubble paper's ZB-1p / ZB-2p; REFERENCE.md section 4).
//
// The schedule module stays free of costs, so the builder lives here, in the sim module: it
// greedily places F, I and W per stage against the cost model's times and message latencies,
// tries several variants (memory limits up to the requested one, warm-up caps, three yes/no
// knobs), adds the
// handcrafted zb-h1 and zb-h2 where they fit the limit, simulates every candidate with simulate()
// (lowered, overlap mode), keeps the best in the requested objective and improves it with a
// local search (improve_schedule(), within a time budget). The result is an
// ordinary compute-only Schedule (F, I, W, loop placement, named "zb-auto") that validate()
// accepts and lower() lowers. Rules and guarantees: docs/cost_model.md, "zb-auto".
//
// Memory is counted per rank in microbatch units, independent of timing: F adds 1, I frees
// 1 - f, W frees f, with f the stage's w-memory fraction; no rank's running sum ever exceeds the
// limit.
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

// What zb-auto minimizes.
enum class ZbObjective {
  kMakespan,  // the step's makespan, every stage starting at 0 (1F1B, ZB-H1 are measured so)
  kSpan,      // max over stages of (end of its last action - start of its first F) (ZB-2p, ZB-H2)
};

std::string_view zb_objective_name(ZbObjective objective);  // "makespan", "span"
// "makespan" or "span"; anything else is InvalidArgument naming --objective and the choices.
Result<ZbObjective> parse_zb_objective(std::string_view text);

// The least memory limit any schedule fits: one microbatch's activations after its F.
inline constexpr double kZbAutoMinMemoryLimit = 1.0;

// The search budget zb-auto spends after the greedy by default, and the most it accepts.
inline constexpr double kZbDefaultSearchBudgetMs = 100;
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
  // greedy's choice as it is. The result is deterministic whenever the search ends at a local
  // optimum within the budget (it does for small shapes); only a cut-short search depends on
  // the machine's speed.
  double search_budget_ms = kZbDefaultSearchBudgetMs;

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

// The peak of the running memory count (F +1, I -(1 - f), W -f, B -1) over the program of each
// rank, in microbatch units. REQUIRES: fractions has one entry per stage.
std::vector<double> zb_peak_memory_units(const Schedule& schedule,
                                         const std::vector<double>& fractions);

// zb-auto for p ranks (one stage each) and m microbatches under `costs` (p stages).
// Errors (InvalidArgument, one line, naming the flag and a hint): p < 1, m < 1, a cost model
// without p stages, and bad options (ZbAutoOptions::validate).
Result<Schedule> build_zb_auto(int32_t p, int32_t m, const CostModel& costs,
                               const ZbAutoOptions& o = {});

// ----- local search after the greedy ------------------------------------------------------------

// When improve_schedule() stops besides at a local optimum.
struct SearchBudget {
  double ms = kZbDefaultSearchBudgetMs;  // wall clock, checked before every evaluation
  int64_t max_evaluations = std::numeric_limits<int64_t>::max();  // simulated candidates
};

struct SearchStats {
  // Candidate moves looked at (including those the checks refused).
  int64_t moves_tried = 0;
  // Candidates simulated: the input's own score included, not the one timeline simulation per
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
// improves: the objective (lowered, simulated in overlap mode), then the other one of makespan
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
