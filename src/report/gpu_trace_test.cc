// GPU trace import against an independent oracle: on every real trace in ../shared/data/traces the
// whole-trace and per-step numbers equal a separate computation (the whole document parsed by
// nlohmann's DOM, steps from the launches' correlation ids, unions by a coverage sweep over
// elementary segments) to the microsecond. Then bad input: each case one clear error or a warning.
#include "tightpipe/gpu_trace.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "report/gpu_internal.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

const std::string kTraces = std::string(TP_SHARED_DIR) + "/data/traces/";

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, n);
  gzclose(f);
  return out;
}

// ----- the oracle --------------------------------------------------------------------------------

struct OEvent {
  double start = 0, end = 0;  // microseconds
  std::string name, cat;
  int step = -1;
};

enum OClass { kAll, kCompute, kComm, kMemory };

bool in_class(const OEvent& e, OClass c) {
  std::string lower = e.name;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool nccl = e.cat == "kernel" && lower.find("nccl") != std::string::npos;
  switch (c) {
    case kAll:
      return true;
    case kCompute:
      return e.cat == "kernel" && !nccl;
    case kComm:
      return nccl;
    case kMemory:
      return e.cat != "kernel";
  }
  return false;
}

// Covered length by a sweep over the elementary segments between all boundaries: a segment
// counts when some selected event covers it (a coverage count, not a merge).
double covered(const std::vector<OEvent>& ev, OClass c, OClass minus = kAll,
               bool use_minus = false) {
  std::set<double> cuts;
  for (const auto& e : ev) {
    cuts.insert(e.start);
    cuts.insert(e.end);
  }
  std::vector<double> x(cuts.begin(), cuts.end());
  if (x.size() < 2) return 0;
  std::vector<int> cover(x.size(), 0), cover_minus(x.size(), 0);
  auto idx = [&](double t) { return std::lower_bound(x.begin(), x.end(), t) - x.begin(); };
  for (const auto& e : ev) {
    if (in_class(e, c)) {
      cover[idx(e.start)] += 1;
      cover[idx(e.end)] -= 1;
    }
    if (use_minus && in_class(e, minus)) {
      cover_minus[idx(e.start)] += 1;
      cover_minus[idx(e.end)] -= 1;
    }
  }
  double total = 0;
  int a = 0, b = 0;
  for (size_t i = 0; i + 1 < x.size(); ++i) {
    a += cover[i];
    b += cover_minus[i];
    if (a > 0 && !(use_minus && b > 0)) total += x[i + 1] - x[i];
  }
  return total;
}

struct OUsage {
  double window = 0, busy = 0, compute = 0, comm = 0, exposed = 0, memory = 0;
};

// Usage over the window [lo, hi]: every event that overlaps it, clipped to it.
OUsage oracle_usage(const std::vector<OEvent>& all, double lo, double hi) {
  std::vector<OEvent> ev;
  for (OEvent e : all) {
    e.start = std::max(e.start, lo);
    e.end = std::min(e.end, hi);
    if (e.end > e.start) ev.push_back(e);
  }
  OUsage u;
  u.window = hi - lo;
  u.busy = covered(ev, kAll);
  u.compute = covered(ev, kCompute);
  u.comm = covered(ev, kComm);
  u.exposed = covered(ev, kComm, kCompute, true);
  u.memory = covered(ev, kMemory);
  return u;
}

struct OWindow {
  int step = 0;
  double lo = 0, hi = 0;
  int64_t events = 0;  // that start in [lo, hi), and at hi for the last
};

struct OTrace {
  std::vector<OEvent> events;
  double lo = 0, hi = 0;
  std::vector<OWindow> steps;  // by step number
};

OTrace oracle_read(const std::string& path) {
  const nlohmann::json doc = nlohmann::json::parse(gunzip(path));
  std::map<int64_t, double> launch;  // correlation -> launch ts
  std::vector<std::pair<int, std::pair<double, double>>> marks;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    const std::string name = e.value("name", "");
    if ((cat == "cuda_runtime" || cat == "cuda_driver") && e.contains("args") &&
        e["args"].contains("correlation")) {
      launch[e["args"]["correlation"].get<int64_t>()] = e["ts"].get<double>();
    }
    if (cat == "user_annotation" && name.rfind("ProfilerStep#", 0) == 0) {
      marks.push_back({std::stoi(name.substr(13)),
                       {e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()}});
    }
  }
  OTrace t;
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string cat = e.value("cat", "");
    if (cat != "kernel" && cat != "gpu_memcpy" && cat != "gpu_memset") continue;
    OEvent o;
    o.cat = cat;
    o.name = e.value("name", "");
    o.start = e["ts"].get<double>();
    o.end = o.start + std::max(0.0, e["dur"].get<double>());
    const int64_t corr = e["args"].value("correlation", int64_t{-1});
    auto it = launch.find(corr);
    if (it != launch.end()) {
      for (const auto& [n, span] : marks) {
        if (it->second >= span.first && it->second <= span.second) o.step = n;
      }
    }
    t.events.push_back(o);
  }
  // A step's window: its first GPU event to the next step's first; the first from the trace's
  // first event, the last to its last end.
  std::map<int, double> first;
  t.lo = t.events.empty() ? 0 : t.events[0].start;
  t.hi = t.lo;
  for (const OEvent& o : t.events) {
    t.lo = std::min(t.lo, o.start);
    t.hi = std::max(t.hi, o.end);
    if (o.step < 0) continue;
    if (!first.count(o.step) || o.start < first[o.step]) first[o.step] = o.start;
  }
  for (const auto& [n, start] : first) t.steps.push_back({n, start, 0});
  std::sort(t.steps.begin(), t.steps.end(),
            [](const OWindow& a, const OWindow& b) { return a.lo < b.lo; });
  for (size_t k = 0; k < t.steps.size(); ++k) {
    if (k == 0) t.steps[k].lo = t.lo;
    const bool last = k + 1 == t.steps.size();
    t.steps[k].hi = last ? t.hi : t.steps[k + 1].lo;
    for (const OEvent& o : t.events) {
      t.steps[k].events += o.start >= t.steps[k].lo && (o.start < t.steps[k].hi || last);
    }
  }
  std::sort(t.steps.begin(), t.steps.end(),
            [](const OWindow& a, const OWindow& b) { return a.step < b.step; });
  return t;
}

void expect_equal(const GpuUsage& got, const OUsage& want, const std::string& what) {
  constexpr double kUs = 1e-6;  // seconds: "to the microsecond"
  EXPECT_NEAR(got.window_s, want.window * 1e-6, kUs) << what;
  EXPECT_NEAR(got.busy_s, want.busy * 1e-6, kUs) << what;
  EXPECT_NEAR(got.idle_s, (want.window - want.busy) * 1e-6, kUs) << what;
  EXPECT_NEAR(got.compute_s, want.compute * 1e-6, kUs) << what;
  EXPECT_NEAR(got.communication_s, want.comm * 1e-6, kUs) << what;
  EXPECT_NEAR(got.exposed_communication_s, want.exposed * 1e-6, kUs) << what;
  EXPECT_NEAR(got.memory_s, want.memory * 1e-6, kUs) << what;
  if (want.window > 0) {
    // The oracle's timestamps are doubles in microseconds (about 1 ns of rounding each).
    EXPECT_NEAR(got.bubble_ratio, (want.window - want.busy) / want.window, 1e-6) << what;
  }
}

// ----- step windows partition the trace: an exact naive check ------------------------------------

using NSpan = std::pair<int64_t, int64_t>;

