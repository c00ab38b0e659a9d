// plan_to_html on a hand-built PlanResult: one point per candidate with a memory figure, the
// budget line, the recommended and baseline marks, the table's rows, escaping, well-formed SVG.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "plan_test_sample.h"
#include "tightpipe/plan.h"
#include "xml.h"

namespace tightpipe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

using Element = testutil::XmlElement;

// Every element of the page's <svg> plots, parsed as XML (the rest of the page is HTML).
struct SvgParse : testutil::XmlParse {
  int plots = 0;
};

SvgParse parse_svgs(const std::string& page) {
  SvgParse out;
  for (size_t at = page.find("<svg"); at != std::string::npos; at = page.find("<svg", at + 1)) {
    const size_t end = page.find("</svg>", at);
    if (end == std::string::npos) {
      out.ok = false;
      out.error = "unclosed <svg>";
      return out;
    }
    ++out.plots;
    testutil::parse_xml(page.substr(at, end + 6 - at), out);
  }
  return out;
}

std::vector<const Element*> with_class(const SvgParse& p, const std::string& cls) {
  return p.with_class(cls);
}

TEST(PlanHtml, OnePointPerCandidateWithAMemoryFigure) {
  const PlanResult r = testutil::sample_plan_result();
  const std::string page = plan_to_html(r);
  const SvgParse svg = parse_svgs(page);
  ASSERT_TRUE(svg.ok) << svg.error;
  EXPECT_EQ(svg.plots, 1) << "costs proportional to step times: one plot, a right-hand axis";
  const auto fit = with_class(svg, "pt fit");
  const auto nofit = with_class(svg, "pt nofit");
  EXPECT_EQ(fit.size(), 4u);
  EXPECT_EQ(nofit.size(), 2u) << "the one refused by shape has no memory figure, no point";
  // Each drawn candidate once, by index.
  std::map<std::string, int> seen;
  for (const auto* e : fit) ++seen[e->attrs.at("data-i")];
  for (const auto* e : nofit) ++seen[e->attrs.at("data-i")];
  EXPECT_EQ(seen, (std::map<std::string, int>{
                      {"0", 1}, {"1", 1}, {"2", 1}, {"3", 1}, {"4", 1}, {"5", 1}}));
  EXPECT_THAT(page, HasSubstr("6 drawn; not drawn: 1 refused by shape"));
  // Non-fitting ones are hollow.
  for (const auto* e : nofit) EXPECT_EQ(e->attrs.at("fill"), "#ffffff");
  // The tooltip of each point: key, step, bubble, memory, cost; the reason when it does not fit.
  int titles = 0, checked = 0;
  for (const auto& e : svg.elements) {
    if (e.name != "title" || e.text.find("recompute=") == std::string::npos) continue;
    ++titles;
    if (e.text.starts_with("zb-v p=8 v=2 mbs=1 m=32 recompute=none")) {
      ++checked;
      EXPECT_THAT(e.text, HasSubstr("step 10 s, bubble 3.1%"));
      EXPECT_THAT(e.text, HasSubstr("peak memory 61.0 GiB"));
      EXPECT_THAT(e.text, HasSubstr("$10.6k"));  // 23842 steps x 10 s x 64 x $2.5 / 3600
    }
    if (e.text.starts_with("zb-v p=4")) {
      ++checked;
      EXPECT_THAT(e.text, HasSubstr("does not fit: out of memory on rank 0 by 8.0 GiB <&>"));
    }
  }
  EXPECT_EQ(titles, 6);
  EXPECT_EQ(checked, 2);
}

