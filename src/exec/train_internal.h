// The phases of run_training (trainer.h), each small enough to read on one screen:
//   make_plan      validate the options, build the schedule and the layer split (every process);
//   RankRun        one rank's run: open data, resume, the step loop, evaluate, checkpoint;
//   summarize_run  rank 0: calibrate the measured costs, predict, write summary.json, say it.
// Private to src/exec.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/data.h"
#include "tightpipe/model.h"
#include "tightpipe/output_file.h"
#include "tightpipe/prof.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/trainer.h"
#include "tightpipe/transport.h"

namespace tightpipe::train_internal {

// Sums the float arena `g` over `group` (every member calls it with an arena of the same size)
// through doubles, in buckets of `bucket` values all in flight together (the group's
// iallreduce_sum: MPI_Iallreduce on an MPI group, the deterministic p2p algorithm otherwise; a
// sum of two is exact either way), each waited for up to 2 x `timeout_s`. `what` names the sum
// in errors. The one bucketed gradient sum: the DP reduction and DualPipe's copies call it.
Status sum_over_group(std::span<float> g, Transport& group, int64_t bucket, double timeout_s,
                      const std::string& what);

// How many threads of this host want a core at once, against how many cores it has.
struct CpuLoad {
  int32_t cores = 1;           // CPUs this process may run on (sched_getaffinity)
  int32_t rank_threads = 0;    // ranks computing on this host (0 with emulated compute: they sleep)
  int32_t loader_threads = 0;  // data-loader workers of those ranks
  // More computing ranks than cores: they take turns, every action stretches.
  bool oversubscribed() const { return rank_threads > cores; }
  // The loader workers need a core too: their bursts can delay a rank (measured as cpu wait).
  bool shared_with_loaders() const { return rank_threads + loader_threads > cores; }
  // "4 rank threads + 2 loader workers on 2 cores: ..." (empty when not oversubscribed).
  std::string warning() const;
};

// Everything every rank shares, built and validated once before any rank starts.
// An auto schedule (--schedule zb-auto, zb-1p, zb-2p, zb-v-auto; trainer.h): what it profiles on,
// what it switched to and what the simulator predicted for both with the profiled costs.
struct AutoSwitch {
  std::string target;         // "zb-auto"...; empty: the run's schedule is not an auto one
  std::string counterpart;    // the fixed schedule profiled first ("zb-h1", "zb-v")
  bool built = false;         // the run now runs the built schedule (switched or resumed)
  Schedule schedule;          // when built: the compute-only schedule (what a save keeps)
  int64_t profile_steps = 0;  // steps of this run on the counterpart (0: resumed)
  double predicted_before = 0, predicted_after = 0;  // bubble ratios (prof.h step_bubble)
};

// One pipeline rank's FLOPs in one step (every microbatch of its stages), by the count of
// gpt_layer_costs: per token and layer 72h^2 + 12hT (the 6N + attention count Megatron-LM reports,
// forward + both backward halves), 6hV for the LM head. recompute: the forward FLOPs a full
// recompute runs again (hardware FLOPs = model + recompute).
struct RankFlops {
  double model = 0, recompute = 0;
};

struct RunPlan {
  TrainOptions opt;  // validated; lr.total_iters = train_iters
  Schedule lowered;  // the schedule every rank runs (now)
  AutoSwitch auto_switch;
  // The layer split, one per model stage (Schedule::model_stage): per stage id except for
  // DualPipe, whose two copies of a model stage share one (stage_specs() in trainer.h expands
  // it). What checkpoints record: a DualPipe checkpoint is that of its p model stages.
  std::vector<nn::StageSpec> specs;
  std::string layout_note;  // --pipeline-layout auto: what it chose and why ("" if not)
  // --load resolved (opt.load_dir is then load.dir): the checkpoint directory, its manifest and
  // the warnings about what was skipped; load.dir empty: no --load.
  nn::ResolvedCheckpoint load;
  DataOptions data;             // the loaders' options (B, T, vocabulary and seed set)
  ParallelLayout layout;        // DP x PP; opt.world.world_size = layout.world()
  int64_t tokens_per_step = 0;  // of the global batch (every replica's microbatches)
  CpuLoad cpu;
  // Each pipeline rank's FLOPs of a step, and one rank's matmul rate on this machine (the
  // single-thread probe of cpu_kernels.h times --blas-threads; 0 with emulated compute): the
  // TFLOP/s and utilisation of the step lines and summary.json.
  std::vector<RankFlops> flops;
  double matmul_flops = 0;
  // The BLAS core and matmul backends this process runs (cpu_kernels.h kernel_header).
  std::string kernel_line;
  // Logs on rank 0 only (no-op when the options carry no sink).
  void log(int32_t rank, const std::string& line) const;
  // Leading steps of this run left out of the medians: the profile steps of an auto schedule
  // and then --measure-warmup-steps.
  int64_t excluded_steps() const { return auto_switch.profile_steps + opt.warmup_steps_excluded; }
};

// The file in a checkpoint that holds the data-parallel size it was trained with (absent: 1): the
// data position is the global stream's, so a resume must split it the same way.
inline constexpr const char* kParallelFile = "parallel.json";
// The data-parallel size checkpoint directory `dir` was saved with: its kParallelFile's
// data_parallel_size, 1 when the file is absent. Errors: the file unreadable (read_input_file's),
// or damaged (Corruption naming it: no integer data_parallel_size, or one outside [1, 2^20]).
Result<int64_t> saved_data_parallel_size(const std::string& dir);

// The file in a checkpoint (and the out dir) that holds the schedule an auto run built.
inline constexpr const char* kAutoScheduleFile = "schedule.csv";

// The ranks that read data, ascending: those holding a direction's first stage (tokens) or its
// last (targets and the loss). One direction: the ranks of stage 0 and stage S-1; DualPipe:
// ranks 0 and p-1 (each holds one direction's first and the other's last stage).
std::vector<int32_t> data_ranks(const Schedule& schedule);

// How the measured samples are calibrated (the link when one is emulated).
CalibrationOptions calibration_options(const RunPlan& plan);
// How the run's schedules are simulated with those costs (its p2p overlap mode): the run's
// prediction and the auto schedule's before/after predictions.
SimOptions run_sim_options(const RunPlan& plan);

// Rank 0, at the switch: calibrates the profile steps' samples on the counterpart, builds the
// auto schedule from those costs and predicts the bubble of both. Returns the compute-only
// schedule and fills the plan's predictions.
Result<Schedule> build_auto_from_samples(RunPlan& plan, const CostSamples& samples,
                                         CostModel* costs_out);

Result<RunPlan> make_plan(const TrainOptions& options);

// --pipeline-layout auto: replaces plan.opt.pipeline_layout with the split choose_layer_split()
// (simulator.h) finds for plan.lowered under plan.opt.layout_costs, or the analytic costs of the
// model, and says so in plan.layout_note. Any other layout is left as it is. Errors: auto with
// the Megatron split flags, layout costs without auto, choose_layer_split's.
// REQUIRES: plan.lowered is set.
Status resolve_auto_layout(RunPlan& plan);

// The analytic per-layer-kind costs of the trained model (gpt_layer_costs with float32
// activations, parameters and AdamW moments, a free link): what --pipeline-layout auto chooses
// with when no run's costs are given, and what the memory check sizes the model with.
LayerCosts analytic_layer_costs(const nn::GptConfig& model);
// RankFlops per pipeline rank of the run's schedule (each data-parallel replica's the same).
std::vector<RankFlops> step_flops_per_rank(const RunPlan& plan);
// The split as the cost model describes it (embedding, blocks, head per stage).
std::vector<StageLayers> stage_layers(const std::vector<nn::StageSpec>& specs);

// `measured` (the run's calibrated times and activation bytes) with each stage's parameter,
// gradient and AdamW bytes from the analytic costs of the run's split: the static memory the
// simulator adds to a rank's peak (and the copy a post-validated step keeps). Unchanged with
// emulated compute, which allocates no model.
CostModel with_state_bytes(const CostModel& measured, const RunPlan& plan);

// What the ranks of this process hold at their peak, in bytes (docs/train_limits.md): the weights,
// gradients and AdamW moments of their stages, the activation stash of the microbatches in flight
// (the simulator's program-order memory model, zb_peak_memory_units, on the run's schedule with
// the analytic costs, plus the loss stage's softmax), the batches of a step or an evaluation and
// the loaders' prefetch queues, and each stage's scratch buffers. Threads: every rank; MPI: the
// largest rank times the ranks on this host.
struct MemoryEstimate {
  double weights = 0, gradients = 0, adamw = 0, activations = 0, buffers = 0;
  // --enable-optimizer-post-validation: the copy of weights, gradients and AdamW state each
  // stage keeps until its step is checked (PostValidation).
  double kept_copy = 0;
  double total() const { return weights + gradients + adamw + activations + buffers + kept_copy; }
  // Address space this process reserves beyond its tensors (counted against RLIMIT_AS only: it is
  // mapped, not resident): OpenBLAS's buffer per thread that calls BLAS (kOpenBlasBufferBytes;
  // with a failed allocation OpenBLAS 0.3.21 retries forever), each thread's stack and glibc's
  // malloc arena per thread (up to 8 per CPU).
  double process_tensors = 0;  // the tensors of this process's ranks (MPI: the largest rank)
  int64_t threads = 0, blas_buffers = 0, arenas = 0;
  double stack_bytes = 0;  // one thread's stack (pthread's default)
  double reserved() const;
};
// The buffer OpenBLAS maps for each thread that runs a BLAS call (BUFFER_SIZE of Debian's 0.3.21
// x86_64 build, 32 << 22, plus a page; measured: 48 threads calling sgemm map 48 x 128 MiB).
inline constexpr double kOpenBlasBufferBytes = double(128 << 20) + 4096;
// glibc's malloc: each thread's arena reserves HEAP_MAX_SIZE (64 MiB on 64-bit), up to 8 arenas
// per online CPU (M_ARENA_MAX's default).
inline constexpr double kMallocArenaBytes = double(64 << 20);
Result<MemoryEstimate> estimate_memory(const RunPlan& plan);
// InvalidArgument naming the flags that drive the estimate, the parts, and `available`, when the
// estimate does not fit; OK otherwise (and with emulated compute, which allocates no model).
// Then this process's tensors and what it reserves beyond them (MemoryEstimate::reserved) against
// `address_space` (address_space_left(), host.h): refused naming the parts and the counts.
Status check_memory(const RunPlan& plan, const AvailableMemory& available,
                    double address_space = HUGE_VAL);
Status check_address_space(const RunPlan& plan, const MemoryEstimate& e, double address_space);

// One step as every rank knows it after the step's exchange.
struct StepRecord {
  int64_t step = 0;  // 0-based
  double loss = 0, grad_norm = 0, lr = 0;
  double wall = 0, tokens_per_s = 0;
  StepBubble bubble;               // the one definition (prof.h)
  std::vector<double> data_wait;   // [P] seconds waiting for the loader
  std::vector<double> peak_stash;  // [P] peak activation stash bytes
  double val_loss = -1;            // < 0: not evaluated
};

// The run's end, computed on rank 0 from what every rank measured.
struct RunEnd {
  std::vector<StepRecord> records;  // every step of this run, in order
  CostSamples samples;              // every rank's samples of the measured steps
  Timeline last_step;               // every rank's events of the last step
  DataStats data;  // the training loader of rank 0 (what --on-corrupt skip skipped)
};

// summary.json lists at most this many skip reasons, then the count of the rest.
inline constexpr size_t kMaxListedSkips = 20;

// Calibrates, predicts, fills the summary, writes summary.json / costs.json / schedule.csv and
// the trace, and logs the summary lines.
Result<TrainSummary> summarize_run(const RunPlan& plan, const RunEnd& end);

// The lines the run prints at its end (rank 0), from the summary alone.
std::vector<std::string> summary_lines(const TrainSummary& s, const RunPlan& plan);

// One metrics.jsonl line.
std::string metrics_line(const StepRecord& rec);

// A per-step progress line.
std::string step_line(const RunPlan& plan, const StepRecord& rec, int64_t first_step,
                      double elapsed_s);

// Appends lines to a file read while it grows (OutputFile::Mode::kLog / kAppend): each line goes
// out whole; the first failure (the path and the system's reason) is kept and reported by status().
class LineWriter {
 public:
  Status open(const std::string& path, bool append);
  bool is_open() const { return out_.is_open(); }
  void write(const std::string& line);
  // The first failure; closes the file (checked) when called after the last line.
  Status status();

