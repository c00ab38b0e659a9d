// Checkpoints: exact round trip; clear errors for truncated, corrupt and mismatched files; the
// iteration directories and the tracker (newest complete taken, partial ones skipped with a
// warning, --keep-last-checkpoints); a full disk; counts refused before any allocation.
#include "tightpipe/checkpoint.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>

#include "tightpipe/base.h"

namespace tightpipe::nn {
namespace {

GptConfig small() {
  GptConfig c;
  c.num_layers = 3;
  c.hidden_size = 16;
  c.num_heads = 2;
  c.seq_length = 8;
  c.micro_batch_size = 2;
  return c;
}

std::string fresh_dir(const std::string& name) {
  auto d = std::filesystem::path(::testing::TempDir()) / ("tp_ckpt_" + name);
  std::filesystem::remove_all(d);
  return d.string();
}

std::vector<GptStage> stages(const GptConfig& c, int S, uint64_t seed) {
  std::vector<GptStage> out;
  auto specs = partition_layers(c, S, "");
  for (const StageSpec& s : *specs) out.emplace_back(c, s, seed);
  return out;
}
std::vector<GptStage*> ptrs(std::vector<GptStage>& v) {
  std::vector<GptStage*> p;
  for (auto& s : v) p.push_back(&s);
  return p;
}

// A few real optimizer steps so that params, m and v are all non-trivial.
void train_a_bit(std::vector<GptStage>& st) {
  const GptConfig& c = st[0].config();
  std::vector<int32_t> tok(c.tokens_per_microbatch()), tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = int32_t(i * 7 % 256);
    tgt[i] = int32_t(i * 13 % 256);
  }
  for (int step = 0; step < 2; ++step) {
    for (auto& s : st) s.zero_grads();
    std::vector<float> a = [&] {
      auto o = st[0].forward(0, std::span<const int32_t>(tok));
      return std::vector<float>(o.activations.begin(), o.activations.end());
    }();
    for (size_t s = 1; s < st.size(); ++s) {
      auto o = st[s].forward(
          0, std::span<const float>(a),
          s + 1 == st.size() ? std::span<const int32_t>(tgt) : std::span<const int32_t>(), 0.01f);
      a.assign(o.activations.begin(), o.activations.end());
    }
    std::vector<float> g;
    for (size_t s = st.size(); s-- > 0;) {
      auto gi = st[s].backward(0, g);
      g.assign(gi.begin(), gi.end());
    }
    for (auto& s : st) s.optimizer_step(AdamWConfig{}, 1e-2f);
  }
}

TEST(Checkpoint, RoundTripIsExact) {
  const GptConfig c = small();
  auto a = stages(c, 2, 1);
  train_a_bit(a);
  const std::string dir = fresh_dir("roundtrip");
  CheckpointState st{17, {1, 2, 3, 0xffffffffffffffffULL}};
  ASSERT_TRUE(save_checkpoint(dir, ptrs(a), st).ok());
  EXPECT_TRUE(std::filesystem::exists(manifest_path(dir + "/iter_0000017")));
  EXPECT_EQ(read_file(dir + "/latest_checkpointed_iteration.txt").value(), "17\n");
  auto b = stages(c, 2, 999);  // different init
  auto loaded = load_checkpoint(dir, ptrs(b));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->step, 17);
  EXPECT_EQ(loaded->rng_state, st.rng_state);
  for (int s = 0; s < 2; ++s) {
    EXPECT_TRUE(std::ranges::equal(a[s].params(), b[s].params()));
    EXPECT_TRUE(std::ranges::equal(a[s].adam_m(), b[s].adam_m()));
    EXPECT_TRUE(std::ranges::equal(a[s].adam_v(), b[s].adam_v()));
    EXPECT_EQ(a[s].adam_step(), b[s].adam_step());
  }
  // Training on from both gives the same weights.
  train_a_bit(a);
  train_a_bit(b);
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(std::ranges::equal(a[s].params(), b[s].params()));
  auto m = load_manifest(iteration_dir(dir, 17));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->stages.size(), 2u);
  EXPECT_EQ(m->config.hidden_size, 16);
}

