// Golden tests: the worked orderings of ../shared/REFERENCE.md (p=4, m=8), token for token, and a
// property sweep over every generator and every shape it accepts.
#include <gtest/gtest.h>

#include <sstream>

#include "sanitizer.h"
#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

// One rank's program as text; with `bare`, stages are dropped (the v = 1 notation "F0 B0").
std::string row(const Schedule& s, int r, bool bare) {
  std::vector<std::string> cells;
  for (const auto& a : s.programs[r]) {
    std::string t = to_string(a);
    if (bare) t = t.substr(std::to_string(a.stage).size());
    cells.push_back(t);
  }
  return join(cells, " ");
}

void expect_rows(const char* name, GeneratorOptions o, const std::vector<std::string>& want,
                 bool bare) {
  auto s = generate_schedule(name, o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->programs.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r)
    EXPECT_EQ(row(*s, r, bare), want[r]) << name << " rank " << r;
  EXPECT_TRUE(validate(*s).ok()) << validate(*s).to_string();
}

TEST(GoldenTest, OneFOneB) {
  expect_rows("1f1b", {.ranks = 4, .microbatches = 8},
              {"F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7",
               "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7",
               "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7",
               "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7"},
              true);
}

TEST(GoldenTest, GPipe) {
  std::vector<std::string> want(4, "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
  expect_rows("gpipe", {.ranks = 4, .microbatches = 8}, want, true);
}

TEST(GoldenTest, Interleaved) {
  expect_rows(
      "interleaved", {.ranks = 4, .microbatches = 8, .chunks = 2},
      {"0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 4F5 4B3 4F6 0B0 4F7 0B1 "
       "0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7",
       "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 5F4 1B0 5F5 1B1 5F6 1B2 "
       "5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7",
       "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 2F7 2B1 6F4 2B2 6F5 2B3 "
       "6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7",
       "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 3F6 3B2 3F7 3B3 7F4 7B4 "
       "7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7"},
      false);
}

TEST(GoldenTest, LoopedBfs) {
  auto s = generate_schedule("looped-bfs", {.ranks = 4, .microbatches = 3, .chunks = 2}).value();
  EXPECT_EQ(row(s, 1, false), "1F0 1F1 1F2 5F0 5F1 5F2 5B2 5B1 5B0 1B2 1B1 1B0");
}

TEST(GoldenTest, ZbH1) {
  expect_rows("zb-h1", {.ranks = 4, .microbatches = 8},
              {"F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7",
               "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7",
               "F0 F1 I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7",
               "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7"},
              true);
}

TEST(GoldenTest, ZbH2) {
  expect_rows("zb-h2", {.ranks = 4, .microbatches = 8},
              {"F0 F1 F2 F3 F4 F5 F6 I0 W0 F7 I1 W1 I2 W2 I3 W3 I4 W4 I5 W5 I6 W6 I7 W7",
               "F0 F1 F2 F3 F4 I0 F5 I1 F6 I2 W0 F7 I3 W1 I4 W2 I5 W3 I6 W4 I7 W5 W6 W7",
               "F0 F1 F2 I0 F3 I1 F4 I2 F5 I3 F6 I4 W0 F7 I5 W1 I6 W2 I7 W3 W4 W5 W6 W7",
               "F0 I0 F1 I1 F2 I2 F3 I3 F4 I4 F5 I5 F6 I6 W0 F7 I7 W1 W2 W3 W4 W5 W6 W7"},
              true);
}

TEST(GoldenTest, ZbV) {
  expect_rows(
      "zb-v", {.ranks = 4, .microbatches = 8, .chunks = 2},
      {"0F0 0F1 0F2 0F3 0F4 0F5 0F6 7F0 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 7I3 7W3 0F7 0I0 0W0 "
       "7F4 7I4 7W4 0I1 0W1 7F5 7I5 7W5 0I2 0W2 7F6 7I6 7W6 0I3 0W3 7F7 7I7 7W7 0I4 0W4 0I5 0W5 "
       "0I6 0W6 0I7 0W7",
       "1F0 1F1 1F2 1F3 1F4 6F0 1F5 6F1 6I0 6W0 6F2 6I1 6W1 6F3 6I2 6W2 1F6 1I0 1W0 6F4 6I3 6W3 "
       "1F7 1I1 1W1 6F5 6I4 6W4 1I2 1W2 6F6 6I5 6W5 1I3 1W3 6F7 6I6 6W6 1I4 6I7 1I5 1W4 1I6 1W5 "
       "1I7 1W6 6W7 1W7",
       "2F0 2F1 2F2 5F0 2F3 5F1 2F4 5F2 5I0 5W0 5F3 5I1 5W1 2F5 2I0 2W0 5F4 5I2 5W2 2F6 2I1 2W1 "
       "5F5 5I3 5W3 2F7 2I2 2W2 5F6 5I4 5W4 2I3 2W3 5F7 5I5 5W5 2I4 5I6 2I5 5I7 2I6 2W4 2I7 2W5 "
       "5W6 5W7 2W6 2W7",
       "3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 4I0 4W0 3F4 3I0 3W0 4F4 4I1 4W1 3F5 3I1 3W1 4F5 4I2 4W2 "
       "3F6 3I2 3W2 4F6 4I3 4W3 3F7 3I3 3W3 4F7 4I4 4W4 3I4 4I5 3I5 4I6 3I6 4I7 3I7 3W4 4W5 4W6 "
       "4W7 3W5 3W6 3W7"},
      false);
}

TEST(GeneratorTest, BadShapesNameTheFlag) {
  struct Case {
    const char* name;
    GeneratorOptions o;
    const char* flag;
  } cases[] = {
      {"interleaved", {.ranks = 4, .microbatches = 9, .chunks = 2}, "--microbatches 9"},
      {"interleaved",
       {.ranks = 4, .microbatches = 8, .chunks = 2, .group_size = 3},
       "--microbatch-group-size 3"},
      {"interleaved",
       {.ranks = 4, .microbatches = 10, .chunks = 2, .group_size = 8},
       "--microbatch-group-size 8"},
      {"zb-v", {.ranks = 4, .microbatches = 8, .chunks = 3}, "--vpp 3"},
      {"zb-h2", {.ranks = 4, .microbatches = 7}, "--microbatches 7"},
      {"1f1b", {.ranks = 4, .microbatches = 8, .chunks = 2}, "--vpp 2"},
      {"1f1b", {.ranks = 4, .microbatches = 0}, "--microbatches 0"},
      {"gpipe", {.ranks = 0, .microbatches = 4}, "--pp 0"},
      {"nope", {.ranks = 2, .microbatches = 4}, "'nope'"},
  };
  for (const auto& c : cases) {
    auto s = generate_schedule(c.name, c.o);
    ASSERT_FALSE(s.ok()) << c.name << " " << c.flag;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.flag), std::string::npos) << s.status().message();
    EXPECT_NE(s.status().message().find("hint"), std::string::npos) << s.status().message();
  }
}

