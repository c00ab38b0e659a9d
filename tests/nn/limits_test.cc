// Issue 13, the model/training/data inputs: every count has a limit named in one line, a model
// that cannot fit is refused before it is allocated (under a 1.5 GB address-space limit and a
// 10 s deadline), non-finite floats are refused, data inputs that are not regular text files say
// what they are, and what --on-corrupt skip skipped is in the output and summary.json.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "sanitizer.h"
#include "tightpipe/base.h"

namespace tightpipe::testing_nn {
namespace {

using testutil::kBuiltWithSanitizer;

TEST(TrainLimits, EveryCountHasALimitNamedInOneLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"--num-layers 1025", "--num-layers 1025: must be in [1, 1024]"},
      {"--hidden-size 1000000", "--hidden-size 1000000: must be in [1, 65536]"},
      {"--num-attention-heads 2000", "--num-attention-heads 2000: must be in [1, 1024]"},
      {"--seq-length 100000", "--seq-length 100000: must be in [1, 65536]"},
      {"--micro-batch-size 0", "--micro-batch-size 0: must be in [1, 65536]"},
      {"--num-microbatches 70000", "--num-microbatches 70000: must be in [1, 65536]"},
      {"--train-iters 2000000000000", "--train-iters 2000000000000: must be in [1, "},
      {"--eval-iters 4294967297", "--eval-iters 4294967297: must be in [0, 65536]"},
      {"--eval-interval -1", "--eval-interval -1: must be in [0, "},
      {"--save-interval -3", "--save-interval -3: must be in [0, "},
      {"--lr-warmup-iters -1", "--lr-warmup-iters -1: must be in [0, "},
      {"--num-workers 0", "--num-workers 0: must be in [1, 256]"},
      {"--num-workers 1000", "--num-workers 1000: must be in [1, 256]"},
      {"--prefetch 0", "--prefetch 0: must be in [1, 65536]"},
      {"--blas-threads 5000", "--blas-threads 5000: must be in [1, 1024]"},
      {"--recompute-granularity full --recompute-num-layers 0", "--recompute-num-layers 0"},
  };
  for (const auto& [flags, needle] : cases) {
    SCOPED_TRACE(flags);
    expect_one_line_error(run_tightpipe(std::string("train ") + kTiny + " " + flags), 2, needle);
  }
}

TEST(TrainLimits, FloatsMustBeFinite) {
  const std::pair<const char*, const char*> cases[] = {
      {"--weight-decay inf", "--weight-decay inf: must be a finite number >= 0"},
      {"--weight-decay nan", "--weight-decay nan"},
      {"--min-lr -1", "--min-lr -1: must be a finite number in [0, --lr"},
      {"--min-lr nan", "--min-lr nan"},
      {"--pipeline-timeout inf", "--pipeline-timeout inf: must be in (0, 604800]"},
      {"--pipeline-timeout 0", "--pipeline-timeout 0: must be in (0, 604800]"},
      {"--emulate-data-delay-ms nan", "--emulate-data-delay-ms nan"},
  };
  for (const auto& [flags, needle] : cases) {
    SCOPED_TRACE(flags);
    expect_one_line_error(run_tightpipe(std::string("train ") + kTiny + " " + flags), 2, needle);
  }
}

TEST(SampleLimits, TemperatureAndTokens) {
  const std::string dir = fresh_dir("sample_limits");
  // Flags are checked before the checkpoint is read: no checkpoint needed.
  expect_one_line_error(run_tightpipe("sample --load " + dir + " --temperature nan"), 2,
                        "--temperature nan: must be a finite number >= 0");
  expect_one_line_error(run_tightpipe("sample --load " + dir + " --temperature -1"), 2,
                        "--temperature -1");
  expect_one_line_error(run_tightpipe("sample --load " + dir + " --tokens 2000000000"), 2,
                        "--tokens 2000000000: must be in [0, 1000000]");
  expect_one_line_error(run_tightpipe("sample --load " + dir + " --prompt ''"), 2,
                        "--prompt '': must not be empty");
}

// Runs tightpipe with at most `limit_kib` of address space and a `seconds` deadline (exit 124).
RunResult run_limited(const std::string& args, long limit_kib, int seconds) {
  return run_shell("ulimit -v " + std::to_string(limit_kib) + " && exec timeout " +
                   std::to_string(seconds) + " " + kTightpipe + " " + args);
}

