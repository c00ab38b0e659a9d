// RankRun: one rank's training run, phase by phase (train_internal.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "exec/train_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/input_file.h"
#include "tightpipe/kernels_bf16.h"
#include "tightpipe/timeline_io.h"

namespace tightpipe::train_internal {

namespace {

// Every rank contributes its own slot; the sum hands every rank everyone's values (exactly: the
// other slots are zeros).
Result<std::vector<double>> allgather(Transport& t, std::span<const double> mine, double timeout) {
  const size_t k = mine.size();
  std::vector<double> all(k * t.size(), 0.0);
  std::copy(mine.begin(), mine.end(), all.begin() + k * t.rank());
  TP_RETURN_IF_ERROR(allreduce_sum(t, all, timeout));
  return all;
}

// Strings to rank 0 (size, then bytes). Returns the P strings on rank 0, nothing elsewhere.
Result<std::vector<std::string>> gather_strings(Transport& t, const std::string& mine,
                                                double timeout) {
  constexpr int kSizeTag = kMaxUserTag - 2, kDataTag = kMaxUserTag - 1;
  std::vector<std::string> out;
  if (t.rank() != 0) {
    int64_t n = static_cast<int64_t>(mine.size());
    TP_RETURN_IF_ERROR(
        send(t, 0, kSizeTag, std::as_bytes(std::span<const int64_t>(&n, 1)), timeout));
    TP_RETURN_IF_ERROR(send(t, 0, kDataTag, std::as_bytes(std::span<const char>(mine)), timeout));
    return out;
  }
  out.push_back(mine);
  for (int r = 1; r < t.size(); ++r) {
    int64_t n = 0;
    TP_RETURN_IF_ERROR(
        recv(t, r, kSizeTag, std::as_writable_bytes(std::span<int64_t>(&n, 1)), timeout));
    std::string s(static_cast<size_t>(n), '\0');
    TP_RETURN_IF_ERROR(recv(t, r, kDataTag, std::as_writable_bytes(std::span<char>(s)), timeout));
    out.push_back(std::move(s));
  }
  return out;
}

// `s` from `root` to every rank (size, then bytes).
Result<std::string> broadcast_string(Transport& t, int root, std::string s, double timeout) {
  int64_t n = static_cast<int64_t>(s.size());
  TP_RETURN_IF_ERROR(
      broadcast(t, root, std::as_writable_bytes(std::span<int64_t>(&n, 1)), timeout));
  s.resize(static_cast<size_t>(n));
  TP_RETURN_IF_ERROR(broadcast(t, root, std::as_writable_bytes(std::span<char>(s)), timeout));
  return s;
}

// A fresh loader over the validation split: it reads the same windows every evaluation.
Result<std::unique_ptr<DataLoader>> open_validation(const DataOptions& train) {
  DataOptions v = train;
  v.split = Split::kVal;
  v.shuffle_buffer = 1;
  return DataLoader::open(v);
}

// The fields one rank ships per step: RankBusy (5), data wait, peak stash.
constexpr size_t kStepFields = 7;

// This rank's fields of a step from its events.
std::vector<double> step_fields(const std::vector<TimelineEvent>& events, size_t peak_stash) {
  const RankBusy busy = rank_busy(events);
  double data_wait = 0;
  for (const auto& e : events)
    if (e.kind == EventKind::kData) data_wait += e.end - e.start;
  return {busy.present ? 1.0 : 0.0,
          busy.compute,
          busy.optimizer_start,
          busy.optimizer_end,
          busy.end,
          data_wait,
          static_cast<double>(peak_stash)};
}

// The step's bubble, data waits and stash peaks from every rank's fields ([rank x fields]).
void fill_step_fields(StepRecord& rec, const std::vector<double>& all, int ranks) {
  std::vector<RankBusy> busy(ranks);
  for (int r = 0; r < ranks; ++r) {
    const double* x = &all[kStepFields * r];
    busy[r] = {x[0] != 0, x[1], x[2], x[3], x[4]};
    rec.data_wait.push_back(x[5]);
    rec.peak_stash.push_back(x[6]);
  }
  rec.bubble = step_bubble(busy);
}

// --profile-step-start..end: the kept steps, each timed from its own origin, laid one after
// another on one axis (each starts where the one before it ended on its slowest rank), the same
// offsets on every rank.
void lay_steps_end_to_end(Timeline& tl) {
  std::map<int32_t, double> width;  // step -> its end on the slowest rank
  for (const RankTimeline& rt : tl.ranks)
    for (const TimelineEvent& e : rt.events) width[e.step] = std::max(width[e.step], e.end);
  std::map<int32_t, double> offset;
  double at = 0;
  for (const auto& [step, w] : width) {
    offset[step] = at;
    at += w;
  }
  for (RankTimeline& rt : tl.ranks) {
    for (TimelineEvent& e : rt.events) {
      e.start += offset[e.step];
      e.end += offset[e.step];
    }
  }
}

}  // namespace

RankRun::RankRun(const RunPlan& plan, Transport& transport, Transport& data_parallel)
    : plan_(plan),
      opt_(plan_.opt),
      t_(transport),
      dp_(data_parallel),
      rank_(transport.rank()),
      dp_rank_(data_parallel.rank()),
      log_rank_(data_parallel.rank() == 0 ? transport.rank() : -1),
      pr_(plan_.lowered, transport.rank(), transport, plan.opt.model,
          stage_specs(plan.lowered, plan.specs), plan.opt.seed, plan.opt.recompute,
          [&] {
            ExecutorOptions eo = plan.opt.exec;
            eo.progress_thread = plan.opt.world.kind == TransportKind::kMpi;
            return eo;
          }()),
      needs_data_(!plan.opt.exec.emulated &&
                  std::ranges::count(data_ranks(plan.lowered), transport.rank()) > 0) {
  if (opt_.optimizer_post_validation) pv_.emplace(pr_, t_, opt_, kStepFields);
}

Status RankRun::open_data() {
  if (!needs_data_) return OkStatus();
  DataOptions d = plan_.data;
  d.split = Split::kTrain;
  TP_ASSIGN_OR_RETURN(train_data_, DataLoader::open(d));
  // A validation split too small stops the run before any work.
  if (opt_.eval_iters > 0) TP_RETURN_IF_ERROR(open_validation(plan_.data).status());
  return OkStatus();
}

Result<int64_t> RankRun::resume() {
  if (opt_.load_dir.empty()) return int64_t{0};
  const std::string& dir = opt_.load_dir;  // the directory make_plan resolved --load to
  const nn::Manifest& man = plan_.load.manifest;
  for (const std::string& w : plan_.load.warnings) plan_.log(log_rank_, w);
  TP_RETURN_IF_ERROR(nn::check_manifest_shape(dir, man, opt_.model));
  if (man.config.precision != opt_.model.precision) {  // the weights load the same either way
    plan_.log(log_rank_, fmt::format("--load {}: saved in {}, continuing in {} (master weights are "
                                     "fp32 either way)",
                                     dir, nn::precision_name(man.config.precision),
                                     nn::precision_name(opt_.model.precision)));
  }
  if (man.stages != plan_.specs) {
    return Status::invalid_argument(fmt::format(
        "--load {}: the checkpoint has {} stages '{}' but this run (--pp {}, --vpp {}) has {} "
        "stages '{}'; hint: use the model flags, --pp, --vpp and --pipeline-layout the "
        "checkpoint was saved with",
        dir, man.stages.size(), nn::format_layout(man.stages), opt_.pp, plan_.lowered.chunks(),
        plan_.specs.size(), nn::format_layout(plan_.specs)));
  }
  for (auto& [s, stage] : pr_.stages()) {
    // DualPipe: both copies of a model stage load its one file.
    const std::string path = nn::stage_checkpoint_path(dir, plan_.lowered.model_stage(s));
    TP_ASSIGN_OR_RETURN(nn::CheckpointState st, nn::load_stage_checkpoint(path, *stage));
    if (st.step != man.step) {  // changed since make_plan checked it
      return Status::corruption(fmt::format(
          "--load {}: '{}' is at step {} but the manifest at step {}; hint: the save was "
          "interrupted, use an older checkpoint",
          dir, path, st.step, man.step));
    }
  }
  if (man.step >= opt_.train_iters) {
    return Status::invalid_argument(fmt::format(
        "--train-iters {}: the checkpoint --load {} is already at step {}; hint: --train-iters "
        "counts all steps, pass more than {} to continue",
        opt_.train_iters, dir, man.step, man.step));
  }
  // The ranks of the first and the last stage (tokens, targets) both resume where the rank of
  // stage 0 saved its loader.
  if (train_data_) {
    const std::string pos_path = (std::filesystem::path(dir) / nn::kDataPositionFile).string();
    auto pos_text = read_input_file("data position", pos_path, input_kind::kConfig);
    if (!pos_text.ok()) {
      return Status(pos_text.status().code(),
                    fmt::format("--load {}: {}; hint: without it the data would restart at the "
                                "first batch; save the checkpoint again with this version",
                                dir, pos_text.status().message()));
    }
    auto pos = DataPosition::from_json(*pos_text);
    if (!pos.ok()) {
      return Status::corruption(fmt::format(
          "--load {}: '{}' is damaged: {}; hint: it holds the loader's position as train --save "
          "wrote it; --load the --save directory to take an older complete checkpoint, or restore "
          "the file",
          dir, pos_path, pos.status().message()));
    }
    TP_RETURN_IF_ERROR(train_data_->restore(*pos).with_context("--load " + pos_path));
  }
  TP_RETURN_IF_ERROR(check_data_parallel(dir));
  plan_.log(log_rank_, fmt::format("loaded {} at step {}", dir, man.step));
  return man.step;
}

// The checkpoint's data position is the global stream's, cut into this many replica slices per
// step: another data-parallel size would read other rows, so it is refused.
Result<int64_t> saved_data_parallel_size(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kParallelFile).string();
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
    return int64_t{1};  // checkpoints without the file were written by one pipeline
  }
  TP_ASSIGN_OR_RETURN(std::string text,
                      read_input_file("parallel layout", path, input_kind::kConfig));
  const auto j = nlohmann::json::parse(text, nullptr, false);
  constexpr int64_t kMaxSize = int64_t{1} << 20;
  if (j.is_discarded() || !j.is_object() || !j.contains("data_parallel_size") ||
      !j["data_parallel_size"].is_number_integer() || j["data_parallel_size"].get<int64_t>() < 1 ||
      j["data_parallel_size"].get<int64_t>() > kMaxSize) {
    return Status::corruption(fmt::format(
        "--load {}: '{}' is damaged (no integer data_parallel_size in [1, {}]); hint: restore "
        "the file or use an older checkpoint",
        dir, path, kMaxSize));
  }
  return j["data_parallel_size"].get<int64_t>();
}

