// Data parallel x pipeline parallel on threads (docs/data_parallel.md): DP replicas of a PP-rank
// pipeline, each on its own slice of the global batch, train as one rank does on the whole
// global batch (--pp 1 --num-microbatches DP x m): the loss and gradient norm of every step and
// the final weights within 1e-6 relative, for every schedule. A resume at the same DP x PP equals
// the straight run exactly; bad DP x PP shapes and a checkpoint of another DP size are refused,
// unless --allow-other-data-parallel-size.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "data_parallel_util.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/trainer.h"
#include "tiny_train.h"

namespace tightpipe {
namespace {

// 5 steps of the tiny model, checkpointed at the end; eval off (the replicas evaluate alike).
TrainOptions options(const std::string& out, int32_t pp, int32_t dp, int32_t m,
                     const std::string& schedule = "1f1b", int32_t vpp = 0) {
  TrainOptions o = testutil::tiny_train_options(out, schedule, pp, m);
  o.vpp = vpp;
  o.data_parallel_size = dp;
  o.train_iters = 5;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  o.save_dir = out + "/ckpt";
  return o;
}

using testutil::read_metrics;

// `run`'s losses, gradient norms and final weights against the one-rank `ref`.
void expect_trains_as(const TrainOptions& run, const TrainOptions& ref) {
  testutil::expect_trains_as(run.out_dir, run.save_dir, ref.out_dir, ref.save_dir);
}

TEST(DataParallelTest, Dp2TimesPp2AndDp2TimesPp1TrainAsOneRank) {
  const std::string dir = testutil::make_temp_dir("tp-dp");
  const TrainOptions one = options(dir + "/one", 1, 1, 4);
  auto a = run_training(one);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  for (const auto& [pp, dp] : {std::pair{2, 2}, std::pair{1, 2}}) {
    SCOPED_TRACE(fmt::format("dp {} x pp {}", dp, pp));
    const TrainOptions o = options(fmt::format("{}/dp{}pp{}", dir, dp, pp), pp, dp, 2);
    auto s = run_training(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->steps, 5);
    expect_trains_as(o, one);
    const auto summary = nlohmann::json::parse(read_file(o.out_dir + "/summary.json").value());
    EXPECT_EQ(summary["data_parallel_size"], dp);
    // Written once: replica 0's out dir files, one per pipeline rank.
    EXPECT_FALSE(std::filesystem::exists(fmt::format("{}/timeline_rank{}.jsonl", o.out_dir, pp)));
    // --world-size says the same as --data-parallel-size.
    TrainOptions w = options(fmt::format("{}/world{}pp{}", dir, dp, pp), pp, 0, 2);
    w.world_size = dp * pp;
    ASSERT_TRUE(run_training(w).ok());
    const auto mw = read_metrics(w.out_dir), mo = read_metrics(o.out_dir);
    for (const auto& [step, j] : mo) EXPECT_EQ(mw.at(step)["loss"], j["loss"]);
  }
}

TEST(DataParallelTest, EveryScheduleOnDp2TimesPp2TrainsAsOneRank) {
  const std::string dir = testutil::make_temp_dir("tp-dp-sched");
  const TrainOptions one = options(dir + "/one", 1, 1, 8);
  ASSERT_TRUE(run_training(one).ok());
  for (const GeneratorInfo& g : schedule_generators()) {
    SCOPED_TRACE(g.name);
    // DualPipe too: its two copies of a model stage sum their gradients after the replicas did,
    // an order one rank does not use, which the 1e-6 bound covers (docs/schedule_ir.md).
    const int32_t vpp = g.fixed_chunks > 0 ? g.fixed_chunks : (g.takes_chunks ? 2 : 1);
    const TrainOptions o = options(dir + "/" + g.name, 2, 2, 4, g.name, vpp);
    auto s = run_training(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    expect_trains_as(o, one);
  }
  // An auto schedule: replica 0 builds it from its profile steps and every replica switches to it.
  TrainOptions o = options(dir + "/zb-1p", 2, 2, 4, "zb-1p");
  o.auto_schedule_profile_steps = 2;
  auto s = run_training(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->auto_schedule, "zb-1p");
  expect_trains_as(o, one);
}

// --overlap-grad-reduce sums the same values in the same replica order, only earlier and in
// other buckets: the same losses and weights bit for bit as the reduction after the program, for
// a fused-B schedule, a split I/W one, one with two stages per rank and one whose last B of a
// stage sits in an OVERLAP_F_B pair (dualpipev).
TEST(DataParallelTest, OverlappedGradReduceEqualsTheReductionAfterTheProgram) {
  const std::string dir = testutil::make_temp_dir("tp-dp-overlap");
  for (const auto& [sched, vpp] : {std::pair{"1f1b", 1}, std::pair{"zb-h1", 1},
                                   std::pair{"interleaved", 2}, std::pair{"dualpipev", 2}}) {
    SCOPED_TRACE(sched);
    const TrainOptions after = options(fmt::format("{}/{}-after", dir, sched), 2, 2, 4, sched, vpp);
    TrainOptions overlap = options(fmt::format("{}/{}-overlap", dir, sched), 2, 2, 4, sched, vpp);
    overlap.grad_reduce.overlap = true;
    overlap.grad_reduce.bucket_size = 1000;  // several buckets per stage
    ASSERT_TRUE(run_training(after).ok());
    auto s = run_training(overlap);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    const auto ma = read_metrics(after.out_dir), mo = read_metrics(overlap.out_dir);
    ASSERT_EQ(ma.size(), mo.size());
    for (const auto& [step, j] : ma) {
      EXPECT_EQ(mo.at(step)["loss"].get<double>(), j["loss"].get<double>()) << step;
      EXPECT_EQ(mo.at(step)["grad_norm"].get<double>(), j["grad_norm"].get<double>()) << step;
    }
    EXPECT_TRUE(testutil::weights(after.save_dir) == testutil::weights(overlap.save_dir));
  }
  TrainOptions bad = options(dir + "/bad", 2, 2, 4);
  bad.grad_reduce.bucket_size = 0;
  auto r = run_training(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--bucket-size 0: must be in [1, 1073741824]; hint: gradient values per "
            "data-parallel allreduce, e.g. 1048576");
}

// 6 steps straight equal 3 steps stopped by --exit-interval and 3 resumed, bit for bit, on DP 2
// x PP 2: the checkpoint's data position is the global stream's, every replica resumes its slice.
TEST(DataParallelTest, ResumeAtTheSameDataParallelSizeEqualsTheStraightRun) {
  const std::string dir = testutil::make_temp_dir("tp-dp-resume");
  TrainOptions straight = options(dir + "/straight", 2, 2, 2);
  straight.train_iters = 6;
  TrainOptions part1 = options(dir + "/part1", 2, 2, 2);
  part1.train_iters = 6;
  part1.exit_interval = 3;
  TrainOptions part2 = options(dir + "/part2", 2, 2, 2);
  part2.train_iters = 6;
  part2.load_dir = part1.save_dir;
  for (const TrainOptions* o : {&straight, &part1, &part2}) {
    auto s = run_training(*o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->steps, o == &straight ? 6 : 3);
  }
  auto resumed = read_metrics(part1.out_dir);
  for (auto& [k, v] : read_metrics(part2.out_dir)) resumed[k] = v;
  const auto ms = read_metrics(straight.out_dir);
  ASSERT_EQ(resumed.size(), ms.size());
  for (const auto& [step, j] : ms) {
    SCOPED_TRACE(step);
    for (const char* k : {"loss", "grad_norm", "lr"})
      EXPECT_EQ(resumed.at(step)[k].get<double>(), j[k].get<double>()) << k;
  }
  const std::string ca = nn::iteration_dir(straight.save_dir, 6);
  const std::string cb = nn::iteration_dir(part2.save_dir, 6);
  for (const char* f : {"stage-0.ckpt", "stage-1.ckpt", "data_position.json", "parallel.json"})
    EXPECT_TRUE(read_file(ca + "/" + f).value() == read_file(cb + "/" + f).value()) << f;
}

// --allow-other-data-parallel-size: a DP 2 x PP 2 checkpoint (m = 2) after 2 of 4 steps,
// continued at DP 1 x PP 2 with m = 4 (the same global batch of 4 microbatches), trains as the
// straight DP 2 run: the weights, the optimizer state and the data position carried over (the
// steps after the load within 1e-6, the final weights too). And back: DP 1 to DP 2.
TEST(DataParallelTest, OtherDataParallelSizeLoadsWithTheFlag) {
  const std::string dir = testutil::make_temp_dir("tp-dp-other");
  for (const auto& [from, to] : {std::pair{2, 1}, std::pair{1, 2}}) {
    SCOPED_TRACE(fmt::format("dp {} -> dp {}", from, to));
    const std::string sub = fmt::format("{}/dp{}to{}", dir, from, to);
    TrainOptions straight = options(sub + "/straight", 2, from, 4 / from);
    straight.train_iters = 4;
    TrainOptions part1 = options(sub + "/part1", 2, from, 4 / from);
    part1.train_iters = 4;
    part1.exit_interval = 2;
    TrainOptions part2 = options(sub + "/part2", 2, to, 4 / to);
    part2.train_iters = 4;
    part2.load_dir = part1.save_dir;
    ASSERT_TRUE(run_training(straight).ok());
    ASSERT_TRUE(run_training(part1).ok());
    auto refused = run_training(part2);
    ASSERT_FALSE(refused.ok()) << "another DP size without the flag";
    EXPECT_NE(refused.status().message().find("--allow-other-data-parallel-size"),
              std::string::npos)
        << refused.status().to_string();
    part2.allow_other_data_parallel_size = true;
    std::vector<std::string> lines;
    part2.log = [&](const std::string& l) { lines.push_back(l); };
    auto s = run_training(part2);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->steps, 2);
    const std::string said =
        fmt::format("saved at data-parallel size {}, continuing at {}", from, to);
    EXPECT_EQ(
        std::count_if(lines.begin(), lines.end(),
                      [&](const std::string& l) { return l.find(said) != std::string::npos; }),
        1);
    const auto mr = read_metrics(part2.out_dir), ms = read_metrics(straight.out_dir);
    ASSERT_EQ(mr.size(), 2u);
    for (const auto& [step, j] : mr) {
      SCOPED_TRACE(step);
      for (const char* k : {"loss", "grad_norm"}) {
        const double want = ms.at(step)[k].get<double>();
        EXPECT_NEAR(j[k].get<double>(), want, 1e-6 * std::fabs(want)) << k;
      }
    }
    EXPECT_LT(
        testutil::relative(testutil::weights(part2.save_dir), testutil::weights(straight.save_dir)),
        1e-6);
  }
}

TEST(DataParallelTest, BadShapesAndAnotherDataParallelSizeAreRefused) {
  const std::string dir = testutil::make_temp_dir("tp-dp-bad");
  TrainOptions o = options(dir + "/bad", 2, 0, 2);
  o.world_size = 3;
  auto r = run_training(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--world-size 3 is not divisible by --pp 2: every data-parallel replica needs all "
            "--pp pipeline ranks; hint: start --pp x --data-parallel-size ranks (--world-size, "
            "or --data-parallel-size alone)");
  o.world_size = 4;
  o.data_parallel_size = 3;
  r = run_training(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--data-parallel-size 3 disagrees with --world-size 4 / --pp 2 = 2; hint: drop "
            "--data-parallel-size (it is the world size / --pp) or start 6 ranks");

  o.world_size = 0;
  o.pp = 1 << 20;
  o.data_parallel_size = 4096;
  r = run_training(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "--pp 1048576 x --data-parallel-size 4096 = 4294967296 ranks: must be at most 4096; "
            "hint: fewer pipeline ranks or replicas");

  // A checkpoint of DP 2 loaded by DP 1 (and the other way round) names both sizes.
  TrainOptions dp2 = options(dir + "/dp2", 2, 2, 2);
  dp2.train_iters = 2;
  ASSERT_TRUE(run_training(dp2).ok());
  TrainOptions dp1 = options(dir + "/dp1", 2, 1, 2);
  dp1.train_iters = 4;
  dp1.load_dir = dp2.save_dir;
  r = run_training(dp1);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("trained with data-parallel size 2 but this run has "
                                      "data-parallel size 1"),
            std::string::npos)
      << r.status().to_string();
  dp1.load_dir.clear();
  dp1.train_iters = 2;
  ASSERT_TRUE(run_training(dp1).ok());
  TrainOptions back = options(dir + "/back", 2, 2, 2);
  back.train_iters = 4;
  back.load_dir = dp1.save_dir;
  r = run_training(back);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("trained with data-parallel size 1 but this run has "
                                      "data-parallel size 2"),
            std::string::npos)
      << r.status().to_string();
}

}  // namespace
}  // namespace tightpipe
