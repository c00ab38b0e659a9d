// Profiling outputs over a Timeline (timeline.h): per-rank bubble statistics, the Chrome trace
// writer (Trace Event Format, loadable in Perfetto and chrome://tracing) and the SVG timeline.
// The simulator (predicted timelines) and the executor (measured timelines) both feed these, so a
// predicted and a measured run print, trace and draw the same way.
//
// Pure functions over plain data; thread-compatible. Formats: docs/trace_format.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe {

// ----- the bubble: one definition --------------------------------------------------------------
//
// Every number called "bubble" (the trainer's step lines, metrics.jsonl, summary.json, `report`,
// report.json, `simulate`, the benches), measured and predicted alike, comes from step_bubble()
// and summarize_bubbles() below (docs/bubble.md has a worked example). For one step:
//   * the window is [0, T]: from the step's common origin (ranks leave a barrier together; a
//     simulation starts at 0) to T = the latest end of any event of any rank, which in a training
//     step is the end of the slowest rank's optimizer;
//   * a rank is busy while it runs a compute action (F, I, W, B: the union of their intervals)
//     and while it runs the optimizer after `sync`, the moment the last rank reached it (before
//     that the optimizer's all-reduce only waits for the slowest rank: idle, drain);
//   * idle_r = T - busy_r; bubble ratio = sum of idle_r / (P x T) over the ranks present; the
//     rank's own ratio is idle_r / T.
// Several steps: the median of the step ratios over the measured steps (measured_step_range()).

// What one rank contributes to its step's bubble: four numbers an MPI rank can ship.
struct RankBusy {
  bool present = true;          // false: this rank's timeline is missing (left out of the ratio)
  double compute = 0;           // length of the union of its F, I, W, B intervals
  double optimizer_start = -1;  // its optimizer event; -1 when it has none
  double optimizer_end = -1;
  double end = 0;  // the latest end of any of its events
};

// The union length of intervals fed in start order (touching or overlapping ones merge). The
// simulator feeds it as it goes, rank_busy() from a rank's events: one rule, one result.
class BusyUnion {
 public:
  // REQUIRES: start >= the start of the previous add().
  void add(double start, double end);
  double total() const;

 private:
  double closed_ = 0;
  double cur_start_ = 0, cur_end_ = 0;
  bool open_ = false;
};

// REQUIRES: compute events (F, I, W, B) in start order among themselves (as every timeline holds
// them: one compute lane per rank).
RankBusy rank_busy(const std::vector<TimelineEvent>& events);

struct StepBubble {
  double window = 0;  // T
  double sync = 0;    // the latest optimizer start (0: no optimizer in the step)
  int32_t ranks_present = 0;
  std::vector<double> busy;       // [P] busy time of each rank (0 when absent)
  std::vector<double> idle;       // [P] T - busy (0 when absent)
  std::vector<double> optimizer;  // [P] of busy, the optimizer's part (after sync)
  double total_busy = 0;          // over the ranks present
  double total_idle = 0;
  double ratio = 0;  // total_idle / (ranks_present x T); 0 for an empty window
  // idle[r] / T; 0 for an empty window.
  double rank_ratio(size_t r) const;
};

StepBubble step_bubble(const std::vector<RankBusy>& ranks);
// One step's timeline (only that step's events): step_bubble of rank_busy() of each rank. A rank
// without events counts as absent.
StepBubble step_bubble(const Timeline& step);

// The busy intervals of one rank in a step whose optimizer sync is `sync`, merged and sorted: the
// complement in [0, T] is exactly the idle time step_bubble counts (the breakdown classifies it).
struct Interval {
  double start = 0, end = 0;
};
std::vector<Interval> busy_intervals(const std::vector<TimelineEvent>& events, double sync);

// The exposed data-parallel all-reduce of one rank (docs/bubble.md): the time its optimizer
// waits on its gradient all-reduce, i.e. the union of its ALLREDUCE events clipped to
// [end of its last F/I/W/B, start of its optimizer event) (no optimizer event: to the end). It
// is idle time (busy is only compute and the optimizer after sync), so the breakdown's
// "exposed all-reduce" cause is part of idle; an all-reduce that overlaps compute or ends before
// the rank's last compute is hidden and counts nothing.
double exposed_allreduce(const std::vector<TimelineEvent>& events);

// The steps a run's medians are taken over: [first, n). The first `warmup` steps are left out
// when more than `warmup` ran; otherwise only the last step counts (never none when n > 0).
struct StepRange {
  size_t first = 0, last = 0;  // [first, last)
};
StepRange measured_step_range(size_t n, int64_t warmup);

struct BubbleSummary {
  double ratio = 0;                // median of the steps' ratios
  std::vector<double> rank_ratio;  // [P] median of each rank's idle / T
};
// REQUIRES: every step has the same number of ranks.
BubbleSummary summarize_bubbles(const std::vector<StepBubble>& measured_steps);

