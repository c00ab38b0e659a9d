// tightpipe train / sample end to end: every bad input is one clear line with a hint;
// metrics.jsonl; save + load resumes exactly; sample generates from a checkpoint.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_util.h"
#include "layout.h"
#include "tightpipe/base.h"

namespace tightpipe::testing_nn {
namespace {

TEST(TrainCli, BadInputIsOneClearLine) {
  expect_one_line_error(
      run_tightpipe("train " + kTiny + " --hidden-size 30 --num-attention-heads 4"), 2,
      "--hidden-size 30 is not divisible by --num-attention-heads 4");
  expect_one_line_error(run_tightpipe("train --data-path /nonexistent/shakespeare.txt"), 1,
                        "/nonexistent/shakespeare.txt");
  const std::string dir = fresh_dir("bad");
  const std::string empty = dir + "/empty.txt";
  ASSERT_TRUE(write_file(empty, "").ok());
  expect_one_line_error(run_tightpipe("train --data-path " + empty), 2, "is empty");
  const std::string small = dir + "/small.txt";
  ASSERT_TRUE(write_file(small, std::string(200, 'a')).ok());
  expect_one_line_error(run_tightpipe("train --seq-length 128 --data-path " + small), 2,
                        "--seq-length + 1 = 129");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --pp 4"), 2,
                        "--num-layers 2 is fewer than the 4 pipeline stages");
  // Issue 45: a post-validation setting without post-validation changed nothing, unsaid.
  expect_one_line_error(run_tightpipe("train " + kTiny + " --post-validation-stable-steps 3"), 2,
                        "--post-validation-stable-steps 3: only runs with "
                        "--enable-optimizer-post-validation use it");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --pp 2 --pipeline-layout 'E,t|t*2,L'"),
                        2, "places 3 transformer layers but --num-layers is 2");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --pp 2 --pipeline-layout 'E,t|L'"), 2,
                        "places 1 transformer layers but --num-layers is 2");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --recompute-granularity selective"), 2,
                        "--recompute-granularity");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --pp 2 --blas-threads 2"), 2,
                        "--blas-threads 2 with 2 thread ranks");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --log-interval 0"), 2,
                        "--log-interval 0");
  expect_one_line_error(run_tightpipe("train --train-iters 1"), 2, "--data-path is required");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --compute fake"), 2,
                        "--compute 'fake': expected real or emulated");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --pipeline-timeout 0"), 2,
                        "--pipeline-timeout 0: must be in (0, ");
  const RunResult usage = run_tightpipe("train --num-layers abc");
  EXPECT_EQ(usage.code, 2);
  EXPECT_NE(usage.output.find("--num-layers"), std::string::npos) << usage.output;
}

