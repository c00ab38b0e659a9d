// Engine profiles (simulator.h engine_profile, docs/cost_model.md "Engine profiles"): each
// profile's predicted timeline held against one derived by hand from what that engine waits for.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tightpipe/check.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

// 1F1B p = 2, m = 2 (rank 0: F0 F1 B0 B1; rank 1: F0 B0 F1 B1), F = 1, B = I + W = 2, every
// message 0.5, an optimizer of 1 per stage.
struct EngineCase {
  Schedule low;
  CostModel costs;
};
EngineCase one_f_one_b(const std::string& name = "1f1b", int32_t chunks = 1, int32_t m = 2) {
  auto s = generate_schedule(name, {.ranks = 2, .microbatches = m, .chunks = chunks});
  TP_CHECK(s.ok(), s.status().to_string());
  auto low = lower(*s);
  TP_CHECK(low.ok(), low.status().to_string());
  UniformCosts u;
  u.comm = 0.5;
  u.bytes = 100;
  const CostModel base = uniform_cost_model(u, 2, 2 * chunks);
  std::vector<StageCost> st;
  for (int32_t k = 0; k < base.num_stages(); ++k) {
    st.push_back(base.stage(k));
    st.back().optimizer = 1;
  }
  return {std::move(*low), CostModel(st, base.link(), base.time_unit(), "engine test", false)};
}

// Event name -> start on rank r's timeline (compute and comm lanes).
std::map<std::string, double> starts(const SimResult& r, int32_t rank) {
  std::map<std::string, double> out;
  for (const TimelineEvent& e : r.timeline.ranks[rank].events) out[e.name] = e.start;
  return out;
}

Result<SimResult> run_or_status(const EngineCase& c, Engine engine) {
  SimOptions o;
  o.engine = engine;
  return simulate(c.low, c.costs, o);
}

SimResult run(const EngineCase& c, Engine engine, CommMode mode = CommMode::kOverlap) {
  SimOptions o;
  o.engine = engine;
  o.comm_mode = mode;
  auto r = simulate(c.low, c.costs, o);
  TP_CHECK(r.ok(), r.status().to_string());
  return std::move(r).value();
}

// Megatron's 1F1B (forward_backward_pipelining_without_interleaving). Rank 0's calls: F0,
// send_forward {S F0}, F1, send_forward_recv_backward {S F1, R B0}, B0, recv_backward {R B1}, B1.
// Rank 1's: recv_forward {R F0}, F0, B0, send_backward_recv_forward {S B0, R F1}, F1, B1,
// send_backward {S B1}. By hand: r0 F0 [0,1]; {S F0} meets r1's posted {R F0}: crosses [1,1.5];
// r0 F1 [1.5,2.5], r1 F0 [1.5,2.5], B0 [2.5,4.5]; r0's {S F1, R B0} posted at 2.5 waits for r1's
// {S B0, R F1} at 4.5 (rendezvous): both cross [4.5,5]; r0 B0 [5,7], r1 F1 [5,6], B1 [6,8];
// r0's {R B1} posted at 7 meets {S B1} at 8: [8,8.5]; r0 B1 [8.5,10.5]; optimizers from the
// common end 10.5 to 11.5.
TEST(EngineProfile, MegatronWaitsEachCallAndSendsMeetTheirReceive) {
  const SimResult r = run(one_f_one_b(), Engine::kMegatron);
  EXPECT_EQ(r.engine, Engine::kMegatron);
  EXPECT_NE(r.engine_description.find("megatron"), std::string::npos);
  auto r0 = starts(r, 0), r1 = starts(r, 1);
  EXPECT_DOUBLE_EQ(r0["0F0"], 0);
  EXPECT_DOUBLE_EQ(r0["0SEND_F0"], 1);
  EXPECT_DOUBLE_EQ(r0["0F1"], 1.5);
  EXPECT_DOUBLE_EQ(r0["0SEND_F1"], 4.5);  // waited for rank 1 to post its receive
  EXPECT_DOUBLE_EQ(r0["0B0"], 5);
  EXPECT_DOUBLE_EQ(r0["0B1"], 8.5);
  EXPECT_DOUBLE_EQ(r1["1F0"], 1.5);
  EXPECT_DOUBLE_EQ(r1["1B0"], 2.5);
  EXPECT_DOUBLE_EQ(r1["1F1"], 5);
  EXPECT_DOUBLE_EQ(r1["1B1"], 6);
  EXPECT_DOUBLE_EQ(r.makespan, 11.5);
  for (const RankSimStats& st : r.ranks) EXPECT_DOUBLE_EQ(st.step_end, 11.5);
}

