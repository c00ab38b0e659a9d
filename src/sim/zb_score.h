// Internal to the sim module: how the cost-aware zero-bubble builders (zb_auto.cc, zb_v_auto.cc)
// and the local search (zb_search.cc) compare schedules, and their small helpers. One definition,
// so a candidate the builder kept and the search's starting point are scored alike.
#pragma once

#include <cctype>
#include <compare>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"

namespace tightpipe::zb {

// Slack on memory comparisons (fractions such as 0.1 do not add up exactly).
inline constexpr double kMemEps = 1e-9;

// Schedule names compare case-insensitively.
inline std::string lower_case(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Compared lexicographically and exactly, so the best of a superset of candidates is never worse.
struct Score {
  double primary = std::numeric_limits<double>::infinity();    // the objective
  double secondary = std::numeric_limits<double>::infinity();  // the other of makespan and span
  double peak = std::numeric_limits<double>::infinity();  // highest per-rank memory peak (units)

  friend auto operator<=>(const Score&, const Score&) = default;
};

// The highest per-rank peak of zb_peak_memory_units.
double max_peak_units(const Schedule& s, const std::vector<double>& fractions,
                      const std::vector<double>& f_units = {});

// Times the compute-only `s` as simulate(lower(s)) in overlap mode does (zb_timing.h; the
// optimizer phase, the same for every order, left out) and scores it in the objective (ties: the
// other one of makespan and span, then `peak`). When `rank_sum` is given it receives the sum over
// ranks of the objective's per-rank measure (each rank's end for makespan, its span for span): the
// search's tie-break on plateaus.
Result<Score> score_schedule(const Schedule& s, const CostModel& costs, ZbObjective objective,
                             double peak, double* rank_sum = nullptr);

}  // namespace tightpipe::zb
