// `tightpipe schedule` as a user runs it: output formats, exit codes, errors with hints.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

using testutil::run_command;
const std::string kTp = testutil::tightpipe_binary();

TEST(CliScheduleTest, HelpExplainsEveryFlag) {
  auto top = run_command(kTp + " --help");
  EXPECT_EQ(top.exit_code, 0);
  for (const char* c : {"schedule", "simulate", "train", "data", "report"})
    EXPECT_NE(top.out.find(c), std::string::npos) << c;
  auto r = run_command(kTp + " schedule --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* f : {"--schedule", "--pp", "--pipeline-model-parallel-size", "--microbatches",
                        "--num-microbatches", "--vpp", "--num-virtual-stages-per-pipeline-rank",
                        "--lowered", "--format", "--out", "--check"})
    EXPECT_NE(r.out.find(f), std::string::npos) << f;
  EXPECT_EQ(run_command(kTp).exit_code, 2);
  EXPECT_EQ(run_command(kTp + " frobnicate").exit_code, 2);
}

TEST(CliScheduleTest, GridCsvJsonAndMegatronSpellings) {
  auto grid = run_command(kTp + " schedule --schedule 1f1b --pp 4 --microbatches 8");
  ASSERT_EQ(grid.exit_code, 0) << grid.err;
  EXPECT_NE(grid.out.find("r3: 3F0 3B0 3F1 3B1"), std::string::npos) << grid.out;
  auto csv = run_command(kTp +
                         " schedule --schedule interleaved --pipeline-model-parallel-size 4 "
                         "--num-microbatches 8 --num-virtual-stages-per-pipeline-rank 2 "
                         "--format csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  auto want = generate_schedule("interleaved", {.ranks = 4, .microbatches = 8, .chunks = 2});
  EXPECT_EQ(csv.out, to_csv(*want));
  auto js = run_command(
      kTp + " schedule --schedule zb-v --pp 2 --microbatches 4 --lowered --format json");
  ASSERT_EQ(js.exit_code, 0) << js.err;
  auto parsed = parse_json(js.out, "out.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_TRUE(parsed->lowered);
  EXPECT_EQ(parsed->chunks(), 2);  // zb-v defaults to 2 chunks
}

TEST(CliScheduleTest, CheckAcceptsGoodAndRejectsBadFiles) {
  const std::string dir = testutil::make_temp_dir("tp-cli");
  auto out =
      run_command(kTp + " schedule --schedule zb-h1 --pp 3 --microbatches 5 --format csv --out " +
                  dir + "/s.csv");
  ASSERT_EQ(out.exit_code, 0) << out.err;
  auto ok = run_command(kTp + " schedule --check " + dir + "/s.csv");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("no deadlock"), std::string::npos);
  // ZB-H2 (the paper's rule, m >= 2p) written as CSV and checked back.
  out = run_command(kTp + " schedule --schedule zb-h2 --pp 3 --microbatches 7 --format csv --out " +
                    dir + "/h2.csv");
  ASSERT_EQ(out.exit_code, 0) << out.err;
  auto h2 = run_command(kTp + " schedule --check " + dir + "/h2.csv");
  EXPECT_EQ(h2.exit_code, 0) << h2.err;
  EXPECT_NE(h2.out.find("no deadlock"), std::string::npos) << h2.out;

  ASSERT_TRUE(write_file(dir + "/bad.csv", "0F0,0B0\n1F0,1Q0\n").ok());
  auto bad = run_command(kTp + " schedule --check " + dir + "/bad.csv");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("bad.csv:2:2: bad action '1Q0'"), std::string::npos) << bad.err;
  EXPECT_NE(bad.err.find("hint"), std::string::npos);

  // W before I: rejected with the grid, the cell marked.
  ASSERT_TRUE(write_file(dir + "/order.csv", "0F0,0W0,0I0\n1F0,1I0,1W0\n").ok());
  auto order = run_command(kTp + " schedule --check " + dir + "/order.csv");
  EXPECT_EQ(order.exit_code, 2);
  EXPECT_NE(order.err.find("[0W0]"), std::string::npos) << order.err;

  auto missing = run_command(kTp + " schedule --check " + dir + "/nope.csv");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("nope.csv"), std::string::npos);
}

