// The score of the cost-aware zero-bubble builders (zb_score.h).
#include "sim/zb_score.h"

#include <fmt/format.h>

#include <algorithm>

#include "sim/zb_timing.h"

namespace tightpipe::zb {

double max_peak_units(const Schedule& s, const std::vector<double>& fractions,
                      const std::vector<double>& f_units) {
  const std::vector<double> peaks = zb_peak_memory_units(s, fractions, f_units);
  return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
}

Result<Score> score_schedule(const Schedule& s, const CostModel& costs, ZbObjective objective,
                             double peak, double* rank_sum) {
  TP_ASSIGN_OR_RETURN(Timing t, Timing::make(s, costs));
  if (!t.run(s)) {
    return Status::failed_precondition(
        fmt::format("schedule '{}': its programs cannot finish (a cycle across ranks)", s.name));
  }
  if (rank_sum != nullptr) *rank_sum = t.rank_sum(objective);
  if (objective == ZbObjective::kSpan) return Score{t.span(), t.makespan(), peak};
  return Score{t.makespan(), t.span(), peak};
}

}  // namespace tightpipe::zb
