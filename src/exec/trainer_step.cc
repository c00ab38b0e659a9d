#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "exec/train_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"
#include "tightpipe/trainer.h"

namespace tightpipe {

PipelineRank::PipelineRank(const Schedule& lowered, int32_t rank, Transport& transport,
                           const nn::GptConfig& config, const std::vector<nn::StageSpec>& specs,
                           uint64_t seed, const nn::RecomputeOptions& recompute,
                           ExecutorOptions options)
    : rank_(rank),
      num_stages_(lowered.num_stages),
      transport_(transport),
      config_(config),
      specs_(specs),
      executor_stages_(lowered.stages_of(rank)) {
  TP_CHECK(static_cast<int32_t>(specs.size()) == lowered.num_stages, "specs ", specs.size(),
           " for ", lowered.num_stages, " stages");
  if (!options.emulated) {
    for (int32_t s : lowered.stages_of(rank)) {
      owned_.push_back(std::make_unique<nn::GptStage>(config, specs[s], seed, recompute));
      stages_[s] = owned_.back().get();
    }
  }
  options.message_floats =
      int64_t(config.micro_batch_size) * config.seq_length * config.hidden_size;
  // --bf16: the stage-boundary values are bf16 (model.h), so they travel as bf16, half the bytes.
  options.bf16_messages = config.precision == nn::Precision::kBf16;
  options_ = options;
  executor_ = std::make_unique<Executor>(lowered, rank, transport, stages_, options);
}

void PipelineRank::set_schedule(const Schedule& lowered) {
  TP_CHECK(lowered.stages_of(rank_).size() == stages_.size() || options_.emulated,
           "set_schedule: rank ", rank_, " would change its stages");
  executor_.reset();  // joins the old executor's send progress thread first
  executor_ = std::make_unique<Executor>(lowered, rank_, transport_, stages_, options_);
}

std::map<int32_t, nn::GptStage*> PipelineRank::stages() { return stages_; }

int64_t stage_param_count(const nn::GptConfig& config, const nn::StageSpec& spec) {
  // GptStage's arena (gpt_stage.cc): wte (V,C) and wpe (T,C); per block two LayerNorms (4C),
  // qkv (3C,C)+3C, proj (C,C)+C, fc (4C,C)+4C, fc2 (C,4C)+C; the head's LayerNorm (2C) and
  // lm_head (V,C).
  const int64_t V = config.vocab_size, T = config.seq_length, C = config.hidden_size;
  int64_t n = int64_t{spec.num_layers} * (12 * C * C + 13 * C);
  if (spec.has_embedding) n += V * C + T * C;
  if (spec.has_head) n += 2 * C + V * C;
  return n;
}

std::map<int32_t, std::span<float>> PipelineRank::grads() {
  std::map<int32_t, std::span<float>> out;
  for (auto& [s, stage] : stages_) out[s] = stage->grads();
  if (options_.emulated) {
    for (int32_t s : executor_stages_) {
      auto& g = emulated_grads_[s];
      if (g.empty()) g.assign(static_cast<size_t>(stage_param_count(config_, specs_[s])), 0.0f);
      out[s] = g;
    }
  }
  return out;
}

Status train_internal::sum_over_group(std::span<float> g, Transport& group, int64_t bucket,
                                      double timeout_s, const std::string& what) {
  std::vector<double> buf(g.begin(), g.end());
  const size_t chunk = static_cast<size_t>(bucket);
  std::vector<std::unique_ptr<Request>> reqs;
  for (size_t at = 0; at < g.size(); at += chunk) {
    reqs.push_back(
        group.iallreduce_sum(std::span<double>(buf).subspan(at, std::min(chunk, g.size() - at))));
  }
  for (size_t k = 0; k < reqs.size(); ++k) {
    // Each bucket gets the whole time-out (it measures a stall, not the size of the arena), and
    // twice: a member that stalls or died is first seen by its pipeline partner, whose message
    // time-out names it and aborts the world, while a collective cannot tell who is missing.
    // The abort then ends this wait with that name, within the partner's time-out.
    TP_RETURN_IF_ERROR(
        reqs[k]
            ->wait(2 * timeout_s)
            .with_context(fmt::format("{}, bucket {} of {}", what, k + 1, reqs.size())));
  }
  std::copy(buf.begin(), buf.end(), g.begin());
  return OkStatus();
}

namespace train_internal {

std::vector<double> nonfinite_flags(PipelineRank& pr, const RankStepResult& r) {
  std::vector<double> flags(pr.num_stages() + 1, 0.0);
  for (auto& [s, stage] : pr.stages()) {
    if (!std::isfinite(stage->grad_sq_norm())) flags[s] = 1;
  }
  if (r.first_nonfinite_loss_microbatch >= 0) flags.back() = 1 + r.first_nonfinite_loss_microbatch;
  return flags;
}

void add_step_event(RankStepResult& r, std::string name, EventKind kind, Lane lane, int32_t step,
                    double start, double end, double cpu_wait) {
  TimelineEvent& e = r.timeline.events.emplace_back();
  e.name = std::move(name);
  e.kind = kind;
  e.lane = lane;
  e.step = step;
  e.start = start;
  e.end = end;
  e.cpu_wait = cpu_wait;
}

void add_optimizer_event(RankStepResult& r, int32_t step, double start, double end,
                         double cpu_wait) {
  add_step_event(r, "optimizer", EventKind::kOptimizer, Lane::kCompute, step, start, end, cpu_wait);
}

}  // namespace train_internal

// The error of a non-finite step from every rank's flags summed (nonfinite_flags).
Status nonfinite_step_error(int32_t step, double loss, double grad_sq,
                            const std::vector<double>& flags, float lr) {
  std::vector<std::string> stages;
  for (int32_t s = 0; s + 1 < static_cast<int32_t>(flags.size()); ++s)
    if (flags[s] != 0) stages.push_back(std::to_string(s));
  return Status::failed_precondition(fmt::format(
      "step {}: loss {}, gradient norm {} (--check-for-nan-in-loss-and-grad): non-finite "
      "gradients on stage(s) {}; {}; the optimizer step was not taken and nothing of this step "
      "is saved; hint: lower --lr (now {}) or keep --clip-grad on, and resume from the last "
      "checkpoint (--load)",
      step + 1, loss, std::fabs(std::sqrt(grad_sq)), stages.empty() ? "none" : join(stages, ", "),
      flags.back() > 0 ? fmt::format("the loss was first non-finite at microbatch {}",
                                     static_cast<int64_t>(flags.back()) - 1)
                       : std::string("every microbatch's loss was finite"),
      lr));
}

namespace {

Status nonfinite_error(PipelineRank& pr, Transport& transport, int32_t step,
                       const RankStepResult& r, double loss, double grad_sq, float lr,
                       double timeout_s) {
  std::vector<double> flags = train_internal::nonfinite_flags(pr, r);
  TP_RETURN_IF_ERROR(allreduce_sum(transport, flags, timeout_s)
                         .with_context(fmt::format("step {} non-finite check", step)));
  return nonfinite_step_error(step, loss, grad_sq, flags, lr);
}

// --overlap-grad-reduce: one helper thread reduces the stages handed to it, in the order they
// finished (the same on every member: they run the same program). A stage's arena is not
// touched by the program after its last W/B, so the helper may sum it while compute goes on.
class OverlappedReducer {
 public:
  // `reduce_one(stage)` reduces one stage (pipeline_step's: sum_over_group, timed for the
  // timeline's all-reduce lane).
  explicit OverlappedReducer(std::function<Status(int32_t)> reduce_one)
      : reduce_one_(std::move(reduce_one)), worker_([this] { loop(); }) {}
  ~OverlappedReducer() { (void)finish(); }
  void add(int32_t stage) {
    std::lock_guard<std::mutex> lock(mu_);
    handed_.insert(stage);
    queue_.push_back(stage);
    cv_.notify_one();
  }
  // True when `stage` was handed over (read after finish()).
  bool handed(int32_t stage) const { return handed_.contains(stage); }
  // Waits until every handed stage is reduced; the first error.
  Status finish() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
      cv_.notify_one();
    }
    if (worker_.joinable()) worker_.join();
    return status_;
  }

