// Internals shared by the GPU trace files of the report module (not a public header).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/gpu_trace.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"
#include "tightpipe/timeline.h"

namespace tightpipe::report_internal {

// A GPU event as a reader finds it, with the correlation id of its CPU launch (-1: none).
struct GpuLaunched {
  GpuEvent event;
  int64_t correlation = -1;
};
// The limits every trace number is held to (docs/gpu_trace.md, section 5). A time (ns) beyond
// +-kTraceNsLimit (4e18 ns: 127 years around the epoch, about int64 / 2) is no profiler's clock:
// the event is left out, counted in a warning. Under the limit any end, difference or sum of two
// stays inside int64. GPU events of one trace spanning more than kTraceWindowLimitNs (1e6 s, 11.6
// days) are refused: a profile covers seconds, so one of its times is damaged.
inline constexpr int64_t kTraceNsLimit = 4'000'000'000'000'000'000;
inline constexpr int64_t kTraceWindowLimitNs = 1'000'000'000'000'000;
inline bool plausible_trace_ns(int64_t ns) { return ns >= -kTraceNsLimit && ns <= kTraceNsLimit; }

// What a reader finds wrong with a trace's numbers and annotations. Each kind becomes one
// warning line: the count, the first example (naming the event) and what was done.
enum class TraceIssue {
  kTimeNotNumber = 0,  // a ts/dur (start/end) missing, text, null, not a number: left out
  kTimeBeyondClock,    // a time beyond +-kTraceNsLimit: left out
  kIdOutOfRange,       // a device or stream id that is not an int32: taken as -1
  kStepNumber,         // an iteration mark whose N is not in 0..INT32_MAX: its kernels in no step
  kStepOverlap,        // an iteration range that starts inside another
  kStepRepeated,       // the same N on more than one iteration range
};
inline constexpr int kNumTraceIssues = 6;
struct TraceIssues {
  std::array<int64_t, kNumTraceIssues> count{};
  std::array<std::string, kNumTraceIssues> first;
  // Counts one; `example` (built only for the first: a callable returning the text) names it.
  template <typename Example>
  void add(TraceIssue k, Example&& example) {
    if (count[static_cast<int>(k)]++ == 0) first[static_cast<int>(k)] = example();
  }
  // One line per kind found, in the order above.
  void to_warnings(std::vector<std::string>& out) const;
  // The events left out for a time, and the first of them ("" for none).
  int64_t times_left_out() const { return count[0] + count[1]; }
  const std::string& first_time_issue() const { return count[0] > 0 ? first[0] : first[1]; }
};

// A time as a reader found it: a value in range, or why it is not one (`text`: the value as
// written, for the warning).
struct TraceTime {
  enum class State { kMissing, kOk, kNotNumber, kBeyond } state = State::kMissing;
  int64_t ns = 0;
  std::string text;
  bool ok() const { return state == State::kOk; }
  static TraceTime of_ns(int64_t ns);  // kOk or kBeyond
  // Records an unusable time in `issues` (`what` names the event and field); false if unusable.
  template <typename What>
  bool check(TraceIssues& issues, What&& what) const;
};

// An id (device, stream, rank...) as a reader found it.
struct TraceId {
  enum class State { kMissing, kOk, kBad } state = State::kMissing;
  int64_t value = 0;
  std::string text;  // as written, when kBad
};
// The text of a JSON/SQL value for a message: printable, quoted when a string, at most 40 bytes.
std::string quoted_value(std::string_view text, bool is_string);

template <typename What>
bool TraceTime::check(TraceIssues& issues, What&& what) const {
  switch (state) {
    case State::kOk:
      return true;
    case State::kBeyond:
      issues.add(TraceIssue::kTimeBeyondClock, [&] { return what() + " " + text; });
      return false;
    case State::kMissing:
      issues.add(TraceIssue::kTimeNotNumber, [&] { return what() + " missing"; });
      return false;
    case State::kNotNumber:
      issues.add(TraceIssue::kTimeNotNumber, [&] { return what() + " " + text; });
      return false;
  }
  return false;
}

// An int32 id from a TraceId: the value, or -1 (counted in `issues`, named by `what`) when it is
// bad or outside int32; `fallback` when missing.
template <typename What>
int32_t id_or(const TraceId& id, int32_t fallback, TraceIssues& issues, What&& what) {
  if (id.state == TraceId::State::kMissing) return fallback;
  if (id.state == TraceId::State::kOk && id.value >= INT32_MIN && id.value <= INT32_MAX) {
    return static_cast<int32_t>(id.value);
  }
  issues.add(TraceIssue::kIdOutOfRange, [&] {
    return what() + " " + (id.state == TraceId::State::kBad ? id.text : std::to_string(id.value));
  });
  return -1;
}

// A CPU launch (cudaLaunchKernel, cudaMemcpyAsync...): its correlation id and start.
struct Launch {
  int64_t correlation = 0;
  int64_t ts = 0;  // ns
};

// What the name of an iteration annotation says: whether it marks an iteration, and its N
// (nullopt when the number is not in 0..INT32_MAX: the mark is counted as TraceIssue::kStepNumber).
struct IterationName {
  bool is_iteration = false;
  std::optional<int32_t> step;
};
// "ProfilerStep#N", the PyTorch profiler's iteration annotation ("ProfilerStep#" and anything not
// a number in range: an iteration with a bad number).
IterationName profiler_step_name(std::string_view name);
// An NVTX range that marks an iteration (nsys traces): "ProfilerStep#N", or a word for an
// iteration ("iteration", "iter", "step", any case) and a number, apart or joined by one of
// " _#:-=" ("iteration 12", "step_12", "iter:12", "Step #3").
IterationName nvtx_iteration_name(std::string_view text);
// Their N, nullopt for another name or an N out of range.
std::optional<int32_t> profiler_step(std::string_view name);
std::optional<int32_t> nvtx_iteration(std::string_view text);

// What both readers do last: each GPU event gets the step (the latest-starting StepMark that
// contains its launch's start) and the innermost pipeline range containing it; events, steps and
// ranges are sorted; anomalies are counted (unmatched launches, same-stream overlaps, overlapping
// or repeated iteration ranges) and said in warnings with the reader's `issues`. Refuses (naming
// trace.path) GPU events that span more than kTraceWindowLimitNs.
Status attribute_and_sort(GpuTraceRank& trace, std::vector<GpuLaunched> gpu,
                          std::vector<Launch> launches, TraceIssues issues);

// `--pp P` over these traces (by rank, P of them): the ranks must be one pipeline of the world's
// layout, P contiguous ranks from a multiple of P or P ranks W / P apart from one below W / P
// (Megatron's, DeepSpeed's and torchtitan's); without a world size, evenly spaced. InvalidArgument
// naming the ranks found otherwise.
Status check_pipeline_ranks(const std::vector<GpuTraceRank>& traces, int32_t pp);

// The pipeline analysis (gpu_pipeline.cc): fits costs to the traces, simulates the schedule the
// user says ran and the what-ifs. Never fails: a problem goes into the result's `error`.
// REQUIRES: traces and ranks are by rank and of the same length; spec.pp > 0.
GpuPipelineReport analyze_gpu_pipeline(const std::vector<GpuTraceRank>& traces,
                                       const std::vector<GpuRankReport>& ranks,
                                       const GpuPipelineSpec& spec);

// What a pipeline annotation (CpuRange) says ran: "PP:2F0" (torch.distributed.pipelining's
// record_function names) -> that action; a name containing "backward" (any case) -> kBackward,
// "forward" -> kForward, with stage and microbatch -1. nullopt for anything else, including PP:
// actions that are not computation (PP:1SEND_F3).
std::optional<Action> annotated_action(std::string_view range_name);

// The GPU events in each rank's window of one step (gpu_step_windows; kNoStep: the whole trace),
// clipped to it whichever step launched them, as a Timeline, time 0 at the earliest window start
// of any rank: compute kernels on the compute lane (F, B, I, W when a pipeline annotation says
// which, otherwise "other"), NCCL kernels on the comm lane (P2P as RECV, collectives as SEND),
// copies and memsets on the data lane; event names are the kernel names. For the SVG timeline.
Timeline gpu_step_timeline(const GpuTraceReport& report, int32_t step);

// The report's headline, one sentence without a newline: the step with the largest bubble ratio
// of any rank ("worst step: rank 3 idles 22.0% of step 1009 (5.10 ms of 23.2 ms); exposed
// communication 10.1% of the step, compute 60.3%"); "" when no rank has steps. The terminal
// report and report.html print it.
std::string gpu_headline(const GpuTraceReport& report);

// One step across the ranks: the usage of each rank that has it (in rank order).
struct StepAcrossRanks {
  int32_t step = 0;
  std::vector<const GpuUsage*> ranks;
  double longest_window_s() const;  // the step time: the longest of its ranks' windows
};
// Every step any rank has, in step order: where the pipeline analysis (the steps every rank has)
// and the page (the median-window step) take their steps from. The pointers point into `ranks`.
std::vector<StepAcrossRanks> steps_across_ranks(const std::vector<GpuRankReport>& ranks);

// The step report.html draws (gpu_html.cc): among the steps every rank has (all steps when none
// is common), the one whose window, the longest of its ranks' windows, is the median (the lower
// median for an even count; ties by step number). kNoStep when no rank has steps.
int32_t median_window_step(const std::vector<GpuRankReport>& ranks);

// Draws many events as few bars: per rank, the events of one lane and kind that start at most
// `gap` after the previous one ends become one event (the first's start to the latest end, named
// "N events less than one pixel apart"). With `gap` one pixel's time, a lane of a kind keeps at
// most one bar per pixel. Returns how many events were merged away.
int64_t merge_close_events(Timeline& timeline, double gap);

}  // namespace tightpipe::report_internal
