// Kineto (PyTorch profiler) trace reader: one SAX pass over the JSON, gzip'd or not, keeping
// only what the analysis needs (gpu_trace.h). The document is never held: memory grows with the
// number of GPU events and launches, not with the file.
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <streambuf>
#include <unordered_map>

#include "report/gpu_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/input_file.h"

namespace tightpipe {

namespace {

// A read buffer over a gzFile (zlib reads plain files through the same calls).
class GzStreamBuf : public std::streambuf {
 public:
  explicit GzStreamBuf(gzFile f) : f_(f), buf_(1 << 20) {}
  int error() const { return error_; }
  std::string error_text() const { return error_text_; }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    const int n = gzread(f_, buf_.data(), static_cast<unsigned>(buf_.size()));
    if (n <= 0) {
      int err = Z_OK;
      const char* msg = gzerror(f_, &err);
      if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
        error_ = err == Z_OK ? Z_DATA_ERROR : err;
        error_text_ = msg ? msg : "read error";
      }
      return traits_type::eof();
    }
    setg(buf_.data(), buf_.data(), buf_.data() + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  gzFile f_;
  std::vector<char> buf_;
  int error_ = Z_OK;
  std::string error_text_;
};

struct GzCloser {
  void operator()(gzFile f) const {
    if (f) gzclose(f);
  }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

using report_internal::GpuLaunched;
using report_internal::Launch;
using report_internal::quoted_value;
using report_internal::TraceId;
using report_internal::TraceIssue;
using report_internal::TraceIssues;
using report_internal::TraceTime;

// One JSON scalar (or the start of an object or array) as the SAX parser hands it over.
struct Scalar {
  enum class Kind { kInt, kUnsigned, kFloat, kString, kOther } kind = Kind::kOther;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  std::string_view text;  // a float or a string as written; kOther: "null", "true", "an object"
};

constexpr int64_t kMaxMicros = report_internal::kTraceNsLimit / 1000;

TraceTime beyond(std::string text) {
  TraceTime t;
  t.state = TraceTime::State::kBeyond;
  t.text = std::move(text);
  return t;
}

// Whole microseconds as a time.
TraceTime time_of_micros(int64_t us) {
  if (us < -kMaxMicros || us > kMaxMicros) return beyond(fmt::format("{} us", us));
  return TraceTime::of_ns(us * 1000);
}

// A JSON decimal in microseconds (`s` as written, `v` its double) as integer nanoseconds: exact
// for the three decimals Kineto writes (a double would round epoch-based timestamps to a quarter
// microsecond), through the double for an exponent.
TraceTime time_of_decimal(std::string_view s, double v) {
  if (!std::isfinite(v) || std::abs(v) > static_cast<double>(kMaxMicros)) {
    return beyond(printable(s, 40) + " us");
  }
  std::string_view t = s;
  bool neg = false;
  if (!t.empty() && t[0] == '-') {
    neg = true;
    t.remove_prefix(1);
  }
  const size_t dot = t.find('.');
  const std::string_view whole = t.substr(0, dot);
  int64_t w = 0;
  if (whole.empty() || t.find_first_of("eE") != std::string_view::npos ||
      std::from_chars(whole.data(), whole.data() + whole.size(), w).ec != std::errc() ||
      w > kMaxMicros) {
    return TraceTime::of_ns(static_cast<int64_t>(std::llround(v * 1000.0)));  // |v| <= 4e15
  }
  int64_t frac = 0;
  int digits = 0;
  int round_up = 0;
  if (dot != std::string_view::npos) {
    for (char ch : t.substr(dot + 1)) {
      if (ch < '0' || ch > '9') break;
      if (digits < 3) {
        frac = frac * 10 + (ch - '0');
      } else if (digits == 3) {
        round_up = ch >= '5';
      } else {
        break;
      }
      ++digits;
    }
  }
  for (int d = std::min(digits, 3); d < 3; ++d) frac *= 10;
  const int64_t ns = w * 1000 + frac + round_up;  // <= 4e18 + 1000
  return TraceTime::of_ns(neg ? -ns : ns);
}

// A time field (microseconds) of any JSON form.
TraceTime time_of(const Scalar& v) {
  switch (v.kind) {
    case Scalar::Kind::kInt:
      return time_of_micros(v.i);
    case Scalar::Kind::kUnsigned:
      return beyond(fmt::format("{} us", v.u));  // above INT64_MAX (smaller ones come as kInt)
    case Scalar::Kind::kFloat:
      return time_of_decimal(v.text, v.d);
    case Scalar::Kind::kString:
    case Scalar::Kind::kOther: {
      TraceTime t;
      t.state = TraceTime::State::kNotNumber;
      t.text = quoted_value(v.text, v.kind == Scalar::Kind::kString);
      return t;
    }
  }
  return {};
}

// An integer id (device, stream, correlation, rank...) of any JSON form: integers and integral
// decimals are ids; anything else is bad.
TraceId id_of(const Scalar& v) {
  TraceId id;
  id.state = TraceId::State::kOk;
  switch (v.kind) {
    case Scalar::Kind::kInt:
      id.value = v.i;
      return id;
    case Scalar::Kind::kFloat:
      if (std::isfinite(v.d) && std::trunc(v.d) == v.d && std::abs(v.d) < 9.2e18) {
        id.value = static_cast<int64_t>(v.d);
        return id;
      }
      break;
    case Scalar::Kind::kUnsigned:
    case Scalar::Kind::kString:
    case Scalar::Kind::kOther:
      break;
  }
  id.state = TraceId::State::kBad;
  id.text = v.kind == Scalar::Kind::kUnsigned
                ? std::to_string(v.u)
                : quoted_value(v.text, v.kind == Scalar::Kind::kString);
  return id;
}

// The same for a value of a JSON document (distributedInfo written as a string).
TraceId id_of(const nlohmann::json& j) {
  Scalar v;
  std::string text;
  if (j.is_number_integer() && !j.is_number_unsigned()) {
    v.kind = Scalar::Kind::kInt;
    v.i = j.get<int64_t>();
  } else if (j.is_number_unsigned()) {
    const uint64_t u = j.get<uint64_t>();
    v.kind = u <= static_cast<uint64_t>(INT64_MAX) ? Scalar::Kind::kInt : Scalar::Kind::kUnsigned;
    v.i = static_cast<int64_t>(u & static_cast<uint64_t>(INT64_MAX));
    v.u = u;
  } else if (j.is_number_float()) {
    v.kind = Scalar::Kind::kFloat;
    v.d = j.get<double>();
    text = j.dump();
    v.text = text;
  } else if (j.is_string()) {
    v.kind = Scalar::Kind::kString;
    v.text = j.get_ref<const std::string&>();
  } else {
    text = j.dump();
    v.text = text;
  }
  return id_of(v);
}

// A Python literal, as torch writes distributedInfo when it is a string ("{'backend': 'nccl',
// 'rank': 0, 'world_size': 8}"), as JSON text: single-quoted strings double-quoted, True, False
// and None as true, false and null, tuples as arrays, trailing commas dropped. JSON passes
// unchanged.
std::string python_literal_to_json(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (c == '\'' || c == '"') {
      out += '"';
      for (++i; i < s.size() && s[i] != c; ++i) {
        if (s[i] == '\\' && i + 1 < s.size()) {
          if (s[i + 1] != '\'') out += '\\';
          out += s[++i];
        } else {
          if (s[i] == '"') out += '\\';
          out += s[i];
        }
      }
      out += '"';
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      const std::string_view word = s.substr(i, j - i);
      out += word == "True" ? "true" : word == "False" ? "false" : word == "None" ? "null" : word;
      i = j;
      continue;
    }
    if (c == ',') {
      size_t j = i + 1;
      while (j < s.size() && std::isspace(static_cast<unsigned char>(s[j]))) ++j;
      if (j < s.size() && (s[j] == ']' || s[j] == '}' || s[j] == ')')) {
        i = j;
        continue;
      }
    }
    out += c == '(' ? '[' : c == ')' ? ']' : c;
    ++i;
  }
  return out;
}

enum class Cat { kOther, kKernel, kMemcpy, kMemset, kLaunch, kAnnotation, kCpuOp };

Cat cat_of(std::string_view c) {
  if (c == "kernel") return Cat::kKernel;
  if (c == "gpu_memcpy") return Cat::kMemcpy;
  if (c == "gpu_memset") return Cat::kMemset;
  if (c == "cuda_runtime" || c == "cuda_driver" || c == "hip_runtime") return Cat::kLaunch;
  if (c == "user_annotation") return Cat::kAnnotation;
  if (c == "cpu_op") return Cat::kCpuOp;
  return Cat::kOther;
}

std::string_view cat_name(Cat c) {
  switch (c) {
    case Cat::kKernel:
      return "kernel";
    case Cat::kMemcpy:
      return "gpu_memcpy";
    case Cat::kMemset:
      return "gpu_memset";
    case Cat::kLaunch:
      return "launch";
    case Cat::kAnnotation:
      return "user_annotation";
    case Cat::kCpuOp:
      return "cpu_op";
    case Cat::kOther:
      break;
  }
  return "event";
}

// One event object's fields as they stream by.
struct RawEvent {
  bool is_x = false;
  Cat cat = Cat::kOther;
  std::string name;
  TraceTime ts, dur;
  TraceId pid, tid, correlation, device, stream;
  void clear() { *this = RawEvent{}; }
};

// The SAX handler. Depth 1 is the top-level object; traceEvents elements are depth-2 objects.
class KinetoSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  // Results.
  bool saw_top_object = false, saw_trace_events = false;
  std::vector<GpuLaunched> gpu;
  std::vector<Launch> launches;
  std::vector<StepMark> steps;
  std::vector<CpuRange> ranges;
  std::vector<int64_t> range_tids;    // the thread of each of `ranges` (-1: not said)
  std::vector<CpuRange> comm_ranges;  // PP:<stage>SEND_*/RECV_* ranges (cpu_pipeline_events)
  // cpu_op events (start, thread), for a CPU-only trace of a pipelining run (cpu_pipeline_events)
  std::vector<std::pair<int64_t, int64_t>> cpu_ops;
  int64_t cpu_events = 0;
  int32_t intern_name(const std::string& n) { return intern(n); }
  int64_t negative = 0;
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> name_index;
  std::vector<GpuEventKind> kernel_kinds;  // classify_kernel of each name, once per name
  TraceIssues issues;
  // distributedInfo (an object, or the string of a Python dict) and deviceProperties.
  bool saw_distributed = false;
  TraceId rank, world_size;
  std::string backend, nccl_version, device_name;
  std::string distributed_error;  // not empty: a distributedInfo string that is no dict

