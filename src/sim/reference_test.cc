// REFERENCE.md section 2 test vectors and section 3 closed forms, through the generators,
// validate() and lower().
#include <expat.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "reference_vectors.h"
#include "sanitizer.h"
#include "tightpipe/base.h"
#include "tightpipe/prof.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

struct Built {
  Schedule compute_only;
  Schedule lowered;
};

Built build(std::string_view name, int32_t p, int32_t m, int32_t v) {
  GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunks = v;
  auto s = generate_schedule(name, o);
  TP_CHECK(s.ok(), s.status().to_string());
  TP_CHECK(validate(*s).ok(), validate(*s).to_string());
  auto l = lower(*s);
  TP_CHECK(l.ok(), l.status().to_string());
  return {std::move(s).value(), std::move(l).value()};
}

CostModel uniform(const Schedule& s, double f = 1, double i = 1, double w = 1, double comm = 0) {
  UniformCosts u;
  u.f = f;
  u.i = i;
  u.w = w;
  u.comm = comm;
  return uniform_cost_model(u, s.num_ranks, s.num_stages);
}

SimResult sim(const Schedule& s, const CostModel& c, CommMode mode = CommMode::kOverlap) {
  SimOptions o;
  o.comm_mode = mode;
  o.record_timeline = false;  // statistics only: the sweep runs thousands of simulations
  auto r = simulate(s, c, o);
  TP_CHECK(r.ok(), r.status().to_string());
  return std::move(r).value();
}

using testutil::ReferenceVector;

class ReferenceVectors : public ::testing::TestWithParam<ReferenceVector> {};

TEST_P(ReferenceVectors, MakespanBubblePeak) {
  const ReferenceVector& want = GetParam();
  Built b = build(want.name, 4, 8, want.v);
  for (const Schedule* s : {&b.compute_only, &b.lowered}) {
    SCOPED_TRACE(s->lowered ? "lowered" : "compute-only");
    SimResult r = sim(*s, uniform(*s));
    EXPECT_DOUBLE_EQ(r.makespan, want.makespan);
    EXPECT_DOUBLE_EQ(r.total_compute, 96);
    EXPECT_DOUBLE_EQ(r.bubble_ratio, (4 * want.makespan - 96) / (4 * want.makespan));
    EXPECT_NEAR(100 * r.bubble_ratio, want.bubble_percent, 0.05);
    ASSERT_EQ(r.ranks.size(), 4u);
    for (int k = 0; k < 4; ++k) {
      if (!want.peak.empty()) {
        EXPECT_DOUBLE_EQ(r.ranks[k].peak_activations, want.peak[k]) << k;
      }
    }
  }
}