// The merged spans of the events `keep` selects, clipped to [a, b]: a naive sort and merge.
template <typename Keep>
std::vector<NSpan> naive_union(const std::vector<GpuEvent>& ev, int64_t a, int64_t b, Keep keep) {
  std::vector<NSpan> in, out;
  for (const GpuEvent& e : ev) {
    const int64_t x = std::max(a, e.start_ns), y = std::min(b, e.end_ns);
    if (keep(e) && y > x) in.push_back({x, y});
  }
  std::sort(in.begin(), in.end());
  for (const NSpan& x : in) {
    if (!out.empty() && x.first <= out.back().second) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}
int64_t length(const std::vector<NSpan>& s) {
  int64_t t = 0;
  for (const NSpan& x : s) t += x.second - x.first;
  return t;
}
int64_t length_in(const std::vector<NSpan>& s, int64_t a, int64_t b) {
  int64_t t = 0;
  for (const NSpan& x : s) t += std::max<int64_t>(0, std::min(b, x.second) - std::max(a, x.first));
  return t;
}

// Checks one rank's report against naive unions over the same windows, all in integer ns: the
// step windows partition the trace's window and start at their step's first GPU event; busy,
// idle, compute and (not pipelined) every cause of each window equal the naive ones; the steps'
// idle and causes sum exactly to the whole trace's.
void expect_partition_equal_to_naive(const GpuTraceRank& t, const GpuRankReport& r, bool pipelined,
                                     const std::string& what) {
  const std::vector<GpuEvent>& ev = t.events;
  ASSERT_FALSE(ev.empty()) << what;
  int64_t lo = ev[0].start_ns, hi = ev[0].end_ns;
  for (const GpuEvent& e : ev) {
    lo = std::min(lo, e.start_ns);
    hi = std::max(hi, e.end_ns);
  }
  EXPECT_EQ(r.usage.start_ns, lo) << what;
  EXPECT_EQ(r.usage.end_ns, hi) << what;
  // The whole trace's idle gaps whose next GPU event the CPU launched after the gap began.
  const auto all = [](const GpuEvent&) { return true; };
  const std::vector<NSpan> busy = naive_union(ev, lo, hi, all);
  std::vector<NSpan> host_gaps;
  for (size_t k = 1; k < busy.size(); ++k) {
    const int64_t a = busy[k - 1].second, b = busy[k].first;
    bool late = true;
    for (const GpuEvent& e : ev) {
      if (e.start_ns == b) late = late && e.launch_ns != kNoLaunch && e.launch_ns > a;
    }
    if (late) host_gaps.push_back({a, b});
  }
  auto check = [&](int64_t a, int64_t b, const GpuUsage& u, const GpuCausesNs& c,
                   const std::string& where) {
    EXPECT_EQ(u.start_ns, a) << where;
    EXPECT_EQ(u.end_ns, b) << where;
    const int64_t busy_ns = length(naive_union(ev, a, b, all));
    const int64_t compute = length(
        naive_union(ev, a, b, [](const GpuEvent& e) { return e.kind == GpuEventKind::kCompute; }));
    const int64_t comm_or_compute = length(naive_union(ev, a, b, [](const GpuEvent& e) {
      return e.kind == GpuEventKind::kCompute || is_communication(e.kind);
    }));
    EXPECT_EQ(u.busy_ns, busy_ns) << where;
    EXPECT_NEAR(u.idle_s, static_cast<double>(b - a - busy_ns) * 1e-9, 1e-12) << where;
    EXPECT_NEAR(u.compute_s, static_cast<double>(compute) * 1e-9, 1e-12) << where;
    EXPECT_NEAR(u.exposed_communication_s, static_cast<double>(comm_or_compute - compute) * 1e-9,
                1e-12)
        << where;
    int64_t sum = 0;
    for (int64_t x : c) sum += x;
    EXPECT_EQ(sum, b - a - compute) << where << ": the causes sum to window - compute";
    if (pipelined) return;
    const int64_t idle = b - a - busy_ns, host = length_in(host_gaps, a, b);
    EXPECT_EQ(c[static_cast<int>(GpuCause::kExposedComm)], comm_or_compute - compute) << where;
    EXPECT_EQ(c[static_cast<int>(GpuCause::kMemory)], busy_ns - comm_or_compute) << where;
    EXPECT_EQ(c[static_cast<int>(GpuCause::kHostWait)], host) << where;
    EXPECT_EQ(c[static_cast<int>(GpuCause::kOtherWait)], idle - host) << where;
  };
  if (!pipelined) check(lo, hi, r.usage, r.causes_ns, what + " whole trace");
  const std::vector<GpuStepWindow> windows = gpu_step_windows(ev);
  ASSERT_EQ(windows.size(), r.steps.size()) << what;
  if (windows.empty()) return;
  EXPECT_EQ(windows.front().window.start_ns, lo) << what;
  EXPECT_EQ(windows.back().window.end_ns, hi) << what;
  int64_t idle_sum = 0, events = 0;
  GpuCausesNs cause_sum{};
  for (size_t k = 0; k < windows.size(); ++k) {
    const GpuStepWindow& w = windows[k];
    const std::string where = what + " step " + std::to_string(w.step);
    if (k > 0) {
      EXPECT_EQ(w.window.start_ns, windows[k - 1].window.end_ns) << where;
      int64_t first = INT64_MAX;
      for (const GpuEvent& e : ev) {
        if (e.step == w.step) first = std::min(first, e.start_ns);
      }
      EXPECT_EQ(w.window.start_ns, first) << where << ": starts at the step's first GPU event";
    }
    auto s = std::find_if(r.steps.begin(), r.steps.end(),
                          [&](const GpuStepReport& x) { return x.step == w.step; });
    ASSERT_NE(s, r.steps.end()) << where;
    check(w.window.start_ns, w.window.end_ns, s->usage, s->causes_ns, where);
    idle_sum += s->usage.end_ns - s->usage.start_ns - s->usage.busy_ns;
    events += s->usage.events;
    for (int c = 0; c < kNumGpuCauses; ++c) cause_sum[c] += s->causes_ns[c];
  }
  EXPECT_EQ(idle_sum, hi - lo - length(busy)) << what << ": the steps' idle sums to the whole";
  EXPECT_EQ(events, static_cast<int64_t>(ev.size())) << what << ": each event in one step";
  EXPECT_EQ(cause_sum, r.causes_ns) << what << ": the steps' causes sum to the whole";
}

class RealTraceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RealTraceTest, WholeTraceAndStepsEqualTheOracle) {
  const std::string path = kTraces + GetParam();
  auto got = build_gpu_trace_report({path});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const OTrace want = oracle_read(path);
  ASSERT_EQ(got->ranks.size(), 1u);
  const GpuRankReport& r = got->ranks[0];
  EXPECT_EQ(r.usage.events, static_cast<int64_t>(want.events.size()));
  expect_equal(r.usage, oracle_usage(want.events, want.lo, want.hi), GetParam() + " whole trace");
  ASSERT_EQ(r.steps.size(), want.steps.size()) << GetParam();
  ASSERT_FALSE(r.steps.empty()) << "every bundled trace has ProfilerStep markers";
  for (size_t k = 0; k < want.steps.size(); ++k) {
    const OWindow& w = want.steps[k];
    EXPECT_EQ(r.steps[k].step, w.step);
    EXPECT_EQ(r.steps[k].usage.events, w.events) << w.step;
    expect_equal(r.steps[k].usage, oracle_usage(want.events, w.lo, w.hi),
                 GetParam() + " step " + std::to_string(w.step));
  }
  // report.json carries the same numbers under the issue's keys.
  const auto j = nlohmann::json::parse(gpu_trace_report_json(*got));
  const auto& jr = j["ranks"][0];
  for (const char* key : {"rank", "window_s", "busy_s", "idle_s", "compute_s", "communication_s",
                          "exposed_communication_s", "memory_s", "bubble_ratio", "steps"}) {
    EXPECT_TRUE(jr.contains(key)) << key;
  }
  EXPECT_DOUBLE_EQ(jr["busy_s"].get<double>(), r.usage.busy_s);
  ASSERT_EQ(jr["steps"].size(), r.steps.size());
  EXPECT_EQ(jr["steps"][0]["step"].get<int>(), r.steps[0].step);
  EXPECT_DOUBLE_EQ(jr["steps"][0]["idle_s"].get<double>(), r.steps[0].usage.idle_s);
}