// `--format torch` (PyTorch's compute_comms form) of every schedule but dualpipe passes --check,
// which counts the PyTorch actions; dualpipe refuses in one line; PyTorch's own dump checks.
TEST(CliScheduleTest, TorchFormatRoundTripsThroughCheck) {
  const std::string dir = testutil::make_temp_dir("tp-cli-torch");
  struct Case {
    std::string name, flags;
    int stages;
  } cases[] = {
      {"gpipe", "", 4},
      {"1f1b", "", 4},
      {"interleaved", "--vpp 2", 8},
      {"looped-bfs", "--vpp 4", 16},
      {"zb-h1", "", 4},
      {"zb-h2", "", 4},
      {"zb-v", "", 8},
      {"dualpipev", "", 8},
      {"zb-1p", "--cost f=1,i=1,w=1", 4},
      {"zb-2p", "--cost f=1,i=1,w=1", 4},
      {"zb-auto", "--cost f=1,i=1,w=1", 4},
      {"zb-v-auto", "--cost f=1,i=1,w=1", 8},
  };
  for (const auto& c : cases) {
    const std::string file = dir + "/" + c.name + ".csv";
    const std::string gen =
        kTp + " schedule --schedule " + c.name + " --pp 4 --microbatches 8 " + c.flags;
    auto out = run_command(gen + " --format torch --out " + file);
    ASSERT_EQ(out.exit_code, 0) << c.name << "\n" << out.err;
    auto check = run_command(kTp + " schedule --check " + file);
    EXPECT_EQ(check.exit_code, 0) << c.name << "\n" << check.err;
    EXPECT_NE(check.out.find("valid lowered schedule"), std::string::npos) << check.out;
    EXPECT_NE(
        check.out.find(fmt::format("{} REDUCE_GRAD, {} WAIT_REDUCE_GRAD, ", c.stages, c.stages)),
        std::string::npos)
        << c.name << "\n"
        << check.out;
    EXPECT_NE(check.out.find("WAIT_SEND, each where PyTorch's runtime needs it"), std::string::npos)
        << c.name << "\n"
        << check.out;
    EXPECT_EQ(check.out.find("the form before PyTorch 2.15"), std::string::npos) << check.out;
    // --lowered changes nothing: the torch form is always lowered.
    auto lowered = run_command(gen + " --lowered --format torch");
    EXPECT_EQ(lowered.exit_code, 0) << lowered.err;
    EXPECT_EQ(lowered.out, read_file(file).value()) << c.name;
  }
  auto dual =
      run_command(kTp + " schedule --schedule dualpipe --pp 4 --microbatches 8 --format torch");
  EXPECT_EQ(dual.exit_code, 2);
  EXPECT_NE(dual.err.find("runs 2 directions"), std::string::npos) << dual.err;
  EXPECT_NE(dual.err.find("PyTorch's pipelining has no form for"), std::string::npos) << dual.err;
  EXPECT_EQ(std::count(dual.err.begin(), dual.err.end(), '\n'), 1) << dual.err;
  // A plain lowered CSV still checks, with a note that PyTorch would not reduce its gradients.
  ASSERT_EQ(run_command(kTp +
                        " schedule --schedule 1f1b --pp 2 --microbatches 2 --lowered "
                        "--format csv --out " +
                        dir + "/plain.csv")
                .exit_code,
            0);
  auto plain = run_command(kTp + " schedule --check " + dir + "/plain.csv");
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_NE(plain.out.find("no REDUCE_GRAD"), std::string::npos) << plain.out;
  // PyTorch's _dump_csv of its own lowering of 1F1B (p = 2, m = 2): "0UNSHARD" was refused.
  // `schedule --check` of `text` written to dir/name.
  auto check_text = [&](const std::string& name, const std::string& text) {
    EXPECT_TRUE(write_file(dir + "/" + name, text).ok());
    return run_command(kTp + " schedule --check " + dir + "/" + name);
  };
  auto dump = check_text("dump.csv",
                         "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,"
                         "0REDUCE_GRAD,0RESHARD\r\n1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,"
                         "1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\r\n");
  EXPECT_EQ(dump.exit_code, 0) << dump.err;
  EXPECT_NE(dump.out.find("PyTorch actions: 2 UNSHARD, 2 RESHARD, 2 REDUCE_GRAD"),
            std::string::npos)
      << dump.out;
  // ... which has none of 2.15's waits: said, since PyTorch 2.15's loader refuses it.
  EXPECT_NE(dump.out.find("no WAIT_SEND / WAIT_REDUCE_GRAD: the form before PyTorch 2.15"),
            std::string::npos)
      << dump.out;
  // PyTorch 2.15.0's own _dump_csv of the same shape: "0WAIT_SEND_F0" was refused.
  auto dump215 = check_text("dump215.csv",
                            "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0WAIT_SEND_F0,"
                            "0RECV_B1,0B1,0WAIT_SEND_F1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD,0RESHARD\r\n"
                            "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,"
                            "1REDUCE_GRAD,1WAIT_REDUCE_GRAD,1RESHARD,1WAIT_SEND_B0,"
                            "1WAIT_SEND_B1\r\n");
  EXPECT_EQ(dump215.exit_code, 0) << dump215.err;
  EXPECT_NE(dump215.out.find("2 REDUCE_GRAD, 2 WAIT_REDUCE_GRAD, 4 WAIT_SEND"), std::string::npos)
      << dump215.out;
  // Misplaced: one line naming the file, row:column, the cell and a hint.
  auto early = check_text("early.csv",
                          "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0REDUCE_GRAD,"
                          "0B1,0RESHARD\n1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,"
                          "1REDUCE_GRAD\n");
  EXPECT_EQ(early.exit_code, 2);
  EXPECT_NE(early.err.find("early.csv:1:9: '0REDUCE_GRAD' comes after 1 of stage 0's 2 backward"),
            std::string::npos)
      << early.err;
  EXPECT_NE(early.err.find("hint"), std::string::npos) << early.err;
  EXPECT_EQ(std::count(early.err.begin(), early.err.end(), '\n'), 1) << early.err;
}