// --pipeline-layout auto: the analytic costs, then a run's measured costs; the layout the run
// logs is the one summary.json records, a valid split of the 6 layers over zb-v's 4 stages.
TEST(TrainCli, PipelineLayoutAuto) {
  const std::string dir = fresh_dir("auto");
  const std::string common = "train " + kTiny +
                             " --pp 2 --schedule zb-v --num-layers 6 --num-microbatches 4 "
                             "--train-iters 2 --eval-iters 0 --pipeline-layout auto";
  auto check = [&](const RunResult& r, const std::string& out) {
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t note = r.output.find("--pipeline-layout auto: ");
    ASSERT_NE(note, std::string::npos) << r.output;
    auto summary = read_file(out + "/summary.json");
    ASSERT_TRUE(summary.ok());
    const size_t at = summary->find("\"layout\": \"");
    ASSERT_NE(at, std::string::npos) << *summary;
    const size_t begin = at + 11;
    const std::string layout = summary->substr(begin, summary->find('"', begin) - begin);
    const std::vector<int> blocks = testutil::layout_blocks(layout);
    ASSERT_EQ(blocks.size(), 4u) << layout;
    EXPECT_EQ(blocks[0] + blocks[1] + blocks[2] + blocks[3], 6) << layout;
    EXPECT_GE(blocks[1], 1);
    EXPECT_GE(blocks[2], 1);
    EXPECT_EQ(r.output.substr(note + 24, layout.size()), layout) << r.output;
    EXPECT_NE(r.output.find("stages " + layout), std::string::npos) << r.output;
  };
  RunResult analytic = run_tightpipe(common + " --out-dir " + dir + "/a");
  check(analytic, dir + "/a");
  EXPECT_NE(analytic.output.find("analytic FLOPs of 6 layers x 32"), std::string::npos)
      << analytic.output;
  // The measured costs of that run (another layer count is fine: the costs are per layer kind).
  RunResult measured = run_tightpipe(common + " --num-layers 8 --out-dir " + dir + "/b" +
                                     " --layout-costs-from " + dir + "/a");
  if (measured.code == 0) {
    EXPECT_NE(measured.output.find("per layer kind from"), std::string::npos) << measured.output;
  }
  ASSERT_EQ(measured.code, 0) << measured.output;
  auto summary = read_file(dir + "/b/summary.json");
  ASSERT_TRUE(summary.ok());
  EXPECT_NE(summary->find("\"num_layers\": 8"), std::string::npos);
  // Refused before any work, one line each.
  expect_one_line_error(run_tightpipe(common + " --decoder-first-pipeline-num-layers 1"), 2,
                        "--pipeline-layout auto with --decoder-first");
  expect_one_line_error(run_tightpipe("train " + kTiny + " --layout-costs-from " + dir + "/a"), 2,
                        "--layout-costs-from needs --pipeline-layout auto (got '')");
  expect_one_line_error(run_tightpipe(common + " --layout-costs-from " + dir + "/nope"), 1,
                        dir + "/nope");
  expect_one_line_error(
      run_tightpipe(common + " --hidden-size 64 --layout-costs-from " + dir + "/a"), 2,
      "that run trained hidden 32");
}

