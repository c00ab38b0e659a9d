// The zero-bubble paper's Table 4 (REFERENCE.md section 5) and the one prediction of its ratios:
// one table and one model for the test that holds them (src/sim/table4_test.cc) and the bench
// that prints them (bench/sim/checks_bench.cc, group table4), so both show the same numbers.
// Table 4 measures samples per GPU per second of 1F1B, 1F1B-I, ZB-1p and ZB-2p on Megatron-LM
// (A100 80G over RoCE, microbatch 1, sequence 1024) at p = 16 and 32, printed to two decimals
// (a ratio carries about 1% of rounding). The prediction takes the paper's inputs alone: its
// profiled T_F, T_B, T_W, T_comm per setting and its memory model (zb_paper_settings.h, the
// one-chunk row of the same model, p and m) and the model shapes it states (hidden size, heads,
// layers; vocabulary 32000, which with them gives the 14.6B and 28.3B parameters it names) for
// the step's costs besides the pipeline; nothing is fitted to a throughput. ZB-1p and ZB-2p run
// post-validated under `--engine zb` (the steady state's period), 1F1B and 1F1B-I synchronous
// under `--engine megatron` (the makespan). docs/cost_model.md, "Table 4", explains each part.
// Everything here is a pure function of constant data; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "tightpipe/status.h"
#include "zb_paper_settings.h"

namespace tightpipe::testutil {

// One setting of Table 4.
struct Table4Row {
  const char* model;
  int32_t p, m;
  int32_t v;       // 1F1B-I's chunks per rank, as the paper ran it
  int32_t layers;  // transformer layers (the paper's Table 3)
  // Measured samples per GPU per second, as printed (two decimals).
  double one_f_one_b, interleaved, zb1p, zb2p;
};

inline constexpr std::array<Table4Row, 6> kZbPaperTable4 = {{
    {"14.6B", 16, 48, 3, 46, 1.40, 1.54, 1.61, 1.81},
    {"14.6B", 16, 64, 3, 46, 1.49, 1.59, 1.67, 1.83},
    {"14.6B", 16, 128, 3, 46, 1.64, 1.66, 1.76, 1.85},
    {"28.3B", 32, 96, 2, 62, 0.76, 0.82, 0.87, 0.99},
    {"28.3B", 32, 128, 2, 62, 0.80, 0.85, 0.90, 1.00},
    {"28.3B", 32, 256, 2, 62, 0.88, 0.90, 0.96, 1.00},
}};

// The shapes the paper does not print: the vocabulary (see above) and the sequence length.
inline constexpr int64_t kTable4Vocab = 32000;
inline constexpr int64_t kTable4Seq = 1024;

// The setting's profiled costs and memory model: the one-chunk row of the same model, p and m.
const ZbPaperSetting& table4_setting(const Table4Row& t);

// The zero-bubble repository's layer split (`--allow-padding-num-layers`, transformer.py
// get_offset, branch arxiv): the layers padded up to a multiple of p, the same count on every
// chunk, the padding taken one layer each from the last chunk, then the first, then the second
// ...; the embedding on chunk 0, the head on the last. 46 layers at p = 16: 2, 3 x 14, 2 (v = 1);
// 0, 1 x 46, 0 (v = 3). REQUIRES: ceil(layers / p) is a multiple of v.
std::vector<StageLayers> table4_layout(int32_t layers, int32_t p, int32_t v);

// The paper's costs with `chunks` stages per rank (zb_paper_costs) and, with step_costs, the
// step's costs besides the pipeline (StageCost::optimizer) derived from the model's shape:
// Megatron's fp16 Adam step over each chunk's parameters at the A100's HBM bandwidth, and the
// tied embedding's gradient all-reduce between the first and the last stage over a link that
// carries one s x h fp16 activation in T_comm (all of T_comm taken as bandwidth: the longest it
// can be).
CostModel table4_costs(const Table4Row& t, int32_t chunks, bool step_costs);

// The period of `compute_only` (lowered here) under `engine`: the synchronous step's makespan,
// or the steady state's step time where steps run back to back (post-validated: each rank starts
// its next step at its own end). Errors: those of lower, simulate and steady_state_step_time.
Result<double> table4_makespan(const Schedule& compute_only, const CostModel& c, Engine engine);
Result<double> table4_steady_step(const Schedule& compute_only, const CostModel& c, Engine engine);

// Throughput over 1F1B's of the three other schedules.
struct Table4Ratios {
  double interleaved = 0, zb1p = 0, zb2p = 0;
};
struct Table4Prediction {
  Table4Ratios pipeline;  // the pipeline alone (the paper's profiled costs)
  Table4Ratios full;      // with the step's costs besides the pipeline: the prediction
};

// The predicted ratios of one setting; the zero-bubble schedules are built once from the paper's
// costs and memory model for the span (the builder does not read the step's costs) and timed
// under both cost tables. Errors: a schedule that cannot be generated, built or simulated.
Result<Table4Prediction> predict_table4(const Table4Row& t);

// One predicted ratio beside the measured one.
struct Table4Compared {
  const char* name;            // "1F1B-I", "ZB-1p", "ZB-2p"
  double predicted, measured;  // throughput over 1F1B's
  double throughput;           // the schedule's measured samples per GPU per second
  double error() const { return predicted / measured - 1; }
};
// The three ratios of `r` against Table 4's, in the order 1F1B-I, ZB-1p, ZB-2p.
std::vector<Table4Compared> table4_compared(const Table4Row& t, const Table4Ratios& r);

}  // namespace tightpipe::testutil