TEST(CliScheduleTest, BadShapesAreUsageErrors) {
  struct Case {
    std::string args, needle;
  } cases[] = {
      {"--schedule interleaved --pp 4 --vpp 2 --microbatches 9", "--microbatches 9"},
      {"--schedule zb-v --pp 4 --vpp 3 --microbatches 8", "--vpp 3"},
      {"--schedule zb-h2 --pp 4 --microbatches 7", "m >= 2p = 8"},
      {"--schedule 1f1b --pp 0 --microbatches 8", "--pp: 0 is outside [1, 1024]"},
      {"--schedule 1f1b --pp 2 --microbatches 0", "--microbatches: 0 is outside [1, 65536]"},
      {"--schedule zz --pp 2 --microbatches 2", "unknown schedule"},
      {"--pp two", "--pp"},
      {"--format xml", "--format"},
  };
  for (const auto& c : cases) {
    auto r = run_command(kTp + " schedule " + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.needle), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("hint"), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'),
              1 + (r.err.find("\nhint") != std::string::npos))
        << c.args << "\n"
        << r.err;
  }
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// --engine on simulate, plan and report: every prediction names its profile; an unknown engine
// lists the known ones; an engine Megatron-LM's schedules cannot serve names the schedule.
TEST(CliScheduleTest, EngineIsNamedInEveryPredictionAndBadOnesSayWhy) {
  const std::string tp = testutil::tightpipe_binary();
  auto table = testutil::run_command(
      tp +
      " simulate --schedule 1f1b --pp 4 --microbatches 8 --cost f=1,i=1,w=1,comm=0.2 "
      "--engine megatron");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("engine   megatron: p2p in Megatron's batched calls"), std::string::npos)
      << table.out;
  auto json = testutil::run_command(
      tp +
      " simulate --compare 1f1b,zb-h2 --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --engine "
      "zb --json");
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.out.find("\"engine\": \"zb\""), std::string::npos);
  EXPECT_NE(json.out.find("optimizer post-validated"), std::string::npos);
  auto plan = testutil::run_command(
      tp +
      " plan --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
      "--global-batch-size 16 --devices 4 --device h100-sxm --engine torch");
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("engine: torch"), std::string::npos);
  EXPECT_NE(plan.out.find("engine profile: torch"), std::string::npos);
  for (const char* cmd : {" simulate --schedule 1f1b --pp 2 --microbatches 4 --engine pipedream",
                          " plan --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
                          "--seq-length 2048 --global-batch-size 16 --devices 4 --engine ds",
                          " report /nonexistent --engine ds"}) {
    auto bad = testutil::run_command(tp + cmd);
    EXPECT_NE(bad.exit_code, 0) << cmd;
    EXPECT_NE(bad.err.find("known: tightpipe, megatron, megatron-overlap, torch, zb"),
              std::string::npos)
        << cmd << ": " << bad.err;
  }
  auto zb = testutil::run_command(
      tp + " simulate --schedule zb-h1 --pp 2 --microbatches 4 --engine megatron");
  EXPECT_NE(zb.exit_code, 0);
  EXPECT_NE(zb.err.find("Megatron-LM does not run schedule 'zb-h1'"), std::string::npos) << zb.err;
  auto both = testutil::run_command(
      tp + " simulate --schedule 1f1b --pp 2 --microbatches 4 --engine torch --comm-mode blocking");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("--comm-mode and --optimizer-post-validation are tightpipe's own"),
            std::string::npos)
      << both.err;
}