TEST(PlanHtml, BudgetLineRecommendedAndBaselineMarks) {
  const PlanResult r = testutil::sample_plan_result();
  const SvgParse svg = parse_svgs(plan_to_html(r));
  ASSERT_TRUE(svg.ok) << svg.error;
  const auto budget = with_class(svg, "budget");
  ASSERT_EQ(budget.size(), 1u);
  EXPECT_EQ(budget[0]->attrs.at("x1"), budget[0]->attrs.at("x2")) << "a vertical line";
  const auto budget_label = with_class(svg, "budget-label");
  ASSERT_EQ(budget_label.size(), 1u);
  EXPECT_EQ(budget_label[0]->text, "budget 72.0 GiB");

  const auto ring = with_class(svg, "rec-mark");
  ASSERT_EQ(ring.size(), 1u);
  const auto rec_label = with_class(svg, "rec-mark-label");
  ASSERT_EQ(rec_label.size(), 1u);
  EXPECT_EQ(rec_label[0]->text, "recommended: zb-v p=8 v=2 m=32");
  const auto base_label = with_class(svg, "base-mark-label");
  ASSERT_EQ(base_label.size(), 1u);
  EXPECT_EQ(base_label[0]->text, "1F1B baseline: 1f1b p=8 v=1 m=32");
  // The baseline is a circle (1f1b sorts first): its ring has the same centre.
  const auto base_ring = with_class(svg, "base-mark");
  ASSERT_EQ(base_ring.size(), 1u);
  bool found = false;
  for (const auto* e : with_class(svg, "pt fit")) {
    if (e->attrs.at("data-i") != "2") continue;
    found = true;
    EXPECT_EQ(e->name, "circle");
    EXPECT_EQ(e->attrs.at("cx"), base_ring[0]->attrs.at("cx"));
    EXPECT_EQ(e->attrs.at("cy"), base_ring[0]->attrs.at("cy"));
  }
  EXPECT_TRUE(found);
}

// Issue 27: where the recommended, the baseline and the fastest sit close together their labels
// were drawn over each other. Each label's box (the text's extent at font-size 12, bold, at most
// 7.5 px a character) clears every other's.
TEST(PlanHtml, LabelsOfClosePointsDoNotOverlap) {
  PlanResult r = testutil::sample_plan_result();
  // Three points a hair apart: the fastest (zb-v), the recommended (interleaved), the baseline.
  for (int i : {0, 1, 2}) {
    PlanCandidate& c = r.candidates[i];
    c.step_time_s = 10.0 + 0.01 * i;
    c.cost_usd = c.step_time_s * r.candidates[3].cost_usd / r.candidates[3].step_time_s;
    c.peak_memory_bytes.assign(8, (60.0 + 0.1 * i) * 1024 * 1024 * 1024);
  }
  r.fastest = 0;
  r.recommended = 1;
  r.baseline = 2;
  const SvgParse svg = parse_svgs(plan_to_html(r));
  ASSERT_TRUE(svg.ok) << svg.error;
  struct Box {
    std::string text;
    double x0, y0, x1, y1;
  };
  std::vector<Box> boxes;
  for (const char* cls : {"rec-mark-label", "base-mark-label", "fast-mark-label"}) {
    const auto labels = with_class(svg, cls);
    ASSERT_EQ(labels.size(), 1u) << cls;
    const Element& e = *labels[0];
    const double x = std::stod(e.attrs.at("x")), y = std::stod(e.attrs.at("y"));
    const double w = 7.5 * static_cast<double>(e.text.size());
    const bool end = e.attrs.at("text-anchor") == "end";
    boxes.push_back({e.text, end ? x - w : x, y - 11, end ? x : x + w, y + 4});
  }
  for (size_t a = 0; a < boxes.size(); ++a) {
    for (size_t b = a + 1; b < boxes.size(); ++b) {
      const Box &p = boxes[a], &q = boxes[b];
      const bool overlap = p.x0 < q.x1 && q.x0 < p.x1 && p.y0 < q.y1 && q.y0 < p.y1;
      EXPECT_FALSE(overlap) << p.text << " [" << p.x0 << "," << p.y0 << " " << p.x1 << "," << p.y1
                            << "] and " << q.text << " [" << q.x0 << "," << q.y0 << " " << q.x1
                            << "," << q.y1 << "]";
    }
    EXPECT_GE(boxes[a].x0, 0) << boxes[a].text;
    EXPECT_LE(boxes[a].x1, 980) << boxes[a].text;
  }
}

TEST(PlanHtml, RecommendedBaselineIsOneMarkAndNothingFitsHasNone) {
  PlanResult r = testutil::sample_plan_result();
  r.recommended = r.baseline = 2;
  SvgParse svg = parse_svgs(plan_to_html(r));
  ASSERT_TRUE(svg.ok) << svg.error;
  EXPECT_TRUE(with_class(svg, "base-mark").empty());
  ASSERT_EQ(with_class(svg, "rec-mark-label").size(), 1u);
  EXPECT_EQ(with_class(svg, "rec-mark-label")[0]->text,
            "recommended (the 1F1B baseline): 1f1b p=8 v=1 m=32");
  // The fastest (zb-v) is marked when the 1% rule picked another.
  ASSERT_EQ(with_class(svg, "fast-mark-label").size(), 1u);

  r.recommended = r.fastest = r.baseline = -1;
  const std::string page = plan_to_html(r);
  svg = parse_svgs(page);
  ASSERT_TRUE(svg.ok) << svg.error;
  EXPECT_TRUE(with_class(svg, "rec-mark").empty());
  EXPECT_EQ(with_class(svg, "pt fit").size(), 4u);
  EXPECT_THAT(page, HasSubstr("Nothing fits the memory budget"));
}

