#include <gtest/gtest.h>

#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

TEST(CsvTest, PyTorchLayoutWithIdleCellsAndInference) {
  // Empty cells are idle slots (PyTorch writes them for None).
  auto s = parse_csv("0F0,,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n", "mine.csv");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_ranks, 2);
  EXPECT_EQ(s->num_stages, 2);
  EXPECT_EQ(s->num_microbatches, 2);
  EXPECT_EQ(s->stage_to_rank, (std::vector<int32_t>{0, 1}));
  EXPECT_FALSE(s->lowered);
  // V placement is inferred from where the stages appear.
  auto v = generate_schedule("zb-v", {.ranks = 2, .microbatches = 3, .chunks = 2}).value();
  auto back = parse_csv(to_csv(v), "v.csv").value();
  EXPECT_EQ(back.stage_to_rank, (std::vector<int32_t>{0, 1, 1, 0}));
}

TEST(CsvTest, BadCellNamesFileLineAndColumn) {
  auto s = parse_csv("0F0,0B0\n1F0,1X0,1B0\n", "mine.csv");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("mine.csv:2:2: bad action '1X0'"), std::string::npos)
      << s.status().message();
}

TEST(CsvTest, RowsThatDisagreeOnAStage) {
  auto s = parse_csv("0F0,1F0,0B0\n1F0,1B0\n", "mine.csv");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("stage 1"), std::string::npos) << s.status().message();
  EXPECT_NE(s.status().message().find("mine.csv:2:1"), std::string::npos) << s.status().message();
}

TEST(CsvTest, EmptyAndInvalidSchedules) {
  EXPECT_NE(parse_csv("", "e.csv").status().message().find("empty"), std::string::npos);
  auto s = parse_csv("0F0,0W0,0I0\n1F0,1I0,1W0\n", "bad.csv");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("bad.csv"), std::string::npos);
  EXPECT_NE(s.status().message().find("[0W0]"), std::string::npos) << s.status().message();
}

