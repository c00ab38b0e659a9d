// Every file tightpipe reads goes through one check (issue 27): a FIFO, /dev/zero, a directory, a
// symbolic link loop or a file over its kind's cap, given where a file is read, is refused at once
// in one line naming the path and what it is (a FIFO used to block the read forever, /dev/zero to
// read 2 GB and then report "out of memory"). Malformed JSON in each JSON input is worded by us,
// naming the file and the position, never nlohmann's "[json.exception...]".
//
// Each command runs under `timeout 60`: one that blocks on a FIFO fails (exit 124) instead of
// hanging the suite.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

using testutil::CommandResult;
using testutil::run_command;

const std::string kTp = "timeout 60 " + testutil::tightpipe_binary();
const std::string kTrace = std::string(TP_SHARED_DIR) + "/data/traces/dp2_rank0.json.gz";
const std::string kText = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
const std::string kTiny =
    " --pp 1 --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 32 "
    "--micro-batch-size 4 --eval-iters 2 --train-iters 1 ";

// One path that is not a readable regular file, and the words its refusal must hold.
struct BadInput {
  std::string path;
  std::string says;
};

// Refused in one line on stderr: a non-zero exit (not the time-out's 124), the path, what it is,
// a hint; no library text.
void expect_refused(const CommandResult& r, const BadInput& in) {
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "timed out (blocked on the input?)";
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(in.path), std::string::npos) << in.path << "\n" << r.err;
  EXPECT_NE(r.err.find(in.says), std::string::npos) << in.says << "\n" << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
  for (const char* raw :
       {"[json.exception", "filesystem error", "internal error", "this is a bug", "out of memory"})
    EXPECT_EQ(r.err.find(raw), std::string::npos) << raw << "\n" << r.err;
}

class CliInputsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testutil::make_temp_dir("tp-cli-inputs"); }

  // The bad inputs for a file named *.ext: a FIFO, /dev/zero, a symbolic link loop, a directory
  // (unless the command reads a directory there) and, when `over_cap` > 0, a sparse file of that
  // many bytes (no disk used).
  std::vector<BadInput> bad_inputs(const std::string& ext, int64_t over_cap, bool directory) {
    const std::string fifo = dir_ + "/fifo" + ext;
    const std::string loop = dir_ + "/loop" + ext;
    std::error_code ec;
    if (!std::filesystem::exists(std::filesystem::symlink_status(fifo, ec))) {
      EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
      EXPECT_EQ(::symlink(("loop" + ext).c_str(), loop.c_str()), 0);  // points at itself
    }
    std::vector<BadInput> out = {{fifo, "is a FIFO (named pipe), not a regular file"},
                                 {"/dev/zero", "is a character device, not a regular file"},
                                 {loop, "is a symbolic link loop"}};
    if (directory) {
      const std::string d = dir_ + "/dir" + ext;
      std::filesystem::create_directories(d, ec);
      out.push_back({d, "is a directory, not a regular file"});
    }
    if (over_cap > 0) {
      const std::string big = dir_ + "/big" + ext;
      EXPECT_TRUE(write_file(big, "").ok());
      EXPECT_EQ(::truncate(big.c_str(), over_cap), 0);
      out.push_back({big, fmt::format("({} bytes), more than the", over_cap)});
    }
    return out;
  }

  std::string dir_;
};

constexpr int64_t kMiB = int64_t{1} << 20;

TEST_F(CliInputsTest, ScheduleCheck) {
  for (const char* ext : {".csv", ".json"}) {
    for (const BadInput& in : bad_inputs(ext, 257 * kMiB, true)) {
      SCOPED_TRACE(in.path);
      expect_refused(run_command(kTp + " schedule --check " + in.path), in);
    }
  }
}

TEST_F(CliInputsTest, SimulateCosts) {
  for (const BadInput& in : bad_inputs(".json", 65 * kMiB, true)) {
    SCOPED_TRACE(in.path);
    expect_refused(run_command(kTp + " simulate --pp 2 --microbatches 4 --costs " + in.path), in);
  }
}

// --schedule takes a file by its .csv/.json name (anything else is a generator's name).
TEST_F(CliInputsTest, SimulateScheduleFile) {
  for (const BadInput& in : bad_inputs(".csv", 257 * kMiB, true)) {
    if (in.path == "/dev/zero") continue;
    SCOPED_TRACE(in.path);
    expect_refused(
        run_command(kTp + " simulate --schedule " + in.path + " --pp 2 --microbatches 4"), in);
  }
}

// A directory is a run directory to `report`; every other kind is refused as a trace.
TEST_F(CliInputsTest, ReportTrace) {
  for (const BadInput& in : bad_inputs(".json", (int64_t{64} << 30) + 1, false)) {
    SCOPED_TRACE(in.path);
    expect_refused(run_command(kTp + " report " + in.path + " --out " + dir_ + "/out"), in);
  }
}

