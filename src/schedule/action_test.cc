#include <gtest/gtest.h>

#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

TEST(ActionTest, TextFormRoundTrips) {
  for (const char* t :
       {"2F0", "1I3", "0W3", "2B1", "1SEND_F3", "2RECV_B0", "13RECV_F127", "0SEND_B9"}) {
    auto a = parse_action(t);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    EXPECT_EQ(to_string(*a), t);
  }
  EXPECT_EQ(parse_action("1I3").value(), (Action{ActionType::kBackwardInput, 1, 3}));
  EXPECT_EQ(parse_action("2RECV_B0").value(), (Action{ActionType::kRecvGrad, 2, 0}));
}

TEST(ActionTest, BadTokensNameTheToken) {
  for (const char* t : {"", "F0", "2X0", "2F", "2Fx", "-1F0", "02F0", "2F01", "2SEND0", "2 F0"}) {
    auto a = parse_action(t);
    ASSERT_FALSE(a.ok()) << t;
    EXPECT_NE(a.status().message().find(std::string("'") + t + "'"), std::string::npos)
        << a.status().message();
    EXPECT_NE(a.status().message().find("hint"), std::string::npos);
  }
}

TEST(ActionTest, PlacementsLoopAndV) {
  EXPECT_EQ(place_stages(Placement::kLoop, 4, 8), (std::vector<int32_t>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(place_stages(Placement::kV, 4, 8), (std::vector<int32_t>{0, 1, 2, 3, 3, 2, 1, 0}));
}

TEST(DependenciesTest, ComputeAndLowered) {
  auto sch = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value();
  using AT = ActionType;
  EXPECT_TRUE(dependencies(sch, {AT::kForward, 0, 1}).empty());
  EXPECT_EQ(dependencies(sch, {AT::kForward, 1, 1}), (std::vector<Action>{{AT::kForward, 0, 1}}));
  EXPECT_EQ(dependencies(sch, {AT::kBackward, 0, 0}),
            (std::vector<Action>{{AT::kForward, 0, 0}, {AT::kBackwardInput, 1, 0}}));
  auto low = lower(sch).value();
  EXPECT_EQ(dependencies(low, {AT::kForward, 1, 1}), (std::vector<Action>{{AT::kRecvAct, 1, 1}}));
  EXPECT_EQ(dependencies(low, {AT::kRecvAct, 1, 1}), (std::vector<Action>{{AT::kSendAct, 0, 1}}));
  EXPECT_EQ(dependencies(low, {AT::kBackward, 0, 0}),
            (std::vector<Action>{{AT::kForward, 0, 0}, {AT::kRecvGrad, 0, 0}}));
  // A fused B satisfies an I requirement.
  CompletionSet done(sch);
  done.mark({AT::kBackward, 1, 0});
  EXPECT_TRUE(done.has({AT::kBackwardInput, 1, 0}));
  EXPECT_FALSE(done.has({AT::kBackwardInput, 1, 1}));
}

TEST(DependenciesTest, VPlacementHandsOffLocally) {
  auto sch = generate_schedule("zb-v", {.ranks = 2, .microbatches = 4, .chunks = 2}).value();
  auto low = lower(sch).value();
  // Stages 1 and 2 share rank 1: no SEND/RECV between them.
  for (const auto& prog : low.programs)
    for (const auto& a : prog) {
      if (a.type == ActionType::kSendAct) {
        EXPECT_NE(a.stage, 1) << to_string(a);
      }
      if (a.type == ActionType::kSendGrad) {
        EXPECT_NE(a.stage, 2) << to_string(a);
      }
    }
  EXPECT_EQ(dependencies(low, {ActionType::kForward, 2, 0}),
            (std::vector<Action>{{ActionType::kForward, 1, 0}}));
}

}  // namespace
}  // namespace tightpipe
