// GPU traces: what the readers share (attribution to steps and ranges), telling inputs apart,
// reading one trace per rank (gpu_trace.h).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <thread>

#include "report/gpu_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/host.h"
#include "tightpipe/input_file.h"

namespace tightpipe {

namespace report_internal {

namespace {

// The N of an iteration name's number, all of `digits` (nullopt: not digits, or beyond INT32_MAX).
std::optional<int32_t> step_number(std::string_view digits) {
  int32_t n = 0;
  if (digits.empty() || digits.front() < '0' || digits.front() > '9') return std::nullopt;
  auto r = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (r.ec != std::errc() || r.ptr != digits.data() + digits.size()) return std::nullopt;
  return n;
}

// Microseconds with three decimals, from integer nanoseconds (exact, any int64).
std::string us_text(int64_t ns) {
  const uint64_t mag = ns < 0 ? 0 - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  return fmt::format("{}{}.{:03}", ns < 0 ? "-" : "", mag / 1000, mag % 1000);
}

}  // namespace

std::string quoted_value(std::string_view text, bool is_string) {
  const std::string shown = printable(text, 40);
  return is_string ? "\"" + shown + "\"" : shown;
}

TraceTime TraceTime::of_ns(int64_t ns) {
  TraceTime t;
  t.ns = ns;
  t.state = plausible_trace_ns(ns) ? State::kOk : State::kBeyond;
  if (!t.ok()) t.text = fmt::format("{} ns", ns);
  return t;
}

void TraceIssues::to_warnings(std::vector<std::string>& out) const {
  static constexpr std::array<std::string_view, kNumTraceIssues> kWhat = {
      "event(s) with a time that is missing or not a number",
      "event(s) with a time beyond any profiler's clock, more than 4e18 ns (127 years) from 0",
      "device or stream id(s) of GPU events that are not 32-bit integers",
      "iteration mark(s) whose number is not in 0..2147483647",
      "iteration range(s) that start inside another",
      "iteration range(s) that repeat the number of an earlier one",
  };
  static constexpr std::array<std::string_view, kNumTraceIssues> kDone = {
      "left out",
      "left out",
      "taken as -1",
      "their GPU events belong to no step (they count in the window they run in)",
      "a launch inside both counts in the later-starting one",
      "their GPU events count as one step",
  };
  for (int k = 0; k < kNumTraceIssues; ++k) {
    if (count[k] == 0) continue;
    out.push_back(fmt::format("{} {} (first: {}): {}", count[k], kWhat[k], first[k], kDone[k]));
  }
}

IterationName profiler_step_name(std::string_view name) {
  constexpr std::string_view kPrefix = "ProfilerStep#";
  if (!name.starts_with(kPrefix)) return {};
  return {true, step_number(name.substr(kPrefix.size()))};
}

std::optional<int32_t> profiler_step(std::string_view name) {
  return profiler_step_name(name).step;
}

IterationName nvtx_iteration_name(std::string_view text) {
  if (const IterationName p = profiler_step_name(text); p.is_iteration) return p;
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string_view rest = lower;
  bool word = false;
  // Longest first: "iteration" before "iter".
  for (std::string_view w : {"iteration", "iter", "step"}) {
    if (rest.substr(0, w.size()) == w) {
      rest.remove_prefix(w.size());
      word = true;
      break;
    }
  }
  if (!word) return {};
  auto skip_spaces = [&] {
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  };
  skip_spaces();
  if (!rest.empty() && std::string_view(" _#:-=").find(rest.front()) != std::string_view::npos) {
    rest.remove_prefix(1);
    skip_spaces();
  }
  // A word and digits to the end: an iteration (whose number may be out of range).
  if (rest.empty() ||
      !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return {};
  }
  return {true, step_number(rest)};
}

std::optional<int32_t> nvtx_iteration(std::string_view text) {
  return nvtx_iteration_name(text).step;
}

std::optional<Action> annotated_action(std::string_view name) {
  if (name.starts_with("PP:")) {
    auto a = parse_action(name.substr(3));
    if (a.ok() && is_compute(a->type)) return *a;
    return std::nullopt;
  }
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  Action a;
  a.stage = -1;
  a.microbatch = -1;
  if (lower.find("backward") != std::string::npos) {
    a.type = ActionType::kBackward;
    return a;
  }
  if (lower.find("forward") != std::string::npos) {
    a.type = ActionType::kForward;
    return a;
  }
  return std::nullopt;
}

Status attribute_and_sort(GpuTraceRank& trace, std::vector<GpuLaunched> gpu,
                          std::vector<Launch> launches, TraceIssues issues) {
  // The window: refused beyond any profile's length (a damaged time; differences stay small).
  if (!gpu.empty()) {
    auto first = gpu.begin(), last = gpu.begin();
    for (auto it = gpu.begin(); it != gpu.end(); ++it) {
      if (it->event.start_ns < first->event.start_ns) first = it;
      if (it->event.end_ns > last->event.end_ns) last = it;
    }
    const int64_t span = last->event.end_ns - first->event.start_ns;  // both within kTraceNsLimit
    if (span > kTraceWindowLimitNs) {
      auto name = [&](const GpuLaunched& g) {
        return g.event.name >= 0 ? printable(trace.names[g.event.name], 80) : std::string("?");
      };
      return Status::invalid_argument(fmt::format(
          "trace '{}': its GPU events span {:.4g} s, from '{}' at ts {} us to '{}' ending at {} "
          "us, more than the {:.0e} s (11.6 days) a profile can cover; hint: one of those times "
          "is damaged (or traces of different runs were joined): fix or drop that event",
          printable(trace.path, 200), static_cast<double>(span) * 1e-9, name(*first),
          us_text(first->event.start_ns), name(*last), us_text(last->event.end_ns),
          static_cast<double>(kTraceWindowLimitNs) * 1e-9));
    }
  }
  std::sort(launches.begin(), launches.end(),
            [](const Launch& a, const Launch& b) { return a.correlation < b.correlation; });
  std::sort(trace.steps.begin(), trace.steps.end(), [](const StepMark& a, const StepMark& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
  });
  std::sort(trace.ranges.begin(), trace.ranges.end(),
            [](const CpuRange& a, const CpuRange& b) { return a.start_ns < b.start_ns; });
  // Iteration ranges that overlap (the later-starting one takes a launch in both) or repeat a
  // number; the longest, to bound the backward scan for the latest-starting containing one.
  int64_t longest_step = 0;
  {
    std::map<int32_t, const StepMark*> by_number;
    const StepMark* reach = nullptr;  // the range reaching furthest so far
    for (const StepMark& m : trace.steps) {
      longest_step = std::max(longest_step, m.end_ns - m.start_ns);
      if (reach && m.start_ns < reach->end_ns) {
        issues.add(TraceIssue::kStepOverlap, [&] {
          return fmt::format("step {} [{}, {}] us starts inside step {} [{}, {}] us", m.step,
                             us_text(m.start_ns), us_text(m.end_ns), reach->step,
                             us_text(reach->start_ns), us_text(reach->end_ns));
        });
      }
      if (!reach || m.end_ns > reach->end_ns) reach = &m;
      // (No structured binding: clang 14 cannot capture one in the lambda.)
      const auto placed = by_number.emplace(m.step, &m);
      if (!placed.second) {
        const auto* first = placed.first->second;
        issues.add(TraceIssue::kStepRepeated, [&] {
          return fmt::format("step {} at [{}, {}] us and at [{}, {}] us", m.step,
                             us_text(first->start_ns), us_text(first->end_ns), us_text(m.start_ns),
                             us_text(m.end_ns));
        });
      }
    }
  }
  // The longest range, to bound the backward scan for the innermost containing range.
  int64_t longest = 0;
  for (const CpuRange& r : trace.ranges) longest = std::max(longest, r.end_ns - r.start_ns);

  trace.events.clear();
  trace.events.reserve(gpu.size());
  std::string first_unmatched;
  for (GpuLaunched& g : gpu) {
    GpuEvent e = g.event;
    auto it = std::lower_bound(launches.begin(), launches.end(), g.correlation,
                               [](const Launch& l, int64_t c) { return l.correlation < c; });
    if (g.correlation < 0 || it == launches.end() || it->correlation != g.correlation) {
      if (trace.anomalies.unmatched_launches++ == 0 && e.name >= 0) {
        first_unmatched = trace.names[e.name];
      }
    } else {
      const int64_t t = it->ts;
      e.launch_ns = t;
      // The latest-starting step that contains t (the one step when they do not overlap).
      auto s = std::upper_bound(trace.steps.begin(), trace.steps.end(), t,
                                [](int64_t x, const StepMark& m) { return x < m.start_ns; });
      while (s != trace.steps.begin()) {
        --s;
        if (t - s->start_ns > longest_step) break;
        if (t <= s->end_ns) {
          e.step = s->step;
          break;
        }
      }
      // Innermost: the latest-starting range that still contains t.
      auto r = std::upper_bound(trace.ranges.begin(), trace.ranges.end(), t,
                                [](int64_t x, const CpuRange& m) { return x < m.start_ns; });
      while (r != trace.ranges.begin()) {
        --r;
        if (t - r->start_ns > longest) break;
        if (t <= r->end_ns) {
          e.range = static_cast<int32_t>(r - trace.ranges.begin());
          break;
        }
      }
    }
    trace.events.push_back(e);
  }
  gpu.clear();
  gpu.shrink_to_fit();

  // Same-stream overlaps: in (device, stream, start) order.
  std::vector<uint32_t> order(trace.events.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto& ev = trace.events;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const GpuEvent &x = ev[a], &y = ev[b];
    if (x.device != y.device) return x.device < y.device;
    if (x.stream != y.stream) return x.stream < y.stream;
    return x.start_ns < y.start_ns;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const GpuEvent &p = ev[order[k - 1]], &c = ev[order[k]];
    if (p.device == c.device && p.stream == c.stream && c.start_ns < p.end_ns) {
      ++trace.anomalies.stream_overlaps;
    }
  }
  std::sort(trace.events.begin(), trace.events.end(), [](const GpuEvent& a, const GpuEvent& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });

  const TraceAnomalies& an = trace.anomalies;
  if (an.negative_durations > 0) {
    trace.warnings.push_back(
        fmt::format("{} GPU event(s) with a negative duration (a profiler bug): counted as 0 long",
                    an.negative_durations));
  }
  if (an.stream_overlaps > 0) {
    trace.warnings.push_back(fmt::format(
        "{} GPU event(s) start before the previous one on the same stream ended (a profiler "
        "clock artefact): kept; unions count the overlapped time once",
        an.stream_overlaps));
  }
  if (an.unmatched_launches > 0) {
    trace.warnings.push_back(fmt::format(
        "{} of {} GPU event(s) have no CPU launch in the trace (no matching correlation id; "
        "first: '{}'): each counted in the step window it runs in; they belong to no step",
        an.unmatched_launches, trace.events.size(), printable(first_unmatched, 80)));
  }
  issues.to_warnings(trace.warnings);
  if (trace.steps.empty()) {
    trace.warnings.push_back(
        "no iteration markers (ProfilerStep#N; for nsys, NVTX ranges such as \"iteration 12\"): "
        "whole-trace numbers only; hint: call prof.step() every iteration");
  }
  return OkStatus();
}

}  // namespace report_internal

Result<ReportInput> detect_report_input(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return ReportInput::kRunDir;
  // A file of one of our run directories (or named like one): load_run explains which directory
  // to give instead.
  const fs::path p(path);
  const std::string file = p.filename().string();
  if (file == "summary.json" || file == "costs.json" || file == "metrics.jsonl" ||
      file == "schedule.csv" || file.starts_with("timeline_rank") ||
      fs::exists(p.parent_path().empty() ? fs::path("timeline_rank0.jsonl")
                                         : p.parent_path() / "timeline_rank0.jsonl",
                 ec)) {
    return ReportInput::kRunDir;
  }
  auto in = open_input_file("report input", path, input_kind::kGpuTrace);
  if (!in.ok() && in.status().code() == StatusCode::kNotFound) {
    return Status::not_found(fmt::format(
        "report input '{}' does not exist; hint: give a `tightpipe train --out-dir` directory, "
        "PyTorch profiler traces (.json, .json.gz) or nsys SQLite exports",
        printable(path, 200)));
  }
  if (!in.ok()) return in.status();
  char head[16] = {};
  ssize_t n = 0;
  while ((n = ::read(in->fd(), head, sizeof head)) < 0 && errno == EINTR) {
  }
  if (n < 0) {
    return Status::io_error(
        fmt::format("report input '{}': cannot read it: {}; hint: check the "
                    "file",
                    printable(path, 200), std::strerror(errno)));
  }
  if (n >= 2 && static_cast<unsigned char>(head[0]) == 0x1f &&
      static_cast<unsigned char>(head[1]) == 0x8b) {
    return ReportInput::kKineto;  // gzip: the reader says if it is not a trace inside
  }
  if (n == 16 && std::string_view(head, 16) == std::string_view("SQLite format 3\0", 16)) {
    return ReportInput::kNsys;
  }
  for (ssize_t i = 0; i < n; ++i) {
    const char c = head[i];
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '{' || c == '[') return ReportInput::kKineto;
    break;
  }
  if (path.ends_with(".nsys-rep") || path.ends_with(".qdrep")) {
    return Status::invalid_argument(fmt::format(
        "report input '{}': an Nsight Systems report, not its SQLite export; hint: nsys export "
        "--type sqlite --output {}.sqlite {}",
        printable(path, 200), printable(path.substr(0, path.rfind('.')), 200),
        printable(path, 200)));
  }
  return Status::invalid_argument(fmt::format(
      "report input '{}': neither a run directory, a JSON/gzip'd JSON trace nor an SQLite "
      "database; hint: give PyTorch profiler traces (.json, .json.gz), nsys SQLite exports or a "
      "`tightpipe train --out-dir` directory",
      path));
}

