// DualPipeV and DualPipe (issue 18): the OVERLAP_F_B pair's text form and rules, golden orderings
// written by hand from the 8-step rule (../shared/REFERENCE.md section 1), bad shapes, lowering
// and the two directions of DualPipe.
#include <gtest/gtest.h>

#include <algorithm>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

// One rank's program as text, pairs without their ")OVERLAP_F_B" suffix ("(0F7;7B3)").
std::string row(const Schedule& s, int r) {
  std::vector<std::string> cells;
  for (const auto& a : s.programs[r]) {
    std::string t = to_string(a);
    if (a.type == ActionType::kOverlapFB) t = t.substr(0, t.find(')') + 1);
    cells.push_back(t);
  }
  return join(cells, " ");
}

// The expected rows are written step by step, "|" between the 8 steps; the bars are dropped.
void expect_rows(const char* name, int p, int m, const std::vector<std::string>& want) {
  auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = 2});
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->programs.size(), want.size());
  for (size_t r = 0; r < want.size(); ++r) {
    std::vector<std::string> cells;
    for (const std::string& c : split(want[r], ' '))
      if (!c.empty() && c != "|") cells.push_back(c);
    EXPECT_EQ(row(*s, r), join(cells, " ")) << name << " p=" << p << " m=" << m << " rank " << r;
  }
  EXPECT_TRUE(validate(*s).ok()) << validate(*s).to_string();
}

// ----- the pair's text form ---------------------------------------------------------------------

TEST(OverlapFBTest, TextFormIsPyTorchsAndRoundTrips) {
  auto a = parse_action("(0F5;7B2)OVERLAP_F_B");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->type, ActionType::kOverlapFB);
  EXPECT_EQ(a->stage, 0);
  EXPECT_EQ(a->microbatch, 5);
  EXPECT_EQ(a->b_stage, 7);
  EXPECT_EQ(a->b_microbatch, 2);
  EXPECT_EQ(to_string(*a), "(0F5;7B2)OVERLAP_F_B");
  const SubActions subs = sub_actions(*a);
  ASSERT_EQ(subs.count, 2);
  EXPECT_EQ(subs.at[0], (Action{ActionType::kForward, 0, 5}));
  EXPECT_EQ(subs.at[1], (Action{ActionType::kBackward, 7, 2}));
  EXPECT_EQ(sub_actions(subs.at[0]).count, 1);
  EXPECT_TRUE(is_compute(ActionType::kOverlapFB));
}

TEST(OverlapFBTest, BadPairsNameTheTokenAndTheRule) {
  const std::pair<const char*, const char*> cases[] = {
      {"(0F5;7B2)", "does not end with ')OVERLAP_F_B'"},
      {"(0F5;7B2)OVERLAP_F_BX", "does not end with ')OVERLAP_F_B'"},
      {"(0F5 7B2)OVERLAP_F_B", "no ';'"},
      {"(7B2;0F5)OVERLAP_F_B", "are B and F, not an F and a B"},
      {"(0F5;7I2)OVERLAP_F_B", "are F and I, not an F and a B"},
      {"(0F5;7X2)OVERLAP_F_B", "bad action '7X2'"},
      {"(0F05;7B2)OVERLAP_F_B", "leading zero"},
      {"0OVERLAP_F_B1", "unknown type 'OVERLAP_F_B'"},
  };
  for (const auto& [token, why] : cases) {
    auto a = parse_action(token);
    ASSERT_FALSE(a.ok()) << token;
    EXPECT_NE(a.status().message().find(why), std::string::npos)
        << token << ": " << a.status().message();
    EXPECT_EQ(a.status().message().find('\n'), std::string::npos) << a.status().message();
  }
}

TEST(OverlapFBTest, CompletionOfAPairIsThatOfBothSubActions) {
  Schedule s = generate_schedule("dualpipev", {.ranks = 1, .microbatches = 2, .chunks = 2}).value();
  CompletionSet done(s);
  done.mark(parse_action("(1F1;0B0)OVERLAP_F_B").value());
  EXPECT_TRUE(done.has({ActionType::kForward, 1, 1}));
  EXPECT_TRUE(done.has({ActionType::kBackward, 0, 0}));
  EXPECT_TRUE(done.has({ActionType::kBackwardInput, 0, 0}));
  EXPECT_TRUE(done.has({ActionType::kBackwardWeight, 0, 0}));
  EXPECT_FALSE(done.has({ActionType::kForward, 0, 0}));
}