// torch.distributed.pipelining (and tightpipe's default): sends asynchronous, a receive waited
// just before its compute. By hand: r0 F0 [0,1], F1 [1,2]; r1 F0 [1.5,2.5], B0 [2.5,4.5]; its
// B0 gradient reaches r0 at 5: B0 [5,7]; r1 F1 [4.5,5.5] (its input arrived at 2.5), B1
// [5.5,7.5], gradient at 8: r0 B1 [8,10]; optimizers from 10 to 11 (synchronous).
TEST(EngineProfile, TorchSendsAsyncAndWaitsReceivesBeforeUse) {
  const EngineCase c = one_f_one_b();
  const SimResult r = run(c, Engine::kTorch);
  EXPECT_EQ(r.engine, Engine::kTorch);
  auto r0 = starts(r, 0), r1 = starts(r, 1);
  EXPECT_DOUBLE_EQ(r0["0F1"], 1);
  EXPECT_DOUBLE_EQ(r0["0B0"], 5);
  EXPECT_DOUBLE_EQ(r0["0B1"], 8);
  EXPECT_DOUBLE_EQ(r1["1F0"], 1.5);
  EXPECT_DOUBLE_EQ(r1["1F1"], 4.5);
  EXPECT_DOUBLE_EQ(r1["1B1"], 5.5);
  EXPECT_DOUBLE_EQ(r.makespan, 11);
  EXPECT_DOUBLE_EQ(r.ranks[1].step_end, 11);  // waits for rank 0 before its optimizer
  // tightpipe's executor with --overlap-p2p-communication is the same model.
  const SimResult t = run(c, Engine::kTightpipe);
  EXPECT_DOUBLE_EQ(t.makespan, r.makespan);
}

// The zero-bubble runtime: the same p2p as torch, and each rank's optimizer at its own end
// (post-validated): rank 1's last compute ends at 7.5 and its last send has left at 8, so it
// steps [8,9] while rank 0 is still computing; rank 0 steps [10,11].
TEST(EngineProfile, ZbStepsEachRankAtItsOwnEnd) {
  const EngineCase c = one_f_one_b();
  const SimResult r = run(c, Engine::kZb);
  EXPECT_TRUE(r.optimizer_post_validation);
  EXPECT_DOUBLE_EQ(r.ranks[0].step_end, 11);
  EXPECT_DOUBLE_EQ(r.ranks[1].step_end, 9);
  SimOptions o;
  o.engine = Engine::kZb;
  auto ss = steady_state_step_time(c.low, c.costs, o);
  ASSERT_TRUE(ss.ok()) << ss.status().to_string();
  EXPECT_LE(ss->step_time, r.makespan);
}

// megatron-overlap: one stage per rank runs as megatron (validate_args turns overlap off without
// virtual stages); interleaved runs with async p2p, receives waited before use (overlap).
TEST(EngineProfile, MegatronOverlapNeedsVirtualStages) {
  const EngineCase c = one_f_one_b();
  const SimResult plain = run(c, Engine::kMegatronOverlap);
  EXPECT_DOUBLE_EQ(plain.makespan, run(c, Engine::kMegatron).makespan);
  EXPECT_NE(plain.engine_description.find("overlap needs virtual stages"), std::string::npos);
  const EngineCase il = one_f_one_b("interleaved", 2, 4);
  EXPECT_DOUBLE_EQ(run(il, Engine::kMegatronOverlap).makespan,
                   run(il, Engine::kTightpipe, CommMode::kOverlap).makespan);
  // Batched calls hold the lanes: interleaved under megatron is slower than with overlap.
  EXPECT_GT(run(il, Engine::kMegatron).makespan, run(il, Engine::kMegatronOverlap).makespan);
}

