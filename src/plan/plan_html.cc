// plan.html: one self-contained page (inline CSS and SVG; no script, no network). A scatter plot
// of step time against the peak memory per rank of every candidate, with the cost of the training
// run on a right-hand axis, the memory budget and the recommended point; then the table of the
// best candidates, the reason for the recommendation, the ones that do not fit and the search
// figures. Every string that comes from the result is escaped (xml_escape).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "plan_format.h"
#include "tightpipe/base.h"
#include "tightpipe/check.h"
#include "tightpipe/plan.h"
#include "tightpipe/prof.h"

namespace tightpipe {
namespace {

std::string esc(std::string_view s) { return xml_escape(s); }

using plan_format::kGiB;

// ----- numbers as the page shows them -----------------------------------------------------------

// "950", "12.5k", "3.2M", "1.25B": counts and dollars.
std::string short_number(double v) {
  const double a = std::abs(v);
  if (a >= 1e12) return fmt::format("{:.4g}T", v / 1e12);
  if (a >= 1e9) return fmt::format("{:.4g}B", v / 1e9);
  if (a >= 1e6) return fmt::format("{:.4g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.4g}k", v / 1e3);
  return fmt::format("{:.4g}", v);
}

std::string usd(double v) { return v < 0 ? "-$" + short_number(-v) : "$" + short_number(v); }
std::string seconds(double s) { return fmt::format("{:.4g} s", s); }
using plan_format::percent;
std::string signed_percent(double ratio) { return fmt::format("{:+.1f}%", 100 * ratio); }
std::string duration_hours(double h) {
  return h < 48 ? fmt::format("{:.1f} h", h) : fmt::format("{:.1f} days", h / 24);
}

// The highest peak over the ranks; nullopt when the candidate has none (refused by shape).
std::optional<double> max_peak_bytes(const PlanCandidate& c) {
  if (c.peak_memory_bytes.empty()) return std::nullopt;
  const double m = *std::max_element(c.peak_memory_bytes.begin(), c.peak_memory_bytes.end());
  if (!std::isfinite(m) || m < 0) return std::nullopt;
  return m;
}

// The step time is drawn only when it comes from a simulation.
bool has_step_time(const PlanCandidate& c) {
  return c.simulated && std::isfinite(c.step_time_s) && c.step_time_s > 0;
}

// "zb-v p=8 v=2 mbs=1 m=32 recompute=none" (escaped).
std::string candidate_key(const PlanCandidate& c) {
  return fmt::format("{} p={} v={} mbs={} m={} recompute={}", esc(c.schedule), c.pp, c.vpp,
                     c.micro_batch_size, c.num_microbatches, esc(c.recompute));
}

// The hover text of a point (escaped): key, step time, bubble, memory, cost, why it does not fit.
std::string candidate_tooltip(const PlanCandidate& c) {
  std::string t = candidate_key(c) + fmt::format(" dp={}", c.dp);
  if (has_step_time(c)) {
    t += fmt::format("\nstep {}, bubble {}, {} tokens/s", seconds(c.step_time_s),
                     percent(c.bubble_ratio), short_number(c.tokens_per_s));
  } else {
    t += "\nnot simulated";
  }
  if (const auto m = max_peak_bytes(c)) t += "\npeak memory " + human_bytes(*m) + " (highest rank)";
  if (has_step_time(c) && c.cost_usd > 0)
    t += fmt::format("\n{} to train, {}", duration_hours(c.train_hours), usd(c.cost_usd));
  if (!c.fits) t += "\ndoes not fit: " + esc(c.reason);
  return t;
}

// ----- plot geometry
// ------------------------------------------------------------------------------

// An axis from lo to hi cut at round ticks.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> ticks() const {
    std::vector<double> t;
    for (int k = 0; k <= 1000; ++k) {
      const double v = lo + k * step;
      if (v > hi + step * 1e-6) break;
      t.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    }
    return t;
  }
};

// Round ends around [lo, hi], about `target` ticks; a flat range is widened. `margin` (a share of
// the range) keeps values at the ends off the frame.
Axis round_axis(double lo, double hi, int target, double margin = 0) {
  if (!(hi > lo)) {
    const double pad = lo != 0 ? std::abs(lo) * 0.1 : 1;
    lo -= pad;
    hi += pad;
  }
  const double pad = margin * (hi - lo);
  lo = lo < 0 || lo - pad >= 0 ? lo - pad : 0;  // a range of positive values stays positive
  hi += pad;
  Axis a;
  a.step = nice_step(hi - lo, target);
  a.lo = std::floor(lo / a.step) * a.step;
  a.hi = std::ceil(hi / a.step) * a.step;
  return a;
}

