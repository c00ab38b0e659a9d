// The pipeline analysis of GPU traces (gpu_pipeline.cc) against its oracle, our simulator: a
// known schedule simulated with known costs, each rank's simulated timeline written as a Kineto
// trace (ProfilerStep#N ranges, cudaLaunchKernel launches with correlation ids, compute kernels,
// "PP:<action>" or forward/backward ranges, NCCL SendRecv kernels for the messages; a few steps
// one after another), read back by build_gpu_trace_report: the fitted costs must be the known
// ones, the simulated step the measured one, and the what-ifs what simulate() says directly.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "report/gpu_internal.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

constexpr double kMs = 1e-3;

// Known per-stage costs in seconds (b = i + w) and the message latency.
struct Known {
  std::vector<double> f, i, w;
  double latency = 0.05 * kMs;
  double b(int32_t s) const { return i[s] + w[s]; }
};

CostModel model_of(const Known& k) {
  std::vector<StageCost> stages(k.f.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].f = k.f[s];
    stages[s].i = k.i[s];
    stages[s].w = k.w[s];
    stages[s].b = k.i[s] + k.w[s];
    stages[s].recompute = k.f[s];
  }
  return CostModel(stages, LinkCost{k.latency, 0, 0}, "s", "known");
}

// B = 2F (I = W = F): what the kernels-only fit assumes.
Known b_twice_f(std::vector<double> f) {
  Known k;
  k.f = f;
  k.i = f;
  k.w = f;
  return k;
}

Schedule lowered_schedule(const std::string& name, int32_t p, int32_t m, int32_t v) {
  GeneratorOptions go;
  go.ranks = p;
  go.microbatches = m;
  go.chunks = v;
  auto s = generate_schedule(name, go);
  EXPECT_TRUE(s.ok()) << s.status().message();
  auto l = lower(*s);
  EXPECT_TRUE(l.ok()) << l.status().message();
  return *l;
}

SimResult simulated(const Schedule& lowered, const CostModel& costs, bool timeline = true) {
  SimOptions so;
  so.record_timeline = timeline;
  auto r = simulate(lowered, costs, so);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return *r;
}

// What the ranges say: PP:<action> per action (with a DistributedDataParallel.forward inside each
// F, as a module wrapped in DDP records); forward_step / backward_step per action; those
// nested as real programs nest them ("## forward ##" around "DistributedDataParallel.forward",
// and a "forward_backward_func" around the whole step); nothing.
enum class Annotate { kPipelining, kStepFunctions, kNestedStepFunctions, kNone };

// One rank's Kineto trace, written by hand. Times are integer nanoseconds, written as Kineto's
// microseconds with three decimals.
class KinetoWriter {
 public:
  void annotation(const std::string& name, int64_t start, int64_t end) {
    add(fmt::format(R"("ph": "X", "cat": "user_annotation", "name": "{}", "pid": 1, "tid": 1, )"
                    R"("ts": {}, "dur": {})",
                    name, us(start), us(end - start)));
  }
  // A kernel and its cudaLaunchKernel at the kernel's start.
  void kernel(const std::string& name, int64_t start, int64_t end, int32_t stream) {
    const int64_t c = next_correlation_++;
    add(fmt::format(R"("ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, )"
                    R"("tid": 1, "ts": {}, "dur": 0.001, "args": {{"correlation": {}}})",
                    us(start), c));
    add(fmt::format(R"("ph": "X", "cat": "kernel", "name": "{}", "pid": 0, "tid": {}, "ts": {}, )"
                    R"("dur": {}, "args": {{"correlation": {}, "device": 0, "stream": {}}})",
                    name, stream, us(start), us(end - start), c, stream));
  }
  std::string json(int32_t rank, int32_t world) const {
    return fmt::format(
        "{{\"schemaVersion\": 1, \"distributedInfo\": {{\"backend\": \"nccl\", \"rank\": {}, "
        "\"world_size\": {}}}, \"traceEvents\": [\n{}\n]}}\n",
        rank, world, join(events_, ",\n"));
  }

 private:
  static std::string us(int64_t ns) {
    return fmt::format("{}{}.{:03}", ns < 0 ? "-" : "", std::abs(ns) / 1000, std::abs(ns) % 1000);
  }
  void add(const std::string& body) { events_.push_back("{" + body + "}"); }
  std::vector<std::string> events_;
  int64_t next_correlation_ = 1;
};