TEST(TrainCli, MetricsResumeAndSample) {
  const std::string dir = fresh_dir("resume");
  auto read_lines = [](const std::string& path) {
    std::vector<std::string> lines;
    std::ifstream in(path);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  };
  const std::string common = "train " + kTiny + " --train-iters 4 --lr 1e-3 --lr-warmup-iters 1";
  // Straight: 4 steps.
  RunResult a = run_tightpipe(common + " --out-dir " + dir + "/a --save " + dir + "/a/ckpt");
  ASSERT_EQ(a.code, 0) << a.output;
  const auto la = read_lines(dir + "/a/metrics.jsonl");
  ASSERT_EQ(la.size(), 4u);
  for (const char* key :
       {"\"step\":", "\"loss\":", "\"tokens_per_s\":", "\"lr\":", "\"grad_norm\":"})
    EXPECT_NE(la[0].find(key), std::string::npos) << la[0];
  EXPECT_NE(la[3].find("\"val_loss\":"), std::string::npos) << la[3];
  // --pp 1 is the pipeline trainer with one rank: its summary and timeline are there too.
  EXPECT_TRUE(std::filesystem::exists(dir + "/a/summary.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/a/timeline_rank0.jsonl"));
  // --log-interval 3 over 4 steps: lines for step 1 (first), 3 and 4 (last, evaluated).
  RunResult logged = run_tightpipe(common + " --log-interval 3");
  ASSERT_EQ(logged.code, 0) << logged.output;
  size_t step_lines = 0;
  for (const auto& l : split(logged.output, '\n')) step_lines += l.rfind("step ", 0) == 0;
  EXPECT_EQ(step_lines, 3u) << logged.output;
  // Interrupted after 2 steps (saved), then resumed: steps 3 and 4 match the straight run.
  RunResult b1 = run_tightpipe(common + " --exit-interval 2 --out-dir " + dir + "/b --save " + dir +
                               "/b/ckpt");
  ASSERT_EQ(b1.code, 0) << b1.output;
  RunResult b2 = run_tightpipe(common + " --load " + dir + "/b/ckpt --out-dir " + dir + "/b");
  ASSERT_EQ(b2.code, 0) << b2.output;
  EXPECT_NE(b2.output.find("loaded " + dir + "/b/ckpt/iter_0000002 at step 2"), std::string::npos)
      << b2.output;
  const auto lb = read_lines(dir + "/b/metrics.jsonl");
  ASSERT_EQ(lb.size(), 4u);
  auto field = [](const std::string& line, const std::string& key) {
    const size_t p = line.find("\"" + key + "\":");
    return line.substr(p, line.find_first_of(",}", p) - p);
  };
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(field(lb[i], "step"), field(la[i], "step"));
    EXPECT_EQ(field(lb[i], "loss"), field(la[i], "loss")) << "step " << i + 1 << " after resume";
    EXPECT_EQ(field(lb[i], "grad_norm"), field(la[i], "grad_norm"));
  }
  EXPECT_EQ(field(lb[3], "val_loss"), field(la[3], "val_loss"));
  // Sample.
  RunResult s =
      run_tightpipe("sample --load " + dir + "/a/ckpt --prompt 'ROMEO:' --tokens 40 --seed 3");
  ASSERT_EQ(s.code, 0) << s.output;
  EXPECT_EQ(s.output.rfind("ROMEO:", 0), 0u) << s.output;
  EXPECT_EQ(s.output.size(), 6u + 40u + 1u);
  // Loading a checkpoint into another shape names the file and the flag.
  RunResult bad = run_tightpipe("train " + kTiny + " --hidden-size 64 --train-iters 1 --load " +
                                dir + "/a/ckpt");
  expect_one_line_error(bad, 2, "manifest.txt");
  EXPECT_NE(bad.output.find("--hidden-size 32"), std::string::npos) << bad.output;
  RunResult missing = run_tightpipe("sample --load " + dir + "/nope");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.output.find(dir + "/nope' does not exist"), std::string::npos)
      << missing.output;
  // A save killed before its manifest, the tracker naming it: sample takes the step before and
  // says what it skipped.
  std::filesystem::copy(dir + "/a/ckpt/iter_0000004", dir + "/a/ckpt/iter_0000005");
  std::filesystem::remove(dir + "/a/ckpt/iter_0000005/manifest.txt");
  ASSERT_TRUE(write_file(dir + "/a/ckpt/latest_checkpointed_iteration.txt", "5\n").ok());
  RunResult partial =
      run_tightpipe("sample --load " + dir + "/a/ckpt --prompt 'ROMEO:' --tokens 40 --seed 3");
  ASSERT_EQ(partial.code, 0) << partial.output;
  EXPECT_NE(partial.output.find("warning: --load " + dir + "/a/ckpt: tracker"), std::string::npos)
      << partial.output;
  EXPECT_NE(partial.output.find("took " + dir + "/a/ckpt/iter_0000004 (step 4)"), std::string::npos)
      << partial.output;
  EXPECT_NE(partial.output.find(s.output), std::string::npos) << partial.output;
  expect_one_line_error(run_tightpipe(common + " --keep-last-checkpoints -1"), 2,
                        "--keep-last-checkpoints -1: must be in [0, ");
}

