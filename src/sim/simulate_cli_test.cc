// `tightpipe simulate` end to end: runs the built binary, checks outputs and exit codes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "layout.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

const std::string kBinary = std::string(TP_BINARY_DIR) + "/tools/tightpipe/tightpipe";

struct CliRun {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string tmp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("tp_sim_cli_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

CliRun run(const std::string& args) {
  const std::string err_file = tmp_path("stderr.txt");
  const std::string cmd = kBinary + " simulate " + args + " 2>" + err_file;
  FILE* p = popen(cmd.c_str(), "r");
  CliRun r{-1, "", ""};
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  auto e = read_file(err_file);
  if (e.ok()) r.err = *e;
  return r;
}

class SimulateCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kBinary)) GTEST_SKIP() << "no binary at " << kBinary;
  }
};

TEST_F(SimulateCli, JsonMatchesReference) {
  CliRun r = run("--schedule 1f1b --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 33);
  EXPECT_EQ(j["per_rank"][0]["peak_activations"], 4);
  EXPECT_EQ(j["schedule"], "1f1b");
}

// Both measures of the bubble, and which one bubble_ratio is (docs/simulate_json.md): ZB-H2 with
// F = I = W has REFERENCE.md's makespan bubble 11.1% and no bubble inside any rank's span.
TEST_F(SimulateCli, JsonHasBothBubbleMeasures) {
  CliRun r = run("--schedule zb-h2 --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"bubble_ratio", "bubble_measure", "max_span", "span_bubble_ratio",
                          "span_bubble_percent", "span_bubble_definition"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["bubble_measure"], "makespan");
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 27);
  EXPECT_DOUBLE_EQ(j["bubble_ratio"].get<double>(), 3.0 / 27.0);
  EXPECT_DOUBLE_EQ(j["max_span"].get<double>(), 24);
  EXPECT_EQ(j["span_bubble_ratio"].get<double>(), 0);
  for (const auto& rank : j["per_rank"]) {
    EXPECT_DOUBLE_EQ(rank["span"].get<double>(), 24);
    EXPECT_NEAR(rank["span_bubble_ratio"].get<double>(), 0, 1e-12);
  }
  CliRun t = run("--schedule zb-h2 --pp 4 --microbatches 8 --cost f=1,i=1,w=1");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("bubble 11.1%"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("max span 24 (lower bound 24: within 0.0%)   span bubble 0.0%"),
            std::string::npos)
      << t.out;
  CliRun c = run("--compare 1f1b,zb-h2 --pp 4 --microbatches 8 --json");
  ASSERT_EQ(c.code, 0) << c.err;
  auto k = nlohmann::json::parse(c.out);
  EXPECT_EQ(k["results"][0]["bubble_measure"], "makespan");
  EXPECT_DOUBLE_EQ(k["results"][0]["span_bubble_ratio"].get<double>(), 9.0 / 33.0);  // 1F1B
  EXPECT_EQ(k["results"][1]["span_bubble_ratio"].get<double>(), 0);
}

// --optimizer-post-validation (and the zero-bubble runtime's spelling): back-to-back iterations
// overlap, so ZB-H2 at F = I = W runs at its bubble-free span 3m per step instead of its
// makespan; 1F1B's idle is inside rank 0's span and stays. Without the flag the steady-state
// step is the makespan.
TEST_F(SimulateCli, OptimizerPostValidationPrintsTheSteadyStateStep) {
  for (const char* flag : {"--optimizer-post-validation", "--enable-optimizer-post-validation"}) {
    CliRun r = run(std::string("--schedule zb-h2 --pp 4 --microbatches 8 --cost f=1,i=1,w=1 ") +
                   flag + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["optimizer_post_validation"].get<bool>());
    EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 27);
    EXPECT_NEAR(j["steady_state_step_time"].get<double>(), 24, 1e-9);
  }
  CliRun sync = run("--schedule zb-h2 --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --json");
  ASSERT_EQ(sync.code, 0) << sync.err;
  auto j = nlohmann::json::parse(sync.out);
  EXPECT_FALSE(j["optimizer_post_validation"].get<bool>());
  EXPECT_DOUBLE_EQ(j["steady_state_step_time"].get<double>(), 27);
  CliRun f =
      run("--schedule 1f1b --pp 4 --microbatches 8 --cost f=1,i=1,w=1 "
          "--optimizer-post-validation");
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_NE(f.out.find("steady-state step 33 (optimizer post-validation"), std::string::npos)
      << f.out;
}

