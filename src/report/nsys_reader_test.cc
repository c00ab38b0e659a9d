// read_nsys_sqlite on databases this test builds. We have no real `nsys export` in the repository:
// the tables are created with the columns of NVIDIA's documented schema (Nsight Systems User
// Guide, "SQLite Schema Reference": the CREATE TABLE listing of the current guide, read in 2026;
// the listing carries no release number. CUPTI_ACTIVITY_KIND_KERNEL is the variant without
// greenContextId, which newer releases add; the reader needs none of the columns that differ).
// Events are then written twice, as an nsys database and as a Kineto JSON, and both readers must
// give the same numbers.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "report/gpu_internal.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using report_internal::annotated_action;
using report_internal::nvtx_iteration;

// ----- the documented schema (the tables the reader uses, and TARGET_INFO_GPU trimmed) ---------

constexpr const char* kSchema = R"sql(
CREATE TABLE StringIds (
  id INTEGER NOT NULL PRIMARY KEY,
  value TEXT NOT NULL);
CREATE TABLE TARGET_INFO_GPU (
  vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER,
  l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER,
  smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER,
  srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER,
  dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER,
  virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER,
  memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
  start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
  contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER,
  globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL,
  mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER,
  registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
  gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
  blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
  dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
  localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,
  graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
  start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
  returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (
  start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
  textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL,
  uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
)sql";

constexpr int64_t kPid = 0x100000000123;  // a serialized GlobalId

// What the test writes, once for each format.
struct Kernel {
  std::string name;        // demangled
  std::string short_name;  // base name
  int64_t start, end;
  int stream;
  int64_t correlation;
  bool demangled_known = true;  // false: demangledName points at no string (shortName is used)
};
struct Copy {
  bool memset;
  int64_t start, end;
  int stream;
  int64_t correlation;
};
struct Call {
  int64_t ts, correlation;
};
struct Range {
  std::string text;  // as NVTX carries it
  std::string kineto_name;
  int64_t start, end;
  bool registered = false;  // text through textId
  int type = 59;            // NvtxPushPopRange; 60: NvtxStartEndRange
};

struct Scenario {
  std::vector<Kernel> kernels;
  std::vector<Copy> copies;
  std::vector<Call> calls;
  std::vector<Range> ranges;
  std::string gpu = "NVIDIA H100 80GB HBM3";
};

// One rank: a pipelined step on two streams (compute on 7, NCCL on 13), a second step with an
// AllReduce, a copy, a memset, a kernel with no launch in the trace.
Scenario two_steps(int64_t shift = 0) {
  Scenario s;
  auto t = [&](int64_t v) { return v + shift; };
  s.kernels = {
      {"void gemm_kernel<float, 128>(float const*, float*)", "gemm_kernel", t(2000), t(10000), 7,
       1},
      {"ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)", "ncclDevKernel_SendRecv",
       t(8000), t(15000), 13, 2},
      {"ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
       "ncclKernel_AllReduce_RING_LL_Sum_float", t(52000), t(60000), 13, 3},
      {"", "elementwise_kernel", t(55000), t(70000), 7, 4, false},
      {"void softmax_kernel<float>(float*)", "softmax_kernel", t(80000), t(81000), 7, 99},
  };
  s.copies = {{false, t(1500), t(1900), 7, 5}, {true, t(71000), t(72000), 7, 6}};
  s.calls = {{t(1200), 1}, {t(1500), 2},  {t(51000), 3}, {t(50500), 4},
             {t(1100), 5}, {t(60000), 6}, {t(61000), 50}};
  s.ranges = {
      {"ProfilerStep#1", "ProfilerStep#1", t(1000), t(50000), true},
      {"ProfilerStep#2, op_id = 9", "ProfilerStep#2", t(50000), t(100000)},
      {"PP:1F0", "PP:1F0", t(1100), t(20000), false, 60},
      {"MmBackward0, seq = 4", "", t(1150), t(1300)},  // an emit_nvtx operator: no annotation
  };
  return s;
}

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close(db); }
};
using Db = std::unique_ptr<sqlite3, DbCloser>;