Result<std::vector<GpuTraceRank>> read_gpu_traces(const std::vector<std::string>& paths,
                                                  int threads) {
  const size_t n = paths.size();
  std::vector<std::optional<Result<GpuTraceRank>>> got(n);
  auto read_one = [&](size_t i) -> Result<GpuTraceRank> {
    TP_ASSIGN_OR_RETURN(ReportInput kind, detect_report_input(paths[i]));
    switch (kind) {
      case ReportInput::kKineto:
        return read_kineto_trace(paths[i]);
      case ReportInput::kNsys:
        return read_nsys_sqlite(paths[i]);
      case ReportInput::kRunDir:
        break;
    }
    return Status::invalid_argument(fmt::format(
        "report input '{}': a run directory among trace files; hint: report a run directory "
        "alone, or only trace files",
        printable(paths[i], 200)));
  };
  int nthreads = threads > 0 ? threads : usable_cores().count();
  nthreads = std::max(1, std::min<int>(nthreads, static_cast<int>(n)));
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < nthreads; ++t) {
    pool.emplace_back([&] {
      for (size_t i; (i = next.fetch_add(1)) < n;) got[i] = read_one(i);
    });
  }
  for (auto& th : pool) th.join();

  std::vector<GpuTraceRank> out;
  for (size_t i = 0; i < n; ++i) {
    if (!got[i]->ok()) return got[i]->status();
    out.push_back(std::move(**got[i]));
  }
  // Ranks of one job: the same job description (or none on every file).
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i].job != out[0].job || out[i].format != out[0].format) {
      auto says = [](const GpuTraceRank& t) {
        return t.job.empty() ? t.format : t.format + ": " + t.job;
      };
      return Status::invalid_argument(fmt::format(
          "traces '{}' ({}) and '{}' ({}) are not ranks of the same job; hint: report the "
          "traces of one run together, one file per rank",
          printable(out[0].path, 200), says(out[0]), printable(out[i].path, 200), says(out[i])));
    }
  }
  const bool any_rank = std::any_of(out.begin(), out.end(), [](auto& t) { return t.rank >= 0; });
  if (any_rank) {
    std::map<int32_t, size_t> seen;
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].rank < 0) {
        return Status::invalid_argument(fmt::format(
            "trace '{}' names no rank while '{}' does (distributedInfo.rank); hint: report the "
            "traces of one run together",
            printable(out[i].path, 200), printable(out[0].path, 200)));
      }
      auto [it, fresh] = seen.emplace(out[i].rank, i);
      if (!fresh) {
        return Status::invalid_argument(fmt::format(
            "traces '{}' and '{}' are both rank {}; hint: give each rank's trace once",
            printable(out[it->second].path, 200), printable(out[i].path, 200), out[i].rank));
      }
    }
    std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.rank < b.rank; });
  } else {
    for (size_t i = 0; i < out.size(); ++i) {
      out[i].rank = static_cast<int32_t>(i);
      out[i].rank_from_file_order = true;
    }
  }
  return out;
}

}  // namespace tightpipe
