// Outputs as a user meets them: a full stdout or a full disk fails with the reason and keeps the
// previous file; a report never writes over its input or over the files a training run wrote.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using testutil::run_command;
const std::string kTp = testutil::tightpipe_binary();

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }
bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// stdout on a full device: exit 1 and one line naming stdout and the reason, for every command
// that prints (and for --help).
TEST(CliOutputTest, FullStdoutFailsWithTheReason) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  for (const std::string args :
       {"schedule --schedule 1f1b --pp 4 --microbatches 8", "schedule --help",
        "simulate --schedule 1f1b --pp 4 --microbatches 8 --cost f=1,i=1,w=1",
        "schedule --schedule 1f1b --pp 4 --microbatches 512 --format csv",
        "plan --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128 "
        "--global-batch-size 8 --devices 2 --memory-budget-gib 16"}) {
    auto r = run_command(kTp + " " + args + " >/dev/full");
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_EQ(lines(r.err), 1) << args << "\n" << r.err;
    EXPECT_TRUE(has(r.err, "cannot write to stdout: No space left on device") &&
                has(r.err, "hint:"))
        << args << "\n"
        << r.err;
  }
  // The same command to a working stdout still succeeds.
  EXPECT_EQ(run_command(kTp + " schedule --schedule 1f1b --pp 4 --microbatches 8").exit_code, 0);
}

// A full disk (the shell's file-size limit, SIGXFSZ ignored: writes fail with EFBIG): --out
// fails naming the file and the reason, keeps the earlier output whole, leaves no .tmp; a new
// output is not left behind as an empty file.
TEST(CliOutputTest, FullDiskKeepsThePreviousOutput) {
  const std::string dir = testutil::make_temp_dir("tp-cli-output");
  const std::string out = dir + "/schedule.csv";
  ASSERT_TRUE(write_file(out, "previous good output\n").ok());
  const std::string limited = "ulimit -f 1; trap '' XFSZ; exec " + kTp +
                              " schedule --schedule 1f1b --pp 4 --microbatches 64 --format csv";
  auto r = run_command(limited + " --out " + out);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_TRUE(has(r.err, out) && has(r.err, "File too large") && has(r.err, "hint:")) << r.err;
  EXPECT_EQ(read_file(out).value(), "previous good output\n");
  EXPECT_FALSE(fs::exists(out + ".tmp"));
  r = run_command(limited + " --out " + dir + "/new.csv");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/new.csv"));
  EXPECT_FALSE(fs::exists(dir + "/new.csv.tmp"));
  // Without the limit the same command writes it.
  r = run_command(kTp + " schedule --schedule 1f1b --pp 4 --microbatches 64 --format csv --out " +
                  out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(read_file(out).value(), "F"));
}

// docs/report.md's sequence: train into a run directory with --trace inside it, then report on it.
// The training's trace and costs stay byte for byte; the report's files have their own names.
// --out at a directory holding an input: the input stays; an output that is an input is refused.
TEST(CliOutputTest, ReportNeverWritesOverItsInputs) {
  const std::string dir = testutil::make_temp_dir("tp-cli-report-out");
  const std::string run = dir + "/runs/zb";
  auto r = run_command(kTp +
                       " train --pp 2 --schedule zb-h1 --num-microbatches 4 --num-layers 2 "
                       "--hidden-size 32 --num-attention-heads 2 --seq-length 32 "
                       "--micro-batch-size 2 --train-iters 3 --data-path " +
                       std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt --out-dir " + run +
                       " --trace " + run + "/trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string trace = read_file(run + "/trace.json").value();
  const std::string costs = read_file(run + "/costs.json").value();
  r = run_command(kTp + " report " + run);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(run + "/trace.json").value(), trace);
  EXPECT_EQ(read_file(run + "/costs.json").value(), costs);
  for (const char* f : {"report.html", "report.json", "report-trace.json", "report-costs.json"})
    EXPECT_TRUE(fs::exists(run + "/" + f)) << f;
  EXPECT_TRUE(has(r.out, run + "/report-trace.json")) << r.out;
  // Again (its own earlier outputs are not inputs), and into another run's directory.
  EXPECT_EQ(run_command(kTp + " report " + run).exit_code, 0);
  const std::string other = dir + "/other";
  fs::create_directories(other);
  ASSERT_TRUE(write_file(other + "/trace.json", "a training trace\n").ok());
  ASSERT_EQ(run_command(kTp + " report " + run + " --out " + other).exit_code, 0);
  EXPECT_EQ(read_file(other + "/trace.json").value(), "a training trace\n");

  // GPU traces: an input named trace.json in --out stays; one that an output would be (a link
  // named report-trace.json to it) is refused before anything is written.
  const std::string gpu = dir + "/gpu";
  fs::create_directories(gpu);
  fs::copy_file(std::string(TP_SHARED_DIR) + "/data/traces/dp2_rank0.json.gz",
                gpu + "/rank0.json.gz");
  const std::string input = read_file(gpu + "/rank0.json.gz").value();
  r = run_command(kTp + " report " + gpu + "/rank0.json.gz --out " + gpu);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(read_file(gpu + "/rank0.json.gz").value(), input);
  fs::remove(gpu + "/report-trace.json");
  fs::create_symlink(gpu + "/rank0.json.gz", gpu + "/report-trace.json");
  r = run_command(kTp + " report " + gpu + "/rank0.json.gz --out " + gpu + " --quiet");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_TRUE(has(r.err, gpu + "/report-trace.json") && has(r.err, gpu + "/rank0.json.gz") &&
              has(r.err, "--out"))
      << r.err;
  EXPECT_EQ(read_file(gpu + "/rank0.json.gz").value(), input);
}

}  // namespace
}  // namespace tightpipe
