// report.html: one self-contained page (inline CSS and SVG; no script, no network).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "report/report_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/prof.h"
#include "tightpipe/report.h"

namespace tightpipe {
namespace report_internal {
namespace {

std::string strip_xml_decl(std::string svg) {
  if (svg.starts_with("<?xml")) svg.erase(0, svg.find('\n') + 1);
  return svg;
}

// The bars' geometry: the plot starts at kBarsLeft, kBarsPlot wide.
constexpr int kBarsLeft = 120, kBarsWidth = 1100, kBarsPlot = kBarsWidth - kBarsLeft - 80;
constexpr int kBarH = 16;

std::string bars_legend(const std::vector<BarSegment>& legend) {
  std::string out = "<g class=\"legend\">";
  int x = kBarsLeft;
  for (const auto& s : legend) {
    out += fmt::format(
        "<rect x=\"{}\" y=\"6\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#666\" "
        "stroke-width=\"0.5\"/><text x=\"{}\" y=\"16\">{}</text>",
        x, s.color, x + 16, xml_escape(s.label));
    x += 28 + static_cast<int>(s.label.size()) * 7;
  }
  return out + "</g>\n";
}

// One stacked bar at height y: each segment's share of the bar's total, labelled with its tag.
std::string bar_svg(double y, const Bar& bar, int rank) {
  std::string g = fmt::format("<g class=\"bar {}\" data-rank=\"{}\">", bar.tag, rank);
  double x = kBarsLeft;
  for (const auto& s : bar.segments) {
    if (s.value <= 0 || bar.total <= 0) continue;
    const double w = kBarsPlot * s.value / bar.total;
    g += fmt::format(
        "<rect class=\"seg\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
        "fill=\"{}\"><title>rank {} {}: {} = {} ({})</title></rect>",
        x, y, w, kBarH, s.color, rank, bar.tag, xml_escape(s.label), fmt_time(s.value, "s"),
        pct(s.value / bar.total));
    x += w;
  }
  g += fmt::format("<text x=\"{}\" y=\"{:.1f}\">{}</text></g>\n", kBarsLeft + kBarsPlot + 6, y + 12,
                   bar.tag);
  return g;
}

}  // namespace

std::string html_page_head(const std::string& title) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>{}</title>\n", xml_escape(title));
  h += R"(<style>
body{font-family:sans-serif;margin:20px;color:#222;max-width:1180px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3} td.l,th.l{text-align:left}
.warn{background:#fff4e5;border:1px solid #f0b060;padding:6px 10px}
.kpi{display:inline-block;margin-right:28px;font-size:14px} .kpi b{font-size:20px}
.row{display:flex;gap:24px;flex-wrap:wrap} .missing{color:#c00} .note{color:#555;font-size:12px}
</style></head><body>
)";
  return h;
}

std::string timeline_svg(Timeline timeline, double axis_end, const std::string& title,
                         const std::string& cls) {
  Timeline& tl = timeline;
  if (!tl.ranks.empty()) {
    TimelineEvent mark;
    mark.name = "axis end";
    mark.kind = EventKind::kOther;
    mark.start = mark.end = axis_end;
    tl.ranks.front().events.push_back(mark);
  }
  SvgOptions so;
  so.width = 1100;
  so.row_height = 26;
  so.title = title;
  std::string svg = strip_xml_decl(to_svg(tl, so));
  return fmt::format("<div class=\"timeline {}\">{}</div>\n", cls, svg);
}

std::string stacked_bars_svg(const std::vector<BarSegment>& legend, const std::vector<BarRow>& rows,
                             const std::string& full) {
  size_t per_row = 1;
  for (const auto& row : rows) per_row = std::max(per_row, row.bars.size());
  const int n = static_cast<int>(per_row);
  const int row_h = n * kBarH + 4 * (n - 1) + 10;
  const int legend_h = 26;
  const int height = legend_h + static_cast<int>(rows.size()) * row_h + 30;
  std::string out = fmt::format(
      "<svg class=\"bars\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      kBarsWidth, height, kBarsWidth, height);
  out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                     kBarsWidth, height);
  out += bars_legend(legend);
  for (size_t i = 0; i < rows.size(); ++i) {
    const BarRow& row = rows[i];
    const double y = legend_h + static_cast<double>(i) * row_h;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">rank {}</text>\n",
                       kBarsLeft - 8, y + 12, row.rank);
    if (row.missing) {
      out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" fill=\"#c00\">missing</text>\n", kBarsLeft,
                         y + 12);
      continue;
    }
    for (size_t b = 0; b < row.bars.size(); ++b)
      out += bar_svg(y + static_cast<double>(b) * (kBarH + 3), row.bars[b], row.rank);
  }
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\">0%</text><text x=\"{}\" y=\"{}\" "
      "text-anchor=\"end\">{}</text>\n",
      kBarsLeft, height - 8, kBarsLeft + kBarsPlot, height - 8, xml_escape(full));
  out += "</svg>\n";
  return out;
}

}  // namespace report_internal

