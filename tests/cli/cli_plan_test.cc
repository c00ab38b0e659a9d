// `tightpipe plan` end to end: the issue's example (table, recommendation that fits, JSON cost
// identity, HTML page), measured costs from a run of another shape, and bad input as one line.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using testutil::run_command;

const std::string kExample =
    " plan --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096"
    " --global-batch-size 1024 --devices 64 --device h100-sxm --price-per-device-hour 2.50"
    " --train-tokens 1e11";

std::string tightpipe_or_skip() {
  const std::string tp = testutil::tightpipe_binary();
  return fs::exists(tp) ? tp : "";
}

TEST(CliPlanTest, IssueExample) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string dir = testutil::make_temp_dir("tp-cli-plan");
  auto r = run_command(tp + kExample + " --html " + dir + "/plan.html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"recommended:", "why:", "base ", "1f1b", "pretrain_gpt.py", "run it:"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  auto page = read_file(dir + "/plan.html");
  ASSERT_TRUE(page.ok());
  EXPECT_NE(page->find("<svg"), std::string::npos);

  auto j = run_command(tp + kExample + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  const auto& rec = doc["candidates"][doc["recommended"].get<int>()];
  EXPECT_TRUE(rec["fits"].get<bool>());
  const double steps = 1e11 / (1024.0 * 4096.0);
  EXPECT_NEAR(doc["steps"].get<double>(), steps, 1e-6);
  EXPECT_NEAR(rec["cost_usd"].get<double>(),
              rec["step_time_s"].get<double>() * steps * 64 * 2.5 / 3600,
              1e-9 * rec["cost_usd"].get<double>());
  for (double b : rec["peak_memory_bytes"]) EXPECT_LE(b, doc["memory_budget_bytes"].get<double>());
}

// The LM head has the padded vocabulary's rows, as Megatron-LM's: --vocab-size 50257 plans
// exactly as 50304, and the heavier head makes every step slower than a byte vocabulary's; the
// printed train command carries GPT-2's tokenizer flags.
TEST(CliPlanTest, VocabularyIsPaddedLikeMegatron) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string shape =
      " plan --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128"
      " --global-batch-size 16 --devices 2 --pp 2 --micro-batch-size 4 --device this-cpu --json"
      " --device-tflops 0.1";  // this-cpu's measured peak would differ between the processes
  auto plan = [&](const std::string& extra) {
    auto r = run_command(tp + shape + extra);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  };
  const auto gpt2 = plan(" --vocab-size 50257");
  const auto padded = plan(" --vocab-size 50304");
  const auto bytes = plan(" --vocab-size 256");
  const auto unpadded = plan(" --vocab-size 50257 --make-vocab-size-divisible-by 1");
  ASSERT_TRUE(gpt2.is_object() && padded.is_object() && bytes.is_object() && unpadded.is_object());
  EXPECT_EQ(gpt2["model"]["vocab_size"], 50304);
  EXPECT_EQ(unpadded["model"]["vocab_size"], 50257);
  auto step = [](const nlohmann::json& d) {
    return d["candidates"][d["recommended"].get<int>()]["step_time_s"].get<double>();
  };
  EXPECT_EQ(step(gpt2), step(padded));
  EXPECT_GT(step(gpt2), 2 * step(bytes));
  EXPECT_NE(gpt2["commands"][0].get<std::string>().find("--tokenizer-type GPT2BPETokenizer"),
            std::string::npos)
      << gpt2["commands"][0];
  EXPECT_EQ(unpadded["commands"][0].get<std::string>().rfind("# tightpipe train cannot", 0), 0u)
      << unpadded["commands"][0];
}

void expect_one_line(const testutil::CommandResult& r, std::initializer_list<const char*> parts) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  for (const char* part : parts)
    EXPECT_NE(r.err.find(part), std::string::npos) << part << "\n" << r.err;
}

