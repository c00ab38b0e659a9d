#include "tightpipe/simulator.h"

#include <expat.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "tightpipe/check.h"
#include "tightpipe/prof.h"

namespace tightpipe {
namespace {

Action A(ActionType t, int32_t s, int32_t mb) { return {t, s, mb}; }
constexpr ActionType F = ActionType::kForward, I = ActionType::kBackwardInput,
                     W = ActionType::kBackwardWeight, B = ActionType::kBackward,
                     SF = ActionType::kSendAct, RF = ActionType::kRecvAct,
                     SB = ActionType::kSendGrad, RB = ActionType::kRecvGrad;

CostModel uniform(int32_t p, int32_t stages, double f = 1, double i = 1, double w = 1,
                  double comm = 0) {
  UniformCosts u;
  u.f = f;
  u.i = i;
  u.w = w;
  u.comm = comm;
  u.bytes = 1000;
  return uniform_cost_model(u, p, stages);
}

// 1F1B by hand, p=2, m=2: r0 F0 F1 B0 B1; r1 F0 B0 F1 B1.
Schedule hand_1f1b(bool lowered) {
  Schedule s;
  s.num_ranks = 2;
  s.num_stages = 2;
  s.num_microbatches = 2;
  s.stage_to_rank = {0, 1};
  s.name = "hand-1f1b";
  s.lowered = lowered;
  if (!lowered) {
    s.programs = {{A(F, 0, 0), A(F, 0, 1), A(B, 0, 0), A(B, 0, 1)},
                  {A(F, 1, 0), A(B, 1, 0), A(F, 1, 1), A(B, 1, 1)}};
  } else {
    s.programs = {{A(F, 0, 0), A(SF, 0, 0), A(F, 0, 1), A(SF, 0, 1), A(RB, 0, 0), A(B, 0, 0),
                   A(RB, 0, 1), A(B, 0, 1)},
                  {A(RF, 1, 0), A(F, 1, 0), A(B, 1, 0), A(SB, 1, 0), A(RF, 1, 1), A(F, 1, 1),
                   A(B, 1, 1), A(SB, 1, 1)}};
  }
  return s;
}

// The one ActionType -> EventKind mapping (the simulator's timeline and the GPU traces' samples).
TEST(Simulator, EventKindOfEveryActionType) {
  const std::map<ActionType, EventKind> want = {{F, EventKind::kForward},
                                                {I, EventKind::kBackwardInput},
                                                {W, EventKind::kBackwardWeight},
                                                {B, EventKind::kBackward},
                                                {SF, EventKind::kSend},
                                                {SB, EventKind::kSend},
                                                {RF, EventKind::kRecv},
                                                {RB, EventKind::kRecv},
                                                {ActionType::kOverlapFB, EventKind::kOther}};
  ASSERT_EQ(want.size(), static_cast<size_t>(kNumActionTypes));
  for (const auto& [type, kind] : want) EXPECT_EQ(event_kind(type), kind) << static_cast<int>(type);
}

TEST(Simulator, HandBuilt1F1BComputeOnly) {
  Schedule s = hand_1f1b(false);
  auto r = simulate(s, uniform(2, 2));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->makespan, 9);  // (m + p - 1)(F + B)
  EXPECT_DOUBLE_EQ(r->total_compute, 12);
  EXPECT_DOUBLE_EQ(r->bubble_ratio, 6.0 / 18.0);
  EXPECT_DOUBLE_EQ(r->ranks[1].first_start, 1);
  EXPECT_DOUBLE_EQ(r->ranks[0].last_end, 9);
  EXPECT_DOUBLE_EQ(r->ranks[0].peak_activations, 2);
  EXPECT_DOUBLE_EQ(r->ranks[1].peak_activations, 1);
  // The span measure by hand (docs/bubble.md): rank 0 spans [0, 9], rank 1 [1, 7], busy 6 each.
  EXPECT_DOUBLE_EQ(r->ranks[0].span, 9);
  EXPECT_DOUBLE_EQ(r->ranks[1].span, 6);
  EXPECT_DOUBLE_EQ(r->ranks[0].internal_idle, 3);
  EXPECT_DOUBLE_EQ(r->ranks[1].internal_idle, 0);
  EXPECT_DOUBLE_EQ(r->max_span, 9);
  EXPECT_DOUBLE_EQ(r->span_bubble_ratio, 1 - 12.0 / 18.0);
  EXPECT_DOUBLE_EQ(r->ranks[0].span_bubble_ratio, 3.0 / 9.0);
  EXPECT_DOUBLE_EQ(r->ranks[1].span_bubble_ratio, 3.0 / 9.0);
  ASSERT_EQ(r->timeline.ranks.size(), 2u);
  const auto& ev = r->timeline.ranks[1].events;
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].name, "1F0");
  EXPECT_DOUBLE_EQ(ev[0].start, 1);
  EXPECT_EQ(ev[1].name, "1B0");
  EXPECT_DOUBLE_EQ(ev[1].start, 2);
  EXPECT_DOUBLE_EQ(ev[1].end, 4);
}

