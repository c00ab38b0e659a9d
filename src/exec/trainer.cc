// run_training: set-up (make_plan), then every rank runs RankRun (rank_run.cc), then rank 0
// summarises (run_summary.cc). The phases are in train_internal.h.
#include "tightpipe/trainer.h"

#include <fmt/format.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include "exec/train_internal.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/cpu_kernels.h"
#include "tightpipe/host.h"
#include "tightpipe/input_file.h"
#include "tightpipe/kernels.h"
#include "tightpipe/simulator.h"
#include "tightpipe/transport_mpi.h"

namespace tightpipe {

using train_internal::CpuLoad;
using train_internal::RunPlan;

Status TrainOptions::validate() const {
  TP_RETURN_IF_ERROR(model.validate());
  TP_RETURN_IF_ERROR(recompute.validate());
  TP_RETURN_IF_ERROR(adamw.validate());
  if (pp < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: needs at least 1 pipeline rank; hint: --pp 1 trains on one rank", pp));
  }
  // One line per count: the flag, the value, its range (docs/train_limits.md) and a hint.
  auto in_range = [](const char* flag, int64_t v, int64_t lo, int64_t hi,
                     std::string_view hint) -> Status {
    if (v >= lo && v <= hi) return OkStatus();
    return Status::invalid_argument(
        fmt::format("{} {}: must be in [{}, {}]; hint: {}", flag, v, lo, hi, hint));
  };
  TP_RETURN_IF_ERROR(in_range("--num-microbatches", microbatches, 1, kMaxMicrobatches,
                              "use at least --pp microbatches, e.g. --num-microbatches 8"));
  TP_RETURN_IF_ERROR(in_range("--train-iters", train_iters, 1, kMaxTrainIters,
                              "optimizer steps, e.g. --train-iters 100"));
  if (profile_step_start >= 0 || profile_step_end >= 0) {
    if (profile_step_start < 0 || profile_step_end < 0) {
      return Status::invalid_argument(fmt::format(
          "--profile-step-start {} --profile-step-end {}: give both; hint: the trace records "
          "steps [start, end), e.g. --profile-step-start 10 --profile-step-end 12 (Megatron's "
          "defaults)",
          profile_step_start, profile_step_end));
    }
    if (!(profile_step_start < profile_step_end && profile_step_end <= train_iters)) {
      return Status::invalid_argument(fmt::format(
          "--profile-step-start {} --profile-step-end {}: need start < end <= --train-iters {}; "
          "hint: the trace records steps [start, end), counted from 0",
          profile_step_start, profile_step_end, train_iters));
    }
    if (trace_path.empty()) {
      return Status::invalid_argument(fmt::format(
          "--profile-step-start {} --profile-step-end {}: no trace to record them in; hint: add "
          "--trace FILE.json",
          profile_step_start, profile_step_end));
    }
  }
  TP_RETURN_IF_ERROR(in_range("--eval-iters", eval_iters, 0, kMaxMicrobatches,
                              "validation microbatches per evaluation, e.g. 8 (0: none)"));
  TP_RETURN_IF_ERROR(in_range("--eval-interval", eval_interval, 0, kMaxTrainIters,
                              "validation every N steps (0: only at the end)"));
  TP_RETURN_IF_ERROR(in_range("--log-interval", log_interval, 1, kMaxTrainIters,
                              "1 prints every step, N every N-th"));
  TP_RETURN_IF_ERROR(in_range("--save-interval", save_interval, 0, kMaxTrainIters,
                              "checkpoint every N steps (0: only at the end)"));
  TP_RETURN_IF_ERROR(in_range("--exit-interval", exit_interval, 0, kMaxTrainIters,
                              "stop at a multiple of N steps (0: run to --train-iters)"));
  TP_RETURN_IF_ERROR(in_range("--keep-last-checkpoints", keep_last_checkpoints, 0, kMaxTrainIters,
                              "0 keeps every checkpoint, K the newest K"));
  TP_RETURN_IF_ERROR(in_range("--lr-warmup-iters", lr.warmup_iters, 0, kMaxTrainIters,
                              "linear warm-up steps, e.g. 10 (0: none)"));
  TP_RETURN_IF_ERROR(in_range("--measure-warmup-steps", warmup_steps_excluded, 0, kMaxTrainIters,
                              "steps left out of the medians, e.g. 1"));
  TP_RETURN_IF_ERROR(in_range("--blas-threads", blas_threads, 1, kMaxBlasThreads,
                              "1 per rank unless cores are left over"));
  TP_RETURN_IF_ERROR(in_range("--num-workers", data.num_workers, 1, kMaxDataWorkers,
                              "data loader threads, e.g. 1 or 2"));
  TP_RETURN_IF_ERROR(in_range("--prefetch", data.prefetch, 1, kMaxPrefetch,
                              "batches each loader worker decodes ahead, e.g. 4"));
  // --lr and the rest of the schedule: LrSchedule::validate (make_plan, once train_iters is set).
  if (!(std::isfinite(clip_grad) && clip_grad >= 0)) {
    return Status::invalid_argument(fmt::format(
        "--clip-grad {}: must be a finite number >= 0; hint: 1.0, or 0 to turn clipping off",
        clip_grad));
  }
  TP_RETURN_IF_ERROR(in_range("--data-parallel-size", data_parallel_size, 0, 4096,
                              "replicas of the pipeline (0: the world size / --pp)"));
  TP_RETURN_IF_ERROR(in_range("--world-size", world_size, 0, 4096,
                              "thread ranks in all (0: --pp x --data-parallel-size)"));
  TP_RETURN_IF_ERROR(in_range("--bucket-size", grad_reduce.bucket_size, 1, int64_t{1} << 30,
                              "gradient values per data-parallel allreduce, e.g. 1048576"));
  if (blas_threads > 1 && world.world_size > 1 && world.kind == TransportKind::kThreads) {
    return Status::invalid_argument(fmt::format(
        "--blas-threads {} with {} thread ranks in one process: OpenBLAS's thread count is one "
        "setting for the whole process; hint: --blas-threads 1, or --transport mpi (one process "
        "per rank)",
        blas_threads, world.world_size));
  }
  TP_RETURN_IF_ERROR(world.validate());
  TP_RETURN_IF_ERROR(auto_schedule.validate());
  if (auto_schedule_profile_steps < 1 || auto_schedule_profile_steps > 1000) {
    return Status::invalid_argument(fmt::format(
        "--auto-schedule-profile-steps {}: must be in [1, 1000]; hint: 3 (the first step warms "
        "up, the others are measured)",
        auto_schedule_profile_steps));
  }
  if (!(data_delay_ms >= 0) || data_delay_ms > 60e3) {
    return Status::invalid_argument(fmt::format(
        "--emulate-data-delay-ms {}: must be in [0, 60000]; hint: 0 turns the emulation off",
        data_delay_ms));
  }
  if (world.world_size % pp != 0) {
    return Status::invalid_argument(fmt::format(
        "world size {} is not a multiple of --pp {}; hint: start --pp x --data-parallel-size "
        "ranks",
        world.world_size, pp));
  }
  return OkStatus();
}

std::vector<nn::StageSpec> stage_specs(const Schedule& schedule,
                                       const std::vector<nn::StageSpec>& model_specs) {
  TP_CHECK(static_cast<int32_t>(model_specs.size()) == schedule.stages_per_direction(),
           "model specs ", model_specs.size(), " for ", schedule.stages_per_direction(),
           " model stages");
  std::vector<nn::StageSpec> out;
  for (int32_t s = 0; s < schedule.num_stages; ++s)
    out.push_back(model_specs[schedule.model_stage(s)]);
  return out;
}

namespace {

// The copies of each model stage this rank holds one of, in ascending model stage order: the
// local stage and the ranks holding the copies, ascending (the group view's members).
struct CopyGroup {
  int32_t model_stage = 0;
  int32_t local_stage = 0;
  std::vector<int> ranks;
};

std::vector<CopyGroup> copy_groups(const Schedule& sch, int32_t rank) {
  std::vector<CopyGroup> out;
  if (sch.directions <= 1) return out;
  const int32_t per = sch.stages_per_direction();
  for (int32_t k = 0; k < per; ++k) {
    CopyGroup g;
    g.model_stage = k;
    g.local_stage = -1;
    for (int32_t d = 0; d < sch.directions; ++d) {
      const int32_t s = k + d * per;
      g.ranks.push_back(sch.rank_of(s));
      if (sch.rank_of(s) == rank) g.local_stage = s;
    }
    if (g.local_stage < 0) continue;
    std::sort(g.ranks.begin(), g.ranks.end());
    // check_executable refuses two copies on one rank.
    TP_CHECK(std::adjacent_find(g.ranks.begin(), g.ranks.end()) == g.ranks.end(),
             "two copies of model stage ", k, " on rank ", rank);
    out.push_back(std::move(g));
  }
  return out;
}

// Values per allreduce bucket of the copies' gradient sum and of the debug comparison (which holds
// members x bucket doubles at a time).
constexpr size_t kCopyBucket = size_t{1} << 20;

}  // namespace

bool sums_stage_copies(PipelineRank& rank) {
  return rank.executor().schedule().directions > 1 && !rank.stages().empty();
}

Result<double> sum_stage_copies(PipelineRank& rank, Transport& pipeline, double grad_sq,
                                int32_t step, double timeout_s) {
  PipelineRank& pr = rank;
  if (!sums_stage_copies(pr)) return grad_sq;
  const Schedule& sch = pr.executor().schedule();
  auto stages = pr.stages();
  for (const CopyGroup& g : copy_groups(sch, pr.rank())) {
    const std::unique_ptr<Transport> view = make_group_view(pipeline, g.ranks);
    TP_RETURN_IF_ERROR(train_internal::sum_over_group(
        stages.at(g.local_stage)->grads(), *view, static_cast<int64_t>(kCopyBucket), timeout_s,
        fmt::format("step {} gradient sum of model stage {}'s copies (stage {})", step,
                    g.model_stage, g.local_stage)));
  }
  // Each model stage once in the global norm: its direction-0 copy (the sums are equal).
  double sq = 0;
  for (auto& [s, stage] : stages)
    if (sch.direction_of_stage(s) == 0) sq += stage->grad_sq_norm();
  return sq;
}

Status check_stage_copies(PipelineRank& rank, Transport& pipeline, double timeout_s) {
  PipelineRank& pr = rank;
  const Schedule& sch = pr.executor().schedule();
  auto stages = pr.stages();
  if (sch.directions <= 1 || stages.empty()) return OkStatus();
  std::vector<double> all;
  for (const CopyGroup& g : copy_groups(sch, pr.rank())) {
    const std::unique_ptr<Transport> view = make_group_view(pipeline, g.ranks);
    const nn::GptStage& stage = *stages.at(g.local_stage);
    std::span<const float> w = stage.params();
    const size_t members = g.ranks.size();
    const size_t me = static_cast<size_t>(view->rank());
    for (size_t at = 0; at < w.size(); at += kCopyBucket) {
      const size_t n = std::min(kCopyBucket, w.size() - at);
      // Every member's bits in its own slot (integers below 2^32 are exact doubles, and the
      // other slots are zeros): the sum hands everyone every copy's exact bits.
      all.assign(n * members, 0.0);
      for (size_t i = 0; i < n; ++i) {
        uint32_t bits = 0;
        std::memcpy(&bits, &w[at + i], sizeof bits);
        all[me * n + i] = static_cast<double>(bits);
      }
      TP_RETURN_IF_ERROR(
          allreduce_sum(*view, all, timeout_s)
              .with_context(fmt::format("comparing model stage {}'s copies", g.model_stage)));
      for (size_t j = 1; j < members; ++j) {
        for (size_t i = 0; i < n; ++i) {
          if (all[j * n + i] == all[i]) continue;
          const size_t index = at + i;
          std::string tensor = "?";
          for (const nn::ParamTensor& t : stage.tensors())
            if (index >= t.offset && index < t.offset + t.size) tensor = t.name;
          auto value = [&](size_t slot) {
            const uint32_t bits = static_cast<uint32_t>(all[slot * n + i]);
            float f = 0;
            std::memcpy(&f, &bits, sizeof f);
            return f;
          };
          return Status::internal(fmt::format(
              "model stage {}: the copies on ranks {} and {} differ at parameter {} ({}): {} vs "
              "{}; the copies must step identically (their gradients are summed before the "
              "optimizer)",
              g.model_stage, g.ranks[0], g.ranks[j], index, tensor, value(0), value(j)));
        }
      }
    }
  }
  return OkStatus();
}

namespace train_internal {

namespace {

// Ranks of this run on this host: every rank for threads; for MPI the launcher's local count.
int32_t ranks_on_host(const TrainOptions& o) {
  if (o.world.kind == TransportKind::kThreads) return o.world.world_size;
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MPICH_LOCALNRANKS"}) {
    if (const char* v = std::getenv(var)) {
      auto n = parse_int(v);
      if (n.ok() && *n >= 1) return static_cast<int32_t>(std::min<int64_t>(*n, o.world.world_size));
    }
  }
  return 1;
}

CpuLoad cpu_load(const TrainOptions& o, const Schedule& lowered) {
  CpuLoad c;
  const UsableCores cores = usable_cores();
  const int32_t host = ranks_on_host(o);
  // Threads: this process's cores. MPI: every local rank's (each bound to its own by mpirun, or
  // all sharing the same).
  c.cores = o.world.kind == TransportKind::kThreads ? cores.count() : cores.of_host(host);
  if (o.exec.emulated) return c;  // emulated ranks sleep instead of computing
  c.rank_threads = host;
  // The ranks of the first and the last stage each run a loader with num_workers threads.
  // Every replica has its own.
  const int32_t readers =
      static_cast<int32_t>(data_ranks(lowered).size()) * (o.world.world_size / o.pp);
  const int32_t local_data_ranks = host == o.world.world_size ? readers : std::min(readers, host);
  c.loader_threads = local_data_ranks * std::max(0, o.data.num_workers);
  return c;
}

}  // namespace

namespace {

// A text file is read as bytes, so a run with another tokenizer on one is refused before any
// work (its model would silently train on byte ids). Indexed datasets and shards' .tokens hold
// any tokenizer's ids: the loader checks each id against the model's vocabulary as it reads.
Status check_tokenizer_fits_data(const TrainOptions& opt) {
  const bool indexed = !opt.data.blend.empty() || is_indexed_dataset(opt.data.path);
  const bool bytes = opt.tokenizer.type == TokenizerType::kByte;
  if (indexed || bytes) return OkStatus();
  auto files = expand_data_path(opt.data.path);
  if (!files.ok()) return OkStatus();  // the loader names what is missing
  for (const std::string& f : *files) {
    // A file of an indexed dataset: the loader says to pass its prefix.
    if (is_shard_path(f) || f.ends_with(".bin") || f.ends_with(".idx")) continue;
    return Status::invalid_argument(fmt::format(
        "--tokenizer-type {} with --data-path '{}': the text file '{}' is read as bytes; hint: "
        "tokenize it first (tightpipe data preprocess --tokenizer-type {} ...) and pass the "
        "PREFIX it writes, or drop --tokenizer-type",
        tokenizer_type_name(opt.tokenizer.type), printable(opt.data.path, 200), printable(f, 200),
        tokenizer_type_name(opt.tokenizer.type)));
  }
  return OkStatus();
}

}  // namespace

CostModel with_state_bytes(const CostModel& measured, const RunPlan& plan) {
  if (plan.opt.exec.emulated) return measured;  // no model is allocated
  const CostModel analytic = expand_to_directions(
      cost_model_for_layout(analytic_layer_costs(plan.opt.model), stage_layers(plan.specs), ""),
      plan.lowered);
  std::vector<StageCost> stages;
  for (int32_t s = 0; s < measured.num_stages(); ++s) {
    StageCost c = measured.stage(s);
    if (s < analytic.num_stages()) {
      const StageCost& a = analytic.stage(s);
      c.param_bytes = a.param_bytes;
      c.grad_bytes = a.grad_bytes;
      c.optimizer_bytes = a.optimizer_bytes;
    }
    stages.push_back(c);
  }
  return CostModel(std::move(stages), measured.link(), measured.time_unit(), measured.source(),
                   measured.real_bytes());
}

Result<MemoryEstimate> estimate_memory(const RunPlan& plan) {
  const TrainOptions& o = plan.opt;
  const nn::GptConfig& m = o.model;
  // Doubles throughout: the sizes of a refused model may not fit any integer type.
  const double B = m.micro_batch_size, T = m.seq_length, C = m.hidden_size, V = m.vocab_size;
  LayerCosts layers = analytic_layer_costs(m);
  layers.head.act_bytes += B * T * V * 4;  // the softmax the loss stage keeps until its backward
  // bf16: the stash holds bf16 activations (the analytic costs count them at 2 bytes) and a
  // recomputing stage keeps its input in bf16.
  const bool bf16 = m.precision == nn::Precision::kBf16;
  const double act_elem = bf16 ? 2 : 4;
  const Schedule& sched = plan.lowered;
  // Per stage id: DualPipe's copies cost what their model stage does, each with its own weights.
  const CostModel costs =
      expand_to_directions(cost_model_for_layout(layers, stage_layers(plan.specs), ""), sched);
  const int32_t S = sched.num_stages;
  std::vector<MemoryEstimate> ranks(sched.num_ranks);
  // The activation stash follows each rank's program order (the simulator's memory model: F adds
  // a microbatch's activation, I keeps the part W needs, W or B frees it; full recompute keeps
  // only the stage input and re-materializes one activation at a time). Program order alone
  // fixes the peak, so zb_peak_memory_units() walks the programs in O(actions), no simulation.
  const bool recompute = o.recompute.enabled();
  std::vector<double> held(S), kept_after_i(S), units(S), rank_held(sched.num_ranks, 0),
      rematerialized(sched.num_ranks, 0);
  for (int32_t s = 0; s < S; ++s) {
    const StageCost& c = costs.stage(s);
    const int32_t r = sched.rank_of(s);
    held[s] = recompute ? B * T * C * act_elem : c.act_bytes;
    kept_after_i[s] = recompute || c.act_bytes <= 0 ? 0 : c.act_after_i_bytes / c.act_bytes;
    rank_held[r] += held[s];
    if (recompute) rematerialized[r] = std::max(rematerialized[r], c.act_bytes);
    MemoryEstimate& e = ranks[r];
    e.weights += c.param_bytes;
    e.gradients += c.grad_bytes;
    e.adamw += c.optimizer_bytes;
    if (o.optimizer_post_validation)
      e.kept_copy += c.param_bytes + c.grad_bytes + c.optimizer_bytes;
    e.buffers += (T * T + B * T * C) * 4;  // a stage's attention and layer scratch
    if (bf16) {  // the FP32 transients of the bf16 path and the bf16 attention's work space
      const double NC = B * T * C, att = B * m.num_heads * T * T;
      e.buffers += 4 * (11 * NC + att + 3 * NC) + 2 * (att + NC);
    }
  }
  for (int32_t s = 0; s < S; ++s) {
    const double whole = rank_held[sched.rank_of(s)];
    units[s] = whole > 0 ? held[s] / whole : 0;
  }
  const std::vector<double> peak = zb_peak_memory_units(sched, kept_after_i, units);
  for (int32_t r = 0; r < sched.num_ranks; ++r)
    ranks[r].activations = peak[r] * rank_held[r] + rematerialized[r];
  // Each data rank keeps the batches (tokens and targets) of a step or of an evaluation, and its
  // loader's queues.
  const double batch = B * T * 2 * 4, samples = double(o.data.num_workers) * o.data.prefetch * B;
  const double batches = double(std::max<int64_t>(o.microbatches, o.eval_iters));
  for (int32_t r : data_ranks(sched)) ranks[r].buffers += batches * batch + samples * (T + 1) * 4;
  MemoryEstimate total;
  // What each rank costs beyond tensors: its thread, the helpers its options start (the
  // overlapped gradient reducer, the send progress thread), the loader workers of a data rank
  // (training and validation), and one OpenBLAS buffer per BLAS thread.
  const bool threads = o.world.kind == TransportKind::kThreads;
  const int32_t dp = o.world.world_size / o.pp;
  const int64_t helpers = 1 + (dp > 1 && o.grad_reduce.overlap ? 1 : 0) +
                          (o.exec.overlap_p2p && o.exec.progress_thread ? 1 : 0);
  const int64_t data = static_cast<int64_t>(data_ranks(sched).size());
  const int64_t loaders = 2 * int64_t{std::max(0, o.data.num_workers)};
  if (threads) {
    total.threads = dp * (int64_t{sched.num_ranks} * helpers + data * loaders);
    total.blas_buffers = int64_t{dp} * sched.num_ranks * o.blas_threads;
  } else {
    total.threads = helpers + loaders + (o.blas_threads - 1);
    total.blas_buffers = o.blas_threads;
  }
  pthread_attr_t attr;
  size_t stack = 8 << 20;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &stack);
    pthread_attr_destroy(&attr);
  }
  total.stack_bytes = static_cast<double>(stack);
  total.arenas = std::min<int64_t>(total.threads, 8 * int64_t{usable_cores().online});
  auto add = [&](const MemoryEstimate& r, double times) {
    total.weights += times * r.weights;
    total.gradients += times * r.gradients;
    total.adamw += times * r.adamw;
    total.activations += times * r.activations;
    total.buffers += times * r.buffers;
    total.kept_copy += times * r.kept_copy;
  };
  if (o.world.kind == TransportKind::kThreads) {
    const int replicas = o.world.world_size / o.pp;          // data-parallel replicas
    for (const MemoryEstimate& r : ranks) add(r, replicas);  // every replica
  } else {  // one rank per process: the largest, times the ranks sharing this host's memory
    const auto largest = std::max_element(
        ranks.begin(), ranks.end(),
        [](const MemoryEstimate& a, const MemoryEstimate& b) { return a.total() < b.total(); });
    add(*largest, ranks_on_host(o));
    total.process_tensors = largest->total();
  }
  if (threads) total.process_tensors = total.total();
  return total;
}

