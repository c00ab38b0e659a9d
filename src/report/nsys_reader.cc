// Nsight Systems SQLite export reader (gpu_trace.h). Reads the tables `nsys export --type sqlite`
// writes (NVIDIA's "SQLite Schema Reference" in the Nsight Systems User Guide):
//   CUPTI_ACTIVITY_KIND_KERNEL   start, end (ns), deviceId, streamId, correlationId, demangledName
//                                / shortName (ids into StringIds)
//   CUPTI_ACTIVITY_KIND_MEMCPY   start, end, deviceId, streamId, correlationId (copyKind: the name)
//   CUPTI_ACTIVITY_KIND_MEMSET   start, end, deviceId, streamId, correlationId
//   CUPTI_ACTIVITY_KIND_RUNTIME  start, correlationId: the CPU launches
//   NVTX_EVENTS                  start, end, eventType (59 push/pop, 60 start/end range), text or
//                                textId (into StringIds): iterations and pipeline annotations
//   TARGET_INFO_GPU              id, name: the GPU model (the job, so ranks of different GPU
//                                models are not mixed)
// Tables are created lazily by the exporter: any of them may be missing. Rows are streamed; memory
// grows with the GPU events and launches, not with the file.
#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "report/gpu_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/input_file.h"

namespace tightpipe {

namespace {

using report_internal::GpuLaunched;
using report_internal::Launch;

constexpr std::string_view kKernelTable = "CUPTI_ACTIVITY_KIND_KERNEL";
constexpr std::string_view kMemcpyTable = "CUPTI_ACTIVITY_KIND_MEMCPY";
constexpr std::string_view kMemsetTable = "CUPTI_ACTIVITY_KIND_MEMSET";
constexpr std::string_view kRuntimeTable = "CUPTI_ACTIVITY_KIND_RUNTIME";
constexpr std::string_view kNvtxTable = "NVTX_EVENTS";
constexpr std::string_view kStringsTable = "StringIds";
constexpr std::string_view kGpuInfoTable = "TARGET_INFO_GPU";

// NVTX_EVENTS.eventType of ranges (ENUM_NSYS_EVENT_TYPE): NvtxPushPopRange, NvtxStartEndRange.
constexpr int kNvtxPushPopRange = 59;
constexpr int kNvtxStartEndRange = 60;

constexpr std::string_view kExportHint =
    "hint: export the report with `nsys export --type sqlite --output run.sqlite run.nsys-rep`";

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbHandle = std::unique_ptr<sqlite3, DbCloser>;

struct StmtFinalizer {
  void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
};
using StmtHandle = std::unique_ptr<sqlite3_stmt, StmtFinalizer>;

// The database of one export, opened read-only, and what its errors say.
class NsysDb {
 public:
  static Result<NsysDb> open(const std::string& path) {
    sqlite3* raw = nullptr;
    const int rc = sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
    DbHandle db(raw);  // closed on every path, also when the open failed
    NsysDb out(path, std::move(db));
    if (rc != SQLITE_OK) return out.error(rc, "open");
    sqlite3_extended_result_codes(out.db_.get(), 1);
    return out;
  }

  std::string shown() const { return printable(path_, 240); }

  // A statement over this database (the SQL is ours: table and column names are constants).
  Result<StmtHandle> prepare(const std::string& sql) const {
    sqlite3_stmt* raw = nullptr;
    const int rc = sqlite3_prepare_v2(db_.get(), sql.c_str(), -1, &raw, nullptr);
    StmtHandle stmt(raw);
    if (rc != SQLITE_OK) return error(rc, "query");
    return stmt;
  }

  // sqlite3_step: true for a row, false when done, an error otherwise.
  Result<bool> step(sqlite3_stmt* stmt) const {
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return error(rc, "read");
  }

  // The error of a failed call, by what SQLite says about the file.
  Status error(int rc, std::string_view doing) const {
    const char* msg = db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc);
    const std::string what = printable(msg ? msg : sqlite3_errstr(rc), 160);
    switch (rc & 0xff) {
      case SQLITE_CORRUPT:
        return Status::corruption(fmt::format(
            "nsys export '{}': the SQLite database is damaged or truncated ({}); hint: copy the "
            "file again or re-export it (nsys export --type sqlite)",
            shown(), what));
      case SQLITE_NOTADB:
        return Status::corruption(fmt::format(
            "nsys export '{}': not an SQLite database, or one whose header is damaged ({}); {}",
            shown(), what, kExportHint));
      case SQLITE_CANTOPEN:
      case SQLITE_PERM:
      case SQLITE_IOERR:
      case SQLITE_BUSY:
      case SQLITE_LOCKED:
        return Status::io_error(
            fmt::format("nsys export '{}': cannot {} it ({}); hint: check the "
                        "path and that the file is readable",
                        shown(), doing, what));
      default:
        return Status::invalid_argument(fmt::format("nsys export '{}': cannot {} it ({}); {}",
                                                    shown(), doing, what, kExportHint));
    }
  }