Db create_db(const std::string& path) {
  fs::remove(path);
  sqlite3* raw = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &raw), SQLITE_OK) << path;
  return Db(raw);
}

void exec(sqlite3* db, const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "") << "\n" << sql;
  sqlite3_free(err);
}

std::string sql_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    out += c;
    if (c == '\'') out += '\'';
  }
  return out + "'";
}

void write_nsys(const std::string& path, const Scenario& s, int64_t pid2 = kPid) {
  Db db = create_db(path);
  exec(db.get(), kSchema);
  exec(db.get(), "BEGIN");
  int64_t next_id = 1;
  auto str = [&](std::string_view v) {
    const int64_t id = next_id++;
    exec(db.get(), fmt::format("INSERT INTO StringIds VALUES ({}, {})", id, sql_quote(v)));
    return id;
  };
  exec(db.get(), fmt::format("INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, 1, 'Other "
                             "GPU'), (0, 0, {})",
                             sql_quote(s.gpu)));
  bool first = true;
  for (const Kernel& k : s.kernels) {
    const int64_t demangled = k.demangled_known ? str(k.name) : 100000;
    const int64_t short_id = str(k.short_name);
    exec(db.get(),
         fmt::format("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, "
                     "streamId, correlationId, globalPid, demangledName, shortName, "
                     "registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, "
                     "staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, "
                     "localMemoryTotal, gridId) VALUES ({}, {}, 0, 1, {}, {}, {}, {}, {}, 32, 1, "
                     "1, 1, 128, 1, 1, 0, 0, 0, 0, {})",
                     k.start, k.end, k.stream, k.correlation, first ? kPid : pid2, demangled,
                     short_id, k.correlation));
    first = false;
  }
  for (const Copy& c : s.copies) {
    if (c.memset) {
      exec(db.get(),
           fmt::format("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, "
                       "streamId, correlationId, globalPid, value, bytes) VALUES ({}, {}, 0, 1, "
                       "{}, {}, {}, 0, 4096)",
                       c.start, c.end, c.stream, c.correlation, kPid));
    } else {
      exec(db.get(),
           fmt::format("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, "
                       "streamId, correlationId, globalPid, bytes, copyKind) VALUES ({}, {}, 0, "
                       "1, {}, {}, {}, 4096, 1)",
                       c.start, c.end, c.stream, c.correlation, kPid));
    }
  }
  const int64_t launch_name = str("cudaLaunchKernel_v7000");
  for (const Call& c : s.calls) {
    exec(db.get(), fmt::format("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, "
                               "globalTid, correlationId, nameId, returnValue) VALUES ({}, {}, 1, "
                               "{}, {}, {}, 0)",
                               c.ts, c.ts + 5, kPid + 7, c.correlation, launch_name));
  }
  for (const Range& r : s.ranges) {
    if (r.registered) {
      exec(db.get(), fmt::format("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, "
                                 "textId) VALUES ({}, {}, {}, {}, {})",
                                 r.start, r.end, r.type, kPid + 7, str(r.text)));
    } else {
      exec(db.get(), fmt::format("INSERT INTO NVTX_EVENTS (start, end, eventType, globalTid, "
                                 "text) VALUES ({}, {}, {}, {}, {})",
                                 r.start, r.end, r.type, kPid + 7, sql_quote(r.text)));
    }
  }
  // A mark and a domain creation: not ranges.
  exec(db.get(), fmt::format("INSERT INTO NVTX_EVENTS (start, end, eventType, text) VALUES (3000, "
                             "NULL, 34, 'step 77'), (0, NULL, 75, 'NCCL')"));
  exec(db.get(), "COMMIT");
}

// Integer nanoseconds as Kineto's microseconds with three decimals.
std::string micros(int64_t ns) { return fmt::format("{}.{:03}", ns / 1000, ns % 1000); }