// Colours (the Tableau 10 palette the timeline uses) and marker shapes per schedule.
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                   "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
constexpr int kNumColors = 10, kNumShapes = 5;
constexpr const char* kNoFitStroke = "#9a9a9a";
constexpr const char* kRecommendedColor = "#c0392b";

// Schedule s (its index in the legend) gets colour s mod 10 and a shape that differs from the
// shapes of the schedules sharing its colour (up to 50 schedules).
const char* color_of(int s) { return kColors[s % kNumColors]; }
int shape_of(int s) { return (s + s / kNumColors) % kNumShapes; }
// The SVG element a shape is drawn with.
const char* shape_tag(int shape) { return shape == 0 ? "circle" : shape == 1 ? "rect" : "path"; }

// A marker of `shape` centred on (x, y), radius r: the opening of the element, attributes to
// follow ("<circle cx=.. cy=.. r=..").
std::string marker_open(int shape, double x, double y, double r) {
  switch (shape) {
    case 0:
      return fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\"", x, y, r);
    case 1: {
      const double h = r * 0.9;
      return fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\"",
                         x - h, y - h, 2 * h, 2 * h);
    }
    case 2:
      return fmt::format("<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\"", x, y - 1.2 * r,
                         x + 1.1 * r, y + 0.8 * r, x - 1.1 * r, y + 0.8 * r);
    case 3:
      return fmt::format("<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\"", x,
                         y - 1.25 * r, x + 1.25 * r, y, x, y + 1.25 * r, x - 1.25 * r, y);
    default:
      return fmt::format("<path d=\"M{:.1f},{:.1f}L{:.1f},{:.1f}L{:.1f},{:.1f}Z\"", x, y + 1.2 * r,
                         x + 1.1 * r, y - 0.8 * r, x - 1.1 * r, y - 0.8 * r);
  }
}

// What one plot shows on its vertical axis.
struct Metric {
  std::string label;                      // "step time (s)"
  double (*value)(const PlanCandidate&);  // the value drawn
  std::string (*tick)(double);            // a tick label
};

double step_value(const PlanCandidate& c) { return c.step_time_s; }
double cost_value(const PlanCandidate& c) { return c.cost_usd; }
std::string step_tick(double v) { return fmt::format("{:g}", v); }

// The scatter plot's inputs, worked out once for the page.
struct PlotData {
  std::vector<std::string> schedules;  // legend order (sorted)
  std::map<std::string, int> schedule_index;
  std::vector<int> drawn;  // candidates with a memory figure
  int without_memory = 0;  // refused by shape: no point
  double budget_gib = 0;
  // Dollars per second of step time when every simulated candidate's cost is proportional to its
  // step time (same steps, devices and price): the right-hand axis. 0: no cost axis.
  double usd_per_step_second = 0;
  bool any_cost = false;
};

PlotData plot_data(const PlanResult& result) {
  PlotData d;
  for (const auto& c : result.candidates) d.schedule_index.emplace(c.schedule, 0);
  for (auto& [name, index] : d.schedule_index) {
    index = static_cast<int>(d.schedules.size());
    d.schedules.push_back(name);
  }
  for (size_t i = 0; i < result.candidates.size(); ++i) {
    if (max_peak_bytes(result.candidates[i])) {
      d.drawn.push_back(static_cast<int>(i));
    } else {
      ++d.without_memory;
    }
  }
  d.budget_gib = std::isfinite(result.memory_budget_bytes) && result.memory_budget_bytes > 0
                     ? result.memory_budget_bytes / kGiB
                     : 0;
  double ratio = 0;
  bool proportional = true;
  for (const auto& c : result.candidates) {
    if (!has_step_time(c) || !std::isfinite(c.cost_usd) || c.cost_usd <= 0) continue;
    d.any_cost = true;
    const double r = c.cost_usd / c.step_time_s;
    if (ratio == 0) ratio = r;
    if (std::abs(r - ratio) > 1e-6 * ratio) proportional = false;
  }
  d.usd_per_step_second = proportional ? ratio : 0;
  return d;
}