Status RankRun::check_data_parallel(const std::string& dir) const {
  TP_ASSIGN_OR_RETURN(const int64_t saved, saved_data_parallel_size(dir));
  if (saved == plan_.layout.dp) return OkStatus();
  if (opt_.allow_other_data_parallel_size) {
    // Every replica holds the same weights and optimizer state, and the loader position is the
    // global stream's: only the grouping of the samples into global batches changes.
    plan_.log(log_rank_,
              fmt::format("--load {}: saved at data-parallel size {}, continuing at {} "
                          "(--allow-other-data-parallel-size): the weights and optimizer state as "
                          "saved; the data goes on from the checkpoint's place in the global "
                          "sample stream in global batches of {} x {} microbatches: no sample is "
                          "repeated or skipped, and the steps are those of a run kept at {} only "
                          "if its global batch had as many microbatches",
                          dir, saved, plan_.layout.dp, plan_.layout.dp, opt_.microbatches, saved));
    return OkStatus();
  }
  return Status::invalid_argument(fmt::format(
      "--load {}: the checkpoint was trained with data-parallel size {} but this run has "
      "data-parallel size {} (world {} / --pp {}); hint: resume with {} x --pp ranks, the "
      "data position splits the global batch by the data-parallel size, or pass "
      "--allow-other-data-parallel-size to load the weights and continue the data stream in "
      "global batches of the new size",
      dir, saved, plan_.layout.dp, plan_.layout.world(), opt_.pp, saved));
}