TEST(Simulator, HandLoweredOverlapAndBlocking) {
  Schedule s = hand_1f1b(true);
  // No comm cost: same as compute-only.
  auto r0 = simulate(s, uniform(2, 2));
  ASSERT_TRUE(r0.ok()) << r0.status().to_string();
  EXPECT_DOUBLE_EQ(r0->makespan, 9);
  EXPECT_EQ(r0->messages, 4);
  EXPECT_EQ(r0->message_bytes, 4000);
  // comm = 0.5, overlap: r1 F0 at 1.5..2.5, B0 2.5..4.5, grad arrives r0 at 5; r0 B0 5..7;
  // F1 arrives at 2.5 -> r1 F1 4.5..5.5, B1 5.5..7.5, grad at 8 -> r0 B1 8..10.
  SimOptions o;
  auto ov = simulate(s, uniform(2, 2, 1, 1, 1, 0.5), o);
  ASSERT_TRUE(ov.ok()) << ov.status().to_string();
  EXPECT_DOUBLE_EQ(ov->makespan, 10);
  // Blocking: r0 F0 0..1, SEND 1..1.5, F1 1.5..2.5, SEND 2.5..3; r1 RECV till 1.5, F0 ..2.5,
  // B0 ..4.5, SEND_B ..5, RECV_F1 (sent 2.5..3, done) at 5, F1 5..6, B1 6..8, SEND 8..8.5;
  // r0 RECV_B0 3..5 (msg 4.5..5), B0 5..7, RECV_B1 7..8.5, B1 8.5..10.5.
  o.comm_mode = CommMode::kBlocking;
  auto bl = simulate(s, uniform(2, 2, 1, 1, 1, 0.5), o);
  ASSERT_TRUE(bl.ok()) << bl.status().to_string();
  EXPECT_DOUBLE_EQ(bl->makespan, 10.5);
  EXPECT_LE(ov->makespan, bl->makespan);
  // Comm events on the comm lane with peers and bytes.
  bool found = false;
  for (const auto& e : bl->timeline.ranks[0].events) {
    if (e.name == "0RECV_B1") {
      found = true;
      EXPECT_EQ(e.lane, Lane::kComm);
      EXPECT_EQ(e.kind, EventKind::kRecv);
      EXPECT_EQ(e.peer, 1);
      EXPECT_EQ(e.bytes, 1000);
      EXPECT_DOUBLE_EQ(e.start, 8);
      EXPECT_DOUBLE_EQ(e.end, 8.5);
    }
  }
  EXPECT_TRUE(found);
}

TEST(Simulator, Compute_onlyWithCostlyMessagesIsRejected) {
  auto r = simulate(hand_1f1b(false), uniform(2, 2, 1, 1, 1, 0.5));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("lower()"), std::string::npos) << r.status().message();
}

TEST(Simulator, DeadlockNamesEachBlockedRank) {
  Schedule s = hand_1f1b(false);
  // r1 wants B0 before its own F0: it can never run; r0 then waits for the gradient.
  s.programs[1] = {A(B, 1, 0), A(F, 1, 0), A(F, 1, 1), A(B, 1, 1)};
  auto r = simulate(s, uniform(2, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("rank 0 step 2: 0B0 waits for 1I0 on rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 1 step 0: 1B0 waits for 1F0"), std::string::npos) << m;
}

TEST(Simulator, RejectsActionOnWrongRank) {
  Schedule s = hand_1f1b(false);
  s.programs[0][0] = A(F, 1, 0);
  auto r = simulate(s, uniform(2, 2));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("stage 1 lives on rank 1"), std::string::npos);
}