TEST(Checkpoint, TruncatedFileNamesTheFile) {
  const GptConfig c = small();
  auto a = stages(c, 1, 1);
  const std::string dir = fresh_dir("trunc");
  ASSERT_TRUE(save_checkpoint(dir, ptrs(a), {}).ok());
  const std::string path = stage_checkpoint_path(iteration_dir(dir, 0), 0);
  std::string bytes = *read_file(path);
  ASSERT_TRUE(write_file(path, std::string_view(bytes).substr(0, bytes.size() - 100)).ok());
  auto r = load_checkpoint(dir, ptrs(a));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos);
  ASSERT_TRUE(write_file(path, std::string_view(bytes).substr(0, 10)).ok());
  r = load_checkpoint(dir, ptrs(a));
  EXPECT_NE(r.status().message().find("header"), std::string::npos) << r.status().message();
  bytes[bytes.size() / 2] ^= 0x40;  // flip a bit in the payload
  ASSERT_TRUE(write_file(path, bytes).ok());
  r = load_checkpoint(dir, ptrs(a));
  EXPECT_NE(r.status().message().find("checksum"), std::string::npos) << r.status().message();
  ASSERT_TRUE(write_file(path, std::string(4096, 'x')).ok());
  r = load_checkpoint(dir, ptrs(a));
  EXPECT_NE(r.status().message().find("bad magic"), std::string::npos) << r.status().message();
}

TEST(Checkpoint, OtherShapeIsAClearError) {
  const GptConfig c = small();
  auto a = stages(c, 1, 1);
  const std::string dir = fresh_dir("shape");
  ASSERT_TRUE(save_checkpoint(dir, ptrs(a), {}).ok());
  GptConfig wider = c;
  wider.hidden_size = 32;
  auto b = stages(wider, 1, 1);
  auto r = load_checkpoint(dir, ptrs(b));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--hidden-size 16"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("hint:"), std::string::npos);
  // The stage file alone also refuses it, naming the file.
  auto r2 = load_stage_checkpoint(stage_checkpoint_path(iteration_dir(dir, 0), 0), b[0]);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("hidden_size 16, the model has 32"), std::string::npos)
      << r2.status().message();
  // Another split.
  auto two = stages(c, 2, 1);
  auto r3 = load_checkpoint(dir, ptrs(two));
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("1 stages"), std::string::npos) << r3.status().message();
  auto r4 = load_stage_checkpoint(stage_checkpoint_path(iteration_dir(dir, 0), 0), two[1]);
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("holds stage 'E,t*3,L'"), std::string::npos)
      << r4.status().message();
  // Missing directory.
  auto r5 = load_checkpoint(dir + "-missing", ptrs(a));
  ASSERT_FALSE(r5.ok());
  EXPECT_EQ(r5.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r5.status().message().find(dir + "-missing' does not exist"), std::string::npos)
      << r5.status().message();
}

bool has(const std::vector<std::string>& lines, const std::string& part) {
  return std::ranges::any_of(lines, [&](const std::string& l) { return l.find(part) != l.npos; });
}

// Saves steps 1..n (a little training between them) into root.
std::vector<GptStage> save_steps(const std::string& root, int n) {
  auto a = stages(small(), 2, 1);
  for (int step = 1; step <= n; ++step) {
    train_a_bit(a);
    EXPECT_TRUE(save_checkpoint(root, ptrs(a), {step, {}}).ok());
  }
  return a;
}

TEST(Checkpoint, LoadTakesTheNewestCompleteIteration) {
  const std::string root = fresh_dir("newest");
  save_steps(root, 3);
  auto r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dir, iteration_dir(root, 3));
  EXPECT_EQ(r->manifest.step, 3);
  EXPECT_TRUE(r->warnings.empty());
  // An iteration directory named directly is taken as it is.
  r = resolve_checkpoint(iteration_dir(root, 2));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->manifest.step, 2);
  auto b = stages(small(), 2, 7);
  auto st = load_checkpoint(root, ptrs(b));
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->step, 3);
}

