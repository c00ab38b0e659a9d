// PyTorch's compute_comms form: our reading of its grammar, the rules its UNSHARD / RESHARD /
// REDUCE_GRAD cells are held to, and `to_torch_csv` round-tripping through the CSV reader.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"
#include "tightpipe/schedule_torch.h"

namespace tightpipe {
namespace {

// Every short string of PyTorch's _ComputationType (torch/distributed/pipelining/schedules.py)
// and the action we read it as.
TEST(TorchGrammarTest, EveryShortStringOfPyTorchsComputationTypes) {
  struct Case {
    const char* text;
    ActionType type;
    int32_t stage, microbatch;
  } cases[] = {
      {"2F0", ActionType::kForward, 2, 0},          // FORWARD
      {"1I3", ActionType::kBackwardInput, 1, 3},    // BACKWARD_INPUT
      {"0W3", ActionType::kBackwardWeight, 0, 3},   // BACKWARD_WEIGHT
      {"2B1", ActionType::kBackward, 2, 1},         // FULL_BACKWARD
      {"1SEND_F3", ActionType::kSendAct, 1, 3},     // SEND_F
      {"2RECV_F0", ActionType::kRecvAct, 2, 0},     // RECV_F
      {"3SEND_B7", ActionType::kSendGrad, 3, 7},    // SEND_B
      {"2RECV_B12", ActionType::kRecvGrad, 2, 12},  // RECV_B
  };
  for (const auto& c : cases) {
    auto a = parse_action(c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status().message();
    EXPECT_EQ(a->type, c.type) << c.text;
    EXPECT_EQ(a->stage, c.stage) << c.text;
    EXPECT_EQ(a->microbatch, c.microbatch) << c.text;
    EXPECT_EQ(to_string(*a), c.text);
    // None of them is one of the three actions outside the IR.
    auto t = parse_torch_action(c.text);
    ASSERT_TRUE(t.ok()) << c.text;
    EXPECT_FALSE(t->has_value()) << c.text;
  }
  // OVERLAP_F_B: PyTorch's repr of its composite, the sub-actions in brackets, ';' between.
  auto pair = parse_action("(0F5;7B2)OVERLAP_F_B");
  ASSERT_TRUE(pair.ok()) << pair.status().message();
  EXPECT_EQ(pair->type, ActionType::kOverlapFB);
  EXPECT_EQ(to_string(*pair), "(0F5;7B2)OVERLAP_F_B");
  EXPECT_EQ(sub_actions(*pair).count, 2);
  EXPECT_FALSE(parse_torch_action("(0F5;7B2)OVERLAP_F_B")->has_value());

  // UNSHARD, RESHARD, REDUCE_GRAD: the stage, the type, no microbatch (PyTorch's repr of an
  // _Action whose microbatch_index is None).
  // PyTorch 2.15's three waits: WAIT_REDUCE_GRAD like REDUCE_GRAD, the WAIT_SENDs with the
  // microbatch of the send they retire.
  struct TorchCase {
    const char* text;
    TorchActionType type;
    int32_t stage, microbatch;
  } torch_cases[] = {
      {"0UNSHARD", TorchActionType::kUnshard, 0, -1},
      {"12RESHARD", TorchActionType::kReshard, 12, -1},
      {"3REDUCE_GRAD", TorchActionType::kReduceGrad, 3, -1},
      {"3WAIT_REDUCE_GRAD", TorchActionType::kWaitReduceGrad, 3, -1},
      {"1WAIT_SEND_F3", TorchActionType::kWaitSendF, 1, 3},
      {"0WAIT_SEND_B12", TorchActionType::kWaitSendB, 0, 12},
  };
  for (const auto& c : torch_cases) {
    auto t = parse_torch_action(c.text);
    ASSERT_TRUE(t.ok()) << c.text << ": " << t.status().message();
    ASSERT_TRUE(t->has_value()) << c.text;
    EXPECT_EQ(**t, (TorchAction{c.type, c.stage, c.microbatch})) << c.text;
    EXPECT_EQ(to_string(**t), c.text);
    // Nor is any of them an action of the IR.
    EXPECT_FALSE(parse_action(c.text).ok()) << c.text;
  }
  // Not one of them: left to parse_action (which refuses what is no action at all).
  for (const char* other : {"", "UNSHARD", "0X0", "0UNSHAR", "0SEND_F1", "0WAIT_SEND", "0WAIT"}) {
    auto t = parse_torch_action(other);
    ASSERT_TRUE(t.ok()) << other;
    EXPECT_FALSE(t->has_value()) << other;
  }
  // One of them, malformed: an error naming the token, why, and how PyTorch writes it.
  struct Bad {
    const char* text;
    const char* why;
  } bad[] = {
      {"0UNSHARD3", "UNSHARD takes no microbatch, but '3' follows it"},
      {"1REDUCE_GRAD0", "REDUCE_GRAD takes no microbatch"},
      {"01RESHARD", "the stage '01' has a leading zero"},
      {"99999UNSHARD", "stage 99999 is over tightpipe's limit (stage ids 0..8191)"},
      {"0WAIT_REDUCE_GRAD1", "WAIT_REDUCE_GRAD takes no microbatch, but '1' follows it"},
      {"0WAIT_SEND_F", "WAIT_SEND_F needs a microbatch after it"},
      {"0WAIT_SEND_B03", "the microbatch '03' has a leading zero"},
      {"0WAIT_SEND_Bx", "the microbatch 'x' is not a plain number"},
      {"0WAIT_SEND_F99999", "microbatch 99999 is over tightpipe's limit"},
  };
  for (const auto& b : bad) {
    auto t = parse_torch_action(b.text);
    ASSERT_FALSE(t.ok()) << b.text;
    const std::string m(t.status().message());
    EXPECT_NE(m.find(std::string("bad action '") + b.text + "'"), std::string::npos) << m;
    EXPECT_NE(m.find(b.why), std::string::npos) << m;
    EXPECT_NE(m.find("hint"), std::string::npos) << m;
  }
}

// What PyTorch's _PipelineScheduleRuntime writes with _dump_csv (default format
// "compute_comms") after lowering the compute-only 1F1B at p = 2, m = 2 itself
// (_add_unshard_reshard, _add_reduce_grad, then _add_send_recv), worked through by hand from the
// code read (docs/schedule_ir.md names the commit): csv.writer rows of each action's repr.
constexpr const char* kPyTorch1F1B =
    "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\r\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\r\n";

TEST(TorchCsvTest, PyTorchsOwnComputeCommsDumpLoads) {
  TorchActionCounts counts;
  auto s = parse_csv(kPyTorch1F1B, "dump.csv", &counts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(s->lowered);
  EXPECT_EQ(counts.unshard, 2);
  EXPECT_EQ(counts.reshard, 2);
  EXPECT_EQ(counts.reduce_grad, 2);
  // The same programs as our lowering of the same compute-only schedule.
  auto ours = lower(generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value()).value();
  EXPECT_EQ(s->programs, ours.programs);
  EXPECT_EQ(s->stage_to_rank, ours.stage_to_rank);
  // Without the counts pointer the reader takes it the same way (as load_schedule_file does).
  ASSERT_TRUE(parse_csv(kPyTorch1F1B, "dump.csv").ok());
}

// The two rows refused by parse_csv as "t.csv" in one line holding `want` and a hint.
void expect_refused_in_one_line(const std::string& text, const std::string& want) {
  auto s = parse_csv(text, "t.csv");
  ASSERT_FALSE(s.ok()) << want;
  const std::string m(s.status().message());
  EXPECT_NE(m.find(want), std::string::npos) << m;
  EXPECT_NE(m.find("hint"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// PyTorch 2.15.0's _dump_csv after lowering the compute-only 1F1B at p = 2, m = 4 itself (run,
// not worked by hand: docs/torch.md; python/tests checks the same for every built-in class).
constexpr const char* kPyTorch215OneFOneB =
    "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0F2,0SEND_F2,0RECV_B1,0B1,"
    "0WAIT_SEND_F1,0F3,0SEND_F3,0RECV_B2,0B2,0WAIT_SEND_F2,0RECV_B3,0B3,0WAIT_SEND_F3,"
    "0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\r\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1RECV_F2,1B1,1SEND_B1,1F2,1RECV_F3,1B2,"
    "1SEND_B2,1F3,1B3,1SEND_B3,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0,"
    "1WAIT_SEND_B1,1WAIT_SEND_B2,1WAIT_SEND_B3\r\n";

TEST(TorchCsvTest, PyTorch215sDumpWithWaitsLoads) {
  TorchActionCounts counts;
  auto s = parse_csv(kPyTorch215OneFOneB, "dump215.csv", &counts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_TRUE(counts.has_waits());
  EXPECT_EQ(counts.reduce_grad, 2);
  EXPECT_EQ(counts.wait_reduce_grad, 2);
  EXPECT_EQ(counts.wait_send, 8);
  auto ours = lower(generate_schedule("1f1b", {.ranks = 2, .microbatches = 4}).value()).value();
  EXPECT_EQ(s->programs[0], ours.programs[0]);
  EXPECT_EQ(s->stage_to_rank, ours.stage_to_rank);
  // Our file of the same shape differs only where rank 1's first RECV stands.
  const std::string mine = to_torch_csv(ours).value();
  std::string theirs = kPyTorch215OneFOneB;
  for (size_t at; (at = theirs.find('\r')) != std::string::npos;) theirs.erase(at, 1);
  const size_t row1 = theirs.find('\n') + 1;
  EXPECT_EQ(mine.substr(0, row1), theirs.substr(0, row1));
  EXPECT_EQ(mine.substr(row1), "1RECV_F0,1UNSHARD," + theirs.substr(row1 + 18));
}

// PyTorch 2.15's rules for its waits, each broken once in our 1F1B file (p = 2, m = 2).
TEST(TorchCsvTest, MisplacedWaitsAreRefusedInOneLine) {
  const std::string r0 =
      "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,"
      "0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD";
  const std::string r1 =
      "1RECV_F0,1UNSHARD,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,"
      "1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0,1WAIT_SEND_B1";
  auto without = [](std::string row, const std::string& cell) {
    const size_t at = row.find("," + cell);
    EXPECT_NE(at, std::string::npos) << cell;
    return row.erase(at, cell.size() + 1);
  };
  struct Case {
    std::string row0, row1, want;
  } cases[] = {
      {without(r0, "0WAIT_SEND_F1"), r1,
       "t.csv:1:5: '0SEND_F1' has no WAIT_SEND after it on row 1 (rank 0); hint: PyTorch 2.15 "
       "retires a send only at its own 0WAIT_SEND_F1"},
      {r0, without(without(r1, "1WAIT_SEND_B1"), "1WAIT_SEND_B0"),
       "t.csv:2:6: '1SEND_B0' has no WAIT_SEND after it on row 2 (rank 1), nor do 1 more"},
      {"0WAIT_SEND_F0," + r0, r1,
       "t.csv:1:1: '0WAIT_SEND_F0' waits for '0SEND_F0', which no earlier cell of this row sends"},
      {r0 + ",0WAIT_SEND_F1", r1,
       "t.csv:1:15: '0WAIT_SEND_F1' waits for '0SEND_F1', which no earlier cell"},
      {r0, r1 + ",1WAIT_SEND_F1", "t.csv:2:15: '1WAIT_SEND_F1' waits for '1SEND_F1'"},
      {without(r0, "0WAIT_REDUCE_GRAD"), r1,
       "t.csv:1:12: '0REDUCE_GRAD' has no 0WAIT_REDUCE_GRAD after it on row 1 (rank 0)"},
      {"0WAIT_REDUCE_GRAD," + without(r0, "0WAIT_REDUCE_GRAD"), r1,
       "t.csv:1:1: '0WAIT_REDUCE_GRAD' has no pending reduction of stage 0 to wait for"},
      {without(without(r0, "0WAIT_REDUCE_GRAD"), "0REDUCE_GRAD"),
       without(without(r1, "1WAIT_REDUCE_GRAD"), "1REDUCE_GRAD"),
       "t.csv: stage 0 has no REDUCE_GRAD, although the file holds PyTorch's compute_comms "
       "actions ('0UNSHARD' at t.csv:1:1): PyTorch's runtime would leave its gradients m times "
       "too large"},
      {r0, without(without(r1, "1WAIT_REDUCE_GRAD"), "1REDUCE_GRAD"),
       "t.csv: stage 1 has no REDUCE_GRAD, although stage 0 has one at t.csv:1:12"},
      {r0 + ",0REDUCE_GRAD,0WAIT_REDUCE_GRAD", r1,
       "t.csv:1:15: a second '0REDUCE_GRAD' (the first is at t.csv:1:12): stage 0 would scale "
       "its gradients twice"},
  };
  for (const auto& c : cases) expect_refused_in_one_line(c.row0 + "\n" + c.row1 + "\n", c.want);
  EXPECT_TRUE(parse_csv(r0 + "\n" + r1 + "\n", "t.csv").ok());
  // Two stages on one rank: one reduction pending at a time.
  auto two = parse_csv(
      "0F0,1F0,1B0,1REDUCE_GRAD,0B0,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,1WAIT_REDUCE_GRAD\n", "v.csv");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find(
                "v.csv:1:6: '0REDUCE_GRAD' starts while stage 1's reduction (v.csv:1:4) is still "
                "pending"),
            std::string::npos)
      << two.status().message();
  EXPECT_TRUE(parse_csv("0F0,1F0,1B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,0B0,0REDUCE_GRAD,"
                        "0WAIT_REDUCE_GRAD\n",
                        "v.csv")
                  .ok());
}

TEST(TorchCsvTest, PyTorchsComputeOnlyDumpWithIdleCellsLoads) {
  // PipelineScheduleMulti._dump_csv writes a None (an idle step) as an empty cell.
  TorchActionCounts counts;
  auto s = parse_csv(",0F0,,0F1,0B0,,0B1\n,,1F0,1B0,1F1,1B1\n", "only.csv", &counts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_FALSE(s->lowered);
  EXPECT_EQ(s->size(), 8u);
  EXPECT_EQ(counts.total(), 0);
}

TEST(TorchCsvTest, ComputeCommsWithAPairAndOneShardedStageLoads) {
  // One rank holding stages 0 and 1 (no SEND/RECV between them), an OVERLAP_F_B pair, FSDP
  // cells for stage 1 only (stage 0 is not sharded), REDUCE_GRAD after each stage's last B.
  const char* text =
      "1UNSHARD,0F0,1F0,0F1,(1F1;1B0)OVERLAP_F_B,0B0,1B1,1REDUCE_GRAD,1RESHARD,0B1,"
      "0REDUCE_GRAD\n";
  TorchActionCounts counts;
  auto s = parse_csv(text, "v.csv", &counts);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_stages, 2);
  EXPECT_EQ(s->num_microbatches, 2);
  EXPECT_EQ(s->stage_to_rank, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(s->size(), 7u);
  EXPECT_EQ(counts.unshard, 1);
  EXPECT_EQ(counts.reshard, 1);
  EXPECT_EQ(counts.reduce_grad, 2);
  // Stage 1's pair is inside its UNSHARD..RESHARD; moved after the RESHARD, it is not.
  auto moved = parse_csv(
      "1UNSHARD,0F0,1F0,0F1,1RESHARD,(1F1;1B0)OVERLAP_F_B,0B0,1B1,1REDUCE_GRAD,0B1,"
      "0REDUCE_GRAD\n",
      "v.csv");
  ASSERT_FALSE(moved.ok());
  EXPECT_NE(moved.status().message().find(
                "v.csv:1:6: '(1F1;1B0)OVERLAP_F_B' computes on stage 1 while it is sharded"),
            std::string::npos)
      << moved.status().message();
}

// Each rule of schedule_torch.h, broken once in PyTorch's own dump: one line naming the file,
// the row:column, the cell and a hint.
TEST(TorchCsvTest, MisplacedCellsAreRefusedInOneLine) {
  const std::string r0 =
      "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD";
  const std::string r1 =
      "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD";
  struct Case {
    std::string row0, row1, want;
  } cases[] = {
      {"0UNSHARD3" + r0.substr(8), r1, "t.csv:1:1: bad action '0UNSHARD3': UNSHARD takes no"},
      {r0, r1 + ",5UNSHARD",
       "t.csv:2:12: '5UNSHARD' names stage 5, but the schedule has stages 0..1"},
      {r0 + ",1REDUCE_GRAD", r1,
       "t.csv:1:12: '1REDUCE_GRAD' is on the row of rank 0, but stage 1 lives on rank 1 (row 2)"},
      {"0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0REDUCE_GRAD,0B1,0RESHARD", r1,
       "t.csv:1:9: '0REDUCE_GRAD' comes after 1 of stage 0's 2 backward steps (B or W)"},
      {r0 + ",0REDUCE_GRAD", r1,
       "t.csv:1:12: a second '0REDUCE_GRAD' (the first is at t.csv:1:10)"},
      {r0, "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1RESHARD",
       "t.csv: stage 1 has no REDUCE_GRAD, although stage 0 has one at t.csv:1:10"},
      {"0UNSHARD," + r0, r1,
       "t.csv:1:2: '0UNSHARD' unshards stage 0 again, still unsharded since "
       "t.csv:1:1"},
      {"0RESHARD," + r0, r1, "t.csv:1:1: '0RESHARD' reshards stage 0, which no UNSHARD"},
      {"0UNSHARD,0RESHARD," + r0, r1,
       "t.csv:1:2: '0RESHARD' reshards stage 0 with no compute on it since its UNSHARD at "
       "t.csv:1:1"},
      {"0UNSHARD,0F0,0SEND_F0,0RESHARD,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD", r1,
       "t.csv:1:5: '0F1' computes on stage 0 while it is sharded"},
      {r0.substr(0, r0.size() - 9), r1,
       "t.csv:1:1: stage 0 is still unsharded at the end of row 1 (rank 0)"},
  };
  for (const auto& c : cases) expect_refused_in_one_line(c.row0 + "\n" + c.row1 + "\n", c.want);
  // Untouched, it loads; and a lowered file with none of the three still does (our plain
  // --lowered CSV): tightpipe reduces gradients without them.
  EXPECT_TRUE(parse_csv(r0 + "\n" + r1 + "\n", "t.csv").ok());
  EXPECT_TRUE(
      parse_csv(
          to_csv(lower(generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value()).value()),
          "plain.csv")
          .ok());
}

TEST(TorchCsvTest, OneFOneBIsPyTorchsFormWithOurSendRecv) {
  auto s = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value();
  auto t = to_torch_csv(s);
  ASSERT_TRUE(t.ok()) << t.status().message();
  // PyTorch 2.15's own dump of this shape, except that rank 1's UNSHARD follows the RECV lower()
  // put first: each SEND_F waited right after the B that shows the activation was consumed, each
  // SEND_B at the row's end, each REDUCE_GRAD waited at once.
  EXPECT_EQ(*t,
            "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,0RECV_B1,0B1,"
            "0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\n"
            "1RECV_F0,1UNSHARD,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,"
            "1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0,1WAIT_SEND_B1\n");
  // The lowered schedule gives the same file.
  EXPECT_EQ(to_torch_csv(lower(s).value()).value(), *t);
}

// Four stages on one rank: the window of kTorchUnshardWindow = 3 evicts, worked through by hand
// from PyTorch's _add_unshard_reshard and _add_reduce_grad.
TEST(TorchCsvTest, LoopedFourStagesEvictOutsideTheWindow) {
  auto s = generate_schedule("looped-bfs", {.ranks = 1, .microbatches = 2, .chunks = 4}).value();
  EXPECT_EQ(to_torch_csv(s).value(),
            "0UNSHARD,1UNSHARD,2UNSHARD,0F0,0F1,0RESHARD,3UNSHARD,1F0,1F1,2F0,2F1,3F0,3F1,3B1,3B0,"
            "3REDUCE_GRAD,3WAIT_REDUCE_GRAD,3RESHARD,0UNSHARD,2B1,2B0,2REDUCE_GRAD,"
            "2WAIT_REDUCE_GRAD,2RESHARD,1B1,1B0,1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1RESHARD,0B1,0B0,"
            "0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\n");
}

TEST(TorchCsvTest, DualPipeHasNoPyTorchForm) {
  auto s = generate_schedule("dualpipe", {.ranks = 2, .microbatches = 4, .chunks = 2}).value();
  auto t = to_torch_csv(s);
  ASSERT_FALSE(t.ok());
  const std::string m(t.status().message());
  EXPECT_NE(m.find("runs 2 directions"), std::string::npos) << m;
  EXPECT_NE(m.find("PyTorch's pipelining has no form for"), std::string::npos) << m;
  EXPECT_NE(m.find("hint: export dualpipev"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// The window rule stated the slow way: scan the rest of the row for the next distinct stages.
std::vector<int32_t> naive_window(const std::vector<Action>& prog, size_t k) {
  std::vector<int32_t> out;
  for (size_t j = k; j < prog.size(); ++j) {
    if (!is_compute(prog[j].type)) continue;
    for (const Action& a : sub_actions(prog[j]))
      if (std::find(out.begin(), out.end(), a.stage) == out.end()) out.push_back(a.stage);
    if (static_cast<int32_t>(out.size()) >= kTorchUnshardWindow) break;
  }
  return out;
}

// Every generator but dualpipe, over a sweep of shapes: the file loads back as our lowered
// schedule; every stage is reduced once, right after its last backward and that action's
// SENDs; every compute runs unsharded, on a stage of the window the rule gives; no empty cell.
TEST(TorchCsvTest, EveryGeneratorButDualPipeRoundTrips) {
  int checked = 0;
  for (const auto& g : schedule_generators()) {
    if (g.name == "dualpipe") continue;
    for (int32_t p : {1, 2, 3, 4}) {
      for (int32_t m : {1, 2, 3, 4, 6, 8}) {
        for (int32_t v : {1, 2, 3, 4}) {
          if (g.fixed_chunks ? v != g.fixed_chunks : (!g.takes_chunks && v != 1)) continue;
          auto s = generate_schedule(g.name, {.ranks = p, .microbatches = m, .chunks = v});
          if (!s.ok()) continue;  // a shape the generator does not take
          SCOPED_TRACE(fmt::format("{} p={} m={} v={}", g.name, p, m, v));
          auto text = to_torch_csv(*s);
          ASSERT_TRUE(text.ok()) << text.status().message();
          TorchActionCounts counts;
          auto back = parse_csv(*text, "torch.csv", &counts);
          ASSERT_TRUE(back.ok()) << back.status().message();
          const Schedule low = lower(*s).value();
          EXPECT_EQ(back->programs, low.programs);
          EXPECT_EQ(back->stage_to_rank, low.stage_to_rank);
          EXPECT_EQ(counts.reduce_grad, low.num_stages);
          EXPECT_EQ(counts.wait_reduce_grad, low.num_stages);
          int64_t sends = 0;
          for (const auto& prog : low.programs)
            for (const Action& a : prog)
              sends += a.type == ActionType::kSendAct || a.type == ActionType::kSendGrad;
          EXPECT_EQ(counts.wait_send, sends);
          EXPECT_EQ(counts.unshard, counts.reshard);
          if (v <= kTorchUnshardWindow) {
            EXPECT_EQ(counts.unshard, low.num_stages);
          }

          const auto rows = split(*text, '\n');
          ASSERT_EQ(rows.size(), static_cast<size_t>(p) + 1);  // and the final newline
          for (int32_t r = 0; r < p; ++r) {
            const auto cells = split(rows[r], ',');
            std::set<int32_t> active;
            size_t k = 0;  // the program action the next compute cell is
            std::vector<int64_t> grads(low.num_stages, 0), total(low.num_stages, 0);
            for (const Action& pa : low.programs[r])
              for (const Action& a : sub_actions(pa))
                if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight)
                  ++total[a.stage];
            std::optional<Action> last_gradient_action;
            std::optional<Action> last_compute;  // the cell before, when a compute
            for (const auto& cell : cells) {
              ASSERT_FALSE(cell.empty()) << rows[r];
              auto t = parse_torch_action(cell).value();
              if (t) {
                if (t->type == TorchActionType::kUnshard) active.insert(t->stage);
                if (t->type == TorchActionType::kReshard) active.erase(t->stage);
                if (t->type == TorchActionType::kReduceGrad) {
                  EXPECT_EQ(grads[t->stage], total[t->stage]) << cell;
                  ASSERT_TRUE(last_gradient_action.has_value()) << cell;
                }
                if (t->type == TorchActionType::kWaitSendF) {
                  // Right after the row's own B or I of (s, mb), or at the row's end when the
                  // row has none.
                  const Action b{ActionType::kBackward, t->stage, t->microbatch};
                  const Action i{ActionType::kBackwardInput, t->stage, t->microbatch};
                  bool row_has = false;
                  for (const Action& pa : low.programs[r]) {
                    for (const Action& sub : sub_actions(pa)) row_has |= sub == b || sub == i;
                  }
                  bool holds = false;
                  if (last_compute) {
                    for (const Action& sub : sub_actions(*last_compute)) {
                      holds |= sub == b || sub == i;
                    }
                  }
                  if (!holds) {
                    EXPECT_EQ(k, low.programs[r].size()) << cell << " in " << rows[r];
                    EXPECT_FALSE(row_has) << cell << " waited at the end of " << rows[r];
                  }
                }
                if (t->type == TorchActionType::kWaitSendB) {
                  EXPECT_EQ(k, low.programs[r].size()) << cell << " in " << rows[r];
                }
                continue;
              }
              const Action a = parse_action(cell).value();
              last_compute.reset();
              if (is_compute(a.type)) last_compute = a;
              ASSERT_LT(k, low.programs[r].size());
              ASSERT_EQ(a, low.programs[r][k]);
              if (is_compute(a.type)) {
                const auto want = naive_window(low.programs[r], k);
                EXPECT_EQ(active, std::set<int32_t>(want.begin(), want.end())) << cell;
                last_gradient_action.reset();
                for (const Action& sub : sub_actions(a)) {
                  if (sub.type == ActionType::kBackward ||
                      sub.type == ActionType::kBackwardWeight) {
                    ++grads[sub.stage];
                    last_gradient_action = a;
                  }
                }
              } else if (a.type != ActionType::kSendAct && a.type != ActionType::kSendGrad) {
                last_gradient_action.reset();  // a RECV: REDUCE_GRAD comes before it
              }
              ++k;
            }
            EXPECT_EQ(k, low.programs[r].size());
            EXPECT_TRUE(active.empty()) << rows[r];
          }
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace tightpipe