constexpr int64_t kBaseNs = 5'000'000'000'000;  // the profiler clock's origin (any)
constexpr int64_t kStepGapNs = 1'000'000;       // between steps
constexpr int32_t kFirstStep = 10;

int64_t ns_of(double s) { return std::llround(s * 1e9); }

// The measured step of write_traces' traces: a step's window runs from its first GPU event to the
// next step's, so it holds the simulated step and the gap after it.
double measured_step(const SimResult& sim) {
  return static_cast<double>(ns_of(sim.makespan) + kStepGapNs) * 1e-9;
}

// Writes one Kineto trace per rank of `lowered` as `sim` ran it, `steps` steps one after another;
// returns the paths. Each compute action is two kernels back to back on stream 7. A message is a
// SendRecv kernel on each side, as NCCL runs them: each starts when its side posts it (the SEND
// when its producer ends, the RECV at the end of the rank's previous compute action) and both end
// a message time after the later of the two posts, so the shorter of the two is the transfer and
// the longer one includes waiting for the peer.
std::vector<std::string> write_traces(const std::string& dir, const Schedule& lowered,
                                      const SimResult& sim, double latency, Annotate annotate,
                                      int32_t steps = 3) {
  const int32_t P = lowered.num_ranks;
  const int64_t span = ns_of(sim.makespan) + kStepGapNs;
  // Every action's simulated event, and when each SEND and RECV was posted, in ns from 0.
  std::map<std::string, const TimelineEvent*> event;
  std::map<std::string, int64_t> posted;
  for (int32_t r = 0; r < P; ++r) {
    for (const TimelineEvent& e : sim.timeline.ranks[r].events) event[e.name] = &e;
    int64_t last_compute_end = 0;
    for (const Action& a : lowered.programs[r]) {
      const TimelineEvent* e = event.at(to_string(a));
      if (is_compute(a.type)) last_compute_end = ns_of(e->end);
      if (a.type == ActionType::kSendAct || a.type == ActionType::kSendGrad)
        posted[to_string(a)] = ns_of(e->start);
      if (a.type == ActionType::kRecvAct || a.type == ActionType::kRecvGrad)
        posted[to_string(a)] = last_compute_end;
    }
  }
  // Both kernels of a message end a message time after the later post.
  auto message_end = [&](const Action& a) {
    const bool send = a.type == ActionType::kSendAct || a.type == ActionType::kSendGrad;
    const MessageRoute m = *message_route(lowered, a, send ? MessageEnd::kOut : MessageEnd::kIn);
    return std::max(posted.at(to_string(m.send())), posted.at(to_string(m.recv()))) +
           ns_of(latency);
  };
  std::vector<std::string> paths;
  for (int32_t r = 0; r < P; ++r) {
    KinetoWriter w;
    for (int32_t k = 0; k < steps; ++k) {
      const int64_t origin = kBaseNs + k * span;
      w.annotation(fmt::format("ProfilerStep#{}", kFirstStep + k), origin,
                   origin + ns_of(sim.makespan) + kStepGapNs / 2);
      if (annotate == Annotate::kNestedStepFunctions) {
        w.annotation("forward_backward_func", origin, origin + ns_of(sim.makespan));
      }
      std::vector<int64_t> stream_end;  // comm streams 20, 21...: a free one for each kernel
      auto comm_kernel = [&](int64_t a, int64_t b) {
        size_t s = 0;
        while (s < stream_end.size() && stream_end[s] > a) ++s;
        if (s == stream_end.size()) stream_end.push_back(0);
        stream_end[s] = b;
        w.kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", a, b,
                 20 + static_cast<int32_t>(s));
      };
      for (const Action& a : lowered.programs[r]) {
        const std::string name = to_string(a);
        if (is_comm(a.type)) {
          comm_kernel(origin + posted.at(name), origin + message_end(a));
          continue;
        }
        const TimelineEvent* e = event.at(name);
        const int64_t start = origin + ns_of(e->start), end = origin + ns_of(e->end);
        if (annotate == Annotate::kPipelining) {
          w.annotation("PP:" + name, start, end);
          // A module's own range inside the action, holding its second kernel.
          if (a.type == ActionType::kForward) {
            w.annotation("DistributedDataParallel.forward", start + (end - start) / 2, end);
          }
        }
        if (annotate == Annotate::kStepFunctions) {
          w.annotation(a.type == ActionType::kForward ? "forward_step" : "backward_step", start,
                       end);
        }
        if (annotate == Annotate::kNestedStepFunctions && a.type == ActionType::kForward) {
          w.annotation("## forward ##", start, end);
          w.annotation("DistributedDataParallel.forward", start + (end - start) / 5, end);
        }
        if (annotate == Annotate::kNestedStepFunctions && a.type != ActionType::kForward) {
          w.annotation("## backward ##", start, end);
        }
        const int64_t mid = start + (end - start) * 3 / 5;
        w.kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn", start, mid, 7);
        w.kernel("void at::native::vectorized_elementwise_kernel<4>", mid, end, 7);
      }
    }
    paths.push_back(fmt::format("{}/rank{}.json", dir, r));
    EXPECT_TRUE(write_file(paths.back(), w.json(r, P)).ok());
  }
  return paths;
}