 private:
  OutputFile out_;
};

// This rank's flags of a step, before its gradients are zeroed: per stage (of the whole
// pipeline) 1 where its gradients are not finite, then 1 + the first microbatch whose loss was
// not (0: every loss finite). Summed over the ranks, nonfinite_step_error() names them.
std::vector<double> nonfinite_flags(PipelineRank& pr, const RankStepResult& r);
// One event of the step's own phases (not the program's actions) on r's timeline (start and end
// in seconds from the step origin); add_optimizer_event: the optimizer's.
void add_step_event(RankStepResult& r, std::string name, EventKind kind, Lane lane, int32_t step,
                    double start, double end, double cpu_wait);
void add_optimizer_event(RankStepResult& r, int32_t step, double start, double end,
                         double cpu_wait);

// --enable-optimizer-post-validation (TrainOptions; docs/post_validation.md). Per step: after
// its program, a rank keeps a copy of what the optimizer changes on its stages (weights, AdamW
// moments and step, gradients), steps unclipped, sends its state (loss share, gradient sum of
// squares, non-finite flags, the step's busy fields) to every rank of its pipeline and goes on.
// validate() waits for every rank's state of that step (by the end of the next program each
// has sent it: every rank's next program needs every other rank to have started its own) and
// decides it as the synchronous step would: no clipping and finite, the step stands; else the
// copy is restored and the step redone the synchronous way, or, non-finite with the check on,
// restored and the run's error returned. Every rank decides alike from the same sums.
class PostValidation {
 public:
  // `fields`: how many busy fields each rank sends beside its state.
  PostValidation(PipelineRank& pr, Transport& pipeline, const TrainOptions& opt, size_t fields);
  // Step `step` on this rank, unclipped, from `prog` (its program's outcome), with learning rate
  // lr; the copy is kept. The optimizer's event is added to prog.rank's timeline.
  void step(int32_t step, StepProgram& prog, float lr);
  // Sends this rank's state of the step just taken (`fields`: its busy fields, after the
  // optimizer's event) to every other rank of the pipeline.
  void post(const StepProgram& prog, std::span<const double> fields);
  bool pending() const { return pending_.has_value(); }
  struct Decided {
    int32_t step = 0;
    double loss = 0, grad_norm = 0;
    bool redone = false;         // the step needed clipping: restored and redone
    float scale = 1;             // the clip scale it was redone with
    std::vector<double> fields;  // [rank x fields] every rank's busy fields
  };
  // Waits for the pending step's states and decides it (see the class comment).
  Result<Decided> validate();