  // The tables of the database.
  Result<std::set<std::string, std::less<>>> tables() const {
    return text_column("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')", 0);
  }

  // The columns of a table.
  Result<std::set<std::string, std::less<>>> columns(std::string_view table) const {
    return text_column(fmt::format("PRAGMA table_info(\"{}\")", table), 1);
  }

  // InvalidArgument when `table` lacks one of `required`.
  Status require(std::string_view table, const std::set<std::string, std::less<>>& have,
                 std::initializer_list<std::string_view> required) const {
    for (std::string_view c : required) {
      if (!have.contains(c)) return missing_column(table, c);
    }
    return OkStatus();
  }

  Status missing_column(std::string_view table, std::string_view column) const {
    return Status::invalid_argument(fmt::format(
        "nsys export '{}': table {} has no column '{}'; hint: the reader follows the schema "
        "NVIDIA documents for `nsys export --type sqlite` (Nsight Systems User Guide, SQLite "
        "Schema Reference); re-export the report with a current nsys (nsys export --type sqlite "
        "--output run.sqlite run.nsys-rep) rather than converting it with another tool",
        shown(), table, column));
  }

 private:
  NsysDb(std::string path, DbHandle db) : path_(std::move(path)), db_(std::move(db)) {}

  // The values of column `col` of a query's rows.
  Result<std::set<std::string, std::less<>>> text_column(const std::string& sql, int col) const {
    TP_ASSIGN_OR_RETURN(StmtHandle stmt, prepare(sql));
    std::set<std::string, std::less<>> out;
    for (;;) {
      TP_ASSIGN_OR_RETURN(bool row, step(stmt.get()));
      if (!row) break;
      if (const unsigned char* t = sqlite3_column_text(stmt.get(), col)) {
        out.emplace(reinterpret_cast<const char*>(t));
      }
    }
    return out;
  }

  std::string path_;
  DbHandle db_;
};

using report_internal::TraceId;
using report_internal::TraceIssue;
using report_internal::TraceIssues;
using report_internal::TraceTime;

int64_t column_or(sqlite3_stmt* s, int i, int64_t fallback) {
  return sqlite3_column_type(s, i) == SQLITE_NULL ? fallback : sqlite3_column_int64(s, i);
}

// What a column holds that is not a number, for a message: NULL, 'text', a blob.
std::string not_a_number(sqlite3_stmt* s, int i) {
  switch (sqlite3_column_type(s, i)) {
    case SQLITE_NULL:
      return "NULL";
    case SQLITE_BLOB:
      return "a blob";
    default: {
      const unsigned char* t = sqlite3_column_text(s, i);
      return "'" + printable(t ? reinterpret_cast<const char*>(t) : "", 40) + "'";
    }
  }
}

// A timestamp column (integer nanoseconds; a REAL is rounded): SQLite would convert text to 0 and
// saturate a huge REAL, so the type is checked first.
TraceTime time_column(sqlite3_stmt* s, int i) {
  TraceTime t;
  switch (sqlite3_column_type(s, i)) {
    case SQLITE_INTEGER:
      return TraceTime::of_ns(sqlite3_column_int64(s, i));
    case SQLITE_FLOAT: {
      const double v = sqlite3_column_double(s, i);
      if (std::isfinite(v) && std::abs(v) <= static_cast<double>(report_internal::kTraceNsLimit)) {
        return TraceTime::of_ns(static_cast<int64_t>(std::llround(v)));
      }
      t.state = TraceTime::State::kBeyond;
      t.text = fmt::format("{} ns", v);
      return t;
    }
    default:
      t.state = TraceTime::State::kNotNumber;
      t.text = not_a_number(s, i);
      return t;
  }
}

// An id column: an integer (or an integral REAL); anything else is bad, NULL is missing.
TraceId id_column(sqlite3_stmt* s, int i) {
  TraceId id;
  const int type = sqlite3_column_type(s, i);
  if (type == SQLITE_NULL) return id;
  id.state = TraceId::State::kOk;
  if (type == SQLITE_INTEGER) {
    id.value = sqlite3_column_int64(s, i);
    return id;
  }
  const double v = sqlite3_column_double(s, i);
  if (type == SQLITE_FLOAT && std::isfinite(v) && std::trunc(v) == v && std::abs(v) < 9.2e18) {
    id.value = static_cast<int64_t>(v);
    return id;
  }
  id.state = TraceId::State::kBad;
  id.text = type == SQLITE_FLOAT ? fmt::format("{}", v) : not_a_number(s, i);
  return id;
}

// "CUPTI_ACTIVITY_KIND_KERNEL row 3 start": the row and column a warning names.
auto cell(std::string_view table, int64_t row, std::string_view column) {
  return [=] { return fmt::format("{} row {} {}", table, row, column); };
}

std::string_view column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  if (!t) return {};
  return {reinterpret_cast<const char*>(t), static_cast<size_t>(sqlite3_column_bytes(s, i))};
}

