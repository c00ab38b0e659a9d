// zb-auto: a single-chunk zero-bubble schedule built from a cost table under a memory limit
// (auto_schedule.h; rules in docs/cost_model.md, "zb-auto"). The options, names and memory
// helpers every cost-aware name shares live here too.
//
// The builder is the list scheduler both zb-auto and zb-v-auto run (zb_list.h): one greedy pass
// per knob combination (zb::all_policies(1): F before a ready I, F only when it ends before the
// I it would delay, W only when it ends before the next F or I is ready, and a cap on the F in
// flight per stage: none, l - s as 1F1B and ZB-H1, or l - 1 - 2s as ZB-H2, for memory limit l)
// at every limit of a fixed grid up to the requested one, plus zb-h1 and zb-h2 where they fit;
// the best in the objective is improved by improve_schedule() (zb_search.cc) within the budget.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "sim/zb_list.h"
#include "sim/zb_score.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {
using zb::lower_case;
}  // namespace

std::string_view zb_objective_name(ZbObjective objective) {
  return objective == ZbObjective::kSpan ? "span" : "makespan";
}

Result<ZbObjective> parse_zb_objective(std::string_view text) {
  const std::string t = lower_case(text);
  if (t == "makespan") return ZbObjective::kMakespan;
  if (t == "span") return ZbObjective::kSpan;
  return Status::invalid_argument(fmt::format(
      "--objective '{}': unknown objective; hint: makespan (the step, every stage from 0) or span "
      "(max per-stage span, first F to last W)",
      text));
}

Result<double> simulated_objective(const Schedule& schedule, const CostModel& costs,
                                   ZbObjective objective) {
  TP_ASSIGN_OR_RETURN(Schedule low, lower(schedule));
  SimOptions so;
  so.record_timeline = false;
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(low, costs, so));
  return objective == ZbObjective::kSpan ? r.max_span : r.makespan;
}

Status ZbAutoOptions::validate() const {
  if (memory_limit && !std::isfinite(*memory_limit)) {
    return Status::invalid_argument(fmt::format(
        "--memory-limit {}: not a finite number; hint: give whole-rank microbatch activations, "
        "at least {} (p is 1F1B's memory), or leave it out for p",
        *memory_limit, kZbAutoMinMemoryLimit));
  }
  if (memory_limit && *memory_limit < kZbAutoMinMemoryLimit) {
    return Status::invalid_argument(fmt::format(
        "--memory-limit {}: below {}, the least any schedule needs (one microbatch's activations "
        "after its F, in whole-rank microbatch activations); hint: pass --memory-limit {} or more "
        "(p is 1F1B's memory), or leave it out for p",
        *memory_limit, kZbAutoMinMemoryLimit, kZbAutoMinMemoryLimit));
  }
  if (w_memory_fraction &&
      !(std::isfinite(*w_memory_fraction) && *w_memory_fraction >= 0 && *w_memory_fraction <= 1)) {
    return Status::invalid_argument(fmt::format(
        "--w-memory-fraction {}: must be a finite number in [0, 1] (the share of an F's "
        "activations that I keeps until W); hint: 0.5, or leave it out to take it from the costs",
        *w_memory_fraction));
  }
  if (search_budget_ms && !(std::isfinite(*search_budget_ms) && *search_budget_ms >= 0 &&
                            *search_budget_ms <= kZbMaxSearchBudgetMs)) {
    return Status::invalid_argument(fmt::format(
        "--search-budget-ms {}: must be a finite number of milliseconds in [0, {}]; hint: 100, "
        "0 for the greedy's schedule without the search, or leave it out for a fixed {} "
        "simulations (the same schedule on every machine)",
        *search_budget_ms, kZbMaxSearchBudgetMs, kZbDefaultSearchEvaluations));
  }
  return OkStatus();
}

SearchBudget zb_search_budget(const ZbAutoOptions& o) {
  if (o.search_budget_ms) return {.ms = *o.search_budget_ms};
  return {.ms = kZbMaxSearchBudgetMs, .max_evaluations = kZbDefaultSearchEvaluations};
}

bool is_zb_auto_name(std::string_view name) {
  const std::string n = lower_case(name);
  return n == "zb-auto" || n == "zb-1p" || n == "zb-2p";
}