// ----- golden orderings -------------------------------------------------------------------------
//
// The rule per rank, with n ranks in the pipeline's half, h the rank's place, c microbatches per
// chunk (REFERENCE.md section 1; F0/F1 forward of chunk 0/1, B full backward, I input-gradient
// backward whose W is deferred to one queue shared by both chunks, W the oldest deferred W,
// (F;B) an OVERLAP_F_B pair):
//   1: F0 x 2(n-h-1)        2: F0 F1 x (h+1)            3: I1 W F1 x (n-h-1)
//   4: (F0;B1) (F1;B0) x (c-2n+h+1), the first (F0;B1) unpaired when h = n-1
//   5: B1 (F1;B0) x (n-h-1) 6: B1 B0 x (h+1), I instead of B from iteration (h+1)/2 on (for an
//                              even h from that iteration's B0 on)
//   7: W I0 x (n-h-1)       8: W x (h+1)
//
// DualPipeV p=4: n=4, h=r, c=m; chunk 0 = stage r, chunk 1 = stage 7-r. Repeats of steps 1..8,
// 2(3-h), h+1, 3-h, m-8+h+1, 3-h, h+1, 3-h, h+1 (step 4 for m=8 | m=10):
//   r0: 6 1 3 1|3 3 1 3 1     r1: 4 2 2 2|4 2 2 2 2
//   r2: 2 3 1 3|5 1 3 1 3     r3: 0 4 0 4|6 0 4 0 4   (r3 is the middle rank)
// Step 6 (h+1 iterations, the split from i = (h+1)/2 on): r0 (h=0, even): B1 then I0; r1 (h=1):
// i=0 B1 B0, i=1 I1 I0; r2 (h=2, even): B1 B0, B1 I0, I1 I0; r3 (h=3): B1 B0 twice, I1 I0 twice.
// The W queue is FIFO over both chunks: r1's step 7 starts with 6W7 (its I came first).
TEST(DualPipeGoldenTest, DualPipeVP4M8) {
  expect_rows(
      "dualpipev", 4, 8,
      {"0F0 0F1 0F2 0F3 0F4 0F5 | 0F6 7F0 | 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 | (0F7;7B3) "
       "(7F4;0B0) | 7B4 (7F5;0B1) 7B5 (7F6;0B2) 7B6 (7F7;0B3) | 7B7 0I4 | 0W4 0I5 0W5 0I6 0W6 "
       "0I7 | 0W7",
       "1F0 1F1 1F2 1F3 | 1F4 6F0 1F5 6F1 | 6I0 6W0 6F2 6I1 6W1 6F3 | (1F6;6B2) (6F4;1B0) "
       "(1F7;6B3) (6F5;1B1) | 6B4 (6F6;1B2) 6B5 (6F7;1B3) | 6B6 1B4 6I7 1I5 | 6W7 1I6 1W5 1I7 | "
       "1W6 1W7",
       "2F0 2F1 | 2F2 5F0 2F3 5F1 2F4 5F2 | 5I0 5W0 5F3 | (2F5;5B1) (5F4;2B0) (2F6;5B2) "
       "(5F5;2B1) (2F7;5B3) (5F6;2B2) | 5B4 (5F7;2B3) | 5B5 2B4 5B6 2I5 5I7 2I6 | 2W5 2I7 | "
       "5W7 2W6 2W7",
       // Middle rank: step 4's first F0 and B1 unpaired.
       "| 3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 | | 3F4 4B0 (4F4;3B0) (3F5;4B1) (4F5;3B1) (3F6;4B2) "
       "(4F6;3B2) (3F7;4B3) (4F7;3B3) | | 4B4 3B4 4B5 3B5 4I6 3I6 4I7 3I7 | | 4W6 3W6 4W7 3W7"});
}

