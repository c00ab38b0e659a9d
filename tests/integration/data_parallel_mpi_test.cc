// Data parallel x pipeline parallel on MPI processes, run as a user would (mpirun + the CLI):
// DP 2 x PP 2 on 4 processes, DP 2 x PP 1 on 2 and DP 4 x PP 1 on 4 train 5 steps as one rank
// does on the whole global batch (--pp 1 --num-microbatches 4, threads): losses, gradient norms
// and final weights within 1e-6 relative, also with --overlap-grad-reduce. The gradients are
// summed with MPI_Iallreduce on the data-parallel communicators (MPI_Comm_split). A process count
// that --pp does not divide is refused on every process.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data_parallel_util.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/host.h"

namespace tightpipe {
namespace {

using testutil::run_command;

const std::string kTrain = fmt::format(
    "{} train --num-layers 4 --hidden-size 32 --num-attention-heads 2 --seq-length 32 "
    "--micro-batch-size 4 --train-iters 5 --lr 3e-3 --data-path {}/data/tinyshakespeare.txt",
    testutil::tightpipe_binary(), TP_SHARED_DIR);
const std::string kMpirun = "mpirun --allow-run-as-root --oversubscribe";

TEST(DataParallelMpiTest, Dp2TimesPp2AndDp2TimesPp1TrainAsOneRank) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  const std::string dir = testutil::make_temp_dir("tp-dp-mpi");
  auto one = run_command(fmt::format(
      "{} --pp 1 --num-microbatches 4 --out-dir {}/one --save {}/one/ckpt", kTrain, dir, dir));
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  // m microbatches per replica: always a global batch of 4. DP 4 x PP 1 sums 4 replicas with
  // MPI_Iallreduce in the library's order: within 1e-6, not bit for bit (docs/data_parallel.md).
  struct Case {
    int np, pp, m;
    const char* extra;
  };
  for (const Case& c :
       {Case{4, 2, 2, ""}, Case{2, 1, 2, ""}, Case{4, 1, 1, ""},
        Case{4, 2, 2, " --schedule zb-h1 --overlap-grad-reduce --bucket-size 5000"}}) {
    SCOPED_TRACE(fmt::format("-np {} --pp {}{}", c.np, c.pp, c.extra));
    const std::string out = fmt::format("{}/np{}pp{}{}", dir, c.np, c.pp, *c.extra ? "o" : "");
    auto r = run_command(fmt::format(
        "{} -np {} {} --transport mpi --pp {} --num-microbatches {} --out-dir {} --save {}/ckpt{}",
        kMpirun, c.np, kTrain, c.pp, c.m, out, out, c.extra));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(
        r.out.find(fmt::format("data-parallel {} (global batch 4 microbatches)", c.np / c.pp)),
        std::string::npos)
        << r.out;
    testutil::expect_trains_as(out, out + "/ckpt", dir + "/one", dir + "/one/ckpt");
  }
  // The DP 2 x PP 2 checkpoint goes on at DP 1 (threads) only with the flag.
  const std::string more = fmt::format("{} --pp 2 --num-microbatches 4 --train-iters 7 --load {}",
                                       kTrain, dir + "/np4pp2/ckpt");
  auto refused = run_command(more);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("hint: resume with 2 x --pp ranks"), std::string::npos) << refused.err;
  auto allowed = run_command(more + " --allow-other-data-parallel-size");
  ASSERT_EQ(allowed.exit_code, 0) << allowed.out << allowed.err;
  EXPECT_NE((allowed.out + allowed.err).find("saved at data-parallel size 2, continuing at 1"),
            std::string::npos)
      << allowed.out << allowed.err;
}

// --enable-optimizer-post-validation on MPI processes: DP 2 x PP 2 and PP 4 (zb-h2), each with
// no step needing clipping (--clip-grad 100) and with every step needing it (0.5: undone, redone
// clipped, the next program replayed), train bit for bit as the synchronous run: the same
// losses and gradient norms per step and the same checkpoint bytes.
TEST(DataParallelMpiTest, PostValidatedStepsEqualTheSynchronousOnes) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  const std::string dir = testutil::make_temp_dir("tp-pv-mpi");
  struct Case {
    int np, pp;
    const char* clip;
  };
  for (const Case& c : {Case{4, 2, "100"}, Case{4, 2, "0.5"}, Case{4, 4, "0.5"}}) {
    SCOPED_TRACE(fmt::format("-np {} --pp {} --clip-grad {}", c.np, c.pp, c.clip));
    std::string outs[2];
    for (int pv = 0; pv < 2; ++pv) {
      outs[pv] = fmt::format("{}/np{}pp{}c{}{}", dir, c.np, c.pp, c.clip, pv);
      auto r = run_command(fmt::format(
          "{} -np {} {} --transport mpi --pp {} --schedule zb-h2 --num-microbatches {} "
          "--clip-grad {} --out-dir {} --save {}/ckpt{}",
          kMpirun, c.np, kTrain, c.pp, 2 * c.pp, c.clip, outs[pv], outs[pv],
          pv ? " --enable-optimizer-post-validation --post-validation-stable-steps 0" : ""));
      ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
      EXPECT_EQ(r.out.find("post-validation: step") != std::string::npos,
                pv == 1 && std::string(c.clip) == "0.5")
          << r.out;
    }
    auto metrics = [](const std::string& out) {
      std::vector<std::pair<double, double>> v;
      for (const auto& l : split(read_file(out + "/metrics.jsonl").value(), '\n')) {
        if (l.empty()) continue;
        const auto j = nlohmann::json::parse(l);
        v.emplace_back(j["loss"].get<double>(), j["grad_norm"].get<double>());
      }
      return v;
    };
    EXPECT_EQ(metrics(outs[0]), metrics(outs[1]));
    auto diff = run_command(fmt::format("diff -r {}/ckpt {}/ckpt", outs[0], outs[1]));
    EXPECT_EQ(diff.exit_code, 0) << diff.out << diff.err;
  }
}

TEST(DataParallelMpiTest, ProcessCountNotDivisibleByPpIsRefused) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  auto r = run_command(
      fmt::format("{} -np 3 {} --transport mpi --pp 2 --num-microbatches 2", kMpirun, kTrain));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("the MPI world size (mpirun -np) 3 is not divisible by --pp 2"),
            std::string::npos)
      << r.out << r.err;
}

// Issue 27: mpirun -np 2 --bind-to core gives each process a core of its own. The run counts the
// cores of both processes (each sees one in its affinity mask), not one core for two ranks: no
// oversubscription note, and summary.json says 2 cores.
TEST(DataParallelMpiTest, RanksBoundToTheirOwnCoresAreNotOversubscribed) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  if (usable_cores().count() < 2) GTEST_SKIP() << "fewer than 2 cores";
  const std::string out = testutil::make_temp_dir("tp-dp-mpi-bound") + "/run";
  auto r = run_command(fmt::format(
      "{} --bind-to core -np 2 {} --transport mpi --pp 2 --num-microbatches 2 --num-workers 1 "
      "--train-iters 2 --out-dir {}",
      kMpirun, kTrain, out));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ((r.out + r.err).find("oversubscribed"), std::string::npos) << r.out << r.err;
  EXPECT_EQ((r.out + r.err).find("computing rank thread(s)"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(*read_file(out + "/summary.json"));
  EXPECT_EQ(j["cpu"]["cores"], 2) << j["cpu"].dump();
  EXPECT_EQ(j["cpu"]["oversubscribed"], false) << j["cpu"].dump();
}

}  // namespace
}  // namespace tightpipe
