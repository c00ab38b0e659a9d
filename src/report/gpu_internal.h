// Internals shared by the GPU trace files of the report module (not a public header).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/gpu_trace.h"
#include "tightpipe/schedule.h"
#include "tightpipe/timeline.h"

namespace tightpipe::report_internal {

// A GPU event as a reader finds it, with the correlation id of its CPU launch (-1: none).
struct GpuLaunched {
  GpuEvent event;
  int64_t correlation = -1;
};
// The range a trace timestamp or duration is held to: +-4e18 ns (+-127 years around the epoch),
// so that any end, difference or sum of two stays inside int64. Real profilers write nothing near
// it; a value beyond it (a damaged or hand-made file) is saturated, not wrapped.
inline constexpr int64_t kTraceNsLimit = 4'000'000'000'000'000'000;
inline int64_t clamp_trace_ns(int64_t ns) {
  return ns < -kTraceNsLimit ? -kTraceNsLimit : ns > kTraceNsLimit ? kTraceNsLimit : ns;
}

// A CPU launch (cudaLaunchKernel, cudaMemcpyAsync...): its correlation id and start.
struct Launch {
  int64_t correlation = 0;
  int64_t ts = 0;  // ns
};

// The N of a PyTorch profiler iteration annotation, "ProfilerStep#N"; nullopt for any other name.
std::optional<int32_t> profiler_step(std::string_view name);

// The N of an NVTX range that marks an iteration (nsys traces): "ProfilerStep#N", or a word for an
// iteration ("iteration", "iter", "step", any case) and a number, apart or joined by one of
// " _#:-=" ("iteration 12", "step_12", "iter:12", "Step #3"); nullopt otherwise.
std::optional<int32_t> nvtx_iteration(std::string_view text);

// What both readers do last: each GPU event gets the step (StepMark containing its launch's
// start) and the innermost pipeline range containing it; events, steps and ranges are sorted;
// anomalies are counted (unmatched launches, same-stream overlaps) and said in warnings
// (negative durations were counted by the reader).
void attribute_and_sort(GpuTraceRank& trace, std::vector<GpuLaunched> gpu,
                        std::vector<Launch> launches);

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

// The GPU events of one step (kNoStep: all) as a Timeline, time 0 at the earliest event of any
// rank: compute kernels on the compute lane (F, B, I, W when a pipeline annotation says which,
// otherwise "other"), NCCL kernels on the comm lane (P2P as RECV, collectives as SEND), copies
// and memsets on the data lane; event names are the kernel names. For the SVG timeline.
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