// --bf16: --fp16 is refused (alone and with --bf16); the header names the precision and oneDNN's
// bf16 kernel (and says "slow" on a CPU without native bf16); summary.json and the checkpoint
// manifest record the precision; a checkpoint saved in fp32 resumes in bf16 and the reverse, each
// saying so in one line; a resume in the same precision says nothing; sample reads a bf16
// checkpoint; a manifest from before --bf16 (no precision line) loads as fp32.
TEST(TrainCli, Bf16) {
  for (const char* flags : {"--fp16", "--fp16 --bf16", "--bf16 --fp16"}) {
    expect_one_line_error(run_tightpipe("train " + kTiny + " " + flags), 2,
                          "--fp16: not supported; hint: use --bf16 (bf16 needs no loss scaling)");
  }
  const std::string dir = fresh_dir("bf16");
  const std::string common = "train " + kTiny + " --lr 1e-3 --eval-iters 0";
  auto summary_precision = [](const std::string& out) {
    const std::string text = read_file(out + "/summary.json").value();
    const size_t at = text.find("\"precision\": \"");
    return at == text.npos ? std::string("none") : text.substr(at + 14, 4);
  };
  auto manifest = [](const std::string& ckpt, int step) {
    return read_file(fmt::format("{}/iter_{:07d}/manifest.txt", ckpt, step)).value();
  };
  // fp32, 2 steps.
  RunResult f =
      run_tightpipe(common + " --train-iters 2 --out-dir " + dir + "/f --save " + dir + "/f/ckpt");
  ASSERT_EQ(f.code, 0) << f.output;
  EXPECT_NE(f.output.find("B=4, fp32; stages"), std::string::npos) << f.output;
  EXPECT_EQ(f.output.find("bf16 matmul:"), std::string::npos) << f.output;
  EXPECT_EQ(summary_precision(dir + "/f"), "fp32");
  EXPECT_NE(manifest(dir + "/f/ckpt", 2).find("\nprecision fp32\n"), std::string::npos);
  // Resumed in bf16 for step 3.
  RunResult b = run_tightpipe(common + " --bf16 --train-iters 3 --load " + dir +
                              "/f/ckpt --out-dir " + dir + "/b --save " + dir + "/b/ckpt");
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_NE(b.output.find("B=4, bf16; stages"), std::string::npos) << b.output;
  const size_t isa = b.output.find("\noneDNN ");
  ASSERT_NE(isa, std::string::npos) << b.output;
  const std::string isa_line = b.output.substr(isa + 1, b.output.find('\n', isa + 1) - isa - 1);
  EXPECT_NE(isa_line.find(" bf16 matmul: "), std::string::npos) << isa_line;
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string flags((std::istreambuf_iterator<char>(cpuinfo)),
                          std::istreambuf_iterator<char>());
  const bool native = flags.find("avx512_bf16") != std::string::npos;
  EXPECT_EQ(isa_line.find("will be slow") == std::string::npos, native) << isa_line;
  EXPECT_NE(b.output.find("--load " + dir +
                          "/f/ckpt/iter_0000002: saved in fp32, continuing in "
                          "bf16 (master weights are fp32 either way)\n"),
            std::string::npos)
      << b.output;
  EXPECT_EQ(summary_precision(dir + "/b"), "bf16");
  EXPECT_NE(manifest(dir + "/b/ckpt", 3).find("\nprecision bf16\n"), std::string::npos);
  // Resumed in bf16 again: nothing to say; then in fp32: the reverse line.
  RunResult bb = run_tightpipe(common + " --bf16 --train-iters 4 --load " + dir + "/b/ckpt");
  ASSERT_EQ(bb.code, 0) << bb.output;
  EXPECT_EQ(bb.output.find("saved in"), std::string::npos) << bb.output;
  RunResult bf =
      run_tightpipe(common + " --train-iters 4 --load " + dir + "/b/ckpt --out-dir " + dir + "/bf");
  ASSERT_EQ(bf.code, 0) << bf.output;
  EXPECT_NE(bf.output.find("--load " + dir +
                           "/b/ckpt/iter_0000003: saved in bf16, continuing in "
                           "fp32 (master weights are fp32 either way)\n"),
            std::string::npos)
      << bf.output;
  EXPECT_EQ(summary_precision(dir + "/bf"), "fp32");
  RunResult s = run_tightpipe("sample --load " + dir + "/b/ckpt --prompt 'ROMEO:' --tokens 10");
  ASSERT_EQ(s.code, 0) << s.output;
  EXPECT_EQ(s.output.rfind("ROMEO:", 0), 0u) << s.output;
  // A checkpoint written before --bf16 has no precision line: fp32.
  const std::string old = fmt::format("{}/f/ckpt/iter_{:07d}/manifest.txt", dir, 2);
  std::string text = manifest(dir + "/f/ckpt", 2);
  text.erase(text.find("precision fp32\n"), 15);
  ASSERT_TRUE(write_file(old, text).ok());
  RunResult o = run_tightpipe(common + " --bf16 --train-iters 3 --load " + dir + "/f/ckpt");
  ASSERT_EQ(o.code, 0) << o.output;
  EXPECT_NE(o.output.find("saved in fp32, continuing in bf16"), std::string::npos) << o.output;
}