// Where things go: the plot area [left, right] x [top, bottom]; a strip under it for the points
// without a step time; a band at its right end for memory beyond the axis.
struct Frame {
  static constexpr int kWidth = 980, kLeft = 78, kRight = 980 - 92, kBandW = 46;
  int legend_rows = 1;
  int top = 0, bottom = 0, strip_top = 0, strip_bottom = 0, height = 0;
  bool strip = false, band = false;
  Axis x, y;
  double x_plot_right() const { return band ? kRight - kBandW : kRight; }
  double X(double gib) const {
    if (gib > x.hi) return kRight - kBandW / 2.0;
    return kLeft + (gib - x.lo) / (x.hi - x.lo) * (x_plot_right() - kLeft);
  }
  double Y(double v) const { return top + (y.hi - v) / (y.hi - y.lo) * (bottom - top); }
};

// The legend: one marker per schedule, the hollow "does not fit" marker, the ring. Wraps.
struct Legend {
  std::string svg;
  int rows = 1;
};
Legend legend_svg(const PlotData& d, bool mark_recommended) {
  auto item_width = [](const std::string& label) {
    return 30 + static_cast<int>(label.size()) * 7;
  };
  std::string out = "<g class=\"legend\">\n";
  int x = Frame::kLeft, row = 0;
  auto place = [&](int width) {
    if (x + width > Frame::kWidth - 10 && x > Frame::kLeft) {
      x = Frame::kLeft;
      ++row;
    }
    const int at = x;
    x += width;
    return at;
  };
  // One entry: `marker` (an SVG element opened at (cx, cy), its attributes to follow) and a label.
  auto item = [&](const std::string& label, auto marker) {
    const int at = place(item_width(label));
    const double cy = 16 + row * 20;
    out += marker(at + 6.0, cy) +
           fmt::format("<text x=\"{}\" y=\"{:.0f}\">{}</text>\n", at + 16, cy + 4, esc(label));
  };
  for (size_t s = 0; s < d.schedules.size(); ++s) {
    item(d.schedules[s], [&](double cx, double cy) {
      return marker_open(shape_of(static_cast<int>(s)), cx, cy, 5) +
             fmt::format(" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.6\"/>",
                         color_of(static_cast<int>(s)));
    });
  }
  item("does not fit", [](double cx, double cy) {
    return marker_open(0, cx, cy, 5) +
           fmt::format(" fill=\"#ffffff\" stroke=\"{}\" stroke-width=\"1.4\"/>", kNoFitStroke);
  });
  if (mark_recommended) {
    item("recommended", [](double cx, double cy) {
      return marker_open(0, cx, cy, 6) +
             fmt::format(" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>", kRecommendedColor);
    });
  }
  return {out + "</g>\n", row + 1};
}

Frame plot_frame(const PlanResult& result, const PlotData& d, const Metric& metric,
                 int legend_rows) {
  Frame f;
  f.legend_rows = legend_rows;
  f.top = 20 * legend_rows + 30;
  f.bottom = f.top + 400;
  double ylo = INFINITY, yhi = -INFINITY, fit_hi = 0, all_hi = 0;
  for (int i : d.drawn) {
    const auto& c = result.candidates[i];
    const double gib = *max_peak_bytes(c) / kGiB;
    all_hi = std::max(all_hi, gib);
    if (c.fits) fit_hi = std::max(fit_hi, gib);
    if (has_step_time(c)) {
      const double v = metric.value(c);
      ylo = std::min(ylo, v);
      yhi = std::max(yhi, v);
    } else {
      f.strip = true;
    }
  }
  // Memory from 0; points far beyond the budget (a p = 1 of a large model) would squeeze the
  // rest into a corner: past 1.5 x max(budget, the largest that fits) they go to a band at the
  // right end, their value in the tooltip.
  const double keep = 1.5 * std::max(d.budget_gib, fit_hi);
  const double xhi = std::max(d.budget_gib, keep > 0 ? std::min(all_hi, keep) : all_hi);
  f.band = keep > 0 && all_hi > keep;
  f.x = round_axis(0, xhi > 0 ? xhi : 1, 8, 0.02);
  f.band = f.band && all_hi > f.x.hi;
  f.y = std::isfinite(ylo) ? round_axis(ylo, yhi, 6, 0.03) : round_axis(0, 1, 5);
  f.strip_top = f.bottom + 10;
  f.strip_bottom = f.strip ? f.strip_top + 22 : f.bottom;
  f.height = f.strip_bottom + 56;
  return f;
}