 private:
  void loop() {
    for (;;) {
      int32_t s = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        s = queue_.front();
        queue_.pop_front();
      }
      if (!status_.ok()) continue;  // after an error: drain, reduce nothing more
      status_ = reduce_one_(s);
    }
  }
  const std::function<Status(int32_t)> reduce_one_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<int32_t> queue_;
  std::set<int32_t> handed_;  // under mu_ until finish()
  bool closed_ = false;
  Status status_;  // the worker's; read after the join
  std::thread worker_;
};

// The data-parallel all-reduce events of one step (timeline.h, Lane::kAllReduce): recorded by
// the thread that ran the reduction (the program's, or --overlap-grad-reduce's helper) and merged
// into the rank's timeline at the step's end.
class AllReduceLog {
 public:
  AllReduceLog(double origin, int32_t step) : origin_(origin), step_(step) {}
  // Runs `reduce` (stage s's reduction of `values` gradient values) and records its interval.
  Status timed(int32_t s, size_t values, const std::function<Status()>& reduce) {
    const double t0 = now_seconds();
    Status st = reduce();
    const double t1 = now_seconds();
    TimelineEvent e;
    e.name = fmt::format("{}ALLREDUCE", s);
    e.kind = EventKind::kAllReduce;
    e.lane = Lane::kAllReduce;
    e.stage = s;
    e.step = step_;
    e.start = t0 - origin_;
    e.end = t1 - origin_;
    // The wire buffer: sum_over_group sums doubles (docs/data_parallel.md).
    e.bytes = static_cast<int64_t>(static_cast<double>(values) * kGradReduceBytesPerValue);
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(e);
    return st;
  }
  // Appends the events in start order. REQUIRES: no reduction runs any more.
  void merge_into(std::vector<TimelineEvent>& events) {
    std::lock_guard<std::mutex> lock(mu_);
    std::stable_sort(
        events_.begin(), events_.end(),
        [](const TimelineEvent& a, const TimelineEvent& b) { return a.start < b.start; });
    events.insert(events.end(), events_.begin(), events_.end());
    events_.clear();
  }