// CUpti_ActivityMemcpyKind (ENUM_CUDA_MEMCPY_OPER): the direction of a copy, for its name.
std::string_view copy_kind_name(int64_t kind) {
  switch (kind) {
    case 1:
      return "HtoD";
    case 2:
      return "DtoH";
    case 3:
      return "HtoA";
    case 4:
      return "AtoH";
    case 5:
      return "AtoA";
    case 6:
      return "AtoD";
    case 7:
      return "DtoA";
    case 8:
      return "DtoD";
    case 9:
      return "HtoH";
    case 10:
      return "PtoP";
    default:
      return "";
  }
}

// The text of an NVTX range as a user annotation: what precedes the first ", " (emit_nvtx appends
// ", op_id = N", ", sizes = [...]" to the record_function name), or nullopt for an operator range
// emit_nvtx writes (", seq = N": an autograd-tracked op such as "MmBackward0, seq = 3", which is
// not a user annotation; Kineto keeps those apart as cpu_op).
std::optional<std::string_view> nvtx_user_text(std::string_view text) {
  if (text.find(", seq = ") != std::string_view::npos) return std::nullopt;
  return text.substr(0, text.find(", "));
}

// What one pass over the tables collects.
struct Collected {
  GpuTraceRank trace;  // names, steps, ranges, cpu_events, negative durations as they are read
  std::vector<GpuLaunched> gpu;
  std::vector<Launch> launches;
  std::vector<GpuEventKind> name_kinds;  // classify_kernel of each name, once per name
  std::unordered_map<std::string, int32_t> name_index;
  std::unordered_set<int64_t> processes;  // globalPid of the GPU work

  int32_t intern(std::string_view n) {
    auto [it, fresh] =
        name_index.try_emplace(std::string(n), static_cast<int32_t>(trace.names.size()));
    if (fresh) {
      trace.names.emplace_back(n);
      name_kinds.push_back(classify_kernel(n));
    }
    return it->second;
  }

  TraceIssues issues;

  // One row (`row`, from 1) of a GPU table: start, end, deviceId, streamId, correlationId in
  // columns 0..4. A start or end that is not a usable time leaves the row out (counted).
  void add_gpu(sqlite3_stmt* s, std::string_view table, int64_t row, GpuEventKind kind,
               int32_t name, int pid_col) {
    const TraceTime start = time_column(s, 0), stop = time_column(s, 1);
    if (!start.check(issues, cell(table, row, "start")) ||
        !stop.check(issues, cell(table, row, "end"))) {
      return;
    }
    GpuLaunched p;
    p.event.start_ns = start.ns;
    int64_t end = stop.ns;
    if (end < p.event.start_ns) {
      ++trace.anomalies.negative_durations;
      end = p.event.start_ns;
    }
    p.event.end_ns = end;
    p.event.device =
        report_internal::id_or(id_column(s, 2), 0, issues, cell(table, row, "deviceId"));
    p.event.stream =
        report_internal::id_or(id_column(s, 3), 0, issues, cell(table, row, "streamId"));
    const TraceId corr = id_column(s, 4);
    p.correlation = corr.state == TraceId::State::kOk ? corr.value : -1;
    p.event.kind = kind == GpuEventKind::kCompute ? name_kinds[name] : kind;
    p.event.name = name;
    if (pid_col >= 0 && sqlite3_column_type(s, pid_col) != SQLITE_NULL) {
      processes.insert(sqlite3_column_int64(s, pid_col));
    }
    gpu.push_back(p);
  }
};

