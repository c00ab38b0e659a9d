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

// Emulated compute (each action sleeps: F 2 ms, B 4 ms per microbatch through a rank) of a
// 4 x 16 model with 2 heads, T = 8, B = 2, on `pp` ranks, 6 microbatches, 4 steps, a 2 s peer
// time-out: the failure tests' run, no data needed.
inline TrainOptions tiny_emulated_options(int32_t pp = 3, std::string schedule = "1f1b") {
  TrainOptions o;
  o.model.num_layers = 4;
  o.model.hidden_size = 16;
  o.model.num_heads = 2;
  o.model.seq_length = 8;
  o.model.micro_batch_size = 2;
  o.schedule = std::move(schedule);
  o.pp = pp;
  o.microbatches = 6;
  o.train_iters = 4;
  o.exec.emulated = true;
  o.exec.costs.f_ms = 2;
  o.exec.costs.b_ms = 4;
  o.exec.timeout_s = 2;
  return o;
}

}  // namespace tightpipe::testutil
