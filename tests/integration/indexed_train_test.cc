// Training on Megatron-LM's data end to end: `tightpipe train --data-path PREFIX` with GPT-2's
// tokenizer on the indexed dataset Megatron-LM wrote (../shared/data/megatron), the vocabulary
// padded as Megatron pads it, a pipeline equal to one rank, a blend, the tokenizer recorded in the
// checkpoint and used by `sample`; and the refusals, one line each.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

using testutil::run_command;

const std::string kTp = testutil::tightpipe_binary();
const std::string kData = std::string(TP_SHARED_DIR) + "/data";
const std::string kPrefix = kData + "/megatron/tinyshakespeare_gpt2_text_document";
const std::string kGpt2 = " --tokenizer-type GPT2BPETokenizer --vocab-file " + kData +
                          "/gpt2/vocab.json --merge-file " + kData + "/gpt2/merges.txt";
const std::string kModel =
    " --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 32 "
    "--micro-batch-size 2 --num-microbatches 4 --log-interval 100";

// The losses of metrics.jsonl, step by step.
std::vector<double> losses(const std::string& out_dir) {
  std::vector<double> out;
  std::istringstream in(read_file(out_dir + "/metrics.jsonl").value());
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss")) out.push_back(j["loss"].get<double>());
  }
  return out;
}

void expect_one_line(const testutil::CommandResult& r, int code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, code) << r.err << r.out;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

TEST(IndexedTrainTest, Gpt2DatasetPipelineEqualsOneRankAndSampleDecodes) {
  const std::string dir = testutil::make_temp_dir("tp-indexed");
  std::vector<std::vector<double>> runs;
  for (const char* pp : {"1", "2"}) {
    const std::string out = dir + "/run" + pp;
    auto r = run_command(kTp + " train --pp " + pp + " --schedule 1f1b" + kModel +
                         " --train-iters 3 --eval-iters 2 --data-path " + kPrefix + kGpt2 +
                         " --out-dir " + out + " --save " + out + "/ck");
    ASSERT_EQ(r.exit_code, 0) << "pp " << pp << "\n" << r.err << r.out;
    auto sum = nlohmann::json::parse(read_file(out + "/summary.json").value());
    // GPT-2's 50257 ids padded to a multiple of 128, as Megatron-LM pads them.
    EXPECT_EQ(sum["model"]["vocab_size"].get<int>(), 50304);
    EXPECT_GT(sum["final_val_loss"].get<double>(), 0.0);
    runs.push_back(losses(out));
    ASSERT_EQ(runs.back().size(), 3u);
    // An untrained model spreads its guess over the whole (padded) vocabulary.
    EXPECT_NEAR(runs.back()[0], std::log(50304.0), 0.5);
  }
  EXPECT_EQ(runs[0], runs[1]) << "the pipeline must train exactly as one rank";

  // The checkpoint names its tokenizer; sample encodes the prompt and decodes with it.
  const std::string ck = dir + "/run2/ck";
  auto tok =
      nlohmann::json::parse(read_file(ck + "/iter_0000003/tokenizer.json").value(), nullptr, false);
  ASSERT_TRUE(tok.is_object());
  EXPECT_EQ(tok["tokenizer_type"], "GPT2BPETokenizer");
  auto s = run_command(kTp + " sample --load " + ck + " --tokens 8 --prompt 'ROMEO:'");
  ASSERT_EQ(s.exit_code, 0) << s.err;
  EXPECT_TRUE(s.out.starts_with("ROMEO:")) << s.out;
  // Byte-level BPE decodes to text, not to a dump of ids or raw bytes past ASCII/UTF-8.
  EXPECT_GT(s.out.size(), std::string("ROMEO:").size()) << s.out;

  // A damaged tokenizer.json is one line naming it; the flags still work around it.
  ASSERT_TRUE(write_file(ck + "/iter_0000003/tokenizer.json", "{\"tokenizer_type\": 7}").ok());
  expect_one_line(run_command(kTp + " sample --load " + ck + " --tokens 4"), 1,
                  "tokenizer.json: 'tokenizer_type' is not a string");
  auto flags = run_command(kTp + " sample --load " + ck + " --tokens 4 --prompt 'A'" + kGpt2);
  EXPECT_EQ(flags.exit_code, 0) << flags.err;
}

