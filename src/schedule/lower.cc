// lower(): adds SEND/RECV for every cross-rank edge. The compute programs are replayed in rounds
// over the ranks; each rank places its next compute action once the action's dependencies are in
// its program. A producer's SEND goes right after it, and the sender places the matching RECV on
// the receiving rank at that same moment. Every SEND/RECV pair is thus adjacent in one global
// order that respects all dependencies, so even rendezvous (blocking) transports cannot hang.
// Stages on the same rank hand off locally: no SEND/RECV. An OVERLAP_F_B pair is placed once the
// inputs of both its sub-actions are there, so both RECVs precede it; both SENDs follow it.
#include <fmt/format.h>

#include "tightpipe/schedule.h"

namespace tightpipe {

Result<Schedule> lower(const Schedule& in) {
  if (in.lowered || in.has_comm_actions()) {
    return Status::invalid_argument(fmt::format(
        "schedule '{}' is already lowered (it holds SEND/RECV); hint: lower a compute-only "
        "schedule",
        in.name));
  }
  TP_RETURN_IF_ERROR(validate(in));
  Schedule out = in;
  out.lowered = true;
  for (auto& prog : out.programs) {
    prog.clear();
    prog.reserve(in.programs.size() ? 3 * in.size() / in.programs.size() : 0);
  }
  const int32_t P = in.num_ranks;
  CompletionSet placed(out);
  std::vector<size_t> next(P, 0);
  size_t remaining = in.size();
  while (remaining > 0) {
    bool progress = false;
    for (int32_t r = 0; r < P; ++r) {
      if (next[r] >= in.programs[r].size()) continue;
      const Action& a = in.programs[r][next[r]];
      if (!placed.ready(out, a)) continue;
      out.programs[r].push_back(a);
      placed.mark(a);
      ++next[r];
      --remaining;
      progress = true;
      // A message that leaves the rank: its SEND right after the producer, and the matching
      // RECV on the receiving rank at that same moment.
      for (const Action& sub : sub_actions(a)) {
        if (auto m = message_route(in, sub, MessageEnd::kOut); m && !m->local()) {
          out.programs[m->src_rank].push_back(m->send());
          out.programs[m->dst_rank].push_back(m->recv());
          placed.mark(m->send());
          placed.mark(m->recv());
        }
      }
    }
    if (!progress) {
      // Report against the compute-only input, marking the first stuck rank.
      GridMark mark;
      std::string blocked;
      for (int32_t r = 0; r < P; ++r) {
        if (next[r] >= in.programs[r].size()) continue;
        if (mark.rank < 0) mark = {r, static_cast<int32_t>(next[r])};
        blocked += fmt::format("\n  rank {} step {}: {}", r, next[r], to_string(in.programs[r][next[r]]));
      }
      return Status::failed_precondition(fmt::format(
          "cannot lower schedule '{}': no rank's next action has its inputs (deadlock){}\n{}",
          in.name, blocked, format_grid(in, mark)));
    }
  }
  return out;
}

}  // namespace tightpipe