// ----- the span bubble: the zero-bubble paper's measure ---------------------------------------
//
// step_bubble() above is the makespan measure: every rank's window starts at the common origin 0,
// so the stagger of the first forwards (fill) and of the last backwards (drain) counts as idle.
// The zero-bubble paper measures ZB-H2, ZB-V and its automatic schedules by the per-rank span
// instead, which counts only the gaps a rank has once it has started:
//   * span_r = end of rank r's last compute action (F, I, W, B) - start of its first; the
//     optimizer is outside every span (the span measures the schedule, not the step);
//   * S = the longest span over the ranks present; busy_r = the union of r's F, I, W, B;
//   * span bubble ratio = 1 - sum of busy_r / (P x S) over the ranks present; the rank's own
//     ratio is (S - busy_r) / S, so the step's ratio is the mean of the ranks'.
// A rank's own gaps inside its span are span_r - busy_r (the simulator's internal_idle).
// With F = I = W, ZB-H2's span bubble is 0 while its makespan bubble is (p-1)/(3m+p-1). Outputs
// show both side by side; `bubble_ratio` everywhere is the makespan measure.

// What one rank contributes to its step's span bubble.
struct RankSpan {
  bool present = false;    // false: no compute event (left out of the ratio)
  double first_start = 0;  // start of its first F, I, W or B
  double last_end = 0;     // end of its last F, I, W or B
  double compute = 0;      // length of the union of its F, I, W, B intervals
};
// REQUIRES: as rank_busy().
RankSpan rank_span(const std::vector<TimelineEvent>& events);

struct SpanBubble {
  double max_span = 0;  // S: the longest span over the ranks present
  int32_t ranks_present = 0;
  std::vector<bool> present;    // [P] the rank ran compute
  std::vector<double> span;     // [P] last_end - first_start (0 when absent)
  std::vector<double> compute;  // [P] busy time inside the span (0 when absent)
  double total_compute = 0;     // over the ranks present
  double ratio = 0;             // 1 - total_compute / (ranks_present x S); 0 when S = 0
  // (S - compute[r]) / S; 0 when S = 0 or r is absent.
  double rank_ratio(size_t r) const;
};

SpanBubble span_bubble(const std::vector<RankSpan>& ranks);
// One step's timeline: span_bubble of rank_span() of each rank.
SpanBubble span_bubble(const Timeline& step);
// The medians over steps, as summarize_bubbles() takes them (ratio and each rank's ratio).
BubbleSummary summarize_span_bubbles(const std::vector<SpanBubble>& measured_steps);

// ----- statistics ------------------------------------------------------------------------------

struct RankTimelineStats {
  int32_t rank = 0;
  double first_start = 0;    // start of the first compute event (0 if none)
  double last_end = 0;       // end of the last compute event (0 if none)
  double busy = 0;           // busy time of step_bubble() (the one definition)
  double comm = 0;           // sum of SEND/RECV event durations (may overlap compute)
  double idle = 0;           // idle time of step_bubble() (the one definition)
  double internal_idle = 0;  // last_end - first_start - busy: gaps between first and last compute
  int64_t compute_events = 0;
  int64_t messages_sent = 0;  // SEND events
  int64_t bytes_sent = 0;     // sum of SEND event bytes
};

struct TimelineStats {
  double makespan = 0;                   // latest end over all events of all ranks (origin 0)
  double total_busy = 0;                 // sum of compute time over ranks
  double bubble_ratio = 0;               // step_bubble(timeline).ratio: the one definition
  std::vector<RankTimelineStats> ranks;  // [P], in Timeline order
};

// Statistics of a timeline. Compute events are those with is_compute_kind(kind).
TimelineStats timeline_stats(const Timeline& timeline);

// ----- Chrome trace ----------------------------------------------------------------------------

struct TraceOptions {
  // Trace timestamps are microseconds. 0 picks from time_unit: s 1e6, ms 1e3, us 1, ns 1e-3, and
  // 1000 for any other (abstract cost) unit, so one cost unit shows as one millisecond.
  double us_per_unit = 0;
  std::string process_prefix = "rank";  // process names: "rank 0", "rank 1"...
};

// Trace Event Format JSON: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
// One `ph:"X"` complete event per timeline event, pid = rank, tid = lane (0 compute, 1 comm,
// 2 data); events of one lane that overlap in time go to overflow threads tid = 100*k + lane.
// `M` metadata events name processes ("rank 3") and threads ("compute", "comm").
std::string to_chrome_trace(const Timeline& timeline, const TraceOptions& options = {});
Status write_chrome_trace(const std::string& path, const Timeline& timeline,
                          const TraceOptions& options = {});

// ----- SVG timeline ----------------------------------------------------------------------------

struct SvgOptions {
  int width = 1200;          // total width in pixels
  int row_height = 28;       // pixels per rank row (compute bar + thin comm bar)
  std::string title;         // drawn above the rows when not empty
  bool hover_titles = true;  // a <title> per event (off automatically above 200k events)
};

// One row (<g class="rank" data-rank="r">) per rank, compute events as coloured bars (F, I, W,
// B, comm, other in distinct colours), idle time as the grey row background, a legend and an
// axis in the timeline's time unit. Well-formed XML.
std::string to_svg(const Timeline& timeline, const SvgOptions& options = {});
Status write_svg(const std::string& path, const Timeline& timeline, const SvgOptions& options = {});

// Text made safe inside XML/HTML elements and attribute values (< > & " ' escaped): the SVG
// writer's and the report page's one escaper.
std::string xml_escape(std::string_view text);

// A round tick step for an axis over `span` (1, 2 or 5 times a power of ten) giving about
// `target` ticks: the timeline's time axis and the plan page's axes. 1 for an empty, negative or
// non-finite span.
double nice_step(double span, int target);

// Fill colour used for an event kind in the SVG (and documented in docs/trace_format.md).
std::string_view event_kind_color(EventKind kind);

}  // namespace tightpipe