Status RankRun::open_files(int64_t start) {
  // Replica 0 speaks for all: the replicas' losses, weights and bubbles are the same.
  if (opt_.out_dir.empty() || dp_rank_ != 0) return OkStatus();
  if (rank_ == 0) TP_RETURN_IF_ERROR(metrics_.open(opt_.out_dir + "/metrics.jsonl", start > 0));
  return timeline_.open(fmt::format("{}/timeline_rank{}.jsonl", opt_.out_dir, rank_), false);
}

// Every rank learns whether any rank's `mine` failed: the failing rank returns its own error, the
// others an Unavailable naming `what` (the run reports the first real failure, trainer.cc).
Status RankRun::agree(Status mine, std::string_view what) {
  double failed[1] = {mine.ok() ? 0.0 : 1.0};
  Status s = allreduce_sum(t_, failed, opt_.exec.timeout_s);
  if (!mine.ok()) return mine;
  TP_RETURN_IF_ERROR(s);
  if (failed[0] > 0) {
    return Status::unavailable(
        fmt::format("{}: {} other rank(s) failed to write their part", what, failed[0]));
  }
  return OkStatus();
}

// This rank's files of the checkpoint after `done` steps: its stages, the data position (the rank
// of stage 0), the built schedule (rank 0).
Status RankRun::save_parts(const std::string& dir, int64_t done) {
  for (auto& [s, stage] : pr_.stages()) {
    // Each model stage once: DualPipe's direction-1 copies equal the direction-0 ones (summed
    // gradients), so the checkpoint is that of the p model stages, as 1F1B's.
    if (plan_.lowered.direction_of_stage(s) != 0) continue;
    TP_RETURN_IF_ERROR(
        nn::save_stage_checkpoint(nn::stage_checkpoint_path(dir, s), *stage, {done, {}}));
  }
  const std::filesystem::path d(dir);
  if (rank_ == plan_.lowered.rank_of(0) && train_data_) {
    TP_RETURN_IF_ERROR(nn::write_checkpoint_file((d / nn::kDataPositionFile).string(),
                                                 train_data_->position().to_json()));
  }
  if (rank_ == 0) {
    TP_RETURN_IF_ERROR(
        nn::write_checkpoint_file((d / nn::kTokenizerFile).string(), opt_.tokenizer.to_json()));
    TP_RETURN_IF_ERROR(nn::write_checkpoint_file(
        (d / kParallelFile).string(),
        nlohmann::json{{"data_parallel_size", plan_.layout.dp}, {"pp", opt_.pp}}.dump() + "\n"));
    // The schedule an auto run built goes with the weights: a resumed run keeps it.
    const std::string sched = (d / kAutoScheduleFile).string();
    if (plan_.auto_switch.built) {
      TP_RETURN_IF_ERROR(nn::write_checkpoint_file(sched, to_csv(plan_.auto_switch.schedule)));
    } else {
      std::error_code ec;
      std::filesystem::remove(sched, ec);  // not one of an earlier attempt at this step
    }
  }
  return OkStatus();
}

