// The 8-step rule DualPipe and DualPipeV share (DeepSeek, deepseek-ai/DualPipe; PyTorch's
// ScheduleDualPipeV), stated once for both generators (internal to src/schedule).
#pragma once

#include <vector>

#include "tightpipe/schedule.h"

namespace tightpipe::detail {

// One rank of the rule. The rank holds two chunks: chunk 0 (stage0) and chunk 1 (stage1), each
// running `per_chunk` microbatches in order, from mb0 and mb1 on.
//   DualPipeV, rank r of p:  n = p,   h = r,               per_chunk = m,   mb0 = mb1 = 0.
//   DualPipe,  rank r of p:  n = p/2, h = min(r, p-1-r),   per_chunk = m/2, mb0/mb1 = 0 or m/2
//                            (chunk 0 is the direction in which the rank comes first).
// h == n - 1 is a middle rank: there, step 4's first F0 and B1 run one after the other, unpaired.
struct DualPipeRank {
  int32_t n = 0;
  int32_t h = 0;
  int32_t per_chunk = 0;
  int32_t stage0 = 0, stage1 = 0;
  int32_t mb0 = 0, mb1 = 0;
};

// The rank's program. REQUIRES: 0 <= h < n, per_chunk >= 2n.
std::vector<Action> dualpipe_rank_program(const DualPipeRank& rank);

}  // namespace tightpipe::detail
