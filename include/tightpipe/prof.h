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

// ----- statistics ------------------------------------------------------------------------------

struct RankTimelineStats {
  int32_t rank = 0;
  double first_start = 0;    // start of the first compute event (0 if none)
  double last_end = 0;       // end of the last compute event (0 if none)
  double busy = 0;           // sum of compute-event durations (F, I, W, B, optimizer)
  double comm = 0;           // sum of SEND/RECV event durations (may overlap compute)
  double idle = 0;           // makespan - busy
  double internal_idle = 0;  // last_end - first_start - busy: gaps between first and last compute
  int64_t compute_events = 0;
  int64_t messages_sent = 0;  // SEND events
  int64_t bytes_sent = 0;     // sum of SEND event bytes
};

struct TimelineStats {
  double makespan = 0;      // latest end over all events of all ranks (origin 0)
  double total_busy = 0;    // sum of compute time over ranks
  double bubble_ratio = 0;  // (P * makespan - total_busy) / (P * makespan); 0 when empty
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
  int width = 1200;            // total width in pixels
  int row_height = 28;         // pixels per rank row (compute bar + thin comm bar)
  std::string title;           // drawn above the rows when not empty
  bool hover_titles = true;    // a <title> per event (off automatically above 200k events)
};

// One row (<g class="rank" data-rank="r">) per rank, compute events as coloured bars (F, I, W,
// B, comm, other in distinct colours), idle time as the grey row background, a legend and an
// axis in the timeline's time unit. Well-formed XML.
std::string to_svg(const Timeline& timeline, const SvgOptions& options = {});
Status write_svg(const std::string& path, const Timeline& timeline, const SvgOptions& options = {});

// Fill colour used for an event kind in the SVG (and documented in docs/trace_format.md).
std::string_view event_kind_color(EventKind kind);

}  // namespace tightpipe
