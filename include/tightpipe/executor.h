// The executor: runs one rank's lowered program for one training step on real ranks, with one
// exhaustive switch over ActionType (no default; built with -Werror=switch), and records every
// action in the rank's Timeline under the action's text form ("2F0", "1RECV_B3"), the same names
// the simulator uses. What an action waits for is what dependencies() names and where its message
// comes from or goes to is message_route() (schedule.h): the executor restates neither.
//
// Ownership: the Executor borrows the schedule, the transport and the stages; it owns the
// activation and gradient buffers in flight (received or handed off locally between stages of the
// same rank) and the send buffers, each back on a free list of message buffers (reused across
// steps) as soon as it has been consumed or its send has completed. Gradients accumulate in the
// stages across microbatches; the optimizer step is the caller's (trainer.h), after the global
// gradient norm is reduced across ranks.
//
// Point-to-point: a RECV action never blocks; the compute action that consumes the message waits
// for it just before use (recorded as the RECV's event on the comm lane). With overlap_p2p, every
// receive of the step is posted when the step starts, and sends are posted and never waited on by
// compute (checked between actions, drained at the end of the step). Without it, a receive is
// posted at its RECV action and a SEND waits for completion right after posting (Megatron without
// --overlap-p2p-communication). Posting at the RECV positions that lower() chose keeps blocking
// sends hang-free.
//
// Emulated compute: with `emulated`, each compute action sleeps for its cost instead of doing the
// math (so timing can be studied with p = 8 on 2 cores); messages are still real bytes. The
// costs are a whole rank's share of the model; a stage id costs its share of them: 1/v for v
// chunks per rank, a whole share for DualPipe's stage ids (each a whole model stage: a rank
// holds two copies, and a microbatch passes through one of them).
//
// BF16 messages (`bf16_messages`, train --bf16): a message to another rank travels as bf16, half
// the bytes of FP32: the sender converts the stage's FP32 output (nn::float_to_bf16) into a wire
// buffer before the isend, the receiver posts a receive of that size and converts back once it
// completes, so stages still see float spans. Lossless because in bf16 mode every value a stage
// returns across a stage boundary is already exactly representable in bf16 (model.h); debug
// builds check it. Hand-offs between stages of one rank stay FP32 (no conversion: the same
// values). The timeline's SEND/RECV bytes are the bytes on the wire.
//
// Thread safety: one Executor per rank, used by that rank's thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "tightpipe/data.h"
#include "tightpipe/kernels_bf16.h"
#include "tightpipe/model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"
#include "tightpipe/timeline.h"
#include "tightpipe/transport.h"

namespace tightpipe {

struct EmulatedCompute {
  // Milliseconds per microbatch through a whole rank's layers; per chunk these divide by v.
  double f_ms = 1, i_ms = 1, w_ms = 1;
  double b_ms = -1;  // fused backward; < 0: i_ms + w_ms
  // Parses "f=1,i=1,w=1[,b=2]" (milliseconds). Errors name the key and value.
  static Result<EmulatedCompute> parse(std::string_view text);
};

struct ExecutorOptions {
  bool overlap_p2p = true;  // --overlap-p2p-communication
  double timeout_s =
      60;  // every wait on a peer; a dead or stalled peer ends the step with an error
  bool emulated = false;       // --compute emulated
  EmulatedCompute costs;       // used when emulated
  int64_t message_floats = 0;  // (B,T,C) floats per activation/gradient message
  bool bf16_messages = false;  // --bf16: messages between ranks as bf16 (see above)
  // With overlap_p2p: a helper thread tests posted sends while compute runs (every 200 us,
  // backing off to 1.6 ms while none completes), so that transports which move data only
  // inside their calls (MPI) keep messages moving.
  bool progress_thread = false;
};

// Microbatch data for a step: tokens and targets of microbatch mb, fetched when the first stage
// (tokens) or the last stage (targets) needs them. The callback may block; the executor records
// the wait on the data lane.
using BatchFetcher = std::function<Result<const Batch*>(int32_t mb)>;

struct RankStepResult {
  double loss = 0;        // sum over this rank's last-stage microbatches of the scaled loss
  bool has_loss = false;  // this rank owns the last stage
  int32_t first_nonfinite_loss_microbatch = -1;  // the first microbatch whose loss was NaN/Inf
  double grad_sq_norm = 0;      // sum of squares of the gradients of this rank's stages
  size_t peak_stash_bytes = 0;  // peak activation stash over the step, all local stages
  RankTimeline timeline;        // events of this step; times in seconds from `origin`
  // thread_cpu_wait_seconds() (base.h) when the last compute action ended (or the step began);
  // -1 where the kernel does not say. The optimizer's event measures its cpu wait from here.
  double cpu_wait_mark = -1;
};

// OK, or FailedPrecondition "not executed: ..." for a schedule the executor cannot run: one of
// more than one direction whose copies of a model stage do not sit on distinct ranks (the
// trainer sums each model stage's copies across ranks, sum_stage_copies in trainer.h). The
// trainer asks it before building ranks. OVERLAP_F_B pairs (DualPipeV, DualPipe) run: their F,
// then their B; DualPipe's two directions run, each direction's first stage reading its
// microbatches and its last stage computing their loss.
Status check_executable(const Schedule& schedule);

class Executor {
 public:
  // `stages` maps each local stage id to its model stage (empty when emulated).
  // REQUIRES: schedule.lowered, validate(schedule).ok(), transport.size() == schedule.num_ranks.
  Executor(const Schedule& schedule, int32_t rank, Transport& transport,
           std::map<int32_t, nn::GptStage*> stages, ExecutorOptions options);

  // Runs this rank's program once. `origin` (now_seconds() of a common start) anchors the
  // timeline. Errors carry "rank R step K action A:" and the grid of the schedule.
  // `grads_done` (optional) is called with a local stage id right after the stage's last
  // W (or B) of the program: its gradients are final for the step (--overlap-grad-reduce starts
  // their reduction there); it must not touch other stages.
  Result<RankStepResult> run_step(int32_t step, double origin, const BatchFetcher& fetch,
                                  float loss_scale,
                                  const std::function<void(int32_t stage)>& grads_done = {});

  // Evaluation: `n` microbatches forward only, one after another through the whole pipeline
  // (every rank walks its stages in ascending order per microbatch, with blocking messages), no
  // stash kept. Returns this rank's share of the scaled loss (non-zero on the last stage's rank).
  // With more than one direction only direction 0's stages evaluate (the copies in the other
  // directions hold the same weights).
  Result<double> run_forward_only(int32_t n, const BatchFetcher& fetch, float loss_scale);

  const Schedule& schedule() const { return schedule_; }

 private:
  class StepRun;  // the state of one run_step (executor.cc)
  const Schedule& schedule_;
  int32_t rank_;
  Transport& transport_;
  std::map<int32_t, nn::GptStage*> stages_;
  ExecutorOptions options_;
  // Free message buffers (message_floats each), reused most recent first across actions and
  // steps: between MPI processes on one machine the kernel copies each message, and copying
  // into pages it copied into recently is several times faster than into other pages.
  std::vector<std::vector<float>> free_buffers_;
  // The same for the bf16 wire buffers of bf16_messages (message_floats elements each).
  std::vector<std::vector<nn::Bf16>> free_wires_;
};

// Message tag of a training message (message_route(), schedule.h): one per (activation or
// gradient, destination stage, microbatch); evaluation messages use their own tag space.
int message_tag(const Schedule& schedule, const MessageRoute& message);

}  // namespace tightpipe
