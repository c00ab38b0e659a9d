// Shared by the cost-aware builders (zb_auto.cc, zb_v_auto.cc): how a candidate is scored, and
// small helpers. Internal to the sim module.
#pragma once

#include <algorithm>
#include <cctype>
#include <compare>
#include <limits>
#include <string>
#include <string_view>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe::detail {

// Slack on memory comparisons (fractions such as 0.1 do not add up exactly).
inline constexpr double kZbMemEps = 1e-9;

inline std::string zb_lower_case(std::string_view s) {
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

// Lowers and simulates `s` (overlap mode) and scores it in the objective (ties: the other one,
// then the memory peak).
inline Result<Score> score(const Schedule& s, const CostModel& costs, ZbObjective objective,
                           double peak) {
  TP_ASSIGN_OR_RETURN(Schedule low, lower(s));
  SimOptions so;
  so.record_timeline = false;
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(low, costs, so));
  double span = 0;
  for (const RankSimStats& rs : r.ranks) span = std::max(span, rs.last_end - rs.first_start);
  if (objective == ZbObjective::kSpan) return Score{span, r.makespan, peak};
  return Score{r.makespan, span, peak};
}

}  // namespace tightpipe::detail
