// A dead or stalled peer ends the run on every other rank with a clear error within the timeout:
// nothing hangs. Runs the tightpipe binary as a user would.
#include <gtest/gtest.h>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

using testutil::run_command;

const std::string kTrain =
    testutil::tightpipe_binary() +
    " train --compute emulated --cost f=2,b=4 --num-layers 4 --hidden-size 16 "
    "--num-attention-heads 2 --seq-length 8 --micro-batch-size 2 --num-microbatches 6 "
    "--train-iters 4 --pipeline-timeout 2";

TEST(FailureTest, StalledThreadRankStopsTheOthersWithinTheTimeout) {
  const double t0 = now_seconds();
  auto r = run_command(kTrain + " --pp 3 --schedule 1f1b --debug-fail stall:1:1:8");
  const double elapsed = now_seconds() - t0;
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(elapsed, 15.0) << "a stalled peer must not hang the run";
  // The error names the rank that gave up, the action it waited for and the silent peer.
  EXPECT_NE(r.err.find("waiting for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("from rank 1"), std::string::npos) << r.err;
}

TEST(FailureTest, KilledMpiRankEndsEveryOtherRankWithAnError) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  const double t0 = now_seconds();
  auto r = run_command(
      "mpirun --allow-run-as-root --oversubscribe --enable-recovery -np 3 " + kTrain +
      " --transport mpi --pp 3 --schedule 1f1b --debug-fail exit:1:1");
  const double elapsed = now_seconds() - t0;
  EXPECT_LT(elapsed, 30.0) << "a dead peer must not hang the run";
  const std::string all = r.out + r.err;
  EXPECT_NE(all.find("rank 1: exiting in step 1"), std::string::npos) << all;
  // Both survivors report an error of their own naming the dead peer.
  int errors = 0;
  for (size_t pos = 0; (pos = all.find("tightpipe train: error:", pos)) != std::string::npos; ++pos)
    ++errors;
  EXPECT_GE(errors, 2) << all;
  EXPECT_NE(all.find("rank 1"), std::string::npos) << all;
}

TEST(FailureTest, MpiWorldSizeOtherThanPpStopsEveryRankBeforeWork) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  auto r = run_command("mpirun --allow-run-as-root --oversubscribe -np 2 " + kTrain +
                       " --transport mpi --pp 3");
  const std::string all = r.out + r.err;
  int lines = 0;
  for (size_t pos = 0; (pos = all.find("this MPI job has 2 processes but the pipeline needs 3 ranks",
                                       pos)) != std::string::npos;
       ++pos)
    ++lines;
  EXPECT_EQ(lines, 2) << all;  // one clear line from each process
  EXPECT_NE(all.find("hint: start it with mpirun -np 3"), std::string::npos) << all;
  EXPECT_EQ(all.find("step "), std::string::npos) << "no work may start: " << all;
}

}  // namespace
}  // namespace tightpipe
