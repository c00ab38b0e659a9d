// Interleaved 1F1B (Megatron-LM's virtual pipeline; PyTorch ScheduleInterleaved1F1B).
// Loop placement: rank r owns stages r, r+p, ..., r+(v-1)p (its chunks). Microbatches go in
// groups of g: for each group, chunk 0 of all its microbatches, then chunk 1, ...; backwards walk
// the same table with the chunks reversed. Rank r warms up with 2(p-1-r) + (v-1)g forwards (at
// most all m*v), then alternates one forward and one backward, then drains the remaining
// backwards, as megatron-core 0.19.2 (`get_pp_rank_microbatches`) and PyTorch's
// ScheduleInterleaved1F1B do at every m, m = p included (older Megatron-LM warmed up with every
// forward when m == p; docs/peers.md). Bubble (p-1)(F+B)/v.
//
// Group size: --microbatch-group-size g follows Megatron's rule (p <= g <= m, and m mod g is 0 or
// at least p: a short last group would starve the pipeline). Without it, g = p when p divides m;
// otherwise PyTorch's flexible rule: rounds = max(1, m / p) must divide m and g = m / rounds.
#include <algorithm>

#include "generator_util.h"

namespace tightpipe::detail {
namespace {

struct Virtual {
  int32_t chunk;
  int32_t mb;
};

// The order in which one rank walks (chunk, microbatch) pairs for forwards (backward = false) or
// backwards (chunks reversed).
std::vector<Virtual> group_table(int32_t m, int32_t v, int32_t g, bool backward) {
  std::vector<Virtual> table;
  for (int32_t start = 0; start < m; start += g) {
    const int32_t end = std::min(m, start + g);
    for (int32_t c = 0; c < v; ++c)
      for (int32_t mb = start; mb < end; ++mb) table.push_back({backward ? v - 1 - c : c, mb});
  }
  return table;
}

Result<int32_t> group_size(const GeneratorOptions& o) {
  const int32_t p = o.ranks, m = o.microbatches;
  const std::string hint = fmt::format("hint: use --microbatches a multiple of --pp ({}), e.g. {}",
                                       p, std::max(p, (m / p) * p));
  if (o.group_size > 0) {
    const int32_t g = o.group_size;
    if (g < p || g > m) {
      return Status::invalid_argument(fmt::format(
          "--microbatch-group-size {}: interleaved needs --pp <= group size <= --microbatches "
          "({} <= g <= {}); hint: leave it out to use g = --pp",
          g, p, m));
    }
    if (m % g != 0 && m % g < p) {
      return Status::invalid_argument(fmt::format(
          "--microbatches {} with --microbatch-group-size {}: the last group would hold {} "
          "microbatches, fewer than --pp {}; {}",
          m, g, m % g, p, hint));
    }
    return g;
  }
  if (m % p == 0) return p;
  const int32_t rounds = std::max(1, m / p);
  if (m % rounds != 0) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: interleaved with --pp {} splits microbatches into {} equal rounds, "
        "and {} does not divide {}; {}",
        m, p, rounds, rounds, m, hint));
  }
  return m / rounds;
}

}  // namespace

Result<Schedule> generate_interleaved(const GeneratorOptions& o) {
  TP_RETURN_IF_ERROR(check_common("interleaved", o, 0));
  TP_ASSIGN_OR_RETURN(const int32_t g, group_size(o));
  const int32_t p = o.ranks, m = o.microbatches, v = o.chunks;
  Schedule s = empty_schedule("interleaved", p, p * v, m, Placement::kLoop);
  const auto fwd = group_table(m, v, g, false);
  const auto bwd = group_table(m, v, g, true);
  const int32_t total = m * v;
  for (int32_t r = 0; r < p; ++r) {
    auto& prog = s.programs[r];
    auto stage = [&](int32_t chunk) { return r + chunk * p; };
    const int32_t warmup = interleaved_warmup_forwards(p, r, v, g, m);
    int32_t nf = 0, nb = 0;
    for (; nf < warmup; ++nf) prog.push_back(F(stage(fwd[nf].chunk), fwd[nf].mb));  // warm-up
    for (; nf < total; ++nf, ++nb) {                                                // steady
      prog.push_back(F(stage(fwd[nf].chunk), fwd[nf].mb));
      prog.push_back(B(stage(bwd[nb].chunk), bwd[nb].mb));
    }
    for (; nb < total; ++nb) prog.push_back(B(stage(bwd[nb].chunk), bwd[nb].mb));  // cool-down
  }
  return s;
}

}  // namespace tightpipe::detail

namespace tightpipe {

int32_t interleaved_warmup_forwards(int32_t p, int32_t r, int32_t v, int32_t g, int32_t m) {
  const int64_t total = int64_t{m} * v;
  return static_cast<int32_t>(
      std::min<int64_t>(total, 2 * int64_t{p - 1 - r} + int64_t{v - 1} * g));
}

}  // namespace tightpipe