namespace {

using report_internal::BarRow;
using report_internal::BarSegment;
using report_internal::fmt_time;
using report_internal::pct;
using report_internal::stacked_bars_svg;
using report_internal::timeline_svg;

std::string esc(std::string_view s) { return xml_escape(s); }

std::vector<BarSegment> segments(const std::array<double, kNumBusyKinds>& busy,
                                 const std::array<double, kNumIdleCauses>& idle) {
  const EventKind kinds[] = {EventKind::kForward, EventKind::kBackwardInput,
                             EventKind::kBackwardWeight, EventKind::kBackward,
                             EventKind::kOptimizer};
  std::vector<BarSegment> out;
  for (int k = 0; k < kNumBusyKinds; ++k)
    out.push_back({std::string(busy_kind_name(static_cast<BusyKind>(k))),
                   std::string(event_kind_color(kinds[k])), busy[k]});
  for (int c = 0; c < kNumIdleCauses; ++c)
    out.push_back({std::string(idle_cause_name(static_cast<IdleCause>(c))),
                   std::string(idle_cause_color(static_cast<IdleCause>(c))), idle[c]});
  return out;
}

std::string bars_svg(const Report& rep) {
  std::vector<BarRow> rows;
  for (int r = 0; r < rep.run.num_ranks; ++r) {
    BarRow row;
    row.rank = r;
    row.missing = !rep.run.rank_present[r];
    if (!row.missing) {
      const auto& sm = rep.summary;
      double total = 0;
      for (double v : sm.rank_busy[r]) total += v;
      for (double v : sm.rank_idle[r]) total += v;
      row.bars.push_back({"measured", segments(sm.rank_busy[r], sm.rank_idle[r]), total});
      if (rep.has_prediction) {
        const auto& pr = rep.predicted_breakdown.ranks[r];
        row.bars.push_back({"predicted", segments(pr.busy, pr.idle), rep.predicted.makespan});
      }
    }
    rows.push_back(std::move(row));
  }
  return stacked_bars_svg(segments({}, {}), rows, "100% of the step");
}

std::string loss_svg(const std::vector<MetricPoint>& pts) {
  const int w = 540, h = 240, l = 56, r = 16, t = 14, b = 34;
  std::string out = fmt::format(
      "<svg class=\"loss\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
      w, h, w, h, w, h);
  if (pts.empty()) return out + "<text x=\"20\" y=\"40\">no metrics.jsonl</text></svg>\n";
  double x0 = pts.front().step, x1 = pts.front().step, y0 = pts.front().loss, y1 = y0;
  for (const auto& p : pts) {
    x0 = std::min<double>(x0, p.step);
    x1 = std::max<double>(x1, p.step);
    y0 = std::min(y0, p.loss);
    y1 = std::max(y1, p.loss);
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 - y0 < 1e-9) {
    y0 -= 0.5;
    y1 += 0.5;
  }
  auto X = [&](double x) { return l + (x - x0) / (x1 - x0) * (w - l - r); };
  auto Y = [&](double y) { return t + (y1 - y) / (y1 - y0) * (h - t - b); };
  out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>", l, h - b,
                     w - r, h - b);
  out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n", l, t, l,
                     h - b);
  std::string poly;
  for (const auto& p : pts) poly += fmt::format("{:.2f},{:.2f} ", X(p.step), Y(p.loss));
  out += fmt::format(
      "<polyline class=\"curve\" fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"2\" "
      "points=\"{}\"/>\n",
      poly);
  for (const auto& p : pts)
    out += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2\" fill=\"#4e79a7\"/>", X(p.step),
                       Y(p.loss));
  out += fmt::format(
      "\n<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.3f}</text><text x=\"{}\" y=\"{:.1f}\" "
      "text-anchor=\"end\">{:.3f}</text>",
      l - 4, Y(y1) + 4, y1, l - 4, Y(y0) + 4, y0);
  out += fmt::format(
      "<text x=\"{}\" y=\"{}\">{:g}</text><text x=\"{}\" y=\"{}\" text-anchor=\"end\">step "
      "{:g}</text>"
      "<text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\">loss</text>\n",
      l, h - b + 16, x0, w - r, h - b + 16, x1, h / 2, h / 2);
  return out + "</svg>\n";
}

