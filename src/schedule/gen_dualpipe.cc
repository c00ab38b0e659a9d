// DualPipe (DeepSeek): two pipelines in opposite directions over the same p ranks, p even.
// Representation (docs/schedule_ir.md "DualPipe"): 2p stage ids in 2 directions. Stage ids
// 0..p-1 are the forward pipeline (id k = model stage k on rank k) and run microbatches
// 0..m/2-1; ids p..2p-1 are the reverse pipeline (id p+k = the second copy of model stage k, on
// rank p-1-k: the V placement) and run microbatches m/2..m-1. So rank r holds model stage r of
// one direction and model stage p-1-r of the other; both ends compute a loss (ids p-1 and 2p-1).
// The 8-step rule (dualpipe_rule.h) with n = p/2, h = min(r, p-1-r), m/2 microbatches per chunk;
// chunk 0 is the direction in which rank r comes first (the forward one for r < p/2).
#include <algorithm>

#include "dualpipe_rule.h"
#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_dualpipe(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("dualpipe", o, 2));
  const int32_t p = o.ranks, m = o.microbatches;
  if (p % 2 != 0) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: schedule 'dualpipe' needs an even number of pipeline ranks (half of them start "
        "each direction); hint: pass --pp {}, or use 'dualpipev' for any p",
        p, p + 1));
  }
  if (m % 2 != 0) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: schedule 'dualpipe' needs an even number of microbatches (m/2 enter "
        "at each end); hint: pass --microbatches {}",
        m, m + 1));
  }
  if (m < 2 * p) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: schedule 'dualpipe' needs m >= 2p = {} (p = {}); hint: pass "
        "--microbatches {} or more",
        m, 2 * p, p, 2 * p));
  }
  Schedule s = empty_schedule("dualpipe", p, 2 * p, m, Placement::kV);
  s.directions = 2;
  const int32_t half = m / 2;
  for (int32_t r = 0; r < p; ++r) {
    const int32_t forward_id = r, reverse_id = 2 * p - 1 - r;  // model stages r and p-1-r
    const bool first_half = r < p / 2;
    s.programs[r] = dualpipe_rank_program({.n = p / 2,
                                           .h = std::min(r, p - 1 - r),
                                           .per_chunk = half,
                                           .stage0 = first_half ? forward_id : reverse_id,
                                           .stage1 = first_half ? reverse_id : forward_id,
                                           .mb0 = first_half ? 0 : half,
                                           .mb1 = first_half ? half : 0});
  }
  return s;
}

}  // namespace tightpipe::detail