using Columns = std::set<std::string, std::less<>>;

// Kernel names: StringIds values, looked up once per id (exports repeat a few thousand names
// over millions of kernels) and interned.
class KernelNames {
 public:
  static Result<KernelNames> open(const NsysDb& db) {
    TP_ASSIGN_OR_RETURN(StmtHandle stmt, db.prepare("SELECT value FROM StringIds WHERE id = ?"));
    return KernelNames(std::move(stmt));
  }
  // The name index of StringIds id `id`; -1 when no string has that id.
  Result<int32_t> of(const NsysDb& db, int64_t id, Collected& out) {
    auto it = cache_.find(id);
    if (it != cache_.end()) return it->second;
    sqlite3_reset(lookup_.get());
    sqlite3_bind_int64(lookup_.get(), 1, id);
    TP_ASSIGN_OR_RETURN(bool row, db.step(lookup_.get()));
    const std::string_view value = row ? column_text(lookup_.get(), 0) : std::string_view();
    const int32_t name = value.empty() ? -1 : out.intern(value);
    cache_.emplace(id, name);
    return name;
  }

 private:
  explicit KernelNames(StmtHandle lookup) : lookup_(std::move(lookup)) {}
  StmtHandle lookup_;
  std::unordered_map<int64_t, int32_t> cache_;
};

// The GPU activity of one table: kernels (names through StringIds), copies or memsets.
Status read_gpu_table(const NsysDb& db, std::string_view table, GpuEventKind kind,
                      bool have_strings, Collected& out) {
  TP_ASSIGN_OR_RETURN(Columns cols, db.columns(table));
  TP_RETURN_IF_ERROR(
      db.require(table, cols, {"start", "end", "deviceId", "streamId", "correlationId"}));
  std::string select = "SELECT start, \"end\", deviceId, streamId, correlationId";
  int next = 5;
  int demangled_col = -1, short_col = -1, copy_col = -1, pid_col = -1;
  std::optional<KernelNames> kernel_names;
  if (kind == GpuEventKind::kCompute) {
    const bool demangled = cols.contains("demangledName"), short_name = cols.contains("shortName");
    if (!demangled && !short_name) return db.missing_column(table, "demangledName");
    if (!have_strings) {
      return Status::invalid_argument(fmt::format(
          "nsys export '{}': table {} names its kernels through table StringIds, which the file "
          "lacks; {}",
          db.shown(), table, kExportHint));
    }
    if (demangled) {
      select += ", demangledName";
      demangled_col = next++;
    }
    if (short_name) {
      select += ", shortName";
      short_col = next++;
    }
    TP_ASSIGN_OR_RETURN(KernelNames names, KernelNames::open(db));
    kernel_names.emplace(std::move(names));
  } else if (kind == GpuEventKind::kMemcpy && cols.contains("copyKind")) {
    select += ", copyKind";
    copy_col = next++;
  }
  if (cols.contains("globalPid")) {
    select += ", globalPid";
    pid_col = next++;
  }
  TP_ASSIGN_OR_RETURN(StmtHandle stmt, db.prepare(fmt::format("{} FROM \"{}\"", select, table)));
  std::unordered_map<int64_t, int32_t> copy_names;  // copyKind -> name index
  for (int64_t rows = 1;; ++rows) {
    TP_ASSIGN_OR_RETURN(bool row, db.step(stmt.get()));
    if (!row) break;
    sqlite3_stmt* s = stmt.get();
    int32_t name = -1;
    if (kind == GpuEventKind::kCompute) {
      // demangledName, else shortName.
      for (int col : {demangled_col, short_col}) {
        if (name >= 0 || col < 0 || sqlite3_column_type(s, col) == SQLITE_NULL) continue;
        TP_ASSIGN_OR_RETURN(name, kernel_names->of(db, sqlite3_column_int64(s, col), out));
      }
      if (name < 0) name = out.intern("(unnamed kernel)");
    } else if (kind == GpuEventKind::kMemcpy) {
      const int64_t copy_kind = copy_col >= 0 ? column_or(s, copy_col, 0) : 0;
      auto [it, fresh] = copy_names.try_emplace(copy_kind, -1);
      if (fresh) {
        const std::string_view dir = copy_kind_name(copy_kind);
        it->second = out.intern(dir.empty() ? "Memcpy" : fmt::format("Memcpy {}", dir));
      }
      name = it->second;
    } else {
      name = out.intern("Memset");
    }
    out.add_gpu(s, table, rows, kind, name, pid_col);
  }
  return OkStatus();
}