TEST(PlanHtml, StringsFromTheResultAreEscaped) {
  PlanResult r = testutil::sample_plan_result();
  r.candidates[3].layout = "E,t*4|</td><script>x</script>";
  r.options.device.name = "h100<&>";
  const std::string page = plan_to_html(r);
  EXPECT_THAT(page, Not(HasSubstr("sched<&>")));
  EXPECT_THAT(page, HasSubstr("sched&lt;&amp;&gt;"));
  EXPECT_THAT(page, Not(HasSubstr("<script")));
  EXPECT_THAT(page, Not(HasSubstr("<and>")));
  EXPECT_THAT(page, HasSubstr("3.1% &lt;and&gt; saves 13.8% &amp; more"));
  EXPECT_THAT(page, Not(HasSubstr("8.0 GiB <&>")));
  EXPECT_THAT(page, Not(HasSubstr("h100<&>")));
  // Also in the legend, which is SVG: the whole plot still parses.
  const SvgParse svg = parse_svgs(page);
  ASSERT_TRUE(svg.ok) << svg.error;
  bool legend_has_it = false;
  for (const auto& e : svg.elements) legend_has_it |= e.name == "text" && e.text == "sched<&>";
  EXPECT_TRUE(legend_has_it);
}

TEST(PlanHtml, TableHasTheTopRowsThenBaselineHighlighted) {
  PlanResult r = testutil::sample_plan_result();
  r.options.top = 1;
  std::string page = plan_to_html(r);
  const size_t table = page.find("<table class=\"candidates\">");
  ASSERT_NE(table, std::string::npos);
  std::string rows = page.substr(table, page.find("</table>", table) - table);
  EXPECT_EQ(count(rows, "<tr"), 1u + 2u) << "header, the best (recommended), the baseline";
  EXPECT_EQ(count(rows, "<tr class=\"rec\""), 1u);
  EXPECT_EQ(count(rows, "<tr class=\"base\""), 1u);
  EXPECT_THAT(rows, HasSubstr("<td>-13.8%</td>")) << "10.0 s against the baseline's 11.6 s";
  EXPECT_THAT(rows, Not(HasSubstr("interleaved")));

  r.options.top = 10;
  page = plan_to_html(r);
  rows = page.substr(page.find("<table class=\"candidates\">"));
  rows = rows.substr(0, rows.find("</table>"));
  EXPECT_EQ(count(rows, "<tr"), 1u + 4u) << "only the four that fit";
  // The ones that do not fit, with their reasons, below.
  EXPECT_THAT(page, HasSubstr("3 candidates do not fit"));
  EXPECT_THAT(page, HasSubstr("m=30 is not a multiple of p=8"));
  EXPECT_THAT(page, HasSubstr("120 configurations looked at: 40 infeasible"));
}

TEST(PlanHtml, CostAxisReadsTheSamePoints) {
  const PlanResult r = testutil::sample_plan_result();
  const SvgParse svg = parse_svgs(plan_to_html(r));
  ASSERT_TRUE(svg.ok) << svg.error;
  // Each dollar tick sits where its step time would: y(step) for step = dollars / (cost / step).
  const double usd_per_s = r.candidates[0].cost_usd / r.candidates[0].step_time_s;
  const auto usd = with_class(svg, "usd");
  ASSERT_GE(usd.size(), 3u);
  // Two dollar ticks give the scale; the recommended point (10 s) must lie on it.
  auto dollars = [](const std::string& t) {
    double v = std::stod(t.substr(1));
    if (t.back() == 'k') v *= 1e3;
    if (t.back() == 'M') v *= 1e6;
    return v;
  };
  const double d0 = dollars(usd.front()->text), d1 = dollars(usd.back()->text);
  const double y0 = std::stod(usd.front()->attrs.at("y")) - 4;
  const double y1 = std::stod(usd.back()->attrs.at("y")) - 4;
  ASSERT_NE(d0, d1);
  const auto ring = with_class(svg, "rec-mark");
  ASSERT_EQ(ring.size(), 1u);
  const double cost = r.candidates[0].step_time_s * usd_per_s;
  const double y_expected = y0 + (cost - d0) / (d1 - d0) * (y1 - y0);
  EXPECT_NEAR(std::stod(ring[0]->attrs.at("cy")), y_expected, 0.5);
}