// Checkpoint after `done` steps into --save/iter_<done>: rank 0 prepares its staging directory,
// every rank writes its files there, and once all have (a collective), rank 0 writes the manifest
// and then the tracker, so the tracker never names an incomplete directory; then
// --keep-last-checkpoints.
Status RankRun::save(int64_t done) {
  // Written once, by replica 0: every replica holds the same weights and data position.
  if (dp_rank_ != 0) return OkStatus();
  report_progress(-1, fmt::format("saving the checkpoint of step {}", done));
  const std::string& root = opt_.save_dir;
  const std::string dir = nn::iteration_dir(root, done);
  const std::string what = fmt::format("--save {}: checkpoint at step {}", root, done);
  TP_RETURN_IF_ERROR(agree(rank_ == 0 ? nn::prepare_iteration_dir(dir) : OkStatus(), what));
  // Into the staging directory beside `dir`: a checkpoint already there keeps loading until
  // commit_checkpoint swaps the complete new one in.
  TP_RETURN_IF_ERROR(agree(save_parts(nn::staging_dir(dir), done), what));
  Status committed;
  if (rank_ == 0) {
    nn::Manifest man;
    man.step = done;
    man.config = opt_.model;
    man.stages = plan_.specs;
    if (!opt_.exec.emulated) man.extra_files.push_back(nn::kDataPositionFile);
    man.extra_files.push_back(nn::kTokenizerFile);
    man.extra_files.push_back(kParallelFile);
    if (plan_.auto_switch.built) man.extra_files.push_back(kAutoScheduleFile);
    committed = nn::commit_checkpoint(root, man);
  }
  TP_RETURN_IF_ERROR(agree(committed, what));
  if (rank_ != 0) return OkStatus();
  plan_.log(log_rank_, fmt::format("saved {} at step {}", dir, done));
  if (opt_.keep_last_checkpoints > 0) {
    for (const std::string& line : nn::prune_checkpoints(root, opt_.keep_last_checkpoints, done))
      plan_.log(log_rank_, "--keep-last-checkpoints: " + line);
  }
  return OkStatus();
}

void RankRun::report_skips() {
  if (rank_ != 0 || !train_data_) return;
  const DataStats st = train_data_->stats();
  for (; skips_reported_ < st.corrupt_skipped; ++skips_reported_) {
    const auto k = static_cast<size_t>(skips_reported_);
    if (k < st.corrupt_messages.size()) {
      plan_.log(log_rank_,
                fmt::format("data: skipped (--on-corrupt skip): {}", st.corrupt_messages[k]));
    } else {  // the loader keeps the first reasons only
      plan_.log(log_rank_,
                fmt::format("data: skipped {} more shard(s)/sample(s) (--on-corrupt skip; "
                            "the loader keeps the reasons of the first {})",
                            st.corrupt_skipped - skips_reported_, st.corrupt_messages.size()));
      skips_reported_ = st.corrupt_skipped;
      break;
    }
  }
}

