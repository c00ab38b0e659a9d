// The bubble report (`tightpipe report RUN_DIR`): reads what `tightpipe train --out-dir` wrote
// (timeline_rank<R>.jsonl, summary.json, costs.json, schedule.csv, metrics.jsonl), explains every
// rank's idle time per cause, replays the same lowered schedule in the simulator with the run's
// measured costs (predicted vs measured, the gap and its largest contributors), re-simulates the
// costs under other schedules (what-if), and renders a terminal table, a self-contained HTML page
// (inline SVG and CSS), a Chrome trace and a costs.json that `simulate --costs` accepts.
//
// The bubble is prof.h's one definition (step_bubble: window [0, T], busy = F, I, W, B and the
// optimizer after every rank reached it). Idle causes (docs/report.md has the long form): each
// idle instant of a rank (the gaps between its busy_intervals) gets exactly one cause:
//   cpu wait  the rank's thread was ready but waited for a core (the kernel's run-queue delay the
//             executor records with the next busy event; placed at the end of the gap, where a
//             woken rank waits); only measured runs on an oversubscribed host have it;
//   then, first match wins:
//   data      covered by a `data` event (the loader);
//   exposed   waiting for a message the peer had already posted (peer SEND start <= t < arrival);
//             without overlap_p2p also the rank's own blocking SEND;
//   exposed all-reduce  after the rank's last compute and before its optimizer event, covered
//             by its data-parallel gradient ALLREDUCE events (prof.h exposed_allreduce: the
//             optimizer waits on the reduction; an all-reduce hidden under compute costs nothing);
//   drain     after the rank's last compute (includes waiting for the others at the optimizer);
//   fill      before the rank's first compute;
//   dependency waiting for a message the peer had not posted yet (t < peer SEND start);
//   other     the rest (host overhead, waits whose peer timeline is missing).
// The causes of a rank sum to its idle time, which sums to the step's bubble.
//
// Pure functions over plain data, except load_run/build_report/write_report (files).
// Thread-compatible.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/model.h"
#include "tightpipe/prof.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe {

// ----- breakdown -------------------------------------------------------------------------------

enum class BusyKind { kF = 0, kI, kW, kB, kOptimizer };
inline constexpr int kNumBusyKinds = 5;
enum class IdleCause {
  kFill = 0,
  kDrain,
  kDependency,
  kExposedComm,
  kData,
  kCpuWait,
  kExposedAllReduce,
  kOther
};
inline constexpr int kNumIdleCauses = static_cast<int>(IdleCause::kOther) + 1;

std::string_view busy_kind_name(BusyKind kind);     // "F", "I", "W", "B", "optimizer"
std::string_view idle_cause_name(IdleCause cause);  // "fill", "drain", "dependency wait", ...
std::string_view idle_cause_color(IdleCause cause);

struct RankBreakdown {
  int32_t rank = 0;
  bool present = true;                         // false: this rank's timeline is missing
  std::array<double, kNumBusyKinds> busy{};    // time per busy kind
  std::array<double, kNumIdleCauses> idle{};   // time per idle cause
  double first_compute = 0, last_compute = 0;  // start of the first, end of the last F/I/W/B
  double busy_total() const;
  double idle_total() const;
};

struct StepBreakdown {
  int32_t step = 0;
  double step_time = 0;                              // T: latest event end over all ranks
  std::vector<RankBreakdown> ranks;                  // [P]
  StepBubble bubble;                                 // the one definition (prof.h)
  double bubble_ratio = 0;                           // bubble.ratio (the makespan measure)
  SpanBubble span;                                   // the per-rank span measure (prof.h)
  std::array<double, kNumIdleCauses> cause_ratio{};  // per cause: idle / (present ranks x T)
};

struct BreakdownOptions {
  bool overlap_p2p = true;  // false: a rank's own SEND blocks its compute lane (exposed comm)
};

// The breakdown of one step. `timeline` holds only that step's events, ranks in any order (a
// missing rank is absent or empty); `num_ranks` is P.
StepBreakdown breakdown_step(const Timeline& timeline, int32_t num_ranks, int32_t step,
                             const BreakdownOptions& options = {});

struct Spread {
  double median = 0, p10 = 0, p90 = 0, min = 0, max = 0;
};
Spread spread_of(std::vector<double> values);