TEST(JsonTest, BadJsonNamesFile) {
  EXPECT_NE(parse_json("{", "s.json").status().message().find("s.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(parse_json("{\"ranks\": 1}", "s.json").status().message().find("hint"),
            std::string::npos);
}

// A number beyond double (1e999) is an error naming the file, not an uncaught exception.
TEST(JsonTest, OverflowingNumberNamesFile) {
  auto r = parse_json(R"({"ranks": 1e999})", "s.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("s.json"), std::string::npos) << r.status().message();
}

TEST(GridTest, PrintsRowsPerRank) {
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value();
  EXPECT_EQ(format_grid(s), "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1\n");
}

// Inputs that crashed or allocated gigabytes (issue 13): each is refused in one line that names
// the file or flags, the value and the limit, before anything of that size is allocated.
TEST(LimitsTest, HugeCountsAreRefusedBeforeAllocating) {
  auto expect_refused = [](const Status& st, std::string_view want) {
    ASSERT_FALSE(st.ok()) << want;
    const std::string m(st.message());
    EXPECT_NE(m.find(want), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  };
  // CSV: a stage at INT32_MAX (signed overflow, SIGSEGV before), microbatch ids far out.
  expect_refused(parse_csv("0F0,0I0,0W0\n2147483647F0\n", "s.csv").status(), "s.csv:2:1");
  expect_refused(parse_csv("0F999999999\n", "m.csv").status(),
                 "microbatch 999999999 is over tightpipe's limit (microbatch ids 0..65535)");
  // The id and the limit are named (it said "microbatches=0"), the cell echoed printable.
  expect_refused(parse_csv("0F2147483647\n", "x.csv").status(), "microbatch 2147483647 is over");
  expect_refused(parse_csv(std::string("0F0,0\0F1\n", 9), "n.csv").status(), "'0\\x00F1'");
  expect_refused(parse_csv("0F0," + std::string(1 << 20, '7') + "\n", "b.csv").status(),
                 "bytes in all");
  expect_refused(parse_csv("0F0,0I0,0W0\n1F99999999\n", "t.csv").status(), "'1F99999999'");
  expect_refused(parse_csv("0F2147483648\n", "o.csv").status(), "'0F2147483648'");
  // JSON: counts that are not whole numbers, or over the limit (they were cut to 32 bits).
  const std::string ok =
      to_json(generate_schedule("zb-h1", {.ranks = 2, .microbatches = 2}).value());
  auto with = [&](std::string_view from, std::string_view to) {
    std::string t = ok;
    const size_t at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return t.replace(at, from.size(), to);
  };
  ASSERT_TRUE(parse_json(ok, "ok.json").ok());
  expect_refused(
      parse_json(with("\"microbatches\": 2", "\"microbatches\": 99999999999"), "a.json").status(),
      "99999999999");
  expect_refused(
      parse_json(with("\"microbatches\": 2", "\"microbatches\": 4294967298"), "b.json").status(),
      "4294967298");
  expect_refused(
      parse_json(with("\"microbatches\": 2", "\"microbatches\": 2.7"), "c.json").status(),
      "2.7, not a whole number");
  expect_refused(parse_json(with("\"ranks\": 2", "\"ranks\": 1000000000"), "d.json").status(),
                 "1000000000");
  // A name of control bytes or megabytes is kept printable and short (it is echoed in errors).
  auto named = parse_json(
      with("\"name\": \"zb-h1\"", "\"name\": \"a\\u0000" + std::string(5000, 'b') + "\""),
      "e.json");
  ASSERT_TRUE(named.ok()) << named.status().message();
  EXPECT_LT(named->name.size(), 200u);
  EXPECT_EQ(named->name.find('\0'), std::string::npos);
  // Generators: --microbatches 2e9, --vpp 1e8, --pp 1e5 x --microbatches 1e5.
  expect_refused(generate_schedule("gpipe", {.ranks = 2, .microbatches = 2000000000}).status(),
                 "microbatches 2000000000");
  expect_refused(
      generate_schedule("interleaved", {.ranks = 2, .microbatches = 2, .chunks = 100000000})
          .status(),
      "--vpp 100000000");
  expect_refused(generate_schedule("1f1b", {.ranks = 100000, .microbatches = 100000}).status(),
                 "pipeline ranks 100000");
  expect_refused(generate_schedule("1f1b", {.ranks = 1024, .microbatches = 65536}).status(),
                 "stages x microbatches");
  EXPECT_TRUE(
      check_schedule_shape("x", kMaxRanks, kMaxStages, kMaxStageMicrobatches / kMaxStages).ok());
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// OVERLAP_F_B pairs are one cell in every format and read back exactly (PyTorch writes the same
// token in its CSV). DualPipeV on one rank: stages 0 and 1, both on rank 0.
TEST(CsvTest, OverlapPairsRoundTrip) {
  const std::string text = "0F0,1F0,,0F1,1B0,(1F1;0B0)OVERLAP_F_B,1B1,0I1,0W1\n";
  auto s = parse_csv(text, "pair.csv");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->stage_to_rank, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(s->num_microbatches, 2);
  EXPECT_EQ(s->directions, 1);
  ASSERT_EQ(s->programs[0].size(), 8u);
  EXPECT_EQ(s->programs[0][4], parse_action("(1F1;0B0)OVERLAP_F_B").value());
  EXPECT_EQ(to_csv(*s), "0F0,1F0,0F1,1B0,(1F1;0B0)OVERLAP_F_B,1B1,0I1,0W1\n");
  auto js = parse_json(to_json(*s), "pair.json");
  ASSERT_TRUE(js.ok()) << js.status().to_string();
  EXPECT_EQ(js->programs, s->programs);
  EXPECT_NE(format_grid(*s).find("(1F1;0B0)OVERLAP_F_B"), std::string::npos);
  // A bad pair cell names the file, the line and the column.
  auto bad = parse_csv("0F0,(1F1;0I0)OVERLAP_F_B\n", "bad.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.csv:1:2: bad action '(1F1;0I0)OVERLAP_F_B'"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tightpipe