// Every simulated schedule is printed next to its shape's lower bound at its memory
// (lower_bound.h): ZB-H1 at F = I = W meets it (3m + p - 1), 1F1B (fused B) is above it.
TEST_F(SimulateCli, PrintsTheLowerBound) {
  CliRun t = run("--schedule zb-h1 --pp 4 --microbatches 8 --cost f=1,i=1,w=1");
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("makespan 27 (lower bound 27: within 0.0%)"), std::string::npos) << t.out;
  CliRun r = run("--schedule 1f1b --pp 4 --microbatches 8 --cost f=1,i=1,w=1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 33);
  EXPECT_DOUBLE_EQ(j["lower_bound_makespan"].get<double>(), 27);
  EXPECT_DOUBLE_EQ(j["gap_to_lower_bound"].get<double>(), 6.0 / 27.0);
  EXPECT_DOUBLE_EQ(j["lower_bound_memory_limit"].get<double>(), 4);
  EXPECT_TRUE(j.contains("lower_bound_span") && j.contains("gap_to_lower_bound_span"));
  CliRun c = run("--compare 1f1b,zb-h1 --pp 4 --microbatches 8");
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_NE(c.out.find("vs bound"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("+22.2%"), std::string::npos) << c.out;
  // zb-opt through the CLI, and its one-line refusal over its size.
  CliRun o = run("--schedule zb-opt --pp 3 --microbatches 4 --cost f=1,i=2,w=1");
  ASSERT_EQ(o.code, 0) << o.err;
  EXPECT_NE(o.out.find("schedule zb-opt"), std::string::npos) << o.out;
  CliRun big = run("--schedule zb-opt --pp 8 --microbatches 8 --cost f=1,i=1,w=1");
  EXPECT_EQ(big.code, 2) << big.out;
  EXPECT_EQ(std::count(big.err.begin(), big.err.end(), '\n'), 1) << big.err;
  EXPECT_NE(big.err.find("at most --pp 4 and --microbatches 6"), std::string::npos) << big.err;
}

// One model check for simulate, plan and train (flag_checks.h): heads that do not divide the
// hidden size are refused by --model as plan and train refuse them, in one line naming both.
TEST_F(SimulateCli, ModelHeadsMustDivideHidden) {
  CliRun r =
      run("--schedule 1f1b --pp 2 --microbatches 4 --model layers=4,hidden=1000,heads=3,seq=64");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("hidden=1000 is not divisible by heads=3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint:"), std::string::npos) << r.err;
  CliRun ok =
      run("--schedule 1f1b --pp 2 --microbatches 4 --model layers=4,hidden=1002,heads=3,seq=64");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

// simulate's numeric flags: NaN, inf, negative and absurd values are one line naming the flag.
TEST_F(SimulateCli, NumericFlagsOutOfRange) {
  for (const char* bad : {"--overlap-fb-factor nan", "--overlap-fb-factor inf",
                          "--overlap-fb-factor -1", "--data-parallel-size 0", "--bucket-size -5",
                          "--model layers=4,hidden=64,heads=4,seq=64,flops=nan",
                          "--model layers=4,hidden=64,heads=4,seq=64,flops=inf",
                          "--cost f=nan,i=1,w=1", "--cost f=1e400,i=1,w=1"}) {
    CliRun r = run(std::string("--schedule 1f1b --pp 2 --microbatches 4 ") + bad);
    EXPECT_EQ(r.code, 2) << bad << "\n" << r.out;
    EXPECT_NE(r.err.find("hint:"), std::string::npos) << bad << "\n" << r.err;
  }
}

TEST_F(SimulateCli, MegatronAliases) {
  CliRun r =
      run("--schedule interleaved --pipeline-model-parallel-size 4 --num-microbatches 8 "
          "--num-virtual-stages-per-pipeline-rank 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 28.5);
  EXPECT_EQ(j["chunks"], 2);
}

TEST_F(SimulateCli, HumanTableTraceAndSvg) {
  const std::string trace = tmp_path("t.json"), svg = tmp_path("t.svg");
  CliRun r =
      run("--schedule zb-v --pp 4 --microbatches 8 --cost f=1,i=1,w=1,comm=0.1 "
          "--comm-mode blocking --trace " +
          trace + " --svg " + svg);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("comm=blocking"), std::string::npos) << r.out;
  auto t = read_file(trace);
  ASSERT_TRUE(t.ok());
  auto j = nlohmann::json::parse(*t);
  int x = 0;
  for (const auto& e : j["traceEvents"]) x += e["ph"] == "X";
  EXPECT_GT(x, 4 * 8 * 2 * 3);  // compute events plus comm
  auto s = read_file(svg);
  ASSERT_TRUE(s.ok());
  EXPECT_NE(s->find("<g class=\"rank\" data-rank=\"3\">"), std::string::npos);
}

TEST_F(SimulateCli, Compare) {
  CliRun r = run("--compare 1f1b,interleaved,zb-h1,zb-v --pp 4 --microbatches 8");
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* s : {"1f1b", "interleaved", "zb-h1", "zb-v", "bubble%", "span%", "28.5", "25.5"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  CliRun j = run("--compare gpipe,zb-h2 --pp 4 --microbatches 8 --json");
  ASSERT_EQ(j.code, 0) << j.err;
  auto parsed = nlohmann::json::parse(j.out);
  ASSERT_EQ(parsed["results"].size(), 2u);
  EXPECT_DOUBLE_EQ(parsed["results"][0]["makespan"].get<double>(), 33);
}

// docs/simulator.md's comparison: name:v items in --compare (one parser with report --what-if).
TEST_F(SimulateCli, CompareTakesChunksPerItem) {
  CliRun r =
      run("--pp 8 --microbatches 32 --cost f=1,i=1,w=1,comm=0.1 "
          "--compare gpipe,1f1b,interleaved:2,zb-h1,zb-h2,zb-v --comm-mode overlap --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["results"].size(), 6u);
  EXPECT_EQ(j["results"][2]["schedule"], "interleaved");
  EXPECT_EQ(j["results"][2]["chunks"], 2);
  CliRun four = run("--pp 4 --microbatches 8 --compare interleaved:4,interleaved --json");
  ASSERT_EQ(four.code, 0) << four.err;
  auto k = nlohmann::json::parse(four.out);
  EXPECT_EQ(k["results"][0]["chunks"], 4);
  EXPECT_EQ(k["results"][1]["chunks"], 2);  // without :v, --vpp or 2
}

TEST_F(SimulateCli, GptModel) {
  CliRun r =
      run("--schedule 1f1b --pp 2 --microbatches 4 --model "
          "layers=4,hidden=256,heads=4,seq=128,flops=1e12 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["time_unit"], "s");
  EXPECT_GT(j["makespan"].get<double>(), 0);
  EXPECT_GT(j["message_bytes"].get<int64_t>(), 0);
  EXPECT_GT(j["per_rank"][0]["peak_bytes"].get<double>(), 0);
}

// --bf16 with --model: 2-byte activations, messages and parameters, which is --model's default
// (Megatron's bf16), so the result is the same; an explicit act_bytes=/param_bytes= other than 2
// is refused naming both; with --cost the flag changes nothing (costs carry their own bytes).
TEST_F(SimulateCli, Bf16) {
  const std::string model =
      "--schedule 1f1b --pp 2 --microbatches 4 --json --model layers=4,hidden=256,heads=4,seq=128,"
      "mbs=2,flops=1e12";
  const CliRun plain = run(model);
  ASSERT_EQ(plain.code, 0) << plain.err;
  const CliRun bf16 = run(model + " --bf16");
  ASSERT_EQ(bf16.code, 0) << bf16.err;
  EXPECT_EQ(bf16.out, plain.out);
  EXPECT_EQ(nlohmann::json::parse(bf16.out)["message_bytes"].get<int64_t>(),
            2 * 4 * int64_t{128} * 2 * 256 * 2);  // 2 ranks x 4 microbatches x F and B, sbh x 2
  const CliRun fp32 = run(model + ",act_bytes=4");
  ASSERT_EQ(fp32.code, 0) << fp32.err;
  EXPECT_EQ(nlohmann::json::parse(fp32.out)["message_bytes"].get<int64_t>(),
            2 * nlohmann::json::parse(bf16.out)["message_bytes"].get<int64_t>());
  for (const char* key : {"act_bytes=4", "param_bytes=4"}) {
    const CliRun bad = run(model + "," + key + " --bf16");
    EXPECT_EQ(bad.code, 2) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
    EXPECT_NE(bad.err.find(std::string("--model ") + key + " with --bf16"), std::string::npos)
        << bad.err;
    EXPECT_NE(bad.err.find("hint:"), std::string::npos) << bad.err;
  }
  const std::string uniform = "--schedule 1f1b --pp 2 --microbatches 4 --json --cost f=1,i=1,w=1";
  EXPECT_EQ(run(uniform + " --bf16").out, run(uniform).out);
}

TEST_F(SimulateCli, PipelineLayoutShownChosenAndChecked) {
  const std::string model = "--model layers=8,hidden=128,heads=4,seq=128,mbs=8,vocab=256 ";
  // No flag: the even split gpt_cost_model uses, written out.
  CliRun even = run("--schedule zb-v --pp 2 --microbatches 8 " + model + "--json");
  ASSERT_EQ(even.code, 0) << even.err;
  auto e = nlohmann::json::parse(even.out);
  EXPECT_EQ(e["layout"], "E,t*2|t*2|t*2|t*2,L");
  CliRun text = run("--schedule zb-v --pp 2 --microbatches 8 " + model);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("layout   E,t*2|t*2|t*2|t*2,L\n"), std::string::npos) << text.out;
  // An explicit layout is costed as given.
  CliRun given = run("--schedule zb-v --pp 2 --microbatches 8 " + model +
                     "--pipeline-layout 'E,t*3|t*2|t*2|t,L' --json");
  ASSERT_EQ(given.code, 0) << given.err;
  auto g = nlohmann::json::parse(given.out);
  EXPECT_EQ(g["layout"], "E,t*3|t*2|t*2|t,L");
  EXPECT_NE(g["makespan"].get<double>(), e["makespan"].get<double>());
  // auto: a valid split of the 8 layers, never slower than the even one.
  CliRun chosen =
      run("--schedule zb-v --pp 2 --microbatches 8 " + model + "--pipeline-layout auto --json");
  ASSERT_EQ(chosen.code, 0) << chosen.err;
  auto a = nlohmann::json::parse(chosen.out);
  const std::vector<int> blocks = testutil::layout_blocks(a["layout"].get<std::string>());
  ASSERT_EQ(blocks.size(), 4u) << a["layout"];
  EXPECT_EQ(blocks[0] + blocks[1] + blocks[2] + blocks[3], 8) << a["layout"];
  EXPECT_LE(a["makespan"].get<double>(), e["makespan"].get<double>());
  EXPECT_LE(a["makespan"].get<double>(), g["makespan"].get<double>());
  // --compare chooses per schedule.
  CliRun cmp =
      run("--pp 2 --microbatches 8 --compare 1f1b,zb-v " + model + "--pipeline-layout auto --json");
  ASSERT_EQ(cmp.code, 0) << cmp.err;
  auto c = nlohmann::json::parse(cmp.out);
  EXPECT_EQ(testutil::layout_blocks(c["results"][0]["layout"].get<std::string>()).size(), 2u);
  EXPECT_EQ(c["results"][1]["layout"], a["layout"]);
  // Costs that know no layers show none.
  CliRun uniform = run("--schedule 1f1b --pp 2 --microbatches 4 --json");
  ASSERT_EQ(uniform.code, 0) << uniform.err;
  EXPECT_FALSE(nlohmann::json::parse(uniform.out).contains("layout"));
}

// Bad input: exit 2 and one line naming the key or file and the value, with a hint.
void expect_usage_error(const std::string& args, std::initializer_list<const char*> parts) {
  CliRun r = run(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char* p : parts) EXPECT_NE(r.err.find(p), std::string::npos) << p << "\n" << r.err;
}

// --host-time-us (issue 49): every engine's F and B take the host time of their kind more, in the
// costs' own unit (with_host_time, one module per stage). 1F1B p = 2, m = 2 under Megatron's
// calls, F 1 ms, B 2 ms, messages 0.5 ms (engine_test's case, without the optimizer): 10.5 ms.
// With f=100 us and b=200 us, by hand: r0 F0 [0,1.1]; {S F0} crosses [1.1,1.6]; r0 F1 [1.6,2.7];
// r1 F0 [1.6,2.7], B0 [2.7,4.9]; r0's {S F1, R B0} meets r1's {S B0, R F1} at 4.9: [4.9,5.4];
// r0 B0 [5.4,7.6]; r1 F1 [5.4,6.5], B1 [6.5,8.7]; {S B1} crosses [8.7,9.2]; r0 B1 [9.2,11.4].
TEST_F(SimulateCli, HostTimeAddsToEveryActionOfItsKind) {
  auto write_table = [](const std::string& name, double f, double b) {
    const std::string path = tmp_path(name);
    const std::string text = fmt::format(
        R"({{"time_unit": "ms", "link": {{"latency": 0.5}}, "stages": [
          {{"stage": 0, "f": {0}, "i": {1}, "w": 0}}, {{"stage": 1, "f": {0}, "i": {1}, "w": 0}}]}})",
        f, b);
    EXPECT_TRUE(write_file(path, text).ok());
    return path;
  };
  const std::string asked = write_table("host_asked.json", 1, 2);
  const std::string raised = write_table("host_raised.json", 1.1, 2.2);
  const std::string base = "--schedule 1f1b --pp 2 --microbatches 2 --json ";
  auto makespan = [&](const std::string& args) {
    CliRun r = run(base + args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
    return r.code == 0 ? nlohmann::json::parse(r.out)["makespan"].get<double>() : -1.0;
  };
  EXPECT_DOUBLE_EQ(makespan("--engine megatron --costs " + asked), 10.5);
  EXPECT_NEAR(makespan("--engine megatron --costs " + asked + " --host-time-us f=100,b=200"), 11.4,
              1e-9);
  // Every engine: the same as a table whose F and B already hold the host time. The keys of
  // actions the schedule does not run (i, w under fused B) change nothing; a module's part is
  // one module's.
  for (const char* engine :
       {"tightpipe", "megatron", "megatron-overlap", "torch", "zb", "deepspeed"}) {
    const std::string e = std::string("--engine ") + engine + " --costs ";
    const double want = makespan(e + raised);
    EXPECT_NEAR(makespan(e + asked + " --host-time-us f=100,b=200"), want, 1e-9) << engine;
    EXPECT_NEAR(makespan(e + asked + " --host-time-us f=60,b=150,i=7,w=9,f_module=40,b_module=50"),
                want, 1e-9)
        << engine;
  }
  // A table in seconds takes it in seconds: the same case in s moves by 0.9 ms, 0.0009 s.
  const std::string seconds = tmp_path("host_seconds.json");
  ASSERT_TRUE(write_file(seconds, R"({"time_unit": "s", "link": {"latency": 0.5}, "stages": [
    {"stage": 0, "f": 1, "i": 2, "w": 0}, {"stage": 1, "f": 1, "i": 2, "w": 0}]})")
                  .ok());
  EXPECT_NEAR(makespan("--engine megatron --costs " + seconds + " --host-time-us f=100,b=200"),
              10.5009, 1e-9);
  CliRun text = run("--schedule 1f1b --pp 2 --microbatches 2 --engine megatron --costs " + asked +
                    " --host-time-us f=100,b=200");
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("host time per action f/i/w/b 0.1/0/0/0.2 ms"), std::string::npos)
      << text.out;
  // Bad input: one line naming the flag, the key or unit and the value, with a hint.
  const std::string with = base + "--engine megatron --costs " + asked + " --host-time-us ";
  expect_usage_error(with + "g=100", {"--host-time-us", "unknown key 'g'", "100", "hint:"});
  expect_usage_error(with + "f=-5", {"--host-time-us", "'f'", "-5", "hint:"});
  expect_usage_error(with + "f=fast", {"--host-time-us", "'f'", "fast", "hint:"});
  expect_usage_error(base + "--cost f=1,i=2,w=0 --host-time-us f=100",
                     {"--host-time-us", "'unit', not a time", "hint:"});
}