TEST(Simulator, RejectsUncoveredSchedule) {
  auto r = simulate(hand_1f1b(false), uniform(1, 1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("has 1 stage(s) but schedule"), std::string::npos);
}

TEST(Simulator, FullRecomputeHoldsInputsAndAddsTime) {
  Schedule s = hand_1f1b(false);
  UniformCosts u;
  u.input = 0.25;
  CostModel c = uniform_cost_model(u, 2, 2);
  SimOptions o;
  o.recompute = Recompute::kFull;
  auto r = simulate(s, c, o);
  ASSERT_TRUE(r.ok());
  // Each B grows by the forward time: (m + p - 1)(F + B + F) = 3 * 4.
  EXPECT_DOUBLE_EQ(r->makespan, 12);
  // r0 holds two inputs (0.5) and re-materializes one activation during B0: 1.5.
  EXPECT_DOUBLE_EQ(r->ranks[0].peak_activations, 1.5);
  EXPECT_DOUBLE_EQ(r->ranks[1].peak_activations, 1.25);
}

TEST(Simulator, GptModelRecomputeTradesTimeForMemory) {
  auto g = parse_gpt_cost_config("layers=8,hidden=512,heads=8,seq=256,vocab=1000,flops=1e12");
  ASSERT_TRUE(g.ok());
  auto c = gpt_cost_model(*g, 2, 2);
  ASSERT_TRUE(c.ok());
  Schedule s = hand_1f1b(true);
  SimOptions none, full;
  full.recompute = Recompute::kFull;
  auto a = simulate(s, *c, none);
  auto b = simulate(s, *c, full);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(b->makespan, a->makespan);
  EXPECT_LT(b->ranks[0].peak_activation_bytes, a->ranks[0].peak_activation_bytes);
  // Without recompute rank 0 holds both microbatches' activations: 2 x act_bytes of stage 0.
  EXPECT_DOUBLE_EQ(a->ranks[0].peak_activation_bytes, 2 * c->stage(0).act_bytes);
  // With it: two stage inputs plus one re-materialized activation during B.
  EXPECT_DOUBLE_EQ(b->ranks[0].peak_activation_bytes,
                   2 * c->stage(0).input_bytes + c->stage(0).act_bytes);
  EXPECT_DOUBLE_EQ(a->ranks[0].static_bytes,
                   c->stage(0).param_bytes + c->stage(0).grad_bytes + c->stage(0).optimizer_bytes);
  EXPECT_DOUBLE_EQ(a->ranks[0].peak_bytes,
                   a->ranks[0].peak_activation_bytes + a->ranks[0].static_bytes);
  EXPECT_EQ(a->message_bytes, 4 * c->message_bytes(0, 1));
}

TEST(Simulator, StatsMatchTimelineStats) {
  auto r = simulate(hand_1f1b(true), uniform(2, 2, 1, 1, 1, 0.25));
  ASSERT_TRUE(r.ok());
  TimelineStats t = timeline_stats(r->timeline);
  EXPECT_DOUBLE_EQ(t.makespan, r->makespan);
  EXPECT_DOUBLE_EQ(t.bubble_ratio, r->bubble_ratio);
  for (int k = 0; k < 2; ++k) {
    EXPECT_DOUBLE_EQ(t.ranks[k].busy, r->ranks[k].busy);
    EXPECT_DOUBLE_EQ(t.ranks[k].first_start, r->ranks[k].first_start);
    EXPECT_DOUBLE_EQ(t.ranks[k].last_end, r->ranks[k].last_end);
    EXPECT_DOUBLE_EQ(t.ranks[k].comm, r->ranks[k].comm);
    EXPECT_EQ(t.ranks[k].messages_sent, r->ranks[k].messages_sent);
  }
  SimOptions no_tl;
  no_tl.record_timeline = false;
  auto r2 = simulate(hand_1f1b(true), uniform(2, 2, 1, 1, 1, 0.25), no_tl);
  ASSERT_TRUE(r2.ok());
  EXPECT_DOUBLE_EQ(r2->makespan, r->makespan);
  EXPECT_TRUE(r2->timeline.ranks.empty());
}

// ----- message overhead (issue 14): LinkCost::overhead on the compute lanes ----------------------

CostModel with_overhead(int32_t p, int32_t stages, double overhead, double comm = 0) {
  UniformCosts u;
  u.comm = comm;
  u.overhead = overhead;
  return uniform_cost_model(u, p, stages);
}

Schedule lowered(std::string_view name, int32_t p, int32_t m, int32_t v = 1) {
  auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = v});
  TP_CHECK(s.ok(), s.status().to_string());
  auto low = lower(*s);
  TP_CHECK(low.ok(), low.status().to_string());
  return *low;
}

// The duration of the compute event `name` on `rank`.
double duration(const SimResult& r, int32_t rank, std::string_view name) {
  for (const TimelineEvent& e : r.timeline.ranks[rank].events) {
    if (e.name == name) return e.end - e.start;
  }
  ADD_FAILURE() << "no event " << name << " on rank " << rank;
  return -1;
}