// Axes, grid and their labels; the right-hand cost axis when `usd_per_unit` > 0.
std::string axes_svg(const Frame& f, const Metric& metric, double usd_per_unit) {
  std::string out = "<g class=\"axes\" font-size=\"11\">\n";
  const double xr = f.x_plot_right();
  for (double v : f.y.ticks()) {
    const double y = f.Y(v);
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ececec\"/>"
        "<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n",
        Frame::kLeft, y, Frame::kRight, y, Frame::kLeft - 6, y + 4, metric.tick(v));
  }
  const int axis_y = f.strip_bottom + 4;
  for (double v : f.x.ticks()) {
    const double x = f.X(v);
    out += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#ececec\"/>"
        "<line x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"#333\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n",
        x, f.top, x, f.bottom, x, axis_y, x, axis_y + 5, x, axis_y + 18, v);
  }
  out += fmt::format(
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n",
      Frame::kLeft, axis_y, Frame::kRight, axis_y, Frame::kLeft, f.top, Frame::kLeft, axis_y);
  out += fmt::format(
      "<text x=\"{:.0f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\">peak memory per rank, "
      "highest rank (GiB)</text>\n",
      (Frame::kLeft + xr) / 2, axis_y + 36);
  const double mid = (f.top + f.bottom) / 2.0;
  out += fmt::format(
      "<text x=\"16\" y=\"{:.0f}\" transform=\"rotate(-90 16 {:.0f})\" text-anchor=\"middle\" "
      "font-size=\"12\">{}</text>\n",
      mid, mid, esc(metric.label));
  if (f.strip) {
    out += fmt::format(
        "<rect class=\"strip\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f6f6f6\"/>"
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">not</text><text x=\"{}\" y=\"{}\" "
        "text-anchor=\"end\">simulated</text>\n",
        Frame::kLeft, f.strip_top, Frame::kRight - Frame::kLeft, f.strip_bottom - f.strip_top,
        Frame::kLeft - 6, f.strip_top + 9, Frame::kLeft - 6, f.strip_top + 20);
  }
  if (f.band) {
    out += fmt::format(
        "<rect class=\"beyond\" x=\"{:.1f}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#f6f6f6\"/>"
        "<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">&gt; {:g}</text>\n",
        xr + 4, f.top, Frame::kBandW - 4, f.strip_bottom - f.top, xr + Frame::kBandW / 2.0 + 2,
        f.top + 12, f.x.hi);
  }
  if (usd_per_unit > 0) {
    const Axis dollars = round_axis(f.y.lo * usd_per_unit, f.y.hi * usd_per_unit, 6);
    out += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\n",
                       Frame::kRight, f.top, Frame::kRight, f.bottom);
    for (double v : dollars.ticks()) {
      const double t = v / usd_per_unit;
      if (t < f.y.lo - 1e-9 * f.y.step || t > f.y.hi + 1e-9 * f.y.step) continue;
      const double y = f.Y(t);
      out += fmt::format(
          "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#333\"/>"
          "<text class=\"usd\" x=\"{}\" y=\"{:.1f}\">{}</text>\n",
          Frame::kRight, y, Frame::kRight + 5, y, Frame::kRight + 8, y + 4, usd(v));
    }
    out += fmt::format(
        "<text x=\"{}\" y=\"{:.0f}\" transform=\"rotate(90 {} {:.0f})\" text-anchor=\"middle\" "
        "font-size=\"12\">cost of the training run ($)</text>\n",
        Frame::kWidth - 12, mid, Frame::kWidth - 12, mid);
  }
  return out + "</g>\n";
}

// The budget: a dashed vertical line, labelled.
std::string budget_svg(const Frame& f, const PlotData& d) {
  if (d.budget_gib <= 0) return "";
  const double x = f.X(d.budget_gib);
  return fmt::format(
      "<line class=\"budget\" x1=\"{:.1f}\" y1=\"{}\" x2=\"{:.1f}\" y2=\"{}\" stroke=\"{}\" "
      "stroke-width=\"1.5\" stroke-dasharray=\"6,4\"/>"
      "<text class=\"budget-label\" x=\"{:.1f}\" y=\"{}\" text-anchor=\"end\" fill=\"{}\">"
      "budget {}</text>\n",
      x, f.top - 4, x, f.strip_bottom, kRecommendedColor, x - 4, f.top + 10, kRecommendedColor,
      human_bytes(d.budget_gib * kGiB));
}