// --cores and --core-slowdown (docs/cost_model.md "Shared cores"): 1F1B p = 4, m = 8, F = I = W = 1
// takes 33 with a core per rank; on one core the ranks' whole work, 4 x 8 x 3 = 96, back to back
// (free messages: some rank can always compute). The JSON and the table say the sharing; bad
// values are one line naming the flag.
TEST_F(SimulateCli, SharedCoresStretchTheStep) {
  const std::string base = "--schedule 1f1b --pp 4 --microbatches 8 --cost f=1,i=1,w=1 ";
  CliRun alone = run(base + "--json");
  ASSERT_EQ(alone.code, 0) << alone.err;
  auto ja = nlohmann::json::parse(alone.out);
  EXPECT_FALSE(ja.contains("core_sharing"));
  CliRun one = run(base + "--cores 1 --json");
  ASSERT_EQ(one.code, 0) << one.err;
  auto j = nlohmann::json::parse(one.out);
  EXPECT_NEAR(j["makespan"].get<double>(), 96, 1e-9);
  EXPECT_EQ(j["core_sharing"]["cores"], 1);
  EXPECT_DOUBLE_EQ(j["core_sharing"]["slowdown"].get<double>(), 1.0);
  // Four cores for four ranks share nothing; with two data-parallel replicas in step, eight
  // ranks share them: the step of a compute-bound model (flops=1e9) stretches and the JSON says so.
  CliRun four = run(base + "--cores 4 --json");
  ASSERT_EQ(four.code, 0) << four.err;
  EXPECT_FALSE(nlohmann::json::parse(four.out).contains("core_sharing"));
  const std::string model =
      "--schedule 1f1b --pp 4 --microbatches 8 --model layers=4,hidden=64,heads=4,seq=32,flops=1e9 "
      "--data-parallel-size 2 --json ";
  CliRun dp_alone = run(model);
  CliRun dp = run(model + "--cores 4");
  ASSERT_EQ(dp_alone.code, 0) << dp_alone.err;
  ASSERT_EQ(dp.code, 0) << dp.err;
  auto jd = nlohmann::json::parse(dp.out);
  EXPECT_EQ(jd["core_sharing"]["cores"], 4);
  EXPECT_GT(jd["makespan"].get<double>(),
            nlohmann::json::parse(dp_alone.out)["makespan"].get<double>());
  CliRun table = run(base + "--cores 2 --core-slowdown 1.25");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("cores    the ranks share 2 core(s); each of several computing at once "
                           "1.25x slower"),
            std::string::npos)
      << table.out;
  for (const auto& [flag, want] : std::vector<std::pair<std::string, std::string>>{
           {"--cores -1", "--cores -1: must be 0"},
           {"--core-slowdown 0.5", "--core-slowdown 0.5: must be a finite factor >= 1"}}) {
    CliRun bad = run(base + flag);
    EXPECT_EQ(bad.code, 2) << flag;
    EXPECT_NE(bad.err.find(want), std::string::npos) << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << bad.err;
  }
}