// Megatron's interleaved calls (forward_backward_pipelining_with_interleaving): after each warm-up
// F one call with its send and the next F's receive; in the steady state F and B run back to back
// and one call follows with both sends and both receives.
TEST(EngineProfile, MegatronInterleavedCallsFollowItsSteps) {
  auto s = generate_schedule("interleaved", {.ranks = 2, .microbatches = 4, .chunks = 2});
  ASSERT_TRUE(s.ok());
  auto calls = megatron_p2p_calls(*s);
  ASSERT_TRUE(calls.ok()) << calls.status().to_string();
  // Every cross-rank message is posted once at each end, and the calls run without a deadlock.
  auto low = lower(*s);
  ASSERT_TRUE(low.ok());
  size_t comm = 0, want = 0;
  for (const auto& prog : calls->schedule.programs)
    for (const Action& a : prog) comm += is_comm(a.type);
  for (const auto& prog : low->programs)
    for (const Action& a : prog) want += is_comm(a.type);
  EXPECT_EQ(comm, want);
  for (int32_t r = 0; r < 2; ++r) {
    const auto& prog = calls->schedule.programs[r];
    for (size_t k = 0; k + 1 < prog.size(); ++k) {
      // A steady-state F followed by a B: no call between them.
      if (prog[k].type == ActionType::kForward && prog[k + 1].type == ActionType::kBackward) {
        EXPECT_EQ(calls->call[r][k], -1);
      }
    }
  }
  UniformCosts u;
  u.comm = 0.25;
  auto r = simulate(*low, uniform_cost_model(u, 2, 4), {.engine = Engine::kMegatron});
  ASSERT_TRUE(r.ok()) << r.status().to_string();
}

// Megatron's leading ranks receive the messages around the loop aligned with the sender
// (megatron-core 0.19.2 recv_tensor_from_previous_stage): rank 0 posts the receive of rank p-1's
// k-th forward output in its call after its own (k + p - 1)-th forward. With a group of 8 at
// p = 4 (what the harness saw rank 0 do on gloo: 4RECV_F0 posted with 0SEND_F3) that is four
// forwards before 4F0 needs it; a receive posted only before 4F0 would deadlock the rendezvous
// (rank 3's 3SEND_F0 waits for it while rank 0 still sends to rank 1, which waits on rank 2...).
TEST(EngineProfile, MegatronLeadingRankReceivesAlignedWithTheSender) {
  auto s = generate_schedule("interleaved",
                             {.ranks = 4, .microbatches = 8, .chunks = 2, .group_size = 8});
  ASSERT_TRUE(s.ok());
  auto calls = megatron_p2p_calls(*s);
  ASSERT_TRUE(calls.ok()) << calls.status().to_string();
  const auto& prog = calls->schedule.programs[0];
  auto at = [&](std::string_view name) {
    for (size_t k = 0; k < prog.size(); ++k)
      if (to_string(prog[k]) == name) return static_cast<int64_t>(k);
    return int64_t{-1};
  };
  ASSERT_GE(at("4RECV_F0"), 0);
  EXPECT_EQ(calls->call[0][at("4RECV_F0")], calls->call[0][at("0SEND_F3")]);
  EXPECT_EQ(calls->call[0][at("4RECV_F1")], calls->call[0][at("0SEND_F4")]);
  // The last rank receives rank 0's gradients the same way in backward.
  UniformCosts u;
  u.comm = 0.25;
  auto low = lower(*s);
  ASSERT_TRUE(low.ok());
  // Every group size Megatron accepts (p <= g <= m, a last group of 0 or >= p) simulates without
  // a deadlock, and with g = p the receive is the next forward's (unchanged from before).
  for (int32_t p : {2, 3, 4}) {
    for (int32_t m = p; m <= 4 * p; ++m) {
      for (int32_t g = p; g <= m; ++g) {
        if (m % g != 0 && m % g < p) continue;
        auto sg = generate_schedule("interleaved",
                                    {.ranks = p, .microbatches = m, .chunks = 2, .group_size = g});
        ASSERT_TRUE(sg.ok()) << p << " " << m << " " << g;
        auto lg = lower(*sg);
        ASSERT_TRUE(lg.ok());
        auto r = simulate(*lg, uniform_cost_model(u, p, 2 * p), {.engine = Engine::kMegatron});
        ASSERT_TRUE(r.ok()) << p << " " << m << " " << g << ": " << r.status().to_string();
      }
    }
  }
}

