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

// The zero-bubble authors' own single-chunk greedy (sail-sg/zero-bubble-pipeline-parallelism,
// zb.py, Graph.manual_order, main 39f2c186: the starting point of their ZB-1p / ZB-2p), rebuilt
// here on the problem's per-stage costs, messages and memory (theirs takes per-stage costs and
// one message time). It times each action as it places it (the later of the stage's lane and
// its input's arrival):
//   * warm-up: one F per stage; then from the last stage up, stage j adds F while they fit the
//     memory and end before (allow_bubble) or start before (else) microbatch 0's I arrives from
//     stage j + 1, no stage more than the one above it; then every stage's first I;
//   * then per microbatch i: each stage that may (prioritize_b: a stage 2 F ahead of the next
//     one skips its F where the next stage's F and I would end first and the wait is within
//     its allowance; no stage runs an F when the next one does not) runs W until the F fits the
//     memory, W while one ends before the F's input arrives and, before a wait, one more (always
//     over the allowance, within it only no_bubble_greedy), then the F; then from the last stage
//     up the same W rule before the I of microbatch i;
//   * the W left run at the end.
// The allowance of a stage is the most any stage has idled so far less its own idle. Where a
// general cost table breaks one of the authors' preconditions (an input not placed when its turn
// comes, memory over the limit with no W to run), the pass gives no schedule.
class AuthorsGreedy {
 public:
  AuthorsGreedy(const zb::Problem& pr, double limit) : pr_(pr), limit_(limit) {}

  std::optional<Schedule> pass(bool allow_bubble, bool prioritize_b, bool no_bubble_greedy) {
    const int32_t S = pr_.S, m = pr_.m;
    chain_ = pr_.chain();
    nf_.assign(S, 0);
    ni_.assign(S, 0);
    nw_.assign(S, 0);
    e_.assign(S, 0.0);
    mem_.assign(S, 0.0);
    idle_.assign(S, 0.0);
    failed_ = false;
    Schedule out = pr_.shape;
    out.programs.assign(pr_.p, {});
    progs_ = &out.programs;
    auto allowance = [&](int32_t j) {
      return *std::max_element(idle_.begin(), idle_.end()) - idle_[j];
    };
    // W before an action whose input arrives at `at`.
    auto fill_before = [&](int32_t j, double at) {
      while (nw_[j] < ni_[j] && e_[j] + pr_.stage[j].cw <= at) put(j, ActionType::kBackwardWeight);
      if (nw_[j] < ni_[j] && e_[j] < at) {
        if (at - e_[j] > allowance(j) || no_bubble_greedy) put(j, ActionType::kBackwardWeight);
      }
    };
    auto arrival_f = [&](int32_t j) {  // F of microbatch nf_[j] from stage j - 1
      const double e = chain_.end_f(j - 1, nf_[j]);
      return e == zb::ChainTimes::kUnplaced ? e : e + pr_.stage[j - 1].comm_f;
    };
    auto arrival_i = [&](int32_t j, int32_t k) {  // I of microbatch k from stage j + 1
      const double e = chain_.end_i(j + 1, k);
      return e == zb::ChainTimes::kUnplaced ? e : e + pr_.stage[j + 1].comm_b;
    };

    for (int32_t j = 0; j < S; ++j) put(j, ActionType::kForward);
    std::vector<int32_t> extra(S, 0);
    double last = 0;  // when microbatch 0's I ends on the stage below
    for (int32_t j = S - 1; j >= 0 && !failed_; --j) {
      const zb::Problem::Stage& z = pr_.stage[j];
      if (j == S - 1) {
        last = chain_.end_f(j, 0) + z.ci;
        continue;
      }
      const double comm = pr_.stage[j + 1].comm_b;
      double mem = mem_[j], t = e_[j];
      while (nf_[j] + extra[j] < m && mem + z.unit <= limit_ + zb::kMemEps) {
        if (allow_bubble ? t + z.cf > last + comm : t >= last + comm) break;
        mem += z.unit;
        t += z.cf;
        ++extra[j];
      }
      last = std::max(t, last + comm) + z.ci;
    }
    for (int32_t j = 1; j < S; ++j) {
      while (extra[j] > 0 && extra[j] >= extra[j - 1] && nf_[j] + extra[j] < m) --extra[j];
    }
    for (int32_t j = 0; j < S; ++j) {
      for (int32_t k = 0; k < extra[j]; ++k) put(j, ActionType::kForward);
    }
    for (int32_t j = S - 1; j >= 0; --j) put(j, ActionType::kBackwardInput);

    for (int32_t i = 1; i < m && !failed_; ++i) {
      std::vector<char> want(S, 0);
      for (int32_t j = 0; j < S; ++j) {
        if (nf_[j] >= m) continue;
        if (j + 1 < S && nf_[j] >= nf_[j + 1] + 2 && prioritize_b) {
          const zb::Problem::Stage& n = pr_.stage[j + 1];
          const double next = e_[j + 1] + n.cf + n.ci + n.comm_b;
          if (e_[j] >= next) continue;
          const zb::Problem::Stage& z = pr_.stage[j];
          double w_time = 0, with_w = mem_[j] + z.unit;
          for (int32_t c = 0; with_w > limit_ + zb::kMemEps && nw_[j] + c < ni_[j]; ++c) {
            w_time += z.cw;
            with_w -= z.frac * z.unit;
          }
          if (e_[j] + z.cf + w_time <= next) {
            want[j] = 1;
            continue;
          }
          if (next - e_[j] <= allowance(j)) continue;
        }
        want[j] = 1;
      }
      for (int32_t j = S - 2; j >= 0; --j) want[j] = std::min(want[j], want[j + 1]);
      for (int32_t j = 0; j < S && !failed_; ++j) {
        if (!want[j]) continue;
        while (mem_[j] + pr_.stage[j].unit > limit_ + zb::kMemEps) {
          if (nw_[j] >= ni_[j]) return std::nullopt;
          put(j, ActionType::kBackwardWeight);
        }
        if (j > 0) {
          const double at = arrival_f(j);
          if (at == zb::ChainTimes::kUnplaced) return std::nullopt;
          fill_before(j, at);
        }
        put(j, ActionType::kForward);
      }
      for (int32_t j = S - 1; j >= 0 && !failed_; --j) {
        if (ni_[j] != i) return std::nullopt;
        if (j + 1 < S) {
          const double at = arrival_i(j, i);
          if (at == zb::ChainTimes::kUnplaced) return std::nullopt;
          fill_before(j, at);
        }
        if (j == 0 && nf_[j] == m) {
          while (nw_[j] < ni_[j]) put(j, ActionType::kBackwardWeight);
        }
        put(j, ActionType::kBackwardInput);
      }
    }
    for (int32_t j = 0; j < S && !failed_; ++j) {
      while (nw_[j] < m && !failed_) put(j, ActionType::kBackwardWeight);
    }
    if (failed_) return std::nullopt;
    return out;
  }