// 1F1B, p = 2, m = 1, f = 1, b = 2: F0 sends, F1 receives, B1 sends, B0 receives, all on the
// critical path, so the makespan grows by exactly 4o (and in blocking mode too, with the link
// time on top).
TEST(MessageOverhead, OneF1BPaysFourPerMicrobatch) {
  const double o = 0.25;
  const Schedule s = lowered("1f1b", 2, 1);
  auto base = simulate(s, with_overhead(2, 2, 0));
  auto r = simulate(s, with_overhead(2, 2, o));
  ASSERT_TRUE(base.ok() && r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(base->makespan, 6);
  EXPECT_DOUBLE_EQ(r->makespan, 6 + 4 * o);
  EXPECT_DOUBLE_EQ(r->total_compute - base->total_compute, 4 * o);  // busy time
  EXPECT_DOUBLE_EQ(duration(*r, 0, "0F0"), 1 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 1, "1F0"), 1 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 1, "1B0"), 2 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 0, "0B0"), 2 + o);
  EXPECT_EQ(r->messages, base->messages);  // the link's messages are the same
  SimOptions blocking;
  blocking.comm_mode = CommMode::kBlocking;
  auto b = simulate(s, with_overhead(2, 2, o, 0.5), blocking);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_DOUBLE_EQ(b->makespan, 6 + 4 * o + 2 * 0.5);
}

// Every message is paid at both ends: interleaved v = 2 on p = 2 crosses ranks at all 3 stage
// boundaries (12 charges per microbatch), 1F1B at its one (4), zb-v at 2 of its 3 (8: stages 1
// and 2 share rank 1 and hand off for free).
TEST(MessageOverhead, ChargesEveryRemoteMessageAtBothEnds) {
  const double o = 0.125;
  const int32_t m = 4;
  struct Case {
    std::string_view name;
    int32_t v;
    int64_t charges;  // messages crossing ranks x 2 ends
  };
  for (const Case& c :
       {Case{"1f1b", 1, 4 * m}, Case{"interleaved", 2, 12 * m}, Case{"zb-v", 2, 8 * m}}) {
    SCOPED_TRACE(c.name);
    const Schedule s = lowered(c.name, 2, m, c.v);
    auto base = simulate(s, with_overhead(2, 2 * c.v, 0));
    auto r = simulate(s, with_overhead(2, 2 * c.v, o));
    ASSERT_TRUE(base.ok() && r.ok()) << r.status().to_string();
    EXPECT_EQ(r->messages * 2, c.charges);
    EXPECT_DOUBLE_EQ(r->total_compute - base->total_compute, static_cast<double>(c.charges) * o);
    EXPECT_GE(r->makespan, base->makespan);
    int64_t counted = 0;
    for (int32_t rank = 0; rank < 2; ++rank) {
      for (const Action& a : s.programs[rank]) {
        if (is_compute(a.type)) counted += remote_messages(s, a);
      }
    }
    EXPECT_EQ(counted, c.charges);
  }
  // zb-v, p = 2: stage 1's F receives from rank 0 and hands off to stage 2 on its own rank (one
  // charge); stage 2's F receives that hand-off and sends to rank 0 (one); stage 2's I receives
  // from rank 0 and hands off to stage 1 (one); W never pays. Per chunk f = i = w = 1/2.
  const Schedule zbv = lowered("zb-v", 2, m, 2);
  auto r = simulate(zbv, with_overhead(2, 4, o));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(duration(*r, 1, "1F0"), 0.5 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 1, "2F0"), 0.5 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 1, "2I0"), 0.5 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 1, "1W0"), 0.5);
  EXPECT_DOUBLE_EQ(duration(*r, 0, "0F0"), 0.5 + o);
  EXPECT_DOUBLE_EQ(duration(*r, 0, "3I0"), 0.5 + o);
}

// Stages that share a rank hand off for free: a one-rank pipeline pays nothing, and being free
// of remote messages it needs no lowering.
TEST(MessageOverhead, OneRankPaysNothing) {
  Schedule s;
  s.name = "one-rank";
  s.num_ranks = 1;
  s.num_stages = 2;
  s.num_microbatches = 1;
  s.stage_to_rank = {0, 0};
  s.programs = {{A(F, 0, 0), A(F, 1, 0), A(B, 1, 0), A(B, 0, 0)}};
  auto base = simulate(s, with_overhead(1, 2, 0));
  auto r = simulate(s, with_overhead(1, 2, 0.5));
  ASSERT_TRUE(base.ok() && r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->makespan, base->makespan);
  EXPECT_DOUBLE_EQ(r->makespan, 3);
}

// A compute-only schedule has no SEND/RECV to carry the messages: lower() it first.
TEST(MessageOverhead, ComputeOnlyIsRefused) {
  auto r = simulate(hand_1f1b(false), with_overhead(2, 2, 0.25));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("link overhead"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("lower()"), std::string::npos) << r.status().message();
}

