// report.html for GPU traces (gpu_trace.h): the same page style as our runs' report.html
// (report_internal.h), self-contained (inline CSS and SVG, no script, no network), every string
// from a trace (paths, kernel names, warnings) escaped.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "report/gpu_internal.h"
#include "report/report_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/prof.h"

namespace tightpipe {

namespace report_internal {

int32_t median_window_step(const std::vector<GpuRankReport>& ranks) {
  std::vector<std::pair<double, int32_t>> all, common;  // (longest window, step)
  for (const StepAcrossRanks& x : steps_across_ranks(ranks)) {
    all.emplace_back(x.longest_window_s(), x.step);
    if (x.ranks.size() == ranks.size()) common.emplace_back(x.longest_window_s(), x.step);
  }
  std::vector<std::pair<double, int32_t>>& order = common.empty() ? all : common;
  if (order.empty()) return kNoStep;
  std::sort(order.begin(), order.end());
  return order[(order.size() - 1) / 2].second;
}

int64_t merge_close_events(Timeline& timeline, double gap) {
  int64_t removed = 0;
  for (RankTimeline& rt : timeline.ranks) {
    // One group per lane and kind: merging never paints one kind's colour over another's time.
    std::map<std::pair<Lane, EventKind>, std::vector<TimelineEvent>> groups;
    for (TimelineEvent& e : rt.events) groups[{e.lane, e.kind}].push_back(std::move(e));
    std::vector<TimelineEvent> out;
    for (auto& [key, events] : groups) {
      std::sort(events.begin(), events.end(),
                [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
      size_t n = 0;  // events in `cur`
      TimelineEvent cur;
      auto flush = [&] {
        if (n > 1) cur.name = fmt::format("{} events less than one pixel apart", n);
        if (n > 0) out.push_back(std::move(cur));
        removed += n > 0 ? static_cast<int64_t>(n) - 1 : 0;
      };
      for (TimelineEvent& e : events) {
        if (n > 0 && e.start <= cur.end + gap) {
          cur.end = std::max(cur.end, e.end);
          ++n;
          continue;
        }
        flush();
        cur = std::move(e);
        n = 1;
      }
      flush();
    }
    std::sort(out.begin(), out.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
      return a.lane != b.lane ? a.lane < b.lane : a.start < b.start;
    });
    rt.events = std::move(out);
  }
  return removed;
}

}  // namespace report_internal

namespace {

using report_internal::BarRow;
using report_internal::BarSegment;
using report_internal::fmt_time;
using report_internal::pct;

// Milliseconds with three decimals: the terminal report's precision (one microsecond).
std::string ms(double s) { return fmt::format("{:.3f}", s * 1e3); }

// The time inside a window that is not compute, split so that the four parts partition it:
// compute (the union of compute kernels), exposed communication (communication outside it),
// memory-only (copies and memsets under neither: busy - compute - exposed communication) and idle
// (window - busy). The sum is the window up to rounding of nanoseconds to seconds.
std::vector<BarSegment> usage_segments(const GpuUsage& u) {
  const double memory_only = std::max(0.0, u.busy_s - u.compute_s - u.exposed_communication_s);
  return {
      {"compute", std::string(event_kind_color(EventKind::kForward)), u.compute_s},
      {"exposed communication", std::string(event_kind_color(EventKind::kSend)),
       u.exposed_communication_s},
      {"memory only", std::string(event_kind_color(EventKind::kData)), memory_only},
      {"idle", "#e6e6e6", u.idle_s},  // the timeline's idle grey
  };
}

std::string html_header(const GpuTraceReport& rep) {
  std::string h = "<h1>tightpipe GPU trace report</h1>\n";
  size_t steps = 0;
  for (const auto& r : rep.ranks) steps = std::max(steps, r.steps.size());
  h += fmt::format("<p>{} rank(s), {} format, {} profiler step(s) at most per rank.</p>\n",
                   rep.ranks.size(),
                   xml_escape(rep.traces.empty() ? "?" : rep.traces.front().format), steps);
  h += "<table class=\"inputs\"><tr><th class=\"l\">rank</th><th class=\"l\">file</th>"
       "<th>world size</th><th>GPU events</th><th>steps</th></tr>\n";
  for (size_t i = 0; i < rep.ranks.size(); ++i) {
    const GpuRankReport& r = rep.ranks[i];
    const GpuTraceRank* t = i < rep.traces.size() ? &rep.traces[i] : nullptr;
    h += fmt::format(
        "<tr><td class=\"l\">{}{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "</tr>\n",
        r.rank, t && t->rank_from_file_order ? " (file order)" : "", xml_escape(r.path),
        t && t->world_size > 0 ? std::to_string(t->world_size) : "?", r.usage.events,
        r.steps.size());
  }
  h += "</table>\n";
  const std::string worst = report_internal::gpu_headline(rep);
  if (!worst.empty()) h += fmt::format("<p class=\"headline\"><b>{}</b></p>\n", xml_escape(worst));
  if (!rep.warnings.empty()) {
    h += "<div class=\"warn\"><b>Warnings</b><ul>";
    for (const auto& w : rep.warnings) h += "<li>" + xml_escape(w) + "</li>";
    h += "</ul></div>\n";
  }
  return h;
}

std::string usage_cells(const GpuUsage& u) {
  return fmt::format(
      "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
      "<td>{}</td>",
      ms(u.window_s), ms(u.busy_s), ms(u.idle_s), ms(u.compute_s), ms(u.communication_s),
      ms(u.exposed_communication_s), ms(u.memory_s), pct(u.bubble_ratio));
}

// The usage table (one row per rank for the whole trace, then one per step) and the bars.
std::string html_usage(const GpuTraceReport& rep) {
  std::string h =
      "<h2>GPU usage per rank: the whole trace and each step</h2>\n<table class=\"usage\">"
      "<tr><th class=\"l\">rank</th><th class=\"l\">step</th><th>window ms</th><th>busy ms</th>"
      "<th>idle ms</th><th>compute ms</th><th>communication ms</th><th>exposed comm ms</th>"
      "<th>memory ms</th><th>" +
      std::string(rep.pipelined ? "bubble" : "idle %") + "</th></tr>\n";
  for (const GpuRankReport& r : rep.ranks) {
    h += fmt::format(
        "<tr class=\"whole\" data-rank=\"{}\"><td class=\"l\"><b>{}</b></td><td class=\"l\">whole "
        "trace</td>{}</tr>\n",
        r.rank, r.rank, usage_cells(r.usage));
    for (const GpuStepReport& s : r.steps) {
      h += fmt::format(
          "<tr class=\"step\" data-rank=\"{}\" data-step=\"{}\"><td class=\"l\">{}</td>"
          "<td class=\"l\">{}</td>{}</tr>\n",
          r.rank, s.step, r.rank, s.step, usage_cells(s.usage));
    }
  }
  h += "</table>\n<h2>Where the window goes, per rank (whole trace)</h2>\n";
  std::vector<BarRow> rows;
  for (const GpuRankReport& r : rep.ranks) {
    BarRow row;
    row.rank = r.rank;
    row.bars.push_back({"trace", usage_segments(r.usage), r.usage.window_s});
    rows.push_back(std::move(row));
  }
  h += report_internal::stacked_bars_svg(usage_segments({}), rows, "100% of the window");
  h += "<p class=\"note\">The four parts partition the window (first GPU event start to last GPU "
       "event end): <i>compute</i> is the union of the compute kernels; <i>exposed "
       "communication</i> the NCCL/RCCL kernels' time not under compute; <i>memory only</i> the "
       "memcpy/memset time under neither (busy &#8722; compute &#8722; exposed communication); "
       "<i>idle</i> no GPU event on any stream (window &#8722; busy). The " +
       std::string(rep.pipelined ? "bubble ratio (the run was said to be a pipeline, --pp)"
                                 : "idle % column") +
       " is idle / window.</p>\n";
  return h;
}

std::string html_causes(const GpuTraceReport& rep) {
  std::vector<GpuCause> shown;
  for (int k = 0; k < kNumGpuCauses; ++k) {
    const auto c = static_cast<GpuCause>(k);
    const bool pipeline_only =
        c == GpuCause::kFill || c == GpuCause::kDrain || c == GpuCause::kDependency;
    if (rep.pipelined || !pipeline_only) shown.push_back(c);
  }
  std::string h =
      "<h2>Time not computing (window &#8722; compute), by cause, summed over the steps</h2>\n"
      "<table class=\"causes\"><tr><th class=\"l\">rank</th>";
  for (GpuCause c : shown) h += fmt::format("<th>{}</th>", xml_escape(gpu_cause_name(c)));
  h += "<th>total</th></tr>\n";
  for (const GpuRankReport& r : rep.ranks) {
    double total = 0;
    for (double v : r.causes) total += v;
    h +=
        fmt::format("<tr class=\"cause\" data-rank=\"{}\"><td class=\"l\">{}</td>", r.rank, r.rank);
    for (GpuCause c : shown) {
      const double v = r.causes[static_cast<int>(c)];
      h += fmt::format("<td>{} ({})</td>", fmt_time(v, "s"), pct(total > 0 ? v / total : 0));
    }
    h += fmt::format("<td>{}</td></tr>\n", fmt_time(total, "s"));
  }
  h += "</table>\n<p class=\"note\">";
  if (rep.pipelined) {
    h += "Each gap between a rank's compute kernels in a step is, first match wins: <i>fill</i> "
         "before the step's first compute kernel, <i>drain</i> after its last, <i>dependency "
         "wait</i> a gap in which a P2P kernel ends; the rest by what covers it: ";
  } else {
    h += "By what covers the time (say <code>--pp</code> ... for fill, drain and dependency "
         "wait): ";
  }
  h += "<i>exposed comm</i> communication kernels, <i>memory</i> copies or memsets only, "
       "and the time nothing runs on the GPU by what the GPU event ending the idle gap waited "
       "for: <i>host wait</i> the CPU launched it after the GPU went idle (launch overhead, "
       "CPU-side work, data loading), <i>other wait</i> it was launched before, so the GPU waited "
       "on other work (another stream, a peer) or its launch is not in the trace. A step's "
       "window runs from its first GPU event to the next step's, so the steps' causes sum to "
       "the whole trace's.</p>\n";
  return h;
}

// Past this many events in the drawn step, events closer than one pixel are merged into one bar
// (merge_close_events): the page stays a few MB for 1 GB traces, each bar still drawn where GPU
// work was. Below it every kernel is its own bar with its name on hover.
constexpr size_t kMergeAbove = 20000;
// Hover titles cut kernel names (C++ templates run to 2 kB) after this many characters.
constexpr size_t kNameChars = 160;
// The timeline's plot width in pixels (timeline_svg: 1100 wide, 70 left, 20 right).
constexpr double kPlotPixels = 1010;

std::string html_timeline(const GpuTraceReport& rep) {
  const int32_t step = report_internal::median_window_step(rep.ranks);
  Timeline tl = report_internal::gpu_step_timeline(rep, step);
  size_t events = 0;
  double end = 0;
  tl.time_unit = "ms";
  for (RankTimeline& rt : tl.ranks) {
    events += rt.events.size();
    for (TimelineEvent& e : rt.events) {
      e.start *= 1e3;
      e.end *= 1e3;
      e.name = printable(e.name, kNameChars);
      end = std::max(end, e.end);
    }
  }
  std::string h =
      step == kNoStep
          ? std::string("<h2>Timeline of the whole trace (no profiler steps)</h2>\n")
          : fmt::format("<h2>Timeline of step {} (the median step window), every rank</h2>\n",
                        step);
  std::string merged;
  if (events > kMergeAbove) {
    const double pixel = end / kPlotPixels;
    const int64_t removed = report_internal::merge_close_events(tl, pixel);
    merged = fmt::format(
        " The step holds {} GPU events: events of one rank, lane and kind less than one pixel "
        "({}) apart are drawn as one bar, {} bars in all.",
        events, fmt_time(pixel * 1e-3, "s"), static_cast<int64_t>(events) - removed);
  }
  h += report_internal::timeline_svg(
      std::move(tl), end, step == kNoStep ? "whole trace" : fmt::format("step {}", step), "gpu");
  h += "<p class=\"note\">Time 0 is the step's first GPU event on any rank. The bar is the compute "
       "lane (F, B, I, W when a record_function range names the work, otherwise <i>other</i>); "
       "the strip under it is communication (the SEND colour: collectives, the RECV colour: "
       "P2P send/recv) and copies/memsets (brown). Grey is idle.";
  h += xml_escape(merged) + "</p>\n";
  return h;
}

std::string seconds_list(const std::vector<double>& v, size_t i) {
  return i < v.size() ? fmt_time(v[i], "s") : std::string("&#8211;");
}

std::string html_pipeline(const GpuTraceReport& rep) {
  if (!rep.pipeline) return "";
  const GpuPipelineReport& p = *rep.pipeline;
  std::string h = "<h2>Pipeline: costs fitted to the trace, the schedule simulated</h2>\n";
  if (!p.error.empty()) {
    return h + "<div class=\"warn pipeline-error\"><b>The pipeline analysis did not run:</b> " +
           xml_escape(p.error) + "</div>\n";
  }
  h += fmt::format(
      "<p><span class=\"kpi\">measured step <b>{}</b> (pipeline bubble {})</span><span "
      "class=\"kpi\">simulated <b>{}</b> (bubble {})</span><span class=\"kpi\">costs from "
      "<b>{}</b></span></p>\n",
      fmt_time(p.measured_step_s, "s"), pct(p.measured_bubble_ratio),
      fmt_time(p.predicted_step_s, "s"), pct(p.predicted_bubble_ratio),
      xml_escape(p.costs.method.empty() ? "?" : p.costs.method));
  const size_t stages = std::max({p.costs.f_s.size(), p.costs.b_s.size(), p.costs.w_s.size()});
  h += "<table class=\"costs\"><tr><th class=\"l\">stage</th><th>F</th><th>B (whole backward)</th>"
       "<th>W (its weight part)</th></tr>\n";
  for (size_t s = 0; s < stages; ++s) {
    h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n", s,
                     seconds_list(p.costs.f_s, s), seconds_list(p.costs.b_s, s),
                     seconds_list(p.costs.w_s, s));
  }
  h +=
      fmt::format("</table>\n<p>per P2P message: {}{}</p>\n", fmt_time(p.costs.message_s, "s"),
                  p.costs.w_s.empty() ? "; W fused into B (no separate weight-gradient time)" : "");
  if (!p.costs.notes.empty()) {
    h += "<ul class=\"notes\">";
    for (const auto& n : p.costs.notes) h += "<li>" + xml_escape(n) + "</li>";
    h += "</ul>\n";
  }
  if (!p.what_ifs.empty()) {
    h += "<table class=\"whatif\"><tr><th class=\"l\">what if</th><th>step</th><th>bubble</th>"
         "<th>saves per step</th></tr>\n";
    for (const GpuWhatIf& w : p.what_ifs) {
      if (!w.error.empty()) {
        h += fmt::format("<tr><td class=\"l\">{}</td><td class=\"l\" colspan=\"3\">{}</td></tr>\n",
                         xml_escape(w.label), xml_escape(w.error));
        continue;
      }
      h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
                       xml_escape(w.label), fmt_time(w.step_s, "s"), pct(w.bubble_ratio),
                       fmt_time(w.saving_s, "s"));
    }
    h += "</table>\n";
  }
  return h;
}

}  // namespace

std::string gpu_trace_report_html(const GpuTraceReport& rep) {
  std::string title = "tightpipe GPU trace report";
  if (!rep.inputs.empty()) title += ": " + rep.inputs.front();
  if (rep.inputs.size() > 1) title += fmt::format(" and {} more", rep.inputs.size() - 1);
  std::string h = report_internal::html_page_head(title);
  h += html_header(rep);
  h += html_usage(rep);
  h += html_causes(rep);
  h += html_timeline(rep);
  h += html_pipeline(rep);
  h += "<p style=\"color:#777;font-size:12px\">Definitions: docs/gpu_trace.md. Times are on the "
       "profiler's clock; a GPU event belongs to the step in which its launch ran.</p>\n";
  h += "</body></html>\n";
  return h;
}

}  // namespace tightpipe