void write_kineto(const std::string& path, const Scenario& s) {
  std::vector<std::string> ev;
  for (const Kernel& k : s.kernels) {
    const std::string& name = k.demangled_known ? k.name : k.short_name;
    ev.push_back(fmt::format(
        R"({{"ph": "X", "cat": "kernel", "name": {}, "pid": 0, "tid": {}, "ts": {}, "dur": {}, )"
        R"("args": {{"device": 0, "stream": {}, "correlation": {}}}}})",
        nlohmann::json(name).dump(), k.stream, micros(k.start), micros(k.end - k.start), k.stream,
        k.correlation));
  }
  for (const Copy& c : s.copies) {
    ev.push_back(fmt::format(
        R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": 0, "tid": {}, "ts": {}, "dur": {}, )"
        R"("args": {{"device": 0, "stream": {}, "correlation": {}}}}})",
        c.memset ? "gpu_memset" : "gpu_memcpy",
        c.memset ? "Memset (Device)" : "Memcpy HtoD (Pageable -> Device)", c.stream,
        micros(c.start), micros(c.end - c.start), c.stream, c.correlation));
  }
  for (const Call& c : s.calls) {
    ev.push_back(fmt::format(
        R"({{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, )"
        R"("ts": {}, "dur": 0.005, "args": {{"correlation": {}}}}})",
        micros(c.ts), c.correlation));
  }
  for (const Range& r : s.ranges) {
    if (r.kineto_name.empty()) continue;
    ev.push_back(fmt::format(
        R"({{"ph": "X", "cat": "user_annotation", "name": "{}", "pid": 1, "tid": 1, "ts": {}, )"
        R"("dur": {}}})",
        r.kineto_name, micros(r.start), micros(r.end - r.start)));
  }
  std::string doc = "{\"traceEvents\": [\n" + join(ev, ",\n") + "\n]}\n";
  ASSERT_TRUE(write_file(path, doc).ok()) << path;
}

class NsysReaderTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::make_temp_dir("tp-nsys"); }
  std::string file(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

// ----- the rules --------------------------------------------------------------------------------

TEST(NvtxIterationTest, WordAndNumber) {
  EXPECT_EQ(nvtx_iteration("ProfilerStep#12"), 12);
  EXPECT_EQ(nvtx_iteration("iteration 12"), 12);
  EXPECT_EQ(nvtx_iteration("Iteration12"), 12);
  EXPECT_EQ(nvtx_iteration("step_12"), 12);
  EXPECT_EQ(nvtx_iteration("iter:12"), 12);
  EXPECT_EQ(nvtx_iteration("STEP #3"), 3);
  EXPECT_EQ(nvtx_iteration("step=0"), 0);
  for (const char* not_one :
       {"step", "steps 3", "stepper 2", "step 3a", "forward 3", "step #-3", "step 3 4",
        "iteration 99999999999", "train step 3", "ProfilerStep#", ""}) {
    EXPECT_EQ(nvtx_iteration(not_one), std::nullopt) << not_one;
  }
  // Iterations whose number is out of range are iterations still (the readers warn about them).
  for (const char* out_of_range : {"iteration 99999999999", "ProfilerStep#-3", "ProfilerStep#"}) {
    EXPECT_TRUE(report_internal::nvtx_iteration_name(out_of_range).is_iteration) << out_of_range;
    EXPECT_FALSE(report_internal::nvtx_iteration_name(out_of_range).step) << out_of_range;
  }
  EXPECT_FALSE(report_internal::nvtx_iteration_name("step 3a").is_iteration);
  // The pipeline rule the nsys reader shares with the Kineto reader.
  EXPECT_TRUE(annotated_action("PP:2B1").has_value());
  EXPECT_TRUE(annotated_action("Megatron Forward step").has_value());
  EXPECT_FALSE(annotated_action("optimizer").has_value());
}

// ----- the events -------------------------------------------------------------------------------

TEST_F(NsysReaderTest, ReadsKernelsCopiesLaunchesAndRanges) {
  const std::string db = file("rank0.sqlite");
  write_nsys(db, two_steps());
  auto got = read_nsys_sqlite(db);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  const GpuTraceRank& t = *got;
  EXPECT_EQ(t.format, "nsys");
  EXPECT_EQ(t.path, db);
  EXPECT_EQ(t.rank, -1);
  EXPECT_EQ(t.job, "NVIDIA H100 80GB HBM3");  // device 0's row, not the first row
  ASSERT_EQ(t.steps.size(), 2u);              // "step 77" is a mark, not a range
  EXPECT_EQ(t.steps[0].step, 1);              // through textId
  EXPECT_EQ(t.steps[1].step, 2);              // ", op_id = 9" dropped
  EXPECT_EQ(t.steps[1].start_ns, 50000);
  ASSERT_EQ(t.ranges.size(), 1u);  // not "MmBackward0, seq = 4"
  EXPECT_EQ(t.ranges[0].name, "PP:1F0");
  EXPECT_EQ(t.cpu_events, 7 + 4);  // runtime calls and NVTX ranges
  ASSERT_EQ(t.events.size(), 7u);

  struct Want {
    int64_t start;
    GpuEventKind kind;
    int stream;
    int step;
    int range;
    std::string name;
  };
  const std::vector<Want> want = {
      {1500, GpuEventKind::kMemcpy, 7, 1, 0, "Memcpy HtoD"},
      {2000, GpuEventKind::kCompute, 7, 1, 0, "void gemm_kernel<float, 128>(float const*, float*)"},
      {8000, GpuEventKind::kP2P, 13, 1, 0,
       "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"},
      {52000, GpuEventKind::kCollective, 13, 2, -1,
       "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"},
      {55000, GpuEventKind::kCompute, 7, 2, -1, "elementwise_kernel"},  // shortName fallback
      {71000, GpuEventKind::kMemset, 7, 2, -1, "Memset"},
      {80000, GpuEventKind::kCompute, 7, kNoStep, -1, "void softmax_kernel<float>(float*)"},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    const GpuEvent& e = t.events[i];
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(e.start_ns, want[i].start);
    EXPECT_EQ(e.kind, want[i].kind);
    EXPECT_EQ(e.stream, want[i].stream);
    EXPECT_EQ(e.device, 0);
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_EQ(e.range, want[i].range);
    ASSERT_GE(e.name, 0);
    EXPECT_EQ(t.names[e.name], want[i].name);
  }
  EXPECT_EQ(t.anomalies.unmatched_launches, 1);  // correlation 99
  EXPECT_EQ(t.anomalies.negative_durations, 0);
}

TEST_F(NsysReaderTest, AgreesWithTheKinetoReader) {
  const Scenario s = two_steps(1'700'000'000'000'000'123);  // epoch-like ns: exact in both
  write_nsys(file("rank0.sqlite"), s);
  write_kineto(file("rank0.json"), s);
  auto nsys = build_gpu_trace_report({file("rank0.sqlite")});
  auto kineto = build_gpu_trace_report({file("rank0.json")});
  ASSERT_TRUE(nsys.ok()) << nsys.status().to_string();
  ASSERT_TRUE(kineto.ok()) << kineto.status().to_string();
  ASSERT_EQ(nsys->ranks.size(), 1u);
  ASSERT_EQ(kineto->ranks.size(), 1u);
  auto same = [](const GpuUsage& a, const GpuUsage& b) {
    EXPECT_EQ(a.start_ns, b.start_ns);
    EXPECT_EQ(a.end_ns, b.end_ns);
    EXPECT_EQ(a.events, b.events);
    for (double GpuUsage::*f :
         {&GpuUsage::window_s, &GpuUsage::busy_s, &GpuUsage::idle_s, &GpuUsage::compute_s,
          &GpuUsage::communication_s, &GpuUsage::exposed_communication_s, &GpuUsage::memory_s,
          &GpuUsage::p2p_s, &GpuUsage::collective_s, &GpuUsage::bubble_ratio}) {
      EXPECT_DOUBLE_EQ(a.*f, b.*f);
    }
  };
  const GpuRankReport &n = nsys->ranks[0], &k = kineto->ranks[0];
  same(n.usage, k.usage);
  EXPECT_GT(n.usage.communication_s, 0);
  EXPECT_GT(n.usage.memory_s, 0);
  ASSERT_EQ(n.steps.size(), 2u);
  ASSERT_EQ(k.steps.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(n.steps[i].step, k.steps[i].step);
    same(n.steps[i].usage, k.steps[i].usage);
    for (int c = 0; c < kNumGpuCauses; ++c)
      EXPECT_DOUBLE_EQ(n.steps[i].causes[c], k.steps[i].causes[c]);
  }
  // The same events carry the same kinds, steps and ranges.
  const GpuTraceRank &tn = nsys->traces[0], &tk = kineto->traces[0];
  ASSERT_EQ(tn.events.size(), tk.events.size());
  for (size_t i = 0; i < tn.events.size(); ++i) {
    EXPECT_EQ(tn.events[i].kind, tk.events[i].kind) << i;
    EXPECT_EQ(tn.events[i].step, tk.events[i].step) << i;
    EXPECT_EQ(tn.events[i].range, tk.events[i].range) << i;
  }
  EXPECT_EQ(tn.anomalies.unmatched_launches, tk.anomalies.unmatched_launches);
}

// ----- bad input --------------------------------------------------------------------------------

TEST_F(NsysReaderTest, SqliteThatIsNotAnExport) {
  const std::string db = file("other.sqlite");
  {
    Db h = create_db(db);
    exec(h.get(), "CREATE TABLE users (id INTEGER, name TEXT); INSERT INTO users VALUES (1, 'a')");
  }
  auto got = read_nsys_sqlite(db);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  for (const char* part : {db.c_str(), "not an Nsight Systems export", "hint:", "nsys export"}) {
    EXPECT_NE(got.status().message().find(part), std::string::npos) << got.status().message();
  }
}

TEST_F(NsysReaderTest, KernelTableMissingAColumn) {
  const std::string db = file("old.sqlite");
  {
    Db h = create_db(db);
    exec(h.get(),
         "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
         "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,"
         " deviceId INTEGER NOT NULL, correlationId INTEGER, demangledName INTEGER NOT NULL);"
         "INSERT INTO StringIds VALUES (1, 'k');"
         "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (0, 10, 0, 1, 1);");
  }
  auto got = read_nsys_sqlite(db);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  for (const char* part :
       {db.c_str(), "CUPTI_ACTIVITY_KIND_KERNEL", "'streamId'", "hint:", "nsys export"}) {
    EXPECT_NE(got.status().message().find(part), std::string::npos) << got.status().message();
  }
}

// SQLite keeps any value in a column without a type (a hand-made or converted export): NULL and
// text times, a REAL beyond any clock, an id beyond int32, an iteration number beyond int32, a
// range never closed. Each kind is one warning with its count and first row; no row is read as 0.
TEST_F(NsysReaderTest, NullTextAndHugeNumbersAreSaid) {
  const std::string path = file("loose.sqlite");
  {
    Db db = create_db(path);
    exec(db.get(), R"sql(
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId,
                                               demangledName, shortName);
      CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, correlationId);
      CREATE TABLE NVTX_EVENTS (start, end, eventType, text);
      INSERT INTO StringIds VALUES (1, 'gemm');
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
        (1000, 2000, 0, 7, 1, 1, 1), (NULL, 3000, 0, 7, 2, 1, 1), (4000, 'soon', 0, 7, 2, 1, 1),
        (1e300, 5000, 0, 7, 2, 1, 1), (6000, 7000, 4294967296, 7, 2, 1, 1);
      INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (500, 1), (NULL, 2);
      INSERT INTO NVTX_EVENTS VALUES (0, 10000, 59, 'step 1'), (20000, NULL, 59, 'step 2'),
        (30000, 40000, 59, 'step 99999999999'), (NULL, NULL, 59, 'unrelated');
    )sql");
  }
  auto got = read_nsys_sqlite(path);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->events.size(), 2u);
  EXPECT_EQ(got->events[1].device, -1);
  ASSERT_EQ(got->steps.size(), 1u);
  auto warning = [&](const std::string& kind) {
    std::string found;
    for (const auto& w : got->warnings) {
      if (w.find(kind) == std::string::npos) continue;
      EXPECT_TRUE(found.empty()) << "one line per kind: " << kind;
      found = w;
    }
    return found;
  };
  auto expect_has = [](const std::string& text, const std::vector<std::string>& parts) {
    for (const auto& p : parts) EXPECT_NE(text.find(p), std::string::npos) << p << " in: " << text;
  };
  expect_has(warning("missing or not a number"),
             {"4 event(s)", "first: CUPTI_ACTIVITY_KIND_KERNEL row 2 start NULL", "left out"});
  expect_has(warning("beyond any profiler's clock"),
             {"1 event(s)", "CUPTI_ACTIVITY_KIND_KERNEL row 4 start 1e+300 ns"});
  expect_has(warning("not 32-bit integers"),
             {"1 device or stream id(s)", "CUPTI_ACTIVITY_KIND_KERNEL row 5 deviceId 4294967296"});
  expect_has(warning("iteration mark(s) whose number"),
             {"1 iteration mark(s)", "NVTX_EVENTS row 3 'step 99999999999'", "belong to no step"});
  // The report names the file with each.
  auto rep = build_gpu_trace_report({path});
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  int named = 0;
  for (const auto& w : rep->warnings) named += w.find(path) != std::string::npos;
  EXPECT_GE(named, 4);
  // Nothing usable: an error that says so.
  const std::string none = file("none.sqlite");
  {
    Db db = create_db(none);
    exec(db.get(), R"sql(
      CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);
      CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId,
                                               shortName);
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('12:00', 3000, 0, 7, 2, 1);
    )sql");
  }
  auto bad = read_nsys_sqlite(none);
  ASSERT_FALSE(bad.ok());
  expect_has(std::string(bad.status().message()),
             {none, "no usable GPU events", "row 1 start '12:00'", "hint:"});
}