  bool null() override { return scalar({Scalar::Kind::kOther, 0, 0, 0, "null"}); }
  bool boolean(bool b) override {
    return scalar({Scalar::Kind::kOther, 0, 0, 0, b ? "true" : "false"});
  }
  bool number_integer(number_integer_t v) override {
    return scalar({Scalar::Kind::kInt, v, 0, 0, {}});
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (v <= static_cast<number_unsigned_t>(INT64_MAX)) {
      return scalar({Scalar::Kind::kInt, static_cast<int64_t>(v), 0, 0, {}});
    }
    return scalar({Scalar::Kind::kUnsigned, 0, v, 0, {}});
  }
  bool number_float(number_float_t v, const string_t& s) override {
    return scalar({Scalar::Kind::kFloat, 0, 0, v, s});
  }
  bool string(string_t& v) override {
    if (in_event() && depth_ == 3) {
      if (key_ == "ph") {
        ev_.is_x = v == "X";
        return true;
      }
      if (key_ == "cat") {
        ev_.cat = cat_of(v);
        return true;
      }
      if (key_ == "name") {
        ev_.name = std::move(v);
        return true;
      }
    } else if (section_ == Section::kDistributed && depth_ == 2) {
      if (key_ == "backend") {
        backend = v;
        return true;
      }
      if (key_ == "nccl_version") {
        nccl_version = v;
        return true;
      }
    } else if (section_ == Section::kNone && depth_ == 1 && key_ == "distributedInfo") {
      distributed_from_text(v);
      return true;
    } else if (section_ == Section::kDevices && depth_ == 3 && key_ == "name" &&
               device_name.empty()) {
      device_name = v;
      return true;
    }
    return scalar({Scalar::Kind::kString, 0, 0, 0, v});
  }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) saw_top_object = true;
    if (depth_ == 2 && section_ == Section::kNone && key_ == "distributedInfo") {
      section_ = Section::kDistributed;
      saw_distributed = true;
    }
    if (depth_ == 3 && section_ == Section::kEvents) {
      ev_.clear();
      event_open_ = true;
      ++event_index_;
    }
    if (depth_ == 4 && event_open_ && key_ == "args") {
      in_args_ = true;
    } else {
      compound("an object");
    }
    key_.clear();
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool end_object() override {
    if (depth_ == 4 && in_args_) in_args_ = false;
    if (depth_ == 3 && event_open_) {
      event_open_ = false;
      finish_event();
    }
    if (depth_ == 2 && section_ == Section::kDistributed) section_ = Section::kNone;
    --depth_;
    key_.clear();
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth_;
    if (depth_ == 2 && key_ == "traceEvents") {
      section_ = Section::kEvents;
      saw_trace_events = true;
    } else if (depth_ == 2 && key_ == "deviceProperties") {
      section_ = Section::kDevices;
    } else {
      compound("an array");
    }
    key_.clear();
    return true;
  }
  bool end_array() override {
    if (depth_ == 2 && (section_ == Section::kEvents || section_ == Section::kDevices)) {
      section_ = Section::kNone;
    }
    --depth_;
    key_.clear();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&,
                   const nlohmann::detail::exception& ex) override {
    error_pos = pos;
    error_text = ex.what();
    return false;
  }