 private:
  const double origin_;
  const int32_t step_;
  std::mutex mu_;
  std::vector<TimelineEvent> events_;
};

}  // namespace

Result<StepProgram> run_step_program(PipelineRank& rank, Transport& transport, int32_t step,
                                     const BatchFetcher& fetch, int64_t tokens_per_step,
                                     double timeout_s, Transport* data_parallel,
                                     const GradReduceOptions& reduce, bool with_barrier) {
  PipelineRank& pr = rank;
  // A common origin for the step's timeline: every rank leaves the barrier at about the same
  // time. Without it (post-validated steps), each rank's own start.
  if (with_barrier) {
    TP_RETURN_IF_ERROR(
        barrier(transport, timeout_s).with_context(fmt::format("step {} barrier", step)));
  }
  const double origin = now_seconds();
  const float loss_scale = 1.0f / static_cast<float>(tokens_per_step);
  const bool dp = data_parallel != nullptr && data_parallel->size() > 1;
  // Each local stage's gradient arena (emulated compute: zeros of the stage's real size, so the
  // all-reduce moves the bytes a real run would), and its reduction, timed for the timeline.
  const std::map<int32_t, std::span<float>> grads = dp ? pr.grads() : decltype(pr.grads()){};
  AllReduceLog allreduce_log(origin, step);
  auto reduce_one = [&](int32_t s) {
    const std::span<float> g = grads.at(s);
    // Every member holds the same stages (the same pipeline rank), so the buckets line up.
    return allreduce_log.timed(s, g.size(), [&] {
      return train_internal::sum_over_group(
          g, *data_parallel, reduce.bucket_size, timeout_s,
          fmt::format("step {} data-parallel gradient allreduce of stage {}", step, s));
    });
  };
  std::optional<OverlappedReducer> overlapped;
  std::function<void(int32_t)> grads_done;
  if (dp && reduce.overlap && !grads.empty()) {
    overlapped.emplace(reduce_one);
    grads_done = [&](int32_t s) { overlapped->add(s); };
  }
  auto ran = pr.executor().run_step(step, origin, fetch, loss_scale, grads_done);
  if (!ran.ok()) {
    // The helper may wait on peers that wait on this rank: stop the world before joining it.
    if (overlapped) transport.abort(ran.status().to_string());
    return ran.status();
  }
  StepProgram out;
  out.origin = origin;
  out.rank = std::move(ran).value();
  RankStepResult& r = out.rank;
  report_progress(step, "the step's gradient reductions and optimizer update");
  out.loss = r.has_loss ? r.loss : 0.0;
  out.grad_sq = r.grad_sq_norm;
  if (dp) {
    if (overlapped) {
      TP_RETURN_IF_ERROR(overlapped->finish());
      // A stage the program never finished with a W/B (none) has nothing summed yet.
      for (const auto& [s, g] : grads) {
        if (overlapped->handed(s)) continue;
        TP_RETURN_IF_ERROR(reduce_one(s));
      }
    } else {
      for (const auto& [s, g] : grads) TP_RETURN_IF_ERROR(reduce_one(s));
    }
    allreduce_log.merge_into(r.timeline.events);
    double l[1] = {out.loss};
    TP_RETURN_IF_ERROR(
        allreduce_sum(*data_parallel, l, timeout_s)
            .with_context(fmt::format("step {} data-parallel loss allreduce", step)));
    out.loss = l[0];
    if (!pr.stages().empty()) {  // the norm of the summed gradients (emulated: none)
      out.grad_sq = 0;
      for (auto& [s, stage] : pr.stages()) out.grad_sq += stage->grad_sq_norm();
    }
  }
  return out;
}