// Issue 30: the BLAS core rule as a user meets it. A fallback (reproduced: OpenBLAS loads on
// Prescott, TIGHTPIPE_BLAS_CORE=auto has the rule treat it as OpenBLAS's own choice) is replaced
// by the CPU's best core before any matmul, and the header says so; the same setting without
// auto is the user's and is kept, named with what the CPU could run; a bad TIGHTPIPE_BLAS_CORE is
// one line.
TEST(TrainCli, BlasFallbackIsCorrectedAndNamed) {
  const std::string run = "train " + kTiny + " --train-iters 1 --eval-iters 0";
  const RunResult kept = run_shell("env OPENBLAS_CORETYPE=Prescott " + kTightpipe + " " + run);
  ASSERT_EQ(kept.code, 0) << kept.output;
  EXPECT_NE(kept.output.find("BLAS: OpenBLAS core Prescott (OPENBLAS_CORETYPE=Prescott set in the "
                             "environment: kept)"),
            std::string::npos)
      << kept.output;
  EXPECT_NE(kept.output.find("matmuls: FP32 on OpenBLAS SGEMM at "), std::string::npos)
      << kept.output;
  const RunResult fixed = run_shell("env OPENBLAS_CORETYPE=Prescott TIGHTPIPE_BLAS_CORE=auto " +
                                    kTightpipe + " " + run);
  ASSERT_EQ(fixed.code, 0) << fixed.output;
  const bool sse_only_cpu = fixed.output.find(": SSE only") != std::string::npos;
  if (!sse_only_cpu) {
    EXPECT_NE(
        fixed.output.find("BLAS: OpenBLAS picked core Prescott (SSE3 kernels) on a CPU with "),
        std::string::npos)
        << fixed.output;
    EXPECT_NE(fixed.output.find("instead"), std::string::npos) << fixed.output;
  }
  expect_one_line_error(run_shell("env TIGHTPIPE_BLAS_CORE=fast " + kTightpipe + " " + run), 2,
                        "TIGHTPIPE_BLAS_CORE=fast: the only value is 'auto'");
  // Issue 45: a value over two lines stays one line; a core OpenBLAS does not know (it ignores
  // the name and runs its own pick) is refused, not reported as kept.
  expect_one_line_error(
      run_shell("env TIGHTPIPE_BLAS_CORE=\"$(printf 'a\\nb')\" " + kTightpipe + " " + run), 2,
      "TIGHTPIPE_BLAS_CORE=a\\x0ab: the only value is 'auto'");
  expect_one_line_error(run_shell("env OPENBLAS_CORETYPE=NoSuchCore " + kTightpipe + " " + run), 2,
                        "OPENBLAS_CORETYPE=NoSuchCore: this OpenBLAS has no core of that name");
}

