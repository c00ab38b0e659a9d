#include "tightpipe/cost_model.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

TEST(UniformCosts, ParsesAndDefaultsB) {
  auto u = parse_uniform_costs("f=1,i=2,w=0.5,comm=0.1");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  CostModel m = uniform_cost_model(*u, 4, 8);
  EXPECT_EQ(m.num_stages(), 8);
  EXPECT_DOUBLE_EQ(m.compute_time(3, ActionType::kForward), 0.5);
  EXPECT_DOUBLE_EQ(m.compute_time(3, ActionType::kBackwardInput), 1.0);
  EXPECT_DOUBLE_EQ(m.compute_time(3, ActionType::kBackward), 1.25);  // (i + w) / v
  EXPECT_DOUBLE_EQ(m.compute_time(3, ActionType::kBackward, Recompute::kFull), 1.75);
  EXPECT_DOUBLE_EQ(m.message_time(3, 4), 0.1);  // not divided by v
  EXPECT_DOUBLE_EQ(m.activation_unit_bytes(4), 1.0);
  auto b = parse_uniform_costs(" f=1, i=1, w=1, b=1.5 ");
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(uniform_cost_model(*b, 2, 2).compute_time(0, ActionType::kBackward), 1.5);
}

void expect_error(const Status& s, std::initializer_list<const char*> parts) {
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
  for (const char* p : parts) EXPECT_NE(s.message().find(p), std::string::npos) << s.message();
}

TEST(UniformCosts, BadInputNamesKeyAndValue) {
  expect_error(parse_uniform_costs("f=1,i=1,w=1,x=3").status(), {"unknown key 'x'", "'3'", "hint"});
  expect_error(parse_uniform_costs("f=1,i=-1,w=1").status(), {"'i'", "negative", "-1", "hint"});
  expect_error(parse_uniform_costs("f=abc,i=1,w=1").status(),
               {"'f'", "'abc'", "expected a number"});
  expect_error(parse_uniform_costs("f=1,i=1").status(), {"lacks w", "hint"});
  expect_error(parse_uniform_costs("f=1,i,w=1").status(), {"'i' is not key=value"});
  expect_error(parse_uniform_costs("").status(), {"empty"});
  // Issue 13: a key given twice said "lacks i"; 1e-320 said "not a number"; 1e308 ran to
  // "makespan inf, bubble -nan%".
  expect_error(parse_uniform_costs("f=1,f=2").status(), {"'f' given twice", "'f=2'", "hint"});
  expect_error(parse_uniform_costs("f=1e-320,i=1,w=1").status(),
               {"--cost: key 'f'", "'1e-320'", "too small", "hint"});
  expect_error(parse_uniform_costs("f=1e308,i=1,w=1").status(),
               {"--cost: key 'f'", "1e+308", "over the limit", "hint"});
  expect_error(parse_uniform_costs("f=1,i=1,w=1,bytes=1e300").status(),
               {"'bytes'", "over the limit"});
  expect_error(parse_uniform_costs("f=inf,i=1,w=1").status(), {"'f'", "'inf'"});
  expect_error(parse_uniform_costs(std::string("f=1,i=1,w=1,\x01=2")).status(), {"'\\x01'"});
  EXPECT_TRUE(parse_uniform_costs("f=1e15,i=1,w=1").ok());
}

TEST(CostModelValidate, EveryValueFiniteAndWithinTheLimit) {
  EXPECT_TRUE(uniform_cost_model({}, 2, 4).validate().ok());
  std::vector<StageCost> stages(2);
  stages[1].w = kMaxCostValue * 2;
  expect_error(CostModel(stages, {}, "ms", "t.json").validate(), {"t.json", "stage 1 w", "hint"});
  stages[1].w = 1;
  stages[0].message_bytes = 1000;
  // latency + bytes / bandwidth overflows: a tiny bandwidth is not a finite message time.
  expect_error(CostModel(stages, {.latency = 0, .bandwidth = 1e-300}, "ms", "t.json").validate(),
               {"message time from stage 0 to 1"});
  // simulate() refuses such a model instead of printing inf / nan.
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2});
  ASSERT_TRUE(s.ok());
  auto low = lower(*s);
  ASSERT_TRUE(low.ok());
  stages[1].f = std::numeric_limits<double>::infinity();
  expect_error(simulate(*low, CostModel(stages, {}, "ms", "t.json")).status(), {"stage 1 f"});
}