  std::size_t error_pos = 0;
  std::string error_text;

 private:
  enum class Section { kNone, kEvents, kDistributed, kDevices };
  bool in_event() const { return event_open_; }

  // An object or array where a number belongs (called after depth_ was raised to its level).
  void compound(std::string_view what) {
    --depth_;  // the level of the key it is the value of
    scalar({Scalar::Kind::kOther, 0, 0, 0, what});
    ++depth_;
  }

  // A value at the current key: the numbers the analysis reads, in any JSON form.
  bool scalar(const Scalar& v) {
    if (in_event()) {
      if (depth_ == 3) {
        if (key_ == "ts") {
          ev_.ts = time_of(v);
        } else if (key_ == "dur") {
          ev_.dur = time_of(v);
        } else if (key_ == "pid") {
          ev_.pid = id_of(v);
        } else if (key_ == "tid") {
          ev_.tid = id_of(v);
        }
      } else if (depth_ == 4 && in_args_) {
        if (key_ == "correlation") {
          ev_.correlation = id_of(v);
        } else if (key_ == "device") {
          ev_.device = id_of(v);
        } else if (key_ == "stream") {
          ev_.stream = id_of(v);
        }
      }
    } else if (section_ == Section::kDistributed && depth_ == 2) {
      if (key_ == "rank") {
        rank = id_of(v);
      } else if (key_ == "world_size") {
        world_size = id_of(v);
      }
    }
    return true;
  }