// train --num-layers-per-virtual-pipeline-stage: Megatron's v = L / (p N) (here 4 / (2 x 1) = 2
// chunks per rank), refused where it does not divide, and not with --vpp.
TEST(TrainCli, MegatronLayersPerVirtualStage) {
  const std::string dir = fresh_dir("lpvs");
  const std::string common =
      "train --num-layers 4 --hidden-size 32 --num-attention-heads 2 "
      "--seq-length 32 --micro-batch-size 4 --eval-iters 0 --data-path " +
      kText +
      " --pp 2 --schedule interleaved --num-microbatches 4 "
      "--train-iters 2";
  RunResult r =
      run_tightpipe(common + " --num-layers-per-virtual-pipeline-stage 1 --out-dir " + dir + "/a");
  ASSERT_EQ(r.code, 0) << r.output;
  auto summary = read_file(dir + "/a/summary.json");
  ASSERT_TRUE(summary.ok());
  EXPECT_NE(summary->find("\"vpp\": 2"), std::string::npos) << *summary;
  expect_one_line_error(run_tightpipe(common + " --num-layers-per-virtual-pipeline-stage 3"), 2,
                        "does not divide the 2 layers per rank");
  expect_one_line_error(
      run_tightpipe(common + " --num-layers 5 --num-layers-per-virtual-pipeline-stage 1"), 2,
      "--num-layers 5 is not divisible by --pipeline-model-parallel-size 2");
}

// Megatron's --profile-step-start / --profile-step-end choose the steps --trace records: steps
// [start, end), counted from 0, one after another on one time axis on every rank.
TEST(TrainCli, ProfileStepsChooseWhatTheTraceRecords) {
  const std::string dir = fresh_dir("profile");
  const std::string common =
      "train --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
      "--seq-length 32 --micro-batch-size 4 --eval-iters 0 --data-path " +
      kText + " --pp 2 --num-microbatches 4 --train-iters 5";
  RunResult r = run_tightpipe(common + " --trace " + dir +
                              "/t.json --profile-step-start 1 "
                              "--profile-step-end 3 --out-dir " +
                              dir + "/run");
  ASSERT_EQ(r.code, 0) << r.output;
  auto text = read_file(dir + "/t.json");
  ASSERT_TRUE(text.ok());
  const auto doc = nlohmann::json::parse(*text);
  std::map<int, std::set<int>> steps_of_rank;
  std::map<int, double> first_start, last_end;  // per step, over both ranks (us)
  for (const auto& e : doc["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const int step = e["args"]["step"].get<int>();
    steps_of_rank[e["pid"].get<int>()].insert(step);
    const double t0 = e["ts"].get<double>(), t1 = t0 + e["dur"].get<double>();
    if (!first_start.count(step) || t0 < first_start[step]) first_start[step] = t0;
    last_end[step] = std::max(last_end[step], t1);
  }
  ASSERT_EQ(steps_of_rank.size(), 2u) << "both ranks";
  for (const auto& [rank, steps] : steps_of_rank)
    EXPECT_EQ(steps, (std::set<int>{1, 2})) << "rank " << rank;
  EXPECT_GE(first_start[2], last_end[1] - 1e-6) << "step 2 is laid after step 1";
  // Without the flags the trace holds the last step only.
  RunResult last = run_tightpipe(common + " --trace " + dir + "/last.json");
  ASSERT_EQ(last.code, 0) << last.output;
  const auto one = nlohmann::json::parse(read_file(dir + "/last.json").value());
  for (const auto& e : one["traceEvents"]) {
    if (e.value("ph", "") == "X") {
      EXPECT_EQ(e["args"]["step"].get<int>(), 4);
    }
  }
  expect_one_line_error(run_tightpipe(common + " --trace " + dir +
                                      "/x.json "
                                      "--profile-step-start 3 --profile-step-end 9"),
                        2, "need start < end <= --train-iters 5");
  expect_one_line_error(run_tightpipe(common + " --profile-step-start 1 --profile-step-end 2"), 2,
                        "hint: add --trace FILE.json");
  expect_one_line_error(run_tightpipe(common + " --trace " + dir +
                                      "/x.json "
                                      "--profile-step-start 2"),
                        2, "give both");
}

}  // namespace
}  // namespace tightpipe::testing_nn
