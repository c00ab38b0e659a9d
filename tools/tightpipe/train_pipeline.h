// The pipeline side of `tightpipe train`: flags for schedule, transport, P2P overlap, emulated
// compute and link, and the call into run_training (include/tightpipe/trainer.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "schedule_source.h"
#include "tightpipe/trainer.h"

namespace tightpipe::cli {

struct PipelineFlags {
  std::string schedule;                  // empty: 1f1b
  int32_t vpp = 0;                       // chunks per rank (0: the schedule's default)
  int64_t layers_per_virtual_stage = 0;  // --num-layers-per-virtual-pipeline-stage (0: not given)
  int32_t group_size = 0;                // interleaved microbatch group size
  std::string transport = "threads";
  std::string emulate_link;          // "latency_us=50,gbps=10"
  std::string compute = "real";      // real | emulated
  std::string cost = "f=1,i=1,w=1";  // emulated compute, ms per microbatch per whole rank
  bool no_overlap = false;           // --no-overlap-p2p-communication
  std::string trace;                 // Chrome trace of the last step (or of the profiled steps)
  int64_t profile_step_start = -1, profile_step_end = -1;  // Megatron's; -1: not given
  double timeout_s = 120;                                  // every wait on a peer
  int32_t num_workers = 1;                                 // data loader threads
  int32_t prefetch = 4;                                    // data loader prefetch
  std::string on_corrupt = "fail";                         // corrupt shards: fail | skip
  double data_delay_ms = 0;                                // injected loader delay per batch
  int64_t warmup_steps = 1;        // steps left out of the summary's medians
  ZbAutoFlags zb;                  // zb-auto...: --memory-limit, --w-memory-fraction, --objective
  int32_t auto_profile_steps = 3;  // zb-auto...: steps profiled on the fixed counterpart
};

void add_pipeline_flags(CLI::App& app, PipelineFlags& flags);
// Fills the pipeline fields of `options` from the flags and runs the training.
Status run_pipeline(TrainOptions options, const PipelineFlags& flags);

}  // namespace tightpipe::cli