TEST(CliPlanTest, BadInput) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string model =
      " plan --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096"
      " --global-batch-size 1024";
  expect_one_line(run_command(tp + model + " --devices 64 --device b200"),
                  {"--device 'b200'", "h100-sxm", "this-cpu", "hint:"});
  expect_one_line(run_command(tp + model + " --devices 6 --pp 4"), {"--devices 6", "hint:"});
  expect_one_line(run_command(tp + model + " --devices 64 --memory-budget-gib 1"),
                  {"smallest need", "GiB", "hint:"});
  expect_one_line(
      run_command(tp +
                  " plan --num-layers 2 --hidden-size 512 --num-attention-heads 8 --seq-length 512"
                  " --global-batch-size 64 --devices 8 --pp 8"),
      {"--num-layers 2", "hint:"});
  expect_one_line(run_command(tp + model + " --devices 64 --recompute sometimes"),
                  {"--recompute 'sometimes'", "block:N"});
}

// --cores and --core-slowdown (docs/cost_model.md "Shared cores"): every candidate is simulated
// with its ranks sharing the cores, so none is faster than with a core per rank and those with
// ranks computing at once are slower; the table and the JSON say what was assumed; a bad value
// is one line naming the flag.
TEST(CliPlanTest, SharedCoresSlowTheCandidatesAndAreSaid) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string base = tp + kExample + " --pp 8 --schedules 1f1b,zb-h1 --top 1000";
  auto alone = run_command(base + " --json");
  auto shared = run_command(base + " --cores 4 --core-slowdown 1.2 --json");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(shared.exit_code, 0) << shared.err;
  const auto a = nlohmann::json::parse(alone.out), b = nlohmann::json::parse(shared.out);
  EXPECT_FALSE(a.contains("core_sharing"));
  EXPECT_EQ(b["core_sharing"]["cores"], 4);
  EXPECT_DOUBLE_EQ(b["core_sharing"]["slowdown"].get<double>(), 1.2);
  auto key = [](const nlohmann::json& c) { return c.dump(); };
  std::map<std::string, double> step_alone;
  for (const auto& c : a["candidates"]) {
    if (!c.value("simulated", false)) continue;
    nlohmann::json k = {c["schedule"],         c["pp"],        c["vpp"],   c["dp"],
                        c["micro_batch_size"], c["recompute"], c["layout"]};
    step_alone[key(k)] = c["step_time_s"].get<double>();
  }
  int slower = 0;
  for (const auto& c : b["candidates"]) {
    if (!c.value("simulated", false)) continue;
    nlohmann::json k = {c["schedule"],         c["pp"],        c["vpp"],   c["dp"],
                        c["micro_batch_size"], c["recompute"], c["layout"]};
    auto it = step_alone.find(key(k));
    if (it == step_alone.end()) continue;
    EXPECT_GE(c["step_time_s"].get<double>(), it->second * (1 - 1e-12)) << k.dump();
    slower += c["step_time_s"].get<double>() > it->second * 1.01;
  }
  EXPECT_GT(slower, 0) << shared.out;
  auto table = run_command(base + " --cores 4");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_NE(table.out.find("cores: the ranks share 4 core(s)"), std::string::npos) << table.out;
  expect_one_line(run_command(base + " --core-slowdown 0"), {"--core-slowdown 0", "hint:"});
}