std::string memory_svg(const Report& rep) {
  const int P = rep.run.num_ranks;
  const int w = 540, l = 60, bh = 12, row = 2 * bh + 10, h = 30 + P * row + 20;
  std::vector<double> meas(P, 0), pred(P, 0);
  double mx = 0;
  for (int r = 0; r < P; ++r) {
    if (r < static_cast<int>(rep.run.measured_peak_act_bytes.size()))
      meas[r] = rep.run.measured_peak_act_bytes[r];
    if (rep.has_prediction && r < static_cast<int>(rep.predicted.ranks.size()))
      pred[r] = rep.predicted.ranks[r].peak_activation_bytes;
    mx = std::max({mx, meas[r], pred[r]});
  }
  std::string out = fmt::format(
      "<svg class=\"memory\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n"
      "<rect x=\"{}\" y=\"6\" width=\"12\" height=\"12\" fill=\"#4e79a7\"/><text x=\"{}\" "
      "y=\"16\">measured</text><rect x=\"{}\" y=\"6\" width=\"12\" height=\"12\" "
      "fill=\"#f28e2b\"/><text x=\"{}\" y=\"16\">predicted</text>\n",
      w, h, w, h, w, h, l, l + 16, l + 100, l + 116);
  const double plot = w - l - 110;
  for (int r = 0; r < P; ++r) {
    const double y = 28 + r * row;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">rank {}</text>", l - 6,
                       y + bh + 4, r);
    const double vals[2] = {meas[r], pred[r]};
    const char* colors[2] = {"#4e79a7", "#f28e2b"};
    for (int k = 0; k < 2; ++k) {
      const double bw = mx > 0 ? plot * vals[k] / mx : 0;
      out += fmt::format(
          "<rect class=\"mem\" x=\"{}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"/>"
          "<text x=\"{:.1f}\" y=\"{:.1f}\">{}</text>",
          l, y + k * (bh + 1), std::max(bw, 1.0), bh, colors[k], l + bw + 4, y + k * (bh + 1) + 10,
          human_bytes(vals[k]));
    }
    out += "\n";
  }
  if (mx <= 0)
    out += fmt::format(
        "<text x=\"{}\" y=\"{}\">no activation memory recorded (emulated compute "
        "holds no activations)</text>\n",
        l, h - 6);
  return out + "</svg>\n";
}