double MemoryEstimate::reserved() const {
  return static_cast<double>(blas_buffers) * kOpenBlasBufferBytes +
         static_cast<double>(threads) * stack_bytes +
         static_cast<double>(arenas) * kMallocArenaBytes;
}

Status check_memory(const RunPlan& plan, const AvailableMemory& available, double address_space) {
  if (plan.opt.exec.emulated) return OkStatus();
  TP_ASSIGN_OR_RETURN(const MemoryEstimate e, estimate_memory(plan));
  if (e.total() <= available.bytes) return check_address_space(plan, e, address_space);
  const TrainOptions& o = plan.opt;
  const nn::GptConfig& m = o.model;
  const bool threads = o.world.kind == TransportKind::kThreads;
  return Status::invalid_argument(fmt::format(
      "--num-layers {} --hidden-size {} --seq-length {} --micro-batch-size {} "
      "--num-attention-heads {} --num-microbatches {} --pp {}: the model needs {} in {} "
      "(weights {}, gradients {}, AdamW state {}, activations {}, batches and buffers {}{}) but {} "
      "is available ({}); hint: a smaller --hidden-size, --num-layers, --seq-length or "
      "--micro-batch-size, --recompute-granularity full, or --transport mpi over several machines",
      m.num_layers, m.hidden_size, m.seq_length, m.micro_batch_size, m.num_heads, o.microbatches,
      o.pp, human_bytes(e.total()), threads ? "this process" : "the ranks of this host",
      human_bytes(e.weights), human_bytes(e.gradients), human_bytes(e.adamw),
      human_bytes(e.activations), human_bytes(e.buffers),
      e.kept_copy > 0 ? fmt::format(", the post-validation copy {}", human_bytes(e.kept_copy))
                      : std::string(),
      human_bytes(available.bytes), available.source));
}