constexpr const char* kTable = R"({
  "time_unit": "ms",
  "link": {"latency": 0.1, "bandwidth": 1000},
  "stages": [
    {"stage": 1, "f": 2, "i": 2, "w": 1, "act_bytes": 100, "message_bytes": 500},
    {"stage": 0, "f": 1, "i": 1, "w": 1, "b": 1.5, "act_bytes": 50, "act_after_i_bytes": 20,
     "param_bytes": 10, "message_bytes": 400}
  ]})";

TEST(CostTable, Parses) {
  auto m = parse_cost_table(kTable, "costs.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->num_stages(), 2);
  EXPECT_EQ(m->time_unit(), "ms");
  EXPECT_DOUBLE_EQ(m->compute_time(1, ActionType::kBackward), 3);  // default i + w
  EXPECT_DOUBLE_EQ(m->compute_time(0, ActionType::kBackward), 1.5);
  EXPECT_DOUBLE_EQ(m->stage(1).act_after_i_bytes, 100);  // defaults to act_bytes
  EXPECT_EQ(m->message_bytes(0, 1), 400);
  EXPECT_EQ(m->message_bytes(1, 0), 400);
  EXPECT_DOUBLE_EQ(m->message_time(0, 1), 0.1 + 0.4);
  EXPECT_DOUBLE_EQ(m->activation_unit_bytes(1), 150);
  auto again = parse_cost_table(cost_table_to_json(*m), "round-trip");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_DOUBLE_EQ(again->stage(0).b, 1.5);
}

TEST(CostTable, BadInputNamesFileKeyAndValue) {
  expect_error(parse_cost_table("{\"stages\": [", "c.json").status(), {"c.json", "not valid JSON"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":1,"i":1,"w":1},
      {"stage":2,"f":1,"i":1,"w":1}]})",
                                "c.json")
                   .status(),
               {"c.json", "lacks stage 1"});
  expect_error(
      parse_cost_table(R"({"stages":[{"stage":0,"f":1,"i":1,"w":1,"fwd":2}]})", "c.json").status(),
      {"c.json", "unknown key 'fwd'", "hint"});
  expect_error(
      parse_cost_table(R"({"stages":[{"stage":0,"f":-1,"i":1,"w":1}]})", "c.json").status(),
      {"c.json", "'f'", "-1"});
  expect_error(
      parse_cost_table(R"({"stages":[{"stage":0,"f":"x","i":1,"w":1}]})", "c.json").status(),
      {"c.json", "'f'", "\"x\"", "not a number"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":1,"w":1}]})", "c.json").status(),
               {"c.json", "lacks key 'i'"});
  expect_error(parse_cost_table(R"({"stage":[]})", "c.json").status(),
               {"c.json", "unknown top-level key 'stage'"});
  expect_error(
      parse_cost_table(
          R"({"stages":[{"stage":0,"f":1,"i":1,"w":1},{"stage":0,"f":1,"i":1,"w":1}]})", "c.json")
          .status(),
      {"appears twice"});
  expect_error(
      parse_cost_table(R"({"stages":[{"stage":0,"f":1e308,"i":1,"w":1}]})", "c.json").status(),
      {"c.json", "'f'", "over the limit"});
  expect_error(parse_cost_table(
                   R"({"stages":[{"stage":0,"f":1,"i":1,"w":1,"message_bytes":1e300}]})", "c.json")
                   .status(),
               {"'message_bytes'", "over the limit"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":1,"i":1,"w":1,"x)" +
                                    std::string(5000, 'y') + R"(":1}]})",
                                "c.json")
                   .status(),
               {"bytes in all"});
  expect_error(parse_cost_table(
                   R"({"time_unit":"m\u0000s","stages":[{"stage":0,"f":1,"i":1,"w":1}]})", "c.json")
                   .status(),
               {"'time_unit'", "\\x00"});
}