 private:
  struct Kept {
    std::vector<float> params, grads, m, v;
    int64_t adam_step = 0;
    uint64_t checksum = 0;  // kept_checksum() when it was kept: checked before a restore
  };
  static uint64_t kept_checksum(const Kept& k);
  struct Pending {
    int32_t step = 0;
    float lr = 0;
    std::vector<double> flags;              // this rank's nonfinite_flags() of the step
    std::vector<std::vector<double>> rows;  // [rank] its state (own: filled at post)
    std::vector<std::unique_ptr<Request>> requests;
  };
  PipelineRank& pr_;
  Transport& t_;
  const TrainOptions& opt_;
  const size_t fields_;
  std::map<int32_t, Kept> kept_;  // [local stage]
  std::optional<Pending> pending_;
};

// One rank's run: the phases in order (set-up and resume, steps, evaluation, checkpoints, the
// end-of-run exchange). Rank 0 also summarises.
class RankRun {
 public:
  // `transport` is this rank's pipeline (its replica's ranks), `data_parallel` its group across
  // the replicas (size 1 without data parallelism). Replica 0 alone logs, writes the out dir
  // and the checkpoints; every replica reads the global batch's stream and keeps its own slice.
  RankRun(const RunPlan& plan, Transport& transport, Transport& data_parallel);
  // The whole run of this rank; the summary on rank 0, nullopt on the others.
  Result<std::optional<TrainSummary>> run();