  // distributedInfo written as a string: the repr of a Python dict (or JSON text).
  void distributed_from_text(const std::string& text) {
    saw_distributed = true;
    const nlohmann::json j = nlohmann::json::parse(python_literal_to_json(text), nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      distributed_error = fmt::format(
          "its distributedInfo is a string that is neither a Python dict nor JSON ({}); hint: "
          "write distributedInfo as an object, e.g. {{\"rank\": 0, \"world_size\": 8}}",
          quoted_value(text, true));
      return;
    }
    if (auto it = j.find("rank"); it != j.end()) rank = id_of(*it);
    if (auto it = j.find("world_size"); it != j.end()) world_size = id_of(*it);
    if (auto it = j.find("backend"); it != j.end() && it->is_string())
      backend = it->get<std::string>();
    if (auto it = j.find("nccl_version"); it != j.end() && it->is_string()) {
      nccl_version = it->get<std::string>();
    }
  }

  int32_t intern(const std::string& n) {
    auto [it, fresh] = name_index.try_emplace(n, static_cast<int32_t>(names.size()));
    if (fresh) {
      names.push_back(n);
      kernel_kinds.push_back(classify_kernel(n));
    }
    return it->second;
  }

  // "kernel 'gemm' (traceEvents[12]) "ts":": the event and field a warning names.
  auto field(std::string_view f) const {
    return [this, f] {
      return fmt::format("{} '{}' (traceEvents[{}]) \"{}\":", cat_name(ev_.cat),
                         printable(ev_.name, 60), event_index_, f);
    };
  }

