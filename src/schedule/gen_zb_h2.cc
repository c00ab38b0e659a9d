// ZB-H2 (zero-bubble paper, memory limit 2p). More warm-up forwards than ZB-H1 (2(p-1-r)+1 on
// rank r) so that, with F = I = W, every rank is busy without a gap from its first F to its last
// W; it holds up to 2p-1 activations. After the warm-up, "I F" pairs run until the forwards are
// done; the cool-down pairs the remaining I with W. Nobody waits for the first stage's I (its
// input gradient goes nowhere), so the first stage runs W first in each cool-down pair.
#include <algorithm>

#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_zb_h2(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("zb-h2", o, 1));
  const int32_t p = o.ranks, m = o.microbatches;
  Schedule s = empty_schedule("zb-h2", p, p, m, Placement::kLoop);
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    int32_t f = 0, i = 0, w = 0;
    auto emit_f = [&] { if (f < m) prog.push_back(F(r, f++)); };
    auto emit_i = [&] { if (i < f) prog.push_back(I(r, i++)); };
    auto emit_w = [&] { if (w < i) prog.push_back(W(r, w++)); };
    const int32_t warmup = std::min(m, 2 * (p - 1 - r) + 1);
    for (int32_t k = 0; k < warmup; ++k) emit_f();  // warm-up
    while (f < m) {                                 // steady: "I F"
      emit_i();
      emit_f();
    }
    const bool first_stage = r == 0;
    while (i < m) {  // cool-down: "I W" ("W I" on the first stage)
      if (first_stage) emit_w();
      emit_i();
      if (!first_stage) emit_w();
    }
    while (w < m) emit_w();  // the remaining W
  }
  return s;
}

}  // namespace tightpipe::detail
