// Helpers shared by the generators (internal to src/schedule).
#pragma once

#include <fmt/format.h>

#include <string>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe::detail {

// An empty schedule of the given shape with programs sized to the rank count.
inline Schedule empty_schedule(std::string name, int32_t ranks, int32_t stages, int32_t mbs,
                               Placement placement) {
  Schedule s;
  s.name = std::move(name);
  s.num_ranks = ranks;
  s.num_stages = stages;
  s.num_microbatches = mbs;
  s.stage_to_rank = place_stages(placement, ranks, stages);
  s.programs.resize(ranks);
  return s;
}

// Rejects p < 1, m < 1 and a v the generator does not take, naming the flag.
inline Status check_common(std::string_view name, const GeneratorOptions& o, int32_t fixed_chunks) {
  if (o.ranks < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: schedule '{}' needs at least 1 pipeline rank; hint: pass --pp 1 or more", o.ranks,
        name));
  }
  if (o.microbatches < 1) {
    return Status::invalid_argument(
        fmt::format("--microbatches {}: schedule '{}' needs at least 1 microbatch; hint: pass "
                    "--microbatches >= 1 (more microbatches means a thinner bubble)",
                    o.microbatches, name));
  }
  if (o.chunks < 1) {
    return Status::invalid_argument(
        fmt::format("--vpp {}: the number of chunks per rank must be at least 1", o.chunks));
  }
  if (fixed_chunks > 0 && o.chunks != fixed_chunks) {
    return Status::invalid_argument(fmt::format(
        "--vpp {}: schedule '{}' runs exactly {} chunk{} per rank; hint: {}", o.chunks, name,
        fixed_chunks, fixed_chunks == 1 ? "" : "s",
        fixed_chunks == 1 ? "drop --vpp, or use 'interleaved' or 'looped-bfs' for several chunks"
                          : fmt::format("pass --vpp {} or leave it out", fixed_chunks)));
  }
  return OkStatus();
}

// The generators of the name registry (registry.cc), one per gen_<name>.cc; each declared once
// here, where both its definition and the registry see it.
Result<Schedule> generate_gpipe(const GeneratorOptions& o);
Result<Schedule> generate_1f1b(const GeneratorOptions& o);
Result<Schedule> generate_interleaved(const GeneratorOptions& o);
Result<Schedule> generate_looped_bfs(const GeneratorOptions& o);
Result<Schedule> generate_zb_h1(const GeneratorOptions& o);
Result<Schedule> generate_zb_h2(const GeneratorOptions& o);
Result<Schedule> generate_zb_v(const GeneratorOptions& o);
Result<Schedule> generate_dualpipev(const GeneratorOptions& o);
Result<Schedule> generate_dualpipe(const GeneratorOptions& o);

inline Action F(int32_t s, int32_t mb) { return {ActionType::kForward, s, mb}; }
inline Action I(int32_t s, int32_t mb) { return {ActionType::kBackwardInput, s, mb}; }
inline Action W(int32_t s, int32_t mb) { return {ActionType::kBackwardWeight, s, mb}; }
inline Action B(int32_t s, int32_t mb) { return {ActionType::kBackward, s, mb}; }

}  // namespace tightpipe::detail
