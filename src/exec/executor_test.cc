// Pipeline equivalence (DESIGN §5 rung 3): every generator, on threads as ranks, trains the same
// as one rank: the same losses and the same weights after several optimizer steps.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <utility>

#include "tightpipe/base.h"
#include "tightpipe/trainer.h"

namespace tightpipe {
namespace {

nn::GptConfig tiny_config(nn::Precision precision = nn::Precision::kFp32) {
  nn::GptConfig c;
  c.precision = precision;
  c.vocab_size = 256;
  c.seq_length = 8;
  c.num_layers = 8;  // p = 4, v = 2: 8 stages
  c.hidden_size = 16;
  c.num_heads = 2;
  c.micro_batch_size = 2;
  return c;
}

// Random microbatches for `steps` steps of `m` microbatches.
std::vector<std::vector<Batch>> make_batches(const nn::GptConfig& c, int steps, int m,
                                             uint64_t seed) {
  Rng rng(seed);
  std::vector<std::vector<Batch>> out(steps);
  for (auto& step : out) {
    for (int mb = 0; mb < m; ++mb) {
      Batch b;
      b.batch_size = c.micro_batch_size;
      b.seq_length = c.seq_length;
      for (int i = 0; i < c.micro_batch_size * c.seq_length; ++i) {
        b.tokens.push_back(static_cast<int32_t>(rng.below(c.vocab_size)));
        b.targets.push_back(static_cast<int32_t>(rng.below(c.vocab_size)));
      }
      step.push_back(std::move(b));
    }
  }
  return out;
}

struct Reference {
  std::vector<double> losses;
  std::vector<float> params;  // whole model, one-stage layout
  std::vector<nn::ParamTensor> tensors;
};

constexpr uint64_t kSeed = 7;
constexpr float kLr = 1e-2f;
constexpr int kSteps = 5;

// The one-rank oracle. With `reverse_backward`, all forwards run first and the backwards go from
// microbatch m-1 down to 0 (looped BFS's order), so gradients sum in the same order as there.
Reference single_rank(const nn::GptConfig& c, const std::vector<std::vector<Batch>>& batches,
                      float clip, bool reverse_backward = false) {
  auto specs = nn::partition_layers(c, 1, "").value();
  nn::GptStage model(c, specs[0], kSeed);
  Reference ref;
  for (const auto& step : batches) {
    std::vector<nn::MicroBatch> mbs;
    for (const auto& b : step) mbs.push_back({b.tokens, b.targets});
    if (!reverse_backward) {
      ref.losses.push_back(nn::train_step(model, mbs, nn::AdamWConfig{}, kLr, clip).loss);
      continue;
    }
    const float scale = 1.0f / float(double(mbs.size()) * c.tokens_per_microbatch());
    double loss = 0;
    for (size_t i = 0; i < mbs.size(); ++i)
      loss += model.forward(int(i), mbs[i].tokens, mbs[i].targets, scale).loss;
    for (size_t i = mbs.size(); i-- > 0;) model.backward(int(i));
    const double sq = model.grad_sq_norm();
    const float cs = nn::clip_scale(sq, clip);
    if (cs != 1.0f) model.scale_grads(cs);
    model.optimizer_step(nn::AdamWConfig{}, kLr);
    model.zero_grads();
    ref.losses.push_back(loss);
  }
  ref.params.assign(model.params().begin(), model.params().end());
  ref.tensors = model.tensors();
  return ref;
}

// The one-rank oracle in DualPipe's summation order: two copies of the model with the same
// seed, the first taking microbatches 0..m/2-1 and the second m/2..m-1 (each in ascending order,
// as each direction's copy accumulates them), then the second copy's gradients added to the
// first's (the float sum: what the copies' allreduce through doubles gives), the optimizer on the
// first and its weights copied to the second. The loss is the direction-1 half's sum plus the
// direction-0 half's (the loss allreduce in rank order: rank 0 holds direction 1's last stage).
Reference single_rank_two_halves(const nn::GptConfig& c,
                                 const std::vector<std::vector<Batch>>& batches, float clip) {
  auto specs = nn::partition_layers(c, 1, "").value();
  nn::GptStage a(c, specs[0], kSeed), b(c, specs[0], kSeed);
  Reference ref;
  for (const auto& step : batches) {
    const int m = static_cast<int>(step.size());
    const float scale = 1.0f / float(double(m) * c.tokens_per_microbatch());
    double half_loss[2] = {0, 0};
    for (int i = 0; i < m; ++i) {
      nn::GptStage& copy = i < m / 2 ? a : b;
      half_loss[i < m / 2 ? 0 : 1] += copy.forward(i, step[i].tokens, step[i].targets, scale).loss;
      copy.backward(i);
    }
    std::span<float> ga = a.grads();
    std::span<const float> gb = std::as_const(b).grads();
    for (size_t i = 0; i < ga.size(); ++i) ga[i] += gb[i];
    const float cs = nn::clip_scale(a.grad_sq_norm(), clip);
    if (cs != 1.0f) a.scale_grads(cs);
    a.optimizer_step(nn::AdamWConfig{}, kLr);
    a.zero_grads();
    b.zero_grads();
    std::span<const float> wa = std::as_const(a).params();
    std::copy(wa.begin(), wa.end(), b.params().begin());
    ref.losses.push_back(half_loss[1] + half_loss[0]);
  }
  ref.params.assign(a.params().begin(), a.params().end());
  ref.tensors = a.tensors();
  return ref;
}

struct Case {
  std::string schedule;
  int p, m, v;
  nn::Precision precision = nn::Precision::kFp32;
};

// Every generator x p in {1, 2, 4} x two microbatch counts (x v = 2 where the schedule takes it;
// zb-h2 shifted by p to meet its m >= 2p).
std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const auto& g : schedule_generators()) {
    if (g.name == "dualpipe") {  // two directions; it needs p and m even, m >= 2p
      for (int p : {2, 4}) {
        for (int m : {2 * p, 2 * p + 2}) cases.push_back({g.name, p, m, 2});
      }
      continue;
    }
    if (g.name == "dualpipev") {  // OVERLAP_F_B pairs; it needs m >= 2p
      for (int p : {2, 4}) {
        for (int m : {2 * p, 2 * p + 1}) cases.push_back({g.name, p, m, 2});
      }
      continue;
    }
    const int v = g.fixed_chunks == 0 ? 2 : g.fixed_chunks;
    for (int p : {1, 2, 4}) {
      for (int m : {p, 2 * p + 1}) {
        if (g.name == "interleaved" && m % p != 0) m = 3 * p;
        if (g.name == "zb-h2") m += p;  // p, 2p+1 -> 2p, 3p+1: it needs m >= 2p
        cases.push_back({g.name, p, m, v});
      }
    }
  }
  // The schedules built from costs (auto_schedule.h), on seeded uneven costs (auto_schedule()).
  for (const char* name : {"zb-1p", "zb-2p", "zb-v-auto"}) {
    for (int p : {2, 4}) {
      for (int m : {p, 2 * p + 1}) cases.push_back({name, p, m, auto_schedule_chunks(name)});
    }
  }
  return cases;
}

