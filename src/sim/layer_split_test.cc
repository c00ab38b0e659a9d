// choose_layer_split against brute force; the analytic layer costs against gpt_cost_model.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

StageCost kind(double f, double i, double w) {
  StageCost c{f, i, w, i + w, f};
  return c;
}

// Uneven kinds: a cheap embedding, a head as costly as three blocks.
LayerCosts uneven_costs() {
  LayerCosts c;
  c.embedding = kind(0.5, 0.25, 0.25);
  c.block = kind(1, 1, 1);
  c.head = kind(3, 3, 2);
  c.link = LinkCost{0.05, 0};
  c.time_unit = "unit";
  c.source = "test";
  return c;
}

Schedule make(const char* name, int32_t p, int32_t m, int32_t v) {
  auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = v});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  auto l = lower(*s);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return *l;
}

double makespan_of(const LayerCosts& c, const Schedule& s, const std::vector<int32_t>& blocks) {
  std::vector<StageLayers> layout;
  for (size_t i = 0; i < blocks.size(); ++i)
    layout.push_back({i == 0, blocks[i], i + 1 == blocks.size()});
  auto r = simulate(s, cost_model_for_layout(c, layout, "brute"), {});
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->makespan : -1;
}

// Every valid split (middle stages >= 1 block) by nested counting, the test's own enumeration.
void all_splits(int32_t S, int32_t L, std::vector<int32_t>& cur,
                std::vector<std::vector<int32_t>>& out) {
  const int32_t s = static_cast<int32_t>(cur.size());
  if (s == S - 1) {
    if (S == 1 || L >= 0) {
      cur.push_back(L);
      out.push_back(cur);
      cur.pop_back();
    }
    return;
  }
  const int32_t lo = s == 0 ? 0 : 1;
  for (int32_t n = lo; n <= L; ++n) {
    cur.push_back(n);
    all_splits(S, L - n, cur, out);
    cur.pop_back();
  }
}

double brute_min(const LayerCosts& c, const Schedule& s, int32_t L, size_t* count) {
  std::vector<std::vector<int32_t>> splits;
  std::vector<int32_t> cur;
  all_splits(s.num_stages, L, cur, splits);
  *count = splits.size();
  double best = 1e300;
  for (const auto& b : splits) best = std::min(best, makespan_of(c, s, b));
  return best;
}

std::vector<int32_t> blocks_of(const LayerSplit& split) {
  std::vector<int32_t> b;
  for (const StageLayers& l : split.stages) b.push_back(l.blocks);
  return b;
}

void expect_well_formed(const LayerSplit& split, int32_t S, int32_t L) {
  ASSERT_EQ(static_cast<int32_t>(split.stages.size()), S);
  int32_t total = 0;
  for (int32_t s = 0; s < S; ++s) {
    EXPECT_EQ(split.stages[s].embedding, s == 0);
    EXPECT_EQ(split.stages[s].head, s == S - 1);
    if (s > 0 && s < S - 1) {
      EXPECT_GE(split.stages[s].blocks, 1);
    }
    total += split.stages[s].blocks;
  }
  EXPECT_EQ(total, L);
}

struct Case {
  const char* name;
  int32_t p, m, v;
};

TEST(LayerSplit, ExhaustiveEqualsBruteForceMinimum) {
  const LayerCosts c = uneven_costs();
  constexpr int32_t L = 8;
  for (const Case& k : {Case{"1f1b", 2, 4, 1}, Case{"zb-h1", 2, 4, 1}, Case{"zb-v", 2, 4, 2},
                        Case{"interleaved", 2, 4, 2}}) {
    SCOPED_TRACE(k.name);
    const Schedule s = make(k.name, k.p, k.m, k.v);
    size_t count = 0;
    const double oracle = brute_min(c, s, L, &count);
    auto split = choose_layer_split(c, s, L);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    expect_well_formed(*split, s.num_stages, L);
    EXPECT_TRUE(split->exhaustive);
    EXPECT_EQ(split->simulated, static_cast<int64_t>(count));  // C(L+1, S-1)
    EXPECT_DOUBLE_EQ(split->makespan, oracle);
    EXPECT_DOUBLE_EQ(makespan_of(c, s, blocks_of(*split)), oracle);
    // The head costs three blocks: the even split is not the best.
    const std::vector<int32_t> even(s.num_stages, L / s.num_stages);
    EXPECT_LT(split->makespan, makespan_of(c, s, even));
  }
}

