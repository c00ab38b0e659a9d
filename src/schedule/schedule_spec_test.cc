// parse_schedule_specs: the one parser of `name[:v],...` lists (--compare, --what-if, benches).
#include <gtest/gtest.h>

#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

TEST(ScheduleSpecTest, NamesChunksAndAliases) {
  auto s = parse_schedule_specs("--compare", " gpipe,1f1b, interleaved:2 ,ZBH1,zb-h2,zb-v,,zbv:2");
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->size(), 7u);
  EXPECT_EQ((*s)[0].name, "gpipe");
  EXPECT_EQ((*s)[0].chunks, 0);
  EXPECT_EQ((*s)[2].name, "interleaved");
  EXPECT_EQ((*s)[2].chunks, 2);
  EXPECT_EQ((*s)[2].label(), "interleaved:2");
  EXPECT_EQ((*s)[3].name, "zb-h1");  // canonical name of an alias
  EXPECT_EQ((*s)[3].label(), "zb-h1");
  EXPECT_EQ((*s)[6].name, "zb-v");
  EXPECT_EQ((*s)[6].chunks, 2);
  auto one = parse_schedule_specs("--what-if", "looped-bfs:4,1f1b:1");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ((*one)[0].chunks, 4);
}

// Errors: InvalidArgument, one line naming the flag and the item, with a hint naming the
// generators.
void expect_error(std::string_view flag, std::string_view text,
                  std::initializer_list<const char*> parts) {
  auto s = parse_schedule_specs(flag, text);
  ASSERT_FALSE(s.ok()) << text;
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = s.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(m.starts_with(std::string(flag) + " ")) << m;
  EXPECT_NE(m.find("hint:"), std::string::npos) << m;
  for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << p << "\n" << m;
}

TEST(ScheduleSpecTest, BadItemsNameTheFlagTheItemAndTheGenerators) {
  expect_error("--compare", "1f1b,nope:2", {"'nope:2'", "unknown schedule 'nope'", "zb-v"});
  expect_error("--what-if", "interleaved:x", {"'interleaved:x'", "[1, 64]", "interleaved:2"});
  expect_error("--what-if", "interleaved:0", {"'interleaved:0'", "[1, 64]"});
  expect_error("--compare", "interleaved:65", {"'interleaved:65'"});
  expect_error("--compare", "zb-v:3", {"'zb-v:3'", "zb-v takes 2", "interleaved (any v)"});
  expect_error("--compare", "1f1b:2", {"'1f1b:2'", "1f1b takes 1", "looped-bfs"});
  expect_error("--compare", " , ", {"no schedule named", "gpipe"});
  expect_error("--compare", "", {"no schedule named"});
}

}  // namespace
}  // namespace tightpipe