Result<StepRecord> RankRun::step(int64_t step) {
  StepBatches batches;
  const BatchFetcher fetch = fetcher(batches);
  report_progress(step, "starting the step");  // each action reports too (the executor)
  StepRecord rec;
  rec.step = step;
  rec.lr = nn::lr_at(opt_.lr, step);
  const double t0 = now_seconds();
  TP_ASSIGN_OR_RETURN(
      StepOutcome o,
      pipeline_step(pr_, t_, static_cast<int32_t>(step), fetch, plan_.tokens_per_step, opt_.adamw,
                    static_cast<float>(rec.lr), opt_.clip_grad, opt_.exec.timeout_s,
                    opt_.check_for_nan, &dp_, opt_.grad_reduce));
  TP_RETURN_IF_ERROR(skip_later_replicas(batches));
#ifndef NDEBUG
  // DualPipe's copies of a model stage step identically (issue 18): a collective, debug only.
  if (Status same = check_stage_copies(pr_, t_, opt_.exec.timeout_s); !same.ok())
    TP_CHECK(false, same.to_string());
#endif
  rec.wall = now_seconds() - t0;
  rec.loss = o.loss;
  rec.grad_norm = o.grad_norm;
  rec.tokens_per_s = double(plan_.tokens_per_step) / rec.wall;

  // This rank's share of the step's bubble, shared with every rank (prof.h, the one definition).
  const std::vector<TimelineEvent>& events = o.rank.timeline.events;
  const std::vector<double> mine = step_fields(events, o.rank.peak_stash_bytes);
  TP_ASSIGN_OR_RETURN(std::vector<double> all, allgather(t_, mine, opt_.exec.timeout_s));
  fill_step_fields(rec, all, t_.size());
  keep_events(std::move(o.rank.timeline));
  return rec;
}

BatchFetcher RankRun::fetcher(StepBatches& b) {
  // Data parallel: the global batch is the next dp x m batches of the stream and replica d takes
  // batches [d*m, (d+1)*m), the rows one rank with dp x m microbatches would give those
  // microbatches. Every replica reads the whole global batch (skipping the others' slices), so
  // its loader's position is the global stream's, the one a checkpoint saves.
  return [this, &b](int32_t mb) -> Result<const Batch*> {
    const int64_t m = opt_.microbatches;
    while (static_cast<int32_t>(b.batches.size()) <= mb) {
      if (opt_.data_delay_ms > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt_.data_delay_ms));
      }
      if (train_data_) {
        for (; b.skipped < dp_rank_ * m; ++b.skipped)
          TP_RETURN_IF_ERROR(train_data_->next().status());
        TP_ASSIGN_OR_RETURN(Batch x, train_data_->next());
        b.batches.push_back(std::move(x));
      } else {
        b.batches.emplace_back();  // emulated compute: no data, only the (emulated) wait
      }
    }
    return &b.batches[mb];
  };
}

Status RankRun::skip_later_replicas(const StepBatches& b) {
  if (!train_data_) return OkStatus();
  const int64_t m = opt_.microbatches;
  for (int64_t k = dp_rank_ * m + static_cast<int64_t>(b.batches.size()); k < plan_.layout.dp * m;
       ++k)
    TP_RETURN_IF_ERROR(train_data_->next().status());
  return OkStatus();
}

void RankRun::keep_events(RankTimeline timeline) {
  CostSamples& samples = samples_.emplace_back();
  std::string lines;  // the step's events in one write
  for (const auto& e : timeline.events) {
    samples.add_event(e);
    lines += event_to_json(e) + '\n';
  }
  if (!lines.empty()) {
    lines.pop_back();
    timeline_.write(lines);
  }
  if (opt_.profile_step_start < 0) {
    last_ = std::move(timeline);
    return;
  }
  // --profile-step-start..end: every step of the range, each on its own origin (gather_end lays
  // them one after another).
  if (timeline.events.empty()) return;
  const int64_t step = timeline.events.front().step;
  if (step < opt_.profile_step_start || step >= opt_.profile_step_end) return;
  last_.rank = timeline.rank;
  for (TimelineEvent& e : timeline.events) last_.events.push_back(std::move(e));
}

std::string RankRun::redone_line(const PostValidation::Decided& d, int64_t replayed) const {
  return fmt::format(
      "post-validation: step {}: gradient norm {:.6g} over --clip-grad {}: its unclipped update "
      "was undone from the kept copy and redone clipped (scale {:.6g}){}",
      d.step + 1, d.grad_norm, opt_.clip_grad, d.scale,
      replayed >= 0 ? fmt::format("; step {} replayed", replayed + 1) : std::string());
}

Result<std::vector<StepRecord>> RankRun::step_post_validated(int64_t step) {
  StepBatches batches;
  const BatchFetcher fetch = fetcher(batches);
  report_progress(step, "starting the step");
  if (pv_first_step_ < 0) pv_first_step_ = step;
  const double t0 = now_seconds();
  auto program = [&] {
    return run_step_program(pr_, t_, static_cast<int32_t>(step), fetch, plan_.tokens_per_step,
                            opt_.exec.timeout_s, &dp_, opt_.grad_reduce,
                            /*with_barrier=*/step == pv_first_step_);
  };
  TP_ASSIGN_OR_RETURN(StepProgram prog, program());
  std::vector<StepRecord> ready;
  if (pv_->pending()) {
    TP_ASSIGN_OR_RETURN(PostValidation::Decided d, pv_->validate());
    if (d.redone) {
      // This program ran on the unclipped weights of every rank: run it again on the redone ones
      // (the same batches; every rank decided alike, so every rank replays).
      plan_.log(log_rank_, redone_line(d, step));
      TP_ASSIGN_OR_RETURN(prog, program());
    }
    ready.push_back(decided_record(d));
  }
  TP_RETURN_IF_ERROR(skip_later_replicas(batches));
  StepRecord rec;
  rec.step = step;
  rec.lr = nn::lr_at(opt_.lr, step);
  pv_->step(static_cast<int32_t>(step), prog, static_cast<float>(rec.lr));
  pv_->post(prog, step_fields(prog.rank.timeline.events, prog.rank.peak_stash_bytes));
  rec.wall = now_seconds() - t0;
  rec.tokens_per_s = double(plan_.tokens_per_step) / rec.wall;
  pv_record_ = std::move(rec);
  keep_events(std::move(prog.rank.timeline));
  return ready;
}