TEST(IndexedTrainTest, BlendTrainsAndBadInputIsOneLine) {
  const std::string dir = testutil::make_temp_dir("tp-blend");
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "Paragraph number " + std::to_string(i) + " of a blend.\n\n";
  ASSERT_TRUE(write_file(dir + "/small.txt", text).ok());
  auto pre = run_command(kTp + " data preprocess --input " + dir + "/small.txt --output-prefix " +
                         dir + "/small" + kGpt2 + " --append-eod");
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  const std::string small = dir + "/small_text_document";
  auto r = run_command(kTp + " train --pp 2" + kModel + " --train-iters 2 --eval-iters 1" +
                       " --data-path 0.7 " + kPrefix + " 0.3 " + small + kGpt2 +
                       " --split 90,10,0 --out-dir " + dir + "/run");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_EQ(losses(dir + "/run").size(), 2u);

  const std::string base = kTp + " train" + kModel + " --train-iters 1 --eval-iters 0";
  // Blend weights that do not parse.
  expect_one_line(run_command(base + " --data-path x0.7 " + kPrefix + " 0.3 " + small + kGpt2), 2,
                  "x0.7");
  expect_one_line(run_command(base + " --data-path " + kPrefix + kGpt2 + " --split 9,x"), 2, "9,x");
  // Indexed ids with the byte tokenizer: the first id past 256 names the file and the value.
  auto bytes = run_command(base + " --data-path " + kPrefix);
  EXPECT_NE(bytes.exit_code, 0);
  EXPECT_NE(bytes.err.find("tinyshakespeare_gpt2_text_document.bin"), std::string::npos)
      << bytes.err;
  EXPECT_NE(bytes.err.find("vocabulary 256"), std::string::npos) << bytes.err;
  EXPECT_NE(bytes.err.find("hint:"), std::string::npos) << bytes.err;
  // GPT-2's tokenizer on a text file, which is read as bytes.
  expect_one_line(run_command(base + " --data-path " + kData + "/tinyshakespeare.txt" + kGpt2), 2,
                  "is read as bytes");
  expect_one_line(
      run_command(base + " --data-path " + kPrefix + kGpt2 + " --make-vocab-size-divisible-by 0"),
      2, "--make-vocab-size-divisible-by 0");
  expect_one_line(
      run_command(base + " --data-path " + kPrefix + " --vocab-file " + kData + "/gpt2/vocab.json"),
      2, "without --tokenizer-type");
}

// The loader's position goes into the checkpoint: 2 steps, a save, a resume to 4 steps give the
// losses of 4 steps straight, bit for bit (a blend, so the greedy interleaving resumes too).
TEST(IndexedTrainTest, ResumeContinuesTheSampleStream) {
  const std::string dir = testutil::make_temp_dir("tp-indexed-resume");
  const std::string base = kTp + " train --pp 2" + kModel + " --eval-iters 0 --data-path 0.6 " +
                           kPrefix + " 0.4 " + kPrefix + kGpt2;
  auto straight = run_command(base + " --train-iters 4 --out-dir " + dir + "/straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.err;
  // --exit-interval stops the same 4-step run (its learning-rate schedule) after step 2.
  auto first = run_command(base + " --train-iters 4 --exit-interval 2 --out-dir " + dir +
                           "/a --save " + dir + "/ck");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second =
      run_command(base + " --train-iters 4 --out-dir " + dir + "/b --load " + dir + "/ck");
  ASSERT_EQ(second.exit_code, 0) << second.err;
  std::vector<double> resumed = losses(dir + "/a");
  for (double l : losses(dir + "/b")) resumed.push_back(l);
  EXPECT_EQ(resumed, losses(dir + "/straight"));
  ASSERT_EQ(resumed.size(), 4u);
}

// `data check` reads one pass over an indexed dataset with the tokenizer's vocabulary as the
// bound, and stops (the indexed stream has no epoch of its own in its position).
TEST(IndexedTrainTest, DataCheckReadsOnePassAndStops) {
  auto r = run_command("timeout 60 " + kTp + " data check --data-path " + kPrefix + kGpt2 +
                       " --batch-size 8 --seq-length 1023");
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  // 330,807 tokens give (330807 - 1) / 1023 = 323 samples; the 41st batch of 8 ends the pass.
  EXPECT_NE(r.out.find("41 batches of 8x1023"), std::string::npos) << r.out;
  auto bytes = run_command("timeout 60 " + kTp + " data check --data-path " + kPrefix);
  EXPECT_EQ(bytes.exit_code, 1) << bytes.err;
  EXPECT_NE(bytes.err.find(">= the model's vocabulary 256"), std::string::npos) << bytes.err;
}

}  // namespace
}  // namespace tightpipe