TEST(DualPipeGoldenTest, DualPipeVP4M10) {
  // As m=8 with two more step-4 iterations on every rank (c-2n+h+1 = h+3).
  expect_rows(
      "dualpipev", 4, 10,
      {"0F0 0F1 0F2 0F3 0F4 0F5 | 0F6 7F0 | 7I0 7W0 7F1 7I1 7W1 7F2 7I2 7W2 7F3 | (0F7;7B3) "
       "(7F4;0B0) (0F8;7B4) (7F5;0B1) (0F9;7B5) (7F6;0B2) | 7B6 (7F7;0B3) 7B7 (7F8;0B4) 7B8 "
       "(7F9;0B5) | 7B9 0I6 | 0W6 0I7 0W7 0I8 0W8 0I9 | 0W9",
       "1F0 1F1 1F2 1F3 | 1F4 6F0 1F5 6F1 | 6I0 6W0 6F2 6I1 6W1 6F3 | (1F6;6B2) (6F4;1B0) "
       "(1F7;6B3) (6F5;1B1) (1F8;6B4) (6F6;1B2) (1F9;6B5) (6F7;1B3) | 6B6 (6F8;1B4) 6B7 "
       "(6F9;1B5) | 6B8 1B6 6I9 1I7 | 6W9 1I8 1W7 1I9 | 1W8 1W9",
       "2F0 2F1 | 2F2 5F0 2F3 5F1 2F4 5F2 | 5I0 5W0 5F3 | (2F5;5B1) (5F4;2B0) (2F6;5B2) "
       "(5F5;2B1) (2F7;5B3) (5F6;2B2) (2F8;5B4) (5F7;2B3) (2F9;5B5) (5F8;2B4) | 5B6 (5F9;2B5) | "
       "5B7 2B6 5B8 2I7 5I9 2I8 | 2W7 2I9 | 5W9 2W8 2W9",
       "| 3F0 4F0 3F1 4F1 3F2 4F2 3F3 4F3 | | 3F4 4B0 (4F4;3B0) (3F5;4B1) (4F5;3B1) (3F6;4B2) "
       "(4F6;3B2) (3F7;4B3) (4F7;3B3) (3F8;4B4) (4F8;3B4) (3F9;4B5) (4F9;3B5) | | 4B6 3B6 4B7 "
       "3B7 4I8 3I8 4I9 3I9 | | 4W8 3W8 4W9 3W9"});
}

// DualPipe p=4: n=2, h=min(r,3-r) (r0,r3: 0; r1,r2: 1 = the middle ranks), c=m/2. The forward
// pipeline is stage ids 0..3 on ranks 0..3 with microbatches 0..c-1; the reverse one is ids 4..7
// (id 4+k computes model stage k, on rank 3-k) with microbatches c..m-1. Chunk 0 is the direction
// in which the rank comes first: r0: 0 (mb 0..) then 7 (mb c..); r1: 1, 6; r2: 5, 2; r3: 4, 3.
//   steps 1..8: h=0: 2 1 1 c-3 1 1 1 1;  h=1: 0 2 0 c-2 0 2 0 2.
// m=8 (c=4): step 4 runs 1 (h=0) and 2 (h=1) times; m=10 (c=5): 2 and 3 times.
TEST(DualPipeGoldenTest, DualPipeP4M8) {
  expect_rows("dualpipe", 4, 8,
              {"0F0 0F1 | 0F2 7F4 | 7I4 7W4 7F5 | (0F3;7B5) (7F6;0B0) | 7B6 (7F7;0B1) | 7B7 0I2 "
               "| 0W2 0I3 | 0W3",
               "| 1F0 6F4 1F1 6F5 | | 1F2 6B4 (6F6;1B0) (1F3;6B5) (6F7;1B1) | | 6B6 1B2 6I7 1I3 "
               "| | 6W7 1W3",
               "| 5F4 2F0 5F5 2F1 | | 5F6 2B0 (2F2;5B4) (5F7;2B1) (2F3;5B5) | | 2B2 5B6 2I3 5I7 "
               "| | 2W3 5W7",
               "4F4 4F5 | 4F6 3F0 | 3I0 3W0 3F1 | (4F7;3B1) (3F2;4B4) | 3B2 (3F3;4B5) | 3B3 4I6 "
               "| 4W6 4I7 | 4W7"});
}