// The CPU launches: CUDA runtime calls with a correlation id.
Status read_launches(const NsysDb& db, Collected& out) {
  TP_ASSIGN_OR_RETURN(Columns cols, db.columns(kRuntimeTable));
  TP_RETURN_IF_ERROR(db.require(kRuntimeTable, cols, {"start", "correlationId"}));
  TP_ASSIGN_OR_RETURN(
      StmtHandle stmt,
      db.prepare(fmt::format("SELECT start, correlationId FROM \"{}\"", kRuntimeTable)));
  for (int64_t rows = 1;; ++rows) {
    TP_ASSIGN_OR_RETURN(bool row, db.step(stmt.get()));
    if (!row) break;
    ++out.trace.cpu_events;
    sqlite3_stmt* s = stmt.get();
    const TraceId corr = id_column(s, 1);
    if (corr.state != TraceId::State::kOk || corr.value < 0) continue;  // launches nothing known
    const TraceTime start = time_column(s, 0);
    if (!start.check(out.issues, cell(kRuntimeTable, rows, "start"))) continue;
    out.launches.push_back({corr.value, start.ns});
  }
  return OkStatus();
}

// NVTX ranges: iterations (nvtx_iteration) and pipeline annotations (annotated_action).
Status read_nvtx(const NsysDb& db, bool have_strings, Collected& out) {
  TP_ASSIGN_OR_RETURN(Columns cols, db.columns(kNvtxTable));
  TP_RETURN_IF_ERROR(db.require(kNvtxTable, cols, {"start", "end", "eventType"}));
  const bool text = cols.contains("text");
  const bool text_id = cols.contains("textId") && have_strings;
  if (!text && !cols.contains("textId")) return db.missing_column(kNvtxTable, "text");
  std::string sql = "SELECT n.start, n.\"end\", ";
  sql += text && text_id ? "COALESCE(n.text, s.value)" : text ? "n.text" : "s.value";
  sql += fmt::format(" FROM \"{}\" AS n", kNvtxTable);
  if (text_id) sql += " LEFT JOIN StringIds AS s ON s.id = n.textId";
  sql += fmt::format(" WHERE n.eventType IN ({}, {})", kNvtxPushPopRange, kNvtxStartEndRange);
  TP_ASSIGN_OR_RETURN(StmtHandle stmt, db.prepare(sql));
  for (int64_t rows = 1;; ++rows) {
    TP_ASSIGN_OR_RETURN(bool row, db.step(stmt.get()));
    if (!row) break;
    ++out.trace.cpu_events;
    sqlite3_stmt* s = stmt.get();
    const std::optional<std::string_view> name = nvtx_user_text(column_text(s, 2));
    if (!name || name->empty()) continue;
    const report_internal::IterationName it = report_internal::nvtx_iteration_name(*name);
    if (!it.is_iteration && !report_internal::annotated_action(*name)) continue;
    auto what = [&](std::string_view column) {
      return [&, column] {
        return fmt::format("{} row {} '{}'{}", kNvtxTable, rows, printable(*name, 60), column);
      };
    };
    if (it.is_iteration && !it.step) {
      out.issues.add(TraceIssue::kStepNumber, what(""));
      continue;
    }
    // A range never closed has end NULL: no extent, counted with the other unusable times.
    const TraceTime start = time_column(s, 0), stop = time_column(s, 1);
    if (!start.check(out.issues, what(" start")) || !stop.check(out.issues, what(" end"))) {
      continue;
    }
    const int64_t end = std::max(start.ns, stop.ns);
    if (it.is_iteration) {
      out.trace.steps.push_back({*it.step, start.ns, end});
    } else {
      out.trace.ranges.push_back({std::string(*name), start.ns, end});
    }
  }
  return OkStatus();
}

