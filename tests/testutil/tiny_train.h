#pragma once
// The tiny model the trainer, report and integration tests train: 4 layers x 32, 2 heads,
// T = 32, B = 4, 4 steps at lr 3e-3, no progress lines. Header-only: only tests that link
// tp_exec include it.
#include <cstdint>
#include <string>
#include <utility>

#include "tightpipe/trainer.h"

namespace tightpipe::testutil {

inline TrainOptions tiny_train_options(const std::string& out_dir, std::string schedule = "1f1b",
                                       int32_t pp = 2, int32_t microbatches = 4) {
  TrainOptions o;
  o.model.num_layers = 4;
  o.model.hidden_size = 32;
  o.model.num_heads = 2;
  o.model.seq_length = 32;
  o.model.micro_batch_size = 4;
  o.schedule = std::move(schedule);
  o.pp = pp;
  o.microbatches = microbatches;
  o.train_iters = 4;
  o.lr.lr = 3e-3f;
  o.out_dir = out_dir;
  return o;
}

}  // namespace tightpipe::testutil