// The title line, the warnings and the headline numbers (step time, bubble measured/predicted).
std::string html_summary(const Report& rep) {
  const RunData& run = rep.run;
  const auto& sm = rep.summary;
  std::string h = fmt::format(
      "<h1>tightpipe bubble report</h1><p>{}: <b>{}</b>, p={}, v={}, m={}{}{}; {} "
      "steps measured, {} warm-up left out; drawn: step {}</p>\n",
      esc(run.dir), esc(run.schedule_name.empty() ? "?" : run.schedule_name), run.num_ranks,
      run.vpp, run.microbatches, run.transport.empty() ? "" : ", " + esc(run.transport),
      run.compute.empty() ? "" : ", " + esc(run.compute) + " compute", sm.steps.size(),
      sm.warmup_steps.size(), rep.shown_step);
  if (run.oversubscribed) {
    h += fmt::format(
        "<div class=\"warn\"><b>Oversubscribed:</b> {} computing ranks ({} busy threads with the "
        "loaders) on {} cores. The ranks took turns on the cores: actions stretched, and the time "
        "a ready rank waited for a core is <i>cpu wait</i>. This bubble is the machine's, not "
        "the schedule's.</div>\n",
        run.rank_threads, run.busy_threads, run.cores);
  }
  if (!run.warnings.empty()) {
    h += "<div class=\"warn\"><b>Warnings</b><ul>";
    for (const auto& w : run.warnings) h += "<li>" + esc(w) + "</li>";
    h += "</ul></div>\n";
  }
  h += fmt::format(
      "<p><span class=\"kpi\">step time <b>{}</b> (p10 {}, p90 {})</span>"
      "<span class=\"kpi\">bubble measured <b>{}</b> (p10 {}, p90 {})</span>",
      fmt_time(sm.step_time.median, "s"), fmt_time(sm.step_time.p10, "s"),
      fmt_time(sm.step_time.p90, "s"), pct(sm.bubble_ratio.median), pct(sm.bubble_ratio.p10),
      pct(sm.bubble_ratio.p90));
  if (rep.has_prediction) {
    h += fmt::format("<span class=\"kpi\">predicted <b>{}</b>, step {}</span>",
                     pct(rep.predicted.bubble_ratio),
                     fmt_time(rep.predicted.makespan, rep.predicted.time_unit));
  } else {
    h += fmt::format("<span class=\"kpi\">no prediction: {}</span>", esc(rep.prediction_error));
  }
  // The second measure (docs/bubble.md): each rank from its first to its last compute.
  h += fmt::format(
      "<span class=\"kpi\" title=\"each rank timed from its first to its last F/I/W/B, the "
      "zero-bubble paper's measure; the bubble above times every rank from the step start to "
      "the step end\">span bubble measured <b>{}</b>{}</span>",
      pct(sm.span_bubble_ratio.median),
      rep.has_prediction ? fmt::format(", predicted {}", pct(rep.predicted.span_bubble_ratio))
                         : std::string());
  return h + "</p>\n";
}

// The measured step and the predicted one, one above the other on one time axis.
std::string html_timelines(const Report& rep) {
  std::string h = "<h2>Timelines: measured (above) and predicted (below), one time axis</h2>\n";
  double axis = 0;
  for (const auto& rt : rep.measured.ranks)
    for (const auto& e : rt.events) axis = std::max(axis, e.end);
  if (rep.has_prediction) axis = std::max(axis, rep.predicted.makespan);
  h += timeline_svg(rep.measured, axis, fmt::format("measured, step {}", rep.shown_step),
                    "measured");
  if (rep.has_prediction) {
    h += timeline_svg(rep.predicted.timeline, axis,
                      fmt::format("predicted (simulator, {} costs)", rep.predicted.cost_source),
                      "predicted");
  }
  return h;
}

// One row of the breakdown table.
std::string html_rank_row(const Report& rep, int r) {
  const auto& sm = rep.summary;
  if (!rep.run.rank_present[r]) {
    return fmt::format(
        "<tr><td class=\"l\">{}</td><td class=\"l missing\" colspan=\"{}\">missing"
        "</td></tr>\n",
        r, kNumBusyKinds + kNumIdleCauses + 1 + (rep.has_prediction ? 2 : 0));
  }
  std::string h = fmt::format("<tr><td class=\"l\">{}</td>", r);
  for (int k = 0; k < kNumBusyKinds; ++k) h += "<td>" + fmt_time(sm.rank_busy[r][k], "s") + "</td>";
  for (int c = 0; c < kNumIdleCauses; ++c)
    h += "<td>" + fmt_time(sm.rank_idle[r][c], "s") + "</td>";
  h += "<td>" + pct(sm.rank_bubble_ratio[r]) + "</td>";
  if (rep.has_prediction) {
    h += "<td>" + pct(rep.predicted.ranks[r].bubble_ratio) + "</td><td>" +
         fmt_time(rep.gap_per_rank[r], rep.predicted.time_unit) + "</td>";
  }
  return h + "</tr>\n";
}

