// A dead or stalled peer ends the run on every other rank with a clear error within the timeout:
// nothing hangs. The failures come from outside the library: a fault-injecting Transport
// decorator (tests/testutil/fault_transport.h) put into the run through WorldOptions::wrap,
// in-process on threads and, for MPI, in fault_train started under mpirun.
#include <gtest/gtest.h>

#include "fault_transport.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/trainer.h"
#include "tiny_train.h"

namespace tightpipe {
namespace {

using testutil::run_command;

// In 1F1B with p = 3 and m = 6, rank 1 sends 12 messages per step (6 activations, 6 gradients):
// failing at its 19th send is halfway through step 1.
constexpr int64_t kHalfwayThroughStep1 = 18;

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; pos += what.size()) ++n;
  return n;
}

TEST(FailureTest, StalledThreadRankStopsTheOthersWithinTheTimeout) {
  TrainOptions o = testutil::tiny_emulated_options(3);
  testutil::FaultOptions fault;
  fault.rank = 1;
  fault.after_sends = kHalfwayThroughStep1;
  fault.kind = testutil::FaultKind::kStall;
  fault.stall_s = 8;
  o.world.wrap = testutil::fault_wrapper(fault);
  // The neighbours' own time-outs, not the watchdog (2 x the time-out + 1 s by default), which
  // WatchdogNamesAStuckRank covers: a watchdog limit past the stall.
  o.world.stall_timeout_s = 60;
  const double t0 = now_seconds();
  auto r = run_training(o);
  const double elapsed = now_seconds() - t0;
  ASSERT_FALSE(r.ok()) << "a peer stalled for 8 s past a 2 s time-out";
  EXPECT_LT(elapsed, 15.0) << "a stalled peer must not hang the run";
  // The error is a neighbour's own time-out (not the echo of an abort): it names the rank that
  // gave up, the step, the action it waited for and the silent peer.
  const Status& s = r.status();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
  EXPECT_NE(s.message().find(" step 1 action "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("waiting for"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("from rank 1"), std::string::npos) << s.message();
}

// Data parallel: a rank of one replica stalls (global rank 3 of DP 2 x PP 2, replica 1's last
// stage); its pipeline neighbour times out on the p2p message and the other replica on the
// data-parallel reduction, so every rank of both replicas stops within the timeout.
TEST(FailureTest, StalledRankOfOneReplicaStopsEveryReplica) {
  TrainOptions o = testutil::tiny_emulated_options(2);
  o.data_parallel_size = 2;
  testutil::FaultOptions fault;
  fault.rank = 3;
  fault.after_sends = 6;  // 1F1B, p = 2, m = 6: rank 1 sends 6 gradients per step; in step 1
  fault.kind = testutil::FaultKind::kStall;
  fault.stall_s = 8;
  o.world.wrap = testutil::fault_wrapper(fault);
  const double t0 = now_seconds();
  auto r = run_training(o);
  const double elapsed = now_seconds() - t0;
  ASSERT_FALSE(r.ok()) << "a replica's rank stalled for 8 s past a 2 s time-out";
  EXPECT_LT(elapsed, 15.0) << "a stalled replica must not hang the run";
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().to_string();
}

// Issue 27: a rank stuck for good (here in a send that ignores its time-out; a rank spinning in
// OpenBLAS's retry of a failed allocation is the same to its peers) no longer hangs the run when
// its neighbours have given up: the watchdog (2 x --pipeline-timeout + 1 s) names it, its step and
// its action, and the process exits with that error although the rank's thread never returns.
TEST(FailureTest, WatchdogNamesAStuckRankAndEndsTheRun) {
  const double t0 = now_seconds();
  auto r = run_command("exec timeout 60 " + std::string(TP_BINARY_DIR) +
                       "/tests/integration/fault_train --transport threads --pp 3 --timeout 1 "
                       "--fault stall:1:" +
                       std::to_string(kHalfwayThroughStep1) + ":600");
  const double elapsed = now_seconds() - t0;
  const std::string all = r.out + r.err;
  ASSERT_NE(r.exit_code, 124) << "hung past 60 s: the stuck rank was joined forever\n" << all;
  EXPECT_EQ(r.exit_code, 1) << all;
  EXPECT_LT(elapsed, 20.0) << all;
  EXPECT_EQ(count(r.err, "fault_train: error: "), 1) << all;
  EXPECT_NE(r.err.find("fault_train: error: rank 1 is stuck: no progress for"), std::string::npos)
      << all;
  EXPECT_NE(r.err.find("in step 1, action "), std::string::npos) << all;
  EXPECT_NE(r.err.find("the watchdog's limit is 3 s"), std::string::npos) << all;
}

// The survivors' error lines ("fault_train: error: ..."): one per survivor, each naming the dead
// or silent rank.
void expect_survivor_errors(const std::string& all, int survivors, const std::string& peer) {
  const std::string kError = "fault_train: error: ";
  EXPECT_EQ(count(all, kError), survivors) << all;
  for (size_t pos = 0; (pos = all.find(kError, pos)) != std::string::npos; pos += kError.size()) {
    const std::string line = all.substr(pos, all.find('\n', pos) - pos);
    EXPECT_NE(line.find(peer), std::string::npos) << line;
  }
}

// The job: np processes, --pp pp (data-parallel size np / pp), `extra` fault_train flags.
struct FaultJob {
  int np = 3, pp = 3;
  std::string extra;
};

std::string mpirun_fault_train(const std::string& mpirun_flags, const std::string& fault,
                               const FaultJob& job = {}) {
  return "mpirun --allow-run-as-root --oversubscribe " + mpirun_flags + " -np " +
         std::to_string(job.np) + " " + std::string(TP_BINARY_DIR) +
         "/tests/integration/fault_train --transport mpi --pp " + std::to_string(job.pp) +
         " --timeout 2 --fault " + fault + job.extra;
}

// Runs fault_train under mpirun with `fault`, which ends rank `dead`'s process, and checks what
// such a run must show: no hang, mpirun's non-zero exit status, the dead rank's one line
// (`dead_line`) and one error line from each survivor naming it.
void expect_dead_rank_fails_the_job(const std::string& mpirun_flags, const std::string& fault,
                                    const std::string& dead_line, const FaultJob& job = {},
                                    int dead = 1) {
  const double t0 = now_seconds();
  auto r = run_command(mpirun_fault_train(mpirun_flags, fault, job));
  const double elapsed = now_seconds() - t0;
  const std::string all = r.out + r.err;
  EXPECT_LT(elapsed, 30.0) << "a dead peer must not hang the run";
  EXPECT_NE(r.exit_code, 0) << "mpirun " << mpirun_flags << " must fail a job whose ranks failed\n"
                            << all;
  EXPECT_EQ(count(all, dead_line), 1) << all;
  expect_survivor_errors(all, job.np - 1, "rank " + std::to_string(dead));
}

TEST(FailureTest, KilledMpiRankEndsEveryOtherRankWithAnError) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  // Rank 1 ends its process with status 0 and without MPI_Finalize. With
  // orte_allowed_exit_without_sync that alone does not make mpirun stop the job, so the survivors
  // run into their time-outs and report; the first survivor to exit with status 1 then makes
  // mpirun stop the job and exit non-zero (fail_launched_job first gives the other survivor time
  // to report).
  expect_dead_rank_fails_the_job("--mca orte_allowed_exit_without_sync 1",
                                 "kill:1:" + std::to_string(kHalfwayThroughStep1) + ":0",
                                 "rank 1: killed after 18 sends");
}

// Issue 13 item 6: under --enable-recovery mpirun keeps the survivors alive when a rank dies, so
// they report, but it exits 0 whatever they do (non-zero exit, MPI_Abort); fail_launched_job
// makes it exit non-zero after both survivors printed their line.
TEST(FailureTest, KilledMpiRankUnderRecoveryFailsTheJob) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  expect_dead_rank_fails_the_job("--enable-recovery",
                                 "sigkill:1:" + std::to_string(kHalfwayThroughStep1),
                                 "rank 1: SIGKILL after 18 sends");
}

