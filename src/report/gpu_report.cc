// The GPU trace report: per rank, per step and whole-trace usage and causes, the terminal table,
// report.json and report-trace.json (gpu_trace.h).
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "report/gpu_internal.h"
#include "report/report_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/output_file.h"
#include "tightpipe/report.h"

namespace tightpipe {

using report_internal::fmt_time;
using report_internal::pct;

namespace report_internal {

Timeline gpu_step_timeline(const GpuTraceReport& rep, int32_t step) {
  Timeline tl;
  tl.time_unit = "s";
  // Each rank's window of the step (gpu_step_windows), or its whole trace.
  std::vector<std::optional<GpuWindow>> windows;
  int64_t origin = INT64_MAX;
  for (const GpuTraceRank& t : rep.traces) {
    std::optional<GpuWindow> w;
    if (step == kNoStep && !t.events.empty()) {
      w = GpuWindow{t.events.front().start_ns, t.events.front().end_ns};
      for (const GpuEvent& e : t.events) w->end_ns = std::max(w->end_ns, e.end_ns);
    }
    for (const GpuStepWindow& s :
         step == kNoStep ? std::vector<GpuStepWindow>{} : gpu_step_windows(t.events)) {
      if (s.step == step) w = s.window;
    }
    if (w) origin = std::min(origin, w->start_ns);
    windows.push_back(w);
  }
  for (size_t r = 0; r < rep.traces.size(); ++r) {
    const GpuTraceRank& t = rep.traces[r];
    RankTimeline rt;
    rt.rank = t.rank;
    for (const GpuEvent& e : t.events) {
      // The events in the window, clipped to it, whichever step launched them.
      if (!windows[r] || e.end_ns < windows[r]->start_ns || e.start_ns > windows[r]->end_ns ||
          (e.end_ns == windows[r]->start_ns && e.end_ns > e.start_ns)) {
        continue;
      }
      TimelineEvent x;
      x.name = e.name >= 0 ? t.names[e.name] : std::string(gpu_event_kind_name(e.kind));
      x.start = static_cast<double>(std::max(e.start_ns, windows[r]->start_ns) - origin) * 1e-9;
      x.end = static_cast<double>(std::min(e.end_ns, windows[r]->end_ns) - origin) * 1e-9;
      x.step = e.step;
      switch (e.kind) {
        case GpuEventKind::kCompute: {
          x.lane = Lane::kCompute;
          x.kind = EventKind::kOther;
          if (e.range >= 0) {
            if (auto act = annotated_action(t.ranges[e.range].name)) {
              switch (act->type) {
                case ActionType::kForward:
                  x.kind = EventKind::kForward;
                  break;
                case ActionType::kBackwardInput:
                  x.kind = EventKind::kBackwardInput;
                  break;
                case ActionType::kBackwardWeight:
                  x.kind = EventKind::kBackwardWeight;
                  break;
                default:
                  x.kind = EventKind::kBackward;
                  break;
              }
              x.stage = act->stage;
              x.microbatch = act->microbatch;
            }
          }
          break;
        }
        case GpuEventKind::kCollective:
        case GpuEventKind::kP2P:
          x.lane = Lane::kComm;
          x.kind = e.kind == GpuEventKind::kP2P ? EventKind::kRecv : EventKind::kSend;
          break;
        case GpuEventKind::kMemcpy:
        case GpuEventKind::kMemset:
          x.lane = Lane::kData;
          x.kind = EventKind::kData;
          break;
      }
      rt.events.push_back(std::move(x));
    }
    tl.ranks.push_back(std::move(rt));
  }
  return tl;
}

}  // namespace report_internal

Result<GpuTraceReport> build_gpu_trace_report(const std::vector<std::string>& paths,
                                              const GpuPipelineSpec& pipeline) {
  TP_RETURN_IF_ERROR(pipeline.validate());
  GpuTraceReport rep;
  rep.inputs = paths;
  TP_ASSIGN_OR_RETURN(rep.traces, read_gpu_traces(paths));
  rep.pipelined = pipeline.pp > 0;
  if (rep.pipelined && rep.traces.size() == static_cast<size_t>(pipeline.pp)) {
    TP_RETURN_IF_ERROR(report_internal::check_pipeline_ranks(rep.traces, pipeline.pp));
  }
  for (const GpuTraceRank& t : rep.traces) {
    for (const std::string& w : t.warnings) {
      rep.warnings.push_back(fmt::format("rank {} ({}): {}", t.rank, t.path, w));
    }
  }
  if (!rep.traces.empty() && rep.traces.front().rank_from_file_order) {
    rep.warnings.push_back(
        "the traces name no rank (no distributedInfo): ranks follow the order of the files");
  }
  for (const GpuTraceRank& t : rep.traces) rep.ranks.push_back(gpu_rank_report(t, rep.pipelined));
  if (rep.pipelined) {
    rep.pipeline = report_internal::analyze_gpu_pipeline(rep.traces, rep.ranks, pipeline);
  }
  return rep;
}

namespace report_internal {

// "rank 3 idles 22.0% of step 1009 (5.10 ms of 23.2 ms); 10.1% of the step is exposed
// communication": the step with the most idle time.
double StepAcrossRanks::longest_window_s() const {
  double w = 0;
  for (const GpuUsage* u : ranks) w = std::max(w, u->window_s);
  return w;
}

std::vector<StepAcrossRanks> steps_across_ranks(const std::vector<GpuRankReport>& ranks) {
  std::map<int32_t, StepAcrossRanks> by_step;
  for (const GpuRankReport& r : ranks) {
    for (const GpuStepReport& s : r.steps) {
      StepAcrossRanks& x = by_step[s.step];
      x.step = s.step;
      x.ranks.push_back(&s.usage);
    }
  }
  std::vector<StepAcrossRanks> out;
  for (auto& [step, x] : by_step) out.push_back(std::move(x));
  return out;
}

std::string gpu_headline(const GpuTraceReport& rep) {
  // The step in which a rank computes the smallest share of its window.
  const GpuRankReport* br = nullptr;
  const GpuStepReport* bs = nullptr;
  auto not_computing = [](const GpuUsage& u) {
    return u.window_s > 0 ? (u.window_s - u.compute_s) / u.window_s : 0;
  };
  for (const auto& r : rep.ranks) {
    for (const auto& s : r.steps) {
      if (!bs || not_computing(s.usage) > not_computing(bs->usage)) {
        br = &r;
        bs = &s;
      }
    }
  }
  if (!bs) return "";
  const GpuUsage& u = bs->usage;
  auto share = [&](double x) { return pct(u.window_s > 0 ? x / u.window_s : 0); };
  std::string out = fmt::format(
      "worst step: rank {} does not compute {} of step {} ({} of {}): idle {}, exposed "
      "communication {}, memory only {}",
      br->rank, pct(not_computing(u)), bs->step, fmt_time(u.window_s - u.compute_s, "s"),
      fmt_time(u.window_s, "s"), share(u.idle_s), share(u.exposed_communication_s),
      share(u.busy_s - u.compute_s - u.exposed_communication_s));
  int top = 0;
  for (int k = 1; k < kNumGpuCauses; ++k)
    if (bs->causes[k] > bs->causes[top]) top = k;
  if (bs->causes[top] > 0) {
    out += fmt::format("; largest cause {} ({} of the step)",
                       gpu_cause_name(static_cast<GpuCause>(top)), share(bs->causes[top]));
  }
  return out;
}

}  // namespace report_internal

namespace {

std::string usage_row(const std::string& label, const GpuUsage& u) {
  auto ms = [](double s) { return fmt::format("{:.3f}", s * 1e3); };
  return fmt::format("{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}\n", label,
                     ms(u.window_s), ms(u.busy_s), ms(u.idle_s), ms(u.compute_s),
                     ms(u.communication_s), ms(u.exposed_communication_s), ms(u.memory_s),
                     pct(u.bubble_ratio));
}

nlohmann::ordered_json usage_json(const GpuUsage& u) {
  nlohmann::ordered_json j;
  j["window_s"] = u.window_s;
  j["busy_s"] = u.busy_s;
  j["idle_s"] = u.idle_s;
  j["compute_s"] = u.compute_s;
  j["communication_s"] = u.communication_s;
  j["exposed_communication_s"] = u.exposed_communication_s;
  j["memory_s"] = u.memory_s;
  j["bubble_ratio"] = u.bubble_ratio;
  j["p2p_s"] = u.p2p_s;
  j["collective_s"] = u.collective_s;
  j["gpu_events"] = u.events;
  return j;
}

nlohmann::ordered_json causes_json(const GpuCauses& c, bool pipelined) {
  nlohmann::ordered_json j;
  for (int k = 0; k < kNumGpuCauses; ++k) {
    const auto cause = static_cast<GpuCause>(k);
    if (!pipelined &&
        (cause == GpuCause::kFill || cause == GpuCause::kDrain || cause == GpuCause::kDependency)) {
      continue;
    }
    std::string key(gpu_cause_name(cause));
    std::replace(key.begin(), key.end(), ' ', '_');
    j[key + "_s"] = c[k];
  }
  return j;
}

}  // namespace

std::string_view gpu_ratio_name(const GpuTraceReport& rep) {
  return rep.pipelined ? "bubble" : "idle";
}

std::string format_gpu_trace_text(const GpuTraceReport& rep) {
  std::string out;
  out += fmt::format("GPU trace report: {} rank(s), {} format\n", rep.ranks.size(),
                     rep.traces.empty() ? "?" : rep.traces.front().format);
  out += fmt::format("{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}\n", "rank/step",
                     "window ms", "busy ms", "idle ms", "compute ms", "comm ms", "exposed ms",
                     "memory ms", rep.pipelined ? "bubble" : "idle %");
  for (const auto& r : rep.ranks) {
    out += usage_row(fmt::format("rank {}", r.rank), r.usage);
    for (const auto& s : r.steps) out += usage_row(fmt::format("  step {}", s.step), s.usage);
  }
  const std::string worst = report_internal::gpu_headline(rep);
  if (!worst.empty()) out += worst + "\n";
  // Causes of the time not computing, per rank.
  out += fmt::format("\nnot computing (window - compute), by cause{}:\n",
                     rep.pipelined ? "" : " (say --pp ... for fill, drain and dependency wait)");
  for (const auto& r : rep.ranks) {
    std::vector<std::string> parts;
    double total = 0;
    for (int k = 0; k < kNumGpuCauses; ++k) total += r.causes[k];
    for (int k = 0; k < kNumGpuCauses; ++k) {
      if (r.causes[k] <= 0) continue;
      parts.push_back(fmt::format("{} {} ({})", gpu_cause_name(static_cast<GpuCause>(k)),
                                  fmt_time(r.causes[k], "s"),
                                  pct(total > 0 ? r.causes[k] / total : 0)));
    }
    out += fmt::format("  rank {}: {}\n", r.rank, parts.empty() ? "none" : join(parts, ", "));
  }
  if (rep.pipeline) {
    const GpuPipelineReport& p = *rep.pipeline;
    out += "\npipeline:\n";
    if (!p.error.empty()) {
      out += "  " + p.error + "\n";
    } else {
      out += fmt::format(
          "  costs fitted from {}; measured step {} (pipeline bubble {}), simulated {} (bubble "
          "{})\n",
          p.costs.method, fmt_time(p.measured_step_s, "s"), pct(p.measured_bubble_ratio),
          fmt_time(p.predicted_step_s, "s"), pct(p.predicted_bubble_ratio));
      for (const auto& n : p.costs.notes) out += "  note: " + n + "\n";
      bool bounded = false;
      for (const auto& w : p.what_ifs) {
        if (!w.error.empty()) {
          out += fmt::format("  what-if {}: {}\n", w.label, w.error);
          continue;
        }
        // The bound as `simulate` prints it beside a makespan (format_lower_bound), in the
        // step's unit.
        const std::string bound = w.lower_bound_s > 0
                                      ? " " + format_lower_bound(w.step_s, w.lower_bound_s,
                                                                 fmt_time(w.lower_bound_s, "s"))
                                      : "";
        bounded = bounded || w.lower_bound_s > 0;
        out += fmt::format("  what-if {}: step {}{}, bubble {}, saves {} ({})\n", w.label,
                           fmt_time(w.step_s, "s"), bound, pct(w.bubble_ratio),
                           fmt_time(w.saving_s, "s"), w.engine_profile);
      }
      if (bounded) {
        out +=
            "  lower bound: no schedule of the what-if's stages and placement holding "
            "at most its memory has a shorter step (docs/cost_model.md, \"Lower bound\")\n";
      }
    }
  }
  for (const auto& w : rep.warnings) out += "warning: " + w + "\n";
  return out;
}

std::string gpu_trace_report_json(const GpuTraceReport& rep) {
  nlohmann::ordered_json j;
  j["kind"] = "gpu_trace";
  j["format"] = rep.traces.empty() ? "" : rep.traces.front().format;
  j["inputs"] = rep.inputs;
  j["bubble_measure"] = "idle / window (GPU idle: no kernel, copy or memset on any stream)";
  // bubble_ratio keeps its key; what the ratio is: a pipeline bubble only when said (--pp).
  j["pipelined"] = rep.pipelined;
  j["ratio_name"] = std::string(gpu_ratio_name(rep));
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const auto& r : rep.ranks) {
    nlohmann::ordered_json rj;
    rj["rank"] = r.rank;
    rj["path"] = r.path;
    const nlohmann::ordered_json uj = usage_json(r.usage);
    for (const auto& [k, v] : uj.items()) rj[k] = v;
    rj["causes"] = causes_json(r.causes, rep.pipelined);
    nlohmann::ordered_json steps = nlohmann::ordered_json::array();
    for (const auto& s : r.steps) {
      nlohmann::ordered_json sj;
      sj["step"] = s.step;
      const nlohmann::ordered_json suj = usage_json(s.usage);
      for (const auto& [k, v] : suj.items()) sj[k] = v;
      sj["causes"] = causes_json(s.causes, rep.pipelined);
      steps.push_back(std::move(sj));
    }
    rj["steps"] = std::move(steps);
    ranks.push_back(std::move(rj));
  }
  j["ranks"] = std::move(ranks);
  if (rep.pipeline) {
    const GpuPipelineReport& p = *rep.pipeline;
    nlohmann::ordered_json pj;
    pj["error"] = p.error;
    pj["costs_method"] = p.costs.method;
    pj["f_s"] = p.costs.f_s;
    pj["b_s"] = p.costs.b_s;
    pj["w_s"] = p.costs.w_s;
    pj["message_s"] = p.costs.message_s;
    pj["notes"] = p.costs.notes;
    pj["measured_step_s"] = p.measured_step_s;
    pj["measured_bubble_ratio"] = p.measured_bubble_ratio;
    pj["predicted_step_s"] = p.predicted_step_s;
    pj["predicted_bubble_ratio"] = p.predicted_bubble_ratio;
    nlohmann::ordered_json wi = nlohmann::ordered_json::array();
    for (const auto& w : p.what_ifs) {
      nlohmann::ordered_json x;
      x["label"] = w.label;
      x["error"] = w.error;
      x["step_s"] = w.step_s;
      x["engine_profile"] = w.engine_profile;
      x["bubble_ratio"] = w.bubble_ratio;
      x["saving_s"] = w.saving_s;
      if (w.error.empty()) {
        report_internal::add_lower_bound_json(x, {.makespan = w.step_s,
                                                  .max_span = w.max_span_s,
                                                  .lower_bound = w.lower_bound_s,
                                                  .lower_bound_span = w.lower_bound_span_s,
                                                  .memory_limit = w.lower_bound_memory});
      }
      wi.push_back(std::move(x));
    }
    pj["what_if"] = std::move(wi);
    j["pipeline"] = std::move(pj);
  }
  j["warnings"] = rep.warnings;
  return j.dump(2) + "\n";
}