// The per-rank breakdown: stacked bars, the table and the idle share per cause.
std::string html_breakdown(const Report& rep) {
  std::string h = "<h2>Bubble breakdown per rank (median over measured steps)</h2>\n";
  h += bars_svg(rep);
  h += "<table><tr><th class=\"l\">rank</th>";
  for (int k = 0; k < kNumBusyKinds; ++k)
    h += fmt::format("<th>{}</th>", busy_kind_name(static_cast<BusyKind>(k)));
  for (int c = 0; c < kNumIdleCauses; ++c)
    h += fmt::format("<th>{}</th>", idle_cause_name(static_cast<IdleCause>(c)));
  h += "<th>bubble</th>";
  if (rep.has_prediction) h += "<th>predicted bubble</th><th>gap (last compute)</th>";
  h += "</tr>\n";
  for (int r = 0; r < rep.run.num_ranks; ++r) h += html_rank_row(rep, r);
  h += "</table>\n<p>Idle by cause, share of P &times; step time:";
  for (int c = 0; c < kNumIdleCauses; ++c)
    h += fmt::format(" {} <b>{}</b>{}", idle_cause_name(static_cast<IdleCause>(c)),
                     pct(rep.summary.cause_ratio[c].median), c + 1 < kNumIdleCauses ? "," : ".");
  return h + "</p>\n";
}

// Predicted vs measured step time and the largest contributors to the gap.
std::string html_gap(const Report& rep) {
  if (!rep.has_prediction) return "";
  std::string h = fmt::format(
      "<h2>Predicted vs measured</h2><p>measured step {} vs predicted {}: gap "
      "<b>{}</b>.</p>",
      fmt_time(rep.summary.step_time.median, "s"),
      fmt_time(rep.predicted.makespan, rep.predicted.time_unit), fmt_time(rep.gap_total, "s"));
  if (!rep.gap_contributors.empty()) {
    h += "<p>Largest contributors:</p><ol>";
    for (const auto& g : rep.gap_contributors) h += "<li>" + esc(g.text) + "</li>";
    h += "</ol>\n";
  }
  return h;
}

std::string html_what_if(const Report& rep) {
  if (rep.what_ifs.empty()) return "";
  const std::string& unit = rep.predicted.time_unit;
  std::string h =
      "<h2>What-if: the run's measured costs under other schedules</h2>\n<table><tr>"
      "<th class=\"l\">schedule</th><th>v</th><th>step</th><th>bubble</th><th>saves per step"
      "</th><th>bubble saved</th><th>GPU-hours saved (run)</th><th>peak activations</th>"
      "<th>memory cost</th><th class=\"l\">layer split</th></tr>\n";
  for (const auto& w : rep.what_ifs) {
    if (!w.error.empty()) {
      h += fmt::format("<tr><td class=\"l\">{}</td><td class=\"l\" colspan=\"9\">{}</td></tr>\n",
                       esc(w.label), esc(w.error.substr(0, w.error.find('\n'))));
      continue;
    }
    h += fmt::format(
        "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f} pp"
        "</td><td>{:.4g}</td><td>{}</td><td>{}{}</td><td class=\"l\">{}</td></tr>\n",
        esc(w.label), w.chunks, fmt_time(w.makespan, unit), pct(w.bubble_ratio),
        fmt_time(w.step_saving, unit), 100 * w.bubble_saving, w.gpu_hours_saved,
        human_bytes(w.peak_act_bytes), w.peak_act_delta >= 0 ? "+" : "-",
        human_bytes(std::abs(w.peak_act_delta)), esc(w.layout));
  }
  return h + "</table>\n";
}

}  // namespace

std::string report_html(const Report& rep) {
  std::string h =
      report_internal::html_page_head(fmt::format("tightpipe report: {}", rep.run.dir)) +
      html_summary(rep);
  h += html_timelines(rep);
  h += html_breakdown(rep);
  h += html_gap(rep);
  h += "<h2>Loss and peak activation memory</h2><div class=\"row\">";
  h += loss_svg(rep.run.metrics);
  h += memory_svg(rep);
  h += "</div>\n";
  h += html_what_if(rep);
  h += "<p style=\"color:#777;font-size:12px\">Causes: fill = before the rank's first compute; "
       "drain = after its last; dependency wait = the peer had not sent the message yet; exposed "
       "comm = the message was posted but still in flight; data wait = the loader; cpu wait = the "
       "rank was ready but waited for a core; other = the rest. docs/report.md, docs/bubble.md."
       "</p>\n";
  h += "</body></html>\n";
  return h;
}

}  // namespace tightpipe