TEST(SimOutput, JsonHasStableFields) {
  auto r = simulate(hand_1f1b(true), uniform(2, 2));
  ASSERT_TRUE(r.ok());
  auto j = nlohmann::json::parse(sim_result_to_json(*r));
  for (const char* k :
       {"schema", "schedule", "ranks", "stages", "chunks", "microbatches", "comm_mode", "recompute",
        "cost_source", "time_unit", "makespan", "total_compute", "bubble_ratio", "bubble_percent",
        "messages", "message_bytes", "actions", "activation_unit_bytes", "per_rank"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  EXPECT_EQ(j["schema"], "tightpipe.simulate/1");
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 9);
  ASSERT_EQ(j["per_rank"].size(), 2u);
  for (const char* k : {"rank", "first_start", "last_end", "busy", "idle", "internal_idle", "comm",
                        "compute_actions", "messages_sent", "bytes_sent", "peak_activations",
                        "peak_activation_bytes", "static_bytes", "peak_bytes"}) {
    EXPECT_TRUE(j["per_rank"][0].contains(k)) << k;
  }
  EXPECT_NE(format_sim_table(*r).find("makespan 9"), std::string::npos) << format_sim_table(*r);
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// The model with each stage's all-reduce bytes (its pipeline messages stay free).
CostModel with_allreduce(const CostModel& base, double bytes, double optimizer = 0) {
  std::vector<StageCost> st;
  for (int32_t s = 0; s < base.num_stages(); ++s) {
    st.push_back(base.stage(s));
    st.back().allreduce_bytes = bytes;
    st.back().optimizer = optimizer;
  }
  return CostModel(st, base.link(), base.time_unit(), "dp test", base.real_bytes());
}

// Two replicas on a data-parallel link of latency 0.5 and 100 bytes per unit.
DataParallelSim dp2(bool overlap) { return {2, overlap, 0, LinkCost{0.5, 100, 0}}; }

TEST(DataParallelSim, RingCostIsAlphaBeta) {
  const LinkCost link{0.5, 100, 0};
  // d = 2: 2(d-1)/d x 400 / 100 = 4, plus 2(d-1) x 0.5 = 1 per bucket.
  EXPECT_DOUBLE_EQ(ring_allreduce_time(400, 2, link, 0), 5);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(400, 2, link, 100), 4 + 4 * 1);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(400, 2, link, 150), 4 + 3 * 1);  // 150, 150, 100
  EXPECT_DOUBLE_EQ(ring_allreduce_time(400, 4, link, 0), 6 + 3);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(400, 1, link, 0), 0);
  EXPECT_DOUBLE_EQ(ring_allreduce_time(400, 2, LinkCost{}, 0), 0);
  EXPECT_FALSE(check_data_parallel({0, false, 0, {}}).ok());
  EXPECT_NE(check_data_parallel({0, false, 0, {}}).message().find("--data-parallel-size 0"),
            std::string::npos);
  EXPECT_FALSE(check_data_parallel({2, false, -1, {}}).ok());
}

// Closed form: 1F1B p = 2, m = 2, F = 1, B = 2, free messages. The programs end at 9 (rank 0)
// and 7 (rank 1); without overlap each rank's one stage reduces for 5 after its program, all of
// it exposed: T = 14, exposed all-reduce (5 + 5) / (2 x 14).
TEST(DataParallelSim, NoOverlapExposesTheWholeAllReduce) {
  const CostModel cost = with_allreduce(uniform(2, 2), 400);
  SimOptions o;
  auto plain = simulate(hand_1f1b(true), cost, o);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_DOUBLE_EQ(plain->makespan, 9);
  EXPECT_DOUBLE_EQ(plain->exposed_allreduce_ratio, 0);
  o.data_parallel = dp2(false);
  auto r = simulate(hand_1f1b(true), cost, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->makespan, 14);
  EXPECT_DOUBLE_EQ(r->ranks[0].allreduce, 5);
  EXPECT_DOUBLE_EQ(r->ranks[0].exposed_allreduce, 5);
  EXPECT_DOUBLE_EQ(r->ranks[1].exposed_allreduce, 5);
  EXPECT_DOUBLE_EQ(r->exposed_allreduce_ratio, 10.0 / 28);
  // The bubble keeps its one definition: the all-reduce is idle, not busy.
  EXPECT_DOUBLE_EQ(r->bubble_ratio, 1 - 12.0 / 28);
  // The timeline has the lane, and prof.h's exposed_allreduce reads the same off it.
  int lanes = 0;
  for (const RankTimeline& rt : r->timeline.ranks) {
    for (const TimelineEvent& e : rt.events) {
      if (e.lane != Lane::kAllReduce) continue;
      ++lanes;
      EXPECT_EQ(e.kind, EventKind::kAllReduce);
      EXPECT_EQ(e.bytes, 400);
      EXPECT_EQ(e.name, fmt::format("{}ALLREDUCE", e.stage));
    }
    EXPECT_DOUBLE_EQ(exposed_allreduce(rt.events), 5) << rt.rank;
  }
  EXPECT_EQ(lanes, 2);
  // With the optimizer modelled: it starts after the reduction (rank 0 at 14, rank 1 at 12).
  auto opt = simulate(hand_1f1b(true), with_allreduce(uniform(2, 2), 400, 1), o);
  ASSERT_TRUE(opt.ok()) << opt.status().to_string();
  EXPECT_DOUBLE_EQ(opt->makespan, 15);
  EXPECT_DOUBLE_EQ(opt->exposed_allreduce_ratio, 10.0 / 30);
}

