// The score of the cost-aware zero-bubble builders (zb_score.h).
#include "sim/zb_score.h"

#include <algorithm>

#include "tightpipe/simulator.h"

namespace tightpipe::zb {

double max_peak_units(const Schedule& s, const std::vector<double>& fractions,
                      const std::vector<double>& f_units) {
  const std::vector<double> peaks = zb_peak_memory_units(s, fractions, f_units);
  return peaks.empty() ? 0 : *std::max_element(peaks.begin(), peaks.end());
}

Result<Score> score_schedule(const Schedule& s, const CostModel& costs, ZbObjective objective,
                             double peak, double* rank_sum) {
  TP_ASSIGN_OR_RETURN(Schedule low, lower(s));
  SimOptions so;
  so.record_timeline = false;
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(low, costs, so));
  double span = 0;
  if (rank_sum != nullptr) *rank_sum = 0;
  for (const RankSimStats& rs : r.ranks) {
    span = std::max(span, rs.last_end - rs.first_start);
    if (rank_sum != nullptr) {
      *rank_sum += objective == ZbObjective::kSpan ? rs.last_end - rs.first_start : rs.last_end;
    }
  }
  if (objective == ZbObjective::kSpan) return Score{span, r.makespan, peak};
  return Score{r.makespan, span, peak};
}

}  // namespace tightpipe::zb
