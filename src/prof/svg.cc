// SVG timeline: one row per rank, compute bars coloured by kind, a thin comm strip under them,
// idle as the grey background, a legend and a time axis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tightpipe/base.h"
#include "tightpipe/prof.h"

namespace tightpipe {

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

double nice_step(double span, int target) {
  if (!(span > 0) || !std::isfinite(span) || target < 1) return 1;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

namespace {

constexpr const char* kIdleColor = "#e6e6e6";

}  // namespace

std::string_view event_kind_color(EventKind kind) {
  switch (kind) {
    case EventKind::kForward:
      return "#4e79a7";  // blue
    case EventKind::kBackwardInput:
      return "#f28e2b";  // orange
    case EventKind::kBackwardWeight:
      return "#59a14f";  // green
    case EventKind::kBackward:
      return "#b07aa1";  // purple
    case EventKind::kSend:
      return "#e15759";  // red
    case EventKind::kRecv:
      return "#ff9da7";  // pink
    case EventKind::kData:
      return "#9c755f";  // brown
    case EventKind::kOptimizer:
      return "#edc948";  // yellow
    case EventKind::kAllReduce:
      return "#17becf";  // cyan
    case EventKind::kOther:
      return "#bab0ac";  // grey-brown
  }
  return "#000000";
}

namespace {

// Where things go on the page: rows start at `top`, time t is drawn at x(t).
struct SvgLayout {
  int left = 70, right = 20;
  int title_h = 0, legend_h = 26, top = 0, rows_h = 0, axis_h = 40, height = 0;
  double makespan = 0, sx = 0;  // time end and pixels per time unit
  double x(double t) const { return left + t * sx; }
};

SvgLayout svg_layout(const Timeline& timeline, const SvgOptions& options, double makespan) {
  SvgLayout layout;
  layout.title_h = options.title.empty() ? 0 : 24;
  layout.top = 10 + layout.title_h + layout.legend_h;
  layout.rows_h = options.row_height * static_cast<int>(timeline.ranks.size());
  layout.height = layout.top + layout.rows_h + layout.axis_h;
  const double plot_w = std::max(10, options.width - layout.left - layout.right);
  layout.makespan = makespan;
  layout.sx = makespan > 0 ? plot_w / makespan : 0.0;
  return layout;
}

std::string svg_legend(const SvgLayout& layout) {
  const int ly = 10 + layout.title_h;
  std::string out = "<g class=\"legend\">\n";
  struct Item {
    const char* label;
    std::string color;
  };
  const Item items[] = {
      {"F forward", std::string(event_kind_color(EventKind::kForward))},
      {"I input grad", std::string(event_kind_color(EventKind::kBackwardInput))},
      {"W weight grad", std::string(event_kind_color(EventKind::kBackwardWeight))},
      {"B full backward", std::string(event_kind_color(EventKind::kBackward))},
      {"SEND", std::string(event_kind_color(EventKind::kSend))},
      {"RECV", std::string(event_kind_color(EventKind::kRecv))},
      {"allreduce", std::string(event_kind_color(EventKind::kAllReduce))},
      {"other", std::string(event_kind_color(EventKind::kOther))},
      {"idle", kIdleColor},
  };
  int x = layout.left;
  for (const Item& it : items) {
    out += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#666\" "
        "stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
        x, ly, it.color, x + 16, ly + 10, it.label);
    x += 30 + static_cast<int>(std::string_view(it.label).size()) * 7;
  }
  return out + "</g>\n";
}

// Row `i`: the idle background, then each event (compute as a bar, comm as a strip under it).
std::string svg_rank_row(const RankTimeline& rt, size_t i, const SvgLayout& layout,
                         const SvgOptions& options, bool titles) {
  const double bar_h = options.row_height * 0.62;
  const double comm_h = options.row_height * 0.18;
  const double y = layout.top + static_cast<double>(i) * options.row_height;
  std::string out = fmt::format("<g class=\"rank\" data-rank=\"{}\">\n", rt.rank);
  out += fmt::format("<text x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\">rank {}</text>\n",
                     layout.left - 6, y + bar_h * 0.5 + 4, rt.rank);
  out += fmt::format(
      "<rect class=\"idle\" x=\"{}\" y=\"{:.2f}\" width=\"{:.3f}\" height=\"{:.2f}\" "
      "fill=\"{}\"/>\n",
      layout.left, y + 2, layout.makespan * layout.sx, bar_h, kIdleColor);
  for (const TimelineEvent& e : rt.events) {
    const bool comm = e.lane != Lane::kCompute;
    // The data-parallel all-reduce gets the lower half of the strip: it overlaps the
    // pipeline's SEND/RECV strip when it runs on its helper thread.
    const bool allreduce = e.lane == Lane::kAllReduce;
    const double ey = allreduce ? y + 2 + bar_h + 1 + 0.5 * comm_h
                      : comm    ? y + 2 + bar_h + 1
                                : y + 2;
    const double eh = allreduce ? 0.5 * comm_h : comm ? comm_h : bar_h;
    const double w = std::max(0.0, (e.end - e.start) * layout.sx);
    out += fmt::format(
        "<rect class=\"ev\" x=\"{:.3f}\" y=\"{:.2f}\" width=\"{:.3f}\" height=\"{:.2f}\" "
        "fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.3\"",
        layout.x(e.start), ey, w, eh, event_kind_color(e.kind));
    if (titles) {
      out += fmt::format("><title>{} [{:g}, {:g}]</title></rect>\n", xml_escape(e.name), e.start,
                         e.end);
    } else {
      out += "/>\n";
    }
  }
  return out + "</g>\n";
}

// The time axis under the rows: "nice" ticks and the unit.
std::string svg_axis(const SvgLayout& layout, const std::string& time_unit) {
  const double ay = layout.top + layout.rows_h + 4;
  std::string out = "<g class=\"axis\">\n";
  out +=
      fmt::format("<line x1=\"{}\" y1=\"{:.2f}\" x2=\"{:.3f}\" y2=\"{:.2f}\" stroke=\"#333\"/>\n",
                  layout.left, ay, layout.x(layout.makespan), ay);
  const double step = nice_step(layout.makespan, 10);
  for (int k = 0; layout.makespan > 0 && k * step <= layout.makespan * (1 + 1e-9); ++k) {
    const double t = k * step;
    out += fmt::format(
        "<line x1=\"{:.3f}\" y1=\"{:.2f}\" x2=\"{:.3f}\" y2=\"{:.2f}\" stroke=\"#333\"/>"
        "<text x=\"{:.3f}\" y=\"{:.2f}\" text-anchor=\"middle\">{:g}</text>\n",
        layout.x(t), ay, layout.x(t), ay + 5, layout.x(t), ay + 18, t);
  }
  out += fmt::format("<text x=\"{:.3f}\" y=\"{:.2f}\" text-anchor=\"end\">time ({})</text>\n",
                     layout.x(layout.makespan), ay + 34, xml_escape(time_unit));
  return out + "</g>\n";
}

}  // namespace

std::string to_svg(const Timeline& timeline, const SvgOptions& options) {
  double makespan = 0;
  size_t n_events = 0;
  for (const auto& r : timeline.ranks) {
    n_events += r.events.size();
    for (const auto& e : r.events) makespan = std::max(makespan, e.end);
  }
  const bool titles = options.hover_titles && n_events <= 200000;
  const SvgLayout layout = svg_layout(timeline, options, makespan);

  std::string out;
  out.reserve(4096 + n_events * (titles ? 160 : 100));
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      options.width, layout.height, options.width, layout.height);
  out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                     options.width, layout.height);
  if (!options.title.empty()) {
    out += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                       layout.left, xml_escape(options.title));
  }
  out += svg_legend(layout);
  for (size_t i = 0; i < timeline.ranks.size(); ++i)
    out += svg_rank_row(timeline.ranks[i], i, layout, options, titles);
  out += svg_axis(layout, timeline.time_unit);
  out += "</svg>\n";
  return out;
}

Status write_svg(const std::string& path, const Timeline& timeline, const SvgOptions& options) {
  return write_file(path, to_svg(timeline, options)).with_context(fmt::format("--svg {}", path));
}

}  // namespace tightpipe
