// GPU traces of other engines' runs (PyTorch profiler / Kineto JSON, Nsight Systems SQLite
// exports): readers that turn one file per rank into GPU events, the usage metrics of a rank
// (window, busy, idle, compute, communication, exposed communication, memory) for the whole trace
// and per iteration (ProfilerStep#N), the pipeline-aware idle causes when the user says what ran,
// and the what-if against our simulator from costs fitted to the trace. `tightpipe report TRACE...`
// (cmd_report.cc) reads them; docs/gpu_trace.md has the definitions and a worked example.
//
// Times are integer nanoseconds on the profiler's clock (Kineto's microsecond timestamps carry
// three decimals), so unions and differences are exact; outputs are in seconds.
//
// Definitions (one rank; for the whole trace and for each step's window, gpu_step_windows: the
// step windows partition the trace's window, and every GPU event counts in each window it
// overlaps, clipped to it, whichever step launched it):
//   window   whole trace: first GPU event start to last GPU event end; a step: its first GPU
//            event to the next step's first (the first step from the trace's start, the last to
//            its end)
//   busy     union of all GPU events (kernels, memcpy, memset) over all devices and streams
//   idle     window - busy; the bubble ratio is idle / window, computed by step_bubble (prof.h),
//            the function our own runs use
//   compute  union of the compute kernels (every kernel classify_kernel does not call
//            communication)
//   communication          union of the communication kernels (P2P send/recv and collectives)
//   exposed communication  communication not overlapped by compute
//   memory   union of memcpy and memset
//
// Pure functions over plain data except the readers (files). Thread-compatible; the readers may
// run concurrently on different files.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/simulator.h"
#include "tightpipe/status.h"