Status check_address_space(const RunPlan& plan, const MemoryEstimate& e, double address_space) {
  const double need = e.process_tensors + e.reserved();
  if (need <= address_space) return OkStatus();
  const TrainOptions& o = plan.opt;
  const bool threads = o.world.kind == TransportKind::kThreads;
  return Status::invalid_argument(fmt::format(
      "--pp {} --data-parallel-size {} ({} {}): this process needs {} of address space but the "
      "address-space limit (ulimit -v) leaves {}: its tensors take {} and it reserves {} more "
      "(OpenBLAS's buffer of {} for each of {} BLAS thread(s), which OpenBLAS retries forever "
      "when it cannot map; {} thread stack(s) of {}; {} malloc arena(s) of {}); hint: fewer "
      "replicas (--data-parallel-size) or ranks in one process, --transport mpi (one process "
      "per rank, each with its own limit), or a larger ulimit -v",
      o.pp, o.world.world_size / o.pp, o.world.world_size,
      threads ? "thread ranks in this process" : "MPI ranks, one per process", human_bytes(need),
      human_bytes(address_space), human_bytes(e.process_tensors), human_bytes(e.reserved()),
      human_bytes(kOpenBlasBufferBytes), e.blas_buffers, e.threads, human_bytes(e.stack_bytes),
      e.arenas, human_bytes(kMallocArenaBytes)));
}