TEST_F(NsysReaderTest, TruncatedDatabase) {
  const std::string db = file("full.sqlite");
  write_nsys(db, two_steps());
  const auto bytes = read_file(db);
  ASSERT_TRUE(bytes.ok());
  ASSERT_GT(bytes->size(), 4 * 4096u);
  // Cut after the first page (the schema), in a later page, and inside the header.
  for (size_t keep : {size_t{4096}, bytes->size() / 2, size_t{40}}) {
    SCOPED_TRACE(keep);
    const std::string cut = file("cut.sqlite");
    ASSERT_TRUE(write_file(cut, std::string_view(*bytes).substr(0, keep)).ok());
    auto got = read_nsys_sqlite(cut);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kCorruption) << got.status().to_string();
    EXPECT_NE(got.status().message().find(cut), std::string::npos) << got.status().message();
    EXPECT_NE(got.status().message().find("hint:"), std::string::npos) << got.status().message();
  }
}

TEST_F(NsysReaderTest, EmptyKernelTableIsCpuOnly) {
  const std::string db = file("cpu.sqlite");
  {
    Db h = create_db(db);
    exec(h.get(), kSchema);
    exec(h.get(),
         "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, correlationId,"
         " nameId, returnValue) VALUES (1, 2, 1, 1, 1, 0)");
  }
  auto got = read_nsys_sqlite(db);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  for (const char* part : {db.c_str(), "CPU-only", "1 CPU events", "hint:", "--trace"}) {
    EXPECT_NE(got.status().message().find(part), std::string::npos) << got.status().message();
  }
  // Only the optional tables missing (no MEMSET, no NVTX): still read.
  const std::string few = file("few.sqlite");
  {
    Db h = create_db(few);
    exec(h.get(), kSchema);
    exec(h.get(),
         "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET; DROP TABLE NVTX_EVENTS;"
         "DROP TABLE TARGET_INFO_GPU; DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;"
         "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId,"
         " streamId, bytes, copyKind) VALUES (5, 9, 0, 1, 3, 8, 2), (20, 12, 0, 1, 3, 8,"
         " 8)");
  }
  auto ok = read_nsys_sqlite(few);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  ASSERT_EQ(ok->events.size(), 2u);
  EXPECT_EQ(ok->events[0].kind, GpuEventKind::kMemcpy);
  EXPECT_EQ(ok->names[ok->events[0].name], "Memcpy DtoH");
  EXPECT_EQ(ok->names[ok->events[1].name], "Memcpy DtoD");
  EXPECT_EQ(ok->events[1].end_ns, ok->events[1].start_ns);  // end before start: counted, clamped
  EXPECT_EQ(ok->anomalies.negative_durations, 1);
  EXPECT_EQ(ok->job, "");
  EXPECT_EQ(ok->anomalies.unmatched_launches, 2);  // no correlation ids
}

