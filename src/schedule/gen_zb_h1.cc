// ZB-H1 (zero-bubble paper; PyTorch ScheduleInterleavedZeroBubble at v = 1). Backward is split
// into I (input gradient, which the upstream rank waits for) and W (weight gradient, which can
// wait); W fills what would be the cool-down bubble of 1F1B. Bubble (p-1)(F+I-W), one third of
// 1F1B's when F = I = W, with 1F1B's memory (p activations on every rank at most).
#include <algorithm>

#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_zb_h1(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("zb-h1", o, 1));
  const int32_t p = o.ranks, m = o.microbatches;
  Schedule s = empty_schedule("zb-h1", p, p, m, Placement::kLoop);
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    int32_t f = 0, i = 0, w = 0;  // next microbatch of each kind
    auto emit_f = [&] {
      if (f < m) prog.push_back(F(r, f++));
    };
    auto emit_i = [&] {
      if (i < f) prog.push_back(I(r, i++));
    };
    auto emit_w = [&] {
      if (w < i) prog.push_back(W(r, w++));
    };
    const int32_t warmup = std::min(m, p - r);
    for (int32_t k = 0; k < warmup; ++k) emit_f();  // warm-up: p - r forwards
    for (int32_t k = 0; k < r && i < m; ++k) {      // r pairs "I F": W waits
      emit_i();
      emit_f();
    }
    while (f < m) {  // steady: "I W F"
      emit_i();
      emit_w();
      emit_f();
    }
    while (i < m) {  // cool-down: "I W"
      emit_i();
      emit_w();
    }
    while (w < m) emit_w();  // the remaining W
  }
  return s;
}

}  // namespace tightpipe::detail
