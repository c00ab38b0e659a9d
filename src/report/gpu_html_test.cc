// report.html of GPU traces (gpu_trace_report_html) on the real traces of ../shared/data/traces:
// the page's body parses as XML, has one table row per rank and per step with the report's
// numbers, the bars partition each window, kernel names and warnings are escaped, the pipeline
// section shows what is there; the timeline of a step with many events stays small.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "report/gpu_internal.h"
#include "tightpipe/gpu_trace.h"
#include "xml.h"

namespace tightpipe {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kTraces = std::string(TP_SHARED_DIR) + "/data/traces/";

using Element = testutil::XmlElement;
using Parsed = testutil::XmlParse;

// The page's <body> (the whole of what it shows: tables, SVG, text) parsed as XML.
Parsed parse_body(const std::string& page) {
  Parsed out;
  const size_t a = page.find("<body>"), b = page.find("</body>");
  if (a == std::string::npos || b == std::string::npos) {
    out.ok = false;
    out.error = "no <body>...</body>";
    return out;
  }
  testutil::parse_xml(page.substr(a, b + 7 - a), out);
  return out;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

GpuTraceReport report_of(const std::vector<std::string>& files) {
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(kTraces + f);
  auto rep = build_gpu_trace_report(paths);
  EXPECT_TRUE(rep.ok()) << rep.status().to_string();
  return rep.ok() ? std::move(*rep) : GpuTraceReport{};
}

const std::vector<std::vector<std::string>> kSets = {
    {"dp128_rank0.json.gz", "dp128_rank1.json.gz"},
    {"dp2_rank0.json.gz"},
    {"rocm_mi250_rank0.json.gz"},
};

// A table row's cells after the two label cells, as the report's numbers print them: window,
// busy, idle, compute, communication, exposed communication, memory in ms to the microsecond,
// then the bubble ratio to 0.1%.
void expect_row_is(const Parsed& p, const Element* tr, const GpuUsage& u, const std::string& what) {
  const auto tds = p.children(tr, "td");
  ASSERT_EQ(tds.size(), 10u) << what;
  const double want[] = {u.window_s,  u.busy_s,          u.idle_s,
                         u.compute_s, u.communication_s, u.exposed_communication_s,
                         u.memory_s};
  for (int k = 0; k < 7; ++k) {
    EXPECT_NEAR(std::stod(tds[2 + k]->text), want[k] * 1e3, 0.0005 + 1e-9)
        << what << " column " << k << ": " << tds[2 + k]->text;
  }
  EXPECT_EQ(tds[9]->text, fmt::format("{:.1f}%", 100 * u.bubble_ratio)) << what;
}

TEST(GpuHtml, RealTracesParseWithOneRowPerRankAndStepHoldingTheReportsNumbers) {
  for (const auto& set : kSets) {
    const GpuTraceReport rep = report_of(set);
    ASSERT_FALSE(rep.ranks.empty()) << set.front();
    const std::string page = gpu_trace_report_html(rep);
    const Parsed p = parse_body(page);
    ASSERT_TRUE(p.ok) << set.front() << ": " << p.error;
    const auto whole = p.with_class("whole");
    const auto steps = p.with_class("step");
    ASSERT_EQ(whole.size(), rep.ranks.size()) << set.front();
    size_t n_steps = 0;
    for (const auto& r : rep.ranks) n_steps += r.steps.size();
    ASSERT_EQ(steps.size(), n_steps) << set.front();
    ASSERT_GT(n_steps, 0u) << set.front() << ": every bundled trace has ProfilerStep markers";
    size_t si = 0;
    for (size_t i = 0; i < rep.ranks.size(); ++i) {
      const GpuRankReport& r = rep.ranks[i];
      EXPECT_EQ(whole[i]->attr("data-rank"), std::to_string(r.rank));
      expect_row_is(p, whole[i], r.usage, fmt::format("{} rank {}", set.front(), r.rank));
      for (const GpuStepReport& s : r.steps) {
        const Element* tr = steps[si++];
        EXPECT_EQ(tr->attr("data-rank"), std::to_string(r.rank));
        EXPECT_EQ(tr->attr("data-step"), std::to_string(s.step));
        expect_row_is(p, tr, s.usage,
                      fmt::format("{} rank {} step {}", set.front(), r.rank, s.step));
      }
    }
    // One cause row per rank; one timeline row per rank; one bar per rank.
    EXPECT_EQ(p.with_class("cause").size(), rep.ranks.size());
    EXPECT_EQ(p.with_class("rank").size(), rep.ranks.size()) << "the timeline's rows";
    EXPECT_EQ(p.with_class("bar trace").size(), rep.ranks.size());
    // The headline sentence of the terminal report.
    const std::string headline = report_internal::gpu_headline(rep);
    ASSERT_FALSE(headline.empty());
    const auto hl = p.with_class("headline");
    ASSERT_EQ(hl.size(), 1u);
    EXPECT_EQ(p.children(hl[0], "b").at(0)->text, headline);
    // Self-contained.
    EXPECT_TRUE(page.starts_with("<!DOCTYPE html>"));
    EXPECT_THAT(page, Not(HasSubstr("<script")));
    EXPECT_THAT(page, Not(HasSubstr("<link")));
    EXPECT_THAT(page, Not(HasSubstr("src=\"http")));
  }
}

// Time covered by `in` and not by `out` (microsecond-exact on nanosecond integers): a sweep
// written apart from gpu_events.cc's unions.
int64_t covered_only(const std::vector<GpuEvent>& events, bool (*in)(GpuEventKind),
                     bool (*out)(GpuEventKind)) {
  std::vector<std::pair<int64_t, int>> edges;  // (time, +-1 for in: 1, out: 2)
  for (const GpuEvent& e : events) {
    if (e.end_ns <= e.start_ns) continue;
    const int w = in(e.kind) ? 1 : out(e.kind) ? 1000 : 0;
    if (w == 0) continue;
    edges.emplace_back(e.start_ns, w);
    edges.emplace_back(e.end_ns, -w);
  }
  std::sort(edges.begin(), edges.end());
  int64_t total = 0, prev = 0;
  int depth = 0;
  for (const auto& [t, w] : edges) {
    if (depth > 0 && depth < 1000) total += t - prev;
    depth += w;
    prev = t;
  }
  return total;
}

TEST(GpuHtml, TheFourBarPartsPartitionEachWindow) {
  for (const auto& set : kSets) {
    const GpuTraceReport rep = report_of(set);
    ASSERT_FALSE(rep.ranks.empty());
    // memory only = busy - compute - exposed communication is the copy/memset time under no
    // kernel, computed here by a sweep.
    for (size_t i = 0; i < rep.ranks.size(); ++i) {
      const GpuUsage& u = rep.ranks[i].usage;
      const int64_t mem_only = covered_only(
          rep.traces[i].events,
          [](GpuEventKind k) { return k == GpuEventKind::kMemcpy || k == GpuEventKind::kMemset; },
          [](GpuEventKind k) { return k == GpuEventKind::kCompute || is_communication(k); });
      EXPECT_NEAR(u.busy_s - u.compute_s - u.exposed_communication_s, mem_only * 1e-9, 1e-9)
          << set.front();
      EXPECT_NEAR(u.compute_s + u.exposed_communication_s + mem_only * 1e-9 + u.idle_s, u.window_s,
                  1e-9);
    }
    // On the page each bar's segments fill the plot (900 px) exactly once.
    const Parsed p = parse_body(gpu_trace_report_html(rep));
    ASSERT_TRUE(p.ok) << p.error;
    const auto bars = p.with_class("bar trace");
    ASSERT_EQ(bars.size(), rep.ranks.size());
    for (const Element* bar : bars) {
      double width = 0;
      for (const Element* seg : p.children(bar, "rect")) width += std::stod(seg->attr("width"));
      EXPECT_NEAR(width, 900, 0.05) << set.front();
    }
  }
}

TEST(GpuHtml, KernelNamesAndWarningsAreEscaped) {
  GpuTraceReport rep = report_of({"dp128_rank0.json.gz"});
  ASSERT_FALSE(rep.ranks.empty());
  rep.warnings.push_back("a warning with <b>markup</b> & an ampersand");
  const std::string page = gpu_trace_report_html(rep);
  // The real kernel names are C++ templates: layer_norm_grad_input_kernel<float, float>(...).
  EXPECT_THAT(page, HasSubstr("layer_norm_grad_input_kernel&lt;float, float&gt;"));
  EXPECT_THAT(page, Not(HasSubstr("kernel<float")));
  EXPECT_THAT(page, Not(HasSubstr("<b>markup")));
  const Parsed p = parse_body(page);
  ASSERT_TRUE(p.ok) << p.error;
  bool name_in_title = false, warning_listed = false;
  for (const auto& e : p.elements) {
    name_in_title |= e.name == "title" &&
                     e.text.find("layer_norm_grad_input_kernel<float, float>") != std::string::npos;
    warning_listed |= e.name == "li" && e.text == "a warning with <b>markup</b> & an ampersand";
  }
  EXPECT_TRUE(name_in_title) << "hover titles hold the kernel names, read back unescaped";
  EXPECT_TRUE(warning_listed);
}

TEST(GpuHtml, TheReportsWarningsAppear) {
  // The MI250 trace has no distributedInfo: ranks follow the file order, said in a warning.
  const GpuTraceReport rep = report_of({"rocm_mi250_rank0.json.gz"});
  ASSERT_FALSE(rep.warnings.empty());
  const Parsed p = parse_body(gpu_trace_report_html(rep));
  ASSERT_TRUE(p.ok) << p.error;
  std::vector<std::string> items;
  for (const auto& e : p.elements)
    if (e.name == "li") items.push_back(e.text);
  for (const auto& w : rep.warnings) EXPECT_THAT(items, testing::Contains(w));
  EXPECT_THAT(gpu_trace_report_html(rep), HasSubstr("0 (file order)"));
}

TEST(GpuHtml, CausesShowFillDrainAndDependencyOnlyWhenPipelined) {
  GpuTraceReport rep = report_of({"dp2_rank0.json.gz"});
  ASSERT_EQ(rep.ranks.size(), 1u);
  auto headers = [](const GpuTraceReport& r) {
    const Parsed p = parse_body(gpu_trace_report_html(r));
    EXPECT_TRUE(p.ok) << p.error;
    std::vector<std::string> out;
    for (const Element* t : p.with_class("causes"))
      for (const Element* tr : p.children(t, "tr"))
        for (const Element* th : p.children(tr, "th")) out.push_back(th->text);
    return out;
  };
  EXPECT_EQ(headers(rep), (std::vector<std::string>{"rank", "exposed comm", "memory", "host wait",
                                                    "other wait", "total"}));
  rep.pipelined = true;
  rep.ranks[0].causes = {1e-3, 2e-3, 3e-3, 4e-3, 5e-3, 4e-3, 2e-3};
  EXPECT_EQ(headers(rep),
            (std::vector<std::string>{"rank", "fill", "drain", "dependency wait", "exposed comm",
                                      "memory", "host wait", "other wait", "total"}));
  const std::string page = gpu_trace_report_html(rep);
  EXPECT_THAT(page, HasSubstr("<td>3.00 ms (14.3%)</td>"));  // dependency: 3 of 21 ms
  EXPECT_THAT(page, HasSubstr("<td>21.00 ms</td>"));
}

TEST(GpuHtml, PipelineSectionShowsWhatIsThereOrTheError) {
  GpuTraceReport rep = report_of({"dp2_rank0.json.gz"});
  EXPECT_THAT(gpu_trace_report_html(rep), Not(HasSubstr("<h2>Pipeline")));
  rep.pipeline.emplace();
  rep.pipeline->error = "--pp 4 but 1 trace <rank 0>";
  std::string page = gpu_trace_report_html(rep);
  EXPECT_THAT(page, HasSubstr("did not run:</b> --pp 4 but 1 trace &lt;rank 0&gt;"));
  EXPECT_TRUE(parse_body(page).ok);

  GpuPipelineReport& pr = *rep.pipeline;
  pr.error.clear();
  pr.costs.method = "annotations";
  pr.costs.f_s = {1e-3, 1.5e-3};
  pr.costs.b_s = {2e-3, 3e-3};
  pr.costs.message_s = 50e-6;
  pr.costs.notes = {"W fused <into> B"};
  pr.measured_step_s = 0.0123;
  pr.predicted_step_s = 0.0111;
  pr.predicted_bubble_ratio = 0.25;
  pr.what_ifs.push_back({"zb-h1", "", 0.0099, 0.1, 0.0012});
  pr.what_ifs.push_back({"interleaved:2", "needs m % p == 0", 0, 0, 0});
  page = gpu_trace_report_html(rep);
  const Parsed p = parse_body(page);
  ASSERT_TRUE(p.ok) << p.error;
  const auto costs = p.with_class("costs");
  ASSERT_EQ(costs.size(), 1u);
  EXPECT_EQ(p.children(costs[0], "tr").size(), 1u + 2u) << "header and one row per stage";
  EXPECT_THAT(page, HasSubstr("<tr><td class=\"l\">1</td><td>1.50 ms</td><td>3.00 ms</td>"));
  EXPECT_THAT(page, HasSubstr("measured step <b>12.30 ms</b>"));
  EXPECT_THAT(page, HasSubstr("simulated <b>11.10 ms</b> (bubble 25.0%)"));
  EXPECT_THAT(page, HasSubstr("W fused &lt;into&gt; B"));
  EXPECT_THAT(page, HasSubstr("<td class=\"l\">zb-h1</td><td>9.90 ms</td><td>10.0%</td>"
                              "<td>1.20 ms</td>"));
  EXPECT_THAT(page, HasSubstr("needs m % p == 0"));
}

TEST(GpuHtml, MedianWindowStepIsTheLongestRankWindowsMedian) {
  auto step = [](int32_t n, double window) {
    GpuStepReport s;
    s.step = n;
    s.usage.window_s = window;
    return s;
  };
  std::vector<GpuRankReport> ranks(2);
  ranks[0].steps = {step(1, 5), step(2, 1), step(3, 3)};
  ranks[1].steps = {step(1, 1), step(2, 4), step(3, 2)};
  // Longest windows: step 1: 5, step 2: 4, step 3: 3 -> the median is step 2.
  EXPECT_EQ(report_internal::median_window_step(ranks), 2);
  ranks[0].steps.push_back(step(4, 10));
  ranks[1].steps.push_back(step(4, 1));  // 3, 4, 5, 10: the lower median
  EXPECT_EQ(report_internal::median_window_step(ranks), 2);
  ranks[1].steps.push_back(step(5, 0.5));  // on rank 1 only: not a candidate
  ranks[1].steps.push_back(step(6, 0.6));
  EXPECT_EQ(report_internal::median_window_step(ranks), 2);
  // No step on every rank: all steps count (windows 1: 2, 2: 3, 3: 1).
  ranks[0].steps = {step(1, 2)};
  ranks[1].steps = {step(2, 3), step(3, 1)};
  EXPECT_EQ(report_internal::median_window_step(ranks), 1);
  EXPECT_EQ(report_internal::median_window_step({}), kNoStep);
}

TEST(GpuHtml, MergeCloseEventsKeepsWhereWorkWasWithAtMostOneBarPerPixel) {
  Timeline tl;
  tl.ranks.resize(1);
  // 100000 kernels of 1 us with 0.2 us gaps, in 10 bursts separated by 1 ms, and on the comm lane
  // two far-apart events.
  double t = 0;
  for (int burst = 0; burst < 10; ++burst) {
    for (int k = 0; k < 10000; ++k) {
      TimelineEvent e;
      e.name = "k<1>";
      e.start = t;
      e.end = t + 1;
      tl.ranks[0].events.push_back(e);
      t += 1.2;
    }
    t += 1000;
  }
  for (double s : {0.0, 50000.0}) {
    TimelineEvent e;
    e.lane = Lane::kComm;
    e.kind = EventKind::kSend;
    e.start = s;
    e.end = s + 10;
    tl.ranks[0].events.push_back(e);
  }
  const int64_t removed = report_internal::merge_close_events(tl, /*gap=*/0.5);
  ASSERT_EQ(tl.ranks[0].events.size(), 10u + 2u) << "one bar per burst, the two comm events";
  EXPECT_EQ(removed, 100000 - 10);
  const auto& ev = tl.ranks[0].events;
  EXPECT_EQ(ev[0].start, 0);
  EXPECT_NEAR(ev[0].end, 9999 * 1.2 + 1, 1e-6);
  EXPECT_EQ(ev[0].name, "10000 events less than one pixel apart");
  EXPECT_EQ(ev[10].lane, Lane::kComm);
  EXPECT_EQ(ev[10].name, "") << "a lone event keeps its name";
}

// A synthetic rank whose one step holds 200000 kernels in 500 bursts: the page draws each burst
// as one bar per kind and stays small.
TEST(GpuHtml, AStepWithManyEventsKeepsThePageSmall) {
  GpuTraceReport rep;
  rep.inputs = {"big.json"};
  GpuTraceRank t;
  t.path = "big.json";
  t.format = "kineto";
  t.rank = 0;
  t.names = {"void gemm<float, 128>(float const*)", "ncclDevKernel_AllReduce_Sum_f32"};
  // Bursts of 400 kernels 5 us apart (4 us each: 1 us gaps), 12 ms from burst to burst: 6 s in
  // all, one pixel about 6 ms, so a burst's gaps merge and the 10 ms between bursts do not.
  for (int k = 0; k < 200000; ++k) {
    GpuEvent e;
    e.start_ns = int64_t(k / 400) * 12'000'000 + int64_t(k % 400) * 5000;
    e.end_ns = e.start_ns + 4000;
    e.kind = k % 10 == 9 ? GpuEventKind::kCollective : GpuEventKind::kCompute;
    e.name = e.kind == GpuEventKind::kCompute ? 0 : 1;
    e.step = 7;
    t.events.push_back(e);
  }
  GpuRankReport rr;
  rr.path = t.path;
  rr.usage = gpu_usage(t.events);
  rr.steps.push_back({7, rr.usage, gpu_causes(t.events, false)});
  rep.traces.push_back(std::move(t));
  rep.ranks.push_back(std::move(rr));
  const std::string page = gpu_trace_report_html(rep);
  std::printf("200000 events in the step: page %zu bytes\n", page.size());
  EXPECT_LT(page.size(), 1u << 20);
  EXPECT_EQ(count(page, "class=\"ev\""), 2u * 500 + 1) << "a bar per burst and kind, the axis end";
  EXPECT_THAT(page, HasSubstr("The step holds 200000 GPU events"));
  EXPECT_THAT(page, HasSubstr("1000 bars in all"));
  const Parsed p = parse_body(page);
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.with_class("rank").size(), 1u);
}

TEST(GpuHtml, NoStepsDrawsTheWholeTrace) {
  GpuTraceReport rep = report_of({"dp2_rank0.json.gz"});
  ASSERT_EQ(rep.ranks.size(), 1u);
  for (auto& e : rep.traces[0].events) e.step = kNoStep;
  rep.ranks[0].steps.clear();
  const std::string page = gpu_trace_report_html(rep);
  EXPECT_THAT(page, HasSubstr("Timeline of the whole trace (no profiler steps)"));
  EXPECT_THAT(page, Not(HasSubstr("class=\"headline\"")));
  const Parsed p = parse_body(page);
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_TRUE(p.with_class("step").empty());
  EXPECT_EQ(p.with_class("whole").size(), 1u);
}

}  // namespace
}  // namespace tightpipe