  void finish_event() {
    if (!ev_.is_x) return;
    switch (ev_.cat) {
      case Cat::kKernel:
      case Cat::kMemcpy:
      case Cat::kMemset: {
        if (!ev_.ts.check(issues, field("ts")) || !ev_.dur.check(issues, field("dur"))) return;
        GpuLaunched p;
        int64_t dur = ev_.dur.ns;
        if (dur < 0) {
          ++negative;
          dur = 0;
        }
        // Both within kTraceNsLimit: the sum cannot overflow.
        const TraceTime end = TraceTime::of_ns(ev_.ts.ns + dur);
        if (!end.check(issues, field("ts + dur"))) return;
        p.event.start_ns = ev_.ts.ns;
        p.event.end_ns = end.ns;
        p.event.device = report_internal::id_or(
            ev_.device.state != TraceId::State::kMissing ? ev_.device : ev_.pid, 0, issues,
            field("device"));
        p.event.stream = report_internal::id_or(
            ev_.stream.state != TraceId::State::kMissing ? ev_.stream : ev_.tid, 0, issues,
            field("stream"));
        p.event.name = intern(ev_.name);
        p.event.kind = ev_.cat == Cat::kMemcpy   ? GpuEventKind::kMemcpy
                       : ev_.cat == Cat::kMemset ? GpuEventKind::kMemset
                                                 : kernel_kinds[p.event.name];
        p.correlation = ev_.correlation.state == TraceId::State::kOk ? ev_.correlation.value : -1;
        gpu.push_back(p);
        return;
      }
      case Cat::kLaunch:
        ++cpu_events;
        if (ev_.correlation.state != TraceId::State::kOk || ev_.correlation.value < 0) return;
        if (!ev_.ts.check(issues, field("ts"))) return;
        launches.push_back({ev_.correlation.value, ev_.ts.ns});
        return;
      case Cat::kAnnotation: {
        ++cpu_events;
        const report_internal::IterationName it = report_internal::profiler_step_name(ev_.name);
        if (!it.is_iteration && !report_internal::annotated_action(ev_.name)) {
          // PyTorch's pipelining SEND/RECV ranges: kept aside for a CPU-only trace.
          if (!ev_.name.starts_with("PP:") || !ev_.ts.ok() || !ev_.dur.ok()) return;
          const auto a = parse_action(std::string_view(ev_.name).substr(3));
          if (!a.ok() || !is_comm(a->type)) return;
          const TraceTime end = TraceTime::of_ns(ev_.ts.ns + std::max<int64_t>(0, ev_.dur.ns));
          if (end.ok()) comm_ranges.push_back({ev_.name, ev_.ts.ns, end.ns});
          return;
        }
        if (it.is_iteration && !it.step) {
          issues.add(TraceIssue::kStepNumber, [&] {
            return fmt::format("'{}' (traceEvents[{}])", printable(ev_.name, 60), event_index_);
          });
          return;
        }
        if (!ev_.ts.check(issues, field("ts")) || !ev_.dur.check(issues, field("dur"))) return;
        const TraceTime end = TraceTime::of_ns(ev_.ts.ns + std::max<int64_t>(0, ev_.dur.ns));
        if (!end.check(issues, field("ts + dur"))) return;
        if (it.is_iteration) {
          steps.push_back({*it.step, ev_.ts.ns, end.ns});
        } else {
          ranges.push_back({ev_.name, ev_.ts.ns, end.ns});
          range_tids.push_back(ev_.tid.state == TraceId::State::kOk ? ev_.tid.value : -1);
        }
        return;
      }
      case Cat::kCpuOp:
        ++cpu_events;
        if (ev_.ts.ok()) {
          cpu_ops.push_back({ev_.ts.ns, ev_.tid.state == TraceId::State::kOk ? ev_.tid.value : -1});
        }
        return;
      case Cat::kOther:
        ++cpu_events;
        return;
    }
  }

  int depth_ = 0;
  Section section_ = Section::kNone;
  std::string key_;
  bool event_open_ = false, in_args_ = false;
  int64_t event_index_ = -1;  // of the open event in traceEvents
  RawEvent ev_;
};