// Issue 27: docs/plan.md's command with --recompute leaving out none crashed (SIGSEGV, nothing
// printed): an automatic schedule tried no recompute choice. Now it plans; filters that leave
// nothing, or only automatic schedules without none, are one line each.
TEST(CliPlanTest, RecomputeWithoutNonePlans) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  for (const char* rc : {" --recompute full", " --recompute block:1"}) {
    auto r = run_command(tp + kExample + rc + " --json");
    ASSERT_EQ(r.exit_code, 0) << rc << "\n" << r.err;
    const auto doc = nlohmann::json::parse(r.out);
    const auto& rec = doc["candidates"][doc["recommended"].get<int>()];
    EXPECT_EQ(rec["recompute"], std::string(rc).substr(13)) << rc;
    EXPECT_TRUE(rec["fits"].get<bool>());
  }
  const std::string small =
      " plan --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024"
      " --global-batch-size 64 --devices 8";
  expect_one_line(run_command(tp + small + " --schedules zb-auto,zb-v-auto --recompute full"),
                  {"no configuration can run", "without recompute", "--recompute"});
  expect_one_line(run_command(tp + small + " --schedules interleaved --vpp 3"),
                  {"no configuration matches", "--vpp 3", "hint:"});
}

// Every real-valued flag: NaN, inf, negative or absurd is one line naming the flag, the value as
// given (not inf) and the range.
TEST(CliPlanTest, NumbersOutOfRange) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string model =
      " plan --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024"
      " --global-batch-size 64 --devices 8";
  expect_one_line(run_command(tp + model + " --memory-budget-gib 1e300"),
                  {"--memory-budget-gib 1e+300: must be in [0, 1048576]", "hint:"});
  EXPECT_EQ(run_command(tp + model + " --memory-budget-gib 1e300").err.find("inf"),
            std::string::npos);
  expect_one_line(run_command(tp + model + " --memory-budget-gib nan"),
                  {"--memory-budget-gib nan: must be in [0,"});
  expect_one_line(run_command(tp + model + " --memory-budget-gib -3"),
                  {"--memory-budget-gib -3: must be in [0,"});
  expect_one_line(run_command(tp + model + " --train-tokens 1e30"),
                  {"--train-tokens 1e+30: must be in [1, 1e+16]", "hint:"});
  expect_one_line(run_command(tp + model + " --train-tokens inf"), {"--train-tokens inf"});
  expect_one_line(run_command(tp + model + " --price-per-device-hour -1"),
                  {"--price-per-device-hour -1: must be in [0, 10000]"});
  expect_one_line(run_command(tp + model + " --price-per-device-hour nan"),
                  {"--price-per-device-hour nan"});
  expect_one_line(run_command(tp + model + " --mfu nan"), {"--mfu nan", "(0, 1]"});
  expect_one_line(run_command(tp + model + " --top 100000000"), {"--top 100000000", "[1, 10000]"});
  expect_one_line(run_command(tp + model + " --num-attention-heads 7"),
                  {"--hidden-size 1024 is not divisible by --num-attention-heads 7", "hint:"});
  // Issue 45: --device-tflops 0 was taken as "not given" (the preset's peak, silently); an
  // empty value too. Both are one line now, like every other number out of range.
  expect_one_line(run_command(tp + model + " --device-tflops 0"),
                  {"--device-tflops 0: must be in [1e-06, 1000000]", "hint:"});
  expect_one_line(run_command(tp + model + " --device-tflops ''"), {"--device-tflops ''", "hint:"});
  for (const char* v : {"-1", "nan", "inf", "1e400", "1e-300", "5e6"}) {
    expect_one_line(run_command(tp + model + " --device-tflops " + v),
                    {"--device-tflops ", "must be in [1e-06, 1000000]"});
  }
  // The zb engine always post-validates, the others never: tightpipe's flag is refused beside
  // them, as simulate refuses it.
  expect_one_line(run_command(tp + model + " --engine zb --enable-optimizer-post-validation"),
                  {"--enable-optimizer-post-validation with --engine zb", "hint:"});
  expect_one_line(run_command(tp + model + " --engine torch --schedules dualpipe"),
                  {"--engine torch", "'dualpipe'", "2 directions", "hint:"});
}