// Every bundled trace, per rank (pipelined or not): the steps partition the trace, and their idle
// and causes sum to the whole's and equal naive unions over the same windows, to the nanosecond.
TEST_P(RealTraceTest, StepsPartitionTheTraceAndSumToTheWhole) {
  for (bool pipelined : {false, true}) {
    GpuPipelineSpec spec;
    if (pipelined) {
      spec.pp = 1;
      spec.schedule = "1f1b";
      spec.microbatches = 1;
    }
    auto got = build_gpu_trace_report({kTraces + GetParam()}, spec);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    for (size_t k = 0; k < got->ranks.size(); ++k) {
      expect_partition_equal_to_naive(got->traces[k], got->ranks[k], pipelined,
                                      GetParam() + (pipelined ? " (--pp)" : ""));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bundled, RealTraceTest,
                         ::testing::Values("dp128_rank0.json.gz", "dp128_rank1.json.gz",
                                           "dp2_rank0.json.gz", "rocm_mi250_rank0.json.gz"),
                         [](const auto& info) {
                           std::string n = info.param.substr(0, info.param.find('.'));
                           return n;
                         });

TEST(GpuTraceTest, TwoRanksOfOneJobInRankOrder) {
  // Given in reverse order: ranks come from distributedInfo.
  auto got =
      build_gpu_trace_report({kTraces + "dp128_rank1.json.gz", kTraces + "dp128_rank0.json.gz"});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->ranks.size(), 2u);
  EXPECT_EQ(got->ranks[0].rank, 0);
  EXPECT_EQ(got->ranks[1].rank, 1);
  EXPECT_NE(got->ranks[0].path.find("rank0"), std::string::npos);
  EXPECT_FALSE(got->traces[0].rank_from_file_order);
  // NCCL SendRecv kernels are P2P; the job has no collective kernel.
  EXPECT_GT(got->ranks[0].usage.p2p_s, 0);
  EXPECT_EQ(got->ranks[0].usage.collective_s, 0);
  // The sentence a user reads first names the worst rank and step.
  const std::string text = format_gpu_trace_text(*got);
  EXPECT_NE(text.find("worst step: rank "), std::string::npos) << text;
}

TEST(GpuTraceTest, CollectivesAndStreamsOfADataParallelJob) {
  auto got = build_gpu_trace_report({kTraces + "dp2_rank0.json.gz"});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const GpuUsage& u = got->ranks[0].usage;
  EXPECT_GT(u.collective_s, 0);  // AllReduce, Broadcast
  EXPECT_EQ(u.p2p_s, 0);
  EXPECT_LE(u.exposed_communication_s, u.communication_s);
  EXPECT_NEAR(u.idle_s + u.busy_s, u.window_s, 1e-12);
  std::set<int32_t> streams;
  for (const auto& e : got->traces[0].events) streams.insert(e.stream);
  EXPECT_GE(streams.size(), 2u);  // compute stream and the NCCL stream
  // Causes (no pipeline said) partition the time not computing.
  double sum = 0;
  for (double c : got->ranks[0].causes) sum += c;
  double want = 0;
  for (const auto& s : got->ranks[0].steps) want += s.usage.window_s - s.usage.compute_s;
  EXPECT_NEAR(sum, want, 1e-9);
  EXPECT_EQ(got->ranks[0].causes[static_cast<int>(GpuCause::kFill)], 0);
}

TEST(GpuTraceTest, RankFromFileOrderWhenNoDistributedInfo) {
  auto got = build_gpu_trace_report({kTraces + "rocm_mi250_rank0.json.gz"});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got->traces[0].rank_from_file_order);
  bool said = false;
  for (const auto& w : got->warnings) said |= w.find("order of the files") != std::string::npos;
  EXPECT_TRUE(said);
}

// ----- synthetic traces: definitions on hand-checked numbers, and bad input
// -----------------------

class TraceFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fs::path("tp-gpu-trace-" + std::to_string(::getpid()) + "-" +
                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    EXPECT_TRUE(write_file(p, text).ok());
    return p;
  }
  fs::path dir_;
};

// A small trace: events given as JSON objects (strings), a step mark around the launches.
std::string trace_json(const std::vector<std::string>& events, const std::string& extra = "") {
  std::string s = "{" + extra + "\"traceEvents\": [";
  for (size_t i = 0; i < events.size(); ++i) s += (i ? ",\n" : "\n") + events[i];
  return s + "\n]}\n";
}

std::string kernel(const std::string& name, double ts, double dur, int stream, int corr,
                   const std::string& cat = "kernel") {
  return fmt::format(
      R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": 0, "tid": {}, "ts": {}, "dur": {}, "args": {{"device": 0, "stream": {}, "correlation": {}}}}})",
      cat, name, stream, ts, dur, stream, corr);
}
std::string launch(double ts, int corr) {
  return fmt::format(
      R"({{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": 9, "ts": {}, "dur": 1, "args": {{"correlation": {}}}}})",
      ts, corr);
}
std::string step_mark(int n, double ts, double dur) {
  return fmt::format(
      R"({{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{}", "pid": 9, "tid": 9, "ts": {}, "dur": {}}})",
      n, ts, dur);
}

