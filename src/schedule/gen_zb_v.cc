// ZB-V (zero-bubble paper; PyTorch ScheduleZBVZeroBubble). V placement with exactly two chunks
// per rank: rank r owns stage r (chunk 0, going down) and stage 2p-1-r (chunk 1, coming back),
// so the last stage and the loss sit on rank 0 and stages p-1 and p hand off locally on rank
// p-1. With F = I = W no rank has a gap after its first F; memory p whole-rank activations.
// The phases are generated for n = max(2p-1, m) microbatches and those beyond m are dropped.
#include <algorithm>

#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_zb_v(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("zb-v", o, 2));
  const int32_t p = o.ranks, m = o.microbatches;
  const int32_t n = std::max(2 * p - 1, m);
  Schedule s = empty_schedule("zb-v", p, 2 * p, m, Placement::kV);
  for (int32_t r = 0; r < p; ++r) {
    std::vector<Action> ops;
    const int32_t s0 = r, s1 = 2 * p - 1 - r;
    int32_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int32_t k = 0; k < 2 * (p - r) - 1; ++k) ops.push_back(F(s0, f0++));  // warm-up 1
    for (int32_t k = 0; k < r; ++k) {  // warm-up 2: both chunks forward
      ops.push_back(F(s1, f1++));
      ops.push_back(F(s0, f0++));
    }
    for (int32_t k = 0; k < p - r; ++k) {  // warm-up 3: chunk 1 runs F I W
      ops.push_back(F(s1, f1));
      ops.push_back(I(s1, b1));
      ops.push_back(W(s1, b1++));
      ++f1;
    }
    while (f1 < f0 || f0 < n) {  // steady: F I W on chunk 0, then on chunk 1
      if (f0 < n) ops.push_back(F(s0, f0++));
      ops.push_back(I(s0, b0));
      ops.push_back(W(s0, b0++));
      ops.push_back(F(s1, f1));
      ops.push_back(I(s1, b1));
      ops.push_back(W(s1, b1++));
      ++f1;
    }
    int32_t w0 = b0, w1 = b1;
    for (int32_t k = 0; k < r; ++k) {  // cool-down 1: input gradients of both chunks
      ops.push_back(I(s0, b0++));
      ops.push_back(I(s1, b1++));
    }
    for (int32_t k = 0; k < p - r; ++k) {  // cool-down 2: chunk 0 I W
      ops.push_back(I(s0, b0++));
      ops.push_back(W(s0, w0++));
    }
    while (w1 < b1) ops.push_back(W(s1, w1++));  // the remaining W, chunk 1 then chunk 0
    while (w0 < b0) ops.push_back(W(s0, w0++));
    for (const Action& a : ops)
      if (a.microbatch < m) s.programs[r].push_back(a);
  }
  return s;
}

}  // namespace tightpipe::detail