 private:
  Status open_data();
  Result<int64_t> resume();  // the step to start at (0 without --load)
  Status check_data_parallel(const std::string& dir) const;
  Status open_files(int64_t start);
  Result<StepRecord> step(int64_t step);
  // One step's batches of this replica, read as the program asks for them.
  struct StepBatches {
    std::vector<Batch> batches;
    int64_t skipped = 0;  // batches of the replicas before this one, read this step
  };
  BatchFetcher fetcher(StepBatches& batches);
  // After the step: the stream moves past the later replicas' slices of the global batch.
  Status skip_later_replicas(const StepBatches& batches);
  // The step's events into this rank's cost samples, timeline file and last_.
  void keep_events(RankTimeline timeline);
  // The log line of a post-validated step redone (replayed: the step replayed, or -1).
  std::string redone_line(const PostValidation::Decided& d, int64_t replayed) const;
  // --enable-optimizer-post-validation: step `step`'s program (a barrier on the run's first only),
  // the check of the step before it (redone and this program replayed where it needed
  // clipping), then this step's optimistic update. Returns the records the check completed.
  Result<std::vector<StepRecord>> step_post_validated(int64_t step);
  // Checks the step not checked yet (before an evaluation, a save, an exit or the end) and
  // returns its record.
  Result<StepRecord> flush_post_validation();
  // The record of a post-validated step from its check.
  StepRecord decided_record(const PostValidation::Decided& d);
  Result<double> evaluate();
  bool eval_due(int64_t step) const;
  Status save(int64_t done);
  Status save_parts(const std::string& dir, int64_t done);
  // A collective: fails on every rank when `mine` failed on any.
  Status agree(Status mine, std::string_view what);
  // Every rank's samples of steps [range) on rank 0 (with each rank's optimizer time); empty
  // elsewhere.
  Result<CostSamples> gather_samples(StepRange range);
  // An auto schedule: after the profile steps, build it on rank 0, hand it to every rank, switch.
  bool switch_due() const;
  Status switch_schedule();
  Result<RunEnd> gather_end();
  // --on-corrupt skip: one line per shard or sample the training loader skipped since the last
  // call (rank 0, which holds stage 0 and its loader).
  void report_skips();

  RunPlan plan_;  // this rank's copy: an auto schedule's switch changes its schedule
  const TrainOptions& opt_;
  Transport& t_;
  Transport& dp_;
  const int32_t rank_;
  const int32_t dp_rank_;
  const int32_t log_rank_;  // rank_ on replica 0, -1 (silent) on the others
  PipelineRank pr_;
  const bool needs_data_;
  std::unique_ptr<DataLoader> train_data_;
  LineWriter metrics_, timeline_;
  std::vector<CostSamples> samples_;  // [step of this run] this rank's F/I/W/B/SEND samples
  std::vector<StepRecord> records_;
  RankTimeline last_;                    // this rank's events of the last step
  int64_t skips_reported_ = 0;           // report_skips(): skips already logged
  std::optional<PostValidation> pv_;     // --enable-optimizer-post-validation
  std::optional<StepRecord> pv_record_;  // the step taken, not checked yet (step, lr, wall)
  // Steps in a row that needed no clipping (TrainOptions::post_validation_stable_steps): the
  // next step is post-validated once it reaches the option.
  int64_t pv_stable_ = 0;
  int64_t pv_first_step_ = -1;  // the run's first step: its program has the barrier
};

}  // namespace tightpipe::train_internal
