// Pipeline training on real ranks: one rank's model stages, its Executor, and the step that ties
// them together (run the lowered program, reduce loss and the global gradient norm across ranks,
// clip, AdamW); and `run_training`, the whole `tightpipe train` loop (data, metrics, progress,
// evaluation, checkpoints, timelines, the measured-vs-predicted summary) on threads or MPI.
//
// Thread safety: a PipelineRank belongs to one rank's thread. run_training starts the ranks itself.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/data.h"
#include "tightpipe/executor.h"
#include "tightpipe/model.h"
#include "tightpipe/optimizer.h"
#include "tightpipe/schedule.h"
#include "tightpipe/tokenizer.h"
#include "tightpipe/transport.h"

namespace tightpipe {

// One rank of a pipeline: the model stages it owns (none when emulated) and its executor.
class PipelineRank {
 public:
  // REQUIRES: lowered.lowered; specs.size() == lowered.num_stages.
  PipelineRank(const Schedule& lowered, int32_t rank, Transport& transport,
               const nn::GptConfig& config, const std::vector<nn::StageSpec>& specs, uint64_t seed,
               const nn::RecomputeOptions& recompute, ExecutorOptions options);

  int32_t rank() const { return rank_; }
  // Local stage id -> model stage (ascending stage ids).
  std::map<int32_t, nn::GptStage*> stages();
  // Local stage id -> its gradient arena, what the data-parallel all-reduce sums. Emulated
  // compute has no model: a zero buffer of the size the stage's parameters would have
  // (stage_param_count), so the all-reduce moves the bytes a real run would.
  std::map<int32_t, std::span<float>> grads();
  Executor& executor() { return *executor_; }
  int32_t num_stages() const { return num_stages_; }  // of the whole pipeline
  // Runs `lowered` from the next step on, with the same model stages (an auto schedule's switch).
  // `lowered` must outlive the rank. REQUIRES: lowered.lowered, the same stages on this rank.
  void set_schedule(const Schedule& lowered);

