// Kineto (PyTorch profiler) trace reader: one SAX pass over the JSON, gzip'd or not, keeping
// only what the analysis needs (gpu_trace.h). The document is never held: memory grows with the
// number of GPU events and launches, not with the file.
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
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

// A JSON number in microseconds as nanoseconds, held to the trace range (NaN: 0).
int64_t fallback_ns(double micros) {
  const double ns = micros * 1000.0, lim = static_cast<double>(report_internal::kTraceNsLimit);
  if (!(ns == ns)) return 0;
  return static_cast<int64_t>(std::llround(std::clamp(ns, -lim, lim)));
}

// Whole microseconds as nanoseconds, held to the trace range.
int64_t whole_micros_to_ns(int64_t us) {
  constexpr int64_t kMax = report_internal::kTraceNsLimit / 1000;
  return std::clamp(us, -kMax, kMax) * 1000;
}

// A JSON number in microseconds as integer nanoseconds, exact for the three decimals Kineto
// writes (a double would round epoch-based timestamps to a quarter microsecond).
int64_t micros_text_to_ns(std::string_view s, double fallback) {
  bool neg = false;
  if (!s.empty() && s[0] == '-') {
    neg = true;
    s.remove_prefix(1);
  }
  const size_t dot = s.find('.');
  const std::string_view whole = s.substr(0, dot);
  if (whole.empty() || s.find_first_of("eE") != std::string_view::npos) {
    return fallback_ns(fallback);
  }
  int64_t w = 0;
  if (std::from_chars(whole.data(), whole.data() + whole.size(), w).ec != std::errc()) {
    return fallback_ns(fallback);
  }
  int64_t frac = 0;
  int digits = 0;
  int round_up = 0;
  if (dot != std::string_view::npos) {
    for (char ch : s.substr(dot + 1)) {
      if (ch < '0' || ch > '9') break;
      if (digits < 3) {
        frac = frac * 10 + (ch - '0');
        ++digits;
      } else {
        if (digits == 3) round_up = ch >= '5';
        ++digits;
        if (digits > 4) break;
      }
    }
  }
  for (int d = std::min(digits, 3); d < 3; ++d) frac *= 10;
  if (w > report_internal::kTraceNsLimit / 1000) w = report_internal::kTraceNsLimit / 1000;
  const int64_t ns = report_internal::clamp_trace_ns(w * 1000 + frac + round_up);
  return neg ? -ns : ns;
}

enum class Cat { kOther, kKernel, kMemcpy, kMemset, kLaunch, kAnnotation };

Cat cat_of(std::string_view c) {
  if (c == "kernel") return Cat::kKernel;
  if (c == "gpu_memcpy") return Cat::kMemcpy;
  if (c == "gpu_memset") return Cat::kMemset;
  if (c == "cuda_runtime" || c == "cuda_driver" || c == "hip_runtime") return Cat::kLaunch;
  if (c == "user_annotation") return Cat::kAnnotation;
  return Cat::kOther;
}

// One event object's fields as they stream by.
struct RawEvent {
  bool is_x = false;
  Cat cat = Cat::kOther;
  std::string name;
  int64_t ts = 0, dur = 0;
  bool has_ts = false, has_dur = false;
  int64_t pid = 0, tid = 0;
  int64_t correlation = -1;
  int64_t device = -1, stream = -1;
  void clear() { *this = RawEvent{}; }
};

using report_internal::GpuLaunched;
using report_internal::Launch;