 private:
  // Stage j places its next action of `type` at the later of its lane and its input; a missing
  // input, a count over m or memory over the limit fails the pass.
  void put(int32_t j, ActionType type) {
    if (failed_) return;
    const zb::Problem::Stage& z = pr_.stage[j];
    int32_t& n = type == ActionType::kForward         ? nf_[j]
                 : type == ActionType::kBackwardInput ? ni_[j]
                                                      : nw_[j];
    const int32_t before = type == ActionType::kForward         ? pr_.m
                           : type == ActionType::kBackwardInput ? nf_[j]
                                                                : ni_[j];
    if (n >= before) {
      failed_ = true;
      return;
    }
    double ready = e_[j];
    if (type == ActionType::kForward) ready = chain_.ready_f(j, n);
    if (type == ActionType::kBackwardInput) ready = chain_.ready_i(j, n);
    if (ready == zb::ChainTimes::kUnplaced) {
      failed_ = true;
      return;
    }
    const double start = std::max(e_[j], ready);
    if (nf_[j] > 0) idle_[j] += start - e_[j];
    switch (type) {
      case ActionType::kForward:
        e_[j] = start + z.cf;
        chain_.end_f(j, n) = e_[j];
        mem_[j] += z.unit;
        if (mem_[j] > limit_ + zb::kMemEps) failed_ = true;
        break;
      case ActionType::kBackwardInput:
        e_[j] = start + z.ci;
        chain_.end_i(j, n) = e_[j];
        mem_[j] -= (1 - z.frac) * z.unit;
        break;
      default:
        e_[j] = start + z.cw;
        mem_[j] -= z.frac * z.unit;
        break;
    }
    (*progs_)[pr_.shape.rank_of(j)].push_back({type, j, n++});
  }

  const zb::Problem& pr_;
  double limit_;
  zb::ChainTimes chain_;
  std::vector<int32_t> nf_, ni_, nw_;   // per stage: F, I, W placed
  std::vector<double> e_, mem_, idle_;  // per stage: lane free at, memory count, idle
  std::vector<std::vector<Action>>* progs_ = nullptr;
  bool failed_ = false;
};
}  // namespace

ZbObjective zb_objective_for(bool optimizer_post_validated) {
  return optimizer_post_validated ? ZbObjective::kSpan : ZbObjective::kMakespan;
}

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
  // The authors' greedy at each limit, in its 8 variants (their order).
  auto authors = [&pr](double l) {
    std::vector<Schedule> out;
    AuthorsGreedy g(pr, l);
    for (bool allow_bubble : {true, false}) {
      for (bool prioritize_b : {true, false}) {
        for (bool no_bubble_greedy : {true, false}) {
          if (auto s = g.pass(allow_bubble, prioritize_b, no_bubble_greedy)) {
            out.push_back(std::move(*s));
          }
        }
      }
    }
    return out;
  };
  return zb::build_list_schedule(pr, costs, limit, o.objective, budget, std::move(hand), "zb-auto",
                                 authors);
}

}  // namespace tightpipe