void expect_rel(double got, double want, double rel, const std::string& what) {
  EXPECT_NEAR(got, want, rel * std::abs(want)) << what;
}

// The fitted F and B of every stage are the known ones (to `rel`).
void expect_fitted(const GpuFittedCosts& c, const Known& known, double rel = 1e-6) {
  ASSERT_EQ(c.f_s.size(), known.f.size());
  ASSERT_EQ(c.b_s.size(), known.f.size());
  for (size_t s = 0; s < known.f.size(); ++s) {
    const int32_t st = static_cast<int32_t>(s);
    expect_rel(c.f_s[s], known.f[s], rel, fmt::format("F of stage {} ({})", s, c.method));
    expect_rel(c.b_s[s], known.b(st), rel, fmt::format("B of stage {} ({})", s, c.method));
  }
}

GpuPipelineSpec spec_of(int32_t pp, const std::string& schedule, int32_t m, int32_t vpp = 0) {
  GpuPipelineSpec s;
  s.pp = pp;
  s.schedule = schedule;
  s.microbatches = m;
  s.vpp = vpp;
  return s;
}

GpuTraceReport report_of(const std::vector<std::string>& paths, const GpuPipelineSpec& spec) {
  auto rep = build_gpu_trace_report(paths, spec);
  EXPECT_TRUE(rep.ok()) << rep.status().message();
  EXPECT_TRUE(rep->pipeline.has_value());
  EXPECT_EQ(rep->pipeline->error, "");
  return std::move(*rep);
}

// 1F1B, p = 4, m = 8, uneven stages with B = 2F.
struct OneFOneB : ::testing::Test {
  Known known = b_twice_f({1.0 * kMs, 1.2 * kMs, 0.9 * kMs, 1.1 * kMs});
  Schedule lowered = lowered_schedule("1f1b", 4, 8, 1);
  SimResult sim = simulated(lowered, model_of(known));
  std::string dir = testutil::make_temp_dir("tp-gpupipe");
};