// Steps aggregated: the median and spread of each quantity over the measured steps.
struct BreakdownSummary {
  std::vector<int32_t> steps;         // measured steps aggregated
  std::vector<int32_t> warmup_steps;  // left out
  Spread step_time, bubble_ratio;
  std::array<Spread, kNumIdleCauses> cause_ratio;
  // [P] medians over the steps, in time units.
  std::vector<std::array<double, kNumBusyKinds>> rank_busy;
  std::vector<std::array<double, kNumIdleCauses>> rank_idle;
  std::vector<double> rank_bubble_ratio;  // summarize_bubbles (prof.h): median idle / T per rank
  // The span measure (prof.h span_bubble): the longest rank span and the span bubble over the
  // steps (median = summarize_span_bubbles), and each rank's median span bubble.
  Spread max_span, span_bubble_ratio;
  std::vector<double> rank_span_bubble_ratio;
};
// REQUIRES: every step has the same number of ranks.
BreakdownSummary summarize_steps(const std::vector<StepBreakdown>& steps, int64_t warmup_steps);

// ----- run directory ---------------------------------------------------------------------------

struct MetricPoint {
  int64_t step = 0;
  double loss = 0;
  double step_time_s = 0;
};

struct RunData {
  std::string dir;
  int32_t num_ranks = 0;
  std::string schedule_name;
  int32_t vpp = 1;
  int32_t microbatches = 0;
  std::string transport, compute;
  bool overlap_p2p = true;
  // Data parallel (summary.json): replicas, --overlap-grad-reduce, --bucket-size (values); the
  // prediction adds each stage's gradient all-reduce (simulator.h DataParallelSim).
  int32_t data_parallel_size = 1;
  bool overlap_grad_reduce = false;
  int64_t bucket_size = int64_t{1} << 20;
  int64_t warmup_steps_excluded = 1;
  // The model and its layer split (summary.json): what-ifs re-split the layers for their stages.
  std::optional<nn::GptConfig> model;
  std::string layout;  // "E,t*2|t*2,L"
  // The host, from summary.json: more busy threads (ranks + loader workers) than cores.
  int32_t cores = 0, busy_threads = 0, rank_threads = 0;
  bool oversubscribed = false;
  std::string cpu_note;
  bool has_summary = false;
  std::vector<double> measured_peak_act_bytes;  // [P] from summary.json (empty if absent)
  std::vector<MetricPoint> metrics;             // metrics.jsonl
  std::optional<CostModel> costs;               // costs.json
  std::optional<Schedule> schedule;             // schedule.csv (lowered)
  std::vector<RankTimeline> ranks;              // [P]; a missing rank has no events
  std::vector<bool> rank_present;               // [P]
  std::vector<std::string> warnings;            // what was missing or unreadable, and why
};

// Reads a run directory. Errors (naming the path): the directory does not exist or holds no
// timeline_rank<R>.jsonl; summary.json, costs.json or schedule.csv exist but do not parse. A
// missing or unreadable rank timeline, a truncated last line, missing optional files become
// warnings (the rank is reported missing) and never a crash.
Result<RunData> load_run(const std::string& dir);

// The run's measured costs per layer kind: fit_layer_costs (cost_model.h) over costs.json and
// the split summary.json names (`model`, `layout`). What the what-if re-splits layers with, and
// what `train --pipeline-layout auto --layout-costs-from RUN_DIR` chooses a split from. Errors
// (FailedPrecondition naming run.dir and the missing file or key, with a hint): no costs.json,
// no model or layout in summary.json, a layout that does not split that model over the table.
Result<LayerCosts> run_layer_costs(const RunData& run);

// ----- the report ------------------------------------------------------------------------------

struct WhatIfSpec {
  std::string name;    // generator name, or an auto name (zb-auto, zb-1p, zb-2p, zb-v-auto)
  int32_t chunks = 0;  // v; 0: the generator's default
  // "@auto": the layer split choose_layer_split() picks for the candidate from the run's
  // per-layer-kind costs (what `train --pipeline-layout auto --layout-costs-from RUN` would run);
  // otherwise the even split `train` takes by default.
  bool auto_layout = false;
  std::string label() const;  // "interleaved:2", "zb-v-auto@auto"
};
// "zb-h1,zb-v,interleaved:2,zb-v-auto@auto": registry items as parse_schedule_specs() reads
// them, the auto names (built from the run's costs, auto_schedule.h), each optionally with
// "@auto". Errors name the item.
Result<std::vector<WhatIfSpec>> parse_what_if(std::string_view text);