// The name of the GPU the events ran on (TARGET_INFO_GPU.id is the CUDA device id of the events),
// else of the first GPU listed; empty without the table or a name.
Result<std::string> read_gpu_name(const NsysDb& db, int32_t device) {
  TP_ASSIGN_OR_RETURN(Columns cols, db.columns(kGpuInfoTable));
  if (!cols.contains("name")) return std::string();
  const std::string order =
      cols.contains("id") ? fmt::format(" ORDER BY id <> {}, id", device) : "";
  TP_ASSIGN_OR_RETURN(
      StmtHandle stmt,
      db.prepare(fmt::format("SELECT name FROM \"{}\" WHERE name IS NOT NULL AND name <> ''{} "
                             "LIMIT 1",
                             kGpuInfoTable, order)));
  TP_ASSIGN_OR_RETURN(bool row, db.step(stmt.get()));
  if (!row) return std::string();
  return std::string(column_text(stmt.get(), 0));
}

bool is_nsys_table(std::string_view t) {
  return t == kStringsTable || t == kNvtxTable || t.starts_with("CUPTI_ACTIVITY_KIND_") ||
         t.starts_with("TARGET_INFO_") || t.starts_with("ENUM_NSYS_") ||
         t.starts_with("META_DATA_") || t == "ThreadNames" || t == "ANALYSIS_DETAILS";
}

}  // namespace

Result<GpuTraceRank> read_nsys_sqlite(const std::string& path) {
  TP_RETURN_IF_ERROR(check_input_file("nsys export", path, input_kind::kGpuTrace));
  TP_ASSIGN_OR_RETURN(NsysDb db, NsysDb::open(path));
  TP_ASSIGN_OR_RETURN(auto tables, db.tables());
  if (std::none_of(tables.begin(), tables.end(), [](auto& t) { return is_nsys_table(t); })) {
    return Status::invalid_argument(fmt::format(
        "nsys export '{}': an SQLite database but not an Nsight Systems export (none of its {} "
        "table(s) is one nsys writes: no {}, {}, {}); {}",
        db.shown(), tables.size(), kKernelTable, kNvtxTable, kStringsTable, kExportHint));
  }
  const bool have_strings = tables.contains(kStringsTable);
  Collected got;
  for (auto [table, kind] : {std::pair{kKernelTable, GpuEventKind::kCompute},
                             std::pair{kMemcpyTable, GpuEventKind::kMemcpy},
                             std::pair{kMemsetTable, GpuEventKind::kMemset}}) {
    if (tables.contains(table)) {
      TP_RETURN_IF_ERROR(read_gpu_table(db, table, kind, have_strings, got));
    }
  }
  if (tables.contains(kRuntimeTable)) TP_RETURN_IF_ERROR(read_launches(db, got));
  if (tables.contains(kNvtxTable)) TP_RETURN_IF_ERROR(read_nvtx(db, have_strings, got));
  if (got.gpu.empty() && got.issues.times_left_out() > 0) {
    return Status::invalid_argument(fmt::format(
        "nsys export '{}': no usable GPU events: {} row(s) have a time that is NULL, not a number "
        "or beyond any clock (first: {}); hint: the export is damaged or was edited: start and "
        "end are integer nanoseconds; {}",
        db.shown(), got.issues.times_left_out(), got.issues.first_time_issue(), kExportHint));
  }
  if (got.gpu.empty()) {
    return Status::invalid_argument(fmt::format(
        "nsys export '{}': a CPU-only trace: no GPU events ({}, {} and {} are missing or empty) "
        "among its {} CPU events; hint: profile with CUDA tracing on (nsys profile --trace "
        "cuda,nvtx) and export again",
        db.shown(), kKernelTable, kMemcpyTable, kMemsetTable, got.trace.cpu_events));
  }
  if (got.processes.size() > 1) {
    return Status::invalid_argument(fmt::format(
        "nsys export '{}': GPU work of {} processes in one report (correlation ids are per "
        "process, so launches cannot be matched); hint: profile each rank to its own report "
        "(e.g. nsys profile --output rank%q{{RANK}} ...) and give one export per rank",
        db.shown(), got.processes.size()));
  }

  GpuTraceRank& out = got.trace;
  out.path = path;
  out.format = "nsys";
  if (tables.contains(kGpuInfoTable)) {
    TP_ASSIGN_OR_RETURN(out.job, read_gpu_name(db, got.gpu.front().event.device));
  }
  TP_RETURN_IF_ERROR(report_internal::attribute_and_sort(out, std::move(got.gpu),
                                                         std::move(got.launches), got.issues));
  return std::move(out);
}

}  // namespace tightpipe