TEST_F(OneFOneB, AnnotationsGiveTheKnownCostsAndTheMeasuredStep) {
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining);
  // TP_WRITE_GPU_EXAMPLE=DIR keeps a copy: the README's pipelined example (tests/data/gpu_traces/
  // pp4_1f1b, gzip'd) was written this way.
  if (const char* keep = std::getenv("TP_WRITE_GPU_EXAMPLE")) {
    for (const auto& p : paths) {
      std::filesystem::copy_file(p,
                                 std::filesystem::path(keep) / std::filesystem::path(p).filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  GpuPipelineSpec spec = spec_of(4, "1f1b", 8);
  spec.what_if = {"1f1b", "zb-h1", "interleaved:2"};
  const GpuTraceReport rep = report_of(paths, spec);
  const GpuPipelineReport& p = *rep.pipeline;
  EXPECT_EQ(p.costs.method, "annotations");
  expect_fitted(p.costs, known);
  EXPECT_TRUE(p.costs.w_s.empty());  // fused backward
  expect_rel(p.costs.message_s, known.latency, 1e-6, "message time");

  // The schedule that ran, simulated with the fitted costs, is the measured pipeline; the
  // measured step (a step's window: its first GPU event to the next step's) also holds the
  // trace's time between steps, which the simulation does not model.
  expect_rel(p.measured_step_s, measured_step(sim), 1e-6, "measured step");
  expect_rel(p.predicted_step_s, sim.makespan, 0.02, "predicted vs the pipeline");
  expect_rel(p.predicted_bubble_ratio, sim.bubble_ratio, 1e-6, "bubble");
  // The measured pipeline bubble (compute only) is the simulated timeline's compute over the
  // longer window.
  expect_rel(p.measured_bubble_ratio,
             1 - (1 - sim.bubble_ratio) * sim.makespan / measured_step(sim), 1e-6,
             "measured bubble");

  // What-ifs: the schedule itself saves nothing; the others are simulate() called directly with
  // the same costs (a fused B splits into I = W = B / 2, here the known I and W; interleaved
  // spreads each rank's cost evenly over its two chunks).
  ASSERT_EQ(p.what_ifs.size(), 3u);
  EXPECT_EQ(p.what_ifs[0].label, "1f1b");
  EXPECT_EQ(p.what_ifs[0].error, "");
  EXPECT_NEAR(p.what_ifs[0].saving_s, 0, 1e-9);

  const SimResult zb = simulated(lowered_schedule("zb-h1", 4, 8, 1), model_of(known), false);
  EXPECT_EQ(p.what_ifs[1].label, "zb-h1");
  EXPECT_EQ(p.what_ifs[1].error, "");
  expect_rel(p.what_ifs[1].step_s, zb.makespan, 1e-6, "zb-h1");
  expect_rel(p.what_ifs[1].bubble_ratio, zb.bubble_ratio, 1e-6, "zb-h1 bubble");
  expect_rel(p.what_ifs[1].saving_s, sim.makespan - zb.makespan, 1e-4, "zb-h1 saving");
  EXPECT_GT(p.what_ifs[1].saving_s, 0);

  const Schedule inter = lowered_schedule("interleaved", 4, 8, 2);
  Known halves;
  for (int32_t s = 0; s < inter.num_stages; ++s) {
    const double f = known.f[inter.rank_of(s)] / 2;
    halves.f.push_back(f);
    halves.i.push_back(f);
    halves.w.push_back(f);
  }
  const SimResult il = simulated(inter, model_of(halves), false);
  EXPECT_EQ(p.what_ifs[2].label, "interleaved:2");
  EXPECT_EQ(p.what_ifs[2].error, "");
  expect_rel(p.what_ifs[2].step_s, il.makespan, 1e-6, "interleaved:2");

  // Each what-if beside its shape's lower bound at its memory, as our own runs' what-if: present,
  // never above the simulated step (nor the span), and lower_bound_for() called directly.
  for (const GpuWhatIf& w : p.what_ifs) {
    EXPECT_GT(w.lower_bound_s, 0) << w.label;
    EXPECT_LE(w.lower_bound_s, w.step_s * (1 + 1e-9)) << w.label;
    EXPECT_GT(w.max_span_s, 0) << w.label;
    EXPECT_LE(w.lower_bound_span_s, w.max_span_s * (1 + 1e-9)) << w.label;
    EXPECT_GE(w.lower_bound_memory, 1) << w.label;
  }
  const Schedule h1 = lowered_schedule("zb-h1", 4, 8, 1);
  SimOptions so;
  so.record_timeline = false;
  auto lb = lower_bound_for(h1, model_of(known), so);
  ASSERT_TRUE(lb.ok()) << lb.status().message();
  expect_rel(p.what_ifs[1].lower_bound_s, lb->makespan, 1e-6, "zb-h1 bound");
  expect_rel(p.what_ifs[1].lower_bound_span_s, lb->span, 1e-6, "zb-h1 span bound");
  EXPECT_DOUBLE_EQ(p.what_ifs[1].lower_bound_memory, lb->memory_limit);
  // The text prints it after each what-if's step as `simulate` does (format_lower_bound).
  const std::string text = format_gpu_trace_text(rep);
  for (const GpuWhatIf& w : p.what_ifs) {
    const std::regex line("what-if " + w.label +
                          R"(: step [0-9.]+ ms \(lower bound [0-9.]+ ms: within [0-9.]+%\), )");
    EXPECT_TRUE(std::regex_search(text, line)) << w.label << "\n" << text;
  }
}

TEST_F(OneFOneB, KernelsAloneGiveTheKnownCostsWhenBIsTwiceF) {
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kNone);
  const GpuTraceReport rep = report_of(paths, spec_of(4, "1f1b", 8));
  const GpuPipelineReport& p = *rep.pipeline;
  EXPECT_EQ(p.costs.method, "kernels");
  expect_fitted(p.costs, known);
  const std::string notes = join(p.costs.notes, "\n");
  EXPECT_NE(notes.find("B = 2F"), std::string::npos) << notes;
  EXPECT_NE(notes.find("10th percentile"), std::string::npos) << notes;
  expect_rel(p.predicted_step_s, sim.makespan, 0.02, "predicted vs the pipeline");
}

TEST_F(OneFOneB, StepFunctionRangesGiveFAndBOfTheRanksStage) {
  for (Annotate a : {Annotate::kStepFunctions, Annotate::kNestedStepFunctions}) {
    const auto paths = write_traces(dir, lowered, sim, known.latency, a, 2);
    const GpuTraceReport rep = report_of(paths, spec_of(4, "1f1b", 8));
    const GpuPipelineReport& p = *rep.pipeline;
    EXPECT_EQ(p.costs.method, "annotations");
    // Nested: the inner forward range holds only part of F's kernels, and the range around the
    // whole step (forward and backward inside) is no action.
    expect_fitted(p.costs, known);
  }
}

TEST_F(OneFOneB, CausesOfTheLastRank) {
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining);
  const GpuTraceReport rep = report_of(paths, spec_of(4, "1f1b", 8));
  ASSERT_EQ(rep.ranks.size(), 4u);
  // Rank p - 1 waits for the first microbatch to pass the stages before it: its fill is their F
  // and p - 1 messages.
  const double fill = known.f[0] + known.f[1] + known.f[2] + 3 * known.latency;
  for (const GpuRankReport& r : rep.ranks) {
    ASSERT_EQ(r.steps.size(), 3u);
    for (const GpuStepReport& s : r.steps) {
      double sum = 0;
      for (double c : s.causes) sum += c;
      EXPECT_NEAR(sum, s.usage.window_s - s.usage.compute_s, 1e-9)
          << "rank " << r.rank << " step " << s.step;
      if (r.rank == 3) {
        EXPECT_NEAR(s.causes[static_cast<int>(GpuCause::kFill)], fill, 1e-8) << s.step;
      }
    }
  }
}