// An auto schedule for p ranks and m microbatches, built from seeded uneven per-stage costs and
// message latencies (the shape varies with the costs; every shape must train as one rank).
Result<Schedule> auto_schedule(const std::string& name, int p, int m) {
  Rng rng(static_cast<uint64_t>(1000 * p + m));
  const CostModel costs =
      random_cost_model(rng, p * auto_schedule_chunks(name), /*act_after_i=*/0.5, 0.3);
  return build_auto_schedule(name, p, m, costs, {});
}

// Under mpirun (TP_TEST_TRANSPORT=mpi) the ranks are processes and only cases with p equal to the
// MPI world size run; otherwise threads.
TransportKind test_transport() {
  const char* t = std::getenv("TP_TEST_TRANSPORT");
  return t && std::string(t) == "mpi" ? TransportKind::kMpi : TransportKind::kThreads;
}
int mpi_world_size() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  return n ? std::atoi(n) : 0;
}

class EquivalenceTest : public ::testing::TestWithParam<Case> {
 protected:
  // Trains kSteps on the pipeline; checks every rank's losses and local tensors against `ref`.
  // exact: bit-identical; otherwise within `rel` relative (of max(|ref|, 1e-2)).
  void run_and_compare(const Reference& ref, float clip, bool exact, double rel) {
    const Case c = GetParam();
    const auto cfg = tiny_config(c.precision);
    const auto batches = make_batches(cfg, kSteps, c.m, 99);
    auto sched =
        is_auto_schedule_name(c.schedule)
            ? auto_schedule(c.schedule, c.p, c.m)
            : generate_schedule(c.schedule, {.ranks = c.p, .microbatches = c.m, .chunks = c.v});
    ASSERT_TRUE(sched.ok()) << sched.status().message();
    auto lowered = lower(*sched);
    ASSERT_TRUE(lowered.ok());
    // One spec per model stage, expanded to the stage ids (DualPipe: two copies of each).
    auto model_specs = nn::partition_layers(cfg, lowered->stages_per_direction(), "");
    ASSERT_TRUE(model_specs.ok()) << model_specs.status().message();
    const std::vector<nn::StageSpec> specs = stage_specs(*lowered, *model_specs);
    for (bool overlap : {true, false}) {
      std::mutex mu;
      std::vector<std::string> failures;
      WorldOptions w;
      w.kind = test_transport();
      w.world_size = c.p;
      auto statuses = run_world(w, [&](Transport& t) -> Status {
        ExecutorOptions eo;
        eo.overlap_p2p = overlap;
        eo.timeout_s = 60;
        eo.progress_thread = w.kind == TransportKind::kMpi;  // as run_training sets it
        PipelineRank pr(*lowered, t.rank(), t, cfg, specs, kSeed, {}, eo);
        std::vector<std::string> bad;
        for (int s = 0; s < kSteps; ++s) {
          BatchFetcher fetch = [&](int32_t mb) -> Result<const Batch*> { return &batches[s][mb]; };
          TP_ASSIGN_OR_RETURN(
              StepOutcome o,
              pipeline_step(pr, t, s, fetch, int64_t(c.m) * cfg.tokens_per_microbatch(),
                            nn::AdamWConfig{}, kLr, clip, 60));
          const bool same = exact
                                ? o.loss == ref.losses[s]
                                : std::abs(o.loss - ref.losses[s]) <= rel * std::abs(ref.losses[s]);
          if (!same)
            bad.push_back(fmt::format("rank {} step {} loss {:.17g} vs {:.17g}", t.rank(), s,
                                      o.loss, ref.losses[s]));
          // DualPipe: the two copies of every model stage hold the same bits after each step.
          if (Status copies = check_stage_copies(pr, t, 60); !copies.ok())
            bad.push_back(fmt::format("rank {} step {}: {}", t.rank(), s, copies.message()));
        }
        for (auto& [sid, stage] : pr.stages()) {
          for (const auto& pt : stage->tensors()) {
            auto it = std::find_if(ref.tensors.begin(), ref.tensors.end(),
                                   [&](const nn::ParamTensor& r) { return r.name == pt.name; });
            if (it == ref.tensors.end() || it->size != pt.size) {
              bad.push_back("no reference tensor " + pt.name);
              continue;
            }
            auto got = stage->params().subspan(pt.offset, pt.size);
            double worst = 0;
            for (size_t i = 0; i < pt.size; ++i) {
              const double want = ref.params[it->offset + i];
              const double d = std::abs(double(got[i]) - want);
              worst = std::max(worst, exact ? d : d / std::max(std::abs(want), 1e-2));
            }
            if (exact ? worst != 0 : worst > rel) {
              bad.push_back(fmt::format("rank {} {}: max {} difference {:.3g}", t.rank(), pt.name,
                                        exact ? "absolute" : "relative", worst));
            }
          }
        }
        std::lock_guard<std::mutex> lock(mu);
        failures.insert(failures.end(), bad.begin(), bad.end());
        return OkStatus();
      });
      ASSERT_TRUE(statuses.ok()) << statuses.status().to_string();
      for (const auto& st : *statuses) ASSERT_TRUE(st.status.ok()) << st.status.to_string();
      for (const auto& f : failures)
        ADD_FAILURE() << c.schedule << " p=" << c.p << " m=" << c.m << " overlap=" << overlap
                      << ": " << f;
    }
  }
  bool skip_for_world() {
    if (test_transport() == TransportKind::kMpi && GetParam().p != mpi_world_size()) return true;
    return false;
  }
};