TEST_F(SimulateCli, BadInputExitsTwoWithOneLine) {
  const std::string base = "--schedule 1f1b --pp 4 --microbatches 8 ";
  expect_usage_error(base + "--cost f=1,i=1,w=1,speed=3", {"unknown key 'speed'", "3", "hint"});
  expect_usage_error(base + "--cost f=-1,i=1,w=1", {"'f'", "-1", "hint"});
  expect_usage_error(base + "--cost f=1,i=fast,w=1", {"'i'", "'fast'"});
  expect_usage_error(base + "--costs /nonexistent/costs.json", {"/nonexistent/costs.json", "hint"});
  const std::string bad_json = tmp_path("bad.json");
  ASSERT_TRUE(write_file(bad_json, "{\"stages\": [").ok());
  expect_usage_error(base + "--costs " + bad_json, {bad_json.c_str(), "not valid JSON"});
  const std::string gap = tmp_path("gap.json");
  ASSERT_TRUE(write_file(gap, R"({"stages":[{"stage":0,"f":1,"i":1,"w":1},
      {"stage":1,"f":1,"i":1,"w":1},{"stage":3,"f":1,"i":1,"w":1}]})")
                  .ok());
  expect_usage_error(base + "--costs " + gap, {gap.c_str(), "lacks stage 2"});
  const std::string two = tmp_path("two.json");
  ASSERT_TRUE(write_file(two, R"({"stages":[{"stage":0,"f":1,"i":1,"w":1},
      {"stage":1,"f":1,"i":1,"w":1}]})")
                  .ok());
  expect_usage_error(base + "--costs " + two, {two.c_str(), "2 stage(s)", "has 4", "hint"});
  expect_usage_error(base + "--comm-mode sometimes", {"'sometimes'", "overlap or blocking"});
  expect_usage_error(base + "--recompute half", {"'half'", "none or full"});
  expect_usage_error(base + "--model layers=4,hidden=64", {"'heads'"});
  const std::string gpt = "--model layers=8,hidden=64,heads=4,seq=16 ";
  expect_usage_error(base + gpt + "--pipeline-layout 'E,t*3|t*2|t*2,L'",
                     {"--pipeline-layout", "3 stages", "has 4"});
  expect_usage_error(base + gpt + "--pipeline-layout 'E,t*3|t*2|t*1|t,L'",
                     {"--model layers=8", "places 7 transformer layers", "some are lost", "hint"});
  expect_usage_error(base + gpt + "--pipeline-layout 'E,t*3|t*3|t*2|t*2,L'",
                     {"places 10 transformer layers", "is 8", "some are repeated"});
  expect_usage_error(base + "--pipeline-layout auto", {"--pipeline-layout 'auto'", "--model"});
  expect_usage_error("--schedule zb-auto --pp 4 --microbatches 8 " + gpt + "--pipeline-layout auto",
                     {"--pipeline-layout auto", "zb-auto", "hint"});
  expect_usage_error(
      "--schedule 1f1b --pp 4 --microbatches 8 --model "
      "layers=1,hidden=64,heads=4,seq=16 --pipeline-layout auto",
      {"1 transformer layer(s)", "2 middle stage(s)"});
  expect_usage_error("--schedule nosuch --pp 4 --microbatches 8", {"nosuch"});
  expect_usage_error("--pp 4 --microbatches 8 --compare 1f1b,nosuch:2",
                     {"--compare 'nosuch:2'", "unknown schedule 'nosuch'", "interleaved", "hint"});
  expect_usage_error("--pp 4 --microbatches 8 --compare interleaved:x",
                     {"--compare 'interleaved:x'", "[1, 64]"});
  expect_usage_error("--pp 4 --microbatches 8 --compare zb-v:3", {"'zb-v:3'", "zb-v takes 2"});
  expect_usage_error("--pp 4 --microbatches 8 --compare ,", {"--compare", "no schedule named"});
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// DualPipeV and DualPipe through the CLI: --compare knows both, --cost is per model stage
// (DualPipe's two copies of a stage cost the same), and --overlap-fb-factor prices the pairs.
TEST_F(SimulateCli, DualPipeSchedulesCompareAndOverlap) {
  CliRun r =
      run("--compare 1f1b,dualpipev,dualpipe --pp 4 --microbatches 8 --cost f=1,i=1,w=1 "
          "--json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out)["results"];
  ASSERT_EQ(j.size(), 3u);
  EXPECT_DOUBLE_EQ(j[0]["makespan"].get<double>(), 33);
  // dualpipev: chunks of half a rank (F = 0.5, B = 1, W = 0.5); 2m (F + B) = 24 busy per rank
  // plus (p - 1)(F&B + B - 3W) = 3 (docs/schedule_ir.md).
  EXPECT_DOUBLE_EQ(j[1]["makespan"].get<double>(), 27);
  // dualpipe: every stage id a whole model stage (F = 1, B = 2, W = 1); m (F + B) = 24 busy per
  // rank plus (p/2 - 1)(F&B + B - 3W) = 2.
  EXPECT_DOUBLE_EQ(j[2]["makespan"].get<double>(), 26);
  // Whole-rank activations (one microbatch through one rank's share of the model): 1F1B's rank
  // 0 holds p = 4, DualPipeV p + 1/2, DualPipe p + 1 (DeepSeek's PP + 1).
  EXPECT_DOUBLE_EQ(j[0]["per_rank"][0]["peak_activations"].get<double>(), 4);
  EXPECT_DOUBLE_EQ(j[1]["per_rank"][0]["peak_activations"].get<double>(), 4.5);
  EXPECT_DOUBLE_EQ(j[2]["per_rank"][0]["peak_activations"].get<double>(), 5);
  CliRun x =
      run("--schedule dualpipe --pp 4 --microbatches 8 --cost f=1,i=1,w=1 "
          "--overlap-fb-factor 1 --json");
  ASSERT_EQ(x.code, 0) << x.err;
  EXPECT_LT(nlohmann::json::parse(x.out)["makespan"].get<double>(), 26);
}

TEST_F(SimulateCli, DualPipeBadInputIsOneLine) {
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--schedule dualpipe --pp 4 --microbatches 8 --overlap-fb-factor 1.5",
            "--overlap-fb-factor 1.5: must be in [0, 1]"},
           {"--schedule dualpipe --pp 3 --microbatches 12",
            "--pp 3: schedule 'dualpipe' needs an even number of pipeline ranks"},
           {"--schedule dualpipev --pp 4 --microbatches 6",
            "--microbatches 6: schedule 'dualpipev' needs m >= 2p = 8"},
           {"--schedule dualpipev --pp 4 --vpp 3 --microbatches 8",
            "--vpp 3: schedule 'dualpipev' runs exactly 2 chunks per rank"}}) {
    CliRun r = run(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
  }
}

}  // namespace
}  // namespace tightpipe