// A CPU-only trace of PyTorch's pipelining runtime (torch.distributed.pipelining on gloo,
// docs/torch.md): no GPU, so the thread that runs the actions stands for the device. Each
// PP:<compute action> range (F, I, B, W, OVERLAP_F_B) becomes one compute event, from the first
// cpu_op that starts inside it on the range's thread to the range's end: the runtime first waits
// for the action's received input inside the same range, with no op of its own (idle), then
// computes (an empty event at the range's end when no op starts inside it). Each
// PP:<stage>SEND_*/RECV_* range (posting an isend / irecv) becomes one P2P event,
// the whole range; the waits (WAIT_SEND_*, and the wait at the head of a compute range) are idle.
// Each event gets a launch at its start, so attribute_and_sort ties it to its range. Returns how
// many compute events it made (0: the trace has no PP: compute range).
int64_t cpu_pipeline_events(KinetoSax& sax) {
  auto& ops = sax.cpu_ops;  // (start, thread)
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second < b.second : a.first < b.first;
  });
  int64_t made = 0, correlation = 0;
  for (const CpuRange& r : sax.comm_ranges) {
    GpuLaunched g;
    g.event.start_ns = r.start_ns;
    g.event.end_ns = r.end_ns;
    g.event.name = sax.intern_name(r.name);
    g.event.kind = GpuEventKind::kP2P;
    g.correlation = correlation;
    sax.gpu.push_back(g);
    sax.launches.push_back({correlation++, r.start_ns});
  }
  for (size_t i = 0; i < sax.ranges.size(); ++i) {
    const CpuRange& r = sax.ranges[i];
    if (!r.name.starts_with("PP:") || !report_internal::annotated_action(r.name)) continue;
    const int64_t tid = sax.range_tids[i];
    auto it = std::lower_bound(ops.begin(), ops.end(), std::pair<int64_t, int64_t>{r.start_ns, tid},
                               [](const auto& op, const auto& key) {
                                 return op.second != key.second ? op.second < key.second
                                                                : op.first < key.first;
                               });
    // No op inside (stage 0's I: no input gradient to compute): an empty event at the range's
    // end, so that the action still has its (zero) cost.
    const bool none = it == ops.end() || it->second != tid || it->first > r.end_ns;
    GpuLaunched g;
    g.event.start_ns = none ? r.end_ns : it->first;
    g.event.end_ns = r.end_ns;
    g.event.name = sax.intern_name(r.name);
    g.event.kind = GpuEventKind::kCompute;
    g.correlation = correlation;
    sax.gpu.push_back(g);
    sax.launches.push_back({correlation++, none ? r.start_ns : it->first});  // inside the range
    ++made;
  }
  return made;
}

// The rank and world size distributedInfo says, checked: a rank is 0 or more and inside the
// world, a world size 1 or more (both int32). -1 / 0: not said.
Status distributed_rank(const KinetoSax& sax, const std::string& shown, int32_t& rank,
                        int32_t& world) {
  constexpr std::string_view kHint =
      "hint: the file's distributedInfo is damaged or was edited; torch.profiler writes the rank "
      "and world size of torch.distributed (0 <= rank < world_size)";
  if (!sax.distributed_error.empty()) {
    return Status::invalid_argument(fmt::format("trace '{}': {}", shown, sax.distributed_error));
  }
  auto bad = [&](std::string_view field, const std::string& value, std::string_view what) {
    return Status::invalid_argument(fmt::format("trace '{}': distributedInfo {} {} is not {}; {}",
                                                shown, field, value, what, kHint));
  };
  world = 0;
  rank = -1;
  const TraceId& w = sax.world_size;
  if (w.state == TraceId::State::kBad) return bad("world_size", w.text, "a number of ranks");
  if (w.state == TraceId::State::kOk) {
    if (w.value < 1 || w.value > INT32_MAX) {
      return bad("world_size", std::to_string(w.value), "a number of ranks (1 or more)");
    }
    world = static_cast<int32_t>(w.value);
  }
  const TraceId& r = sax.rank;
  if (r.state == TraceId::State::kBad) return bad("rank", r.text, "a rank (an integer, 0 or more)");
  if (r.state == TraceId::State::kOk) {
    if (r.value < 0 || r.value > INT32_MAX) {
      return bad("rank", std::to_string(r.value), "a rank (an integer, 0 or more)");
    }
    if (world > 0 && r.value >= world) {
      return Status::invalid_argument(fmt::format(
          "trace '{}': distributedInfo rank {} is outside its world of {} rank(s) (0..{}); {}",
          shown, r.value, world, world - 1, kHint));
    }
    rank = static_cast<int32_t>(r.value);
  }
  return OkStatus();
}

}  // namespace