// ZB-H2's warm-up needs m >= 2p; fewer is a usage error naming m, p and the bound.
TEST(GeneratorTest, ZbH2NeedsTwoPMicrobatches) {
  auto s = generate_schedule("zb-h2", {.ranks = 3, .microbatches = 5});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  for (const char* want : {"--microbatches 5", "--pp 3", "m >= 2p = 6", "hint"})
    EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().message();
  EXPECT_EQ(s.status().message().find('\n'), std::string::npos) << s.status().message();
  EXPECT_TRUE(generate_schedule("zb-h2", {.ranks = 3, .microbatches = 6}).ok());
  EXPECT_TRUE(generate_schedule("zb-h2", {.ranks = 1, .microbatches = 2}).ok());
}

TEST(GeneratorTest, AliasesResolve) {
  EXPECT_TRUE(generate_schedule("1F1B", {.ranks = 2, .microbatches = 2}).ok());
  EXPECT_TRUE(generate_schedule("ZBV", {.ranks = 2, .microbatches = 2, .chunks = 2}).ok());
  EXPECT_TRUE(generate_schedule("zb_h1", {.ranks = 2, .microbatches = 2}).ok());
}

// Every generator x p 1..8 x m 1..32 x v 1..4 it accepts (every third m under the sanitizers:
// sanitizer.h): valid, lowers, lowered is valid (dry run included), CSV and JSON round-trip
// exactly.
TEST(GeneratorTest, PropertySweep) {
  int accepted = 0;
  for (const auto& g : schedule_generators()) {
    for (int32_t p = 1; p <= 8; ++p) {
      for (int32_t m = 1; m <= 32; m += testutil::kSweepStride) {
        for (int32_t v = 1; v <= 4; ++v) {
          auto s = g.fn({.ranks = p, .microbatches = m, .chunks = v});
          const bool must_accept =
              (g.fixed_chunks == 0 || g.fixed_chunks == v) &&
              (g.name != "interleaved" || m % p == 0) && (g.name != "zb-h2" || m >= 2 * p) &&
              (g.name != "dualpipev" || m >= 2 * p) &&
              (g.name != "dualpipe" || (m >= 2 * p && p % 2 == 0 && m % 2 == 0));
          if (!s.ok()) {
            EXPECT_FALSE(must_accept) << g.name << " p=" << p << " m=" << m << " v=" << v << ": "
                                      << s.status().to_string();
            EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
            continue;
          }
          ++accepted;
          const std::string where = fmt::format("{} p={} m={} v={}", g.name, p, m, v);
          ASSERT_EQ(s->num_ranks, p) << where;
          ASSERT_EQ(s->num_microbatches, m) << where;
          ASSERT_TRUE(validate(*s).ok()) << where << "\n" << validate(*s).message();
          auto low = lower(*s);
          ASSERT_TRUE(low.ok()) << where << "\n" << low.status().message();
          ASSERT_TRUE(validate(*low).ok()) << where << "\n" << validate(*low).message();
          EXPECT_EQ(compute_only(*low).programs, s->programs) << where;
          for (const Schedule* x : {&*s, &*low}) {
            auto csv = parse_csv(to_csv(*x), "sweep.csv");
            ASSERT_TRUE(csv.ok()) << where << csv.status().message();
            EXPECT_EQ(csv->programs, x->programs) << where;
            EXPECT_EQ(csv->stage_to_rank, x->stage_to_rank) << where;
            EXPECT_EQ(csv->lowered, x->has_comm_actions()) << where;
            EXPECT_EQ(csv->directions, x->directions) << where;
            auto js = parse_json(to_json(*x), "sweep.json");
            ASSERT_TRUE(js.ok()) << where << js.status().message();
            EXPECT_EQ(js->programs, x->programs) << where;
            EXPECT_EQ(js->stage_to_rank, x->stage_to_rank) << where;
            EXPECT_EQ(js->num_microbatches, x->num_microbatches) << where;
            EXPECT_EQ(js->directions, x->directions) << where;
          }
        }
      }
    }
  }
  EXPECT_GT(accepted, 2850 / testutil::kSweepStride);  // 2892: zb-h2 takes only m >= 2p
}

}  // namespace
}  // namespace tightpipe