namespace tightpipe {
namespace {

// Issue 19: --data-parallel-size adds each stage's all-reduce on the table's link. 1F1B p = 2,
// m = 2, F = 1, B = 2, free messages (no bytes, no latency), 400 bytes per stage at 100 per unit:
// the programs end at 9 and 7, each reduction takes 4 after them: T = 13, exposed 8 / 26.
TEST(SimulateCliDataParallel, AddsTheAllReduceOfTheTable) {
  const std::string kBin = std::string(TP_BINARY_DIR) + "/tools/tightpipe/tightpipe";
  if (!std::filesystem::exists(kBin)) GTEST_SKIP() << "no binary at " << kBin;
  const std::string table = tmp_path("dp_costs.json");
  ASSERT_TRUE(write_file(table, R"({"time_unit": "unit", "link": {"latency": 0, "bandwidth": 100},
    "stages": [{"stage": 0, "f": 1, "i": 1, "w": 1, "allreduce_bytes": 400},
               {"stage": 1, "f": 1, "i": 1, "w": 1, "allreduce_bytes": 400}]})")
                  .ok());
  CliRun r = run("--schedule 1f1b --pp 2 --microbatches 2 --costs " + table +
                 " --data-parallel-size 2 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 13);
  EXPECT_DOUBLE_EQ(j["exposed_allreduce_ratio"].get<double>(), 8.0 / 26);
  EXPECT_EQ(j["data_parallel"]["size"], 2);
  EXPECT_DOUBLE_EQ(j["per_rank"][1]["exposed_allreduce"].get<double>(), 4);
  r = run("--schedule 1f1b --pp 2 --microbatches 2 --costs " + table + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 9);
  EXPECT_FALSE(j.contains("exposed_allreduce_ratio"));
  // Uniform --cost has no gradient bytes: refused in one line, not a silent zero.
  r = run("--schedule 1f1b --pp 2 --microbatches 2 --cost f=1,i=1,w=1 --data-parallel-size 2");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--data-parallel-size 2"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hint"), std::string::npos) << r.err;
  r = run("--schedule 1f1b --pp 2 --microbatches 2 --costs " + table + " --bucket-size 0");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--bucket-size 0"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tightpipe
