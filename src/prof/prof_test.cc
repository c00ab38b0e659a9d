#include "tightpipe/prof.h"

#include <expat.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "tightpipe/json_int.h"
#include "tightpipe/timeline_io.h"

namespace tightpipe {
namespace {

TimelineEvent ev(std::string name, EventKind kind, Lane lane, double s, double e) {
  TimelineEvent x;
  x.name = std::move(name);
  x.kind = kind;
  x.lane = lane;
  x.start = s;
  x.end = e;
  return x;
}

// Two ranks: r0 F0 [0,1] F1 [1,2] B0 [4,6]; r1 F0 [1,2] B0 [2,4]; overlapping sends on r0.
Timeline sample() {
  Timeline t;
  t.time_unit = "ms";
  RankTimeline r0{0, {}}, r1{1, {}};
  r0.events = {ev("0F0", EventKind::kForward, Lane::kCompute, 0, 1),
               ev("0F1", EventKind::kForward, Lane::kCompute, 1, 2),
               ev("0B0", EventKind::kBackward, Lane::kCompute, 4, 6),
               ev("0SEND_F0", EventKind::kSend, Lane::kComm, 1, 1.5),
               ev("0SEND_F1", EventKind::kSend, Lane::kComm, 1.2, 2.5)};
  r0.events[3].peer = 1;
  r0.events[3].bytes = 100;
  r0.events[4].peer = 1;
  r0.events[4].bytes = 50;
  r1.events = {ev("1F0", EventKind::kForward, Lane::kCompute, 1.5, 2.5),
               ev("1B0", EventKind::kBackward, Lane::kCompute, 2.5, 4.5)};
  t.ranks = {r0, r1};
  return t;
}

TEST(TimelineStats, BusyIdleBubble) {
  TimelineStats st = timeline_stats(sample());
  EXPECT_DOUBLE_EQ(st.makespan, 6);
  ASSERT_EQ(st.ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(st.ranks[0].busy, 4);
  EXPECT_DOUBLE_EQ(st.ranks[0].first_start, 0);
  EXPECT_DOUBLE_EQ(st.ranks[0].last_end, 6);
  EXPECT_DOUBLE_EQ(st.ranks[0].internal_idle, 2);
  EXPECT_DOUBLE_EQ(st.ranks[0].idle, 2);
  EXPECT_EQ(st.ranks[0].messages_sent, 2);
  EXPECT_EQ(st.ranks[0].bytes_sent, 150);
  EXPECT_DOUBLE_EQ(st.ranks[1].busy, 3);
  EXPECT_DOUBLE_EQ(st.ranks[1].idle, 3);
  EXPECT_DOUBLE_EQ(st.bubble_ratio, (12.0 - 7.0) / 12.0);
}

TEST(TimelineNames, LanesAndKinds) {
  EXPECT_EQ(lane_name(Lane::kCompute), "compute");
  EXPECT_EQ(lane_name(Lane::kComm), "comm");
  EXPECT_EQ(event_kind_name(EventKind::kBackwardInput), "I");
  EXPECT_TRUE(is_compute_kind(EventKind::kBackwardWeight));
  EXPECT_FALSE(is_compute_kind(EventKind::kRecv));
}

TEST(ChromeTrace, ReparsesAsTraceEventFormat) {
  Timeline t = sample();
  auto j = nlohmann::json::parse(to_chrome_trace(t));
  ASSERT_TRUE(j.contains("traceEvents"));
  int complete = 0, process_names = 0, thread_names = 0;
  std::set<std::pair<int, int>> comm_tids;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph"));
    ASSERT_TRUE(e.contains("pid"));
    ASSERT_TRUE(e.contains("tid"));
    if (e["ph"] == "X") {
      ++complete;
      ASSERT_TRUE(e["ts"].is_number());
      ASSERT_TRUE(e["dur"].is_number());
      EXPECT_GE(e["dur"].get<double>(), 0);
      if (e["cat"] == "SEND") comm_tids.insert({e["pid"].get<int>(), e["tid"].get<int>()});
      if (e["name"] == "0B0") {
        EXPECT_EQ(e["pid"], 0);
        EXPECT_EQ(e["tid"], 0);
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 4000.0);  // ms -> us
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 2000.0);
      }
    } else {
      EXPECT_EQ(e["ph"], "M");
      if (e["name"] == "process_name") {
        ++process_names;
        EXPECT_EQ(e["args"]["name"], "rank " + std::to_string(e["pid"].get<int>()));
      }
      if (e["name"] == "thread_name") ++thread_names;
    }
  }
  EXPECT_EQ(complete, 7);
  EXPECT_EQ(process_names, 2);
  // r0: compute, comm, comm #2 (the two sends overlap); r1: compute.
  EXPECT_EQ(thread_names, 4);
  EXPECT_EQ(comm_tids, (std::set<std::pair<int, int>>{{0, 1}, {0, 101}}));
}