TEST(LayerSplit, LocalSearchNeverWorseThanEvenAndNearTheMinimum) {
  const LayerCosts c = uneven_costs();
  constexpr int32_t L = 8;
  const Schedule s = make("zb-v", 2, 4, 2);
  size_t count = 0;
  const double oracle = brute_min(c, s, L, &count);
  LayerSplitOptions o;
  o.max_exhaustive = 1;  // forces the DP start and the single-block moves
  auto split = choose_layer_split(c, s, L, o);
  ASSERT_TRUE(split.ok()) << split.status().to_string();
  expect_well_formed(*split, 4, L);
  EXPECT_FALSE(split->exhaustive);
  EXPECT_LT(split->simulated, static_cast<int64_t>(count));
  EXPECT_GE(split->makespan, oracle - 1e-12);
  EXPECT_LE(split->makespan, makespan_of(c, s, {2, 2, 2, 2}));
  EXPECT_DOUBLE_EQ(makespan_of(c, s, blocks_of(*split)), split->makespan);
  // Same input, same output.
  auto again = choose_layer_split(c, s, L, o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(blocks_of(*again), blocks_of(*split));
}

TEST(LayerSplit, UniformBlocksAndFreeEndsSplitEvenly) {
  LayerCosts c;
  c.embedding = kind(0, 0, 0);
  c.block = kind(1, 1, 1);
  c.head = kind(0, 0, 0);
  for (const Case& k : {Case{"1f1b", 4, 8, 1}, Case{"zb-v", 2, 4, 2}, Case{"gpipe", 2, 4, 1}}) {
    SCOPED_TRACE(k.name);
    const Schedule s = make(k.name, k.p, k.m, k.v);
    auto split = choose_layer_split(c, s, 8);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    EXPECT_EQ(blocks_of(*split), std::vector<int32_t>(s.num_stages, 8 / s.num_stages));
  }
}

TEST(LayerSplit, ComputeOnlyScheduleIsLowered) {
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 4, .chunks = 1});
  ASSERT_TRUE(s.ok());
  const LayerCosts c = uneven_costs();
  auto a = choose_layer_split(c, *s, 6);
  auto b = choose_layer_split(c, make("1f1b", 2, 4, 1), 6);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(blocks_of(*a), blocks_of(*b));
  EXPECT_DOUBLE_EQ(a->makespan, b->makespan);
}

TEST(LayerSplit, OneStageAndEmptyEnds) {
  const LayerCosts c = uneven_costs();
  auto one = choose_layer_split(c, make("1f1b", 1, 2, 1), 5);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(blocks_of(*one), std::vector<int32_t>{5});
  // 2 blocks over 4 stages: both middle stages need one, the ends hold only E and L.
  auto tight = choose_layer_split(c, make("1f1b", 4, 4, 1), 2);
  ASSERT_TRUE(tight.ok()) << tight.status().to_string();
  EXPECT_EQ(blocks_of(*tight), (std::vector<int32_t>{0, 1, 1, 0}));
}

TEST(LayerSplit, BadInput) {
  const LayerCosts c = uneven_costs();
  auto few = choose_layer_split(c, make("1f1b", 4, 4, 1), 1);
  ASSERT_FALSE(few.ok());
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  for (const char* part : {"1 transformer layer(s)", "2 middle stage(s)", "hint"})
    EXPECT_NE(few.status().message().find(part), std::string::npos) << few.status().message();
  EXPECT_FALSE(choose_layer_split(c, make("1f1b", 2, 4, 1), -1).ok());
  LayerSplitOptions o;
  o.max_exhaustive = 0;
  EXPECT_FALSE(choose_layer_split(c, make("1f1b", 2, 4, 1), 4, o).ok());
  EXPECT_FALSE(choose_layer_split(c, Schedule{}, 4).ok());
}

TEST(GptLayerCosts, SumsToGptCostModel) {
  auto g = parse_gpt_cost_config("layers=8,hidden=256,heads=8,seq=128,mbs=2,vocab=5000");
  ASSERT_TRUE(g.ok());
  const std::vector<StageLayers> even = even_layer_split(8, 3);
  ASSERT_EQ(even.size(), 3u);
  EXPECT_EQ(even[0].blocks, 3);
  EXPECT_EQ(even[1].blocks, 3);
  EXPECT_EQ(even[2].blocks, 2);
  EXPECT_TRUE(even[0].embedding && !even[0].head && even[2].head && !even[2].embedding);
  auto m = gpt_cost_model(*g, 3, 3);
  ASSERT_TRUE(m.ok());
  const LayerCosts k = gpt_layer_costs(*g);
  const double sbh = 128.0 * 2 * 256;
  EXPECT_DOUBLE_EQ(k.head.f, 2 * sbh * 5000 / g->flops);
  EXPECT_DOUBLE_EQ(k.embedding.f, 0);
  EXPECT_DOUBLE_EQ(k.embedding.param_bytes, 2 * (5000.0 * 256 + 128 * 256));
  EXPECT_DOUBLE_EQ(m->stage(0).f, 3 * k.block.f);
  EXPECT_DOUBLE_EQ(m->stage(2).f, 2 * k.block.f + k.head.f);
  EXPECT_DOUBLE_EQ(m->stage(2).param_bytes, 2 * k.block.param_bytes + k.head.param_bytes);
  EXPECT_DOUBLE_EQ(m->stage(1).input_bytes, 2 * sbh);  // the stage input, per stage
  // Any other split: the source names it.
  const CostModel other = gpt_cost_model_for_layout(
      *g, {{true, 4, false}, {false, 1, false}, {false, 3, true}}, "E,t*4|t|t*3,L");
  EXPECT_DOUBLE_EQ(other.stage(1).f, k.block.f);
  EXPECT_NE(other.source().find("E,t*4|t|t*3,L"), std::string::npos);
  EXPECT_EQ(m->source().find("layout"), std::string::npos);
}

}  // namespace
}  // namespace tightpipe
