// Cost-aware schedules built from a cost table under a memory limit (the zero-bubble paper's
// automatic schedules; REFERENCE.md section 4):
//   * zb-auto (zb-1p, zb-2p): single chunk (v = 1), loop placement (docs/cost_model.md 4c);
//   * zb-v-auto: 2 chunks per rank in zb-v's V placement (docs/cost_model.md 4d).
// build_auto_schedule() is the one entry point for every name.
//
// The schedule module stays free of costs, so the builders live here, in the sim module: each
// greedily places F, I and W against the cost model's times and message latencies, tries several
// variants (memory limits up to the requested one, yes/no knobs), adds the handcrafted schedules
// of the same shape where they fit the limit (zb-h1 and zb-h2; zb-v), simulates every candidate
// with simulate() (lowered, overlap mode) and keeps the best in the requested objective. The
// result is an ordinary compute-only Schedule (F, I, W) that validate() accepts and lower()
// lowers.
//
// Memory is counted per rank in whole-rank microbatch units, independent of timing: with v chunks
// per rank, F adds 1/v, I frees (1 - f)/v, W frees f/v, with f the stage's w-memory fraction; no
// rank's running sum ever exceeds the limit.
//
// Pure functions; thread-safe for distinct inputs.
#pragma once

#include <cstdint>
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

std::string_view zb_objective_name(ZbObjective objective);  // "makespan", "span"
// "makespan" or "span"; anything else is InvalidArgument naming --objective and the choices.
Result<ZbObjective> parse_zb_objective(std::string_view text);

// The least memory limit any schedule fits: one microbatch's activations after its F (v = 1), or
// after the F of both its chunks on a rank (zb-v-auto: chunk 0's are held until chunk 1's I).
inline constexpr double kZbAutoMinMemoryLimit = 1.0;

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

  // InvalidArgument naming the flag (--memory-limit, --w-memory-fraction), the value and a hint:
  // a limit that is not finite or below kZbAutoMinMemoryLimit, a fraction that is not finite or
  // outside [0, 1].
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

// The peak of the running memory count (F +1/v, I -(1 - f)/v, W -f/v, B -1/v, with
// v = num_stages / num_ranks) over the program of each rank, in whole-rank microbatch units.
// REQUIRES: fractions has one entry per stage.
std::vector<double> zb_peak_memory_units(const Schedule& schedule,
                                         const std::vector<double>& fractions);

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

// "zb-auto", "zb-1p", "zb-2p", "zb-v-auto"; case-insensitive.
bool is_auto_schedule_name(std::string_view name);
// The fixed schedule with the same stages and placement: "zb-h1" for the single-chunk names,
// "zb-v" for zb-v-auto; "" for other names.
std::string auto_schedule_counterpart(std::string_view name);
// Chunks per rank: 1 for the single-chunk names, 2 for zb-v-auto; 0 for other names.
int32_t auto_schedule_chunks(std::string_view name);
// Builds the named schedule (build_zb_auto or build_zb_v_auto) and names it `name` lower-cased.
// zb-1p and zb-2p set the memory limit (p, 2p); a different options.memory_limit is an error.
// `costs` has auto_schedule_chunks(name) * p stages. Errors: an unknown name, and those of the
// builders (InvalidArgument, one line, naming the flag and a hint).
Result<Schedule> build_auto_schedule(std::string_view name, int32_t p, int32_t m,
                                     const CostModel& costs, const ZbAutoOptions& o = {});

}  // namespace tightpipe