struct SvgScan {
  int depth = 0;
  int rank_groups = 0;
  int rects = 0;
  int legend = 0;
  int axis = 0;
};

TEST(Svg, WellFormedOneRowPerRank) {
  Timeline t = sample();
  SvgOptions o;
  o.title = "1f1b <p=2> & m=2";
  std::string svg = to_svg(t, o);
  XML_Parser parser = XML_ParserCreate(nullptr);
  SvgScan scan;
  XML_SetUserData(parser, &scan);
  XML_SetElementHandler(
      parser,
      [](void* ud, const XML_Char* name, const XML_Char** attrs) {
        auto* s = static_cast<SvgScan*>(ud);
        ++s->depth;
        std::string n = name;
        if (n == "rect") ++s->rects;
        for (int i = 0; attrs[i]; i += 2) {
          if (std::string(attrs[i]) == "class") {
            std::string v = attrs[i + 1];
            if (n == "g" && v == "rank") ++s->rank_groups;
            if (v == "legend") ++s->legend;
            if (v == "axis") ++s->axis;
          }
        }
      },
      [](void* ud, const XML_Char*) { --static_cast<SvgScan*>(ud)->depth; });
  const bool ok = XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1) == XML_STATUS_OK;
  std::string err = ok ? "" : XML_ErrorString(XML_GetErrorCode(parser));
  XML_ParserFree(parser);
  ASSERT_TRUE(ok) << err;
  EXPECT_EQ(scan.rank_groups, 2);
  EXPECT_EQ(scan.legend, 1);
  EXPECT_EQ(scan.axis, 1);
  EXPECT_GE(scan.rects, 7 + 2);  // events + idle backgrounds
  EXPECT_NE(svg.find("time (ms)"), std::string::npos);
  EXPECT_NE(svg.find("&lt;p=2&gt; &amp;"), std::string::npos);
}

