// Looped BFS (breadth-first; PyTorch ScheduleLoopedBFS). Loop placement, v chunks per rank.
// Rank r runs all m forwards of each local stage in turn, then the backwards stage by stage in
// reverse order, each stage's backwards from microbatch m-1 down to 0.
// Bubble (p-1)(F+B)/v like interleaved, memory m whole-rank activations like GPipe.
#include "generator_util.h"

namespace tightpipe::detail {

Result<Schedule> generate_looped_bfs(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("looped-bfs", o, 0));
  const int32_t p = o.ranks, m = o.microbatches, v = o.chunks;
  Schedule s = empty_schedule("looped-bfs", p, p * v, m, Placement::kLoop);
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    const auto local = s.stages_of(r);
    for (int32_t stage : local)  // forwards, stage by stage
      for (int32_t mb = 0; mb < m; ++mb) prog.push_back(F(stage, mb));
    for (auto it = local.rbegin(); it != local.rend(); ++it)  // backwards, reversed
      for (int32_t mb = m - 1; mb >= 0; --mb) prog.push_back(B(*it, mb));
  }
  return s;
}

}  // namespace tightpipe::detail
