// run_training: the `tightpipe train` loop over any schedule, on threads or MPI ranks.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <thread>
#include <chrono>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/kernels.h"
#include "tightpipe/prof.h"
#include "tightpipe/simulator.h"
#include "tightpipe/timeline_io.h"
#include "tightpipe/trainer.h"

namespace tightpipe {
namespace {

// Every rank contributes its own slot; the sum hands every rank everyone's values.
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
    TP_RETURN_IF_ERROR(send(t, 0, kSizeTag, std::as_bytes(std::span<const int64_t>(&n, 1)), timeout));
    TP_RETURN_IF_ERROR(send(t, 0, kDataTag, std::as_bytes(std::span<const char>(mine)), timeout));
    return out;
  }
  out.push_back(mine);
  for (int r = 1; r < t.size(); ++r) {
    int64_t n = 0;
    TP_RETURN_IF_ERROR(recv(t, r, kSizeTag, std::as_writable_bytes(std::span<int64_t>(&n, 1)), timeout));
    std::string s(static_cast<size_t>(n), '\0');
    TP_RETURN_IF_ERROR(recv(t, r, kDataTag, std::as_writable_bytes(std::span<char>(s)), timeout));
    out.push_back(std::move(s));
  }
  return out;
}

// Per-action measured durations, keyed by stage and kind (F, I, W, B).
struct CostSamples {
  std::map<std::pair<int32_t, int>, std::vector<double>> time, bytes;
  void add(const TimelineEvent& e) {
    const int k = cost_slot(e.kind);
    if (k < 0) return;
    time[{e.stage, k}].push_back(e.end - e.start);
    bytes[{e.stage, k}].push_back(static_cast<double>(e.bytes));
  }
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  double makespan = 0, wall = 0, bubble = 0, tokens_per_s = 0;
  std::vector<double> rank_busy, rank_data_wait, rank_peak_stash;
};

}  // namespace

Status TrainOptions::validate() const {
  TP_RETURN_IF_ERROR(model.validate());
  TP_RETURN_IF_ERROR(recompute.validate());
  TP_RETURN_IF_ERROR(adamw.validate());
  if (pp < 1) {
    return Status::invalid_argument(
        fmt::format("--pp {}: needs at least 1 pipeline rank; hint: --pp 1 trains on one rank", pp));
  }
  if (microbatches < 1) {
    return Status::invalid_argument(fmt::format(
        "--num-microbatches {}: needs at least 1; hint: use at least --pp microbatches", microbatches));
  }
  if (train_iters < 1) {
    return Status::invalid_argument(fmt::format("--train-iters {}: needs at least 1", train_iters));
  }
  if (!(lr.lr > 0)) return Status::invalid_argument(fmt::format("--lr {}: must be > 0", lr.lr));
  if (eval_iters < 0) return Status::invalid_argument(fmt::format("--eval-iters {}: must be >= 0", eval_iters));
  if (log_interval < 1) {
    return Status::invalid_argument(fmt::format(
        "--log-interval {}: must be >= 1; hint: 1 prints every step, N every N-th", log_interval));
  }
  if (blas_threads < 1) {
    return Status::invalid_argument(fmt::format(
        "--blas-threads {}: must be >= 1; hint: 1 per rank unless cores are left over", blas_threads));
  }
  if (blas_threads > 1 && pp > 1 && world.kind == TransportKind::kThreads) {
    return Status::invalid_argument(fmt::format(
        "--blas-threads {} with {} thread ranks in one process: OpenBLAS's thread count is one "
        "setting for the whole process; hint: --blas-threads 1, or --transport mpi (one process "
        "per rank)",
        blas_threads, pp));
  }
  if (save_interval < 0) {
    return Status::invalid_argument(
        fmt::format("--save-interval {}: must be >= 0 (0: save only at the end)", save_interval));
  }
  if (exit_interval < 0) {
    return Status::invalid_argument(
        fmt::format("--exit-interval {}: must be >= 0 (0: run to --train-iters)", exit_interval));
  }
  TP_RETURN_IF_ERROR(world.validate());
  if (world.world_size != pp) {
    return Status::invalid_argument(fmt::format(
        "world size {} differs from --pp {}; hint: start as many ranks as pipeline stages",
        world.world_size, pp));
  }
  return OkStatus();
}