namespace tightpipe {

// ----- events ----------------------------------------------------------------------------------

enum class GpuEventKind { kCompute = 0, kCollective, kP2P, kMemcpy, kMemset };
inline constexpr int kNumGpuEventKinds = 5;
std::string_view gpu_event_kind_name(GpuEventKind kind);  // "compute", "collective", "p2p"...
bool is_communication(GpuEventKind kind);                 // collective or P2P

// What a kernel name is: NCCL/RCCL kernels ("nccl" in the name, any case) are communication, P2P
// when the name says SendRecv, Send or Recv (ncclKernel_SendRecv_..., ncclDevKernel_Recv_...),
// otherwise a collective (AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll...);
// other communication libraries' kernels are collectives too: DeepEP's (namespace deep_ep or
// dpsk::ep: deep_ep::internode::dispatch, dpsk::ep::internode::combine, ...::cached_notify),
// NVSHMEM's ("nvshmem"), MSCCL's ("msccl"), TransformerEngine's userbuffers ("userbuffers"),
// vLLM's custom all-reduce ("cross_device_reduce"), and a kernel whose function is named
// dispatch, combine or notify_..dispatch/combine. Every other kernel is compute. The one
// classifier both readers call.
GpuEventKind classify_kernel(std::string_view name);

inline constexpr int32_t kNoStep = -1;           // a GPU event whose launch ran in no ProfilerStep
inline constexpr int64_t kNoLaunch = INT64_MIN;  // a GPU event whose CPU launch is not in the trace

struct GpuEvent {
  int64_t start_ns = 0;  // profiler clock
  int64_t end_ns = 0;    // >= start_ns (a negative duration is counted and clamped to 0)
  int32_t device = 0;
  int32_t stream = 0;
  GpuEventKind kind = GpuEventKind::kCompute;
  int32_t name = -1;       // index into GpuTraceRank::names
  int32_t step = kNoStep;  // the N of the ProfilerStep#N (or NVTX iteration) its launch ran in
  int32_t range = -1;      // index into GpuTraceRank::ranges: the innermost annotated range its
                           // launch ran in (-1: none)
  int64_t launch_ns = kNoLaunch;  // the start of its CPU launch (cudaLaunchKernel...), same clock
};

// A CPU-side annotation the analysis uses: an iteration (ProfilerStep#N, or for nsys an NVTX
// range such as "iteration 12" or "step_12") or a record_function / NVTX range that names
// pipeline work ("PP:2F0" as torch.distributed.pipelining names its actions; names containing
// "forward" or "backward", as Megatron-style step functions).
struct CpuRange {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
};

struct StepMark {
  int32_t step = 0;  // N
  int64_t start_ns = 0, end_ns = 0;
};

// Problems a buggy profiler leaves in a trace: counted, reported, never fatal.
struct TraceAnomalies {
  int64_t negative_durations = 0;  // GPU events with dur < 0 (clamped to 0)
  int64_t stream_overlaps = 0;     // GPU events that start before the previous one on the same
                                   // device and stream ended (kept; unions absorb them)
  int64_t unmatched_launches = 0;  // GPU events whose correlation matches no CPU launch (no step)
};

// One rank's GPU trace.
struct GpuTraceRank {
  std::string path;
  std::string format;  // "kineto" or "nsys"
  int32_t rank = -1;   // distributedInfo.rank; -1 until read_gpu_traces assigns it
  bool rank_from_file_order = false;
  int32_t world_size = 0;  // distributedInfo.world_size; 0 unknown
  // What identifies the job, for refusing ranks of different jobs mixed: the distributedInfo
  // fields shared by every rank (backend, world size, process-group config, NCCL version) and
  // the trace's device kind; empty when the trace has none.
  std::string job;
  std::vector<std::string> names;  // kernel/copy names, interned
  std::vector<GpuEvent> events;    // sorted by (start_ns, end_ns)
  std::vector<StepMark> steps;     // sorted by start
  std::vector<CpuRange> ranges;    // pipeline annotations (see CpuRange), sorted by start
  int64_t cpu_events = 0;          // CPU-side events seen (ops, launches, annotations)
  TraceAnomalies anomalies;
  std::vector<std::string> warnings;  // one line each: what was odd and what was done about it
};

// Reads a Kineto trace (.json or .json.gz: gzip is recognised by its magic bytes) without
// holding the document: a SAX pass keeps only GPU events, launches (cuda_runtime / cuda_driver
// events with args.correlation), ProfilerStep#N and pipeline annotations. Errors (Corruption or
// InvalidArgument naming the path, with a hint): unreadable, truncated gzip, not JSON, JSON that
// is not a trace (no traceEvents array). A trace with no GPU events is an error saying it is a
// CPU-only trace.
Result<GpuTraceRank> read_kineto_trace(const std::string& path);

// Reads an Nsight Systems SQLite export (`nsys export --type sqlite`): CUPTI_ACTIVITY_KIND_KERNEL
// (names through StringIds), _MEMCPY, _MEMSET; iterations and pipeline annotations from
// NVTX_EVENTS ranges, matched to GPU work through CUPTI_ACTIVITY_KIND_RUNTIME launches by
// correlationId. Errors name the path and the missing table or column.
Result<GpuTraceRank> read_nsys_sqlite(const std::string& path);

// What a `report` input is, told apart by content: a directory (our run: load_run checks it), a
// file of a run directory (summary.json, timeline_rank*.jsonl..., or any file next to a
// timeline_rank0.jsonl: kRunDir, so load_run says which directory to give), a JSON or gzip'd
// file (Kineto), an SQLite database (nsys). Errors name the path: it does not exist (NotFound), an
// .nsys-rep (say how to export it), anything else (InvalidArgument).
enum class ReportInput { kRunDir, kKineto, kNsys };
Result<ReportInput> detect_report_input(const std::string& path);

// Reads one trace per rank (in parallel, at most `threads` at a time; 0 = hardware threads),
// each by its detected format. Ranks come from distributedInfo, or from the file order when no
// file has one (said in a warning). Errors: a file that fails to read; two files with the same
// rank; ranks of different jobs (naming both files and what differs).
Result<std::vector<GpuTraceRank>> read_gpu_traces(const std::vector<std::string>& paths,
                                                  int threads = 0);

// ----- metrics ---------------------------------------------------------------------------------

struct GpuUsage {
  int64_t start_ns = 0, end_ns = 0;  // the window
  int64_t busy_ns = 0;               // busy, exact: idle is end_ns - start_ns - busy_ns
  int64_t events = 0;                // GPU events that start in the window
  double window_s = 0, busy_s = 0, idle_s = 0;
  double compute_s = 0, communication_s = 0, exposed_communication_s = 0, memory_s = 0;
  double p2p_s = 0, collective_s = 0;  // unions of each (communication_s <= p2p_s + collective_s)
  double bubble_ratio = 0;             // idle / window (step_bubble); 0 for an empty window
};

// A window of one rank's trace: [start_ns, end_ns].
struct GpuWindow {
  int64_t start_ns = 0, end_ns = 0;
};
struct GpuStepWindow {
  int32_t step = 0;  // N of ProfilerStep#N
  GpuWindow window;
};

// The steps' windows: the one definition of a step's window. A step runs from its first GPU
// event (the earliest start among the events its launches made) to the next step's first GPU
// event; the last step to the trace's last GPU event end; the first step from the trace's first
// GPU event (work launched before the first step, or with no launch in the trace, runs in the
// first step's window). The windows partition the trace's window, in time order; a step that
// launched no GPU event has none. Empty when no event has a step. Events in any order.
std::vector<GpuStepWindow> gpu_step_windows(std::span<const GpuEvent> events);

// Usage of a set of GPU events (any order) over their own window (first start to last end).
// All zeros for none.
GpuUsage gpu_usage(std::span<const GpuEvent> events);

// ----- pipeline-aware causes -------------------------------------------------------------------
//
// The time a rank does not compute within a step's window (window - compute: idle, exposed
// communication and memory-only time) split by cause. When the user said the run was pipelined,
// each gap between the rank's compute kernels is, first match wins:
//   fill             before the step's first compute kernel
//   drain            after the step's last compute kernel (to the end of its window: the next
//                    step's first GPU event, so the time between steps too)
//   dependency wait  a gap in which a P2P kernel ends (the next compute waited for a receive)
// and the rest of the time, and all of it without pipeline information, by what covers it:
//   exposed comm     communication kernels
//   memory           memcpy/memset (and no communication)
// and the GPU idle (no event on any stream) by what the GPU event that ends the idle gap waited
// for (HTA's idle time breakdown, over all streams of the rank at once):
//   host wait        the CPU launched it after the GPU went idle: the CPU was late (launch
//                    overhead, CPU-side work, the data loader, a synchronization on the host)
//   other wait       it was launched before the GPU went idle, so the GPU waited on something
//                    else (an event on another stream, a peer), or its launch is not in the trace
// The causes sum to window - compute. An idle gap that two windows share counts in each by its
// part in it, with the gap's one cause: over windows that partition a trace, the causes sum to
// those of the whole.
enum class GpuCause {
  kFill = 0,
  kDrain,
  kDependency,
  kExposedComm,
  kMemory,
  kHostWait,
  kOtherWait
};
inline constexpr int kNumGpuCauses = 7;
std::string_view gpu_cause_name(GpuCause cause);  // "fill", "drain", "dependency wait"...

using GpuCauses = std::array<double, kNumGpuCauses>;     // seconds per cause
using GpuCausesNs = std::array<int64_t, kNumGpuCauses>;  // nanoseconds per cause, exact
GpuCauses gpu_cause_seconds(const GpuCausesNs& ns);

// The causes of a set of GPU events (one rank, any order) over their own window.
GpuCauses gpu_causes(std::span<const GpuEvent> events, bool pipelined);

// ----- the trace report ------------------------------------------------------------------------

struct GpuStepReport {
  int32_t step = 0;  // N of ProfilerStep#N
  GpuUsage usage;    // over the step's window (gpu_step_windows)
  GpuCauses causes{};
  GpuCausesNs causes_ns{};
};

struct GpuRankReport {
  int32_t rank = 0;
  std::string path;
  GpuUsage usage;      // the whole trace
  GpuCauses causes{};  // sum over the steps (the whole trace when it has no steps)
  GpuCausesNs causes_ns{};
  std::vector<GpuStepReport> steps;  // by step number; their windows partition the trace's
};

// One rank's report: usage of the whole trace and of each step's window (gpu_step_windows),
// and the causes (pipelined: fill, drain and dependency wait too) per step and summed over the
// steps. Path and rank from the trace.
GpuRankReport gpu_rank_report(const GpuTraceRank& trace, bool pipelined);

// What ran, as the user says (`--pp`, `--schedule`, `--num-microbatches`, `--vpp` or
// `--schedule-file`): enables the pipeline causes and the what-if.
struct GpuPipelineSpec {
  int32_t pp = 0;        // 0: not said (no pipeline analysis)
  std::string schedule;  // generator name ("1f1b", "interleaved", "zb-h1"...)
  int32_t vpp = 0;       // chunks; 0: the generator's default
  int32_t microbatches = 0;
  std::string schedule_file;           // a schedule CSV instead of schedule/vpp/microbatches
  std::vector<std::string> what_if;    // other schedules to simulate ("zb-h1", "interleaved:2")
  Engine engine = Engine::kTightpipe;  // --engine: how the what-ifs' messages and optimizer run
  Status validate() const;
};

// Costs fitted to the trace (docs/gpu_trace.md: what kernels alone can and cannot tell).
struct GpuFittedCosts {
  std::string method;  // "annotations" (PP:<action> or forward/backward ranges) or "kernels"
  // [S] per stage, seconds: forward, the whole backward (I + W when split) and its weight part
  // (w_s empty: the backward ran fused).
  std::vector<double> f_s, b_s, w_s;
  double message_s = 0;            // per P2P message
  std::vector<std::string> notes;  // assumptions made
};

struct GpuWhatIf {
  std::string label;
  std::string error;                    // not empty: could not be simulated (why)
  double step_s = 0, bubble_ratio = 0;  // simulated with the fitted costs
  double saving_s = 0;                  // predicted (what ran) - this; > 0 saves
  double max_span_s = 0;                // the longest rank span (SimResult::max_span)
  // The shape's lower bound at the candidate's memory (lower_bound.h, lower_bound_for): no
  // schedule of its stages and placement holding at most lower_bound_memory whole-rank
  // microbatch activations per rank has a shorter step (or span). 0: not computed.
  double lower_bound_s = 0, lower_bound_span_s = 0, lower_bound_memory = 0;
  std::string engine_profile = {};  // EngineProfile::description of its simulation
};

struct GpuPipelineReport {
  GpuFittedCosts costs;
  double measured_step_s = 0;  // median over steps of the longest rank window
  // The pipeline bubble as measured, the quantity predicted_bubble_ratio predicts: step_bubble
  // (prof.h) with busy = each rank's compute kernels and the window from the earliest rank's
  // first GPU event to the latest rank's last (the ranks' clocks taken as one), median over the
  // steps. NCCL kernels waiting for a peer are not compute here, though they are GPU-busy.
  double measured_bubble_ratio = 0;
  double predicted_step_s = 0, predicted_bubble_ratio = 0;  // the schedule that ran, simulated
  std::vector<GpuWhatIf> what_ifs;
  std::string error;  // not empty: the pipeline analysis could not run (why)
};

struct GpuTraceReport {
  std::vector<std::string> inputs;
  std::vector<GpuRankReport> ranks;  // by rank
  std::vector<GpuTraceRank> traces;  // by rank (the events, for the timeline and trace.json)
  // Said to be a pipeline (--pp): idle time is then a "bubble" in the text, report.json
  // ("ratio_name") and the page, and "idle" otherwise (ratio_name below).
  bool pipelined = false;
  std::optional<GpuPipelineReport> pipeline;
  std::vector<std::string> warnings;  // one line each (no steps, anomalies, unmatched launches)
};

Result<GpuTraceReport> build_gpu_trace_report(const std::vector<std::string>& paths,
                                              const GpuPipelineSpec& pipeline = {});

// What the idle / window ratio is called: "bubble" for a pipeline (report.pipelined), else "idle".
std::string_view gpu_ratio_name(const GpuTraceReport& report);

std::string format_gpu_trace_text(const GpuTraceReport& report);
// report.json: {"kind": "gpu_trace", "ranks": [{rank, window_s, busy_s, idle_s, compute_s,
// communication_s, exposed_communication_s, memory_s, bubble_ratio, causes, steps: [{step, ...}]}],
// "pipeline": {...}, "warnings": [...]} (docs/gpu_trace.md lists the keys).
std::string gpu_trace_report_json(const GpuTraceReport& report);
// The self-contained page (inline SVG and CSS, no script).
std::string gpu_trace_report_html(const GpuTraceReport& report);
// Chrome trace of the GPU events: pid = rank, tid = device/stream.
std::string gpu_trace_chrome_json(const GpuTraceReport& report);
// Writes report.html, report.json and report-trace.json into out_dir (report.h's names); refuses
// first when one of them is one of the input traces.
Status write_gpu_trace_report(const GpuTraceReport& report, const std::string& out_dir);

}  // namespace tightpipe
