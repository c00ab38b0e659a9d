// DualPipeV (DeepSeek's V-shaped DualPipe; PyTorch ScheduleDualPipeV). V placement with exactly two
// chunks per rank: rank r holds stage r (chunk 0) and stage 2p-1-r (chunk 1); the loss is on rank
// 0's chunk 1, and rank p-1 hands chunk 0's output to its chunk 1 locally. The 8-step rule
// (dualpipe_rule.h) with n = p, h = r and all m microbatches on both chunks; needs m >= 2p.
#include "dualpipe_rule.h"
#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_dualpipev(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("dualpipev", o, 2));
  const int32_t p = o.ranks, m = o.microbatches;
  if (m < 2 * p) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: schedule 'dualpipev' needs m >= 2p = {} (p = {}); hint: pass "
        "--microbatches {} or more",
        m, 2 * p, p, 2 * p));
  }
  Schedule s = empty_schedule("dualpipev", p, 2 * p, m, Placement::kV);
  for (int32_t r = 0; r < p; ++r) {
    s.programs[r] = dualpipe_rank_program(
        {.n = p, .h = r, .per_chunk = m, .stage0 = r, .stage1 = 2 * p - 1 - r});
  }
  return s;
}

}  // namespace tightpipe::detail