struct WhatIfResult {
  std::string label;  // "interleaved:2"
  std::string error;  // not empty: could not be simulated (why)
  int32_t chunks = 1;
  double makespan = 0, bubble_ratio = 0;
  double span_bubble_ratio = 0;  // the per-rank span measure (prof.h span_bubble)
  double step_saving = 0;        // baseline prediction - makespan (time units; > 0 saves)
  double gpu_hours_saved = 0;    // steps x step_saving x P / 3600 (time unit s)
  double bubble_saving = 0;      // baseline bubble ratio - bubble_ratio
  double peak_act_bytes = 0;     // max over ranks
  double peak_act_delta = 0;     // vs the baseline prediction (> 0 costs memory)
  // The shape's lower bound at the candidate's memory (lower_bound.h): no schedule of its
  // stages and placement holding at most that memory has a shorter step; and on the span.
  double lower_bound = 0, lower_bound_span = 0, max_span = 0;
  double lower_bound_memory = 0;  // the memory the bound assumes (LowerBound::memory_limit)
  // The layer split the candidate was costed with ("E,t|t|t|t,L": what `train --schedule` would
  // run), or "even" when the run's model is unknown and each rank's cost was spread evenly.
  std::string layout;
  std::string engine_profile;  // EngineProfile::description of its simulation
  // Post-validated (--engine zb): the kept copy of the fullest rank's weights, gradients and
  // optimizer state (params + grads + optimizer bytes of its stages), beside peak_act_bytes.
  double kept_copy_bytes = 0;
};

struct GapItem {
  int32_t rank = 0;
  std::string category;  // "exposed comm", "F"...
  double delta = 0;      // measured - predicted, time units
  std::string text;      // "rank 2: 3.1 ms of exposed comm not in the prediction"
};

struct ReportOptions {
  std::vector<WhatIfSpec> what_if;
  // --engine: the engine whose p2p and optimizer the what-ifs simulate (simulator.h
  // engine_profile); tightpipe: as the run ran (its --overlap-p2p-communication).
  Engine engine = Engine::kTightpipe;
};

struct Report {
  RunData run;
  std::vector<StepBreakdown> steps;  // every complete step
  BreakdownSummary summary;
  int32_t shown_step = -1;  // the measured step drawn (median step time)
  Timeline measured;        // that step's events
  const StepBreakdown* shown() const;
  // Prediction (empty when costs.json or schedule.csv is missing).
  bool has_prediction = false;
  std::string prediction_error;
  SimResult predicted;
  StepBreakdown predicted_breakdown;
  std::vector<double> gap_per_rank;       // [P] measured - predicted last compute end
  double gap_total = 0;                   // measured step time - predicted makespan
  std::vector<GapItem> gap_contributors;  // largest first
  std::vector<WhatIfResult> what_ifs;
};

Result<Report> build_report(const std::string& run_dir, const ReportOptions& options = {});

// The terminal table.
std::string format_report_text(const Report& report);
// The self-contained page (inline SVG and CSS, no script, no network).
std::string report_html(const Report& report);
// report.json: the measured and predicted bubble under summary.json's key names
// (measured_bubble_ratio, predicted_bubble_ratio, ..._per_rank; bubble_measure "makespan"), the
// span measure beside it (measured_span_bubble_ratio, predicted_span_bubble_ratio, ...), per
// rank and cause, the gap (docs/report.md lists the keys).
std::string report_json(const Report& report);
// The files `tightpipe report` writes into --out DIR, named apart from every file a run directory
// holds (`train --trace RUN_DIR/trace.json`, its costs.json), so a report never replaces them.
inline constexpr const char* kReportHtmlFile = "report.html";
inline constexpr const char* kReportJsonFile = "report.json";
inline constexpr const char* kReportTraceFile = "report-trace.json";
inline constexpr const char* kReportCostsFile = "report-costs.json";
// Refuses (one line naming both and --out) when one of the report's files in out_dir is one of
// `inputs` (the same file: inode or canonical path), before anything is written.
Status check_report_outputs(const std::string& out_dir, const std::vector<std::string>& inputs);

// Writes report.html, report.json, report-trace.json (every step, one after another) and
// report-costs.json into out_dir; refuses first when one of them is a file of the run directory.
Status write_report(const Report& report, const std::string& out_dir);

}  // namespace tightpipe