// Issue 19: a replica that dies. DP 2 x PP 2 on 4 processes with real compute (so the replicas
// reduce gradients with MPI_Iallreduce on their data-parallel communicators): global rank 3
// (replica 1's last stage) ends its process mid-step 1 (1F1B, m = 6: it sends 6 gradients a
// step). Its pipeline partner (rank 1) times out on its message, its data-parallel partner
// (rank 2) and replica 0's rank 0 wait in the gradient reduction: all three end with an error
// naming rank 3, no hang; with and without --enable-recovery.
TEST(FailureTest, KilledMpiRankOfOneReplicaEndsEveryOtherReplica) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  const FaultJob job{
      .np = 4,
      .pp = 2,
      .extra = " --data-path " + std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt"};
  {
    SCOPED_TRACE("exit without finalize");
    expect_dead_rank_fails_the_job("--mca orte_allowed_exit_without_sync 1", "kill:3:9:0",
                                   "rank 3: killed after 9 sends", job, 3);
  }
  {
    SCOPED_TRACE("--enable-recovery, SIGKILL");
    expect_dead_rank_fails_the_job("--enable-recovery", "sigkill:3:9",
                                   "rank 3: SIGKILL after 9 sends", job, 3);
  }
}

// Without recovery: a silent (stalled) rank is not a dead process for mpirun, so the survivors
// report on their own time-out; the first to exit stops the job, and mpirun exits non-zero
// without waiting for the stalled rank. Both survivors report before that.
TEST(FailureTest, StalledMpiRankFailsTheJobAfterEverySurvivorReported) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  const double t0 = now_seconds();
  auto r = run_command(
      mpirun_fault_train("", "stall:1:" + std::to_string(kHalfwayThroughStep1) + ":20"));
  const double elapsed = now_seconds() - t0;
  const std::string all = r.out + r.err;
  EXPECT_LT(elapsed, 15.0) << "the job must end on the time-out, not after the 20 s stall\n" << all;
  EXPECT_NE(r.exit_code, 0) << all;
  expect_survivor_errors(all, 2, "rank");
}

