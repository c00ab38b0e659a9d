// Chrome trace writer (Trace Event Format). Written with fmt rather than a JSON DOM so that a
// million-event timeline writes in well under a second; tests re-parse it with nlohmann.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <numeric>

#include "tightpipe/base.h"
#include "tightpipe/prof.h"

namespace tightpipe {
namespace {

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

double resolve_us_per_unit(const Timeline& t, double requested) {
  if (requested > 0) return requested;
  if (t.time_unit == "s") return 1e6;
  if (t.time_unit == "ms") return 1e3;
  if (t.time_unit == "us") return 1.0;
  if (t.time_unit == "ns") return 1e-3;
  return 1e3;
}

// Each event's track (Chrome trace thread): tid = lane for the first track of a lane, 100*k + lane
// for overflow tracks holding events that overlap an earlier one on the same lane.
struct Tracks {
  std::vector<int> tid_of;           // per event of the rank
  std::map<int, std::string> names;  // tid -> thread name
};

Tracks assign_tracks(const RankTimeline& rt) {
  std::vector<size_t> order(rt.events.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return rt.events[a].start < rt.events[b].start; });
  std::map<int, std::vector<double>> track_ends;  // lane -> end time of each track
  Tracks out;
  out.tid_of.resize(rt.events.size());
  for (size_t idx : order) {
    const TimelineEvent& e = rt.events[idx];
    const int lane = static_cast<int>(e.lane);
    auto& ends = track_ends[lane];
    size_t k = 0;
    while (k < ends.size() && ends[k] > e.start + 1e-12 * std::max(1.0, std::abs(e.start))) ++k;
    if (k == ends.size())
      ends.push_back(e.end);
    else
      ends[k] = e.end;
    const int tid = static_cast<int>(k) * 100 + lane;
    out.tid_of[idx] = tid;
    if (!out.names.count(tid)) {
      out.names[tid] = k == 0 ? lane_name(e.lane) : fmt::format("{} #{}", lane_name(e.lane), k + 1);
    }
  }
  return out;
}

}  // namespace

std::string to_chrome_trace(const Timeline& timeline, const TraceOptions& options) {
  const double scale = resolve_us_per_unit(timeline, options.us_per_unit);
  std::string out;
  size_t n_events = 0;
  for (const auto& r : timeline.ranks) n_events += r.events.size();
  out.reserve(256 + n_events * 160);
  out += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"time_unit\":";
  append_json_string(out, timeline.time_unit);
  out += fmt::format(",\"us_per_unit\":{}}},\n\"traceEvents\":[\n", scale);
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const RankTimeline& rt : timeline.ranks) {
    sep();
    out += fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":)",
                       rt.rank);
    append_json_string(out, fmt::format("{} {}", options.process_prefix, rt.rank));
    out += "}}";
    sep();
    out += fmt::format(
        R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
        rt.rank, rt.rank);
    const Tracks tracks = assign_tracks(rt);
    for (const auto& [tid, name] : tracks.names) {
      sep();
      out += fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":)",
                         rt.rank, tid);
      append_json_string(out, name);
      out += "}}";
      sep();
      out += fmt::format(
          R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
          rt.rank, tid, tid);
    }
    for (size_t idx = 0; idx < rt.events.size(); ++idx) {
      const TimelineEvent& e = rt.events[idx];
      sep();
      out += "{\"ph\":\"X\",\"name\":";
      append_json_string(out, e.name);
      out += ",\"cat\":";
      append_json_string(out, event_kind_name(e.kind));
      out += fmt::format(
          R"(,"pid":{},"tid":{},"ts":{:.6f},"dur":{:.6f},"args":{{"stage":{},"microbatch":{},"step":{},"start":{},"end":{})",
          rt.rank, tracks.tid_of[idx], e.start * scale, (e.end - e.start) * scale, e.stage,
          e.microbatch, e.step, e.start, e.end);
      if (e.peer >= 0) out += fmt::format(R"(,"peer":{},"bytes":{})", e.peer, e.bytes);
      out += "}}";
    }
  }
  out += "\n]}\n";
  return out;
}

Status write_chrome_trace(const std::string& path, const Timeline& timeline,
                          const TraceOptions& options) {
  return write_file(path, to_chrome_trace(timeline, options))
      .with_context(fmt::format("--trace {}", path));
}

}  // namespace tightpipe