// With overlap a stage's reduction starts after its last W/B. Interleaved p = 2, v = 2: each
// rank finishes one chunk's backwards before the other's, so part of its reductions hides under
// the rest of its program and the step is shorter. One reduction at a time per rank.
TEST(DataParallelSim, OverlapStartsAfterTheStagesLastBackward) {
  auto sch = generate_schedule("interleaved", {.ranks = 2, .microbatches = 4, .chunks = 2});
  ASSERT_TRUE(sch.ok()) << sch.status().to_string();
  auto low = lower(*sch);
  ASSERT_TRUE(low.ok()) << low.status().to_string();
  const CostModel cost = with_allreduce(uniform(2, 4, 2, 2, 2), 200);  // 2 + 1 per stage
  SimOptions o;
  o.data_parallel = dp2(false);
  auto after = simulate(*low, cost, o);
  o.data_parallel.overlap = true;
  auto overlapped = simulate(*low, cost, o);
  ASSERT_TRUE(after.ok() && overlapped.ok());
  EXPECT_LT(overlapped->makespan, after->makespan);
  EXPECT_LT(overlapped->exposed_allreduce_ratio, after->exposed_allreduce_ratio);
  for (const RankTimeline& rt : overlapped->timeline.ranks) {
    std::map<int32_t, double> last_grad;
    std::vector<std::pair<double, double>> ar;
    for (const TimelineEvent& e : rt.events) {
      if (e.kind == EventKind::kBackward || e.kind == EventKind::kBackwardWeight)
        last_grad[e.stage] = std::max(last_grad[e.stage], e.end);
      if (e.kind == EventKind::kAllReduce) ar.push_back({e.start, e.end});
    }
    for (const TimelineEvent& e : rt.events) {
      if (e.kind == EventKind::kAllReduce) {
        EXPECT_GE(e.start, last_grad.at(e.stage)) << e.name;
      }
    }
    ASSERT_EQ(ar.size(), 2u);
    EXPECT_GE(ar[1].first, ar[0].second);  // one at a time
    EXPECT_DOUBLE_EQ(ar[0].second - ar[0].first, 3);
  }
  // Without overlap the step ends two reductions (2 x 3) after the later program.
  EXPECT_DOUBLE_EQ(after->makespan,
                   std::max(after->ranks[0].last_end, after->ranks[1].last_end) + 6);
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// The lowered schedule `name` (one chunk) with uniform costs f = i = w = 1, free messages and an
// optimizer time of `optimizer` per stage.
struct SteadyCase {
  Schedule low;
  CostModel costs;
};
SteadyCase steady_case(const std::string& name, int32_t p, int32_t m, double optimizer,
                       double comm = 0) {
  auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = 1});
  TP_CHECK(s.ok(), s.status().to_string());
  auto low = lower(*s);
  TP_CHECK(low.ok(), low.status().to_string());
  UniformCosts u;
  u.comm = comm;
  const CostModel base = uniform_cost_model(u, p, p);
  std::vector<StageCost> st;
  for (int32_t k = 0; k < p; ++k) {
    st.push_back(base.stage(k));
    st.back().optimizer = optimizer;
  }
  return {*low, CostModel(st, base.link(), base.time_unit(), "steady test", base.real_bytes())};
}

TEST(SteadyState, SynchronousStepIsTheMakespan) {
  const SteadyCase c = steady_case("zb-h2", 4, 8, 0.5);
  auto r = simulate(c.low, c.costs);
  ASSERT_TRUE(r.ok());
  auto ss = steady_state_step_time(c.low, c.costs);
  ASSERT_TRUE(ss.ok()) << ss.status().to_string();
  EXPECT_DOUBLE_EQ(ss->step_time, r->makespan);
  EXPECT_EQ(ss->iterations, 1);
}

TEST(SteadyState, PostValidatedZbH2HasNoBubble) {
  // ZB-H2 at F = I = W with free messages: each stage's span is 3m without a gap (REFERENCE.md
  // section 4), so with each rank stepping on its own, iterations follow each other at 3m plus
  // the optimizer; synchronous, every step pays the warm-up and cool-down again.
  const int32_t p = 4, m = 8;
  const double opt = 0.5;
  const SteadyCase c = steady_case("zb-h2", p, m, opt);
  SimOptions o;
  o.optimizer_post_validation = true;
  auto ss = steady_state_step_time(c.low, c.costs, o);
  ASSERT_TRUE(ss.ok()) << ss.status().to_string();
  EXPECT_TRUE(ss->converged);
  EXPECT_NEAR(ss->step_time, 3.0 * m + opt, 1e-9);
  auto sync = steady_state_step_time(c.low, c.costs);
  ASSERT_TRUE(sync.ok());
  EXPECT_GT(sync->step_time, ss->step_time + 1);
}