std::string CpuLoad::warning() const {
  if (!oversubscribed()) return "";
  return fmt::format(
      "note: {} computing rank thread(s) (+ {} loader worker(s)) on {} core(s): the ranks take "
      "turns on the cores, so actions stretch and a rank whose message has arrived may wait for "
      "a core; that wait is reported as 'cpu wait', not as communication, and the bubble is the "
      "machine's, not the schedule's; hint: at most {} computing rank(s) here, MPI across "
      "machines, or --compute emulated",
      rank_threads, loader_threads, cores, cores);
}

// What the run starts with: the named or file schedule; for an auto name the schedule an earlier
// run built (the checkpoint's schedule.csv) or else the fixed counterpart to profile first.
Result<Schedule> initial_schedule(const TrainOptions& opt, AutoSwitch& as) {
  const GeneratorOptions shape{opt.pp, opt.microbatches, opt.vpp, opt.group_size};
  if (!is_auto_schedule_name(opt.schedule)) return schedule_from_name_or_file(opt.schedule, shape);
  as.target = auto_schedule_name(opt.schedule);
  as.counterpart = auto_schedule_counterpart(as.target);
  const int32_t chunks = auto_schedule_chunks(as.target);
  TP_RETURN_IF_ERROR(check_auto_schedule_vpp(opt.schedule, opt.vpp));
  const std::string saved = fmt::format("{}/{}", opt.load_dir, kAutoScheduleFile);
  std::error_code ec;
  if (!opt.load_dir.empty() &&
      std::filesystem::exists(std::filesystem::symlink_status(saved, ec))) {
    TP_ASSIGN_OR_RETURN(std::string text,
                        read_input_file("schedule file", saved, input_kind::kSchedule));
    auto s = parse_csv(text, saved);
    if (!s.ok()) {
      return s.status().with_context(
          fmt::format("--load {}: the {} schedule the checkpoint ran", opt.load_dir, as.target));
    }
    s->name = as.target;
    as.built = true;
    as.schedule = *s;
    return s;
  }
  return generate_schedule(as.counterpart,
                           {.ranks = opt.pp, .microbatches = opt.microbatches, .chunks = chunks});
}