TEST_F(OneFOneB, ScheduleFileIsTheSameSchedule) {
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining, 2);
  const std::string csv = dir + "/schedule.csv";
  ASSERT_TRUE(write_file(csv, to_csv(compute_only(lowered))).ok());
  GpuPipelineSpec spec;
  spec.pp = 4;
  spec.schedule_file = csv;
  const GpuTraceReport rep = report_of(paths, spec);
  expect_rel(rep.pipeline->predicted_step_s, sim.makespan, 1e-6, "predicted");
}

TEST_F(OneFOneB, TraceCountMustBePp) {
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining, 1);
  auto rep = build_gpu_trace_report({paths[0], paths[1]}, spec_of(3, "1f1b", 8));
  ASSERT_TRUE(rep.ok()) << rep.status().message();
  ASSERT_TRUE(rep->pipeline.has_value());
  const std::string& e = rep->pipeline->error;
  for (const char* part : {"--pp 3", "2 trace file(s)", "hint:", "one trace per pipeline rank"})
    EXPECT_NE(e.find(part), std::string::npos) << part << "\n" << e;
}

// Interleaved, v = 2: a cost per chunk, B not 2F; PP:<action> ranges name the chunk.
TEST(GpuPipelineTest, InterleavedAnnotationsGiveEachChunksCosts) {
  Known known;
  for (int32_t s = 0; s < 8; ++s) {
    known.f.push_back((0.5 + 0.05 * s) * kMs);
    known.i.push_back((0.6 + 0.04 * s) * kMs);
    known.w.push_back((0.45 + 0.03 * s) * kMs);
  }
  const Schedule lowered = lowered_schedule("interleaved", 4, 8, 2);
  const SimResult sim = simulated(lowered, model_of(known));
  const std::string dir = testutil::make_temp_dir("tp-gpupipe");
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining);
  GpuPipelineSpec spec = spec_of(4, "interleaved", 8, 2);
  spec.what_if = {"interleaved:2", "zb-v", "zb-v-auto"};
  const GpuTraceReport rep = report_of(paths, spec);
  const GpuPipelineReport& p = *rep.pipeline;
  EXPECT_EQ(p.costs.method, "annotations");
  expect_fitted(p.costs, known);
  expect_rel(p.predicted_step_s, sim.makespan, 0.02, "predicted vs the pipeline");
  expect_rel(p.measured_step_s, measured_step(sim), 1e-6, "measured");
  ASSERT_EQ(p.what_ifs.size(), 3u);
  EXPECT_NEAR(p.what_ifs[0].saving_s, 0, 1e-9);
  // zb-v: V placement, another stage-to-rank map: each rank's per-microbatch cost (the sum of
  // its two chunks) spread evenly over its two new chunks, a fused B split in halves.
  const Schedule zbv = lowered_schedule("zb-v", 4, 8, 2);
  Known even;
  for (int32_t s = 0; s < zbv.num_stages; ++s) {
    double f = 0, b = 0;
    for (int32_t q : lowered.stages_of(zbv.rank_of(s))) {
      f += known.f[q];
      b += known.b(q);
    }
    even.f.push_back(f / 2);
    even.i.push_back(b / 4);
    even.w.push_back(b / 4);
  }
  const SimResult direct = simulated(zbv, model_of(even), false);
  EXPECT_EQ(p.what_ifs[1].error, "");
  expect_rel(p.what_ifs[1].step_s, direct.makespan, 1e-6, "zb-v");
  // zb-v-auto is built from the same costs, zb-v among its candidates: never slower.
  EXPECT_EQ(p.what_ifs[2].label, "zb-v-auto");
  EXPECT_EQ(p.what_ifs[2].error, "");
  EXPECT_GT(p.what_ifs[2].step_s, 0);
  EXPECT_LE(p.what_ifs[2].step_s, p.what_ifs[1].step_s * (1 + 1e-9));
}

