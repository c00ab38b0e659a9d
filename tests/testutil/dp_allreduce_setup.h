// The DP all-reduce experiment shared by dp_allreduce_test and bench/exec/dp_allreduce_bench:
// DP = 2 x PP = 2 on threads, interleaved p = 2, v = 2, m = 4 (each rank finishes one chunk's
// backwards before the other's, so an overlapped reduction has compute to hide under), 8 blocks
// of 64 (66k-150k gradient values per stage, 0.5-1.2 MB as doubles), emulated compute F 8 ms,
// B 16 ms per microbatch through a rank, on an emulated link.
#pragma once

#include <string>

#include "tightpipe/trainer.h"

namespace tightpipe::testutil {

inline TrainOptions dp_allreduce_options(const std::string& out, bool overlap, int32_t steps,
                                         const LinkOptions& link) {
  TrainOptions o;
  o.model.num_layers = 8;
  o.model.hidden_size = 64;
  o.model.num_heads = 2;
  o.model.seq_length = 16;
  o.model.micro_batch_size = 1;
  o.schedule = "interleaved";
  o.vpp = 2;
  o.pp = 2;
  o.data_parallel_size = 2;
  o.microbatches = 4;
  o.train_iters = steps;
  o.eval_iters = 0;
  o.exec.emulated = true;
  o.exec.costs = EmulatedCompute::parse("f=8,i=8,w=8,b=16").value();
  o.world.link = link;
  o.grad_reduce.overlap = overlap;
  o.out_dir = out;
  return o;
}

}  // namespace tightpipe::testutil