TEST_F(TraceFiles, HandCheckedDefinitions) {
  // Step 7: compute [100, 110) and [105, 120) on two streams; NCCL AllReduce [115, 140) (exposed
  // [120, 140)); memcpy [150, 155); window [100, 155). busy = 40 + 4.999 (union [100, 140)
  // plus the copy [150.001, 155)). Times in us with three decimals to check the exact conversion.
  const std::string p = write(
      "t.json",
      trace_json({step_mark(7, 0, 200), launch(1, 1), launch(2, 2), launch(3, 3), launch(145, 4),
                  kernel("gemm<float>", 100.000, 10, 7, 1), kernel("gemm2", 105.000, 15, 8, 2),
                  kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 115.000, 25, 9, 3),
                  kernel("Memcpy HtoD", 150.001, 4.999, 7, 4, "gpu_memcpy")}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->ranks[0].steps.size(), 1u);
  const GpuUsage& u = got->ranks[0].steps[0].usage;
  EXPECT_EQ(got->ranks[0].steps[0].step, 7);
  EXPECT_NEAR(u.window_s, 55e-6, 1e-12);
  EXPECT_NEAR(u.busy_s, 44.999e-6, 1e-12);
  EXPECT_NEAR(u.compute_s, 20e-6, 1e-12);
  EXPECT_NEAR(u.communication_s, 25e-6, 1e-12);
  EXPECT_NEAR(u.exposed_communication_s, 20e-6, 1e-12);
  EXPECT_NEAR(u.memory_s, 4.999e-6, 1e-12);
  EXPECT_NEAR(u.bubble_ratio, (55 - 44.999) / 55, 1e-9);
  // Causes without a pipeline: exposed comm 20, memory 4.999, and the idle gap [140, 150.001)
  // is host wait: the copy that ends it was launched at 145, after the GPU went idle at 140.
  const GpuCausesNs& c = got->ranks[0].steps[0].causes_ns;
  EXPECT_EQ(c[static_cast<int>(GpuCause::kExposedComm)], 20'000);
  EXPECT_EQ(c[static_cast<int>(GpuCause::kMemory)], 4'999);
  EXPECT_EQ(c[static_cast<int>(GpuCause::kHostWait)], 10'001);
  EXPECT_EQ(c[static_cast<int>(GpuCause::kOtherWait)], 0);
}

TEST_F(TraceFiles, PipelineCausesFillDrainDependency) {
  // compute [10, 20) and [50, 60); P2P recv [20, 45) ends in the gap [20, 50): dependency wait.
  // A leading P2P [0, 10): fill; a trailing collective [60, 70): drain.
  const std::vector<GpuEvent> ev = {{0, 10'000, 0, 1, GpuEventKind::kP2P},
                                    {10'000, 20'000, 0, 0, GpuEventKind::kCompute},
                                    {20'000, 45'000, 0, 1, GpuEventKind::kP2P},
                                    {50'000, 60'000, 0, 0, GpuEventKind::kCompute},
                                    {60'000, 70'000, 0, 1, GpuEventKind::kCollective}};
  const GpuCauses p = gpu_causes(ev, true);
  EXPECT_NEAR(p[static_cast<int>(GpuCause::kFill)], 10e-6, 1e-15);
  EXPECT_NEAR(p[static_cast<int>(GpuCause::kDependency)], 30e-6, 1e-15);
  EXPECT_NEAR(p[static_cast<int>(GpuCause::kDrain)], 10e-6, 1e-15);
  const GpuCauses n = gpu_causes(ev, false);
  EXPECT_EQ(n[static_cast<int>(GpuCause::kDependency)], 0);
  EXPECT_NEAR(n[static_cast<int>(GpuCause::kExposedComm)], 45e-6, 1e-15);
  // The gap [45, 50) ends with a kernel whose launch is not known: not the host's for sure.
  EXPECT_NEAR(n[static_cast<int>(GpuCause::kOtherWait)], 5e-6, 1e-15);
  EXPECT_EQ(n[static_cast<int>(GpuCause::kHostWait)], 0);
}

TEST(GpuTraceTest, KernelClassifier) {
  EXPECT_EQ(classify_kernel("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*)"),
            GpuEventKind::kP2P);
  EXPECT_EQ(classify_kernel("ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"),
            GpuEventKind::kP2P);
  EXPECT_EQ(classify_kernel("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)"),
            GpuEventKind::kCollective);
  EXPECT_EQ(classify_kernel("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"),
            GpuEventKind::kCollective);
  EXPECT_EQ(classify_kernel("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm>"),
            GpuEventKind::kCompute);
  // Expert-parallel all-to-all (DeepEP, NVSHMEM) is communication.
  for (const char* comm :
       {"void deep_ep::internode::dispatch<8, 768, 4>(int4*, float*, int*, long*)",
        "void deep_ep::intranode::combine<nv_bfloat16, 8, 768>(...)",
        "deep_ep::internode_ll::dispatch", "dispatch", "combine(int*, int)",
        "void cached_notify_combine<8>(void**, int*)", "nvshmemi_transfer_rma_kernel",
        "void nvshmem_barrier_all_kernel()",
        "void dpsk::ep::internode::dispatch<8, 768, 4>(int4*, float*, int*, long*)",
        "void dpsk::ep::internode::cached_notify<8>(int*, int*)",
        "dpsk::ep::intranode::notify_dispatch(int const*, int*, int)",
        "void dpsk::ep::internode::get_dispatch_layout<256>(long const*, int*)",
        "mscclKernel_Sum_half_Simple_false", "void userbuffers_fp16_sum_inplace_gpu_rr_rs(int)",
        "void vllm::cross_device_reduce_1stage<half, 8>(vllm::RankData*)"}) {
    EXPECT_EQ(classify_kernel(comm), GpuEventKind::kCollective) << comm;
  }
  // A compute kernel that only has the word inside its name stays compute.
  EXPECT_EQ(classify_kernel("void flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits>()"),
            GpuEventKind::kCompute);
  EXPECT_EQ(classify_kernel("void at::native::index_elementwise_kernel<dispatch_fn>(int)"),
            GpuEventKind::kCompute);
}

TEST_F(TraceFiles, PlainJsonReadsLikeGzip) {
  const std::string plain = write("dp2.json", gunzip(kTraces + "dp2_rank0.json.gz"));
  auto a = build_gpu_trace_report({plain});
  auto b = build_gpu_trace_report({kTraces + "dp2_rank0.json.gz"});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ranks[0].usage.busy_s, b->ranks[0].usage.busy_s);
  EXPECT_EQ(a->ranks[0].steps.size(), b->ranks[0].steps.size());
}

void expect_error(const Result<GpuTraceReport>& r, const std::vector<std::string>& parts) {
  ASSERT_FALSE(r.ok());
  const std::string m(r.status().message());
  for (const auto& p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' in: " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST_F(TraceFiles, TruncatedGzip) {
  auto bytes = read_file(kTraces + "dp2_rank0.json.gz");
  ASSERT_TRUE(bytes.ok());
  const std::string p = write("cut.json.gz", bytes->substr(0, bytes->size() / 2));
  expect_error(build_gpu_trace_report({p}), {p, "truncated", "hint:"});
}

TEST_F(TraceFiles, TruncatedJson) {
  const std::string text = gunzip(kTraces + "rocm_mi250_rank0.json.gz");
  const std::string p = write("cut.json", text.substr(0, text.size() / 2));
  expect_error(build_gpu_trace_report({p}), {p, "invalid JSON at byte", "truncated"});
}

TEST_F(TraceFiles, NotJsonAndNotATrace) {
  expect_error(build_gpu_trace_report({write("x.json", "{\"a\": 1, \"b\": [1, 2]}")}),
               {"not a trace", "traceEvents"});
  expect_error(build_gpu_trace_report({write("y.json", "[1, 2, 3]")}), {"not a trace"});
  expect_error(build_gpu_trace_report({write("z.txt", "hello world\n")}),
               {"z.txt", "neither a run directory"});
  expect_error(build_gpu_trace_report({write("e.json", "")}), {"e.json"});
  expect_error(build_gpu_trace_report({write("w.json", "{ not json")}), {"w.json", "invalid JSON"});
  expect_error(build_gpu_trace_report({(dir_ / "missing.json").string()}),
               {"missing.json", "does not exist"});
  // A name with a newline still gives one line.
  expect_error(build_gpu_trace_report({write("two\nlines.json", "{ not json")}), {"invalid JSON"});
  expect_error(build_gpu_trace_report({write("r.nsys-rep", "NSYS binary")}),
               {"nsys export --type sqlite"});
}

TEST_F(TraceFiles, CpuOnlyTrace) {
  const std::string p =
      write("cpu.json",
            trace_json({step_mark(1, 0, 10), launch(1, 1),
                        R"({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2})"}));
  expect_error(build_gpu_trace_report({p}), {p, "CPU-only", "ProfilerActivity.CUDA"});
}

// A CPU-only trace of PyTorch's pipelining runtime (docs/torch.md): the PP:<action> ranges on the
// main thread stand for the device. Rank 0, step 1, times in us:
//   PP:0F0 [10, 20), its first op at 10             compute [10, 20)
//   PP:0SEND_F0 [20, 22), PP:0RECV_B0 [22, 23)       P2P (posting)
//   PP:0B0 [23, 60), its first op at 50              compute [50, 60) (the wait before it: idle)
//   PP:0WAIT_SEND_F0 [60, 65), PP:0REDUCE_GRAD       idle (no event)
//   an op outside any PP: range, on another thread   not counted
// window [10, 60) = 50, busy 10 + 2 + 1 + 10 = 23, idle 27, compute 20.
TEST_F(TraceFiles, CpuOnlyPipeliningTraceHandChecked) {
  const auto ev = [](const std::string& cat, const std::string& name, double ts, double dur,
                     int tid = 9) {
    return fmt::format(
        R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": 9, "tid": {}, "ts": {}, "dur": {}}})",
        cat, name, tid, ts, dur);
  };
  const std::string p = write(
      "cpu_pp.json",
      trace_json({step_mark(1, 0, 100), ev("user_annotation", "PP:0F0", 10, 10),
                  ev("cpu_op", "aten::addmm", 10, 8), ev("user_annotation", "PP:0SEND_F0", 20, 2),
                  ev("cpu_op", "c10d::send", 20.5, 1), ev("user_annotation", "PP:0RECV_B0", 22, 1),
                  ev("user_annotation", "PP:0B0", 23, 37), ev("cpu_op", "aten::mm", 5, 1, 11),
                  ev("cpu_op", "aten::mm", 50, 9), ev("user_annotation", "PP:0WAIT_SEND_F0", 60, 5),
                  ev("user_annotation", "PP:0REDUCE_GRAD", 65, 1),
                  ev("cpu_op", "aten::div_", 65, 1), ev("cpu_op", "aten::zeros", 95, 1)},
                 R"("distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, )"));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->ranks.size(), 1u);
  const GpuUsage& u = got->ranks[0].usage;
  EXPECT_NEAR(u.window_s, 50e-6, 1e-12);
  EXPECT_NEAR(u.busy_s, 23e-6, 1e-12);
  EXPECT_NEAR(u.idle_s, 27e-6, 1e-12);
  EXPECT_NEAR(u.compute_s, 20e-6, 1e-12);
  EXPECT_NEAR(u.p2p_s, 3e-6, 1e-12);
  EXPECT_NEAR(u.bubble_ratio, 27.0 / 50, 1e-12);
  EXPECT_EQ(u.events, 4);
  ASSERT_EQ(got->ranks[0].steps.size(), 1u);
  EXPECT_EQ(got->ranks[0].steps[0].step, 1);
  EXPECT_TRUE(std::any_of(got->warnings.begin(), got->warnings.end(), [](const std::string& w) {
    return w.find("a CPU-only trace of PyTorch's pipelining runtime") != std::string::npos;
  }));
  // Only comm ranges, no compute range: still the CPU-only error.
  const std::string comm_only =
      write("comm_only.json", trace_json({ev("user_annotation", "PP:0SEND_F0", 20, 2),
                                          ev("cpu_op", "c10d::send", 20.5, 1)}));
  expect_error(build_gpu_trace_report({comm_only}), {comm_only, "CPU-only", "PP:<compute action>"});
  // A compute range with no op inside (stage 0's I computes no input gradient): an empty event
  // at its end, so the action has a cost (zero) and adds no busy time.
  const std::string empty = write(
      "empty_i.json", trace_json({ev("user_annotation", "PP:0F0", 10, 10), ev("cpu_op", "a", 12, 1),
                                  ev("user_annotation", "PP:0I0", 30, 5)}));
  auto e = build_gpu_trace_report({empty});
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->ranks[0].usage.events, 2);
  EXPECT_NEAR(e->ranks[0].usage.window_s, 23e-6, 1e-12);  // [12, 35)
  EXPECT_NEAR(e->ranks[0].usage.busy_s, 8e-6, 1e-12);
}

// The committed trace of a real run (tests/data/torch_cpu_p2: PyTorch 2.15.0's runtime, tightpipe's
// 1f1b p = 2, m = 4, the GPT of python/tightpipe/torch/gpt.py, gloo on CPU, one profiled step):
// both ranks read, 8 compute actions each, the pipeline analysis fits costs from the PP: ranges and
// simulates the schedule that ran.
TEST(GpuTraceTest, RealCpuPipeliningTraceOfPyTorchsRuntime) {
  const std::string dir = std::string(TP_SOURCE_DIR) + "/tests/data/torch_cpu_p2/";
  GpuPipelineSpec spec;
  spec.pp = 2;
  spec.schedule_file = dir + "schedule.csv";
  auto got = build_gpu_trace_report({dir + "rank0.json.gz", dir + "rank1.json.gz"}, spec);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->ranks.size(), 2u);
  for (const auto& r : got->ranks) {
    SCOPED_TRACE(r.rank);
    ASSERT_EQ(r.steps.size(), 1u);
    EXPECT_GT(r.usage.compute_s, 0);
    EXPECT_GT(r.usage.p2p_s, 0);
    EXPECT_GT(r.usage.bubble_ratio, 0.05);
    EXPECT_LT(r.usage.bubble_ratio, 0.95);
    // The causes sum to window - compute, and the pipeline ones are there.
    double sum = 0;
    for (double c : r.causes) sum += c;
    EXPECT_NEAR(sum, r.usage.window_s - r.usage.compute_s, 1e-9);
    EXPECT_GT(r.causes[static_cast<int>(GpuCause::kDependency)], 0);
  }
  ASSERT_TRUE(got->pipeline.has_value());
  EXPECT_TRUE(got->pipeline->error.empty()) << got->pipeline->error;
  EXPECT_GT(got->pipeline->predicted_step_s, 0);
  EXPECT_GT(got->pipeline->measured_step_s, got->pipeline->predicted_step_s * 0.5);
}

TEST_F(TraceFiles, NoStepMarkersGiveWholeTraceNumbersAndSaySo) {
  const std::string p =
      write("nostep.json",
            trace_json({launch(1, 1), kernel("k", 10, 5, 7, 1), kernel("k", 30, 5, 7, 2)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got->ranks[0].steps.empty());
  EXPECT_NEAR(got->ranks[0].usage.window_s, 25e-6, 1e-12);
  EXPECT_NEAR(got->ranks[0].usage.busy_s, 10e-6, 1e-12);
  bool said_steps = false, said_unmatched = false;
  for (const auto& w : got->warnings) {
    said_steps |= w.find("whole-trace numbers only") != std::string::npos;
    said_unmatched |= w.find("1 of 2 GPU event(s) have no CPU launch") != std::string::npos;
  }
  EXPECT_TRUE(said_steps);
  EXPECT_TRUE(said_unmatched);
  EXPECT_NE(gpu_trace_report_json(*got).find("whole-trace numbers only"), std::string::npos);
}

TEST_F(TraceFiles, NegativeAndOverlappingDurationsAreCountedNotFatal) {
  const std::string p = write(
      "buggy.json",
      trace_json({step_mark(1, 0, 10), launch(1, 1), launch(2, 2), launch(3, 3),
                  kernel("a", 100, 20, 7, 1), kernel("b", 110, 20, 7, 2),  // overlaps on stream 7
                  kernel("c", 200, -5, 7, 3)}));                           // negative
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->traces[0].anomalies.negative_durations, 1);
  EXPECT_EQ(got->traces[0].anomalies.stream_overlaps, 1);
  EXPECT_NEAR(got->ranks[0].usage.busy_s, 30e-6, 1e-12);  // [100, 130); c counts 0
  EXPECT_NEAR(got->ranks[0].usage.window_s, 100e-6, 1e-12);
  int said = 0;
  for (const auto& w : got->warnings) {
    said += w.find("negative duration") != std::string::npos;
    said += w.find("same stream") != std::string::npos;
  }
  EXPECT_EQ(said, 2);
}

// The warning of one kind (its text contains `kind`): exactly one line, or "" when none.
std::string warning_of(const GpuTraceReport& rep, const std::string& kind) {
  std::string found;
  int lines = 0;
  for (const auto& w : rep.warnings) {
    if (w.find(kind) == std::string::npos) continue;
    found = w;
    ++lines;
  }
  EXPECT_LE(lines, 1) << "one line per kind: " << kind;
  return found;
}

void expect_has(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(text.find(p), std::string::npos) << p << " in: " << text;
}

TEST_F(TraceFiles, TimesBeyondAnyClockAreLeftOutAndSaid) {
  // A damaged file: timestamps beyond int64 nanoseconds as integers, as decimals, as an exponent,
  // above INT64_MAX, and an end beyond the clock. Each event is left out and counted in one
  // warning naming the first; the rest is reported (sanitizer lane: no signed overflow).
  const std::string big = R"({"ph": "X", "cat": "kernel", "name": "bad", "pid": 0, "tid": 0, )";
  const std::string p =
      write("extreme.json",
            trace_json({launch(1, 2),
                        big + R"("ts": 9000000000000000000, "dur": 5, "args": {"device": 0}})",
                        big + R"("ts": -9.5e18, "dur": 1, "args": {"device": 0}})",
                        big + R"("ts": 12345678901234567.891, "dur": 3, "args": {"device": 0}})",
                        big + R"("ts": 18446744073709551615, "dur": 3, "args": {"device": 0}})",
                        big + R"("ts": 100, "dur": 1.0e300, "args": {"device": 0}})",
                        big + R"("ts": 3999999999999999, "dur": 3999999999999999, "args": {}})",
                        kernel("small", 100, 20, 7, 2)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->traces[0].events.size(), 1u);
  EXPECT_NEAR(got->ranks[0].usage.window_s, 20e-6, 1e-12);
  const std::string w = warning_of(*got, "beyond any profiler's clock");
  expect_has(
      w, {p, "6 event(s)", "first: kernel 'bad' (traceEvents[1]) \"ts\": 9000000000000000000 us",
          "left out"});
  // The Chrome trace's thread id of int32 extremes does not overflow.
  const std::string ids = write(
      "ids.json",
      trace_json({launch(1, 1),
                  big + R"("ts": 10, "dur": 5, "args": {"device": 2147483647, "stream": )"
                        R"(2147483647, "correlation": 1}})",
                  big + R"("ts": 20, "dur": 5, "args": {"device": 2147483648, "stream": 1.5}})",
                  big + R"("ts": 30, "dur": 5, "args": {"device": -2147483648, "stream": "x"}})"}));
  got = build_gpu_trace_report({ids});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_NE(gpu_trace_chrome_json(*got).find("\"tid\": 214750512183647"), std::string::npos);
  expect_has(warning_of(*got, "not 32-bit integers"),
             {ids, "3 device or stream id(s)",
              "first: kernel 'bad' (traceEvents[2]) \"device\": 2147483648", "taken as -1"});
  // Events that span more than any profile: refused, naming both ends.
  expect_error(
      build_gpu_trace_report({write(
          "span.json", trace_json({kernel("early", 1, 5, 7, 1), kernel("late", 2e12, 5, 7, 2)}))}),
      {"span.json", "span 2e+06 s", "'early' at ts 1.000 us", "'late' ending at", "hint:"});
}

TEST_F(TraceFiles, TextAndNullTimesAreLeftOutAndSaid) {
  const std::string k = R"({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, )";
  const std::string p = write(
      "text.json",
      trace_json({step_mark(1, 0, 100), launch(1, 1), launch(2, 2),
                  k + R"("ts": "150", "dur": 5, "args": {"correlation": 1}})",
                  k + R"("ts": 160, "dur": null, "args": {"correlation": 2}})",
                  k + R"("ts": 170, "args": {"correlation": 2}})",
                  k + R"("ts": {"us": 1}, "dur": 1, "args": {"correlation": 2}})",
                  R"({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": true, )"
                  R"("dur": 1, "args": {"correlation": 3}})",
                  R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": "200", )"
                  R"("dur": 10})",
                  kernel("good", 120, 10, 7, 2)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->traces[0].events.size(), 1u);
  EXPECT_EQ(got->traces[0].steps.size(), 1u);
  expect_has(warning_of(*got, "missing or not a number"),
             {p, "6 event(s)", "first: kernel 'k' (traceEvents[3]) \"ts\": \"150\"", "left out"});
  // Every GPU event unusable: one error saying why, not "CPU-only".
  expect_error(build_gpu_trace_report(
                   {write("none.json", trace_json({k + R"("ts": null, "dur": 1, "args": {}})"}))}),
               {"none.json", "no usable GPU events", "\"ts\": null", "hint:"});
}

TEST_F(TraceFiles, RankOutsideTheWorldIsRefused) {
  auto with_info = [&](const std::string& name, const std::string& info) {
    return write(name, trace_json({launch(1, 1), kernel("k", 10, 5, 7, 1)},
                                  "\"distributedInfo\": " + info + ", "));
  };
  expect_error(build_gpu_trace_report({with_info("r4.json", R"({"rank": 4, "world_size": 4})")}),
               {"r4.json", "rank 4 is outside its world of 4 rank(s) (0..3)", "hint:"});
  expect_error(build_gpu_trace_report({with_info("neg.json", R"({"rank": -1, "world_size": 4})")}),
               {"neg.json", "rank -1 is not a rank"});
  expect_error(build_gpu_trace_report({with_info("str.json", R"({"rank": "0", "world_size": 4})")}),
               {"str.json", "rank \"0\" is not a rank"});
  expect_error(build_gpu_trace_report({with_info("big.json", R"({"rank": 4294967296})")}),
               {"big.json", "rank 4294967296"});
  expect_error(build_gpu_trace_report({with_info("w0.json", R"({"rank": 0, "world_size": 0})")}),
               {"w0.json", "world_size 0 is not a number of ranks"});
  auto ok = build_gpu_trace_report({with_info("r3.json", R"({"rank": 3.0, "world_size": 4})")});
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ(ok->ranks[0].rank, 3);
}

TEST_F(TraceFiles, DistributedInfoAsAPythonReprIsRead) {
  const std::string a =
      write("r0.json",
            trace_json({launch(1, 1), kernel("k", 10, 5, 7, 1)},
                       R"("distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, )"));
  const std::string b =
      write("r1.json",
            trace_json({launch(1, 1), kernel("k", 10, 5, 7, 1)},
                       R"("distributedInfo": "{'backend': 'nccl', 'rank': 1, 'world_size': 2, )"
                       R"('pg_config': [{'ranks': (0, 1,), 'desc': \"it's\"}], 'x': None, )"
                       R"('y': True}", )"));
  auto got = build_gpu_trace_report({b, a});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->ranks.size(), 2u);
  EXPECT_EQ(got->ranks[1].path, b);
  EXPECT_EQ(got->traces[1].world_size, 2);
  EXPECT_FALSE(got->traces[1].rank_from_file_order);
  // The repr is checked like the object; one that is no dict is refused.
  expect_error(
      build_gpu_trace_report(
          {write("r9.json", trace_json({kernel("k", 10, 5, 7, 1)},
                                       R"("distributedInfo": "{'rank': 9, 'world_size': 2}", )"))}),
      {"r9.json", "rank 9 is outside its world of 2"});
  expect_error(build_gpu_trace_report(
                   {write("junk.json", trace_json({kernel("k", 10, 5, 7, 1)},
                                                  R"("distributedInfo": "rank=0 of 8", )"))}),
               {"junk.json", "neither a Python dict nor JSON", "hint:"});
}

TEST_F(TraceFiles, StepNumbersOutOfRangeAreSaid) {
  const std::string p =
      write("steps.json",
            trace_json(
                {step_mark(1, 0, 10), launch(1, 1), launch(21, 2), launch(41, 3),
                 R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#99999999999", )"
                 R"("ts": 20, "dur": 10})",
                 R"({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#-3", "ts": 40, )"
                 R"("dur": 10})",
                 kernel("a", 100, 5, 7, 1), kernel("b", 110, 5, 7, 2), kernel("c", 120, 5, 7, 3)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->ranks[0].steps.size(), 1u);
  EXPECT_EQ(got->ranks[0].usage.events, 3);  // b and c belong to no step, run in step 1's window
  expect_has(warning_of(*got, "iteration mark(s) whose number"),
             {p, "2 iteration mark(s)", "first: 'ProfilerStep#99999999999' (traceEvents[4])",
              "belong to no step"});
}

TEST_F(TraceFiles, OverlappingStepRangesAreSaidAndKeepTheirKernels) {
  // Step 2 [50, 60] inside step 1 [0, 100]; step 3 twice. A launch at 55 is step 2's (the
  // later-starting), one at 80 stays step 1's.
  const std::string p =
      write("overlap.json",
            trace_json({step_mark(1, 0, 100), step_mark(2, 50, 10), step_mark(3, 200, 10),
                        step_mark(3, 300, 10), launch(55, 1), launch(80, 2), launch(205, 3),
                        launch(305, 4), kernel("a", 1000, 5, 7, 1), kernel("b", 1010, 5, 7, 2),
                        kernel("c", 1020, 5, 7, 3), kernel("d", 1030, 5, 7, 4)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const auto& steps = got->ranks[0].steps;
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[0].step, 1);
  EXPECT_EQ(steps[0].usage.events, 1);  // b
  EXPECT_EQ(steps[1].usage.events, 1);  // a
  EXPECT_EQ(steps[2].usage.events, 2);  // c and d
  expect_has(warning_of(*got, "start inside another"),
             {p, "1 iteration range(s)",
              "first: step 2 [50.000, 60.000] us starts inside step 1 [0.000, 100.000] us"});
  expect_has(warning_of(*got, "repeat the number"),
             {"1 iteration range(s)", "step 3 at [200.000, 210.000] us and at [300.000, 310.000]"});
}

// ----- issue 45: the faults of per-step windows, each on a trace written for it ------------------

// The report of one trace file, checked against the naive unions (expect_partition_equal_to_naive)
// both without and with --pp.
GpuTraceReport checked_report(const std::string& path) {
  GpuPipelineSpec spec;
  spec.pp = 1;
  spec.schedule = "1f1b";
  spec.microbatches = 1;
  for (bool pipelined : {true, false}) {
    auto got = build_gpu_trace_report({path}, pipelined ? spec : GpuPipelineSpec{});
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok()) return {};
    expect_partition_equal_to_naive(got->traces[0], got->ranks[0], pipelined, path);
    if (!pipelined) return std::move(*got);
  }
  return {};
}

int64_t idle_ns(const GpuUsage& u) { return u.end_ns - u.start_ns - u.busy_ns; }
int64_t cause_ns(const GpuStepReport& s, GpuCause c) { return s.causes_ns[static_cast<int>(c)]; }
// A step's window [start, end] and its idle time, in us.
void expect_step(const GpuStepReport& s, int64_t start_us, int64_t end_us, int64_t idle_us) {
  EXPECT_EQ(s.usage.start_ns, start_us * 1000) << "step " << s.step;
  EXPECT_EQ(s.usage.end_ns, end_us * 1000) << "step " << s.step;
  EXPECT_EQ(idle_ns(s.usage), idle_us * 1000) << "step " << s.step;
}

TEST_F(TraceFiles, SideStreamPrefetchOfTheNextStepIsNotIdle) {
  // Step 1 launches a kernel that runs [100, 200) on stream 7; step 2 launches a copy (a side
  // stream's input prefetch) that runs [150, 160) on stream 8, under step 1's compute tail, and
  // its own kernel [210, 300). Step 1: [100, 150), busy all of it. Step 2: [150, 300], busy
  // [150, 200) (step 1's tail) and [210, 300): idle 10 us, the gap [200, 210), where the kernel
  // that ends it was launched long before: other wait. (Counting only a step's own events, step
  // 2 had a window [150, 300) with 50 us idle under step 1's kernel.)
  const std::string p =
      write("prefetch.json",
            trace_json({step_mark(1, 0, 50), step_mark(2, 50, 50), launch(1, 1), launch(60, 2),
                        launch(70, 3), kernel("gemm", 100, 100, 7, 1),
                        kernel("Memcpy HtoD (Pinned -> Device)", 150, 10, 8, 2, "gpu_memcpy"),
                        kernel("gemm", 210, 90, 7, 3)}));
  const GpuTraceReport rep = checked_report(p);
  ASSERT_EQ(rep.ranks.size(), 1u);
  const GpuRankReport& r = rep.ranks[0];
  ASSERT_EQ(r.steps.size(), 2u);
  expect_step(r.steps[0], 100, 150, 0);
  expect_step(r.steps[1], 150, 300, 10);
  EXPECT_EQ(cause_ns(r.steps[1], GpuCause::kOtherWait), 10'000);
  EXPECT_EQ(idle_ns(r.usage), 10'000);
  // The page's timeline of step 2 draws its window: step 1's tail clipped to it, the copy, the
  // kernel.
  const Timeline tl = report_internal::gpu_step_timeline(rep, 2);
  ASSERT_EQ(tl.ranks.size(), 1u);
  ASSERT_EQ(tl.ranks[0].events.size(), 3u);
  EXPECT_NEAR(tl.ranks[0].events[0].start, 0, 1e-15);
  EXPECT_NEAR(tl.ranks[0].events[0].end, 50e-6, 1e-15);
  EXPECT_NEAR(tl.ranks[0].events[2].end, 150e-6, 1e-15);
}

TEST_F(TraceFiles, WorkLaunchedBeforeTheFirstStepIsBusyInIt) {
  // A kernel launched before profiling began (no launch in the trace) runs [80, 110); step 1's
  // kernels run [100, 105) and [130, 150). Step 1's window is the trace's, [80, 150]: busy
  // [80, 110) and [130, 150), idle 20 us. (Its own kernels alone: [100, 150) with 25 us idle.)
  const std::string p = write(
      "before.json",
      trace_json({step_mark(1, 0, 50), launch(1, 1), launch(2, 2), kernel("gemm", 100, 5, 7, 1),
                  kernel("gemm", 130, 20, 7, 2), kernel("warmup_gemm", 80, 30, 8, 99)}));
  const GpuTraceReport rep = checked_report(p);
  ASSERT_EQ(rep.ranks.size(), 1u);
  const GpuRankReport& r = rep.ranks[0];
  ASSERT_EQ(r.steps.size(), 1u);
  expect_step(r.steps[0], 80, 150, 20);
  EXPECT_EQ(r.steps[0].usage.events, 3);
  EXPECT_EQ(idle_ns(r.usage), 20'000);
  EXPECT_EQ(rep.traces[0].anomalies.unmatched_launches, 1);
}

TEST_F(TraceFiles, OverlappingStepAnnotationsStillPartitionTheTrace) {
  // Step 2 [50, 60] inside step 1 [0, 100]: the launch at 55 is step 2's, at 80 step 1's. Step
  // 2's kernel runs first, [1000, 1005), step 1's [1010, 1015): step 2's window [1000, 1010)
  // (idle 5 us), step 1's [1010, 1015]; the whole trace idles the same 5 us, counted once.
  const std::string p =
      write("overlap.json",
            trace_json({step_mark(1, 0, 100), step_mark(2, 50, 10), launch(55, 1), launch(80, 2),
                        kernel("a", 1000, 5, 7, 1), kernel("b", 1010, 5, 7, 2)}));
  const GpuTraceReport rep = checked_report(p);
  ASSERT_EQ(rep.ranks.size(), 1u);
  const GpuRankReport& r = rep.ranks[0];
  ASSERT_EQ(r.steps.size(), 2u);
  EXPECT_EQ(r.steps[0].step, 1);
  expect_step(r.steps[0], 1010, 1015, 0);
  expect_step(r.steps[1], 1000, 1010, 5);
  EXPECT_EQ(idle_ns(r.usage), 5'000);
  expect_has(warning_of(rep, "start inside another"), {"step 2", "inside step 1"});
}

TEST_F(TraceFiles, AStepWhoseOnlyEventIsAtTheTracesEnd) {
  // Step 2's only GPU event is a zero-length memset at 120, where step 1's kernel [100, 120)
  // ends: step 2's window is [120, 120], and each event counts in one step.
  const std::string p =
      write("end.json", trace_json({step_mark(1, 0, 10), step_mark(2, 20, 10), launch(1, 1),
                                    launch(21, 2), kernel("a", 100, 20, 7, 1),
                                    kernel("Memset (Device)", 120, 0, 7, 2, "gpu_memset")}));
  const GpuTraceReport rep = checked_report(p);
  ASSERT_EQ(rep.ranks.size(), 1u);
  ASSERT_EQ(rep.ranks[0].steps.size(), 2u);
  expect_step(rep.ranks[0].steps[0], 100, 120, 0);
  expect_step(rep.ranks[0].steps[1], 120, 120, 0);
  EXPECT_EQ(rep.ranks[0].steps[0].usage.events, 1);
  EXPECT_EQ(rep.ranks[0].steps[1].usage.events, 1);
}

TEST_F(TraceFiles, LateCpuLaunchIsHostWaitAWaitOnAnotherStreamIsNot) {
  // A [100, 110) on stream 7. B [130, 140) on stream 7 was launched at 120, after the GPU went
  // idle at 110: the CPU was late, 20 us of host wait. C [150, 160) on stream 8 was launched at
  // 3, long before the GPU went idle at 140: it waited on other work (an event of another
  // stream), 10 us of other wait.
  const std::string p =
      write("launch.json", trace_json({step_mark(1, 0, 200), launch(1, 1), launch(120, 2),
                                       launch(3, 3), kernel("a", 100, 10, 7, 1),
                                       kernel("b", 130, 10, 7, 2), kernel("c", 150, 10, 8, 3)}));
  const GpuTraceReport rep = checked_report(p);
  ASSERT_EQ(rep.ranks.size(), 1u);
  const GpuStepReport& s = rep.ranks[0].steps.at(0);
  EXPECT_EQ(cause_ns(s, GpuCause::kHostWait), 20'000);
  EXPECT_EQ(cause_ns(s, GpuCause::kOtherWait), 10'000);
  EXPECT_EQ(idle_ns(s.usage), 30'000);
  // The names in every output.
  const std::string text = format_gpu_trace_text(rep);
  EXPECT_NE(text.find("host wait 20.0 us"), std::string::npos) << text;
  EXPECT_NE(text.find("other wait 10.0 us"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(gpu_trace_report_json(rep));
  EXPECT_NEAR(j["ranks"][0]["causes"]["host_wait_s"].get<double>(), 20e-6, 1e-15);
  EXPECT_NEAR(j["ranks"][0]["steps"][0]["causes"]["other_wait_s"].get<double>(), 10e-6, 1e-15);
  EXPECT_FALSE(j["ranks"][0]["causes"].contains("host_s"));
  EXPECT_NE(gpu_trace_report_html(rep).find("<th>host wait</th>"), std::string::npos);
}

TEST_F(TraceFiles, DeepEpKernelsAreCommunication) {
  // DeepEP's dispatch and cached_notify in its dpsk::ep namespace: communication, exposed where
  // no compute runs.
  const std::string p = write(
      "deepep.json",
      trace_json(
          {step_mark(1, 0, 50), launch(1, 1), launch(2, 2), launch(3, 3),
           kernel("gemm", 100, 10, 7, 1),
           kernel("void dpsk::ep::internode::dispatch<8, 768, 4>(int4*, float*)", 110, 20, 9, 2),
           kernel("void dpsk::ep::intranode::cached_notify<8>(void**, int*)", 130, 5, 9, 3)}));
  const GpuTraceReport rep = checked_report(p);
  ASSERT_EQ(rep.ranks.size(), 1u);
  const GpuUsage& u = rep.ranks[0].usage;
  EXPECT_NEAR(u.compute_s, 10e-6, 1e-15);
  EXPECT_NEAR(u.communication_s, 25e-6, 1e-15);
  EXPECT_NEAR(u.exposed_communication_s, 25e-6, 1e-15);
  EXPECT_EQ(cause_ns(rep.ranks[0].steps.at(0), GpuCause::kExposedComm), 25'000);
}

TEST_F(TraceFiles, IdleIsNotABubbleUnlessAPipelineIsSaid) {
  const std::string p =
      write("idle.json", trace_json({step_mark(1, 0, 10), launch(1, 1), launch(2, 2),
                                     kernel("a", 100, 5, 7, 1), kernel("b", 110, 5, 7, 2)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(gpu_ratio_name(*got), "idle");
  const std::string text = format_gpu_trace_text(*got);
  EXPECT_EQ(text.find("bubble"), std::string::npos) << text;
  EXPECT_NE(text.find("idle %"), std::string::npos) << text;
  const auto j = nlohmann::json::parse(gpu_trace_report_json(*got));
  EXPECT_EQ(j["pipelined"], false);
  EXPECT_EQ(j["ratio_name"], "idle");
  EXPECT_TRUE(j["ranks"][0].contains("bubble_ratio"));  // the key stays
  const std::string html = gpu_trace_report_html(*got);
  EXPECT_EQ(html.find(">bubble<"), std::string::npos);
  EXPECT_EQ(html.find("bubble ratio"), std::string::npos);
  // Said to be a pipeline (of one rank here): a bubble.
  GpuPipelineSpec spec;
  spec.pp = 1;
  spec.schedule = "1f1b";
  spec.microbatches = 1;
  got = build_gpu_trace_report({p}, spec);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(gpu_ratio_name(*got), "bubble");
  EXPECT_EQ(nlohmann::json::parse(gpu_trace_report_json(*got))["ratio_name"], "bubble");
  EXPECT_NE(gpu_trace_report_html(*got).find("<th>bubble</th>"), std::string::npos);
}

TEST_F(TraceFiles, RanksOfDifferentJobsAreRefused) {
  expect_error(
      build_gpu_trace_report({kTraces + "dp128_rank0.json.gz", kTraces + "dp2_rank0.json.gz"}),
      {"dp128_rank0.json.gz", "dp2_rank0.json.gz", "not ranks of the same job", "world size 128",
       "world size 2"});
  expect_error(
      build_gpu_trace_report({kTraces + "dp2_rank0.json.gz", kTraces + "rocm_mi250_rank0.json.gz"}),
      {"rocm_mi250_rank0.json.gz", "no distributedInfo"});
  expect_error(
      build_gpu_trace_report({kTraces + "dp128_rank0.json.gz", kTraces + "dp128_rank0.json.gz"}),
      {"both rank 0"});
}

TEST_F(TraceFiles, DetectsInputsByContent) {
  EXPECT_EQ(*detect_report_input(dir_.string()), ReportInput::kRunDir);
  EXPECT_EQ(*detect_report_input(kTraces + "dp2_rank0.json.gz"), ReportInput::kKineto);
  // Content, not the name: a gzip'd trace named .txt is still a trace.
  auto bytes = read_file(kTraces + "rocm_mi250_rank0.json.gz");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*detect_report_input(write("trace.txt", *bytes)), ReportInput::kKineto);
  EXPECT_EQ(*detect_report_input(write("db", std::string("SQLite format 3\0rest", 20))),
            ReportInput::kNsys);
}

TEST(GpuTraceTest, PipelineAnnotations) {
  using report_internal::annotated_action;
  auto a = annotated_action("PP:2F5");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->type, ActionType::kForward);
  EXPECT_EQ(a->stage, 2);
  EXPECT_EQ(a->microbatch, 5);
  EXPECT_EQ(annotated_action("PP:0W3")->type, ActionType::kBackwardWeight);
  EXPECT_EQ(annotated_action("PP:1I0")->type, ActionType::kBackwardInput);
  EXPECT_FALSE(annotated_action("PP:1SEND_F3"));  // not computation
  EXPECT_FALSE(annotated_action("PP:junk"));
  EXPECT_EQ(annotated_action("forward_step")->type, ActionType::kForward);
  EXPECT_EQ(annotated_action("## Backward ##")->type, ActionType::kBackward);
  EXPECT_FALSE(annotated_action("optimizer.step"));
}

TEST_F(TraceFiles, KernelsTakeTheActionOfTheRangeTheirLaunchRanIn) {
  const auto ann = [](const std::string& name, double ts, double dur) {
    return fmt::format(
        R"({{"ph": "X", "cat": "user_annotation", "name": "{}", "pid": 9, "tid": 9, "ts": {}, "dur": {}}})",
        name, ts, dur);
  };
  const std::string p = write(
      "pp.json", trace_json({step_mark(3, 0, 100), ann("PP:1F0", 1, 10), ann("PP:1B0", 20, 10),
                             launch(2, 1), launch(22, 2), launch(50, 3), kernel("f", 100, 5, 7, 1),
                             kernel("b", 110, 9, 7, 2), kernel("x", 130, 1, 7, 3)}));
  auto got = build_gpu_trace_report({p});
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const Timeline tl = report_internal::gpu_step_timeline(*got, 3);
  ASSERT_EQ(tl.ranks.size(), 1u);
  ASSERT_EQ(tl.ranks[0].events.size(), 3u);
  EXPECT_EQ(tl.ranks[0].events[0].kind, EventKind::kForward);
  EXPECT_EQ(tl.ranks[0].events[0].stage, 1);
  EXPECT_EQ(tl.ranks[0].events[1].kind, EventKind::kBackward);
  EXPECT_EQ(tl.ranks[0].events[2].kind, EventKind::kOther);  // launched outside any range
  EXPECT_DOUBLE_EQ(tl.ranks[0].events[0].start, 0);
}

TEST(GpuTraceTest, ChromeTraceOfTheEvents) {
  auto got = build_gpu_trace_report({kTraces + "dp2_rank0.json.gz"});
  ASSERT_TRUE(got.ok());
  const auto j = nlohmann::json::parse(gpu_trace_chrome_json(*got));
  size_t x = 0;
  for (const auto& e : j["traceEvents"]) x += e["ph"] == "X";
  EXPECT_EQ(x, got->traces[0].events.size());
}

}  // namespace
}  // namespace tightpipe