TEST(DualPipeGoldenTest, DualPipeP4M10) {
  expect_rows("dualpipe", 4, 10,
              {"0F0 0F1 | 0F2 7F5 | 7I5 7W5 7F6 | (0F3;7B6) (7F7;0B0) (0F4;7B7) (7F8;0B1) | 7B8 "
               "(7F9;0B2) | 7B9 0I3 | 0W3 0I4 | 0W4",
               "| 1F0 6F5 1F1 6F6 | | 1F2 6B5 (6F7;1B0) (1F3;6B6) (6F8;1B1) (1F4;6B7) (6F9;1B2) | "
               "| 6B8 1B3 6I9 1I4 | | 6W9 1W4",
               "| 5F5 2F0 5F6 2F1 | | 5F7 2B0 (2F2;5B5) (5F8;2B1) (2F3;5B6) (5F9;2B2) (2F4;5B7) | "
               "| 2B3 5B8 2I4 5I9 | | 2W4 5W9",
               "4F5 4F6 | 4F7 3F0 | 3I0 3W0 3F1 | (4F8;3B1) (3F2;4B5) (4F9;3B2) (3F3;4B6) | 3B3 "
               "(3F4;4B7) | 3B4 4I8 | 4W8 4I9 | 4W9"});
}

// ----- bad shapes -------------------------------------------------------------------------------

TEST(DualPipeShapeTest, BadInputIsOneLineNamingTheRequirementAndTheValue) {
  const struct {
    const char* name;
    GeneratorOptions o;
    const char* want;
  } cases[] = {
      {"dualpipe",
       {.ranks = 3, .microbatches = 12, .chunks = 2},
       "--pp 3: schedule 'dualpipe' needs an even number of pipeline ranks"},
      {"dualpipe",
       {.ranks = 4, .microbatches = 9, .chunks = 2},
       "--microbatches 9: schedule 'dualpipe' needs an even number of microbatches"},
      {"dualpipe",
       {.ranks = 4, .microbatches = 6, .chunks = 2},
       "--microbatches 6: schedule 'dualpipe' needs m >= 2p = 8 (p = 4)"},
      {"dualpipev",
       {.ranks = 4, .microbatches = 7, .chunks = 2},
       "--microbatches 7: schedule 'dualpipev' needs m >= 2p = 8 (p = 4)"},
      {"dualpipev",
       {.ranks = 4, .microbatches = 8, .chunks = 3},
       "--vpp 3: schedule 'dualpipev' runs exactly 2 chunks per rank"},
      {"dualpipev",
       {.ranks = 4, .microbatches = 8, .chunks = 1},
       "--vpp 1: schedule 'dualpipev' runs exactly 2 chunks per rank"},
  };
  for (const auto& c : cases) {
    auto s = generate_schedule(c.name, c.o);
    ASSERT_FALSE(s.ok()) << c.name;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos) << s.status().message();
  }
  // Without --vpp the registry's default (2) applies; aliases resolve.
  EXPECT_TRUE(
      schedule_from_name_or_file("dualpipev", {.ranks = 2, .microbatches = 4, .chunks = 0}).ok());
  EXPECT_TRUE(
      schedule_from_name_or_file("DualPipe", {.ranks = 2, .microbatches = 4, .chunks = 0}).ok());
  EXPECT_EQ(find_generator("ScheduleDualPipeV")->name, "dualpipev");
}

// ----- validation of pairs ----------------------------------------------------------------------

// A schedule from rows of tokens, unvalidated, with the given placement.
Schedule hand(const std::vector<std::string>& rows, int32_t stages, int32_t mbs, Placement pl) {
  Schedule s;
  s.name = "hand";
  s.num_ranks = static_cast<int32_t>(rows.size());
  s.num_stages = stages;
  s.num_microbatches = mbs;
  s.stage_to_rank = place_stages(pl, s.num_ranks, stages);
  for (const std::string& r : rows) {
    s.programs.emplace_back();
    for (const std::string& t : split(r, ' '))
      if (!t.empty()) s.programs.back().push_back(parse_action(t).value());
  }
  return s;
}