// The SAX handler. Depth 1 is the top-level object; traceEvents elements are depth-2 objects.
class KinetoSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  // Results.
  bool saw_top_object = false, saw_trace_events = false;
  std::vector<GpuLaunched> gpu;
  std::vector<Launch> launches;
  std::vector<StepMark> steps;
  std::vector<CpuRange> ranges;
  int64_t cpu_events = 0;
  int64_t negative = 0;
  std::vector<std::string> names;
  std::unordered_map<std::string, int32_t> name_index;
  std::vector<GpuEventKind> kernel_kinds;  // classify_kernel of each name, once per name
  // distributedInfo and deviceProperties.
  int64_t rank = -1, world_size = 0;
  std::string backend, nccl_version, device_name;

  bool null() override { return scalar_done(); }
  bool boolean(bool) override { return scalar_done(); }
  // Integers pass no text (number() formats the one it keeps), except above INT64_MAX.
  bool number_integer(number_integer_t v) override { return number(v, {}); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v <= static_cast<number_unsigned_t>(INT64_MAX)) return number(static_cast<int64_t>(v), {});
    return number(static_cast<int64_t>(v), std::to_string(v));
  }
  bool number_float(number_float_t v, const string_t& s) override { return number_f(v, s); }
  bool string(string_t& v) override {
    if (in_event() && depth_ == 3) {
      if (key_ == "ph")
        ev_.is_x = v == "X";
      else if (key_ == "cat")
        ev_.cat = cat_of(v);
      else if (key_ == "name")
        ev_.name = std::move(v);
    } else if (section_ == Section::kDistributed && depth_ == 2) {
      if (key_ == "backend")
        backend = v;
      else if (key_ == "nccl_version")
        nccl_version = v;
    } else if (section_ == Section::kDevices && depth_ == 3 && key_ == "name" &&
               device_name.empty()) {
      device_name = v;
    }
    return scalar_done();
  }
  bool binary(binary_t&) override { return scalar_done(); }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 1) saw_top_object = true;
    if (depth_ == 2 && section_ == Section::kNone && key_ == "distributedInfo") {
      section_ = Section::kDistributed;
    }
    if (depth_ == 3 && section_ == Section::kEvents) {
      ev_.clear();
      event_open_ = true;
    }
    if (depth_ == 4 && event_open_ && key_ == "args") in_args_ = true;
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
  bool scalar_done() { return true; }

  // `text`: the number as written, empty for an integer that v holds.
  bool number(int64_t v, std::string_view text) {
    if (in_event()) {
      if (depth_ == 3) {
        if (key_ == "ts") {
          ev_.ts = whole_micros_to_ns(v);
          ev_.has_ts = true;
        } else if (key_ == "dur") {
          ev_.dur = whole_micros_to_ns(v);
          ev_.has_dur = true;
        } else if (key_ == "pid") {
          ev_.pid = v;
        } else if (key_ == "tid") {
          ev_.tid = v;
        }
      } else if (depth_ == 4 && in_args_) {
        if (key_ == "correlation")
          ev_.correlation = v;
        else if (key_ == "device")
          ev_.device = v;
        else if (key_ == "stream")
          ev_.stream = v;
      }
    } else if (section_ == Section::kDistributed && depth_ == 2) {
      if (key_ == "rank")
        rank = v;
      else if (key_ == "world_size")
        world_size = v;
    }
    return true;
  }
  bool number_f(double v, const std::string& text) {
    if (in_event() && depth_ == 3) {
      if (key_ == "ts") {
        ev_.ts = micros_text_to_ns(text, v);
        ev_.has_ts = true;
        return true;
      }
      if (key_ == "dur") {
        ev_.dur = micros_text_to_ns(text, v);
        ev_.has_dur = true;
        return true;
      }
    }
    // Saturated like the timestamps (a cast of a double beyond int64 is undefined); NaN: 0.
    const double lim = 9.2e18;
    return number(v == v ? static_cast<int64_t>(std::clamp(v, -lim, lim)) : 0, text);
  }

  int32_t intern(const std::string& n) {
    auto [it, fresh] = name_index.try_emplace(n, static_cast<int32_t>(names.size()));
    if (fresh) {
      names.push_back(n);
      kernel_kinds.push_back(classify_kernel(n));
    }
    return it->second;
  }

  void finish_event() {
    if (!ev_.is_x) return;
    switch (ev_.cat) {
      case Cat::kKernel:
      case Cat::kMemcpy:
      case Cat::kMemset: {
        if (!ev_.has_ts) return;
        GpuLaunched p;
        int64_t dur = ev_.dur;
        if (dur < 0) {
          ++negative;
          dur = 0;
        }
        p.event.start_ns = ev_.ts;
        p.event.end_ns = report_internal::clamp_trace_ns(ev_.ts + dur);
        p.event.device = static_cast<int32_t>(ev_.device >= 0 ? ev_.device : ev_.pid);
        p.event.stream = static_cast<int32_t>(ev_.stream >= 0 ? ev_.stream : ev_.tid);
        p.event.name = intern(ev_.name);
        p.event.kind = ev_.cat == Cat::kMemcpy   ? GpuEventKind::kMemcpy
                       : ev_.cat == Cat::kMemset ? GpuEventKind::kMemset
                                                 : kernel_kinds[p.event.name];
        p.correlation = ev_.correlation;
        gpu.push_back(p);
        return;
      }
      case Cat::kLaunch:
        ++cpu_events;
        if (ev_.correlation >= 0 && ev_.has_ts) launches.push_back({ev_.correlation, ev_.ts});
        return;
      case Cat::kAnnotation: {
        ++cpu_events;
        if (!ev_.has_ts) return;
        const int64_t end = report_internal::clamp_trace_ns(ev_.ts + std::max<int64_t>(0, ev_.dur));
        if (auto n = report_internal::profiler_step(ev_.name)) {
          steps.push_back({*n, ev_.ts, end});
        } else if (report_internal::annotated_action(ev_.name)) {
          ranges.push_back({ev_.name, ev_.ts, end});
        }
        return;
      }
      case Cat::kOther:
        ++cpu_events;
        return;
    }
  }

  int depth_ = 0;
  Section section_ = Section::kNone;
  std::string key_;
  bool event_open_ = false, in_args_ = false;
  RawEvent ev_;
};

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
  if (sax.gpu.empty()) {
    return Status::invalid_argument(fmt::format(
        "trace '{}': a CPU-only trace: no GPU events (kernel, gpu_memcpy, gpu_memset) among its "
        "{} events; hint: profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
        shown, sax.cpu_events));
  }

  GpuTraceRank out;
  out.path = path;
  out.format = "kineto";
  out.rank = sax.rank >= 0 ? static_cast<int32_t>(sax.rank) : -1;
  out.world_size = static_cast<int32_t>(sax.world_size);
  // The job: what every rank's distributedInfo shares, and the device model.
  if (sax.rank >= 0 || !sax.backend.empty()) {
    out.job = fmt::format("backend {}, world size {}", sax.backend.empty() ? "?" : sax.backend,
                          sax.world_size);
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
  report_internal::attribute_and_sort(out, std::move(sax.gpu), std::move(sax.launches));
  return out;
}

}  // namespace tightpipe