TEST_F(CliInputsTest, ReportScheduleFile) {
  for (const BadInput& in : bad_inputs(".csv", 257 * kMiB, true)) {
    SCOPED_TRACE(in.path);
    expect_refused(run_command(kTp + " report " + kTrace + " --pp 1 --schedule-file " + in.path +
                               " --out " + dir_ + "/out"),
                   in);
  }
}

// A run directory whose timeline is a FIFO: the report says so (the warnings under the error
// line name the file) instead of blocking.
TEST_F(CliInputsTest, ReportRunDirWithAFifoTimeline) {
  const std::string run = dir_ + "/run";
  std::filesystem::create_directories(run);
  ASSERT_EQ(::mkfifo((run + "/timeline_rank0.jsonl").c_str(), 0600), 0);
  const CommandResult r = run_command(kTp + " report " + run + " --out " + dir_ + "/out");
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "timed out (blocked on the FIFO?)";
  EXPECT_NE(r.err.find("'" + run + "/timeline_rank0.jsonl' is a FIFO (named pipe)"),
            std::string::npos)
      << r.err;
}

// Data inputs: train's --data-path and preprocess's --input (both checked before, but a symbolic
// link loop was "does not exist"); the tokenizer files, which were read without the check.
TEST_F(CliInputsTest, TrainAndPreprocessInputs) {
  for (const BadInput& in : bad_inputs(".txt", 0, false)) {
    SCOPED_TRACE(in.path);
    expect_refused(run_command(kTp + " train" + kTiny + "--data-path " + in.path), in);
    expect_refused(run_command(kTp + " data preprocess --tokenizer-type ByteTokenizer --input " +
                               in.path + " --output-prefix " + dir_ + "/p"),
                   in);
  }
  ASSERT_TRUE(write_file(dir_ + "/vocab.json", "{\"a\": 0}").ok());
  ASSERT_TRUE(write_file(dir_ + "/merges.txt", "#version: 0.2\n").ok());
  const std::string pre = kTp + " data preprocess --input " + kText + " --output-prefix " + dir_ +
                          "/p --tokenizer-type ";
  for (const BadInput& in : bad_inputs(".json", 1025 * kMiB, true)) {
    SCOPED_TRACE(in.path);
    expect_refused(run_command(pre + "GPT2BPETokenizer --vocab-file " + in.path + " --merge-file " +
                               dir_ + "/merges.txt"),
                   in);
    expect_refused(run_command(pre + "GPT2BPETokenizer --vocab-file " + dir_ +
                               "/vocab.json --merge-file " + in.path),
                   in);
    expect_refused(run_command(pre + "SentencePieceTokenizer --tokenizer-model " + in.path), in);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/p_text_document.bin"));
}

TEST_F(CliInputsTest, TrainLoad) {
  const std::string loop = dir_ + "/ckpt_loop";
  ASSERT_EQ(::symlink("ckpt_loop", loop.c_str()), 0);
  expect_refused(run_command(kTp + " train" + kTiny + "--data-path " + kText + " --load " + loop),
                 {loop, "is a symbolic link loop"});
  // A checkpoint whose manifest is a FIFO: refused, not read.
  const std::string ck = dir_ + "/ck";
  std::filesystem::create_directories(ck);
  ASSERT_EQ(::mkfifo((ck + "/manifest.txt").c_str(), 0600), 0);
  const CommandResult r =
      run_command(kTp + " train" + kTiny + "--data-path " + kText + " --load " + ck);
  EXPECT_NE(r.exit_code, 0) << r.err;
  EXPECT_NE(r.exit_code, 124) << "timed out (blocked on the FIFO?)";
}

// Malformed JSON in each JSON input: our words, the file and the position; no nlohmann tag.
TEST_F(CliInputsTest, MalformedJsonNamesTheFile) {
  const std::string bad = dir_ + "/bad.json";
  ASSERT_TRUE(write_file(bad, "{\"ranks\": 2,\n  \"stages\": oops}\n").ok());
  const std::string where = "not valid JSON at line 2, column";
  for (const std::string& cmd :
       {" schedule --check " + bad, " simulate --pp 2 --microbatches 4 --costs " + bad,
        " simulate --schedule " + bad + " --pp 2 --microbatches 4",
        " report " + kTrace + " --pp 1 --schedule-file " + bad + " --out " + dir_ + "/out"}) {
    SCOPED_TRACE(cmd);
    expect_refused(run_command(kTp + cmd), {bad, where});
  }
  // A run directory's timeline with a bad line (not the last): the file and line, our words.
  const std::string run = dir_ + "/run";
  std::filesystem::create_directories(run);
  ASSERT_TRUE(write_file(run + "/timeline_rank0.jsonl", "{\"kind\": nope}\n{}\n").ok());
  const CommandResult r = run_command(kTp + " report " + run + " --out " + dir_ + "/out");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find(run + "/timeline_rank0.jsonl:1: not a JSON event: not valid JSON at line "
                             "1, column"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("[json.exception"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tightpipe
