// zb-v-auto: a V-shape (2 chunks per rank) zero-bubble schedule built from a cost table under a
// memory limit (auto_schedule.h; rules in docs/cost_model.md, "zb-v-auto").
//
// Placement is zb-v's: rank r owns stage r (chunk 0, going down) and stage 2p-1-r (chunk 1,
// coming back). Memory per rank in whole-rank microbatch units: a chunk's F adds u (its share of
// the rank's activation bytes, zb_f_memory_units; 1/2 without sizes), its I frees (1 - f)u,
// its W fu. The builder is the list scheduler zb-auto runs too (zb_list.h), with the two-chunk
// knobs (zb::all_policies(2): which ready F and which ready I first, F before a ready I, W only
// when it ends before the next F or I) and zb-v as the handcrafted candidate.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sim/zb_list.h"
#include "sim/zb_score.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {

Result<Schedule> build_zb_v_auto(int32_t p, int32_t m, const CostModel& costs,
                                 const ZbAutoOptions& o) {
  if (p < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: zb-v-auto needs at least 1 pipeline rank; hint: pass --pp 1 or more", p));
  }
  if (m < 1) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: zb-v-auto needs at least 1 microbatch; hint: pass --microbatches >= 1",
        m));
  }
  TP_RETURN_IF_ERROR(o.validate());
  if (costs.num_stages() != 2 * p) {
    return Status::invalid_argument(fmt::format(
        "{}: has {} stage(s) but zb-v-auto runs 2 chunks per rank in a V, 2p = {} stages (p={}); "
        "hint: give a cost table with {} stages (stage s on rank s, and on rank 2p-1-s from p "
        "on), or --cost for uniform whole-rank costs",
        costs.source(), costs.num_stages(), 2 * p, p, 2 * p));
  }
  const double limit = o.memory_limit.value_or(p);
  Schedule placement;  // the V
  placement.num_ranks = p;
  placement.num_stages = 2 * p;
  placement.stage_to_rank = place_stages(Placement::kV, p, 2 * p);
  const zb::Problem pr = zb::Problem::make(m, costs, placement, zb_w_memory_fractions(costs, o));
  std::vector<Schedule> hand;
  auto zb_v = generate_schedule("zb-v", {.ranks = p, .microbatches = m, .chunks = 2});
  if (zb_v.ok()) hand.push_back(std::move(zb_v).value());
  const SearchBudget budget =
      o.search_budget_ms == 0.0 ? SearchBudget{.ms = 0} : zb_search_budget(o);
  return zb::build_list_schedule(pr, costs, limit, o.objective, budget, std::move(hand),
                                 "zb-v-auto");
}

}  // namespace tightpipe