// Any accepted value keeps the table aligned: every right-aligned cell ends under its header.
TEST(CliPlanTest, TableStaysAlignedForTheLargestValues) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  auto r = run_command(tp + kExample + " --train-tokens 1e16 --price-per-device-hour 10000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = split(r.out, '\n');
  auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("schedule") != std::string::npos && l.find("vs 1F1B") != std::string::npos;
  });
  ASSERT_NE(header, lines.end()) << r.out;
  int rows = 0;
  for (auto it = header + 1; it != lines.end() && !it->empty(); ++it, ++rows) {
    for (const char* h :
         {"pp", "vpp", "dp", "mbs", "step s", "tokens/s", "bubble", "peak GiB", "train", "cost"}) {
      const size_t end = header->find(std::string(" ") + h + " ") + 1 + std::string(h).size();
      ASSERT_LE(end, it->size()) << h << "\n" << *header << "\n" << *it;
      EXPECT_NE((*it)[end - 1], ' ') << h << "\n" << *header << "\n" << *it;
      EXPECT_TRUE(end == it->size() || (*it)[end] == ' ') << h << "\n" << *header << "\n" << *it;
    }
  }
  EXPECT_GE(rows, 2) << r.out;
}

// Without --vocab-size the plan is GPT-2's vocabulary padded as Megatron-LM pads it (it was 0: no
// embedding, no LM head), and the header says so.
TEST(CliPlanTest, DefaultVocabularyIsGpt2Padded) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string shape =
      " plan --num-layers 4 --hidden-size 128 --num-attention-heads 4 --seq-length 128"
      " --global-batch-size 16 --devices 2 --pp 2 --micro-batch-size 4 --device this-cpu";
  auto j = run_command(tp + shape + " --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["model"]["vocab_size"], 50304);
  EXPECT_NE(doc["commands"][0].get<std::string>().find("--tokenizer-type GPT2BPETokenizer"),
            std::string::npos)
      << doc["commands"][0];
  auto t = run_command(tp + shape);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("seq 128, vocab 50304,"), std::string::npos) << t.out;
  auto none = run_command(tp + shape + " --vocab-size 0");
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_NE(none.out.find("vocab 0 (no embedding, no LM head)"), std::string::npos) << none.out;
}