TEST(OverlapFBValidateTest, PairAcrossRanksIsAnErrorNamingIt) {
  const Schedule s =
      hand({"0F0 (0F1;1B0)OVERLAP_F_B 0B0 0B1", "1F0 1F1 1B1"}, 2, 2, Placement::kLoop);
  const Status st = validate(s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(0F1;1B0)OVERLAP_F_B pairs stage 0 (rank 0) with stage 1 (rank "
                              "1): the two sub-actions of a pair run on one rank"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("[(0F1;1B0)OVERLAP_F_B]"), std::string::npos) << st.message();
}

TEST(OverlapFBValidateTest, PairWhoseBackwardNeedsItsOwnForwardCanNeverStart) {
  // V placement, one rank: stages 0 and 1. 1B0 needs 1F0.
  const Schedule s = hand({"0F0 (1F0;1B0)OVERLAP_F_B 0B0"}, 2, 1, Placement::kV);
  const Status st = validate(s);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("(1F0;1B0)OVERLAP_F_B can never start: its backward needs its own "
                              "forward 1F0"),
            std::string::npos)
      << st.message();
}

TEST(OverlapFBValidateTest, PairWaitingOnItselfThroughAnotherRankIsADeadlockNamingIt) {
  // Loop placement, 2 ranks, 4 stages. 0B0's gradient comes from stage 1, whose backward needs
  // stage 2's, whose forward is the pair's own 2F0: unpaired, the same order runs.
  const char* r1 = "1F0 3F0 3B0 1B0";
  const Schedule paired = hand({"0F0 (2F0;0B0)OVERLAP_F_B 2B0", r1}, 4, 1, Placement::kLoop);
  const Status st = validate(paired);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("deadlock"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0 step 1: (2F0;0B0)OVERLAP_F_B waits for"), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("a pair starts only once both sub-actions' inputs are there"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(validate(hand({"0F0 2F0 2B0 0B0", r1}, 4, 1, Placement::kLoop)).ok());
  // lower() refuses it the same way (it validates first).
  EXPECT_FALSE(lower(paired).ok());
}

TEST(OverlapFBValidateTest, SubActionsCountAsTheirOwnActions) {
  // A pair's F duplicating a plain F is a duplicate; its B before its F is out of order.
  const Schedule dup =
      hand({"0F0 0F1 (1F0;0B0)OVERLAP_F_B 1F0 1B0 0B1 1F1 1B1"}, 2, 2, Placement::kV);
  EXPECT_NE(validate(dup).message().find("1F0 appears twice"), std::string::npos)
      << validate(dup).message();
  const Schedule early = hand({"(0F0;1B0)OVERLAP_F_B 1F0 0B0"}, 2, 1, Placement::kV);
  EXPECT_NE(validate(early).message().find("1B0 comes before 1F0"), std::string::npos)
      << validate(early).message();
}

// ----- lowering ---------------------------------------------------------------------------------

// Both inputs' RECVs come before the pair, both outputs' SENDs after it.
TEST(OverlapFBLowerTest, ReceivesBeforeThePairSendsAfter) {
  for (const char* name : {"dualpipev", "dualpipe"}) {
    const Schedule s =
        generate_schedule(name, {.ranks = 4, .microbatches = 8, .chunks = 2}).value();
    auto low = lower(s);
    ASSERT_TRUE(low.ok()) << low.status().to_string();
    ASSERT_TRUE(validate(*low).ok()) << validate(*low).to_string();
    int pairs = 0;
    for (int32_t r = 0; r < low->num_ranks; ++r) {
      const auto& prog = low->programs[r];
      auto at = [&](const Action& x) {
        return std::find(prog.begin(), prog.end(), x) - prog.begin();
      };
      for (size_t k = 0; k < prog.size(); ++k) {
        if (prog[k].type != ActionType::kOverlapFB) continue;
        ++pairs;
        for (const Action& sub : sub_actions(prog[k])) {
          if (auto in = message_route(*low, sub, MessageEnd::kIn); in && !in->local()) {
            EXPECT_LT(at(in->recv()), static_cast<ptrdiff_t>(k))
                << name << " " << to_string(prog[k]);
          }
          if (auto out = message_route(*low, sub, MessageEnd::kOut); out && !out->local()) {
            const auto i = at(out->send());
            EXPECT_GT(i, static_cast<ptrdiff_t>(k)) << name << " " << to_string(prog[k]);
            EXPECT_LT(i, static_cast<ptrdiff_t>(prog.size()));
          }
        }
      }
    }
    EXPECT_GT(pairs, 0) << name;
  }
}

// ----- DualPipe's two directions ----------------------------------------------------------------

TEST(DualPipeDirectionsTest, RankHoldsModelStagesRAndPMinus1MinusR) {
  const Schedule s =
      generate_schedule("dualpipe", {.ranks = 4, .microbatches = 8, .chunks = 2}).value();
  EXPECT_EQ(s.directions, 2);
  EXPECT_EQ(s.stages_per_direction(), 4);
  for (int32_t r = 0; r < 4; ++r) {
    std::vector<int32_t> model;
    for (int32_t id : s.stages_of(r)) model.push_back(s.model_stage(id));
    std::sort(model.begin(), model.end());
    EXPECT_EQ(model, (std::vector<int32_t>{std::min(r, 3 - r), std::max(r, 3 - r)})) << r;
  }
  EXPECT_TRUE(s.runs(0, 3));
  EXPECT_FALSE(s.runs(0, 4));
  EXPECT_TRUE(s.runs(7, 4));
  EXPECT_FALSE(s.runs(7, 3));
  // No message between the directions: the forward pipeline ends at id 3, the reverse starts at 4.
  EXPECT_FALSE(message_route(s, {ActionType::kForward, 3, 0}, MessageEnd::kOut));
  EXPECT_FALSE(message_route(s, {ActionType::kForward, 4, 4}, MessageEnd::kIn));
  EXPECT_FALSE(message_route(s, {ActionType::kBackward, 4, 4}, MessageEnd::kOut));
  EXPECT_FALSE(message_route(s, {ActionType::kBackward, 3, 0}, MessageEnd::kIn));
  const auto m = message_route(s, {ActionType::kForward, 4, 4}, MessageEnd::kOut);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->src_rank, 3);  // the reverse pipeline flows from rank 3 to rank 0
  EXPECT_EQ(m->dst_rank, 2);
}

