// The trace readers' numbers (`tightpipe report TRACE...`): the input picks, field by field, a
// number in every form (integer, decimal, exponent, text, null, a bool, an object, int64 and
// uint64 extremes, 1e300, negative) for the times, durations, ids, iteration numbers and
// distributedInfo of a small trace, written twice: as a Kineto JSON (distributedInfo as an object
// or as a Python repr string) and as an Nsight Systems SQLite export whose cells take any SQLite
// type. Both are read and reported. Never a crash or an overflow (sanitizer lane); every error
// names the file; every event kept lies on the clock (|t| <= kTraceNsLimit, start <= end) and a
// trace's events span at most kTraceWindowLimitNs; busy + idle = window.
//
// Input: bytes consumed left to right (missing bytes read as 0): one for the distributedInfo form
// and its two numbers, then up to 24 events of a kind byte, a name byte and six numbers each.
#include <fmt/format.h>
#include <sqlite3.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "report/gpu_internal.h"
#include "tightpipe/gpu_trace.h"

namespace {

using namespace tightpipe;

class Bytes {
 public:
  Bytes(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool done() const { return i_ >= n_; }
  uint8_t byte() { return i_ < n_ ? d_[i_++] : 0; }
  int64_t int64() {
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v = v << 8 | byte();
    int64_t out;
    std::memcpy(&out, &v, sizeof out);
    return out;
  }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

// One number, in the form the next byte picks: what JSON text writes, and what an SQLite cell
// holds (`type`: SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_NULL, SQLITE_BLOB).
struct Number {
  std::string json;
  int type = SQLITE_INTEGER;
  int64_t i = 0;
  double d = 0;
  std::string text;
};

Number number(Bytes& in) {
  Number n;
  const uint8_t form = in.byte();
  const int64_t small = static_cast<int64_t>(in.byte()) * 37 - 1000;
  switch (form % 16) {
    case 0:  // a small integer (microseconds, ids, ranks)
      n.i = small;
      n.json = std::to_string(n.i);
      break;
    case 1:  // a decimal with three digits, as Kineto writes
      n.type = SQLITE_FLOAT;
      n.d = static_cast<double>(small) + 0.125;
      n.json = fmt::format("{}.125", small);
      break;
    case 2: {  // an exponent
      const int exp = static_cast<int>(in.byte()) - 40;
      n.type = SQLITE_FLOAT;
      n.json = fmt::format("{}e{}", small, exp);
      n.d = std::strtod(n.json.c_str(), nullptr);
      break;
    }
    case 3:  // a number as text
      n.type = SQLITE_TEXT;
      n.text = std::to_string(small);
      n.json = "\"" + n.text + "\"";
      break;
    case 4:
      n.type = SQLITE_NULL;
      n.json = "null";
      break;
    case 5:
      n.i = INT64_MAX;
      n.json = "9223372036854775807";
      break;
    case 6:
      n.i = INT64_MIN;
      n.json = "-9223372036854775808";
      break;
    case 7:  // above INT64_MAX: JSON's unsigned; SQLite keeps it as a REAL
      n.type = SQLITE_FLOAT;
      n.d = 18446744073709551615.0;
      n.json = "18446744073709551615";
      break;
    case 8:
      n.type = SQLITE_FLOAT;
      n.d = form & 0x10 ? -1e300 : 1e300;
      n.json = form & 0x10 ? "-1e300" : "1e300";
      break;
    case 9:  // any int64 (negative half the time)
      n.i = in.int64();
      n.json = std::to_string(n.i);
      break;
    case 10:  // an epoch-based timestamp in microseconds with decimals beyond three
      n.type = SQLITE_FLOAT;
      n.d = 1.7e15 + static_cast<double>(small);
      n.json = fmt::format("{}.123456", 1'700'000'000'000'000 + small);
      break;
    case 11:
      n.type = SQLITE_TEXT;
      n.text = "true";
      n.json = "true";
      break;
    case 12:
      n.type = SQLITE_BLOB;
      n.text = "\x01\x02";
      n.json = "{\"v\": 1}";
      break;
    case 13:  // near the clock's limit (4e18 ns = 4e15 us)
      n.i = 3'999'999'999'999'999 + small;
      n.json = std::to_string(n.i);
      break;
    case 14:  // beyond INT32 (ids)
      n.i = 2'147'483'648LL + small;
      n.json = std::to_string(n.i);
      break;
    default:  // nanoseconds-sized plain value
      n.i = small * 1000 + 5000;
      n.json = std::to_string(n.i);
      break;
  }
  return n;
}

// An iteration name's number: a digit string in any size, or a signed one.
std::string step_text(Bytes& in) {
  switch (in.byte() % 5) {
    case 0:
      return std::to_string(in.byte());
    case 1:
      return "2147483647";
    case 2:
      return "2147483648";
    case 3:
      return "-" + std::to_string(in.byte());
    default:
      return "99999999999999999999";
  }
}

struct Event {
  int kind = 0;  // 0 kernel, 1 memcpy, 2 launch, 3 step, 4 PP range
  std::string name;
  Number ts, dur, device, stream, correlation, extra;
};

std::string json_event(const Event& e) {
  static constexpr const char* kCats[] = {"kernel", "gpu_memcpy", "cuda_runtime", "user_annotation",
                                          "user_annotation"};
  return fmt::format(
      R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": {}, "tid": {}, "ts": {}, "dur": {}, )"
      R"("args": {{"device": {}, "stream": {}, "correlation": {}}}}})",
      kCats[e.kind], e.name, e.extra.json, e.extra.json, e.ts.json, e.dur.json, e.device.json,
      e.stream.json, e.correlation.json);
}

void bind(sqlite3_stmt* s, int col, const Number& n) {
  switch (n.type) {
    case SQLITE_INTEGER:
      sqlite3_bind_int64(s, col, n.i);
      break;
    case SQLITE_FLOAT:
      sqlite3_bind_double(s, col, n.d);
      break;
    case SQLITE_TEXT:
      sqlite3_bind_text(s, col, n.text.c_str(), -1, SQLITE_TRANSIENT);
      break;
    case SQLITE_BLOB:
      sqlite3_bind_blob(s, col, n.text.data(), static_cast<int>(n.text.size()), SQLITE_TRANSIENT);
      break;
    default:
      sqlite3_bind_null(s, col);
      break;
  }
}

void run_sql(sqlite3* db, const char* sql) {
  if (sqlite3_exec(db, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
    fuzz::property_failed(std::string("the fuzzer's own SQL failed: ") + sqlite3_errmsg(db));
  }
}

// The same events as an nsys export: kernels and copies (start = ts, end = dur), launches,
// NVTX ranges; columns without a type keep whatever was bound.
void write_nsys(const std::string& path, const std::vector<Event>& events) {
  std::remove(path.c_str());
  sqlite3* db = nullptr;
  if (sqlite3_open(path.c_str(), &db) != SQLITE_OK) fuzz::property_failed("cannot create the db");
  run_sql(db,
          "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT);"
          "INSERT INTO StringIds VALUES (1, 'gemm'), (2, 'ncclDevKernel_SendRecv'), "
          "(3, 'deep_ep::internode::dispatch');"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, "
          "correlationId, shortName);"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, streamId, "
          "correlationId, copyKind);"
          "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, correlationId);"
          "CREATE TABLE NVTX_EVENTS (start, end, eventType, text);"
          "BEGIN;");
  for (const Event& e : events) {
    const char* sql =
        e.kind == 0   ? "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, ?)"
        : e.kind == 1 ? "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?, ?, ?, ?, ?, ?)"
        : e.kind == 2 ? "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?)"
                      : "INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, ?)";
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db, sql, -1, &s, nullptr) != SQLITE_OK) {
      fuzz::property_failed("the fuzzer's own insert failed");
    }
    bind(s, 1, e.ts);
    if (e.kind == 2) {
      bind(s, 2, e.correlation);
    } else if (e.kind >= 3) {
      bind(s, 2, e.dur);
      sqlite3_bind_int(s, 3, 59);
      sqlite3_bind_text(s, 4, e.name.c_str(), -1, SQLITE_TRANSIENT);
    } else {
      bind(s, 2, e.dur);
      bind(s, 3, e.device);
      bind(s, 4, e.stream);
      bind(s, 5, e.correlation);
      bind(s, 6, e.extra);
    }
    sqlite3_step(s);
    sqlite3_finalize(s);
  }
  run_sql(db, "COMMIT;");
  sqlite3_close(db);
}

void check(const Result<GpuTraceReport>& rep, const std::string& path) {
  if (!rep.ok()) {
    if (rep.status().message().find(path) == std::string::npos) {
      fuzz::property_failed("the error does not name the file: " + rep.status().to_string());
    }
    return;
  }
  (void)format_gpu_trace_text(*rep);
  (void)gpu_trace_report_json(*rep);
  (void)gpu_trace_report_html(*rep);
  (void)gpu_trace_chrome_json(*rep);
  for (const GpuTraceRank& t : rep->traces) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (const GpuEvent& e : t.events) {
      if (!report_internal::plausible_trace_ns(e.start_ns) ||
          !report_internal::plausible_trace_ns(e.end_ns) || e.start_ns > e.end_ns) {
        fuzz::property_failed("an event off the clock was kept");
      }
      lo = std::min(lo, e.start_ns);
      hi = std::max(hi, e.end_ns);
    }
    if (!t.events.empty() && hi - lo > report_internal::kTraceWindowLimitNs) {
      fuzz::property_failed("events spanning more than any profile were accepted");
    }
    if (t.rank < 0 || (t.world_size > 0 && t.rank >= t.world_size)) {
      fuzz::property_failed("a rank outside its world was accepted");
    }
  }
  for (const GpuRankReport& r : rep->ranks) {
    const GpuUsage& u = r.usage;
    if (std::abs(u.busy_s + u.idle_s - u.window_s) > 1e-9 * (1 + u.window_s)) {
      fuzz::property_failed("busy + idle != window");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bytes in(data, size);
  const uint8_t info = in.byte();
  const Number rank = number(in), world = number(in);
  std::string header;
  switch (info % 3) {
    case 0:
      header = fmt::format(R"("distributedInfo": {{"backend": "nccl", "rank": {}, )"
                           R"("world_size": {}}}, )",
                           rank.json, world.json);
      break;
    case 1: {  // a Python repr string (JSON quotes escaped)
      std::string repr =
          fmt::format("{{'backend': 'nccl', 'rank': {}, 'world_size': {}}}", rank.json, world.json);
      std::string escaped;
      for (char c : repr) escaped += c == '"' ? std::string("\\\"") : std::string(1, c);
      header = "\"distributedInfo\": \"" + escaped + "\", ";
      break;
    }
    default:
      break;
  }
  static constexpr const char* kKernels[] = {"gemm", "ncclDevKernel_SendRecv",
                                             "deep_ep::internode::dispatch", "nvshmem_put"};
  std::vector<Event> events;
  while (!in.done() && events.size() < 24) {
    Event e;
    const uint8_t kind = in.byte();
    e.kind = kind % 5;
    const uint8_t name = in.byte();
    if (e.kind <= 1) {
      e.name = kKernels[name % 4];
    } else if (e.kind == 2) {
      e.name = "cudaLaunchKernel";
    } else if (e.kind == 3) {
      e.name = (name & 1 ? "ProfilerStep#" : "step ") + step_text(in);
    } else {
      e.name = fmt::format("PP:{}F{}", name % 4, name / 4 % 8);
    }
    e.ts = number(in);
    e.dur = number(in);
    e.device = number(in);
    e.stream = number(in);
    e.correlation = number(in);
    e.extra = number(in);
    events.push_back(std::move(e));
  }

  std::string doc = "{" + header + "\"traceEvents\": [";
  for (size_t k = 0; k < events.size(); ++k) doc += (k ? ",\n" : "\n") + json_event(events[k]);
  doc += "\n]}\n";
  const std::string json_path = fuzz::write_scratch("numbers.json", doc);
  check(build_gpu_trace_report({json_path}), json_path);

  const std::string db_path = fuzz::write_scratch("numbers.sqlite", "");
  write_nsys(db_path, events);
  check(build_gpu_trace_report({db_path}), db_path);
  return 0;
}