// A run's measured costs: the same shape plans; another shape is refused naming the mismatch.
TEST(CliPlanTest, MeasuredCostsFromARun) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string dir = testutil::make_temp_dir("tp-cli-plan-run");
  auto t = run_command(tp +
                       " train --pp 2 --schedule 1f1b --num-layers 2 --hidden-size 64"
                       " --num-attention-heads 4 --seq-length 32 --micro-batch-size 2"
                       " --num-microbatches 4 --train-iters 4 --eval-iters 0 --data-path " +
                       std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt --out-dir " + dir);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string shape =
      " plan --num-layers 4 --num-attention-heads 4 --seq-length 32 --vocab-size 256"
      " --global-batch-size 8 --devices 2 --pp 2 --micro-batch-size 1,2 --costs " +
      dir + "/costs.json";
  auto ok = run_command(tp + shape + " --hidden-size 64 --json");
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  const auto doc = nlohmann::json::parse(ok.out);
  EXPECT_EQ(doc["costs"], "measured");
  EXPECT_EQ(doc["device"]["name"], "this-cpu");
  const auto& rec = doc["candidates"][doc["recommended"].get<int>()];
  EXPECT_GT(rec["step_time_s"].get<double>(), 0);
  EXPECT_EQ(doc["commands"][0].get<std::string>().rfind("tightpipe train", 0), 0u)
      << doc["commands"][0];
  expect_one_line(run_command(tp + shape + " --hidden-size 128"),
                  {"another model shape", "--hidden-size 128", "measured 64", "hint:"});

  // Issue 27: a missing --costs path took its parent folder (the run) silently.
  const std::string missing = "--costs " + dir + "/costs.json-missing";
  expect_one_line(run_command(tp + shape + "-missing --hidden-size 64"),
                  {missing.c_str(), "such file or directory", "hint:"});
  // Issue 45: a file other than costs.json took the costs.json beside it silently, and a FIFO or
  // /dev/zero was called a run directory without timelines: each is named for what it is.
  const std::string base =
      " plan --num-layers 4 --num-attention-heads 4 --seq-length 32 --vocab-size 256"
      " --global-batch-size 8 --devices 2 --pp 2 --hidden-size 64 --costs ";
  ASSERT_TRUE(write_file(dir + "/other.json", "{}").ok());
  expect_one_line(run_command(tp + base + dir + "/other.json"),
                  {"must be a run's costs.json", "'other.json'", "hint:"});
  const std::string fifo = dir + "/costs.fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line(run_command(tp + base + fifo), {"is a FIFO", "hint:"});
  expect_one_line(run_command(tp + base + "/dev/zero"), {"'/dev/zero' is a character device"});
  // A negative cost, or every block time 0: the table's own error, not "no cost table" or a $0
  // plan.
  auto costs = read_file(dir + "/costs.json");
  ASSERT_TRUE(costs.ok());
  auto variant = [&](const std::string& name, const std::string& text) {
    const std::string d = dir + "/" + name;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file()) fs::copy_file(e.path(), d / e.path().filename());
    EXPECT_TRUE(write_file(d + "/costs.json", text).ok());
    return " plan --num-layers 4 --num-attention-heads 4 --seq-length 32 --vocab-size 256"
           " --global-batch-size 8 --devices 2 --pp 2 --micro-batch-size 1,2 --hidden-size 64"
           " --costs " +
           d;
  };
  auto replace_all = [](std::string text, const std::string& key, const std::string& value) {
    for (size_t at = text.find("\"" + key + "\": "); at != std::string::npos;
         at = text.find("\"" + key + "\": ", at + 1)) {
      const size_t from = at + key.size() + 4, to = text.find_first_of(",\n}", from);
      text.replace(from, to - from, value);
    }
    return text;
  };
  const auto negative = run_command(tp + variant("negative", replace_all(*costs, "f", "-1")));
  expect_one_line(negative, {"negative", "'f'", "hint:"});
  EXPECT_EQ(negative.err.find("no cost table"), std::string::npos) << negative.err;
  std::string zero = *costs;
  for (const char* key : {"f", "i", "w", "b", "recompute", "optimizer"})
    zero = replace_all(zero, key, "0");
  expect_one_line(run_command(tp + variant("zero", zero)), {"takes no time", "hint:"});
}

// Megatron's --num-layers-per-virtual-pipeline-stage N: interleaved takes v = L / (p N) only, at
// the pipeline sizes p that divide; not with --vpp; N outside [1, L] refused.
TEST(CliPlanTest, MegatronLayersPerVirtualStage) {
  const std::string tp = tightpipe_or_skip();
  if (tp.empty()) GTEST_SKIP() << "tightpipe not built";
  const std::string small =
      " plan --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024"
      " --global-batch-size 64 --devices 8 --schedules interleaved,1f1b --top 1000 --json";
  auto r = run_command(tp + small + " --num-layers-per-virtual-pipeline-stage 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  int interleaved = 0;
  for (const auto& c : doc["candidates"]) {
    if (c["schedule"] != "interleaved") continue;
    ++interleaved;
    const int p = c["pp"].get<int>();
    EXPECT_EQ(8 % p, 0) << c.dump();
    EXPECT_EQ(c["vpp"].get<int>(), 8 / (p * 2)) << c.dump();
  }
  EXPECT_GT(interleaved, 0) << r.out.substr(0, 2000);
  expect_one_line(run_command(tp + small + " --num-layers-per-virtual-pipeline-stage 9"),
                  {"--num-layers-per-virtual-pipeline-stage", "9", "[1, 8]", "hint:"});
  auto both = run_command(tp + small + " --vpp 2 --num-layers-per-virtual-pipeline-stage 2");
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
}

}  // namespace
}  // namespace tightpipe
