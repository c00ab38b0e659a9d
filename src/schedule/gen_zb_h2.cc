// ZB-H2 (zero-bubble paper, memory limit 2p; the handcrafted schedule of sail-sg's
// `get_hand_schedule` with warm-up factor 2). Backward is split into I (input gradient) and W
// (weight gradient). Stage r warms up with 2(p-1-r) forwards (twice 1F1B's p-1-r) and delays
// its first W by 2r steady steps, so that with F = I = W it never waits from its first F to its
// last W (span 3m; the stagger of the first F remains, which the paper hides with its optimizer
// post-validation). In the steady state every slot is "F I W": a stage never holds more than
// 2p-1 microbatches (F done, W not done), for any m. Needs m >= 2p, the paper's condition
// (REFERENCE.md §1).
#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_zb_h2(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("zb-h2", o, 1));
  const int32_t p = o.ranks, m = o.microbatches;
  if (m < 2 * p) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: schedule 'zb-h2' needs m >= 2p = {} microbatches with --pp {} (the "
        "zero-bubble paper's condition); hint: pass --microbatches {} or more, or use zb-h1 for "
        "fewer microbatches",
        m, 2 * p, p, 2 * p));
  }
  Schedule s = empty_schedule("zb-h2", p, p, m, Placement::kLoop);
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    int32_t f = 0, w = 0;                    // next microbatch of F and of W (I is the loop index)
    const int32_t warmup = 2 * (p - 1 - r);  // extra forwards before the first I
    const int32_t w_delay = 2 * r;           // steady steps before the first W
    for (int32_t k = 0; k < warmup; ++k) prog.push_back(F(r, f++));  // warm-up
    for (int32_t i = 0; i < m; ++i) {  // steady: "F I W", F while forwards remain, W once i >= 2r
      if (warmup + i < m) prog.push_back(F(r, f++));
      prog.push_back(I(r, i));
      if (i >= w_delay) prog.push_back(W(r, w++));
    }
    while (w < m) prog.push_back(W(r, w++));  // cool-down: the 2r remaining W
  }
  return s;
}

}  // namespace tightpipe::detail