// Where candidate c is drawn. REQUIRES: it has a memory figure.
struct Point {
  double x, y;
};
Point point_of(const Frame& f, const PlanCandidate& c, const Metric& metric) {
  const double x = f.X(*max_peak_bytes(c) / kGiB);
  const double y = has_step_time(c) ? f.Y(metric.value(c)) : (f.strip_top + f.strip_bottom) / 2.0;
  return {x, y};
}

std::string points_svg(const PlanResult& result, const PlotData& d, const Frame& f,
                       const Metric& metric) {
  std::string out = "<g class=\"points\">\n";
  // Those that do not fit first, under the others.
  for (const bool fits : {false, true}) {
    for (int i : d.drawn) {
      const auto& c = result.candidates[i];
      if (c.fits != fits) continue;
      const int s = d.schedule_index.at(c.schedule);
      const Point p = point_of(f, c, metric);
      out += marker_open(shape_of(s), p.x, p.y, 4.5);
      if (fits) {
        out += fmt::format(
            " class=\"pt fit\" data-i=\"{}\" fill=\"{}\" stroke=\"#333\" stroke-width=\"0.6\" "
            "fill-opacity=\"0.9\">",
            i, color_of(s));
      } else {
        out += fmt::format(
            " class=\"pt nofit\" data-i=\"{}\" fill=\"#ffffff\" fill-opacity=\"0.6\" stroke=\"{}\" "
            "stroke-width=\"1.2\">",
            i, kNoFitStroke);
      }
      out += fmt::format("<title>{}</title></{}>\n", candidate_tooltip(c), shape_tag(shape_of(s)));
    }
  }
  return out + "</g>\n";
}

// A mark's label box as drawn (font-size 12, bold): an estimate of the text's extent, wide enough
// for the sans-serif fonts a browser picks.
constexpr double kLabelCharWidth = 7.5, kLabelAscent = 11, kLabelDescent = 4;
struct LabelBox {
  double x0, y0, x1, y1;
  bool overlaps(const LabelBox& o) const {
    return x0 < o.x1 && o.x0 < x1 && y0 < o.y1 && o.y0 < y1;
  }
};

// A ring around candidate i and a label next to it: to the right of the point (or to its left
// near the right edge) at label_dy below it; where that box would cover a label already placed
// (close points), the other side, then further down or up in steps of a line, until it is clear.
std::string mark_svg(const PlanResult& result, const Frame& f, const Metric& metric, int i,
                     const std::string& cls, const std::string& label, const char* color,
                     double radius, bool dashed, int label_dy, std::vector<LabelBox>& placed) {
  if (i < 0 || i >= static_cast<int>(result.candidates.size())) return "";
  const auto& c = result.candidates[i];
  if (!max_peak_bytes(c)) return "";
  const Point p = point_of(f, c, metric);
  // `label` is escaped: count an entity as one character.
  size_t chars = 0;
  for (size_t k = 0; k < label.size(); ++k) {
    if (label[k] == '&') k = std::min(label.find(';', k), label.size() - 1);
    ++chars;
  }
  const double w = static_cast<double>(chars) * kLabelCharWidth;
  const bool prefer_left = p.x > Frame::kRight - 260;
  auto box_at = [&](bool left, double y) {
    const double x = left ? p.x - radius - 4 : p.x + radius + 4;
    return LabelBox{left ? x - w : x, y - kLabelAscent, left ? x : x + w, y + kLabelDescent};
  };
  bool left = prefer_left;
  double y = p.y + label_dy;
  bool found = false;
  for (int step = 0; step < 40 && !found; ++step) {
    // 0, +1, -1, +2, -2, ... lines from where the label would go, each on both sides.
    const int lines = (step + 1) / 2 * (step % 2 == 1 ? 1 : -1);
    for (const bool side : {prefer_left, !prefer_left}) {
      const double ty = p.y + label_dy + lines * (kLabelAscent + kLabelDescent + 2);
      const LabelBox b = box_at(side, ty);
      if (b.x0 < 0 || b.x1 > Frame::kWidth) continue;
      bool clear = true;
      for (const LabelBox& o : placed) clear = clear && !b.overlaps(o);
      if (clear) {
        left = side;
        y = ty;
        found = true;
        break;
      }
    }
  }
  placed.push_back(box_at(left, y));
  const double lx = left ? p.x - radius - 4 : p.x + radius + 4;
  return fmt::format(
      "<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{:.1f}\" fill=\"none\" stroke=\"{}\" "
      "stroke-width=\"2\"{}/>"
      "<text class=\"{}-label\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"{}\" fill=\"{}\" "
      "font-weight=\"bold\" stroke=\"#ffffff\" stroke-width=\"3\" "
      "paint-order=\"stroke\">{}</text>\n",
      cls, p.x, p.y, radius, color, dashed ? " stroke-dasharray=\"3,2\"" : "", cls, lx, y,
      left ? "end" : "start", color, label);
}