// The one-rank oracle of a schedule: DualPipe's sums its two halves apart (above), looped BFS's
// runs the backwards in reverse, every other one is train_step.
Reference oracle(const Case& c, const nn::GptConfig& cfg, float clip) {
  const auto batches = make_batches(cfg, kSteps, c.m, 99);
  if (c.schedule == "dualpipe") return single_rank_two_halves(cfg, batches, clip);
  return single_rank(cfg, batches, clip, /*reverse_backward=*/c.schedule == "looped-bfs");
}

// Without clipping every schedule sums each stage's gradients in the oracle's microbatch order
// (looped BFS against the reverse-order oracle; DualPipe against the oracle that sums its two
// halves apart and then adds them, as its two copies do): losses and weights are bit-identical.
TEST_P(EquivalenceTest, NoClipBitIdentical) {
  if (skip_for_world()) GTEST_SKIP() << "p != MPI world size";
  const Case c = GetParam();
  run_and_compare(oracle(c, tiny_config(), 0.0f), 0.0f, /*exact=*/true, 0);
}

// With clipping the global norm is summed per stage and then across ranks, a different double
// summation than the single rank's, so the clip factor may differ in its last bits: within 1e-6
// relative (of max(|w|, 1e-2)).
TEST_P(EquivalenceTest, ClippedWithinOneInAMillion) {
  if (skip_for_world()) GTEST_SKIP() << "p != MPI world size";
  const Case c = GetParam();
  run_and_compare(oracle(c, tiny_config(), 0.5f), 0.5f, /*exact=*/false, 1e-6);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.schedule;
  std::erase(n, '-');
  return fmt::format("{}_p{}_m{}_v{}", n, info.param.p, info.param.m, info.param.v);
}