TEST(DualPipeDirectionsTest, ActionOutsideItsDirectionIsAnError) {
  Schedule s = generate_schedule("dualpipe", {.ranks = 2, .microbatches = 4, .chunks = 2}).value();
  s.programs[0][0].microbatch = 3;  // 0F0 -> 0F3: stage 0 runs microbatches 0..1 only
  const Status st = validate(s);
  EXPECT_NE(st.message().find("0F3: stage 0 belongs to direction 0, which does not run "
                              "microbatch 3 (direction 0 runs microbatches 0..1)"),
            std::string::npos)
      << st.message();
  s = generate_schedule("dualpipe", {.ranks = 2, .microbatches = 4, .chunks = 2}).value();
  s.directions = 3;
  EXPECT_NE(validate(s).message().find("3 directions must divide both the 4 stages and the 4 "
                                       "microbatches"),
            std::string::npos)
      << validate(s).message();
}

TEST(DualPipeDirectionsTest, CsvAndJsonKeepPairsAndDirections) {
  const Schedule s =
      generate_schedule("dualpipe", {.ranks = 4, .microbatches = 8, .chunks = 2}).value();
  for (const Schedule& x : {s, lower(s).value()}) {
    auto csv = parse_csv(to_csv(x), "d.csv");
    ASSERT_TRUE(csv.ok()) << csv.status().to_string();
    EXPECT_EQ(csv->programs, x.programs);
    EXPECT_EQ(csv->directions, 2);
    EXPECT_EQ(csv->stage_to_rank, x.stage_to_rank);
    auto js = parse_json(to_json(x), "d.json");
    ASSERT_TRUE(js.ok()) << js.status().to_string();
    EXPECT_EQ(js->programs, x.programs);
    EXPECT_EQ(js->directions, 2);
  }
  EXPECT_NE(to_json(s).find("\"directions\": 2"), std::string::npos);
  // One direction writes no "directions" key (files stay as they were).
  EXPECT_EQ(
      to_json(generate_schedule("dualpipev", {.ranks = 2, .microbatches = 4, .chunks = 2}).value())
          .find("directions"),
      std::string::npos);
  EXPECT_NE(format_grid(s).find("(0F3;7B5)OVERLAP_F_B"), std::string::npos) << format_grid(s);
}

}  // namespace
}  // namespace tightpipe