// One scatter plot of `metric` against peak memory.
std::string scatter_svg(const PlanResult& result, const PlotData& d, const Metric& metric,
                        double usd_per_unit, const std::string& cls) {
  const Legend legend = legend_svg(d, result.recommended >= 0);
  const Frame f = plot_frame(result, d, metric, legend.rows);
  std::string out = fmt::format(
      "<svg class=\"{}\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "viewBox=\"0 0 {} {}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n",
      cls, Frame::kWidth, f.height, Frame::kWidth, f.height, Frame::kWidth, f.height);
  out += legend.svg;
  out += axes_svg(f, metric, usd_per_unit);
  out += budget_svg(f, d);
  out += points_svg(result, d, f, metric);
  const int rec = result.recommended, base = result.baseline, fast = result.fastest;
  auto short_key = [&](int i) {
    const auto& c = result.candidates[i];
    return fmt::format("{} p={} v={} m={}", esc(c.schedule), c.pp, c.vpp, c.num_microbatches);
  };
  // The recommended label first (it keeps its place), then the others around it; the rings are
  // drawn in the old order (the recommended on top).
  std::vector<LabelBox> placed;
  std::string rec_svg;
  if (rec >= 0) {
    rec_svg =
        mark_svg(result, f, metric, rec, "rec-mark",
                 std::string(rec == base ? "recommended (the 1F1B baseline): " : "recommended: ") +
                     short_key(rec),
                 kRecommendedColor, 10, false, -10, placed);
  }
  if (base >= 0 && base != rec) {
    out += mark_svg(result, f, metric, base, "base-mark", "1F1B baseline: " + short_key(base),
                    "#333333", 8, true, 18, placed);
  }
  if (fast >= 0 && fast != rec && fast != base) {
    out += mark_svg(result, f, metric, fast, "fast-mark", "fastest: " + short_key(fast), "#555555",
                    8, true, 18, placed);
  }
  return out + rec_svg + "</svg>\n";
}

// ----- the page around the plot
// -------------------------------------------------------------------