std::vector<int32_t> data_ranks(const Schedule& schedule) {
  std::vector<int32_t> out;
  const int32_t per = schedule.stages_per_direction();
  for (int32_t d = 0; d < schedule.directions; ++d) {
    out.push_back(schedule.rank_of(d * per));
    out.push_back(schedule.rank_of(d * per + per - 1));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CalibrationOptions calibration_options(const RunPlan& plan) {
  CalibrationOptions co;
  if (plan.opt.world.link) {
    co.link.latency = plan.opt.world.link->latency_us * 1e-6;
    co.link.bandwidth = plan.opt.world.link->gbps > 0 ? plan.opt.world.link->gbps * 1e9 / 8 : 0;
  }
  return co;
}

SimOptions run_sim_options(const RunPlan& plan) {
  SimOptions so;
  so.comm_mode = plan.opt.exec.overlap_p2p ? CommMode::kOverlap : CommMode::kBlocking;
  return so;
}

void RunPlan::log(int32_t rank, const std::string& line) const {
  if (rank == 0 && opt.log) opt.log(line);
}

// The world and its DP x PP layout (Megatron-LM: data-parallel size = world / pipeline size).
// MPI: the world is the process count (every process computes the same errors).
Result<ParallelLayout> parallel_layout(const TrainOptions& opt) {
  const bool mpi = opt.world.kind == TransportKind::kMpi;
  if (opt.pp < 1) return ParallelLayout{};  // validate() names --pp
  const int64_t want =
      opt.world_size > 0 ? opt.world_size : int64_t{opt.pp} * std::max(1, opt.data_parallel_size);
  if (opt.world_size <= 0 && want > 4096) {  // WorldOptions' limit, before an int overflow
    return Status::invalid_argument(fmt::format(
        "--pp {} x --data-parallel-size {} = {} ranks: must be at most 4096; hint: fewer "
        "pipeline ranks or replicas",
        opt.pp, std::max(1, opt.data_parallel_size), want));
  }
  int32_t world = static_cast<int32_t>(want);
  std::string what = opt.world_size > 0 ? fmt::format("--world-size {}", world)
                                        : fmt::format("the world size {}", world);
  if (mpi && mpi_transport_available()) {
    // run_world reports a --world-size that differs from what mpirun started.
    TP_ASSIGN_OR_RETURN(std::shared_ptr<MpiScope> scope, MpiScope::acquire());
    if (opt.world_size <= 0) {
      world = scope->world_size();
      what = fmt::format("the MPI world size (mpirun -np) {}", world);
    }
  }
  if (world % opt.pp != 0) {
    return Status::invalid_argument(fmt::format(
        "{} is not divisible by --pp {}: every data-parallel replica needs all --pp pipeline "
        "ranks; hint: start --pp x --data-parallel-size ranks{}",
        what, opt.pp, mpi ? " (mpirun -np)" : " (--world-size, or --data-parallel-size alone)"));
  }
  const int32_t dp = world / opt.pp;
  if (opt.data_parallel_size > 0 && opt.data_parallel_size != dp) {
    return Status::invalid_argument(
        fmt::format("--data-parallel-size {} disagrees with {} / --pp {} = {}; hint: drop "
                    "--data-parallel-size (it is the world size / --pp) or start {} ranks",
                    opt.data_parallel_size, what, opt.pp, dp, opt.data_parallel_size * opt.pp));
  }
  return ParallelLayout{.dp = dp, .pp = opt.pp};
}

Result<RunPlan> make_plan(const TrainOptions& options) {
  RunPlan plan;
  TrainOptions& opt = plan.opt;
  opt = options;
  TP_ASSIGN_OR_RETURN(plan.layout, parallel_layout(opt));
  opt.world.world_size = plan.layout.world();
  TP_RETURN_IF_ERROR(opt.validate());
  opt.lr.total_iters = opt.train_iters;
  TP_RETURN_IF_ERROR(opt.lr.validate());
  if (!opt.load_dir.empty()) {  // once, before anything reads the checkpoint
    TP_ASSIGN_OR_RETURN(plan.load, nn::resolve_checkpoint(opt.load_dir));
    opt.load_dir = plan.load.dir;
  }
  auto sched = initial_schedule(opt, plan.auto_switch);
  if (!sched.ok()) return sched.status();
  if (sched->num_ranks != opt.pp || sched->num_microbatches != opt.microbatches) {
    return Status::invalid_argument(fmt::format(
        "--schedule {}: the file has {} ranks and {} microbatches but --pp is {} and "
        "--num-microbatches {}; hint: pass the file's shape",
        opt.schedule, sched->num_ranks, sched->num_microbatches, opt.pp, opt.microbatches));
  }
  if (sched->lowered) {  // a run's schedule.csv holds the SEND/RECV it ran
    plan.lowered = std::move(sched).value();
  } else {
    TP_ASSIGN_OR_RETURN(plan.lowered, lower(*sched));
  }
  TP_RETURN_IF_ERROR(check_executable(plan.lowered).with_context("--schedule " + opt.schedule));
  if (opt.optimizer_post_validation) {
    if (plan.lowered.directions > 1) {
      return Status::invalid_argument(fmt::format(
          "--enable-optimizer-post-validation with --schedule {}: its {} directions sum each model "
          "stage's gradient copies across ranks before the optimizer, a synchronisation the "
          "post-validated step cannot skip; hint: a one-direction schedule (zb-h2, zb-2p, "
          "zb-v), or leave the flag out",
          opt.schedule, plan.lowered.directions));
    }
    if (!plan.auto_switch.target.empty() && !plan.auto_switch.built) {
      return Status::invalid_argument(fmt::format(
          "--enable-optimizer-post-validation with --schedule {}: the run profiles and switches "
          "schedules at a step boundary, not yet supported with post-validated steps; hint: build "
          "it first (tightpipe schedule --schedule {} ... --format csv --out s.csv) and pass "
          "--schedule s.csv, or leave the flag out",
          opt.schedule, opt.schedule));
    }
  }
  // The layer split is one of the model stages: DualPipe's 2p stage ids hold p model stages.
  const int32_t model_stages = plan.lowered.stages_per_direction();
  if (plan.lowered.directions > 1 && opt.pipeline_layout == "auto") {
    return Status::invalid_argument(fmt::format(
        "--pipeline-layout auto: not yet for schedule '{}' ({} directions); hint: give a layout "
        "of its {} model stages, or leave --pipeline-layout out (balanced)",
        plan.lowered.name, plan.lowered.directions, model_stages));
  }
  TP_RETURN_IF_ERROR(resolve_auto_layout(plan));
  if (opt.megatron_split.any()) {  // Megatron-LM's uneven-split flags become a layout string
    if (!opt.pipeline_layout.empty()) {
      return Status::invalid_argument(
          fmt::format("--pipeline-layout '{}' with --decoder-first/last-pipeline-num-layers or "
                      "--account-for-*-in-pipeline-split: give one of them",
                      opt.pipeline_layout));
    }
    TP_ASSIGN_OR_RETURN(opt.pipeline_layout,
                        nn::megatron_layout(opt.model, model_stages, opt.megatron_split));
  }
  TP_ASSIGN_OR_RETURN(plan.specs,
                      nn::partition_layers(opt.model, model_stages, opt.pipeline_layout));
  // The global batch: every replica's microbatches (the loss and gradients are its mean).
  plan.tokens_per_step =
      int64_t(plan.layout.dp) * opt.microbatches * opt.model.tokens_per_microbatch();
  plan.data = opt.data;
  plan.data.micro_batch_size = opt.model.micro_batch_size;
  plan.data.seq_length = opt.model.seq_length;
  plan.data.vocab_size = opt.model.vocab_size;
  plan.data.seed = opt.seed;
  if (!opt.exec.emulated) {
    if (opt.data.path.empty() && opt.data.blend.empty()) {
      return Status::invalid_argument(
          "--data-path is required; hint: e.g. --data-path ../shared/data/tinyshakespeare.txt");
    }
    TP_RETURN_IF_ERROR(plan.data.validate().with_context("--data-path"));
    TP_RETURN_IF_ERROR(check_tokenizer_fits_data(opt));
  }
  if (!opt.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(opt.out_dir, ec);
    if (ec) return Status::io_error(fmt::format("--out-dir '{}': {}", opt.out_dir, ec.message()));
  }
  plan.cpu = cpu_load(opt, plan.lowered);
  // Before any rank allocates its stages: a model that cannot fit is refused here, not by
  // std::bad_alloc after gigabytes.
  TP_RETURN_IF_ERROR(check_memory(plan, available_memory(), address_space_left()));
  return plan;
}

Status LineWriter::open(const std::string& path, bool append) {
  return out_.open(path, append ? OutputFile::Mode::kAppend : OutputFile::Mode::kLog)
      .with_context("--out-dir");
}

void LineWriter::write(const std::string& line) {
  if (out_.is_open()) (void)out_.write(line + '\n');
}

Status LineWriter::status() {
  Status s = out_.is_open() ? out_.commit() : out_.status();
  return s.ok() ? s : s.with_context("--out-dir");
}

}  // namespace train_internal

Result<TrainSummary> run_training(const TrainOptions& options) {
  // The plan and the summary live as long as the last rank thread: a rank the watchdog gave up
  // on (WorldOptions::stall_timeout_s) keeps running, detached, and must not outlive them.
  struct Shared {
    RunPlan plan;
    std::mutex mu;
    TrainSummary summary;  // rank 0's, guarded by mu
  };
  auto shared = std::make_shared<Shared>();
  TP_ASSIGN_OR_RETURN(shared->plan, train_internal::make_plan(options));
  if (!shared->plan.opt.exec.emulated) {
    // Kernels the CPU cannot run (a forced OPENBLAS_CORETYPE) stop the run before any matmul.
    TP_RETURN_IF_ERROR(nn::check_blas_core());
    // The probe runs before any rank computes (one thread, then the run's thread count).
    RunPlan& p = shared->plan;
    const bool bf16 = p.opt.model.precision == nn::Precision::kBf16;
    nn::set_blas_threads(1);
    p.matmul_flops = nn::measured_matmul_flops(bf16) * std::max(1, p.opt.blas_threads);
    p.kernel_line = nn::kernel_header(bf16);
    p.flops = train_internal::step_flops_per_rank(p);
  }
  const RunPlan& plan = shared->plan;
  nn::set_blas_threads(plan.opt.blas_threads);
  auto body = [shared](Transport& world) -> Status {
    report_progress(-1, "setting up (its groups and stages)");
    // This rank's pipeline (its replica) and its data-parallel group (its stages' replicas).
    // make_group is collective (MPI_Comm_split on MPI): every rank asks for its pipeline, then
    // every rank for its data-parallel group, each call's groups partitioning the world.
    const ParallelLayout& l = shared->plan.layout;
    const int g = world.rank();
    TP_ASSIGN_OR_RETURN(const std::unique_ptr<Transport> pipeline,
                        world.make_group(l.pipeline_group(l.dp_rank(g))));
    TP_ASSIGN_OR_RETURN(const std::unique_ptr<Transport> data_parallel,
                        world.make_group(l.data_parallel_group(l.pp_rank(g))));
    train_internal::RankRun run(shared->plan, *pipeline, *data_parallel);
    TP_ASSIGN_OR_RETURN(std::optional<TrainSummary> s, run.run());
    if (s) {  // rank 0 only: one writer
      std::lock_guard<std::mutex> lock(shared->mu);
      shared->summary = std::move(*s);
    }
    return OkStatus();
  };
  WorldOptions world = plan.opt.world;
  // The watchdog: a rank silent for longer than any wait of a step may block (the data-parallel
  // sums wait 2 x the time-out) is stuck, whatever it is stuck in.
  if (world.stall_timeout_s <= 0) world.stall_timeout_s = 2 * plan.opt.exec.timeout_s + 1;
  TP_ASSIGN_OR_RETURN(std::vector<RankStatus> statuses, run_world(world, body));
  // A stuck rank is the cause; then the first real failure (not the Unavailable echoes of other
  // ranks' aborts).
  for (const auto& rs : statuses)
    if (rs.stuck) return rs.status;
  for (const auto& rs : statuses)
    if (!rs.status.ok() && rs.status.code() != StatusCode::kUnavailable) return rs.status;
  for (const auto& rs : statuses)
    if (!rs.status.ok()) return rs.status;
  std::lock_guard<std::mutex> lock(shared->mu);
  return shared->summary;
}

}  // namespace tightpipe