TEST(Svg, NiceStepIsOneTwoOrFiveTimesAPowerOfTen) {
  EXPECT_DOUBLE_EQ(nice_step(10, 10), 1);
  EXPECT_DOUBLE_EQ(nice_step(7.3, 10), 1);
  EXPECT_DOUBLE_EQ(nice_step(13, 10), 2);
  EXPECT_DOUBLE_EQ(nice_step(0.37, 5), 0.1);
  EXPECT_DOUBLE_EQ(nice_step(2.4e6, 6), 5e5);
  // No span, or none that can be cut: 1, never NaN (the plan page's axes meet such values).
  EXPECT_EQ(nice_step(0, 5), 1);
  EXPECT_EQ(nice_step(-3, 5), 1);
  EXPECT_EQ(nice_step(std::nan(""), 5), 1);
  EXPECT_EQ(nice_step(std::numeric_limits<double>::infinity(), 5), 1);
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// docs/bubble.md's worked example: 1F1B p=2 m=2, F=2, B=4, optimizer 1.
Timeline worked_example(bool with_optimizer) {
  auto e = [](std::string n, EventKind k, double s, double t) {
    TimelineEvent x;
    x.name = std::move(n);
    x.kind = k;
    x.start = s;
    x.end = t;
    return x;
  };
  Timeline tl;
  RankTimeline r0{0,
                  {e("0F0", EventKind::kForward, 0, 2), e("0F1", EventKind::kForward, 2, 4),
                   e("0B0", EventKind::kBackward, 8, 12), e("0B1", EventKind::kBackward, 14, 18)}};
  RankTimeline r1{1,
                  {e("1F0", EventKind::kForward, 2, 4), e("1B0", EventKind::kBackward, 4, 8),
                   e("1F1", EventKind::kForward, 8, 10), e("1B1", EventKind::kBackward, 10, 14)}};
  if (with_optimizer) {
    r0.events.push_back(e("optimizer", EventKind::kOptimizer, 18, 19));
    r1.events.push_back(e("optimizer", EventKind::kOptimizer, 14, 19));
  }
  tl.ranks = {r0, r1};
  return tl;
}

TEST(Bubble, WorkedExample) {
  const StepBubble b = step_bubble(worked_example(true));
  EXPECT_DOUBLE_EQ(b.window, 19);
  EXPECT_DOUBLE_EQ(b.sync, 18);
  EXPECT_DOUBLE_EQ(b.busy[0], 13);
  EXPECT_DOUBLE_EQ(b.busy[1], 13);
  EXPECT_DOUBLE_EQ(b.optimizer[1], 1);
  EXPECT_DOUBLE_EQ(b.ratio, 12.0 / 38.0);
  EXPECT_DOUBLE_EQ(b.rank_ratio(0), 6.0 / 19.0);
  // Without the optimizer: the 1F1B closed form (p-1)/(m+p-1).
  EXPECT_DOUBLE_EQ(step_bubble(worked_example(false)).ratio, 1.0 / 3.0);
}

TEST(Bubble, RankBusyShipsWhatTheTimelineSays) {
  const Timeline tl = worked_example(true);
  std::vector<RankBusy> parts;
  for (const auto& rt : tl.ranks) parts.push_back(rank_busy(rt.events));
  const StepBubble a = step_bubble(parts), b = step_bubble(tl);
  EXPECT_EQ(a.ratio, b.ratio);  // exactly: one computation
  EXPECT_EQ(parts[1].compute, 12);
  EXPECT_EQ(parts[1].optimizer_start, 14);
}

TEST(Bubble, OverlappingAndTouchingIntervalsCountOnce) {
  BusyUnion u;
  u.add(0, 2);
  u.add(1, 3);  // overlaps
  u.add(3, 4);  // touches
  u.add(6, 7);
  EXPECT_DOUBLE_EQ(u.total(), 5);
  const auto iv = busy_intervals(worked_example(true).ranks[1].events, 18);
  ASSERT_EQ(iv.size(), 2u);
  EXPECT_DOUBLE_EQ(iv[0].start, 2);
  EXPECT_DOUBLE_EQ(iv[0].end, 14);
  EXPECT_DOUBLE_EQ(iv[1].start, 18);  // the optimizer counts from sync
}

TEST(Bubble, MissingRankIsLeftOutAndEmptyStepIsZero) {
  Timeline tl = worked_example(false);
  tl.ranks[1].events.clear();
  const StepBubble b = step_bubble(tl);
  EXPECT_EQ(b.ranks_present, 1);
  EXPECT_DOUBLE_EQ(b.ratio, 6.0 / 18.0);
  EXPECT_EQ(step_bubble(Timeline{}).ratio, 0);
}

// The span measure (docs/bubble.md): each rank timed from its first to its last compute.
TEST(SpanBubble, WorkedExampleAgreesWithTheMakespanMeasure) {
  // 1F1B: rank 0 spans the whole step, so both measures give (p-1)/(m+p-1) without optimizer.
  const SpanBubble b = span_bubble(worked_example(true));  // the optimizer is outside the span
  EXPECT_EQ(b.ranks_present, 2);
  EXPECT_DOUBLE_EQ(b.span[0], 18);
  EXPECT_DOUBLE_EQ(b.span[1], 12);
  EXPECT_DOUBLE_EQ(b.max_span, 18);
  EXPECT_DOUBLE_EQ(b.compute[1], 12);
  EXPECT_DOUBLE_EQ(b.ratio, 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(b.rank_ratio(0), 6.0 / 18.0);
  EXPECT_DOUBLE_EQ(b.rank_ratio(1), 6.0 / 18.0);
}

TEST(SpanBubble, StaggeredStartIsNotABubble) {
  auto e = [](std::string n, double s, double t) {
    TimelineEvent x;
    x.name = std::move(n);
    x.kind = EventKind::kForward;
    x.start = s;
    x.end = t;
    return x;
  };
  // Rank 1 starts 1 later and ends 1 later, both busy for their whole span of 3.
  Timeline tl;
  tl.ranks = {{0, {e("0F0", 0, 1), e("0F1", 1, 2), e("0F2", 2, 3)}},
              {1, {e("1F0", 1, 2), e("1F1", 2, 3), e("1F2", 3, 4)}},
              {2, {}}};  // missing: left out
  const SpanBubble b = span_bubble(tl);
  EXPECT_EQ(b.ranks_present, 2);
  EXPECT_DOUBLE_EQ(b.max_span, 3);
  EXPECT_EQ(b.ratio, 0);
  EXPECT_EQ(b.rank_ratio(1), 0);
  EXPECT_EQ(b.rank_ratio(2), 0);
  EXPECT_DOUBLE_EQ(step_bubble(tl).ratio, 2.0 / 8.0);  // the makespan measure counts the stagger
  std::vector<RankSpan> parts;
  for (const auto& rt : tl.ranks) parts.push_back(rank_span(rt.events));
  EXPECT_FALSE(parts[2].present);
  EXPECT_EQ(span_bubble(parts).ratio, b.ratio);
  EXPECT_EQ(span_bubble(Timeline{}).ratio, 0);
  const BubbleSummary s = summarize_span_bubbles({b, span_bubble(worked_example(false))});
  EXPECT_DOUBLE_EQ(s.ratio, 1.0 / 6.0);  // median of 0 and 1/3
  ASSERT_EQ(s.rank_ratio.size(), 3u);
}

TEST(Bubble, MeasuredStepRangeAndMedians) {
  EXPECT_EQ(measured_step_range(5, 1).first, 1u);
  EXPECT_EQ(measured_step_range(1, 1).first, 0u);  // a run inside its warm-up: its last step
  EXPECT_EQ(measured_step_range(3, 3).first, 2u);
  EXPECT_EQ(measured_step_range(0, 1).last, 0u);
  std::vector<StepBubble> steps(2);
  steps[0].ratio = 0.1;
  steps[0].window = 10;
  steps[0].idle = {1, 2};
  steps[1].ratio = 0.3;
  steps[1].window = 10;
  steps[1].idle = {3, 4};
  const BubbleSummary s = summarize_bubbles(steps);
  EXPECT_DOUBLE_EQ(s.ratio, 0.2);
  EXPECT_DOUBLE_EQ(s.rank_ratio[1], 0.3);
}

// Whole numbers in JSON files: 2.5 is not read as 2, 1e300 (undefined behaviour in a plain
// get<int32_t>(), found by fuzz_timeline under UBSan) and 2^32 are errors, not a wrapped value.
TEST(JsonInt, TakesOnlyIntegersInRange) {
  using nlohmann::json;
  EXPECT_EQ(json_int<int32_t>(json::parse("-7")), -7);
  EXPECT_EQ(json_int<uint64_t>(json::parse("18446744073709551615")), UINT64_MAX);
  EXPECT_EQ(json_int<int64_t>(json::parse("{}"), "k", 5), 5);
  for (const char* bad : {"2.5", "1e300", "\"3\"", "null", "4294967296", "-2147483649"}) {
    EXPECT_THROW(json_int<int32_t>(json::parse(bad)), json::exception) << bad;
  }
  EXPECT_THROW(json_int<uint64_t>(json::parse("-1")), json::exception);
}

TEST(TimelineIo, NonIntegerFieldIsAnErrorNamingTheLine) {
  TimelineEvent e;
  e.name = "0F1";
  e.stage = 0;
  e.microbatch = 1;
  const std::string line = event_to_json(e);
  ASSERT_TRUE(event_from_json(line, "t.jsonl:1").ok());
  for (const char* bad : {"\"stage\":2.5", "\"stage\":1e300", "\"stage\":4294967296"}) {
    std::string text = line;
    const size_t at = text.find("\"stage\":0");
    ASSERT_NE(at, std::string::npos) << text;
    text.replace(at, 9, bad);
    auto r = event_from_json(text, "t.jsonl:3");
    ASSERT_FALSE(r.ok()) << bad << " read as stage " << r->stage;
    EXPECT_NE(r.status().message().find("t.jsonl:3"), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// Issue 13: a negative start gave "bubble 353.2%" in report. The reader refuses an event outside
// [0, end] or with a non-finite time, naming the file and line, so no bubble leaves [0, 1].
TEST(TimelineIo, EventTimesMustBeFiniteAndOrdered) {
  const std::string good =
      R"({"name":"F0","kind":"F","lane":"compute","stage":0,"mb":0,"step":0,"start":0.5,"end":1})";
  ASSERT_TRUE(event_from_json(good, "t.jsonl:1").ok());
  auto with = [&](std::string_view from, std::string_view to) {
    std::string t = good;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  for (const std::string& bad :
       {with("\"start\":0.5", "\"start\":-5"), with("\"end\":1", "\"end\":0.25"),
        with("\"end\":1", "\"end\":-1")}) {
    auto e = event_from_json(bad, "t.jsonl:7");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.status().message().find("t.jsonl:7"), std::string::npos) << e.status().message();
    EXPECT_NE(e.status().message().find("hint"), std::string::npos) << e.status().message();
  }
  auto kind = event_from_json(with("\"kind\":\"F\"", "\"kind\":\"F\\u0000x\""), "t.jsonl:2");
  ASSERT_FALSE(kind.ok());
  EXPECT_NE(kind.status().message().find("'F\\x00x'"), std::string::npos)
      << kind.status().message();
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// Issue 19: the data-parallel all-reduce has a lane and a kind of its own; a timeline file keeps
// them, and the trace and the SVG name and draw them.
TEST(AllReduceLane, RoundTripsAndIsDrawn) {
  TimelineEvent e = ev("1ALLREDUCE", EventKind::kAllReduce, Lane::kAllReduce, 2, 5);
  e.stage = 1;
  e.bytes = 8 << 20;
  EXPECT_EQ(lane_name(Lane::kAllReduce), "allreduce");
  EXPECT_EQ(event_kind_name(EventKind::kAllReduce), "allreduce");
  EXPECT_FALSE(is_compute_kind(EventKind::kAllReduce));
  EXPECT_EQ(cost_slot(EventKind::kAllReduce), -1);
  auto back = event_from_json(event_to_json(e), "t.jsonl:1");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->kind, EventKind::kAllReduce);
  EXPECT_EQ(back->lane, Lane::kAllReduce);
  EXPECT_EQ(back->bytes, 8 << 20);
  Timeline t;
  t.ranks.push_back({0, {ev("1F0", EventKind::kForward, Lane::kCompute, 0, 2), e}});
  const std::string trace = to_chrome_trace(t);
  EXPECT_NE(trace.find("\"allreduce\""), std::string::npos);
  EXPECT_NE(trace.find("1ALLREDUCE"), std::string::npos);
  const std::string svg = to_svg(t);
  EXPECT_NE(svg.find(std::string(event_kind_color(EventKind::kAllReduce))), std::string::npos);
  EXPECT_NE(event_kind_color(EventKind::kAllReduce), event_kind_color(EventKind::kOther));
}

// exposed_allreduce: only the part after the last compute and before the optimizer counts.
// Compute [0, 4] and [6, 10]; all-reduces [3, 7] (hidden: before the last compute ends),
// [9, 13] and [13, 15]; optimizer from 14: exposed [10, 14] = 4.
TEST(AllReduceLane, ExposedIsAfterTheLastComputeAndBeforeTheOptimizer) {
  std::vector<TimelineEvent> evs = {
      ev("0F0", EventKind::kForward, Lane::kCompute, 0, 4),
      ev("0B0", EventKind::kBackward, Lane::kCompute, 6, 10),
      ev("0ALLREDUCE", EventKind::kAllReduce, Lane::kAllReduce, 3, 7),
      ev("1ALLREDUCE", EventKind::kAllReduce, Lane::kAllReduce, 9, 13),
      ev("2ALLREDUCE", EventKind::kAllReduce, Lane::kAllReduce, 13, 15),
      ev("optimizer", EventKind::kOptimizer, Lane::kCompute, 14, 16)};
  EXPECT_DOUBLE_EQ(exposed_allreduce(evs), 4);
  evs.pop_back();  // no optimizer: to the end of the last reduction
  EXPECT_DOUBLE_EQ(exposed_allreduce(evs), 5);
  evs.resize(3);  // only the hidden one
  EXPECT_DOUBLE_EQ(exposed_allreduce(evs), 0);
  // The all-reduce is not busy time: the bubble keeps its one definition.
  Timeline t;
  t.ranks.push_back({0, evs});
  EXPECT_DOUBLE_EQ(step_bubble(t).busy[0], 8);
}

}  // namespace
}  // namespace tightpipe
