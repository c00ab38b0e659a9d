// Helpers shared by the report's source files (not a public header).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/report.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe::report_internal {

// "3.10 ms" for seconds; "4.5 unit" for abstract units.
std::string fmt_time(double t, const std::string& unit);
// "12.3%".
std::string pct(double x);

// ----- the HTML pages (html.cc): our runs' report.html and the GPU traces' (gpu_html.cc) -------

// "<!DOCTYPE html>...<head>" with `title` (escaped here) and the pages' one style sheet, then
// "<body>".
std::string html_page_head(const std::string& title);

// `timeline` drawn by to_svg on [0, axis_end] (a zero-width marker event stretches the axis),
// `title` above it, inside <div class="timeline `cls`">.
std::string timeline_svg(Timeline timeline, double axis_end, const std::string& title,
                         const std::string& cls);

// Stacked bars, one row per rank: each bar's segments drawn as shares of its `total`.
struct BarSegment {
  std::string label, color;
  double value = 0;
};
struct Bar {
  std::string tag;  // class "bar `tag`", written right of the bar
  std::vector<BarSegment> segments;
  double total = 0;
};
struct BarRow {
  int rank = 0;
  bool missing = false;  // drawn as "missing", no bars
  std::vector<Bar> bars;
};
// `legend` gives the labels and colours (values unused); `full` labels the right end of the
// axis ("100% of the step").
std::string stacked_bars_svg(const std::vector<BarSegment>& legend, const std::vector<BarRow>& rows,
                             const std::string& full);

// Per-stage costs for another placement: each rank's totals of `run_costs` (measured on
// `run_sched`, the same ranks) spread evenly over the rank's stages in `target` (divided by the
// target's v). The what-if's costs when nothing says how a rank's layers split into chunks.
CostModel derive_costs(const CostModel& run_costs, const Schedule& run_sched,
                       const Schedule& target);

// The costs of a candidate's stages, given its lowered schedule (stages and placement).
using CandidateCosts = std::function<Result<CostModel>(const Schedule& lowered)>;

// What-if `w` for p ranks and m microbatches: its lowered schedule and its costs. A registry name
// is generated (chunks: w.chunks, else the generator's fixed v, else 1); an auto name (zb-auto,
// zb-v-auto...) is built by build_auto_schedule() from the costs of its fixed counterpart's shape
// (the same stages and placement), as `train --schedule NAME` would build it. The one what-if
// builder of both reports (run directories and GPU traces).
Result<std::pair<Schedule, CostModel>> what_if_schedule(const WhatIfSpec& w, int32_t p, int32_t m,
                                                        const CandidateCosts& costs_for);

// A what-if candidate (`lowered`, what_if_schedule's) simulated under its `costs` and `sim`, with
// its shape's lower bound at its own memory attached (lower_bound_for, attach_lower_bound: the
// SimResult's lower_bound_* fields). Where the bound cannot be computed the result has none
// (has_lower_bound false) and the what-if still stands. The one simulation of both reports'
// what-ifs; errors are simulate()'s.
Result<SimResult> simulate_what_if(const Schedule& lowered, const CostModel& costs,
                                   const SimOptions& sim);

// A what-if candidate against its lower bound, as report.json writes it (0: no bound).
struct WhatIfBound {
  double makespan = 0, max_span = 0;  // the candidate's, simulated
  double lower_bound = 0, lower_bound_span = 0;
  double memory_limit = 0;  // the memory the bound assumes (LowerBound::memory_limit)
};
// Sets o's lower-bound keys, those of `simulate --format json` (docs/simulate_json.md):
// lower_bound_makespan, lower_bound_span, lower_bound_memory_limit, gap_to_lower_bound and
// gap_to_lower_bound_span (lower_bound_gap; 0 without a bound). Both reports' what-if entries.
void add_lower_bound_json(nlohmann::ordered_json& o, const WhatIfBound& b);

}  // namespace tightpipe::report_internal