// A save killed half-way: the newest directory without its manifest, with a stage file of another
// step, or named by a tracker that got ahead; each time the step before loads, with a warning
// naming what was skipped and why.
TEST(Checkpoint, HalfWrittenNewestIterationIsSkippedWithAWarning) {
  namespace fs = std::filesystem;
  const std::string root = fresh_dir("half");
  save_steps(root, 4);
  const std::string it3 = iteration_dir(root, 3), it4 = iteration_dir(root, 4);
  // 1. iter 4 without its manifest, the tracker naming it.
  fs::remove(manifest_path(it4));
  auto r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dir, it3);
  ASSERT_EQ(r->warnings.size(), 1u);
  EXPECT_NE(r->warnings[0].find("names " + it4 + ", which is incomplete"), std::string::npos)
      << r->warnings[0];
  EXPECT_NE(r->warnings[0].find("manifest.txt' does not exist"), std::string::npos)
      << r->warnings[0];
  EXPECT_NE(r->warnings[0].find("took " + it3 + " (step 3)"), std::string::npos) << r->warnings[0];
  // 2. No tracker: the scan skips iter 4 and says so.
  fs::remove(tracker_path(root));
  r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dir, it3);
  EXPECT_TRUE(has(r->warnings, "no " + tracker_path(root))) << join(r->warnings, "\n");
  EXPECT_TRUE(has(r->warnings, "skipped " + it4)) << join(r->warnings, "\n");
  // 3. iter 4 complete but for one stage file of step 3 (stage files at one step, manifest at
  // another), the tracker naming it.
  fs::remove_all(it4);
  fs::copy(it3, it4);
  Manifest m = load_manifest(it3).value();
  m.step = 4;
  ASSERT_TRUE(save_manifest(it4, m).ok());
  auto a = stages(small(), 2, 3);
  ASSERT_TRUE(save_stage_checkpoint(stage_checkpoint_path(it4, 0), a[0], {4, {}}).ok());
  ASSERT_TRUE(write_tracker(root, 4).ok());
  r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->dir, it3);
  EXPECT_TRUE(has(r->warnings, "stage-1.ckpt' is at step 3 but the manifest at step 4"))
      << join(r->warnings, "\n");
  // Named directly, the incomplete directory is an error saying why.
  auto direct = resolve_checkpoint(it4);
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(direct.status().message().find("is at step 3 but the manifest at step 4"),
            std::string::npos)
      << direct.status().message();
  // 4. A tracker that is not a number.
  ASSERT_TRUE(write_file(tracker_path(root), "release\n").ok());
  r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(has(r->warnings, "holds 'release\\x0a', not a step number"))
      << join(r->warnings, "\n");
  // Nothing complete at all: an error listing what was skipped.
  for (int step = 1; step <= 3; ++step) fs::remove(manifest_path(iteration_dir(root, step)));
  r = resolve_checkpoint(root);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("holds no complete checkpoint"), std::string::npos)
      << r.status().message();
  EXPECT_NE(r.status().message().find("skipped " + iteration_dir(root, 1)), std::string::npos)
      << r.status().message();
}

// The flat layout of tightpipe before iteration directories (manifest and stage files in the
// --save directory) still loads.
TEST(Checkpoint, FlatLayoutStillLoads) {
  const std::string dir = fresh_dir("flat");
  auto a = stages(small(), 2, 1);
  train_a_bit(a);
  std::filesystem::create_directories(dir);
  Manifest m;
  m.step = 5;
  m.config = small();
  for (int s = 0; s < 2; ++s) {
    m.stages.push_back(a[s].spec());
    ASSERT_TRUE(save_stage_checkpoint(stage_checkpoint_path(dir, s), a[s], {5, {}}).ok());
  }
  ASSERT_TRUE(save_manifest(dir, m).ok());
  auto b = stages(small(), 2, 9);
  auto st = load_checkpoint(dir, ptrs(b));
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->step, 5);
  EXPECT_TRUE(std::ranges::equal(a[1].params(), b[1].params()));
}

TEST(Checkpoint, KeepLastKeepsExactlyK) {
  namespace fs = std::filesystem;
  const std::string root = fresh_dir("keep");
  save_steps(root, 6);
  fs::remove(manifest_path(iteration_dir(root, 3)));  // an incomplete older one
  fs::create_directories(iteration_dir(root, 9));     // newer than this run: left alone
  auto lines = prune_checkpoints(root, 2, 6);
  std::vector<int64_t> left;
  for (int step = 0; step <= 9; ++step)
    if (fs::exists(iteration_dir(root, step))) left.push_back(step);
  EXPECT_EQ(left, (std::vector<int64_t>{5, 6, 9}));
  EXPECT_TRUE(has(lines, "removed " + iteration_dir(root, 3) + " (incomplete:"))
      << join(lines, "\n");
  EXPECT_TRUE(has(lines, "removed " + iteration_dir(root, 1) + " (older than the newest 2"))
      << join(lines, "\n");
  EXPECT_EQ(lines.size(), 4u) << join(lines, "\n");
  // K = 1 keeps the tracker's one only.
  prune_checkpoints(root, 1, 6);
  EXPECT_FALSE(fs::exists(iteration_dir(root, 5)));
  EXPECT_TRUE(fs::exists(iteration_dir(root, 6)));
  EXPECT_TRUE(resolve_checkpoint(root).ok());
}