// Megatron's --num-layers-per-virtual-pipeline-stage N turns interleaving on with v = L / (p N),
// as Megatron's arguments.py computes it, on schedule, simulate, plan and train; where p does not
// divide L, or N the layers per rank, it is refused naming both numbers.
TEST(CliScheduleTest, MegatronLayersPerVirtualStageSetsTheChunks) {
  const std::string base =
      kTp + " schedule --schedule interleaved --pp 4 --microbatches 8 --format csv";
  auto by_flag = run_command(base + " --num-layers 16 --num-layers-per-virtual-pipeline-stage 2");
  auto by_vpp = run_command(base + " --vpp 2");
  ASSERT_EQ(by_flag.exit_code, 0) << by_flag.err;
  ASSERT_EQ(by_vpp.exit_code, 0) << by_vpp.err;
  EXPECT_EQ(by_flag.out, by_vpp.out);  // 16 / (4 x 2) = 2 chunks per rank
  auto one = run_command(base + " --num-layers 16 --num-layers-per-virtual-pipeline-stage 1");
  auto four = run_command(base + " --vpp 4");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out, four.out);
  auto sim = run_command(kTp +
                         " simulate --schedule interleaved --pp 4 --microbatches 8 --cost "
                         "f=1,i=1,w=1 --num-layers 16 --num-layers-per-virtual-pipeline-stage 2");
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_NE(sim.out.find("p=4 v=2 m=8"), std::string::npos) << sim.out;
  struct Bad {
    std::string flags, says;
  } bad[] = {
      {"--num-layers 18 --num-layers-per-virtual-pipeline-stage 2",
       "--num-layers 18 is not divisible by --pipeline-model-parallel-size 4"},
      {"--num-layers 16 --num-layers-per-virtual-pipeline-stage 3",
       "does not divide the 4 layers per rank"},
      {"--num-layers-per-virtual-pipeline-stage 2", "hint: give --num-layers"},
      {"--num-layers 16 --num-layers-per-virtual-pipeline-stage 0", "outside [1, 1024]"},
      {"--vpp 2 --num-layers 16 --num-layers-per-virtual-pipeline-stage 2", "excludes"},
  };
  for (const Bad& b : bad) {
    auto r = run_command(base + " " + b.flags);
    EXPECT_EQ(r.exit_code, 2) << b.flags;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << b.flags << ": " << r.err;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << b.flags << ": " << r.err;
  }
}

}  // namespace
}  // namespace tightpipe