// Every model flag that drives memory, at a value within its limit but far beyond 1.5 GB: a
// one-line error naming the flags and the sizes, within 10 s, never std::bad_alloc.
TEST(TrainLimits, HugeModelsAreRefusedBeforeAllocating) {
  if (kBuiltWithSanitizer)
    GTEST_SKIP() << "sanitizers reserve terabytes of address space: ulimit -v breaks";
  constexpr long kLimitKib = 1536 * 1024;  // 1.5 GiB
  const std::string base = "train --pp 1 --eval-iters 0 --train-iters 1 --data-path " + kText;
  const char* cases[] = {
      "--num-layers 2 --hidden-size 65536 --num-attention-heads 1",
      "--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 65536 "
      "--micro-batch-size 1",
      "--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 64 "
      "--micro-batch-size 65536",
      "--num-layers 1024 --hidden-size 1024 --num-attention-heads 8 --seq-length 32 "
      "--micro-batch-size 1",
      "--num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 1024 "
      "--micro-batch-size 64 --num-microbatches 65536",
      "--num-layers 8 --hidden-size 8192 --num-attention-heads 8 --seq-length 32 "
      "--micro-batch-size 1 --pp 4 --schedule 1f1b --num-microbatches 4",
  };
  for (const char* flags : cases) {
    SCOPED_TRACE(flags);
    const double t0 = now_seconds();
    const RunResult r = run_limited(base + " " + flags, kLimitKib, 10);
    EXPECT_LT(now_seconds() - t0, 10.0);
    expect_one_line_error(r, 2, "is available");
    EXPECT_NE(r.output.find("the model needs"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output;
  }
  // A model that fits still trains under the same limit (the check does not refuse everything).
  const RunResult ok = run_limited("train " + kTiny + " --train-iters 2", kLimitKib, 60);
  EXPECT_EQ(ok.code, 0) << ok.output;
}

// Issue 27: --pp 1 --data-parallel-size 48 on threads under a 4 GB address-space limit. Every
// rank maps OpenBLAS's 128 MiB buffer (and a stack): 48 of them do not fit, OpenBLAS retried its
// failed allocation forever and the run livelocked after step 1. Refused before any work, in
// one line with the counts, within seconds.
TEST(TrainLimits, ManyThreadRanksOverTheAddressSpaceAreRefusedNotLivelocked) {
  if (kBuiltWithSanitizer)
    GTEST_SKIP() << "sanitizers reserve terabytes of address space: ulimit -v breaks";
  // The command: the default model (4 x 128, T = 128, B = 8), whose tensors fit easily.
  const std::string run =
      "train --pp 1 --data-parallel-size 48 --train-iters 3 --eval-iters 0 --pipeline-timeout 5 "
      "--data-path " +
      kText;
  const RunResult r = run_limited(run, 4000000, 30);
  ASSERT_NE(r.code, 124) << "timed out (a livelock)\n" << r.output;
  expect_one_line_error(r, 2, "48 BLAS thread(s)");
  EXPECT_NE(r.output.find("the address-space limit (ulimit -v) leaves"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("hint: fewer replicas (--data-parallel-size)"), std::string::npos)
      << r.output;
}

TEST(DataInputs, NotARegularFileSaysWhatItIs) {
  const std::string dir = fresh_dir("data_inputs");
  RunResult r = run_tightpipe("data shard --input /dev/zero --out " + dir + "/o1");
  expect_one_line_error(r, 2, "'/dev/zero' is a character device, not a regular file");
  EXPECT_EQ(r.output.find("does not exist"), std::string::npos) << r.output;
  expect_one_line_error(run_tightpipe("train " + kTiny + " --data-path /dev/zero"), 2,
                        "'/dev/zero' is a character device");

  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line_error(run_tightpipe("data shard --input " + fifo + " --out " + dir + "/o2"), 2,
                        "is a FIFO (named pipe)");
  expect_one_line_error(run_tightpipe("data check --data-path " + fifo), 2,
                        "is a FIFO (named pipe)");

  const std::string empty = dir + "/empty.txt";
  ASSERT_TRUE(write_file(empty, "").ok());
  expect_one_line_error(run_tightpipe("data shard --input " + empty + " --out " + dir + "/o3"), 2,
                        "empty (0 bytes)");
  EXPECT_NE(
      run_tightpipe("data shard --input " + empty + " --out " + dir + "/o3").output.find(empty),
      std::string::npos);

  const std::string binary = dir + "/binary.txt";
  ASSERT_TRUE(write_file(binary, std::string("text\0more", 9)).ok());
  expect_one_line_error(run_tightpipe("data shard --input " + binary + " --out " + dir + "/o4"), 2,
                        "holds a NUL byte at byte offset 4: binary data, not text");

  const std::string empty_dir = dir + "/nothing";
  std::filesystem::create_directories(empty_dir);
  expect_one_line_error(run_tightpipe("data shard --input " + empty_dir + " --out " + dir + "/o5"),
                        1, "holds no regular files");

  expect_one_line_error(
      run_tightpipe("data check --data-path " + kText + " --batch-size 0"), 2,
      "micro_batch_size = 0 (--micro-batch-size, data check --batch-size) is out of range");
  expect_one_line_error(run_tightpipe("data check --data-path " + kText + " --max-batches -1"), 2,
                        "--max-batches -1: must be >= 0");

  const std::string zero_shard = dir + "/zero.tar";
  ASSERT_TRUE(write_file(zero_shard, "").ok());
  r = run_tightpipe("data check --data-path " + zero_shard);  // a stats line, then the error
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("empty file (0 bytes), not a tar archive"), std::string::npos)
      << r.output;
}

// A real shard with one corrupt sample (a token id >= 256): with --on-corrupt skip the run says
// which shard, entry and byte offset it skipped and why, gives the total, and summary.json
// records the count and the reasons.
TEST(DataInputs, SkippedSamplesAreReported) {
  const std::string dir = fresh_dir("skips");
  std::string text;
  for (int i = 0; i < 40 * 32; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  ASSERT_TRUE(write_file(dir + "/in.txt", text).ok());
  RunResult w = run_tightpipe("data shard --input " + dir + "/in.txt --out " + dir +
                              "/shards --seq-length 31 --samples-per-shard 100");
  ASSERT_EQ(w.code, 0) << w.output;
  const std::string shard = dir + "/shards/shard-000000.tar";
  std::string bytes = *read_file(shard);
  // Each sample: a .tokens entry (512-byte header + 64 bytes padded to 512) and a .json entry
  // (512 + 512). The high byte of sample 3's first token: id >= 256. 10 steps of 2 rows take 20
  // of the 36 training samples (one epoch): the bad one is met once.
  const size_t at = 3 * 2048 + 512 + 1;
  ASSERT_LT(at, bytes.size());
  bytes[at] = static_cast<char>(0x7f);
  ASSERT_TRUE(write_file(shard, bytes).ok());

  const std::string args =
      "train --pp 1 --num-layers 1 --hidden-size 16 --num-attention-heads 2 "
      "--seq-length 31 --micro-batch-size 2 --train-iters 10 --eval-iters 0 "
      "--data-path " +
      shard + " --out-dir " + dir + "/out";
  RunResult fail = run_tightpipe(args);
  EXPECT_NE(fail.code, 0) << fail.output;  // --on-corrupt fail, the default
  RunResult r = run_tightpipe(args + " --on-corrupt skip");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("data: skipped (--on-corrupt skip): shard '" + shard +
                          "': entry '000000003.tokens' at byte offset 6144: token"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("data: skipped 1 corrupt shard(s)/sample(s)"), std::string::npos)
      << r.output;
  const auto j = nlohmann::json::parse(*read_file(dir + "/out/summary.json"));
  ASSERT_TRUE(j.contains("data_skipped")) << j.dump(2);
  EXPECT_EQ(j["data_skipped"]["count"], 1);
  EXPECT_EQ(j["data_skipped"]["not_listed"], 0);
  ASSERT_EQ(j["data_skipped"]["reasons"].size(), 1u);
  EXPECT_NE(j["data_skipped"]["reasons"][0].get<std::string>().find("000000003.tokens"),
            std::string::npos);
}

}  // namespace
}  // namespace tightpipe::testing_nn
