// GPipe: every rank runs all forwards, then all backwards (fused B), in microbatch order.
// Bubble (p-1)(F+B); every rank holds m microbatch activations at the peak.
#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_gpipe(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("gpipe", o, 1));
  const int32_t p = o.ranks, m = o.microbatches;
  Schedule s = empty_schedule("gpipe", p, p, m, Placement::kLoop);
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    for (int32_t mb = 0; mb < m; ++mb) prog.push_back(F(r, mb));  // all forwards
    for (int32_t mb = 0; mb < m; ++mb) prog.push_back(B(r, mb));  // all backwards
  }
  return s;
}

}  // namespace tightpipe::detail