StepRecord RankRun::decided_record(const PostValidation::Decided& d) {
  TP_CHECK(pv_record_.has_value() && pv_record_->step == d.step,
           "post-validation: no record of step ", d.step);
  StepRecord rec = std::move(*pv_record_);
  pv_record_.reset();
  rec.loss = d.loss;
  rec.grad_norm = d.grad_norm;
  fill_step_fields(rec, d.fields, t_.size());
  return rec;
}

Result<StepRecord> RankRun::flush_post_validation() {
  TP_ASSIGN_OR_RETURN(PostValidation::Decided d, pv_->validate());
  if (d.redone) plan_.log(log_rank_, redone_line(d, /*replayed=*/-1));
  return decided_record(d);
}

bool RankRun::eval_due(int64_t step) const {
  if (opt_.eval_iters <= 0 || opt_.exec.emulated) return false;
  return (opt_.eval_interval > 0 && (step + 1) % opt_.eval_interval == 0) ||
         step + 1 == opt_.train_iters;
}

// Validation loss: forward only over the pipeline, the same windows every time.
Result<double> RankRun::evaluate() {
  report_progress(-1, "evaluation");
  std::unique_ptr<DataLoader> val;
  if (needs_data_) {
    TP_ASSIGN_OR_RETURN(val, open_validation(plan_.data));
  }
  std::vector<Batch> vb;
  BatchFetcher fetch = [&](int32_t mb) -> Result<const Batch*> {
    while (static_cast<int32_t>(vb.size()) <= mb) {
      TP_ASSIGN_OR_RETURN(Batch b, val->next());
      vb.push_back(std::move(b));
    }
    return &vb[mb];
  };
  const float scale = 1.0f / float(opt_.eval_iters * opt_.model.tokens_per_microbatch());
  TP_ASSIGN_OR_RETURN(double sum, pr_.executor().run_forward_only(
                                      static_cast<int32_t>(opt_.eval_iters), fetch, scale));
  double v[1] = {sum};
  TP_RETURN_IF_ERROR(allreduce_sum(t_, v, opt_.exec.timeout_s));
  return v[0];
}

Result<CostSamples> RankRun::gather_samples(StepRange range) {
  CostSamples mine, all;
  for (size_t k = range.first; k < range.last; ++k) mine.merge(samples_[k]);
  TP_ASSIGN_OR_RETURN(std::vector<std::string> samples,
                      gather_strings(t_, mine.to_json(), opt_.exec.timeout_s));
  if (rank_ != 0) return all;
  for (int r = 0; r < t_.size(); ++r) {
    TP_ASSIGN_OR_RETURN(CostSamples s, CostSamples::from_json(samples[r]));
    all.merge(s);
  }
  // The optimizer's busy time of every rank, from the steps' shared bubbles.
  for (size_t k = range.first; k < range.last; ++k) {
    for (int r = 0; r < t_.size(); ++r) all.optimizer[r].push_back(records_[k].bubble.optimizer[r]);
  }
  return all;
}

bool RankRun::switch_due() const {
  const AutoSwitch& as = plan_.auto_switch;
  return !as.target.empty() && !as.built &&
         static_cast<int64_t>(records_.size()) == opt_.auto_schedule_profile_steps;
}

