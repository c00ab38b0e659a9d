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

TEST(GridTest, PrintsRowsPerRank) {
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value();
  EXPECT_EQ(format_grid(s), "r0: 0F0 0F1 0B0 0B1\nr1: 1F0 1B0 1F1 1B1\n");
}

}  // namespace
}  // namespace tightpipe