INSTANTIATE_TEST_SUITE_P(AllGenerators, EquivalenceTest, ::testing::ValuesIn(all_cases()),
                         case_name);

// --bf16: every schedule at p = 2 (m = 2p + 1, zb-h2 3p + 1, interleaved 3p; and the auto
// schedules) trains bit for bit as one bf16 rank: the arithmetic does not depend on the
// schedule, and messages between ranks travel as bf16 (executor.h) without losing a bit because
// stage-boundary values are bf16 already (model.h). Under mpirun -np 2 the ranks are processes.
std::vector<Case> bf16_cases() {
  std::vector<Case> cases;
  for (const Case& c : all_cases()) {
    if (c.p != 2 || c.m == c.p) continue;
    Case b = c;
    b.precision = nn::Precision::kBf16;
    cases.push_back(b);
  }
  return cases;
}

class Bf16EquivalenceTest : public EquivalenceTest {};

TEST_P(Bf16EquivalenceTest, NoClipBitIdentical) {
  if (skip_for_world()) GTEST_SKIP() << "p != MPI world size";
  const Case c = GetParam();
  ASSERT_EQ(c.precision, nn::Precision::kBf16);
  const auto cfg = tiny_config(nn::Precision::kBf16);
  const Reference ref = oracle(c, cfg, 0.0f);
  // Not the FP32 run: bf16 arithmetic really ran (else this test would compare FP32 with FP32).
  const Reference fp32 = oracle(c, tiny_config(), 0.0f);
  ASSERT_NE(ref.losses.back(), fp32.losses.back());
  run_and_compare(ref, 0.0f, /*exact=*/true, 0);
}

INSTANTIATE_TEST_SUITE_P(AllGenerators, Bf16EquivalenceTest, ::testing::ValuesIn(bf16_cases()),
                         case_name);

// The bytes on the wire: one step of 1f1b at p = 2 sends every activation and gradient as
// B*T*C*4 bytes in FP32 and B*T*C*2 in bf16, and records those bytes on the SEND and RECV events.
TEST(Bf16MessagesTest, HalfTheBytesOnTheWire) {
  auto lowered = lower(generate_schedule("1f1b", {.ranks = 2, .microbatches = 3}).value()).value();
  for (nn::Precision precision : {nn::Precision::kFp32, nn::Precision::kBf16}) {
    const auto cfg = tiny_config(precision);
    const auto specs = nn::partition_layers(cfg, 2, "").value();
    const auto batches = make_batches(cfg, 1, 3, 5);
    const int64_t floats = int64_t(cfg.micro_batch_size) * cfg.seq_length * cfg.hidden_size;
    const int64_t want = floats * (precision == nn::Precision::kBf16 ? 2 : 4);
    std::mutex mu;
    std::vector<int64_t> bytes;
    WorldOptions w;
    w.world_size = 2;
    auto statuses = run_world(w, [&](Transport& t) -> Status {
      PipelineRank pr(lowered, t.rank(), t, cfg, specs, kSeed, {}, ExecutorOptions{});
      BatchFetcher fetch = [&](int32_t mb) -> Result<const Batch*> { return &batches[0][mb]; };
      TP_ASSIGN_OR_RETURN(StepOutcome o,
                          pipeline_step(pr, t, 0, fetch, 3 * cfg.tokens_per_microbatch(),
                                        nn::AdamWConfig{}, kLr, 0.0f, 60));
      std::lock_guard<std::mutex> lock(mu);
      for (const TimelineEvent& e : o.rank.timeline.events)
        if (e.kind == EventKind::kSend || e.kind == EventKind::kRecv) bytes.push_back(e.bytes);
      return OkStatus();
    });
    ASSERT_TRUE(statuses.ok()) << statuses.status().to_string();
    for (const auto& st : *statuses) ASSERT_TRUE(st.status.ok()) << st.status.to_string();
    // 3 activations and 3 gradients, each sent once and received once.
    EXPECT_EQ(bytes.size(), 12u) << nn::precision_name(precision);
    for (int64_t b : bytes) EXPECT_EQ(b, want) << nn::precision_name(precision);
  }
}

