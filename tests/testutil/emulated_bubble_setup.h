// The emulated-bubble experiment shared by train_integration_test and
// bench/exec/emulated_accuracy_bench: p = 4, m = 8, thread ranks that sleep F = I = W = 8 ms
// (B = 16) per microbatch through a rank, a GPT of 8 blocks, every schedule with its bubble by
// REFERENCE.md §2 (dualpipev and dualpipe: docs/schedule_ir.md).
#pragma once

#include <string>

#include "tightpipe/trainer.h"
#include "tiny_train.h"

namespace tightpipe::testutil {

struct EmulatedBubbleCase {
  const char* schedule;
  int v;
  double reference;  // the bubble ratio at F = I = W
};

inline constexpr EmulatedBubbleCase kEmulatedBubbleCases[] = {
    {"gpipe", 1, 0.273},
    {"1f1b", 1, 0.273},
    {"interleaved", 2, 0.158},
    {"looped-bfs", 2, 0.158},
    {"zb-h1", 1, 0.111},
    {"zb-h2", 1, 0.111},
    {"zb-v", 2, 0.059},
    // Not in REFERENCE.md §2: simulate --schedule dualpipev --pp 4 --num-microbatches 8 (uniform
    // f=1,i=1,w=1, pairs at F + B): makespan 27, busy 24 per rank.
    {"dualpipev", 2, 0.111},
    // docs/schedule_ir.md, "DualPipeV and DualPipe": simulate --compare ... dualpipe --pp 4
    // --microbatches 8 --cost f=1,i=1,w=1: makespan 26, busy 24 per rank (a stage id is a whole
    // model stage, so it costs a whole rank's share).
    {"dualpipe", 2, 0.077}};

inline TrainOptions emulated_bubble_options(const std::string& out, const EmulatedBubbleCase& c,
                                            int32_t steps) {
  TrainOptions o = tiny_train_options(out);
  o.model.num_layers = 8;
  o.schedule = c.schedule;
  o.vpp = c.v;
  o.pp = 4;
  o.microbatches = 8;
  o.exec.emulated = true;
  o.exec.costs = EmulatedCompute::parse("f=8,i=8,w=8,b=16").value();
  o.eval_iters = 0;
  o.train_iters = steps;
  return o;
}

}  // namespace tightpipe::testutil