// Rank 0 builds the schedule from every rank's profile samples and broadcasts it (with the two
// predictions) as "ok <before> <after>\n<csv>", or "error <code>\n<message>" so that every rank
// stops with the same error; every rank then lowers the same CSV and switches.
Status RankRun::switch_schedule() {
  AutoSwitch& as = plan_.auto_switch;
  as.profile_steps = static_cast<int64_t>(records_.size());
  TP_ASSIGN_OR_RETURN(CostSamples samples, gather_samples(measured_step_range(
                                               records_.size(), opt_.warmup_steps_excluded)));
  std::string payload;
  CostModel costs;
  if (rank_ == 0) {
    auto built = build_auto_from_samples(plan_, samples, &costs);
    payload = built.ok() ? fmt::format("ok {:a} {:a}\n{}", as.predicted_before, as.predicted_after,
                                       to_csv(*built))
                         : fmt::format("error {}\n{}", static_cast<int>(built.status().code()),
                                       built.status().message());
  }
  TP_ASSIGN_OR_RETURN(payload, broadcast_string(t_, 0, std::move(payload), opt_.exec.timeout_s));
  // Every replica runs replica 0's schedule (theirs were built from their own timings).
  if (dp_.size() > 1) {
    TP_ASSIGN_OR_RETURN(payload, broadcast_string(dp_, 0, std::move(payload), opt_.exec.timeout_s));
  }
  const std::string_view text(payload);
  const size_t eol = std::min(text.find('\n'), text.size());
  const std::string head(text.substr(0, eol));
  const std::string_view body = eol < text.size() ? text.substr(eol + 1) : std::string_view();
  char* end = nullptr;
  if (head.rfind("error ", 0) == 0) {
    const long code = std::strtol(head.c_str() + 6, &end, 10);
    return Status(static_cast<StatusCode>(code), std::string(body));
  }
  TP_CHECK(head.rfind("ok ", 0) == 0, "auto schedule broadcast: bad header '", head, "'");
  as.predicted_before = std::strtod(head.c_str() + 3, &end);  // hex floats: exact
  as.predicted_after = std::strtod(end, nullptr);
  TP_ASSIGN_OR_RETURN(Schedule built, parse_csv(body, as.target));
  built.name = as.target;
  TP_ASSIGN_OR_RETURN(Schedule lowered, lower(built));
  plan_.lowered = std::move(lowered);
  pr_.set_schedule(plan_.lowered);
  as.built = true;
  as.schedule = built;
  if (rank_ != 0 || dp_rank_ != 0) return OkStatus();
  std::string wrote;
  if (!opt_.out_dir.empty()) {
    TP_RETURN_IF_ERROR(
        write_file(fmt::format("{}/{}", opt_.out_dir, kAutoScheduleFile), to_csv(built)));
    TP_RETURN_IF_ERROR(write_file(opt_.out_dir + "/profile_costs.json", cost_table_to_json(costs)));
    wrote =
        fmt::format("; wrote {0}/{1} and {0}/profile_costs.json", opt_.out_dir, kAutoScheduleFile);
  }
  plan_.log(log_rank_,
            fmt::format("{}: built from {} profile step(s) on {}; predicted bubble {} {:.1f}% -> "
                        "{} {:.1f}%; running it from step {}{}",
                        as.target, as.profile_steps, as.counterpart, as.counterpart,
                        100 * as.predicted_before, as.target, 100 * as.predicted_after,
                        records_.size() + 1, wrote));
  return OkStatus();
}

// Every rank's samples of the measured steps and every rank's last step, on rank 0.
Result<RunEnd> RankRun::gather_end() {
  report_progress(-1, "gathering every rank's measurements");
  RunEnd end;
  TP_ASSIGN_OR_RETURN(end.samples,
                      gather_samples(measured_step_range(records_.size(), plan_.excluded_steps())));
  TP_ASSIGN_OR_RETURN(std::vector<std::string> last,
                      gather_strings(t_, events_to_json_array(last_), opt_.exec.timeout_s));
  if (rank_ != 0) return end;
  for (int r = 0; r < t_.size(); ++r) {
    TP_ASSIGN_OR_RETURN(RankTimeline rt, events_from_json_array(last[r], r));
    end.last_step.ranks.push_back(std::move(rt));
  }
  if (opt_.profile_step_start >= 0) lay_steps_end_to_end(end.last_step);
  end.records = records_;
  if (train_data_) end.data = train_data_->stats();
  return end;
}