TEST(GpuPipelineTest, StepFunctionRangesCannotTellChunksApart) {
  Known known = b_twice_f(std::vector<double>(8, 0.5 * kMs));
  const Schedule lowered = lowered_schedule("interleaved", 4, 8, 2);
  const SimResult sim = simulated(lowered, model_of(known));
  const std::string dir = testutil::make_temp_dir("tp-gpupipe");
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kStepFunctions, 2);
  const GpuTraceReport rep = report_of(paths, spec_of(4, "interleaved", 8, 2));
  const GpuPipelineReport& p = *rep.pipeline;
  EXPECT_EQ(p.costs.method, "kernels");
  const std::string notes = join(p.costs.notes, "\n");
  EXPECT_NE(notes.find("cannot tell the 2 chunks"), std::string::npos) << notes;
  // Equal chunks with B = 2F: the kernels fit is exact.
  expect_fitted(p.costs, known);
}

// ZB-H1 ran: I and W are their own actions, so both are fitted.
TEST(GpuPipelineTest, SplitBackwardFitsIAndW) {
  Known known;
  known.f = {1.0 * kMs, 1.1 * kMs, 0.9 * kMs, 1.0 * kMs};
  known.i = {1.1 * kMs, 1.0 * kMs, 1.2 * kMs, 0.9 * kMs};
  known.w = {0.7 * kMs, 0.8 * kMs, 0.6 * kMs, 0.9 * kMs};
  const Schedule lowered = lowered_schedule("zb-h1", 4, 8, 1);
  const SimResult sim = simulated(lowered, model_of(known));
  const std::string dir = testutil::make_temp_dir("tp-gpupipe");
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining, 2);
  const GpuTraceReport rep = report_of(paths, spec_of(4, "zb-h1", 8));
  const GpuPipelineReport& p = *rep.pipeline;
  expect_fitted(p.costs, known);
  ASSERT_EQ(p.costs.w_s.size(), 4u);
  for (int32_t s = 0; s < 4; ++s) expect_rel(p.costs.w_s[s], known.w[s], 1e-6, "W");
  expect_rel(p.predicted_step_s, sim.makespan, 1e-6, "predicted");
}

// ----- bad specs -------------------------------------------------------------------------------

void expect_error(const GpuPipelineSpec& spec, std::vector<std::string> parts) {
  const Status st = spec.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  parts.push_back("hint:");
  for (const std::string& part : parts)
    EXPECT_NE(st.message().find(part), std::string::npos) << part << "\n" << st.message();
}

TEST(GpuPipelineSpecTest, Valid) {
  EXPECT_TRUE(GpuPipelineSpec().validate().ok());
  EXPECT_TRUE(spec_of(4, "1f1b", 8).validate().ok());
  EXPECT_TRUE(spec_of(4, "interleaved", 8, 2).validate().ok());
  GpuPipelineSpec s = spec_of(4, "1F1B", 8);
  s.what_if = {"zb-h1", " interleaved:2", "zb-v-auto"};
  EXPECT_TRUE(s.validate().ok());
}