Result<StepOutcome> pipeline_step(PipelineRank& rank, Transport& transport, int32_t step,
                                  const BatchFetcher& fetch, int64_t tokens_per_step,
                                  const nn::AdamWConfig& adamw, float lr, float clip,
                                  double timeout_s, bool check_nan, Transport* data_parallel,
                                  const GradReduceOptions& reduce) {
  PipelineRank& pr = rank;
  TP_ASSIGN_OR_RETURN(StepProgram prog,
                      run_step_program(pr, transport, step, fetch, tokens_per_step, timeout_s,
                                       data_parallel, reduce, /*with_barrier=*/true));
  RankStepResult& r = prog.rank;
  const double origin = prog.origin;
  StepOutcome out;
  // DualPipe: each model stage's two copies sum their gradients (trainer.h); no-op otherwise.
  // The sum is an all-reduce between the copies' ranks before the optimizer: on the timeline as
  // one COPY_SUM event on the all-reduce lane, so the report names its time (exposed all-reduce)
  // instead of leaving a gap (docs/cost_model.md, "Predicted against measured").
  const double copies_start = now_seconds() - origin;
  TP_ASSIGN_OR_RETURN(const double grad_sq,
                      sum_stage_copies(pr, transport, prog.grad_sq, step, timeout_s));
  // After the data-parallel reduction: its exposed time is idle before the optimizer.
  out.optimizer_start = now_seconds() - origin;
  if (sums_stage_copies(pr)) {
    train_internal::add_step_event(r, "COPY_SUM", EventKind::kAllReduce, Lane::kAllReduce, step,
                                   copies_start, out.optimizer_start, 0);
  }
  double sums[2] = {prog.loss, grad_sq};
  TP_RETURN_IF_ERROR(allreduce_sum(transport, sums, timeout_s)
                         .with_context(fmt::format("step {} loss/grad-norm allreduce", step)));
  // Ready to run the update since the all-reduce returned: the core wait before it (timeline.h).
  const double cpu_now = thread_cpu_wait_seconds();
  const double cpu_wait =
      cpu_now >= 0 && r.cpu_wait_mark >= 0 ? std::max(0.0, cpu_now - r.cpu_wait_mark) : 0.0;
  if (check_nan && !(std::isfinite(sums[0]) && std::isfinite(sums[1]))) {
    return nonfinite_error(pr, transport, step, r, sums[0], sums[1], lr, timeout_s);
  }
  out.loss = sums[0];
  out.grad_norm = std::sqrt(sums[1]);
  const float scale = nn::clip_scale(sums[1], clip);
  for (auto& [s, stage] : pr.stages()) {
    if (scale != 1.0f) stage->scale_grads(scale);
    stage->optimizer_step(adamw, lr);
    stage->zero_grads();
  }
  out.optimizer_end = now_seconds() - origin;
  train_internal::add_optimizer_event(r, step, out.optimizer_start, out.optimizer_end, cpu_wait);
  out.rank = std::move(r);
  return out;
}

}  // namespace tightpipe
