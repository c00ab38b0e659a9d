// SVG timeline: one row per rank, compute bars coloured by kind, a thin comm strip under them,
// idle as the grey background, a legend and a time axis.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tightpipe/base.h"
#include "tightpipe/prof.h"

namespace tightpipe {
namespace {

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` ticks.
double nice_step(double span, int target) {
  if (span <= 0) return 1;
  const double raw = span / target;
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

constexpr const char* kIdleColor = "#e6e6e6";

}  // namespace

std::string_view event_kind_color(EventKind kind) {
  switch (kind) {
    case EventKind::kForward: return "#4e79a7";         // blue
    case EventKind::kBackwardInput: return "#f28e2b";   // orange
    case EventKind::kBackwardWeight: return "#59a14f";  // green
    case EventKind::kBackward: return "#b07aa1";        // purple
    case EventKind::kSend: return "#e15759";            // red
    case EventKind::kRecv: return "#ff9da7";            // pink
    case EventKind::kData: return "#9c755f";            // brown
    case EventKind::kOptimizer: return "#edc948";       // yellow
    case EventKind::kOther: return "#bab0ac";           // grey-brown
  }
  return "#000000";
}

std::string to_svg(const Timeline& timeline, const SvgOptions& options) {
  double makespan = 0;
  size_t n_events = 0;
  for (const auto& r : timeline.ranks) {
    n_events += r.events.size();
    for (const auto& e : r.events) makespan = std::max(makespan, e.end);
  }
  const bool titles = options.hover_titles && n_events <= 200000;
  const int left = 70, right = 20;
  const int title_h = options.title.empty() ? 0 : 24;
  const int legend_h = 26;
  const int top = 10 + title_h + legend_h;
  const int rows_h = options.row_height * static_cast<int>(timeline.ranks.size());
  const int axis_h = 40;
  const int height = top + rows_h + axis_h;
  const double plot_w = std::max(10, options.width - left - right);
  const double sx = makespan > 0 ? plot_w / makespan : 0.0;
  auto X = [&](double t) { return left + t * sx; };

  std::string out;
  out.reserve(4096 + n_events * (titles ? 160 : 100));
  out += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n",
      options.width, height, options.width, height);
  out += fmt::format("<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
                     options.width, height);
  if (!options.title.empty()) {
    out += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
                       left, xml_escape(options.title));
  }
  // Legend.
  {
    const int ly = 10 + title_h;
    out += "<g class=\"legend\">\n";
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
        {"other", std::string(event_kind_color(EventKind::kOther))},
        {"idle", kIdleColor},
    };
    int x = left;
    for (const Item& it : items) {
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#666\" "
          "stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
          x, ly, it.color, x + 16, ly + 10, it.label);
      x += 30 + static_cast<int>(std::string_view(it.label).size()) * 7;
    }
    out += "</g>\n";
  }
  // Rows.
  const double bar_h = options.row_height * 0.62;
  const double comm_h = options.row_height * 0.18;
  for (size_t i = 0; i < timeline.ranks.size(); ++i) {
    const RankTimeline& rt = timeline.ranks[i];
    const double y = top + static_cast<double>(i) * options.row_height;
    out += fmt::format("<g class=\"rank\" data-rank=\"{}\">\n", rt.rank);
    out += fmt::format("<text x=\"{}\" y=\"{:.2f}\" text-anchor=\"end\">rank {}</text>\n", left - 6,
                       y + bar_h * 0.5 + 4, rt.rank);
    out += fmt::format(
        "<rect class=\"idle\" x=\"{}\" y=\"{:.2f}\" width=\"{:.3f}\" height=\"{:.2f}\" "
        "fill=\"{}\"/>\n",
        left, y + 2, makespan * sx, bar_h, kIdleColor);
    for (const TimelineEvent& e : rt.events) {
      const bool comm = e.lane != Lane::kCompute;
      const double ey = comm ? y + 2 + bar_h + 1 : y + 2;
      const double eh = comm ? comm_h : bar_h;
      const double w = std::max(0.0, (e.end - e.start) * sx);
      out += fmt::format(
          "<rect class=\"ev\" x=\"{:.3f}\" y=\"{:.2f}\" width=\"{:.3f}\" height=\"{:.2f}\" "
          "fill=\"{}\" stroke=\"#ffffff\" stroke-width=\"0.3\"",
          X(e.start), ey, w, eh, event_kind_color(e.kind));
      if (titles) {
        out += fmt::format("><title>{} [{:g}, {:g}]</title></rect>\n", xml_escape(e.name), e.start,
                           e.end);
      } else {
        out += "/>\n";
      }
    }
    out += "</g>\n";
  }
  // Axis.
  {
    const double ay = top + rows_h + 4;
    out += "<g class=\"axis\">\n";
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{:.2f}\" x2=\"{:.3f}\" y2=\"{:.2f}\" stroke=\"#333\"/>\n", left, ay,
        X(makespan), ay);
    const double step = nice_step(makespan, 10);
    for (int k = 0; makespan > 0 && k * step <= makespan * (1 + 1e-9); ++k) {
      const double t = k * step;
      out += fmt::format(
          "<line x1=\"{:.3f}\" y1=\"{:.2f}\" x2=\"{:.3f}\" y2=\"{:.2f}\" stroke=\"#333\"/>"
          "<text x=\"{:.3f}\" y=\"{:.2f}\" text-anchor=\"middle\">{:g}</text>\n",
          X(t), ay, X(t), ay + 5, X(t), ay + 18, t);
    }
    out += fmt::format(
        "<text x=\"{:.3f}\" y=\"{:.2f}\" text-anchor=\"end\">time ({})</text>\n", X(makespan),
        ay + 34, xml_escape(timeline.time_unit));
    out += "</g>\n";
  }
  out += "</svg>\n";
  return out;
}

Status write_svg(const std::string& path, const Timeline& timeline, const SvgOptions& options) {
  return write_file(path, to_svg(timeline, options)).with_context(fmt::format("--svg {}", path));
}

}  // namespace tightpipe