TEST(SteadyState, PostValidationCannotHelpWhereTheBubbleIsInsideTheRank) {
  // 1F1B's and ZB-H1's rank 0 idles inside its own span (its warm-up F wait for the first
  // gradient to come back): stepping early moves its next start, not the idle. The period is
  // never below the busiest rank's work plus its optimizer, nor above the synchronous step.
  for (const char* name : {"1f1b", "zb-h1", "zb-h2"}) {
    SCOPED_TRACE(name);
    const SteadyCase c = steady_case(name, 4, 8, 0.25, /*comm=*/0.1);
    SimOptions o;
    o.optimizer_post_validation = true;
    auto post = steady_state_step_time(c.low, c.costs, o);
    auto sync = steady_state_step_time(c.low, c.costs);
    ASSERT_TRUE(post.ok() && sync.ok());
    EXPECT_TRUE(post->converged);
    EXPECT_GE(post->step_time, 3.0 * 8 + 0.25 - 1e-9);
    EXPECT_LE(post->step_time, sync->step_time + 1e-9);
  }
}

TEST(SteadyState, PostValidatedOptimizerRunsAtEachRanksOwnEnd) {
  const SteadyCase c = steady_case("1f1b", 2, 2, 1.0);
  SimOptions o;
  o.optimizer_post_validation = true;
  auto r = simulate(c.low, c.costs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->optimizer_post_validation);
  // 1F1B, p = 2, m = 2, F = B = 2 (I + W): rank 1 ends at 9, rank 0 at 11; each then runs its
  // optimizer at once instead of rank 1 waiting for 11.
  ASSERT_EQ(r->ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(r->ranks[0].step_end, r->ranks[0].program_end + 1.0);
  EXPECT_DOUBLE_EQ(r->ranks[1].step_end, r->ranks[1].program_end + 1.0);
  EXPECT_LT(r->ranks[1].step_end, r->ranks[0].step_end);
}

TEST(SteadyState, RankStartMustBeOnePerRankAndFinite) {
  const SteadyCase c = steady_case("1f1b", 2, 2, 0);
  SimOptions o;
  o.rank_start = {0.0};
  auto r = simulate(c.low, c.costs, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("1 rank start times for 2 ranks"), std::string::npos);
  o.rank_start = {0.0, -1.0};
  r = simulate(c.low, c.costs, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 1 starts at -1"), std::string::npos);
}

// ----- shared cores (SimOptions::core_sharing) -----

// GPipe, p = 2, m = 2, F 1, B 2 (I = W = 1) on one core that also slows the ranks 1.5x when both
// compute: each of two at once runs at 1/3. By hand (GPipe's backwards in microbatch order):
// r0 F0 [0,1] alone; r0 F1 and r1 F0 both from 1, one unit at 1/3: [1,4]; r1 F1 [4,5] and B0
// [5,7] alone; r0 B0 and r1 B1 both from 7, two units at 1/3: [7,13]; r0 B1 [13,15] alone.
// Without sharing the step is 9.
TEST(SharedCores, GPipeByHand) {
  auto s = generate_schedule("gpipe", {.ranks = 2, .microbatches = 2});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  auto low = lower(*s);
  ASSERT_TRUE(low.ok());
  const CostModel c = uniform(2, 2);
  auto plain = simulate(*low, c);
  ASSERT_TRUE(plain.ok());
  EXPECT_DOUBLE_EQ(plain->makespan, 9);
  SimOptions o;
  o.core_sharing = {.cores = 1, .slowdown = 1.5};
  auto r = simulate(*low, c, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NEAR(r->makespan, 15, 1e-9);
  std::map<std::string, std::pair<double, double>> r0, r1;
  for (const TimelineEvent& e : r->timeline.ranks[0].events) r0[e.name] = {e.start, e.end};
  for (const TimelineEvent& e : r->timeline.ranks[1].events) r1[e.name] = {e.start, e.end};
  EXPECT_NEAR(r0.at("0F1").first, 1, 1e-9);
  EXPECT_NEAR(r0.at("0F1").second, 4, 1e-9);
  EXPECT_NEAR(r1.at("1F0").second, 4, 1e-9);
  EXPECT_NEAR(r1.at("1F1").second, 5, 1e-9);
  EXPECT_NEAR(r1.at("1B0").second, 7, 1e-9);
  EXPECT_NEAR(r1.at("1B1").first, 7, 1e-9);
  EXPECT_NEAR(r1.at("1B1").second, 13, 1e-9);
  EXPECT_NEAR(r0.at("0B0").second, 13, 1e-9);
  EXPECT_NEAR(r0.at("0B1").first, 13, 1e-9);
  // Busy time is the stretched compute: rank 0 1 + 3 + 6 + 2.
  EXPECT_NEAR(r->ranks[0].busy, 12, 1e-9);
  EXPECT_TRUE(cores_shared(r->core_sharing, 2));
}

// One core, no slowdown, free messages: the ranks' work runs one unit of time per unit of time
// whenever any rank can compute, and a schedule that cannot deadlock always has a rank that can,
// so the step is exactly the whole model's work, for every schedule.
TEST(SharedCores, OneCoreRunsTheWholeWorkBackToBack) {
  for (const auto& [name, p, m, v] :
       std::vector<std::tuple<std::string, int32_t, int32_t, int32_t>>{{"1f1b", 4, 8, 1},
                                                                       {"zb-h1", 4, 8, 1},
                                                                       {"zb-v", 2, 4, 2},
                                                                       {"interleaved", 2, 4, 2},
                                                                       {"dualpipev", 2, 4, 2}}) {
    SCOPED_TRACE(name);
    auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = v});
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto low = lower(*s);
    ASSERT_TRUE(low.ok());
    const CostModel c = uniform(p, s->num_stages, 1.0, 0.75, 0.5);
    auto full = simulate(*low, c);
    ASSERT_TRUE(full.ok());
    SimOptions o;
    o.core_sharing.cores = 1;
    auto r = simulate(*low, c, o);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_NEAR(r->makespan, full->total_compute, 1e-9 * full->total_compute);
    // A rank's busy time is its work stretched by the others': never less than alone.
    for (int32_t k = 0; k < p; ++k) EXPECT_GE(r->ranks[k].busy, full->ranks[k].busy - 1e-9);
  }
}

// Sharing that changes nothing is off: cores at least the ranks and no slowdown give the same
// timeline as no sharing; a slowdown changes nothing where the ranks never compute at once
// (m = 1: the microbatch passes the ranks one after another).
TEST(SharedCores, OffWhereNoTwoRanksCompeteForACore) {
  auto s = generate_schedule("1f1b", {.ranks = 3, .microbatches = 1});
  ASSERT_TRUE(s.ok());
  auto low = lower(*s);
  ASSERT_TRUE(low.ok());
  const CostModel c = uniform(3, 3);
  auto plain = simulate(*low, c);
  ASSERT_TRUE(plain.ok());
  SimOptions enough;
  enough.core_sharing.cores = 3;
  EXPECT_FALSE(cores_shared(enough.core_sharing, 3));
  auto same = simulate(*low, c, enough);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(same->makespan, plain->makespan);
  SimOptions slow;
  slow.core_sharing.slowdown = 3;
  auto one_at_a_time = simulate(*low, c, slow);
  ASSERT_TRUE(one_at_a_time.ok());
  EXPECT_NEAR(one_at_a_time->makespan, plain->makespan, 1e-12);
  for (int32_t r = 0; r < 3; ++r) {
    ASSERT_EQ(one_at_a_time->timeline.ranks[r].events.size(),
              plain->timeline.ranks[r].events.size());
  }
}

TEST(SharedCores, RateIsTheOneRule) {
  EXPECT_DOUBLE_EQ(shared_core_rate({.cores = 2, .slowdown = 1.2}, 1), 1.0);
  EXPECT_DOUBLE_EQ(shared_core_rate({.cores = 2, .slowdown = 1.2}, 2), 1 / 1.2);
  EXPECT_DOUBLE_EQ(shared_core_rate({.cores = 2, .slowdown = 1.0}, 4), 0.5);
  EXPECT_DOUBLE_EQ(shared_core_rate({.cores = 0, .slowdown = 2.0}, 8), 0.5);
}

TEST(SharedCores, BadValuesNameTheFlag) {
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2});
  ASSERT_TRUE(s.ok());
  const CostModel c = uniform(2, 2);
  SimOptions o;
  o.core_sharing.cores = -2;
  auto r = simulate(*s, c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--cores -2"), std::string::npos) << r.status().message();
  o.core_sharing = {.cores = 0, .slowdown = 0.9};
  r = simulate(*s, c, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--core-slowdown 0.9"), std::string::npos)
      << r.status().message();
  o.core_sharing.slowdown = std::numeric_limits<double>::quiet_NaN();
  EXPECT_FALSE(simulate(*s, c, o).ok());
}

}  // namespace
}  // namespace tightpipe