TEST(PlanHtml, CostsNotProportionalGetTheirOwnPlot) {
  PlanResult r = testutil::sample_plan_result();
  r.candidates[1].cost_usd *= 1.5;  // another price: no single dollars-per-second axis
  const std::string page = plan_to_html(r);
  const SvgParse svg = parse_svgs(page);
  ASSERT_TRUE(svg.ok) << svg.error;
  EXPECT_EQ(svg.plots, 2);
  EXPECT_TRUE(with_class(svg, "usd").empty());
  EXPECT_EQ(with_class(svg, "pt fit").size(), 8u) << "the same points in both plots";
}

TEST(PlanHtml, FarOutlierGoesToTheBandAndUnsimulatedToTheStrip) {
  const PlanResult r = testutil::sample_plan_result();
  const SvgParse svg = parse_svgs(plan_to_html(r));
  ASSERT_TRUE(svg.ok) << svg.error;
  const auto band = with_class(svg, "beyond");
  const auto strip = with_class(svg, "strip");
  ASSERT_EQ(band.size(), 1u);
  ASSERT_EQ(strip.size(), 1u);
  // Candidate 4 (140 GiB, not simulated, 1f1b: a circle) lies in both.
  bool found = false;
  for (const auto* e : with_class(svg, "pt nofit")) {
    if (e->attrs.at("data-i") != "4") continue;
    found = true;
    const double cx = std::stod(e->attrs.at("cx")), cy = std::stod(e->attrs.at("cy"));
    const double bx = std::stod(band[0]->attrs.at("x"));
    EXPECT_GE(cx, bx);
    EXPECT_LE(cx, bx + std::stod(band[0]->attrs.at("width")));
    const double sy = std::stod(strip[0]->attrs.at("y"));
    EXPECT_GE(cy, sy);
    EXPECT_LE(cy, sy + std::stod(strip[0]->attrs.at("height")));
  }
  EXPECT_TRUE(found);
  // The x axis ends on a round number of GiB covering the budget and all that fit (62 GiB), not
  // the 140 GiB one: 0, 20, ..., 120 (1.5 x 72 = 108, rounded up to a tick).
  bool has_120 = false, has_140 = false;
  for (const auto& e : svg.elements) {
    has_120 |= e.name == "text" && e.text == "120";
    has_140 |= e.name == "text" && e.text == "140";
  }
  EXPECT_TRUE(has_120);
  EXPECT_FALSE(has_140);
}

TEST(PlanHtml, EverySchedulesMarkerDiffersWithMoreSchedulesThanColours) {
  PlanResult r = testutil::sample_plan_result();
  const PlanCandidate proto = r.candidates[0];
  r.candidates.clear();
  r.recommended = r.fastest = r.baseline = -1;
  for (int s = 0; s < 12; ++s) {
    r.candidates.push_back(proto);
    r.candidates.back().schedule = fmt::format("sched-{:02d}", s);
  }
  const SvgParse svg = parse_svgs(plan_to_html(r));
  ASSERT_TRUE(svg.ok) << svg.error;
  std::set<std::pair<std::string, std::string>> looks;  // (element, fill)
  for (const auto* e : with_class(svg, "pt fit")) looks.emplace(e->name, e->attrs.at("fill"));
  EXPECT_EQ(looks.size(), 12u);
}

TEST(PlanHtml, NoCandidatesStillAPage) {
  PlanResult r;
  r.memory_budget_bytes = 8.0 * (1 << 30);
  const std::string page = plan_to_html(r);
  const SvgParse svg = parse_svgs(page);
  ASSERT_TRUE(svg.ok) << svg.error;
  EXPECT_TRUE(with_class(svg, "pt fit").empty());
  EXPECT_EQ(with_class(svg, "budget").size(), 1u);
  EXPECT_THAT(page, HasSubstr("Nothing fits the memory budget"));
  EXPECT_THAT(page, Not(HasSubstr("nan")));
}

TEST(PlanHtml, SelfContained) {
  const std::string page = plan_to_html(testutil::sample_plan_result());
  EXPECT_TRUE(page.starts_with("<!DOCTYPE html>"));
  EXPECT_THAT(page, Not(HasSubstr("<script")));
  EXPECT_THAT(page, Not(HasSubstr("<link")));
  EXPECT_THAT(page, Not(HasSubstr("src=\"http")));
  EXPECT_THAT(page, HasSubstr("</html>"));
}

}  // namespace
}  // namespace tightpipe