// A number beyond double (1e999) is an error naming the file, not an uncaught exception (found
// by fuzz_cost).
TEST(CostTable, OverflowingNumberIsAnError) {
  auto r = parse_cost_table(R"({"stages": [{"f": 1e999, "b": 2}]})", "c.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("c.json"), std::string::npos) << r.status().message();
}

TEST(CostTable, CoversChecksStageCount) {
  auto m = parse_cost_table(kTable, "costs.json");
  ASSERT_TRUE(m.ok());
  Schedule s;
  s.name = "1f1b";
  s.num_ranks = 4;
  s.num_stages = 4;
  s.num_microbatches = 8;
  expect_error(m->covers(s), {"costs.json", "2 stage(s)", "'1f1b' has 4", "hint"});
  s.num_ranks = 2;
  s.num_stages = 2;
  EXPECT_TRUE(m->covers(s).ok());
}

// Stage and slot are whole numbers (1e300 was undefined behaviour, 0.5 read as 0).
TEST(CostSamples, FromJsonRefusesNonIntegerKeys) {
  EXPECT_TRUE(CostSamples::from_json(R"([["t",0,1,[0.5]]])").ok());
  for (const char* bad :
       {R"([["t",1e300,0,[1]]])", R"([["t",0.5,0,[1]]])", R"([["m",0,4294967296,[1]]])"}) {
    auto r = CostSamples::from_json(bad);
    EXPECT_FALSE(r.ok()) << bad;
  }
}

TEST(GptCostModel, ZeroBubbleFormulas) {
  auto g = parse_gpt_cost_config(
      "layers=8,hidden=1024,heads=16,seq=512,mbs=2,flops=1e12,"
      "latency=1e-5,bandwidth=1e10");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto m = gpt_cost_model(*g, 4, 4);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const double s = 512, b = 2, h = 1024, a = 16;
  const double sbh = s * b * h;
  EXPECT_DOUBLE_EQ(m->stage(1).f, 2 * sbh * (24 * h + 4 * s) / 1e12);
  EXPECT_DOUBLE_EQ(m->stage(1).i, 2 * sbh * (24 * h + 8 * s) / 1e12);
  EXPECT_DOUBLE_EQ(m->stage(1).w, 2 * sbh * (24 * h) / 1e12);
  EXPECT_DOUBLE_EQ(m->stage(1).act_bytes, 2 * s * b * (34 * h + 5 * a * s));
  EXPECT_DOUBLE_EQ(m->stage(1).act_after_i_bytes, 2 * 32 * sbh);
  EXPECT_EQ(m->message_bytes(1, 2), static_cast<int64_t>(2 * sbh));
  EXPECT_DOUBLE_EQ(m->message_time(1, 2), 1e-5 + 2 * sbh / 1e10);
  EXPECT_EQ(m->time_unit(), "s");
  EXPECT_GT(m->stage(0).param_bytes, 0);
  // Uneven split: 8 layers over 3 stages -> 3, 3, 2.
  auto m3 = gpt_cost_model(*g, 3, 3);
  ASSERT_TRUE(m3.ok());
  EXPECT_DOUBLE_EQ(m3->stage(0).f / m3->stage(2).f, 1.5);
}

TEST(GptCostModel, BadInput) {
  expect_error(parse_gpt_cost_config("layers=8,hidden=1024,heads=16").status(), {"'seq'"});
  expect_error(parse_gpt_cost_config("layers=8,hidden=1024,heads=16,seq=5,depth=3").status(),
               {"unknown key 'depth'"});
  expect_error(parse_gpt_cost_config("layers=8.5,hidden=1024,heads=16,seq=5").status(),
               {"'layers'", "8.5"});
  auto g = parse_gpt_cost_config("layers=2,hidden=64,heads=4,seq=16");
  ASSERT_TRUE(g.ok());
  expect_error(gpt_cost_model(*g, 4, 4).status(), {"2 layer(s)", "4 stages"});
  // Issue 13: sizes are bounded before any product is formed (no overflow, no huge layer split).
  expect_error(parse_gpt_cost_config("layers=100000000,hidden=64,heads=4,seq=16").status(),
               {"'layers'", "100000000", "limit of 1024", "hint"});
  expect_error(parse_gpt_cost_config("layers=8,hidden=1e12,heads=4,seq=16").status(),
               {"'hidden'", "limit"});
  expect_error(parse_gpt_cost_config("layers=8,layers=9,hidden=64,heads=4,seq=16").status(),
               {"'layers' given twice"});
  auto tiny_flops = parse_gpt_cost_config("layers=2,hidden=64,heads=4,seq=16,flops=1e-300");
  ASSERT_TRUE(tiny_flops.ok());
  expect_error(gpt_cost_model(*tiny_flops, 2, 2)->validate(), {"stage 0 f", "over the limit"});
}

// Issue 49: the step besides the pipeline (docs/cost_model.md "Table 4"). The optimizer's pass
// over a rank's parameters at the memory bandwidth, split over its chunks; an input that cannot
// be derived names what to give.
TEST(OptimizerStepCost, OptimizerFromParametersAndBandwidth) {
  EXPECT_DOUBLE_EQ(optimizer_step_time(1e9, 54, 2e12), 54e9 / 2e12);
  auto u = parse_uniform_costs("f=1,i=1,w=1,params=9e8,hbm=2.039e9");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  const CostModel m = uniform_cost_model(*u, 4, 8);  // v = 2
  EXPECT_DOUBLE_EQ(m.stage(3).optimizer, 9e8 * kMegatronFp16AdamStepBytes / 2.039e9 / 2);
  EXPECT_NE(m.source().find("params=9e+08"), std::string::npos) << m.source();
  EXPECT_DOUBLE_EQ(uniform_cost_model(*parse_uniform_costs("f=1,i=1,w=1"), 4, 4).stage(0).optimizer,
                   0);
  expect_error(parse_uniform_costs("f=1,i=1,w=1,params=9e8").status(),
               {"params=9e+08", "memory bandwidth", "hint: add hbm="});
  expect_error(parse_uniform_costs("f=1,i=1,w=1,hbm=2e9").status(),
               {"hbm=2e+09", "parameters per rank", "hint: add params="});
}

TEST(OptimizerStepCost, GptOptimizerAndTiedEmbedding) {
  auto g = parse_gpt_cost_config(
      "layers=4,hidden=64,heads=4,seq=16,vocab=1000,latency=0,bandwidth=1e6,hbm=1e9,tied=1");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  auto m = gpt_cost_model(*g, 2, 2);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const double h = 64, V = 1000, s = 16;
  const double layer = 12 * h * h + 13 * h;
  const double tied = V * h * 2 / 1e6;  // 2 ranks: each sends and receives half, twice
  EXPECT_DOUBLE_EQ(m->stage(0).optimizer, (2 * layer + V * h + s * h) * 54 / 1e9 + tied);
  EXPECT_DOUBLE_EQ(m->stage(1).optimizer, (2 * layer + V * h) * 54 / 1e9 + tied);
  // One stage holds both ends: one copy to step, nothing to all-reduce.
  auto one = gpt_cost_model(*g, 1, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_NEAR(one->stage(0).optimizer, (4 * layer + V * h + s * h) * 54 / 1e9, 1e-12);
  // Without hbm= the optimizer is not timed (as before).
  auto plain = parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,vocab=1000");
  ASSERT_TRUE(plain.ok());
  EXPECT_DOUBLE_EQ(gpt_cost_model(*plain, 2, 2)->stage(0).optimizer, 0);
  expect_error(
      parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,opt_step_bytes=54").status(),
      {"opt_step_bytes=54", "memory bandwidth", "hint: add hbm="});
  expect_error(parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,tied=1").status(),
               {"tied=1", "vocabulary", "hint: add vocab="});
  expect_error(
      parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,vocab=100,bandwidth=0,tied=1")
          .status(),
      {"tied=1", "bandwidth=0", "hint:"});
  expect_error(parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,tied=2").status(),
               {"'tied'", "'2'", "hint:"});
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// Issue 14: LinkCost::overhead, the compute time of a message at each end, from every input.
TEST(MessageOverhead, EveryInputReadsItAndRefusesBadValues) {
  auto u = parse_uniform_costs("f=1,i=1,w=1,comm=0.5,overhead=0.25");
  ASSERT_TRUE(u.ok()) << u.status().to_string();
  EXPECT_DOUBLE_EQ(u->overhead, 0.25);
  const CostModel um = uniform_cost_model(*u, 2, 4);
  EXPECT_DOUBLE_EQ(um.link().overhead, 0.25);    // not divided by v, as comm
  EXPECT_DOUBLE_EQ(um.message_time(0, 1), 0.5);  // link time unchanged
  EXPECT_NE(um.source().find("overhead=0.25"), std::string::npos) << um.source();
  EXPECT_EQ(uniform_cost_model(UniformCosts{}, 2, 2).source().find("overhead"), std::string::npos);
  expect_error(parse_uniform_costs("f=1,i=1,w=1,overhead=-1").status(),
               {"--cost", "'overhead'", "negative", "-1", "hint"});
  expect_error(parse_uniform_costs("f=1,i=1,w=1,overhead=x").status(), {"'overhead'", "'x'"});
  expect_error(parse_uniform_costs("f=1,i=1,w=1,overhead=1e300").status(),
               {"'overhead'", "over the limit"});

  auto g = parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,overhead=2e-5");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_DOUBLE_EQ(g->message_overhead, 2e-5);
  auto gm = gpt_cost_model(*g, 2, 2);
  ASSERT_TRUE(gm.ok());
  EXPECT_DOUBLE_EQ(gm->link().overhead, 2e-5);
  EXPECT_DOUBLE_EQ(gpt_layer_costs(*g).link.overhead, 2e-5);
  EXPECT_DOUBLE_EQ(parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16")->message_overhead, 0);
  expect_error(parse_gpt_cost_config("layers=4,hidden=64,heads=4,seq=16,overhead=-3").status(),
               {"--model", "'overhead'", "negative", "hint"});

  auto t = parse_cost_table(
      R"({"link":{"latency":0.1,"overhead":0.125},"stages":[{"stage":0,"f":1,"i":1,"w":1}]})",
      "c.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_DOUBLE_EQ(t->link().overhead, 0.125);
  EXPECT_DOUBLE_EQ(t->link().latency, 0.1);
  const std::string json = cost_table_to_json(*t);
  EXPECT_NE(json.find("\"overhead\": 0.125"), std::string::npos) << json;
  auto again = parse_cost_table(json, "round-trip");
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_DOUBLE_EQ(again->link().overhead, 0.125);
  EXPECT_DOUBLE_EQ(again->link().latency, 0.1);
  expect_error(
      parse_cost_table(R"({"link":{"overhead":-0.5},"stages":[{"stage":0,"f":1,"i":1,"w":1}]})",
                       "c.json")
          .status(),
      {"c.json", "link key 'overhead'", "negative", "hint"});
  expect_error(
      parse_cost_table(R"({"link":{"overhead":"x"},"stages":[{"stage":0,"f":1,"i":1,"w":1}]})",
                       "c.json")
          .status(),
      {"c.json", "'overhead'", "not a number"});
  expect_error(parse_cost_table(
                   R"({"link":{"ovrhead":1},"stages":[{"stage":0,"f":1,"i":1,"w":1}]})", "c.json")
                   .status(),
               {"unknown key 'link.ovrhead'", "latency, bandwidth, overhead"});

  // A model built in code is checked as the others are.
  std::vector<StageCost> stages(2);
  expect_error(CostModel(stages, {.overhead = -1}, "ms", "t.json").validate(),
               {"t.json", "link overhead", "negative"});
  expect_error(
      CostModel(stages, {.overhead = std::numeric_limits<double>::quiet_NaN()}, "ms", "t.json")
          .validate(),
      {"t.json", "link overhead", "not a finite number"});
  EXPECT_TRUE(CostModel(stages, {.overhead = 1}, "ms", "t.json").validate().ok());
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// Stage costs built from known per-kind costs come back exactly, and re-split for another layout.
TEST(LayerCosts, FitRecoversKindsAndResplits) {
  const double e = 0.5, t = 3, h = 2;
  auto stage = [&](StageLayers l) {
    StageCost c;
    c.f = (l.embedding ? e : 0) + l.blocks * t + (l.head ? h : 0);
    c.i = 2 * c.f;
    c.w = c.f;
    c.b = 3 * c.f;
    c.act_bytes = 100 * l.blocks;
    c.message_bytes = 4096;
    return c;
  };
  const std::vector<StageLayers> run = {{true, 1, false}, {false, 2, false}, {false, 1, true}};
  std::vector<StageCost> sc;
  for (const auto& l : run) sc.push_back(stage(l));
  auto fit = fit_layer_costs(CostModel(sc, LinkCost{}, "s", "test"), run);
  ASSERT_TRUE(fit.ok()) << fit.status().to_string();
  EXPECT_NEAR(fit->embedding.f, e, 1e-9);
  EXPECT_NEAR(fit->block.f, t, 1e-9);
  EXPECT_NEAR(fit->head.f, h, 1e-9);
  EXPECT_NEAR(fit->block.i, 2 * t, 1e-9);
  EXPECT_NEAR(fit->block.act_bytes, 100, 1e-9);
  const std::vector<StageLayers> v = {
      {true, 1, false}, {false, 1, false}, {false, 1, false}, {false, 1, true}};
  const CostModel m = cost_model_for_layout(*fit, v, "E,t|t|t|t,L");
  ASSERT_EQ(m.num_stages(), 4);
  EXPECT_NEAR(m.stage(0).f, e + t, 1e-9);
  EXPECT_NEAR(m.stage(1).f, t, 1e-9);
  EXPECT_NEAR(m.stage(3).f, t + h, 1e-9);
  EXPECT_EQ(m.stage(2).message_bytes, 4096);
  EXPECT_NE(m.source().find("E,t|t|t|t,L"), std::string::npos);
}

// Two stages cannot separate three kinds: one end kind is taken as free (the embedding when that
// fits), never negative.
TEST(LayerCosts, UnderdeterminedTakesTheEmbeddingAsFree) {
  std::vector<StageCost> sc(2);
  sc[0].f = 12;  // E + 2t
  sc[1].f = 14;  // 2t + L
  auto fit =
      fit_layer_costs(CostModel(sc, LinkCost{}, "s", "test"), {{true, 2, false}, {false, 2, true}});
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->embedding.f, 0);
  EXPECT_NEAR(fit->block.f, 6, 1e-9);
  EXPECT_NEAR(fit->head.f, 2, 1e-9);
  for (const StageCost* c : {&fit->embedding, &fit->block, &fit->head}) EXPECT_GE(c->w, 0);
  EXPECT_FALSE(fit_layer_costs(CostModel(sc, LinkCost{}, "s", "t"), {{true, 2, false}}).ok());
  // The first stage measured slower (a small head, noise, the loader on its rank): the head is
  // free and the embedding carries the difference, so both stages are reproduced exactly (a
  // what-if of the run's own schedule and split is the run's prediction).
  sc[0].f = 14;
  sc[1].f = 12;
  fit =
      fit_layer_costs(CostModel(sc, LinkCost{}, "s", "test"), {{true, 2, false}, {false, 2, true}});
  ASSERT_TRUE(fit.ok());
  EXPECT_NEAR(fit->embedding.f, 2, 1e-9);
  EXPECT_NEAR(fit->block.f, 6, 1e-9);
  EXPECT_EQ(fit->head.f, 0);
}

// A step pays every action it ran: per step the mean, then the median over the steps. Two slow
// actions in every step count (the median action would leave them out); a step that stalled as a
// whole does not (as the measured median step leaves it out).
TEST(StepCost, PaysTheTailOfEveryStepButNotAStalledStep) {
  const std::vector<double> d = {1, 1, 3, /*step 1*/ 1, 1, 3, /*step 2*/ 1, 1, 300};
  const std::vector<int32_t> steps = {0, 0, 0, 1, 1, 1, 2, 2, 2};
  EXPECT_DOUBLE_EQ(step_cost(d, steps), 5.0 / 3);
  EXPECT_DOUBLE_EQ(median(d), 1.0);  // the median action
  // Without step numbers (or with a count that does not match): one step, the mean.
  EXPECT_DOUBLE_EQ(step_cost(d, {}), 312.0 / 9);
  EXPECT_DOUBLE_EQ(step_cost({}, {}), 0.0);
}

// calibrate() takes step_cost() of measured timelines (the steps travel with the samples through
// their JSON, as between MPI ranks), and the median action for GPU-trace fits.
TEST(StepCost, CalibrateUsesItAndTheStepsSurviveJson) {
  const Schedule low =
      lower(generate_schedule("1f1b", {.ranks = 1, .microbatches = 2}).value()).value();
  CostSamples s;
  auto add = [&s](int step, EventKind kind, double seconds) {
    TimelineEvent e;
    e.kind = kind;
    e.stage = 0;
    e.step = step;
    e.end = seconds;
    s.add_event(e);
  };
  for (int step = 0; step < 3; ++step) {
    add(step, EventKind::kForward, 1);
    add(step, EventKind::kForward, 1);
    add(step, EventKind::kForward, step == 2 ? 300 : 4);
    add(step, EventKind::kBackward, 2);
    add(step, EventKind::kBackward, 2);
  }
  auto back = CostSamples::from_json(s.to_json());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->time_step, s.time_step);
  auto c = calibrate(*back, low);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->stage(0).f, 2.0);  // steps 0, 1: mean 2; step 2: 100.67; median 2
  EXPECT_DOUBLE_EQ(c->stage(0).b, 2.0);
  CalibrationOptions med;
  med.durations = DurationStatistic::kMedian;
  c = calibrate(*back, low, med);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->stage(0).f, 1.0);  // median of {1, 1, 4, 1, 1, 4, 1, 1, 300}
}

// The one field list: every additive field adds and scales; message_bytes takes the larger and
// is kept.
// simulate --host-time-us: the host time (seconds) in the costs' own unit; a unit that is not a
// time is refused naming the flag, the unit and the costs.
TEST(HostTime, InTheCostsUnit) {
  const RuntimeHostTime h{.f = 100e-6, .b = 200e-6, .f_module = 1e-6};
  for (auto [unit, per_second] :
       {std::pair{"s", 1.0}, std::pair{"ms", 1e3}, std::pair{"us", 1e6}, std::pair{"ns", 1e9}}) {
    auto in = host_time_in_unit(h, unit, "--host-time-us", "t.json");
    ASSERT_TRUE(in.ok()) << unit;
    EXPECT_DOUBLE_EQ(in->f, 100e-6 * per_second) << unit;
    EXPECT_DOUBLE_EQ(in->b, 200e-6 * per_second) << unit;
    EXPECT_DOUBLE_EQ(in->f_module, 1e-6 * per_second) << unit;
    EXPECT_EQ(in->i, 0.0);
  }
  auto bad = host_time_in_unit(h, "unit", "--host-time-us", "--cost f=1,i=1,w=1");
  ASSERT_FALSE(bad.ok());
  for (const char* part : {"--host-time-us", "'unit', not a time", "--cost f=1", "hint:"})
    EXPECT_NE(bad.status().message().find(part), std::string::npos) << bad.status().message();
}

TEST(StageCostFields, AddAndScaleCoverEveryField) {
  StageCost a{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
  StageCost b = a;
  b.message_bytes = 20;
  add_stage_cost(a, b);
  EXPECT_EQ(a.f, 2);
  EXPECT_EQ(a.optimizer, 12);
  EXPECT_EQ(a.optimizer_bytes, 24);
  EXPECT_EQ(a.allreduce_bytes, 28);
  EXPECT_EQ(a.message_bytes, 20);
  const StageCost h = scale_stage_cost(a, 0.5);
  EXPECT_EQ(h.f, 1);
  EXPECT_EQ(h.act_after_i_bytes, 8);
  EXPECT_EQ(h.allreduce_bytes, 14);
  EXPECT_EQ(h.message_bytes, 20);
}

}  // namespace
}  // namespace tightpipe
