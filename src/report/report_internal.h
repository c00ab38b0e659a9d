// Helpers shared by the report's source files (not a public header).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "tightpipe/cost_model.h"
#include "tightpipe/report.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"

namespace tightpipe::report_internal {

// "3.10 ms" for seconds; "4.5 unit" for abstract units.
std::string fmt_time(double t, const std::string& unit);
// "12.3%".
std::string pct(double x);

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