// DualPipeV and DualPipe run. A schedule of two directions whose copies of a model stage sit on
// one rank (nowhere to sum their gradients across ranks) is refused with one line before any
// rank starts.
TEST(ExecutableTest, TwoCopiesOnOneRankAreRefused) {
  for (const char* name : {"dualpipev", "dualpipe"}) {
    auto sched = generate_schedule(name, {.ranks = 2, .microbatches = 4, .chunks = 2});
    ASSERT_TRUE(sched.ok()) << sched.status().to_string();
    auto lowered = lower(*sched);
    ASSERT_TRUE(lowered.ok()) << lowered.status().to_string();
    EXPECT_TRUE(check_executable(*lowered).ok()) << check_executable(*lowered).to_string();
  }
  // Interleaved p = 2, v = 2 (stages 0 1 2 3 on ranks 0 1 0 1) read as two directions: model
  // stage 0 is stage ids 0 and 2, both on rank 0.
  Schedule two =
      lower(generate_schedule("interleaved", {.ranks = 2, .microbatches = 2, .chunks = 2}).value())
          .value();
  EXPECT_TRUE(check_executable(two).ok());
  two.directions = 2;
  const Status st = check_executable(two);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("copies of model stage 0 in directions 0 and 1 (stage ids 0 and 2) "
                              "are both on rank 0"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
}

// The copies check can fail: after one step of DualPipe p = 2, m = 4 the copies are equal; one
// weight of rank 1's stage id 2 (the direction-1 copy of model stage 0, whose direction-0 copy
// is stage id 0 on rank 0) is then nudged by one ulp, and every rank's check names model stage
// 0, ranks 0 and 1, the parameter and its tensor.
TEST(StageCopiesTest, CheckFindsAOneUlpDifference) {
  const int p = 2, m = 4;
  const auto cfg = tiny_config();
  const auto batches = make_batches(cfg, 1, m, 3);
  auto lowered =
      lower(generate_schedule("dualpipe", {.ranks = p, .microbatches = m, .chunks = 2}).value())
          .value();
  const auto specs = stage_specs(lowered, nn::partition_layers(cfg, p, "").value());
  std::mutex mu;
  std::vector<std::string> messages(p);
  WorldOptions w;
  w.world_size = p;
  auto statuses = run_world(w, [&](Transport& t) -> Status {
    PipelineRank pr(lowered, t.rank(), t, cfg, specs, kSeed, {}, ExecutorOptions{});
    TP_RETURN_IF_ERROR(check_stage_copies(pr, t, 60));  // the same seed: the same weights
    BatchFetcher fetch = [&](int32_t mb) -> Result<const Batch*> { return &batches[0][mb]; };
    TP_RETURN_IF_ERROR(pipeline_step(pr, t, 0, fetch, m * cfg.tokens_per_microbatch(),
                                     nn::AdamWConfig{}, kLr, 0.0f, 60)
                           .status());
    TP_RETURN_IF_ERROR(check_stage_copies(pr, t, 60));
    if (t.rank() == 1) {
      std::span<float> wts = pr.stages().at(2)->params();  // stage id 2 = model stage 0's copy
      wts[5] = std::nextafter(wts[5], 1.0f);
    }
    const Status st = check_stage_copies(pr, t, 60);
    std::lock_guard<std::mutex> lock(mu);
    messages[t.rank()] = st.ok() ? "ok" : st.message();
    return OkStatus();
  });
  ASSERT_TRUE(statuses.ok()) << statuses.status().to_string();
  for (const auto& st : *statuses) ASSERT_TRUE(st.status.ok()) << st.status.to_string();
  for (int r = 0; r < p; ++r) {
    EXPECT_NE(messages[r].find("model stage 0: the copies on ranks 0 and 1 differ at parameter 5 "
                               "(wte)"),
              std::string::npos)
        << "rank " << r << ": " << messages[r];
  }
}

// A DualPipeV pair runs as its F then its B, and the timeline records them as the F and the B
// they are (as the simulator does): per rank 2m F events and 2m B-or-I events, none named as a
// pair, and each pair's F ends before its B starts.
TEST(OverlapPairTest, TimelineShowsTheFAndTheB) {
  const int p = 2, m = 4;
  auto lowered =
      lower(generate_schedule("dualpipev", {.ranks = p, .microbatches = m, .chunks = 2}).value())
          .value();
  auto transports = make_inproc_transports(p);
  std::vector<RankTimeline> tl(p);
  const double origin = now_seconds();
  auto statuses = run_on_threads(transports, [&](Transport& t) -> Status {
    ExecutorOptions eo;
    eo.emulated = true;
    eo.costs = EmulatedCompute::parse("f=1,i=1,w=1").value();
    eo.message_floats = 16;
    Executor ex(lowered, t.rank(), t, {}, eo);
    TP_ASSIGN_OR_RETURN(RankStepResult r, ex.run_step(0, origin, {}, 1.0f));
    tl[t.rank()] = r.timeline;
    return OkStatus();
  });
  for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st.to_string();
  for (int r = 0; r < p; ++r) {
    int pairs = 0;
    for (const Action& a : lowered.programs[r]) pairs += a.type == ActionType::kOverlapFB;
    EXPECT_GT(pairs, 0) << "rank " << r << " has no OVERLAP_F_B pair to run";
    int f = 0, b = 0;
    for (const auto& e : tl[r].events) {
      EXPECT_EQ(e.name.find("OVERLAP"), std::string::npos) << e.name;
      f += e.kind == EventKind::kForward;
      b += e.kind == EventKind::kBackward || e.kind == EventKind::kBackwardInput;
    }
    EXPECT_EQ(f, 2 * m) << "rank " << r;
    EXPECT_EQ(b, 2 * m) << "rank " << r;
    for (const Action& a : lowered.programs[r]) {
      if (a.type != ActionType::kOverlapFB) continue;
      const SubActions subs = sub_actions(a);
      double f_end = -1, b_start = -1;
      for (const auto& e : tl[r].events) {
        if (e.name == to_string(subs.at[0])) f_end = e.end;
        if (e.name == to_string(subs.at[1])) b_start = e.start;
      }
      EXPECT_GE(f_end, 0) << to_string(a);
      EXPECT_LE(f_end, b_start) << to_string(a);
    }
  }
}

// Emulated compute: the timeline shows the schedule's shape (F I W each cost 2 ms per rank).
TEST(EmulatedTest, TimelineFollowsCosts) {
  auto sched = generate_schedule("1f1b", {.ranks = 2, .microbatches = 2}).value();
  auto lowered = lower(sched).value();
  auto transports = make_inproc_transports(2);
  std::vector<RankTimeline> tl(2);
  const double origin = now_seconds();  // one clock origin for both thread ranks
  auto statuses = run_on_threads(transports, [&](Transport& t) -> Status {
    ExecutorOptions eo;
    eo.emulated = true;
    eo.costs = EmulatedCompute::parse("f=4,b=8").value();
    eo.message_floats = 64;
    Executor ex(lowered, t.rank(), t, {}, eo);
    TP_RETURN_IF_ERROR(barrier(t, 10));
    TP_ASSIGN_OR_RETURN(RankStepResult r, ex.run_step(0, origin, {}, 1.0f));
    tl[t.rank()] = r.timeline;
    return OkStatus();
  });
  for (const auto& st : statuses) ASSERT_TRUE(st.ok()) << st.to_string();
  // Rank 1: 1F0 after rank 0's F (4 ms), then 1B0 (8 ms).
  double f_start = -1, b_end = -1;
  for (const auto& e : tl[1].events) {
    if (e.name == "1F0") f_start = e.start;
    if (e.name == "1B1") b_end = e.end;
  }
  EXPECT_GE(f_start, 0.0035);
  // 1F1B, p=2, m=2, F=4, B=8: makespan (m+p-1)(F+B) = 36 ms; rank 1 ends at 4+24 = 28 ms... within
  // slack.
  EXPECT_GE(b_end, 0.027);
  EXPECT_LT(b_end, 0.2);
  EXPECT_FALSE(EmulatedCompute::parse("f=1,q=2").ok());
  EXPECT_NE(EmulatedCompute::parse("f=-1").status().message().find("f=-1"), std::string::npos);
}

}  // namespace
}  // namespace tightpipe