Result<GpuTraceRank> read_kineto_trace(const std::string& path) {
  // A FIFO or /dev/zero would never end: the one input check first, and zlib reads the checked
  // descriptor (not the path again).
  TP_ASSIGN_OR_RETURN(InputFile file, open_input_file("trace", path, input_kind::kGpuTrace));
  const int fd = file.release();
  GzHandle f(gzdopen(fd, "rb"));
  const std::string shown = printable(path, 200);
  if (!f) {
    ::close(fd);
    return Status::io_error(fmt::format("trace '{}': cannot open ({}); hint: check the path", shown,
                                        std::strerror(errno)));
  }
  gzbuffer(f.get(), 1 << 20);
  GzStreamBuf buf(f.get());
  std::istream in(&buf);
  KinetoSax sax;
  const bool ok = nlohmann::json::sax_parse(in, &sax, nlohmann::json::input_format_t::json, true);
  if (buf.error() != Z_OK) {
    return Status::corruption(fmt::format(
        "trace '{}': the gzip stream is damaged or truncated ({}); hint: copy the file again or "
        "re-export it",
        shown, printable(buf.error_text(), 200)));
  }
  if (!ok) {
    if (!sax.saw_top_object && sax.error_pos <= 1) {
      return Status::invalid_argument(fmt::format(
          "trace '{}': not JSON (nor gzip'd JSON); hint: give a PyTorch profiler trace "
          "(export_chrome_trace / tensorboard_trace_handler output, .json or .json.gz), an nsys "
          "SQLite export or a `tightpipe train --out-dir` directory",
          shown));
    }
    return Status::corruption(fmt::format(
        "trace '{}': invalid JSON at byte {} ({}); hint: the file may be truncated (the profiler "
        "still writing it?)",
        shown, sax.error_pos, printable(sax.error_text, 200)));
  }
  if (!sax.saw_top_object || !sax.saw_trace_events) {
    return Status::invalid_argument(fmt::format(
        "trace '{}': JSON but not a trace: no top-level \"traceEvents\" array; hint: give the file "
        "torch.profiler writes (export_chrome_trace or tensorboard_trace_handler)",
        shown));
  }
  if (sax.gpu.empty() && sax.issues.times_left_out() > 0) {
    return Status::invalid_argument(fmt::format(
        "trace '{}': no usable GPU events: {} event(s) have a time that is not a number of "
        "microseconds or lies beyond any clock (first: {}); hint: the file is damaged or was "
        "edited: ts and dur are JSON numbers",
        shown, sax.issues.times_left_out(), sax.issues.first_time_issue()));
  }
  bool cpu_only = false;
  if (sax.gpu.empty()) {
    cpu_only = cpu_pipeline_events(sax) > 0;
    if (!cpu_only) sax.gpu.clear();  // comm ranges alone: no computation to measure
  }
  if (sax.gpu.empty()) {
    return Status::invalid_argument(fmt::format(
        "trace '{}': a CPU-only trace: no GPU events (kernel, gpu_memcpy, gpu_memset) among its "
        "{} events, and no PP:<compute action> range of PyTorch's pipelining runtime; "
        "hint: profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], or profile "
        "a step of a _PipelineScheduleRuntime-based schedule (docs/torch.md)",
        shown, sax.cpu_events));
  }

  GpuTraceRank out;
  out.path = path;
  out.format = "kineto";
  TP_RETURN_IF_ERROR(distributed_rank(sax, shown, out.rank, out.world_size));
  // The job: what every rank's distributedInfo shares, and the device model.
  if (sax.saw_distributed) {
    out.job = fmt::format("backend {}, world size {}", sax.backend.empty() ? "?" : sax.backend,
                          out.world_size);
    if (!sax.nccl_version.empty()) out.job += ", NCCL " + sax.nccl_version;
  } else {
    out.job = "no distributedInfo";
  }
  if (!sax.device_name.empty()) out.job += ", " + sax.device_name;
  out.names = std::move(sax.names);
  out.steps = std::move(sax.steps);
  out.ranges = std::move(sax.ranges);
  out.cpu_events = sax.cpu_events;
  out.anomalies.negative_durations = sax.negative;
  if (cpu_only) {
    out.format = "kineto-cpu";
    out.warnings.push_back(fmt::format(
        "a CPU-only trace of PyTorch's pipelining runtime: its PP:<action> ranges on the main "
        "thread stand for the device: a compute action is busy from its first op to its end (the "
        "wait for its input before that is idle), a SEND/RECV is P2P for its whole range, a "
        "WAIT_SEND is idle (docs/torch.md)"));
  }
  TP_RETURN_IF_ERROR(report_internal::attribute_and_sort(out, std::move(sax.gpu),
                                                         std::move(sax.launches), sax.issues));
  return out;
}

}  // namespace tightpipe
