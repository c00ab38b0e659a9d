// Helpers shared by the report's source files (not a public header).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/report.h"
#include "tightpipe/schedule.h"
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

}  // namespace tightpipe::report_internal