// A full disk (a write into /dev/full fails with ENOSPC): the message names the file and the
// cause, no .tmp is left and the tracker keeps naming the previous checkpoint.
TEST(Checkpoint, FullDiskSaysSoAndLeavesNoTmp) {
  namespace fs = std::filesystem;
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full on this system";
  const std::string root = fresh_dir("full");
  fs::create_directories(root);
  const std::string file = root + "/data_position.json";
  fs::create_symlink("/dev/full", file + ".tmp");
  Status s = write_checkpoint_file(file, std::string(100000, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_NE(s.message().find(file + ".tmp"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("hint:"), std::string::npos) << s.message();
  EXPECT_FALSE(fs::exists(fs::symlink_status(file + ".tmp")));
  EXPECT_FALSE(fs::exists(file));
  // A whole save: the stage file hits the full disk; the tracker still names step 1.
  auto a = save_steps(root, 1);
  const std::string it2 = iteration_dir(root, 2);
  fs::create_directories(staging_dir(it2));  // where the save writes before it swaps
  fs::create_symlink("/dev/full", stage_checkpoint_path(staging_dir(it2), 1) + ".tmp");
  s = save_checkpoint(root, ptrs(a), {2, {}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("stage-1.ckpt.tmp"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
  for (const auto& e : fs::recursive_directory_iterator(root))
    EXPECT_NE(e.path().extension(), ".tmp") << e.path();
  EXPECT_EQ(read_file(tracker_path(root)).value(), "1\n");
  auto r = resolve_checkpoint(root);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->manifest.step, 1);
}

// A re-save of a step that already holds a complete checkpoint (resumed from an older one) that
// dies half-way: SIGKILL while its second stage file is being written (the save blocks on a FIFO
// there), or a full disk at that file. The old checkpoint still loads, whole, with its own
// weights; a later save that completes replaces it.
TEST(Checkpoint, InterruptedResaveOfAStepKeepsTheCompleteOne) {
  namespace fs = std::filesystem;
  GptConfig c = small();
  c.hidden_size = 64;  // stage files far beyond a pipe's 64 KiB: the writer blocks in the FIFO
  const std::string root = fresh_dir("resave");
  auto a = stages(c, 2, 1);
  train_a_bit(a);
  ASSERT_TRUE(save_checkpoint(root, ptrs(a), {2, {}}).ok());
  train_a_bit(a);
  ASSERT_TRUE(save_checkpoint(root, ptrs(a), {4, {}}).ok());
  const std::string it4 = iteration_dir(root, 4);
  const std::string old0 = read_file(stage_checkpoint_path(it4, 0)).value();
  const std::string old1 = read_file(stage_checkpoint_path(it4, 1)).value();
  auto expect_old_step4_loads = [&] {
    auto m = check_checkpoint_complete(it4);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(read_file(stage_checkpoint_path(it4, 0)).value(), old0);
    EXPECT_EQ(read_file(stage_checkpoint_path(it4, 1)).value(), old1);
    auto b = stages(c, 2, 9);
    auto st = load_checkpoint(root, ptrs(b));
    ASSERT_TRUE(st.ok()) << st.status().to_string();
    EXPECT_EQ(st->step, 4);
  };
  // Other weights (as trained on from step 2), saved again as step 4.
  auto other = stages(c, 2, 5);
  train_a_bit(other);

  // SIGKILL mid-save: the second stage file's .tmp is a FIFO nobody reads, wherever the save
  // writes it (the iteration directory itself or the staging directory beside it).
  const std::string fifo = root + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& d : {it4, it4 + ".saving"}) {
    fs::create_directories(d);
    fs::create_symlink(fifo, stage_checkpoint_path(d, 1) + ".tmp");
  }
  const pid_t pid = ::fork();
  if (pid == 0) {
    (void)save_checkpoint(root, ptrs(other), {4, {}});
    ::_exit(0);
  }
  ASSERT_GT(pid, 0);
  // Opening the read end waits for the save to open the write end: the save is in flight, its
  // first stage file written; it then blocks once the pipe is full (nothing reads it).
  const int rd = ::open(fifo.c_str(), O_RDONLY);
  ASSERT_GE(rd, 0);
  ::kill(pid, SIGKILL);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  ::close(rd);
  EXPECT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << wstatus;
  expect_old_step4_loads();
  for (const std::string& d : {it4, it4 + ".saving"})
    fs::remove(stage_checkpoint_path(d, 1) + ".tmp");

  // A full disk at the second stage file: an error, the old step 4 untouched.
  if (fs::exists("/dev/full")) {
    fs::create_directories(it4 + ".saving");
    fs::create_symlink("/dev/full", stage_checkpoint_path(it4 + ".saving", 1) + ".tmp");
    Status s = save_checkpoint(root, ptrs(other), {4, {}});
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("No space left on device"), std::string::npos) << s.message();
    expect_old_step4_loads();
  }

  // A save that completes replaces it whole, and leaves nothing beside it.
  ASSERT_TRUE(save_checkpoint(root, ptrs(other), {4, {}}).ok());
  EXPECT_NE(read_file(stage_checkpoint_path(it4, 1)).value(), old1);
  auto b = stages(c, 2, 9);
  ASSERT_TRUE(load_checkpoint(root, ptrs(b)).ok());
  EXPECT_EQ(b[1].params()[0], other[1].params()[0]);
  EXPECT_EQ(std::vector<float>(b[0].params().begin(), b[0].params().end()),
            std::vector<float>(other[0].params().begin(), other[0].params().end()));
  EXPECT_FALSE(fs::exists(it4 + ".saving"));
  EXPECT_FALSE(fs::exists(it4 + ".old"));
}

// Damage a message must name and explain: a flipped byte of the header's parameter count (the
// file is damaged; the shape flags are right), a stage file that is a directory.
TEST(Checkpoint, DamagedHeaderAndDirectoryAreNamedWithTheRightHint) {
  namespace fs = std::filesystem;
  const std::string root = fresh_dir("damaged");
  auto a = stages(small(), 1, 1);
  ASSERT_TRUE(save_checkpoint(root, ptrs(a), {1, {}}).ok());
  const std::string path = stage_checkpoint_path(iteration_dir(root, 1), 0);
  std::string bytes = read_file(path).value();
  constexpr size_t kNumParamsOffset = 8 + 4 + 9 * 4;  // magic, version, nine int32
  bytes[kNumParamsOffset + 1] ^= 0x01;
  ASSERT_TRUE(write_file(path, bytes).ok());
  auto r = load_stage_checkpoint(path, a[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find("'" + path + "' is corrupt: its header records"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("pass the shape"), std::string::npos) << msg;  // the old, misleading hint
  EXPECT_NE(msg.find("hint:"), std::string::npos) << msg;
  auto whole = load_checkpoint(root, ptrs(a));  // the only iteration: nothing complete
  ASSERT_FALSE(whole.ok());
  EXPECT_NE(whole.status().message().find("'" + path + "' is corrupt: its header records"),
            std::string::npos)
      << whole.status().message();
  EXPECT_EQ(whole.status().message().find("truncated"), std::string::npos)
      << whole.status().message();
  // A directory where the stage file should be.
  fs::remove(path);
  fs::create_directories(path);
  r = load_stage_checkpoint(path, a[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'" + path + "' is a directory, not a file"),
            std::string::npos)
      << r.status().message();
  EXPECT_EQ(r.status().message().find("truncated"), std::string::npos) << r.status().message();
}

// Every count of a manifest is range-checked before anything is allocated: num_stages 10^9 (it
// allocated 23 GB before an error), counts beyond 32 bits, a huge manifest.
// The manifest records the precision the run trained in; the weights are FP32 master weights
// either way, so a bf16 checkpoint loads into FP32 stages (and the reverse) exactly. A manifest
// from before --bf16 (no precision line) reads as fp32; an unknown precision is refused.
TEST(Checkpoint, PrecisionIsRecordedAndEitherLoads) {
  GptConfig c16 = small();
  c16.precision = Precision::kBf16;
  auto a = stages(c16, 2, 1);
  train_a_bit(a);
  const std::string dir = fresh_dir("precision");
  ASSERT_TRUE(save_checkpoint(dir, ptrs(a), {5, {}}).ok());
  const std::string it = iteration_dir(dir, 5);
  auto m = load_manifest(it);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->config.precision, Precision::kBf16);
  auto b = stages(small(), 2, 7);  // fp32
  ASSERT_TRUE(load_checkpoint(dir, ptrs(b)).ok());
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(std::ranges::equal(a[s].params(), b[s].params()));
  ASSERT_TRUE(save_checkpoint(dir, ptrs(b), {6, {}}).ok());
  EXPECT_EQ(load_manifest(iteration_dir(dir, 6)).value().config.precision, Precision::kFp32);
  auto c = stages(c16, 2, 8);
  ASSERT_TRUE(load_checkpoint(dir, ptrs(c)).ok());  // the fp32 save at step 6 into bf16
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(std::ranges::equal(b[s].params(), c[s].params()));

  std::string text = read_file(manifest_path(it)).value();
  const size_t at = text.find("precision bf16\n");
  ASSERT_NE(at, std::string::npos) << text;
  ASSERT_TRUE(write_file(manifest_path(it), std::string(text).erase(at, 15)).ok());
  EXPECT_EQ(load_manifest(it).value().config.precision, Precision::kFp32);
  ASSERT_TRUE(
      write_file(manifest_path(it), std::string(text).replace(at, 14, "precision fp16")).ok());
  auto bad = load_manifest(it);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bad.status().message().find("'precision' is 'fp16', expected fp32 or bf16"),
            std::string::npos)
      << bad.status().message();
}

TEST(Checkpoint, HugeManifestCountsAreRefusedFast) {
  const std::string dir = fresh_dir("huge");
  std::filesystem::create_directories(dir);
  const std::string head = "tightpipe-checkpoint 1\nstep 3\n";
  const std::string shape =
      "vocab_size 256\nseq_length 8\nnum_layers 3\nhidden_size 16\nnum_heads 2\n";
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {head + "num_stages 1000000000\n" + shape, "'num_stages' is 1000000000, expected 1 to 5"},
      {head + "num_stages 2\nvocab_size 256\nseq_length 8\nnum_layers 1000000000\nhidden_size "
              "16\nnum_heads 2\n",
       "'num_stages' is 2"},
      {head + "num_stages 1000000000\nvocab_size 256\nseq_length 8\nnum_layers 1000000000\n"
              "hidden_size 16\nnum_heads 2\n",
       "--num-layers 1000000000: must be in [1, 1024]"},  // the model limits come first
      {head + "num_stages 1\n" + shape + "hidden_size 4294967312\n",
       "'hidden_size' is 4294967312, expected a count in [1, 2147483647]"},
      {head + "num_stages -1\n" + shape, "'num_stages' is -1"},
      {"tightpipe-checkpoint 1\nstep -2\nnum_stages 1\n" + shape, "'step' is -2"},
      {head + "num_stages 1\n" + shape + "file ../../etc/passwd\n", "is not a file name"},
      {head + shape, "no 'num_stages' line"},
  };
  for (const Case& c : cases) {
    ASSERT_TRUE(write_file(manifest_path(dir), c.text).ok());
    const auto t0 = std::chrono::steady_clock::now();
    auto m = load_manifest(dir);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (c.expect == "'num_stages' is 2") {  // 10^9 layers is the model limits' to refuse
      EXPECT_LT(s, 1.0);
      continue;
    }
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), StatusCode::kCorruption);
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
    EXPECT_NE(m.status().message().find(manifest_path(dir)), std::string::npos);
    EXPECT_NE(m.status().message().find("hint:"), std::string::npos) << m.status().message();
    EXPECT_LT(s, 1.0) << c.text;
  }
  ASSERT_TRUE(write_file(manifest_path(dir), head + std::string(kMaxManifestBytes, '\n')).ok());
  auto m = load_manifest(dir);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("more than the"), std::string::npos) << m.status().message();
}

// A header whose layer range overflows int (first layer INT32_MAX; found by fuzz_checkpoint_stage
// under UBSan) is refused naming the file, never with a wrapped (negative) range.
TEST(Checkpoint, HugeLayerRangeIsAClearError) {
  const GptConfig c = small();
  auto a = stages(c, 1, 1);
  const std::string dir = fresh_dir("range");
  ASSERT_TRUE(save_checkpoint(dir, ptrs(a), {}).ok());
  const std::string path = stage_checkpoint_path(iteration_dir(dir, 0), 0);
  std::string bytes = read_file(path).value();
  const int32_t first_layer = INT32_MAX, stage_layers = 1;
  // Header: magic[8], version (u32), 5 shape ints, then first_layer and stage_layers.
  bytes.replace(32, 4, reinterpret_cast<const char*>(&first_layer), 4);
  bytes.replace(36, 4, reinterpret_cast<const char*>(&stage_layers), 4);
  ASSERT_TRUE(write_file(path, bytes).ok());
  auto r = load_stage_checkpoint(path, a[0]);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find("-2147483648"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace tightpipe::nn