Result<TrainSummary> run_training(const TrainOptions& opt_in) {
  TrainOptions opt = opt_in;
  opt.world.world_size = opt.pp;
  TP_RETURN_IF_ERROR(opt.validate());
  opt.lr.total_iters = opt.train_iters;
  TP_RETURN_IF_ERROR(opt.lr.validate());

  // Everything that can be refused is refused here, identically on every process.
  auto sched = schedule_from_name_or_file(
      opt.schedule, {opt.pp, opt.microbatches, opt.vpp, opt.group_size});
  if (!sched.ok()) return sched.status();
  if (sched->num_ranks != opt.pp || sched->num_microbatches != opt.microbatches) {
    return Status::invalid_argument(fmt::format(
        "--schedule {}: the file has {} ranks and {} microbatches but --pp is {} and "
        "--num-microbatches {}; hint: pass the file's shape",
        opt.schedule, sched->num_ranks, sched->num_microbatches, opt.pp, opt.microbatches));
  }
  TP_ASSIGN_OR_RETURN(Schedule lowered, lower(*sched));
  TP_ASSIGN_OR_RETURN(std::vector<nn::StageSpec> specs,
                      nn::partition_layers(opt.model, lowered.num_stages, opt.pipeline_layout));
  const int32_t P = opt.pp, S = lowered.num_stages, M = opt.microbatches;
  const int64_t tokens_per_step = int64_t(M) * opt.model.tokens_per_microbatch();
  const double timeout = opt.exec.timeout_s;
  // The loaders' options: the flags' data options with the model's batch shape and the seed.
  DataOptions data_opt = opt.data;
  data_opt.micro_batch_size = opt.model.micro_batch_size;
  data_opt.seq_length = opt.model.seq_length;
  data_opt.vocab_size = opt.model.vocab_size;
  data_opt.seed = opt.seed;
  if (!opt.exec.emulated) {
    if (opt.data.path.empty()) {
      return Status::invalid_argument(
          "--data-path is required; hint: e.g. --data-path ../shared/data/tinyshakespeare.txt");
    }
    TP_RETURN_IF_ERROR(data_opt.validate().with_context("--data-path"));
  }
  if (!opt.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.out_dir, ec);
    if (ec) return Status::io_error(fmt::format("--out-dir '{}': {}", opt.out_dir, ec.message()));
  }
  nn::set_blas_threads(opt.blas_threads);

  TrainSummary summary;
  std::mutex summary_mu;
  auto body = [&](Transport& t) -> Status {
    const int32_t rank = t.rank();
    ExecutorOptions eo = opt.exec;
    eo.progress_thread = opt.world.kind == TransportKind::kMpi;
    PipelineRank pr(lowered, rank, t, opt.model, specs, opt.seed, opt.recompute, eo);
    const bool needs_data =
        !opt.exec.emulated && (lowered.rank_of(0) == rank || lowered.rank_of(S - 1) == rank);
    std::unique_ptr<DataLoader> train_data, val_data;
    DataOptions dopt = data_opt;
    // Validation reads the same windows every time: a fresh loader per evaluation.
    auto open_val = [&]() -> Result<std::unique_ptr<DataLoader>> {
      DataOptions v = dopt;
      v.split = Split::kVal;
      v.shuffle_buffer = 1;
      return DataLoader::open(v);
    };
    if (needs_data) {
      dopt.split = Split::kTrain;
      TP_ASSIGN_OR_RETURN(train_data, DataLoader::open(dopt));
      if (opt.eval_iters > 0) {
        TP_RETURN_IF_ERROR(open_val().status());  // a split too small stops the run before work
      }
    }
    int64_t start = 0;
    if (!opt.load_dir.empty()) {
      TP_ASSIGN_OR_RETURN(nn::Manifest man, nn::load_manifest(opt.load_dir));
      TP_RETURN_IF_ERROR(nn::check_manifest_shape(opt.load_dir, man, opt.model));
      if (man.stages != specs) {
        return Status::invalid_argument(fmt::format(
            "--load {}: the checkpoint has {} stages '{}' but this run (--pp {}, --vpp {}) has {} "
            "stages '{}'; hint: use the model flags, --pp, --vpp and --pipeline-layout the "
            "checkpoint was saved with",
            opt.load_dir, man.stages.size(), nn::format_layout(man.stages), P, lowered.chunks(),
            specs.size(), nn::format_layout(specs)));
      }
      start = man.step;
      for (auto& [s, stage] : pr.stages()) {
        const std::string path = nn::stage_checkpoint_path(opt.load_dir, s);
        TP_ASSIGN_OR_RETURN(nn::CheckpointState st, nn::load_stage_checkpoint(path, *stage));
        if (st.step != man.step) {  // a save interrupted between files mixes two checkpoints
          return Status::corruption(fmt::format(
              "--load {}: '{}' is at step {} but the manifest at step {}; hint: the save was "
              "interrupted, use an older checkpoint",
              opt.load_dir, path, st.step, man.step));
        }
      }
      if (start >= opt.train_iters) {
        return Status::invalid_argument(fmt::format(
            "--train-iters {}: the checkpoint --load {} is already at step {}; hint: --train-iters "
            "counts all steps, pass more than {} to continue",
            opt.train_iters, opt.load_dir, start, start));
      }
      // The ranks of the first and the last stage (tokens, targets) both resume where the rank
      // of stage 0 saved its loader.
      if (train_data) {
        const std::string pos_path = opt.load_dir + "/data_position.json";
        auto pos_text = read_file(pos_path);
        if (!pos_text.ok()) {
          return Status(pos_text.status().code(),
                        fmt::format("--load {}: {}; hint: without it the data would restart at "
                                    "the first batch; save the checkpoint again with this version",
                                    opt.load_dir, pos_text.status().message()));
        }
        TP_ASSIGN_OR_RETURN(DataPosition pos, DataPosition::from_json(*pos_text));
        TP_RETURN_IF_ERROR(train_data->restore(pos).with_context("--load " + pos_path));
      }
      if (rank == 0 && opt.progress) {
        std::printf("loaded %s at step %lld\n", opt.load_dir.c_str(), static_cast<long long>(start));
      }
    }

    std::FILE* metrics = nullptr;
    std::FILE* timeline_file = nullptr;
    if (!opt.out_dir.empty()) {
      if (rank == 0) {
        const std::string path = opt.out_dir + "/metrics.jsonl";
        metrics = std::fopen(path.c_str(), start > 0 ? "a" : "w");
        if (!metrics) return Status::io_error(fmt::format("--out-dir: cannot write '{}'", path));
      }
      const std::string tpath = fmt::format("{}/timeline_rank{}.jsonl", opt.out_dir, rank);
      timeline_file = std::fopen(tpath.c_str(), "w");
      if (!timeline_file) return Status::io_error(fmt::format("--out-dir: cannot write '{}'", tpath));
    }
    struct Closer {
      std::FILE* a;
      std::FILE* b;
      ~Closer() {
        if (a) std::fclose(a);
        if (b) std::fclose(b);
      }
    } closer{metrics, timeline_file};

    const bool tty = rank == 0 && isatty(fileno(stdout));
    if (rank == 0 && opt.progress) {
      std::printf("tightpipe train: %s, p=%d, v=%d, m=%d, %s%s; model %d layers x %d, T=%d, B=%d; "
                  "stages %s\n",
                  lowered.name.c_str(), P, lowered.chunks(), M,
                  std::string(transport_kind_name(opt.world.kind)).c_str(),
                  opt.exec.emulated ? ", emulated compute" : "", opt.model.num_layers,
                  opt.model.hidden_size, opt.model.seq_length, opt.model.micro_batch_size,
                  nn::format_layout(specs).c_str());
      std::fflush(stdout);
    }

    // Checkpoint after `done` steps: every rank its stages, the rank of stage 0 the data position,
    // rank 0 the manifest.
    auto save = [&](int64_t done) -> Status {
      std::error_code ec;
      std::filesystem::create_directories(opt.save_dir, ec);
      if (ec) return Status::io_error(fmt::format("--save '{}': {}", opt.save_dir, ec.message()));
      for (auto& [s, stage] : pr.stages()) {
        TP_RETURN_IF_ERROR(nn::save_stage_checkpoint(nn::stage_checkpoint_path(opt.save_dir, s),
                                                     *stage, {done, {}}));
      }
      if (rank == lowered.rank_of(0) && train_data) {
        TP_RETURN_IF_ERROR(write_file(opt.save_dir + "/data_position.json",
                                      train_data->position().to_json()));
      }
      if (rank == 0) {
        nn::Manifest man;
        man.step = done;
        man.config = opt.model;
        man.stages = specs;
        TP_RETURN_IF_ERROR(nn::save_manifest(opt.save_dir, man));
        if (opt.progress) {
          std::printf("saved %s at step %lld\n", opt.save_dir.c_str(), static_cast<long long>(done));
        }
      }
      return OkStatus();
    };

    CostSamples samples;
    std::vector<StepRecord> records;
    RankTimeline last_timeline;
    const double run_start = now_seconds();
    int64_t done = start;  // steps done (the checkpoint's step)
    // Where this run stops: --train-iters, or earlier at the next multiple of --exit-interval.
    const int64_t stop = opt.exit_interval > 0
                             ? std::min(opt.train_iters, (start / opt.exit_interval + 1) * opt.exit_interval)
                             : opt.train_iters;
    // Costs come from the steps after the warm-up, or from every step of a run too short for it.
    const bool all_steps_measured = stop - start <= opt.warmup_steps_excluded;
    for (int64_t step = start; step < opt.train_iters; ++step) {
      std::vector<Batch> batches;
      BatchFetcher fetch = [&](int32_t mb) -> Result<const Batch*> {
        while (static_cast<int32_t>(batches.size()) <= mb) {
          if (opt.data_delay_ms > 0) {
            std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.data_delay_ms));
          }
          if (train_data) {
            TP_ASSIGN_OR_RETURN(Batch b, train_data->next());
            batches.push_back(std::move(b));
          } else {
            batches.emplace_back();  // emulated compute: no data, only the (emulated) wait
          }
        }
        return &batches[mb];
      };
      const float lr = nn::lr_at(opt.lr, step);
      const double t0 = now_seconds();
      TP_ASSIGN_OR_RETURN(StepOutcome o, pipeline_step(pr, t, static_cast<int32_t>(step), fetch,
                                                       tokens_per_step, opt.adamw, lr,
                                                       opt.clip_grad, timeout));
      const double wall = now_seconds() - t0;
      // Per-rank step statistics, shared with every rank.
      double busy = 0, last_end = 0, data_wait = 0;
      for (const auto& e : o.rank.timeline.events) {
        if (e.kind == EventKind::kOptimizer) continue;
        last_end = std::max(last_end, e.end);
        if (is_compute_kind(e.kind)) busy += e.end - e.start;
        if (e.kind == EventKind::kData) data_wait += e.end - e.start;
        if (step - start >= opt.warmup_steps_excluded || all_steps_measured) samples.add(e);
      }
      const double mine[4] = {busy, last_end, data_wait, static_cast<double>(o.rank.peak_stash_bytes)};
      TP_ASSIGN_OR_RETURN(std::vector<double> all, allgather(t, mine, timeout));
      StepRecord rec;
      rec.step = step;
      rec.loss = o.loss;
      rec.grad_norm = o.grad_norm;
      rec.lr = lr;
      rec.wall = wall;
      double total_busy = 0;
      for (int r = 0; r < P; ++r) {
        rec.makespan = std::max(rec.makespan, all[4 * r + 1]);
        total_busy += all[4 * r];
        rec.rank_busy.push_back(all[4 * r]);
        rec.rank_data_wait.push_back(all[4 * r + 2]);
        rec.rank_peak_stash.push_back(all[4 * r + 3]);
      }
      rec.bubble = rec.makespan > 0 ? (P * rec.makespan - total_busy) / (P * rec.makespan) : 0;
      rec.tokens_per_s = tokens_per_step / wall;
      if (timeline_file) {
        for (const auto& e : o.rank.timeline.events)
          std::fprintf(timeline_file, "%s\n", event_to_json(e).c_str());
      }
      last_timeline = std::move(o.rank.timeline);

      // Validation loss (forward only over the pipeline).
      double val_loss = -1;
      const bool eval_now = opt.eval_iters > 0 &&
                            ((opt.eval_interval > 0 && (step + 1) % opt.eval_interval == 0) ||
                             step + 1 == opt.train_iters);
      if (eval_now && !opt.exec.emulated) {
        if (needs_data) {
          TP_ASSIGN_OR_RETURN(val_data, open_val());
        }
        std::vector<Batch> vb;
        BatchFetcher vfetch = [&](int32_t mb) -> Result<const Batch*> {
          while (static_cast<int32_t>(vb.size()) <= mb) {
            TP_ASSIGN_OR_RETURN(Batch b, val_data->next());
            vb.push_back(std::move(b));
          }
          return &vb[mb];
        };
        TP_ASSIGN_OR_RETURN(double vsum, pr.executor().run_forward_only(
                                             static_cast<int32_t>(opt.eval_iters), vfetch,
                                             1.0f / float(opt.eval_iters * opt.model.tokens_per_microbatch())));
        double v[1] = {vsum};
        TP_RETURN_IF_ERROR(allreduce_sum(t, v, timeout));
        val_loss = v[0];
      }

      if (rank == 0) {
        if (metrics) {
          nlohmann::json j = {{"step", step + 1},          {"loss", rec.loss},
                              {"grad_norm", rec.grad_norm}, {"lr", rec.lr},
                              {"tokens_per_s", rec.tokens_per_s}, {"step_time_s", rec.wall},
                              {"bubble_ratio", rec.bubble}, {"makespan_s", rec.makespan},
                              {"data_wait_s", median(rec.rank_data_wait)}};
          if (val_loss >= 0) j["val_loss"] = val_loss;
          std::fprintf(metrics, "%s\n", j.dump().c_str());
          std::fflush(metrics);
        }
        const bool log_now = step == start || step + 1 == opt.train_iters || val_loss >= 0 ||
                             (step + 1) % opt.log_interval == 0;
        if (opt.progress && log_now) {
          const double elapsed = now_seconds() - run_start;
          const double eta = elapsed / double(step + 1 - start) * double(opt.train_iters - step - 1);
          std::string line = fmt::format(
              "step {:>5}/{} | loss {:.4f}{} | {:>8.0f} tok/s | bubble {:5.1f}% | step {:.1f} ms | "
              "ETA {:.0f}s",
              step + 1, opt.train_iters, rec.loss,
              val_loss >= 0 ? fmt::format(" | val {:.4f}", val_loss) : std::string(),
              rec.tokens_per_s, 100 * rec.bubble, 1e3 * rec.wall, eta);
          std::printf("%s\n", line.c_str());
          if (tty) std::fflush(stdout);
        }
      }
      if (val_loss >= 0) summary.final_val_loss = val_loss;
      records.push_back(std::move(rec));
      done = step + 1;
      if (done == opt.train_iters) break;
      if (opt.exit_interval > 0 && done % opt.exit_interval == 0) {
        if (rank == 0 && opt.progress)
          std::printf("exit at step %lld (--exit-interval)\n", static_cast<long long>(done));
        break;
      }
      if (!opt.save_dir.empty() && opt.save_interval > 0 && done % opt.save_interval == 0)
        TP_RETURN_IF_ERROR(save(done));
    }
    if (rank == 0) std::fflush(stdout);
    if (!opt.save_dir.empty()) TP_RETURN_IF_ERROR(save(done));

    // Measured per-action costs (median per stage and kind), shared with every rank.
    std::vector<double> cost(static_cast<size_t>(S) * 8, 0.0);
    for (int32_t s : lowered.stages_of(rank)) {
      for (int k = 0; k < 4; ++k) {
        auto it = samples.time.find({s, k});
        if (it == samples.time.end()) continue;
        cost[8 * s + k] = median(it->second);
        cost[8 * s + 4 + k] = median(samples.bytes[{s, k}]);
      }
    }
    TP_RETURN_IF_ERROR(allreduce_sum(t, cost, timeout));  // each stage is filled by one rank
    TP_ASSIGN_OR_RETURN(std::vector<std::string> tl_json,
                        gather_strings(t, events_to_json_array(last_timeline), timeout));
    if (rank != 0) return OkStatus();

    // ---- rank 0: summary --------------------------------------------------------------------
    std::vector<StageCost> stage_costs(S);
    for (int32_t s = 0; s < S; ++s) {
      StageCost& c = stage_costs[s];
      c.f = cost[8 * s + 0];
      const double i = cost[8 * s + 1], w = cost[8 * s + 2], b = cost[8 * s + 3];
      c.b = b > 0 ? b : i + w;
      c.i = i > 0 ? i : c.b / 2;
      c.w = w > 0 ? w : c.b - c.i;
      c.recompute = 0;
      c.act_bytes = std::max(0.0, cost[8 * s + 4]);
      c.act_after_i_bytes = std::clamp(c.act_bytes + cost[8 * s + 5], 0.0, c.act_bytes);
      c.input_bytes = c.act_bytes;
      c.message_bytes = int64_t(opt.model.tokens_per_microbatch()) * opt.model.hidden_size * 4;
    }
    LinkCost link;
    if (opt.world.link) {
      link.latency = opt.world.link->latency_us * 1e-6;
      link.bandwidth = opt.world.link->gbps > 0 ? opt.world.link->gbps * 1e9 / 8 : 0;
    }
    CostModel measured(stage_costs, link, "s", "measured");
    SimOptions so;
    so.comm_mode = opt.exec.overlap_p2p ? CommMode::kOverlap : CommMode::kBlocking;
    auto sim = simulate(lowered, measured, so);

    // The steps after the warm-up; at least the last one (records is never empty).
    std::vector<StepRecord> measured_steps(
        records.begin() + std::min<size_t>(records.size() - 1, opt.warmup_steps_excluded),
        records.end());
    std::vector<double> bubbles, tps;
    for (const auto& r : measured_steps) {
      bubbles.push_back(r.bubble);
      tps.push_back(r.tokens_per_s);
    }
    std::lock_guard<std::mutex> lock(summary_mu);
    summary.steps = static_cast<int64_t>(records.size());
    summary.final_loss = records.empty() ? 0 : records.back().loss;
    summary.measured_bubble_ratio = median(bubbles);
    summary.tokens_per_s = median(tps);
    summary.measured_bubble_per_rank.assign(P, 0);
    summary.peak_stash_bytes_per_rank.assign(P, 0);
    double data_wait = 0, step_time = 0;
    for (int r = 0; r < P; ++r) {
      std::vector<double> idle;
      for (const auto& s : measured_steps) {
        idle.push_back(s.makespan > 0 ? (s.makespan - s.rank_busy[r]) / s.makespan : 0);
        summary.peak_stash_bytes_per_rank[r] = std::max(summary.peak_stash_bytes_per_rank[r], s.rank_peak_stash[r]);
      }
      summary.measured_bubble_per_rank[r] = median(idle);
    }
    std::vector<double> dw, st;
    for (const auto& s : measured_steps) {
      dw.push_back(*std::max_element(s.rank_data_wait.begin(), s.rank_data_wait.end()));
      st.push_back(s.wall);
    }
    data_wait = median(dw);
    step_time = median(st);
    if (sim.ok()) {
      summary.predicted_bubble_ratio = sim->bubble_ratio;
      for (const auto& r : sim->ranks) {
        summary.predicted_bubble_per_rank.push_back(sim->makespan > 0 ? r.idle / sim->makespan : 0);
        summary.predicted_peak_bytes_per_rank.push_back(r.peak_activation_bytes);
      }
    }

    nlohmann::json j;
    j["schedule"] = lowered.name;
    j["pp"] = P;
    j["vpp"] = lowered.chunks();
    j["microbatches"] = M;
    j["transport"] = std::string(transport_kind_name(opt.world.kind));
    j["compute"] = opt.exec.emulated ? "emulated" : "real";
    j["overlap_p2p"] = opt.exec.overlap_p2p;
    j["steps"] = summary.steps;
    j["warmup_steps_excluded"] = opt.warmup_steps_excluded;
    j["final_loss"] = summary.final_loss;
    if (summary.final_val_loss >= 0) j["final_val_loss"] = summary.final_val_loss;
    j["tokens_per_s"] = summary.tokens_per_s;
    j["step_time_s"] = step_time;
    j["data_wait_s"] = data_wait;
    j["data_wait_ratio"] = step_time > 0 ? data_wait / step_time : 0;
    j["measured_bubble_ratio"] = summary.measured_bubble_ratio;
    j["predicted_bubble_ratio"] = summary.predicted_bubble_ratio;
    j["measured_bubble_ratio_per_rank"] = summary.measured_bubble_per_rank;
    j["predicted_bubble_ratio_per_rank"] = summary.predicted_bubble_per_rank;
    j["measured_peak_activation_bytes_per_rank"] = summary.peak_stash_bytes_per_rank;
    j["predicted_peak_activation_bytes_per_rank"] = summary.predicted_peak_bytes_per_rank;
    if (!sim.ok()) j["prediction_error"] = sim.status().message();
    nlohmann::json costs = nlohmann::json::array();
    for (int32_t s = 0; s < S; ++s) {
      costs.push_back({{"stage", s}, {"rank", lowered.rank_of(s)}, {"f_s", stage_costs[s].f},
                       {"i_s", stage_costs[s].i}, {"w_s", stage_costs[s].w}, {"b_s", stage_costs[s].b},
                       {"activation_bytes", stage_costs[s].act_bytes}});
    }
    j["measured_costs"] = costs;

    if (opt.progress) {
      std::printf("\nsummary (median of %zu steps after %lld warm-up): %.0f tokens/s, step %.1f ms, "
                  "data wait %.2f%% of the step\n",
                  measured_steps.size(), static_cast<long long>(opt.warmup_steps_excluded),
                  summary.tokens_per_s, 1e3 * step_time, step_time > 0 ? 100 * data_wait / step_time : 0);
      std::printf("bubble: measured %.1f%%, predicted %.1f%% (simulator with the measured costs)\n",
                  100 * summary.measured_bubble_ratio, 100 * summary.predicted_bubble_ratio);
      std::printf("%-6s %10s %10s %16s %16s\n", "rank", "measured", "predicted", "peak act (meas)",
                  "peak act (pred)");
      for (int r = 0; r < P; ++r) {
        std::printf("%-6d %9.1f%% %9.1f%% %16s %16s\n", r, 100 * summary.measured_bubble_per_rank[r],
                    r < (int)summary.predicted_bubble_per_rank.size() ? 100 * summary.predicted_bubble_per_rank[r] : 0.0,
                    human_bytes(summary.peak_stash_bytes_per_rank[r]).c_str(),
                    r < (int)summary.predicted_peak_bytes_per_rank.size()
                        ? human_bytes(summary.predicted_peak_bytes_per_rank[r]).c_str() : "-");
      }
      std::printf("measured per-action costs (ms, median):");
      for (int32_t s = 0; s < S; ++s)
        std::printf(" s%d F %.2f I %.2f W %.2f B %.2f;", s, 1e3 * stage_costs[s].f,
                    1e3 * stage_costs[s].i, 1e3 * stage_costs[s].w, 1e3 * stage_costs[s].b);
      std::printf("\n");
      if (summary.final_val_loss >= 0) std::printf("final validation loss %.4f\n", summary.final_val_loss);
    }
    if (!opt.out_dir.empty()) {
      TP_RETURN_IF_ERROR(write_file(opt.out_dir + "/summary.json", j.dump(2) + "\n"));
      TP_RETURN_IF_ERROR(write_file(opt.out_dir + "/costs.json", cost_table_to_json(measured)));
      TP_RETURN_IF_ERROR(write_file(opt.out_dir + "/schedule.csv", to_csv(lowered)));
    }
    // The last step of every rank as one timeline: the Chrome trace.
    Timeline tl;
    tl.time_unit = "s";
    for (int r = 0; r < P; ++r) {
      TP_ASSIGN_OR_RETURN(RankTimeline rt, events_from_json_array(tl_json[r], r));
      tl.ranks.push_back(std::move(rt));
    }
    if (!opt.trace_path.empty()) TP_RETURN_IF_ERROR(write_chrome_trace(opt.trace_path, tl).with_context("--trace"));
    return OkStatus();
  };

  TP_ASSIGN_OR_RETURN(std::vector<RankStatus> statuses, run_world(opt.world, body));
  // The first real failure (not the Unavailable echoes of other ranks' aborts) is the error.
  for (const auto& rs : statuses)
    if (!rs.status.ok() && rs.status.code() != StatusCode::kUnavailable) return rs.status;
  for (const auto& rs : statuses)
    if (!rs.status.ok()) return rs.status;
  return summary;
}

}  // namespace tightpipe