// An order whose messages around the loop do not line up with Megatron's aligned receives is
// refused in one line naming the counts. p = 3, v = 2, m = 3 (g = 3): the ending rank 2 runs
// 2F0 2F1 5F0 | 5F1 5B0 | 2F2 5B1 | 5F2 5B2 | 2B0 2B1 2B2 (valid, and its steady state is F-B
// pairs), but 2F2 is its 5th forward while rank 0's aligned receives reach only the ending
// rank's forwards 0..3 (mv - p): 2F2's activation would never be received (6 messages
// around the loop, 3 each way; 5 receives posted).
TEST(EngineProfile, MegatronRefusesAnOrderItsAlignedReceivesDoNotFit) {
  auto s = generate_schedule("interleaved", {.ranks = 3, .microbatches = 3, .chunks = 2});
  ASSERT_TRUE(s.ok());
  auto F = [](int32_t st, int32_t mb) { return Action{ActionType::kForward, st, mb}; };
  auto B = [](int32_t st, int32_t mb) { return Action{ActionType::kBackward, st, mb}; };
  Schedule bad = *s;
  bad.programs[2] = {F(2, 0), F(2, 1), F(5, 0), F(5, 1), B(5, 0), F(2, 2),
                     B(5, 1), F(5, 2), B(5, 2), B(2, 0), B(2, 1), B(2, 2)};
  ASSERT_TRUE(validate(bad).ok()) << validate(bad).to_string();
  auto calls = megatron_p2p_calls(bad);
  ASSERT_FALSE(calls.ok());
  EXPECT_NE(calls.status().message().find("sends 6 messages around the loop"), std::string::npos)
      << calls.status().message();
  EXPECT_NE(calls.status().message().find("aligned receives post 5"), std::string::npos);
  EXPECT_EQ(calls.status().message().find('\n'), std::string::npos);
}

// DeepSpeed's PipelineEngine (TrainSchedule, blocking dist.send / dist.recv, one per instruction).
// Rank 0: F0, {S F0}, F1, {R B0}, {S F1}, B0, {R B1}, B1 (a backward slot receives its gradient
// before it sends the previous forward's activation). Rank 1: {R F0}, F0, B0, {S B0}, {R F1},
// F1, B1, {S B1}. By hand: r0 F0 [0,1]; {S F0} meets r1's posted {R F0}: [1,1.5]; r0 F1 [1.5,2.5],
// r1 F0 [1.5,2.5], B0 [2.5,4.5]; r0's {R B0} posted at 2.5 meets {S B0} at 4.5: [4.5,5]; only
// then r0 posts {S F1} and r1 {R F1}: [5,5.5] (Megatron crosses both at once: 0.5 earlier);
// r0 B0 [5.5,7.5], r1 F1 [5.5,6.5], B1 [6.5,8.5]; {S B1} meets r0's {R B1}: [8.5,9]; r0 B1
// [9,11]; optimizers from 11 to 12.
TEST(EngineProfile, DeepSpeedReceivesTheGradientBeforeSendingTheActivation) {
  const SimResult r = run(one_f_one_b(), Engine::kDeepSpeed);
  EXPECT_EQ(r.engine, Engine::kDeepSpeed);
  auto r0 = starts(r, 0), r1 = starts(r, 1);
  EXPECT_DOUBLE_EQ(r0["0SEND_F0"], 1);
  EXPECT_DOUBLE_EQ(r0["0F1"], 1.5);
  EXPECT_DOUBLE_EQ(r0["0SEND_F1"], 5);
  EXPECT_DOUBLE_EQ(r0["0B0"], 5.5);
  EXPECT_DOUBLE_EQ(r0["0B1"], 9);
  EXPECT_DOUBLE_EQ(r1["1F1"], 5.5);
  EXPECT_DOUBLE_EQ(r1["1B1"], 6.5);
  EXPECT_DOUBLE_EQ(r.makespan, 12);
  EXPECT_DOUBLE_EQ(run(one_f_one_b(), Engine::kMegatron).makespan, 11.5);
  // TrainSchedule's slots, not the compute order, place the messages: with fewer microbatches
  // than stages a forward and the next backward sit in slots apart, and nothing deadlocks.
  for (int32_t p : {2, 3, 4}) {
    for (int32_t m : {1, 2, 5}) {
      auto s = generate_schedule("1f1b", {.ranks = p, .microbatches = m});
      ASSERT_TRUE(s.ok());
      auto calls = deepspeed_p2p_calls(*s);
      ASSERT_TRUE(calls.ok()) << p << " " << m << ": " << calls.status().to_string();
      UniformCosts u;
      u.comm = 0.5;
      EXPECT_TRUE(simulate(*s, uniform_cost_model(u, p, p), {.engine = Engine::kDeepSpeed}).ok())
          << p << " " << m;
    }
  }
  // What DeepSpeed does not run is refused, naming the schedule.
  auto il = run_or_status(one_f_one_b("interleaved", 2, 4), Engine::kDeepSpeed);
  ASSERT_FALSE(il.ok());
  EXPECT_NE(il.status().message().find("DeepSpeed's PipelineEngine does not run schedule "
                                       "'interleaved'"),
            std::string::npos);
}