 private:
  int32_t rank_;
  int32_t num_stages_ = 0;
  Transport& transport_;
  ExecutorOptions options_;
  nn::GptConfig config_;
  std::vector<nn::StageSpec> specs_;
  std::vector<int32_t> executor_stages_;  // the stages this rank runs
  std::vector<std::unique_ptr<nn::GptStage>> owned_;
  std::map<int32_t, nn::GptStage*> stages_;
  std::map<int32_t, std::vector<float>> emulated_grads_;  // emulated compute: see grads()
  std::unique_ptr<Executor> executor_;
};

// The parameter count of a GPT stage (GptStage::num_params() without building it).
int64_t stage_param_count(const nn::GptConfig& config, const nn::StageSpec& spec);

// How pipeline_step sums gradients over the data-parallel group (Megatron's DDP options).
struct GradReduceOptions {
  // --overlap-grad-reduce: start a stage's reduction as soon as its last W (or B) of the step is
  // done, on a helper thread, while the program goes on; off: one reduction after the program.
  bool overlap = false;
  int64_t bucket_size = int64_t{1} << 20;  // --bucket-size: gradient values per allreduce
};

struct StepOutcome {
  double loss = 0;       // mean over all tokens of all microbatches (same on every rank)
  double grad_norm = 0;  // global L2 norm before clipping (same on every rank)
  RankStepResult rank;   // this rank's timeline and stash peak
  double optimizer_start = 0, optimizer_end = 0;  // seconds from the step origin
};

// The program part of pipeline_step (what every step does before its optimizer): the barrier
// (with_barrier; else the timeline's origin is this rank's own start), the program, the
// data-parallel gradient and loss reductions. loss and grad_sq are this rank's shares (summed
// over the data-parallel group).
struct StepProgram {
  double origin = 0;   // now_seconds() the timeline counts from
  double loss = 0;     // this rank's share of the step's loss (0 off the last stage)
  double grad_sq = 0;  // sum of squares of this rank's stages' gradients
  RankStepResult rank;
};
Result<StepProgram> run_step_program(PipelineRank& rank, Transport& transport, int32_t step,
                                     const BatchFetcher& fetch, int64_t tokens_per_step,
                                     double timeout_s, Transport* data_parallel,
                                     const GradReduceOptions& reduce, bool with_barrier);
// The error of a non-finite step (--check-for-nan-in-loss-and-grad), from every rank's flags
// summed: per stage 1 where its gradients were not finite, then 1 + the first microbatch whose
// loss was not.
Status nonfinite_step_error(int32_t step, double loss, double grad_sq,
                            const std::vector<double>& flags, float lr);

// One optimizer step: barrier, run the program, allreduce [loss, squared norm], clip, AdamW on
// every local stage, zero the gradients. Every rank must call it the same number of times.
// With `check_nan` (Megatron's --check-for-nan-in-loss-and-grad) a non-finite loss or gradient
// norm stops every rank before the optimizer step with one error (the same on every rank) that
// names the step, the stage(s) whose gradients are not finite and the first microbatch whose
// loss was not: the weights stay those of the last good step.
//
// Data parallel: `data_parallel` (null or size 1: none) is this rank's group across the replicas
// (the ranks holding the same stages). After the program the gradients of every local stage and
// the loss are summed over it (deterministically, in replica order), before the norm, clipping
// and AdamW; `tokens_per_step` is then the global batch's, so that every replica steps with the
// gradients one rank would compute for the whole global batch.
Result<StepOutcome> pipeline_step(PipelineRank& rank, Transport& transport, int32_t step,
                                  const BatchFetcher& fetch, int64_t tokens_per_step,
                                  const nn::AdamWConfig& adamw, float lr, float clip,
                                  double timeout_s, bool check_nan = true,
                                  Transport* data_parallel = nullptr,
                                  const GradReduceOptions& reduce = {});

// ----- DualPipe's copies (Schedule::directions > 1) -------------------------------------------
//
// With more than one direction every model stage exists once per direction, on distinct ranks
// (DualPipe: model stage k is stage id k on rank k and stage id p+k on rank p-1-k). The copies
// start identical (the same spec and seed give the same weights), sum their gradients before the
// optimizer and so step identically. With one direction all three are no-ops.

// The spec of every stage id: model_specs[schedule.model_stage(s)]. What PipelineRank takes.
// REQUIRES: model_specs.size() == schedule.stages_per_direction().
std::vector<nn::StageSpec> stage_specs(const Schedule& schedule,
                                       const std::vector<nn::StageSpec>& model_specs);

// Sums the gradients of every model stage's copies over the ranks holding them (a group view of
// `pipeline` per model stage, in ascending model stage order on every rank; the sum of two floats
// through doubles is their float sum, so both copies get the same bits). Returns the squared
// gradient norm of this rank with each model stage counted once (its direction-0 copy), or
// `grad_sq` unchanged with one direction or no stages (emulated). Every rank of the pipeline
// calls it once per step, after any data-parallel reduction and before the norm's allreduce.
Result<double> sum_stage_copies(PipelineRank& rank, Transport& pipeline, double grad_sq,
                                int32_t step, double timeout_s);
// Whether sum_stage_copies sums anything on `rank`: two directions and real stages (the one
// statement of its guard; the step's COPY_SUM event is recorded exactly then).
bool sums_stage_copies(PipelineRank& rank);

// OK when every model stage's copies hold the same weights (bit for bit; a NaN equals a NaN);
// else Internal naming the model stage, the ranks, the tensor and the first index that differs.
// A collective over `pipeline` like sum_stage_copies. Debug builds call it after every step
// (RankRun); the equivalence tests call it directly.
Status check_stage_copies(PipelineRank& rank, Transport& pipeline, double timeout_s);

// Limits of the training counts (docs/train_limits.md), refused by TrainOptions::validate() with
// one line naming the flag; the model's are in model.h (kMaxNumLayers...), the schedule's in
// schedule.h (kMaxMicrobatches also bounds --num-microbatches and --eval-iters).
inline constexpr int64_t kMaxTrainIters = int64_t{1} << 40;  // --train-iters and every interval
inline constexpr int32_t kMaxBlasThreads = 1024;             // --blas-threads
inline constexpr int32_t kMaxDataWorkers = 256;              // --num-workers
inline constexpr int32_t kMaxPrefetch = 65536;               // --prefetch

struct TrainOptions {
  nn::GptConfig model;          // --num-layers, --hidden-size, ...
  std::string pipeline_layout;  // --pipeline-layout ("" = balanced; "auto": simulated best)
  // --layout-costs-from: a run's measured costs per layer kind that "auto" chooses the split
  // with; unset: the analytic costs of `model` (gpt_layer_costs).
  std::optional<LayerCosts> layout_costs;
  nn::MegatronSplit megatron_split;  // --decoder-first/last-pipeline-num-layers, --account-for-*
  nn::RecomputeOptions recompute;    // --recompute-*
  std::string schedule = "1f1b";     // --schedule: a name or a CSV/JSON file
  // --schedule zb-auto, zb-1p, zb-2p or zb-v-auto: the run profiles its first
  // auto_schedule_profile_steps steps on the fixed counterpart (zb-h1, zb-v), builds the schedule
  // from the measured costs under these options on rank 0, hands it to every rank and switches.
  // A run resumed from a checkpoint that holds the built schedule (schedule.csv) keeps it.
  ZbAutoOptions auto_schedule;              // --memory-limit, --w-memory-fraction, --objective
  int32_t auto_schedule_profile_steps = 3;  // --auto-schedule-profile-steps
  int32_t pp = 1;                           // --pp
  // Data parallel x pipeline parallel (docs/data_parallel.md): world = data_parallel_size x pp
  // ranks in Megatron-LM's order (transport.h ParallelLayout), each replica of the pipeline
  // taking its own slice of every global batch of data_parallel_size x microbatches
  // microbatches. The world is the MPI process count with --transport mpi, and on threads
  // --world-size, else pp x data_parallel_size.
  int32_t data_parallel_size = 0;  // --data-parallel-size (0: world / --pp)
  int32_t world_size = 0;          // --world-size, threads (0: --pp x --data-parallel-size)
  // --allow-other-data-parallel-size: --load a checkpoint saved at another data-parallel size
  // (weights and optimizer state are the same on every replica; the data continues at the
  // checkpoint's position in the global sample stream). Off: such a load is refused.
  bool allow_other_data_parallel_size = false;
  GradReduceOptions grad_reduce;  // --overlap-grad-reduce, --bucket-size
  int32_t vpp = 0;                // --vpp (0: the schedule's default)
  int32_t microbatches = 1;       // --num-microbatches
  int32_t group_size = 0;         // --microbatch-group-size
  int64_t train_iters = 100;      // --train-iters
  nn::LrSchedule lr;              // --lr, --min-lr, --lr-warmup-iters
  nn::AdamWConfig adamw;          // --weight-decay ...
  float clip_grad = 1.0f;         // --clip-grad (0: off)
  bool check_for_nan = true;      // --check-for-nan-in-loss-and-grad (pipeline_step)
  // --enable-optimizer-post-validation (the zero-bubble runtime's flag; docs/post_validation.md):
  // each rank steps right after its own program from its own gradients, unclipped, keeping a
  // copy of what the step changes, and starts the next step without waiting for the others; the
  // global loss, norm and inf/NaN state travels to every rank meanwhile and is checked at the end
  // of the next step's program. A step that needed clipping (or was not finite) is undone from the
  // copy and redone as the synchronous step does it, and the next step's program replayed.
  bool optimizer_post_validation = false;
  // --post-validation-stable-steps: a step is post-validated only after this many steps in a row
  // needed no clipping (the zero-bubble runtime waits for 10): while the norm is over --clip-grad
  // every optimistic step would be undone and its next program replayed, twice the work, so those
  // steps run synchronously. With --clip-grad 0 only a non-finite step can be undone: every step
  // is post-validated. Every rank counts the same global norms, so every rank decides alike.
  int32_t post_validation_stable_steps = 10;
  // Called with (step, stage, the kept weights) each time a post-validated step keeps its copy:
  // for tests that damage the copy (a rollback from it must then fail). Empty: nothing.
  std::function<void(int32_t, int32_t, std::span<float>)> on_kept_copy;
  uint64_t seed = 1234;  // --seed: model init and data order
  DataOptions data;      // --data-path, --num-workers, ... (B, T from model)
  // --tokenizer-type, --vocab-file, --merge-file, --tokenizer-model: the tokenizer of the data
  // (model.vocab_size is its vocabulary padded by --make-vocab-size-divisible-by, set by the
  // CLI); written into every checkpoint (tokenizer.json) for `tightpipe sample`.
  TokenizerOptions tokenizer;
  int64_t eval_interval = 0;          // --eval-interval (0: only at the end when eval_iters > 0)
  int64_t eval_iters = 0;             // --eval-iters: validation microbatches per evaluation
  std::string out_dir;                // --out-dir: metrics.jsonl, summary.json, timelines
  std::string save_dir;               // --save: checkpoint at the end (and at the intervals)
  std::string load_dir;               // --load: resume from a checkpoint at its step (a --save
                                      // root: its newest complete one; or an iter_* directory)
  int64_t keep_last_checkpoints = 0;  // --keep-last-checkpoints: newest K kept (0: all)
  int64_t save_interval = 0;          // --save-interval: also checkpoint every N steps (0: off)
  int64_t exit_interval = 0;          // --exit-interval: stop (and save) at a multiple of N
  std::string trace_path;             // --trace: Chrome trace of the last step, or of
                                      // --profile-step-start..end
  // Megatron's --profile-step-start / --profile-step-end: the trace records steps [start, end)
  // (0-based, as Megatron counts iterations), one after another on one time axis; -1: not given
  // (the last step).
  int64_t profile_step_start = -1, profile_step_end = -1;
  int64_t warmup_steps_excluded = 1;  // steps left out of the measured medians
  WorldOptions world;                 // --transport, --emulate-link
  ExecutorOptions exec;               // --overlap-p2p-communication, --compute emulated
  double data_delay_ms = 0;  // --emulate-data-delay-ms: the loader sleeps this long per batch
  // Where the run's progress lines go (rank 0 only): the step lines, loaded/saved/exit lines, the
  // oversubscription warning and the summary. Empty: silent. The CLI prints them to stdout.
  std::function<void(const std::string& line)> log;
  int64_t log_interval = 1;  // --log-interval: a progress line every N steps (and the
                             // first, the last and every evaluated step)
  int32_t blas_threads = 1;  // --blas-threads: OpenBLAS threads of each rank
  Status validate() const;
};

struct TrainSummary {
  int64_t steps = 0;           // steps this run made
  int64_t measured_steps = 0;  // of which the medians are taken (prof.h measured_step_range)
  double final_loss = 0;
  double final_val_loss = -1;  // < 0: not evaluated
  // The bubble, measured and predicted, by the one definition (prof.h step_bubble): medians over
  // the measured steps; the prediction simulates the run's schedule with its calibrated costs.
  double measured_bubble_ratio = 0;
  double predicted_bubble_ratio = 0;
  // Data parallel: the simulator's exposed gradient all-reduce, in bubble points (SimResult).
  double predicted_exposed_allreduce_ratio = 0;
  std::string prediction_error;  // not empty: no prediction (why)
  double tokens_per_s = 0;       // median
  double step_time_s = 0;        // median wall time of a step
  double data_wait_s = 0;        // median over steps of the slowest rank's loader wait
  std::vector<double> measured_bubble_per_rank;
  std::vector<double> predicted_bubble_per_rank;
  std::vector<double> peak_stash_bytes_per_rank;      // measured
  std::vector<double> predicted_peak_bytes_per_rank;  // simulator memory model
  // An auto schedule (zb-auto...): the name it ran under after the switch ("" otherwise), the
  // fixed schedule it profiled, the steps profiled (0: built by an earlier run and resumed), and
  // the simulator's bubble of both with the profiled costs.
  std::string auto_schedule;
  std::string auto_profiled_with;
  int64_t auto_profile_steps = 0;
  double auto_predicted_before = 0, auto_predicted_after = 0;
  // --on-corrupt skip: the training data's shards or samples the loader skipped (DataStats of the
  // rank of stage 0), and the reasons of the first ones (shard, entry, byte offset, why).
  int64_t data_skipped = 0;
  std::vector<std::string> data_skipped_reasons;
  // FLOP/s per pipeline rank over the median step (Megatron-LM's model FLOPs: 6N + attention,
  // docs/cpu_kernels.md "FLOP/s"); hardware adds what a full recompute runs again. Utilisation:
  // hardware FLOP/s over the machine's measured matmul rate for one rank at the run's precision
  // (matmul_tflops). All empty / 0 with emulated compute.
  std::vector<double> model_tflops_per_rank;
  std::vector<double> hardware_tflops_per_rank;
  std::vector<double> utilisation_per_rank;
  double matmul_tflops = 0;
  std::string kernels;  // the BLAS core and matmul backends this run ran, and why
  // The host: more busy threads than cores means ranks take turns on the cores.
  int32_t cores = 0;
  int32_t busy_threads = 0;  // computing rank threads + loader workers of this host
  bool oversubscribed = false;
};

// The whole training run on the ranks this process hosts. On MPI every process calls it; rank 0
// prints and writes the summary. Invalid combinations stop every rank before any work starts.
Result<TrainSummary> run_training(const TrainOptions& options);

}  // namespace tightpipe