double zb_auto_name_memory_limit(std::string_view name, int32_t p) {
  const std::string n = lower_case(name);
  if (n == "zb-1p") return p;
  if (n == "zb-2p") return 2.0 * p;
  return 0;
}

std::vector<double> zb_w_memory_fractions(const CostModel& costs, const ZbAutoOptions& o) {
  std::vector<double> f(costs.num_stages(), 0.5);
  for (int32_t s = 0; s < costs.num_stages(); ++s) {
    const StageCost& c = costs.stage(s);
    if (o.w_memory_fraction) {
      f[s] = *o.w_memory_fraction;
    } else if (c.act_bytes > 0) {
      f[s] = std::clamp(c.act_after_i_bytes / c.act_bytes, 0.0, 1.0);
    }
  }
  return f;
}

std::vector<double> zb_f_memory_units(const CostModel& costs, const Schedule& placement) {
  std::vector<double> units(placement.num_stages, 0);
  for (int32_t r = 0; r < placement.num_ranks; ++r) {
    const std::vector<int32_t> stages = placement.stages_of(r);
    double total = 0;
    bool sized = true;
    for (int32_t s : stages) {
      total += costs.stage(s).act_bytes;
      sized = sized && costs.stage(s).act_bytes > 0;
    }
    for (int32_t s : stages) {
      units[s] =
          sized ? costs.stage(s).act_bytes / total : 1.0 / static_cast<double>(stages.size());
    }
  }
  return units;
}

std::vector<double> zb_peak_memory_units(const Schedule& schedule,
                                         const std::vector<double>& fractions,
                                         const std::vector<double>& f_units) {
  std::vector<double> peak(schedule.num_ranks, 0);
  // Without sizes a chunk holds 1/v of a rank's layers: its F adds 1/v of a whole-rank activation.
  const double even = 1.0 / std::max(1, schedule.chunks());
  for (int32_t r = 0; r < schedule.num_ranks; ++r) {
    double mem = 0;
    for (const Action& pa : schedule.programs[r]) {
      for (const Action& a : sub_actions(pa)) {  // a pair: its F adds, then its B frees
        const double f = fractions.at(a.stage);
        const double unit = f_units.empty() ? even : f_units.at(a.stage);
        switch (a.type) {
          case ActionType::kForward:
            mem += unit;
            break;
          case ActionType::kBackwardInput:
            mem -= (1 - f) * unit;
            break;
          case ActionType::kBackwardWeight:
            mem -= f * unit;
            break;
          case ActionType::kBackward:
            mem -= unit;
            break;
          case ActionType::kSendAct:
          case ActionType::kRecvAct:
          case ActionType::kSendGrad:
          case ActionType::kRecvGrad:
            break;
          case ActionType::kOverlapFB:
            TP_CHECK(false, "sub_actions() returned a pair");
            break;
        }
        peak[r] = std::max(peak[r], mem);
      }
    }
  }
  return peak;
}

Result<Schedule> build_zb_auto(int32_t p, int32_t m, const CostModel& costs,
                               const ZbAutoOptions& o) {
  if (p < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: zb-auto needs at least 1 pipeline rank; hint: pass --pp 1 or more", p));
  }
  if (m < 1) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: zb-auto needs at least 1 microbatch; hint: pass --microbatches >= 1",
        m));
  }
  TP_RETURN_IF_ERROR(o.validate());
  if (costs.num_stages() != p) {
    return Status::invalid_argument(fmt::format(
        "{}: has {} stage(s) but zb-auto runs one stage per rank (p={}); hint: give a cost table "
        "with {} stages, or --cost for uniform costs",
        costs.source(), costs.num_stages(), p, p));
  }
  const double limit = o.memory_limit.value_or(p);
  Schedule placement;
  placement.num_ranks = placement.num_stages = p;
  placement.stage_to_rank = place_stages(Placement::kLoop, p, p);
  const zb::Problem pr = zb::Problem::make(m, costs, placement, zb_w_memory_fractions(costs, o));
  std::vector<Schedule> hand;
  for (const char* name : {"zb-h1", "zb-h2"}) {
    auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = 1});
    if (s.ok()) hand.push_back(std::move(s).value());
  }
  const SearchBudget budget =
      o.search_budget_ms == 0.0 ? SearchBudget{.ms = 0} : zb_search_budget(o);
  return zb::build_list_schedule(pr, costs, limit, o.objective, budget, std::move(hand), "zb-auto");
}

}  // namespace tightpipe