TEST(GpuPipelineSpecTest, BadSpecs) {
  GpuPipelineSpec s;
  s.schedule = "1f1b";
  expect_error(s, {"--schedule", "--pp"});
  s = {};
  s.what_if = {"zb-h1"};
  expect_error(s, {"--what-if", "--pp"});
  expect_error(spec_of(-2, "1f1b", 8), {"--pp -2", ">= 1"});
  expect_error(spec_of(4, "nope\nx", 8), {"--schedule 'nope\\x0ax'", "1f1b", "--schedule-file"});
  expect_error(spec_of(4, "zb-auto", 8), {"--schedule 'zb-auto'", "--schedule-file"});
  expect_error(spec_of(4, "1f1b", 0), {"--num-microbatches 0", ">= 1"});
  expect_error(spec_of(4, "", 8), {"--pp 4", "--schedule"});
  expect_error(spec_of(4, "1f1b", 8, 2), {"--vpp 2", "1f1b", "1 chunk"});
  expect_error(spec_of(4, "1f1b", 8, -1), {"--vpp -1"});
  s = spec_of(4, "1f1b", 8);
  s.schedule_file = "x.csv";
  expect_error(s, {"--schedule '1f1b'", "--schedule-file 'x.csv'", "one of them"});
  s = spec_of(4, "1f1b", 8);
  s.what_if = {"zb-h1", "bogus"};
  expect_error(s, {"--what-if", "bogus"});
  s.what_if = {"zb-h1@auto"};
  expect_error(s, {"--what-if 'zb-h1@auto'", "@auto"});
}

TEST(GpuPipelineSpecTest, BadScheduleFile) {
  const std::string dir = testutil::make_temp_dir("tp-gpupipe");
  GpuPipelineSpec s;
  s.pp = 4;
  s.schedule_file = dir + "/bad.csv";
  ASSERT_TRUE(write_file(s.schedule_file, "0F0,0B0\nthis is not an action\n").ok());
  const Status st = s.validate();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--schedule-file"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(s.schedule_file), std::string::npos) << st.message();

  // A file that is not there.
  GpuPipelineSpec missing = s;
  missing.schedule_file = dir + "/nope.csv";
  const Status gone = missing.validate();
  ASSERT_FALSE(gone.ok());
  for (const std::string& part :
       {std::string("--schedule-file"), missing.schedule_file, std::string("hint:")})
    EXPECT_NE(gone.message().find(part), std::string::npos) << part << "\n" << gone.message();

  // A file of 2 ranks for --pp 4.
  GeneratorOptions go;
  go.ranks = 2;
  go.microbatches = 4;
  ASSERT_TRUE(write_file(s.schedule_file, to_csv(*generate_schedule("1f1b", go))).ok());
  expect_error(s, {"--schedule-file '" + s.schedule_file + "'", "2 rank(s)", "--pp is 4"});
  s.pp = 2;
  EXPECT_TRUE(s.validate().ok());
  s.microbatches = 8;
  expect_error(s, {"--num-microbatches 8", "4 microbatch"});
}

// ----- the ranks of a pipeline -------------------------------------------------------------------

// One trace per rank of a world of `world`: a kernel and its launch, distributedInfo.
std::vector<std::string> rank_traces(const std::string& dir, const std::vector<int>& ranks,
                                     int world) {
  std::vector<std::string> paths;
  for (int r : ranks) {
    const std::string p = fmt::format("{}/world{}_rank{}.json", dir, world, r);
    EXPECT_TRUE(
        write_file(p,
                   fmt::format(R"({{"distributedInfo": {{"backend": "nccl", "rank": {}, )"
                               R"("world_size": {}}}, "traceEvents": [)"
                               R"({{"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5, )"
                               R"("args": {{"device": 0, "stream": 7}}}}]}})",
                               r, world))
            .ok());
    paths.push_back(p);
  }
  return paths;
}

