// 1F1B (PipeDream-flush; Megatron's non-interleaved schedule; DeepSpeed TrainSchedule).
// Rank r: warm-up forwards, then one-forward-one-backward pairs, then the remaining backwards.
// Same bubble as GPipe, but rank r holds at most min(p-r, m) activations.
#include <algorithm>

#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_1f1b(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("1f1b", o, 1));
  const int32_t p = o.ranks, m = o.microbatches;
  Schedule s = empty_schedule("1f1b", p, p, m, Placement::kLoop);
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    const int32_t warmup = std::min(m, p - 1 - r);
    const int32_t steady = m - warmup;
    int32_t next_f = 0, next_b = 0;
    for (int32_t k = 0; k < warmup; ++k) prog.push_back(F(r, next_f++));  // warm-up
    for (int32_t k = 0; k < steady; ++k) {                                // steady: F then B
      prog.push_back(F(r, next_f++));
      prog.push_back(B(r, next_b++));
    }
    while (next_b < m) prog.push_back(B(r, next_b++));  // cool-down
  }
  return s;
}

}  // namespace tightpipe::detail