std::string page_head(const PlanResult& result) {
  const auto& o = result.options;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n";
  h += fmt::format("<title>tightpipe plan: {} layers, hidden {}, {} x {}</title>\n",
                   o.model.num_layers, o.model.hidden_size, o.devices, esc(o.device.name));
  h += R"(<style>
body{font-family:sans-serif;margin:20px;color:#222;max-width:1180px}
h1{font-size:20px} h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px} td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
td{white-space:nowrap} td.split{white-space:normal;word-break:break-all}
th{background:#f3f3f3} td.l,th.l{text-align:left}
tr.rec td{background:#fdecea;font-weight:bold} tr.base td{background:#eef3f8}
.kpi{display:inline-block;margin-right:28px;font-size:14px} .kpi b{font-size:20px}
.why{white-space:pre-wrap;background:#f7f7f7;border-left:3px solid #c0392b;padding:6px 10px}
.note{color:#777;font-size:12px}
</style></head><body>
)";
  return h;
}

// What was planned: the model, the batch, the hardware, the money.
std::string page_summary(const PlanResult& result) {
  const auto& o = result.options;
  const auto& m = o.model;
  std::string mbs;
  for (int64_t b : o.micro_batch_sizes) mbs += (mbs.empty() ? "" : ", ") + std::to_string(b);
  std::string h = "<h1>tightpipe plan</h1>\n";
  h += fmt::format(
      "<p>Model: {} layers, hidden {}, {} heads, sequence {}, vocabulary {}, FFN {}. Global batch "
      "{} sequences{}.<br>Hardware: {} x {}{}, MFU {:g}, network {}; memory budget {} per device."
      "<br>Money: {} per device-hour, {} tokens: {} steps.</p>\n",
      m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size,
      m.ffn_hidden_size > 0 ? std::to_string(m.ffn_hidden_size) : "4 x hidden", o.global_batch_size,
      mbs.empty() ? "" : ", microbatch sizes " + mbs, o.devices, esc(o.device.name),
      o.device.description.empty() ? "" : " (" + esc(o.device.description) + ")", o.mfu,
      esc(o.network.name.empty() ? "-" : o.network.name), human_bytes(result.memory_budget_bytes),
      fmt::format("${:.2f}", o.price_per_device_hour), short_number(o.train_tokens), result.steps);
  if (result.recommended < 0) {
    h += "<p><b>Nothing fits the memory budget.</b></p>\n";
    return h;
  }
  const auto& rec = result.candidates[result.recommended];
  h += fmt::format(
      "<p><span class=\"kpi\">recommended <b>{}</b></span><span class=\"kpi\">step <b>{}</b>"
      "</span><span class=\"kpi\">bubble <b>{}</b></span><span class=\"kpi\">cost <b>{}</b> "
      "({})</span>",
      candidate_key(rec), seconds(rec.step_time_s), percent(rec.bubble_ratio), usd(rec.cost_usd),
      duration_hours(rec.train_hours));
  if (result.baseline >= 0 && result.baseline != result.recommended) {
    const auto& base = result.candidates[result.baseline];
    if (base.cost_usd > 0) {
      h += fmt::format("<span class=\"kpi\">vs 1F1B baseline <b>{}</b> ({}, bubble {})</span>",
                       signed_percent(rec.cost_usd / base.cost_usd - 1), usd(base.cost_usd),
                       percent(base.bubble_ratio));
    }
  }
  return h + "</p>\n";
}

// The rows of the table: the best `top` that fit, then the baseline and the recommended when
// they are not among them.
std::vector<int> table_rows(const PlanResult& result) {
  std::vector<int> rows;
  const int top = std::max(0, result.options.top);
  for (size_t i = 0; i < result.candidates.size() && static_cast<int>(rows.size()) < top; ++i)
    if (result.candidates[i].fits) rows.push_back(static_cast<int>(i));
  for (int extra : {result.baseline, result.recommended}) {
    if (extra >= 0 && extra < static_cast<int>(result.candidates.size()) &&
        std::find(rows.begin(), rows.end(), extra) == rows.end())
      rows.push_back(extra);
  }
  return rows;
}

std::string page_table(const PlanResult& result) {
  const bool has_base = result.baseline >= 0 && result.candidates[result.baseline].cost_usd > 0;
  std::string h = fmt::format(
      "<h2>The best {} that fit{}</h2>\n<table class=\"candidates\"><tr><th>#</th>"
      "<th class=\"l\">schedule</th><th>p</th><th>v</th><th>dp</th><th>mbs</th><th>m</th>"
      "<th class=\"l\">recompute</th><th>step</th><th>tokens/s</th><th>bubble</th>"
      "<th>peak memory (highest rank)</th><th>of budget</th><th>time to train</th><th>cost</th>{}"
      "<th class=\"l\">layer split</th><th class=\"l\"></th></tr>\n",
      std::max(0, result.options.top),
      result.baseline >= 0 || result.recommended >= 0 ? ", the baseline and the recommendation"
                                                      : "",
      has_base ? "<th>vs 1F1B</th>" : "");
  const double base_cost = has_base ? result.candidates[result.baseline].cost_usd : 0;
  for (int i : table_rows(result)) {
    const auto& c = result.candidates[i];
    std::string cls, note;
    if (i == result.recommended) {
      cls = "rec";
      note = "recommended";
    }
    if (i == result.baseline) {
      cls = cls.empty() ? "base" : cls;
      note += note.empty() ? "1F1B baseline" : ", 1F1B baseline";
    }
    if (i == result.fastest && i != result.recommended)
      note += note.empty() ? "fastest" : ", fastest";
    const auto peak = max_peak_bytes(c);
    h += fmt::format(
        "<tr{}><td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        "<td>{}</td><td>{}</td>{}<td class=\"l split\">{}</td><td class=\"l\">{}</td></tr>\n",
        cls.empty() ? "" : " class=\"" + cls + "\"", i + 1, esc(c.schedule), c.pp, c.vpp, c.dp,
        c.micro_batch_size, c.num_microbatches, esc(c.recompute), seconds(c.step_time_s),
        short_number(c.tokens_per_s), percent(c.bubble_ratio), peak ? human_bytes(*peak) : "-",
        peak && result.memory_budget_bytes > 0 ? percent(*peak / result.memory_budget_bytes) : "-",
        duration_hours(c.train_hours), usd(c.cost_usd),
        has_base ? "<td>" + signed_percent(c.cost_usd / base_cost - 1) + "</td>" : "",
        esc(c.layout), note);
  }
  return h + "</table>\n";
}

// The ones that do not fit, with the reason (the first kShown).
std::string page_not_fitting(const PlanResult& result) {
  constexpr int kShown = 50;
  std::vector<int> rows;
  for (size_t i = 0; i < result.candidates.size(); ++i)
    if (!result.candidates[i].fits) rows.push_back(static_cast<int>(i));
  if (rows.empty()) return "";
  std::string h = fmt::format(
      "<details><summary>{} candidates do not fit{}</summary>\n<table class=\"nofit\"><tr>"
      "<th class=\"l\">candidate</th><th>peak memory (highest rank)</th><th class=\"l\">reason"
      "</th></tr>\n",
      rows.size(), rows.size() > kShown ? fmt::format(" (the first {} shown)", kShown) : "");
  for (size_t k = 0; k < rows.size() && k < kShown; ++k) {
    const auto& c = result.candidates[rows[k]];
    const auto peak = max_peak_bytes(c);
    h += fmt::format("<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>\n",
                     candidate_key(c), peak ? human_bytes(*peak) : "-", esc(c.reason));
  }
  return h + "</table></details>\n";
}

std::string page_stats(const PlanResult& result) {
  const auto& s = result.stats;
  return fmt::format(
      "<h2>Search</h2><p>{} configurations looked at: {} infeasible (shape or memory), {} "
      "dominated (a lighter recompute fits), {} pruned by their lower bound, {} simulated; "
      "{:.2f} s.</p>\n",
      s.configurations, s.infeasible, s.dominated, s.pruned, s.simulated, result.search_seconds);
}

}  // namespace

std::string plan_to_html(const PlanResult& result) {
  const int n = static_cast<int>(result.candidates.size());
  for (const int i : {result.recommended, result.fastest, result.baseline})
    TP_CHECK(i >= -1 && i < n, "candidate index ", i, " of ", n);
  const PlotData d = plot_data(result);
  std::string h = page_head(result) + page_summary(result);
  h += "<h2>Step time against peak memory per rank</h2>\n";
  const Metric step{"step time (s)", step_value, step_tick};
  h += scatter_svg(result, d, step, d.usd_per_step_second, "plot step");
  if (d.any_cost && d.usd_per_step_second <= 0) {
    // Costs not proportional to step times (not one price and step count): their own plot.
    h += "<h2>Cost of the training run against peak memory per rank</h2>\n";
    h += scatter_svg(result, d, Metric{"cost of the training run ($)", cost_value, usd}, 0,
                     "plot cost");
  }
  h += fmt::format(
      "<p class=\"note\">One point per candidate ({} drawn{}): filled when it fits the budget, "
      "hollow grey when it does not; colour and shape by schedule; hover a point for its "
      "figures. Memory is the highest rank's peak. Points without a simulated step time sit in "
      "the grey strip under the plot{}.</p>\n",
      d.drawn.size(),
      d.without_memory > 0
          ? fmt::format("; not drawn: {} refused by shape, without a memory estimate",
                        d.without_memory)
          : "",
      d.usd_per_step_second > 0
          ? "; the right-hand axis reads the same points as the cost of the training run"
          : "");
  if (!result.why.empty()) h += "<h2>Why</h2>\n<p class=\"why\">" + esc(result.why) + "</p>\n";
  if (result.recommended >= 0) {
    h += "<h2>Run it</h2>\n<pre class=\"commands\">";
    for (const std::string& line :
         plan_command_lines(result, result.candidates[result.recommended])) {
      h += esc(line) + "\n";
    }
    h += "</pre>\n";
  }
  h += page_table(result);
  h += page_not_fitting(result);
  h += page_stats(result);
  h += "</body></html>\n";
  return h;
}

}  // namespace tightpipe