TEST(GpuPipelineRanksTest, ThePpTracesMustBeOnePipelineOfTheWorld) {
  const std::string dir = testutil::make_temp_dir("tp-gpu-pp-ranks");
  auto refused = [&](const std::vector<int>& ranks, int world, int32_t pp,
                     const std::vector<std::string>& parts) {
    auto rep = build_gpu_trace_report(rank_traces(dir, ranks, world), spec_of(pp, "1f1b", 8));
    ASSERT_FALSE(rep.ok()) << "ranks of world " << world << " with --pp " << pp;
    const std::string m(rep.status().message());
    for (const auto& part : parts) EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  };
  refused(
      {0, 1, 3}, 4, 3,
      {"--pp 3", "ranks 0, 1, 3 of a world of 4", "not one pipeline", "does not split", "hint:"});
  refused({1, 2}, 4, 2, {"--pp 2", "ranks 1, 2 of a world of 4", "e.g. 1, 3", "e.g. 0, 1"});
  refused({0, 3}, 4, 2, {"ranks 0, 3 of a world of 4"});
  refused({0, 2, 6}, 8, 3, {"ranks 0, 2, 6"});
  // Megatron's layout (ranks world / pp apart) and pp contiguous ranks from a multiple of pp.
  for (const auto& [ranks, world] : std::vector<std::pair<std::vector<int>, int>>{
           {{1, 3}, 4}, {{0, 2}, 4}, {{2, 3}, 4}, {{0, 1, 2, 3}, 4}, {{3, 7}, 8}}) {
    auto rep = build_gpu_trace_report(rank_traces(dir, ranks, world),
                                      spec_of(static_cast<int32_t>(ranks.size()), "1f1b", 8));
    EXPECT_TRUE(rep.ok()) << rep.status().message();
  }
}

// ----- the command ------------------------------------------------------------------------------

TEST_F(OneFOneB, Cli) {
  const std::string tp = testutil::tightpipe_binary();
  if (!std::filesystem::exists(tp)) GTEST_SKIP() << "tightpipe not built";
  const auto paths = write_traces(dir, lowered, sim, known.latency, Annotate::kPipelining, 2);
  const std::string out = dir + "/out";
  auto r = testutil::run_command(fmt::format(
      "{} report {} --pp 4 --schedule 1f1b --num-microbatches 8 --what-if zb-h1 --out {}", tp,
      join(paths, " "), out));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("what-if zb-h1"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(what-if zb-h1: step [^\n]*\(lower bound [0-9.]+ ms: within [0-9.]+%\))")))
      << r.out;
  auto text = read_file(out + "/report.json");
  ASSERT_TRUE(text.ok());
  const auto j = nlohmann::json::parse(*text);
  ASSERT_TRUE(j.contains("pipeline"));
  const auto& p = j["pipeline"];
  EXPECT_EQ(p["error"], "");
  EXPECT_EQ(p["costs_method"], "annotations");
  ASSERT_EQ(p["f_s"].size(), 4u);
  for (const char* key : {"b_s", "w_s", "message_s", "notes", "measured_step_s", "predicted_step_s",
                          "predicted_bubble_ratio", "what_if"}) {
    EXPECT_TRUE(p.contains(key)) << key;
  }
  EXPECT_NEAR(p["f_s"][1].get<double>(), known.f[1], 1e-6 * known.f[1]);
  EXPECT_NEAR(p["predicted_step_s"].get<double>(), sim.makespan, 1e-6 * sim.makespan);
  ASSERT_EQ(p["what_if"].size(), 1u);
  EXPECT_EQ(p["what_if"][0]["label"], "zb-h1");
  EXPECT_GT(p["what_if"][0]["saving_s"].get<double>(), 0);
  // The what-if's lower bound under the keys of `simulate --format json` and the run report.
  const auto& w = p["what_if"][0];
  for (const char* key : {"lower_bound_makespan", "lower_bound_span", "lower_bound_memory_limit",
                          "gap_to_lower_bound", "gap_to_lower_bound_span"}) {
    ASSERT_TRUE(w.contains(key)) << key;
  }
  EXPECT_GT(w["lower_bound_makespan"].get<double>(), 0);
  EXPECT_LE(w["lower_bound_makespan"].get<double>(), w["step_s"].get<double>() * (1 + 1e-9));
  EXPECT_GE(w["gap_to_lower_bound"].get<double>(), -1e-9);
  EXPECT_GE(w["lower_bound_memory_limit"].get<double>(), 1);

  // A bad spec is one line naming the flag.
  r = testutil::run_command(
      fmt::format("{} report {} --pp 4 --schedule 1f1b --out {}", tp, join(paths, " "), out));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--num-microbatches 0"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tightpipe
