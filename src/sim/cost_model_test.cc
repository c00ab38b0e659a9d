#include "tightpipe/cost_model.h"

#include <gtest/gtest.h>

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
  expect_error(parse_uniform_costs("f=abc,i=1,w=1").status(), {"'f'", "'abc'", "not a number"});
  expect_error(parse_uniform_costs("f=1,i=1").status(), {"lacks w", "hint"});
  expect_error(parse_uniform_costs("f=1,i,w=1").status(), {"'i' is not key=value"});
  expect_error(parse_uniform_costs("").status(), {"empty"});
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
      {"stage":2,"f":1,"i":1,"w":1}]})", "c.json").status(), {"c.json", "lacks stage 1"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":1,"i":1,"w":1,"fwd":2}]})", "c.json")
                   .status(), {"c.json", "unknown key 'fwd'", "hint"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":-1,"i":1,"w":1}]})", "c.json")
                   .status(), {"c.json", "'f'", "-1"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":"x","i":1,"w":1}]})", "c.json")
                   .status(), {"c.json", "'f'", "\"x\"", "not a number"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":1,"w":1}]})", "c.json").status(),
               {"c.json", "lacks key 'i'"});
  expect_error(parse_cost_table(R"({"stage":[]})", "c.json").status(),
               {"c.json", "unknown top-level key 'stage'"});
  expect_error(parse_cost_table(R"({"stages":[{"stage":0,"f":1,"i":1,"w":1},{"stage":0,"f":1,"i":1,"w":1}]})",
                                "c.json").status(), {"appears twice"});
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

TEST(GptCostModel, ZeroBubbleFormulas) {
  auto g = parse_gpt_cost_config("layers=8,hidden=1024,heads=16,seq=512,mbs=2,flops=1e12,"
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
}

}  // namespace
}  // namespace tightpipe