TEST(EngineProfile, BadInputNamesTheKnownEnginesAndTheSchedule) {
  auto e = parse_engine("pipedream");
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(
                "known: tightpipe, megatron, megatron-overlap, torch, zb, deepspeed"),
            std::string::npos);
  for (Engine k : {Engine::kTightpipe, Engine::kMegatron, Engine::kMegatronOverlap, Engine::kTorch,
                   Engine::kZb, Engine::kDeepSpeed}) {
    auto back = parse_engine(engine_name(k));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, k);
  }
  auto zb = generate_schedule("zb-h1", {.ranks = 2, .microbatches = 4});
  ASSERT_TRUE(zb.ok());
  auto low = lower(*zb);
  ASSERT_TRUE(low.ok());
  auto r = simulate(*low, uniform_cost_model({}, 2, 2), {.engine = Engine::kMegatron});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("does not run schedule 'zb-h1'"), std::string::npos);
}

// Issue 45: dualpipe's two directions were simulated under engines that cannot run them: PyTorch
// has no form for them (schedule --format torch refuses them too), and a post-validated optimizer
// (--engine zb, or tightpipe's flag) cannot step before the directions' gradient copies are
// summed (train refuses that pair). Each is one line naming the engine or flag and the schedule;
// dualpipev (one direction) still runs under all three.
TEST(EngineProfile, TwoDirectionsAreRefusedWhereTheEngineCannotRunThem) {
  auto low_of = [](const char* name) {
    auto s = generate_schedule(name, {.ranks = 2, .microbatches = 4, .chunks = 2});
    TP_CHECK(s.ok(), s.status().to_string());
    auto low = lower(*s);
    TP_CHECK(low.ok(), low.status().to_string());
    return std::move(*low);
  };
  const Schedule dualpipe = low_of("dualpipe"), dualpipev = low_of("dualpipev");
  const CostModel costs = uniform_cost_model({}, 2, 4);
  const auto costs2 = expand_to_directions(uniform_cost_model({}, 2, 2), dualpipe);
  struct Refusal {
    SimOptions options;
    const char* says;
  };
  SimOptions pv;
  pv.optimizer_post_validation = true;
  for (const Refusal& c :
       {Refusal{{.engine = Engine::kTorch}, "--engine torch: schedule 'dualpipe'"},
        Refusal{{.engine = Engine::kZb}, "--engine zb"},
        Refusal{pv, "--optimizer-post-validation with schedule 'dualpipe'"}}) {
    auto r = simulate(dualpipe, costs2, c.options);
    ASSERT_FALSE(r.ok()) << c.says;
    const std::string m(r.status().message());
    EXPECT_NE(m.find(c.says), std::string::npos) << m;
    EXPECT_NE(m.find("hint:"), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    auto v = simulate(dualpipev, costs, c.options);
    EXPECT_TRUE(v.ok()) << c.says << ": " << v.status().to_string();
  }
}

}  // namespace
}  // namespace tightpipe