// The vectors: testutil/reference_vectors.h (REFERENCE.md section 2's table).
INSTANTIATE_TEST_SUITE_P(Reference2, ReferenceVectors,
                         ::testing::ValuesIn(testutil::reference_vectors()), [](const auto& info) {
                           std::string n =
                               std::string(info.param.name) + "_v" + std::to_string(info.param.v);
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Reference2, ZbH2AndZbVHaveNoGapInsideARank) {
  for (auto [name, v] : {std::pair<const char*, int>{"zb-h2", 1}, {"zb-v", 2}}) {
    Built b = build(name, 4, 8, v);
    SimResult r = sim(b.lowered, uniform(b.lowered));
    for (const auto& st : r.ranks) {
      EXPECT_DOUBLE_EQ(st.busy, 24) << name << " rank " << st.rank;
      EXPECT_DOUBLE_EQ(st.internal_idle, 0) << name << " rank " << st.rank;
    }
    if (std::string(name) == "zb-h2") {
      // I frees nothing in the uniform model (so that ZB-H1 peaks at p, as REFERENCE.md says):
      // every stage holds 2p-1 = 7 microbatches (F done, W not) just before its first W.
      for (const auto& st : r.ranks) EXPECT_DOUBLE_EQ(st.peak_activations, 2 * 4 - 1);
      // The paper's measure: each stage busy from its first F to its last W (span 3m = 24), so
      // the span bubble is 0 while the makespan bubble is REFERENCE.md's 11.1% (27 vs 24).
      for (const auto& st : r.ranks) EXPECT_DOUBLE_EQ(st.span, 24);
      EXPECT_DOUBLE_EQ(r.max_span, 24);
      EXPECT_EQ(r.span_bubble_ratio, 0);
      EXPECT_DOUBLE_EQ(r.makespan, 27);
      EXPECT_DOUBLE_EQ(r.bubble_ratio, 3.0 / 27.0);
    }
  }
}

// Section 3 closed forms over p 2..16, m p..4p, v 1..4 (uniform costs, no communication; every
// third m under the sanitizers: sanitizer.h).
TEST(Reference3, ClosedFormsSweep) {
  int checked = 0;
  for (int32_t p = 2; p <= 16; ++p) {
    for (int32_t m = p; m <= 4 * p; m += testutil::kSweepStride) {
      // GPipe and 1F1B: (m + p - 1)(F + B).
      for (const char* name : {"gpipe", "1f1b"}) {
        Built b = build(name, p, m, 1);
        EXPECT_DOUBLE_EQ(sim(b.lowered, uniform(b.lowered)).makespan, (m + p - 1) * 3.0)
            << name << " p=" << p << " m=" << m;
        ++checked;
      }
      // ZB-H1: bubble (p-1)(F + I - W), also with unequal costs (W <= F, I).
      for (auto [f, i, w] : {std::tuple{1.0, 1.0, 1.0}, std::tuple{2.0, 3.0, 1.0}}) {
        Built b = build("zb-h1", p, m, 1);
        SimResult r = sim(b.lowered, uniform(b.lowered, f, i, w));
        EXPECT_DOUBLE_EQ(r.makespan - m * (f + i + w), (p - 1) * (f + i - w))
            << "zb-h1 p=" << p << " m=" << m << " f,i,w=" << f << "," << i << "," << w;
        ++checked;
      }
      // ZB-H2 with F = I = W: (p-1)(F + I - 2W) = 0 inside every stage (it needs m >= 2p).
      if (m >= 2 * p) {
        Built b = build("zb-h2", p, m, 1);
        SimResult r = sim(b.lowered, uniform(b.lowered));
        for (const auto& st : r.ranks) {
          EXPECT_NEAR(st.internal_idle, 0, 1e-9)
              << "zb-h2 p=" << p << " m=" << m << " rank " << st.rank;
        }
        ++checked;
      }
      // ZB-V with F = I = W: no gap inside a rank once m >= 2p - 1.
      if (m >= 2 * p - 1) {
        Built b = build("zb-v", p, m, 2);
        SimResult r = sim(b.lowered, uniform(b.lowered));
        for (const auto& st : r.ranks) {
          EXPECT_NEAR(st.internal_idle, 0, 1e-9)
              << "zb-v p=" << p << " m=" << m << " rank " << st.rank;
        }
        ++checked;
      }
      // Interleaved and looped BFS: bubble (p-1)(F + B)/v, where the generator takes the shape.
      for (const char* name : {"interleaved", "looped-bfs"}) {
        for (int32_t v = 1; v <= 4; ++v) {
          GeneratorOptions o{p, m, v, 0};
          auto s = generate_schedule(name, o);
          if (!s.ok()) continue;
          auto l = lower(*s);
          ASSERT_TRUE(l.ok()) << l.status().to_string();
          SimResult r = sim(*l, uniform(*l));
          EXPECT_NEAR(r.makespan - m * 3.0, (p - 1) * 3.0 / v, 1e-9)
              << name << " p=" << p << " m=" << m << " v=" << v;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 1500 / testutil::kSweepStride);
}

// ZB-H2 (the paper's rule) for p 2..8 and every m in 2p..8p: valid, the CSV round trip is exact,
// and with uniform costs every stage peaks at exactly 2p-1 activations whatever m is; with
// F = I = W no stage has a gap from its first F to its last W (span 3m).
TEST(Reference3, ZbH2MemoryAndSpanSweep) {
  int checked = 0;
  for (int32_t p = 2; p <= 8; ++p) {
    for (int32_t m = 2 * p; m <= 8 * p; ++m) {
      const std::string where = fmt::format("zb-h2 p={} m={}", p, m);
      Built b = build("zb-h2", p, m, 1);  // validate()s, as `schedule --check` does
      auto csv = parse_csv(to_csv(b.compute_only), "zb-h2.csv");
      ASSERT_TRUE(csv.ok()) << where << csv.status().message();
      EXPECT_EQ(csv->programs, b.compute_only.programs) << where;
      EXPECT_EQ(csv->stage_to_rank, b.compute_only.stage_to_rank) << where;
      EXPECT_TRUE(validate(*csv).ok()) << where;
      SimResult r = sim(b.lowered, uniform(b.lowered));
      ASSERT_EQ(r.ranks.size(), static_cast<size_t>(p));
      for (const auto& st : r.ranks) {
        EXPECT_LE(st.peak_activations, 2 * p - 1) << where << " rank " << st.rank;
        EXPECT_DOUBLE_EQ(st.peak_activations, 2 * p - 1) << where << " rank " << st.rank;
        EXPECT_NEAR(st.internal_idle, 0, 1e-9) << where << " rank " << st.rank;
        EXPECT_NEAR(st.span, 3.0 * m, 1e-9) << where << " rank " << st.rank;
      }
      EXPECT_NEAR(r.span_bubble_ratio, 0, 1e-12) << where;
      EXPECT_NEAR(r.bubble_ratio, (p - 1.0) / (3.0 * m + p - 1), 1e-12) << where;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 217);
}

// With communication, overlap is never slower than blocking.
TEST(Reference3, OverlapNeverSlowerThanBlocking) {
  int strictly = 0, checked = 0;
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v"}) {
    for (int32_t p : {2, 3, 4, 8}) {
      for (int32_t m : {p, 2 * p, 3 * p}) {
        const int32_t v = std::string(name) == "interleaved" || std::string(name) == "zb-v" ? 2 : 1;
        GeneratorOptions o{p, m, v, 0};
        auto s = generate_schedule(name, o);
        if (!s.ok()) continue;
        auto l = lower(*s);
        ASSERT_TRUE(l.ok()) << l.status().to_string();
        for (double comm : {0.05, 0.3, 1.0, 2.5}) {
          CostModel c = uniform(*l, 1, 1, 1, comm);
          const double ov = sim(*l, c, CommMode::kOverlap).makespan;
          const double bl = sim(*l, c, CommMode::kBlocking).makespan;
          EXPECT_LE(ov, bl + 1e-9) << name << " p=" << p << " m=" << m << " comm=" << comm;
          EXPECT_GE(ov, sim(*l, uniform(*l)).makespan - 1e-9);
          strictly += ov < bl - 1e-9;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(strictly, checked / 2);
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// A simulated timeline through the prof writers: the trace re-parses as Trace Event Format with
// one X event per timeline event, and the SVG is well-formed XML with one row per rank.
TEST(SimulatedTimeline, TraceAndSvg) {
  Built b = build("zb-v", 4, 8, 2);
  UniformCosts u;
  u.comm = 0.2;
  CostModel c = uniform_cost_model(u, 4, 8);
  auto r = simulate(b.lowered, c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  size_t events = 0;
  for (const auto& rt : r->timeline.ranks) {
    events += rt.events.size();
    // Start order within each lane.
    for (size_t k = 1; k < rt.events.size(); ++k) {
      if (rt.events[k].lane == rt.events[k - 1].lane) {
        EXPECT_LE(rt.events[k - 1].start, rt.events[k].start);
      }
    }
  }
  EXPECT_EQ(events, b.lowered.size());
  auto j = nlohmann::json::parse(to_chrome_trace(r->timeline));
  size_t x = 0;
  std::set<int> pids;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "X") {
      ++x;
      pids.insert(e["pid"].get<int>());
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
  }
  EXPECT_EQ(x, events);
  EXPECT_EQ(pids.size(), 4u);

  const std::string svg = to_svg(r->timeline);
  XML_Parser parser = XML_ParserCreate(nullptr);
  int rows = 0;
  XML_SetUserData(parser, &rows);
  XML_SetStartElementHandler(parser, [](void* ud, const XML_Char* name, const XML_Char** attrs) {
    if (std::string(name) != "g") return;
    for (int i = 0; attrs[i]; i += 2) {
      if (std::string(attrs[i]) == "class" && std::string(attrs[i + 1]) == "rank") {
        ++*static_cast<int*>(ud);
      }
    }
  });
  const bool ok = XML_Parse(parser, svg.data(), static_cast<int>(svg.size()), 1) == XML_STATUS_OK;
  XML_ParserFree(parser);
  EXPECT_TRUE(ok);
  EXPECT_EQ(rows, 4);
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// Property check over every generator with random per-stage costs: in the simulated timeline
// every action starts after all its dependencies() have ended, compute events on a rank never
// overlap, and (overlap mode) every compute action starts exactly when the later of its rank's
// previous compute end and its last dependency end: no idle time the schedule does not force.
TEST(SimulatorProperties, RandomCostsRespectDependenciesTightly) {
  Rng rng(1234);
  int checked = 0;
  for (const char* name :
       {"gpipe", "1f1b", "interleaved", "looped-bfs", "zb-h1", "zb-h2", "zb-v"}) {
    for (int32_t p : {2, 3, 5}) {
      for (int32_t m : {p, 2 * p + 1}) {
        const GeneratorInfo* g = find_generator(name);
        ASSERT_NE(g, nullptr);
        const int32_t v = g->fixed_chunks > 0 ? g->fixed_chunks : (g->takes_chunks ? 2 : 1);
        GeneratorOptions o{p, m, v, 0};
        auto s = generate_schedule(name, o);
        if (!s.ok()) continue;
        auto l = lower(*s);
        ASSERT_TRUE(l.ok()) << l.status().to_string();
        std::vector<StageCost> stages(l->num_stages);
        for (StageCost& c : stages) {
          c.f = 0.5 + rng.uniform_double();
          c.i = 0.5 + rng.uniform_double();
          c.w = 0.2 + rng.uniform_double();
          c.b = c.i + c.w;
          c.recompute = c.f;
          c.message_bytes = 1000;
        }
        CostModel cost(stages, LinkCost{0.05, 2000}, "ms", "random");
        for (CommMode mode : {CommMode::kOverlap, CommMode::kBlocking}) {
          SimOptions opt;
          opt.comm_mode = mode;
          auto r = simulate(*l, cost, opt);
          ASSERT_TRUE(r.ok()) << r.status().to_string();
          std::map<std::string, const TimelineEvent*> by_name;
          for (const auto& rt : r->timeline.ranks)
            for (const auto& e : rt.events) by_name[e.name] = &e;
          auto end_of = [&](const Action& d) {
            auto it = by_name.find(to_string(d));
            if (it == by_name.end() && d.type == ActionType::kBackwardInput) {
              it = by_name.find(to_string({ActionType::kBackward, d.stage, d.microbatch}));
            }
            EXPECT_NE(it, by_name.end()) << to_string(d);
            return it == by_name.end() ? 0.0 : it->second->end;
          };
          for (int32_t rank = 0; rank < l->num_ranks; ++rank) {
            double prev_end = 0;
            for (const Action& a : l->programs[rank]) {
              const TimelineEvent* e = by_name.at(to_string(a));
              double ready = 0;
              for (const Action& d : dependencies(*l, a)) ready = std::max(ready, end_of(d));
              if (is_compute(a.type)) {
                EXPECT_GE(e->start, prev_end - 1e-9) << name << " " << to_string(a);
                EXPECT_GE(e->start, ready - 1e-9) << name << " " << to_string(a);
                if (mode == CommMode::kOverlap) {
                  EXPECT_NEAR(e->start, std::max(prev_end, ready), 1e-9)
                      << name << " p=" << p << " m=" << m << " " << to_string(a);
                }
                prev_end = e->end;
              } else if (a.type == ActionType::kRecvAct || a.type == ActionType::kRecvGrad) {
                EXPECT_GE(e->end, ready - 1e-9) << to_string(a);  // after its SEND completed
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

}  // namespace
}  // namespace tightpipe
