// Hand-broken schedules are rejected with the grid and the offending cell marked.
#include <gtest/gtest.h>

#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

Schedule from_csv(const char* text) {
  // Build without validation so broken schedules can be constructed.
  Schedule s;
  s.name = "hand";
  std::string t = text;
  size_t start = 0;
  int32_t S = 0, M = 0;
  while (start < t.size()) {
    size_t end = t.find('\n', start);
    if (end == std::string::npos) end = t.size();
    s.programs.emplace_back();
    std::string line = t.substr(start, end - start);
    size_t c = 0;
    while (c < line.size()) {
      size_t e = line.find(' ', c);
      if (e == std::string::npos) e = line.size();
      if (e > c) {
        Action a = parse_action(line.substr(c, e - c)).value();
        S = std::max(S, a.stage + 1);
        M = std::max(M, a.microbatch + 1);
        s.programs.back().push_back(a);
      }
      c = e + 1;
    }
    start = end + 1;
  }
  s.num_ranks = static_cast<int32_t>(s.programs.size());
  s.num_stages = S;
  s.num_microbatches = M;
  s.stage_to_rank = place_stages(Placement::kLoop, s.num_ranks, S);
  s.lowered = s.has_comm_actions();
  return s;
}

TEST(ValidateTest, AcceptsGood) {
  EXPECT_TRUE(validate(from_csv("0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1")).ok());
}

TEST(ValidateTest, MissingForward) {
  Status st = validate(from_csv("0F0 0B0 0B1\n1F0 1B0 1F1 1B1"));
  ASSERT_FALSE(st.ok());
  // 0B1 before 0F1: the order rule fires first, and marks the cell.
  EXPECT_NE(st.message().find("0B1 comes before 0F1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[0B1]"), std::string::npos) << st.message();
  Status st2 = validate(from_csv("0F0 0B0\n1F0 1B0 1F1 1B1"));
  ASSERT_FALSE(st2.ok());
  EXPECT_NE(st2.message().find("0F1 is missing"), std::string::npos) << st2.message();
}

TEST(ValidateTest, WBeforeI) {
  Status st = validate(from_csv("0F0 0W0 0I0\n1F0 1I0 1W0"));
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("0W0 comes before 0I0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("r0: 0F0 [0W0] 0I0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("^ step 1"), std::string::npos) << st.message();
}

TEST(ValidateTest, DuplicateAndMixedBackward) {
  EXPECT_NE(validate(from_csv("0F0 0F0 0B0\n1F0 1B0")).message().find("appears twice"),
            std::string::npos);
  EXPECT_NE(validate(from_csv("0F0 0I0 0B0\n1F0 1B0")).message().find("both a fused B"),
            std::string::npos);
}

TEST(ValidateTest, CycleBetweenTwoRanksIsADeadlock) {
  // Rank 0 waits for 1B0 before it runs 0F1; rank 1 wants 0F1 before it runs 1F0: a cycle.
  Schedule s = from_csv("0F0 0B0 0F1 0B1\n1F1 1F0 1B0 1B1");
  Status st = validate(s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("deadlock"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0 step 1: 0B0 waits for 1I0"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("rank 1 step 0: 1F1 waits for 0F1"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("[0B0]"), std::string::npos) << st.message();
  // Lowering refuses it too, with the grid.
  auto low = lower(s);
  ASSERT_FALSE(low.ok());
  EXPECT_NE(low.status().message().find("deadlock"), std::string::npos);
}

TEST(ValidateTest, LoweredNeedsMatchingSendRecv) {
  auto good = lower(from_csv("0F0 0B0\n1F0 1B0")).value();
  EXPECT_TRUE(validate(good).ok());
  EXPECT_EQ(to_csv(good), "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n");
  Schedule no_recv = good;
  std::erase(no_recv.programs[1], Action{ActionType::kRecvAct, 1, 0});
  Status st = validate(no_recv);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("1RECV_F0 is missing"), std::string::npos) << st.message();
  Schedule wrong_rank = good;
  wrong_rank.programs[0].push_back({ActionType::kRecvAct, 1, 0});
  EXPECT_NE(validate(wrong_rank).message().find("runs on rank 0 but stage 1 lives on rank 1"),
            std::string::npos);
}

TEST(ValidateTest, WideGridShowsAWindowAroundTheMark) {
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 64}).value();
  std::swap(s.programs[1][100], s.programs[1][101]);  // 1B49 before 1F50 ... still fine? force W
  s.programs[1][100] = {ActionType::kBackward, 1, 63};
  Status st = validate(s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(steps "), std::string::npos) << st.message();
  EXPECT_LT(st.message().size(), 2000u);
}

}  // namespace
}  // namespace tightpipe