namespace {

// The Chrome-trace thread of a device's stream (int64: ids are whatever the profiler wrote).
int64_t stream_tid(int32_t device, int32_t stream) { return int64_t{device} * 100000 + stream; }

// The Chrome trace in pieces handed to `sink` (a string, or a file a piece at a time: a trace can
// hold millions of events).
template <typename Sink>
void chrome_trace_pieces(const GpuTraceReport& rep, Sink&& sink) {
  sink("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  int64_t origin = INT64_MAX;
  for (const auto& t : rep.traces) {
    if (!t.events.empty()) origin = std::min(origin, t.events.front().start_ns);
  }
  bool first = true;
  std::string piece;
  auto emit = [&](const std::string& s) {
    if (!first) piece += ",\n";
    first = false;
    piece += s;
    if (piece.size() > (1 << 20)) {
      sink(piece);
      piece.clear();
    }
  };
  for (const auto& t : rep.traces) {
    emit(fmt::format(
        R"({{"ph": "M", "name": "process_name", "pid": {}, "args": {{"name": "rank {}"}}}})",
        t.rank, t.rank));
    std::map<std::pair<int32_t, int32_t>, bool> streams;
    for (const GpuEvent& e : t.events) streams[{e.device, e.stream}] = true;
    for (const auto& [ds, unused] : streams) {
      emit(fmt::format(
          R"({{"ph": "M", "name": "thread_name", "pid": {}, "tid": {}, "args": {{"name": "device {} stream {}"}}}})",
          t.rank, stream_tid(ds.first, ds.second), ds.first, ds.second));
    }
    std::vector<std::string> quoted(t.names.size());
    for (size_t i = 0; i < t.names.size(); ++i) quoted[i] = nlohmann::json(t.names[i]).dump();
    for (const GpuEvent& e : t.events) {
      emit(fmt::format(
          R"({{"ph": "X", "cat": "{}", "name": {}, "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}, "args": {{"step": {}}}}})",
          gpu_event_kind_name(e.kind), e.name >= 0 ? quoted[e.name] : std::string("\"\""), t.rank,
          stream_tid(e.device, e.stream), static_cast<double>(e.start_ns - origin) * 1e-3,
          static_cast<double>(e.end_ns - e.start_ns) * 1e-3, e.step));
    }
  }
  piece += "\n]}\n";
  sink(piece);
}

}  // namespace

std::string gpu_trace_chrome_json(const GpuTraceReport& rep) {
  std::string out;
  chrome_trace_pieces(rep, [&](std::string_view s) { out += s; });
  return out;
}

Status write_gpu_trace_report(const GpuTraceReport& rep, const std::string& out_dir) {
  TP_RETURN_IF_ERROR(check_report_outputs(out_dir, rep.inputs));
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::io_error(fmt::format("--out '{}': {}", out_dir, ec.message()));
  TP_RETURN_IF_ERROR(write_file(out_dir + "/" + kReportHtmlFile, gpu_trace_report_html(rep)));
  TP_RETURN_IF_ERROR(write_file(out_dir + "/" + kReportJsonFile, gpu_trace_report_json(rep)));
  OutputFile trace;
  TP_RETURN_IF_ERROR(trace.open(out_dir + "/" + kReportTraceFile));
  chrome_trace_pieces(rep, [&](std::string_view s) { (void)trace.write(s); });
  return trace.commit();
}

}  // namespace tightpipe
