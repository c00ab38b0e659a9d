// run_training end to end on threads: real and emulated compute, metrics, summary, trace.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/trainer.h"

namespace tightpipe {
namespace {

TrainOptions tiny(const std::string& out) {
  TrainOptions o;
  o.model.num_layers = 4;
  o.model.hidden_size = 32;
  o.model.num_heads = 2;
  o.model.seq_length = 32;
  o.model.micro_batch_size = 4;
  o.schedule = "1f1b";
  o.pp = 2;
  o.microbatches = 4;
  o.train_iters = 6;
  o.lr.lr = 3e-3f;
  o.data.path = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  o.out_dir = out;
  o.trace_path = out + "/trace.json";
  o.eval_iters = 2;
  o.progress = false;
  return o;
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_file(path).value());
}

TEST(TrainIntegrationTest, RealComputeWritesMetricsSummaryAndTrace) {
  const std::string out = testutil::make_temp_dir("tp-train");
  for (const char* sched : {"zb-v", "interleaved"}) {
    TrainOptions o = tiny(out);
    o.schedule = sched;
    if (std::string(sched) == "interleaved") o.vpp = 2;
    auto s = run_training(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->steps, 6);
    EXPECT_NEAR(s->final_loss, std::log(256.0), 1.0);
    EXPECT_GT(s->final_val_loss, 0);
    auto sum = read_json(out + "/summary.json");
    for (const char* k : {"measured_bubble_ratio", "predicted_bubble_ratio", "tokens_per_s",
                          "measured_bubble_ratio_per_rank", "predicted_bubble_ratio_per_rank",
                          "measured_peak_activation_bytes_per_rank", "measured_costs"})
      EXPECT_TRUE(sum.contains(k)) << k;
    EXPECT_GE(sum["measured_bubble_ratio"].get<double>(), 0.0);
    EXPECT_LT(sum["measured_bubble_ratio"].get<double>(), 1.0);
    EXPECT_GT(sum["measured_peak_activation_bytes_per_rank"][0].get<double>(), 0.0);
    // One metrics line per step, with the fields users read.
    auto lines = split(read_file(out + "/metrics.jsonl").value(), '\n');
    int n = 0;
    for (const auto& l : lines) {
      if (l.empty()) continue;
      auto j = nlohmann::json::parse(l);
      EXPECT_TRUE(j.contains("step") && j.contains("loss") && j.contains("tokens_per_s"));
      ++n;
    }
    EXPECT_EQ(n, 6);
    auto trace = read_json(out + "/trace.json");
    std::set<int> pids;
    for (const auto& e : trace["traceEvents"]) pids.insert(e["pid"].get<int>());
    EXPECT_EQ(pids.size(), 2u);
    EXPECT_TRUE(std::filesystem::exists(out + "/timeline_rank1.jsonl"));
  }
}

// Emulated compute, p = 4, m = 8, F = I = W = 8 ms per rank: every schedule's measured bubble is
// within 2 points of the simulator's (fed the run's measured per-action costs), and that
// prediction is REFERENCE.md's (bubble % of the §2 table).
TEST(TrainIntegrationTest, EmulatedBubbleMatchesPredictionForEverySchedule) {
  struct Case {
    const char* schedule;
    int v;
    double reference;  // REFERENCE.md §2 bubble ratio
  } cases[] = {{"gpipe", 1, 0.273}, {"1f1b", 1, 0.273}, {"interleaved", 2, 0.158},
               {"looped-bfs", 2, 0.158}, {"zb-h1", 1, 0.111}, {"zb-h2", 1, 0.111},
               {"zb-v", 2, 0.059}};
  for (const auto& c : cases) {
    const std::string out = testutil::make_temp_dir("tp-emu");
    TrainOptions o = tiny(out);
    o.model.num_layers = 8;
    o.schedule = c.schedule;
    o.vpp = c.v;
    o.pp = 4;
    o.microbatches = 8;
    o.exec.emulated = true;
    o.exec.costs = EmulatedCompute::parse("f=8,i=8,w=8,b=16").value();
    o.eval_iters = 0;
    o.train_iters = 5;
    o.trace_path.clear();
    auto s = run_training(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_NEAR(s->predicted_bubble_ratio, c.reference, 0.015) << c.schedule;
    EXPECT_NEAR(s->measured_bubble_ratio, s->predicted_bubble_ratio, 0.02) << c.schedule;
  }
}

TEST(TrainIntegrationTest, InvalidCombinationsFailBeforeWork) {
  const std::string out = testutil::make_temp_dir("tp-bad");
  TrainOptions o = tiny(out);
  o.schedule = "zb-v";
  o.vpp = 3;
  auto s = run_training(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--vpp 3"), std::string::npos) << s.status().message();
  o = tiny(out);
  o.pp = 8;  // 8 stages, 4 layers
  s = run_training(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("--num-layers"), std::string::npos) << s.status().message();
  // A schedule file whose shape disagrees with the flags.
  o = tiny(out);
  ASSERT_TRUE(write_file(out + "/s.csv",
                         to_csv(generate_schedule("1f1b", {.ranks = 2, .microbatches = 3}).value()))
                  .ok());
  o.schedule = out + "/s.csv";
  s = run_training(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("the file has 2 ranks and 3 microbatches"), std::string::npos)
      << s.status().message();
  EXPECT_NE(s.status().message().find("hint"), std::string::npos);
  o = tiny(out);
  o.data.path = "/nonexistent/x.txt";
  s = run_training(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/x.txt"), std::string::npos) << s.status().message();
}

}  // namespace
}  // namespace tightpipe