// An error every rank finds before any work (here a world size --pp does not divide: no whole
// data-parallel replica) fails the job in both modes: each process prints its line, and mpirun
// exits non-zero also under --enable-recovery.
class MpiWorldSizeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(MpiWorldSizeTest, OtherThanPpStopsEveryRankBeforeWork) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  auto r = run_command("mpirun --allow-run-as-root --oversubscribe " + GetParam() + " -np 2 " +
                       testutil::tightpipe_binary() +
                       " train --compute emulated --cost f=2,b=4 --num-layers 4 --hidden-size 16 "
                       "--num-attention-heads 2 --seq-length 8 --micro-batch-size 2 "
                       "--num-microbatches 6 --train-iters 4 --pipeline-timeout 2 --transport mpi "
                       "--pp 3");
  const std::string all = r.out + r.err;
  EXPECT_NE(r.exit_code, 0) << all;
  EXPECT_EQ(count(all, "the MPI world size (mpirun -np) 2 is not divisible by --pp 3"), 2)
      << all;  // one clear line from each process
  EXPECT_NE(all.find("hint: start --pp x --data-parallel-size ranks (mpirun -np)"),
            std::string::npos)
      << all;
  EXPECT_EQ(all.find("step "), std::string::npos) << "no work may start: " << all;
  EXPECT_EQ(all.find("tightpipe: note:"), std::string::npos) << all;
}

INSTANTIATE_TEST_SUITE_P(Launcher, MpiWorldSizeTest,
                         ::testing::Values(std::string(), std::string("--enable-recovery")),
                         [](const auto& info) {
                           return info.param.empty() ? std::string("Default")
                                                     : std::string("EnableRecovery");
                         });

}  // namespace
}  // namespace tightpipe