TEST_F(NsysReaderTest, ReportFileAndSeveralProcessesAreRefused) {
  const std::string rep = file("run.nsys-rep");
  ASSERT_TRUE(write_file(rep, std::string("\x01\x02nsys-rep\0\0", 12)).ok());
  auto got = build_gpu_trace_report({rep});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(got.status().message().find("nsys export --type sqlite"), std::string::npos)
      << got.status().message();

  // One report holding two processes' GPU work (nsys profile around torchrun): correlation ids
  // are per process, so it is refused rather than matched wrongly.
  const std::string both = file("node.sqlite");
  write_nsys(both, two_steps(), kPid + (int64_t{1} << 24));
  auto mixed = read_nsys_sqlite(both);
  ASSERT_FALSE(mixed.ok());
  EXPECT_NE(mixed.status().message().find("2 processes"), std::string::npos)
      << mixed.status().message();
  EXPECT_NE(mixed.status().message().find("hint:"), std::string::npos);
}

TEST_F(NsysReaderTest, DifferentGpuModelsAreDifferentJobs) {
  Scenario other = two_steps();
  other.gpu = "NVIDIA A100-SXM4-80GB";
  write_nsys(file("a.sqlite"), two_steps());
  write_nsys(file("b.sqlite"), other);
  auto got = read_gpu_traces({file("a.sqlite"), file("b.sqlite")});
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("not ranks of the same job"), std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find("A100"), std::string::npos) << got.status().message();
}

// ----- the CLI ----------------------------------------------------------------------------------

TEST_F(NsysReaderTest, CliReportsTwoRanks) {
  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built";
  write_nsys(file("A.sqlite"), two_steps());
  write_nsys(file("B.sqlite"), two_steps(3000));
  const std::string out = file("out");
  auto r = testutil::run_command(tp + " report " + file("A.sqlite") + " " + file("B.sqlite") +
                                 " --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  auto text = read_file(out + "/report.json");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const auto j = nlohmann::json::parse(*text);
  ASSERT_EQ(j.at("ranks").size(), 2u) << *text;
  EXPECT_EQ(j["ranks"][0]["rank"], 0);
  EXPECT_EQ(j["ranks"][1]["rank"], 1);
  EXPECT_EQ(j["ranks"][0]["steps"].size(), 2u);
  EXPECT_GT(j["ranks"][1]["communication_s"].get<double>(), 0);

  // A broken one among them: one line naming it, a failing exit code.
  ASSERT_TRUE(write_file(file("C.sqlite"), std::string("SQLite format 3\0", 16) + "junk").ok());
  r = testutil::run_command(tp + " report " + file("A.sqlite") + " " + file("C.sqlite") +
                            " --out " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(file("C.sqlite")), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tightpipe