Result<std::optional<TrainSummary>> RankRun::run() {
  report_progress(-1, "opening the data");
  TP_RETURN_IF_ERROR(open_data());
  report_progress(-1, "resuming");
  TP_ASSIGN_OR_RETURN(const int64_t start, resume());
  TP_RETURN_IF_ERROR(open_files(start));
  const AutoSwitch& as = plan_.auto_switch;
  const std::string name = as.target.empty() || as.built
                               ? plan_.lowered.name
                               : fmt::format("{} (profiling {} step(s) for {})", plan_.lowered.name,
                                             opt_.auto_schedule_profile_steps, as.target);
  plan_.log(log_rank_,
            fmt::format("tightpipe train: {}, p={}, v={}, m={}, {}{}{}; model {} layers x {}, "
                        "T={}, B={}, {}; stages {}",
                        name, opt_.pp, plan_.lowered.chunks(), opt_.microbatches,
                        plan_.layout.dp > 1
                            ? fmt::format("data-parallel {} (global batch {} microbatches), ",
                                          plan_.layout.dp, plan_.layout.dp * opt_.microbatches)
                            : std::string(),
                        transport_kind_name(opt_.world.kind),
                        opt_.exec.emulated ? ", emulated compute" : "", opt_.model.num_layers,
                        opt_.model.hidden_size, opt_.model.seq_length, opt_.model.micro_batch_size,
                        nn::precision_name(opt_.model.precision), nn::format_layout(plan_.specs)));
  // The BLAS core and why, the matmul backends and their measured rate (cpu_kernels.h); with bf16,
  // which kernel oneDNN runs: without native bf16 the lines say it is emulated and how slow (the
  // run goes on).
  if (rank_ == 0 && !plan_.kernel_line.empty()) plan_.log(log_rank_, plan_.kernel_line);
  if (rank_ == 0 && opt_.model.precision == nn::Precision::kBf16 && !opt_.exec.emulated)
    plan_.log(log_rank_, nn::bf16_matmul_isa());
  if (!plan_.layout_note.empty()) plan_.log(log_rank_, plan_.layout_note);
  if (plan_.cpu.oversubscribed()) plan_.log(log_rank_, plan_.cpu.warning());
  const double run_start = now_seconds();
  int64_t done = start;
  for (int64_t s = start; s < opt_.train_iters; ++s) {
    std::vector<StepRecord> ready;
    const bool speculate =
        pv_ && (opt_.clip_grad <= 0 || pv_stable_ >= opt_.post_validation_stable_steps);
    if (pv_ && !speculate && pv_->pending()) {
      // Back to the synchronous step (the last one needed clipping): its check first.
      TP_ASSIGN_OR_RETURN(StepRecord last, flush_post_validation());
      ready.push_back(std::move(last));
    }
    if (speculate) {
      TP_ASSIGN_OR_RETURN(std::vector<StepRecord> done_now, step_post_validated(s));
      for (StepRecord& r : done_now) ready.push_back(std::move(r));
      // Where the weights must be the checked ones: an evaluation, a save, an exit, the end.
      const int64_t next = s + 1;
      const bool boundary =
          next == opt_.train_iters || eval_due(s) ||
          (opt_.exit_interval > 0 && next % opt_.exit_interval == 0) ||
          (!opt_.save_dir.empty() && opt_.save_interval > 0 && next % opt_.save_interval == 0);
      if (boundary) {
        TP_ASSIGN_OR_RETURN(StepRecord last, flush_post_validation());
        ready.push_back(std::move(last));
      }
    } else {
      TP_ASSIGN_OR_RETURN(StepRecord rec, step(s));
      ready.push_back(std::move(rec));
    }
    report_skips();
    for (StepRecord& rec : ready) {
      const int64_t k = rec.step;
      // The global norm, the same on every rank: the streak of steps that needed no clipping.
      pv_stable_ = opt_.clip_grad > 0 && rec.grad_norm > opt_.clip_grad ? 0 : pv_stable_ + 1;
      if (eval_due(k)) {
        TP_ASSIGN_OR_RETURN(rec.val_loss, evaluate());
      }
      metrics_.write(metrics_line(rec));
      const bool log_now = k == start || k + 1 == opt_.train_iters || rec.val_loss >= 0 ||
                           (k + 1) % opt_.log_interval == 0;
      if (log_now) plan_.log(log_rank_, step_line(plan_, rec, start, now_seconds() - run_start));
      records_.push_back(std::move(rec));
    }
    done = s + 1;
    if (done == opt_.train_iters) break;
    if (switch_due()) TP_RETURN_IF_ERROR(switch_schedule());
    if (opt_.exit_interval > 0 && done % opt_.exit_interval == 0) {
      plan_.log(log_rank_, fmt::format("exit at step {} (--exit-interval)", done));
      break;
    }
    if (!opt_.save_dir.empty() && opt_.save_interval > 0 && done % opt_.save_interval == 0)
      TP_RETURN_IF_ERROR(save(done));
  }
  if (!as.target.empty() && !as.built) {
    plan_.log(
        log_rank_,
        fmt::format("note: {} was not built: this run made {} step(s), not more than "
                    "--auto-schedule-profile-steps {}, so it ran {} throughout",
                    as.target, done - start, opt_.auto_schedule_profile_steps, as.counterpart));
  }
  TP_RETURN_IF_ERROR(metrics_.status());
  TP_RETURN_IF_ERROR(timeline_.status());
  if (!opt_.save_dir.empty()) TP_RETURN_IF_ERROR(save(done));
  TP_ASSIGN_OR_RETURN(RunEnd end, gather_end());
  if (rank_ != 0 || dp_rank_ != 0) return std::optional<TrainSummary>();
  report_progress(-1, "summarising the run");
  TP_ASSIGN_OR_RETURN(TrainSummary summary, summarize_run(plan_, end));
  return std::optional<TrainSummary>(std::move(summary));
}

}  // namespace tightpipe::train_internal
