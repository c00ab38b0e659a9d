// zb-auto: a single-chunk zero-bubble schedule built from a cost table under a memory limit
// (auto_schedule.h; rules in docs/cost_model.md, "zb-auto").
//
// Phases:
//   1. greedy_schedule(): one list-scheduling pass. Every stage keeps the time its lane is free;
//      the stage whose next action can start earliest commits it (so each decision sees every
//      action that starts before it). At a stage, in order: an I that is ready runs (the upstream
//      stage waits for it); else an F that is ready and fits the memory limit; else a pending W,
//      to free memory for a ready F or to fill the gap until the next F or I is ready; else the
//      stage waits. Three yes/no knobs vary this: F before a ready I, F only when it ends before
//      the I it would delay, and W only when it ends before the next F or I is ready; and a cap
//      on the F in flight per stage sets the warm-up: none (memory only), l - s (1F1B's and
//      ZB-H1's shape) or l - 1 - 2s (ZB-H2's), for memory limit l.
//   2. build_zb_auto(): the greedy pass for every knob and cap combination (24) and every integer
//      memory limit up to the requested one (so a larger limit never loses a candidate), plus
//      zb-h1 and zb-h2 where they fit the limit; each distinct candidate is lowered and
//      simulated, the best in the objective wins (ties: the earlier, handcrafted first).
//   3. improve_schedule() (zb_search.cc): a local search from the winner, within the budget.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "sim/zb_chain.h"
#include "sim/zb_score.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
using zb::kMemEps;
using zb::lower_case;
using zb::Score;

struct Knobs {
  // Most F in flight (F done, I not yet) on stage s: base - slope * s, at least 1; slope 0: only
  // the memory limit bounds them. Slope 1 from base p is 1F1B's and ZB-H1's warm-up, slope 2 from
  // base 2p - 1 ZB-H2's.
  int32_t cap_base = 0;
  int32_t cap_slope = 0;
  bool f_before_i = false;      // a ready F (that fits) runs before a ready I
  bool f_just_in_time = false;  // an F runs only if it ends before the (estimated) next I
  bool w_closes_gap = false;    // a gap-filling W runs only if it ends before the next F or I
};

// One greedy list-scheduling pass (see the file comment).
class Greedy {
 public:
  Greedy(int32_t p, int32_t m, const CostModel& costs, const std::vector<double>& fractions,
         double limit, Knobs knobs)
      : p_(p), m_(m), frac_(fractions), limit_(limit), knobs_(knobs) {
    st_.resize(p);
    // The placement run() builds: each action's time includes its message overhead, as the
    // simulator charges it (CostModel::action_time).
    Schedule shape;
    shape.num_ranks = shape.num_stages = p;
    shape.stage_to_rank = place_stages(Placement::kLoop, p, p);
    for (int32_t s = 0; s < p; ++s) {
      st_[s].cf = costs.action_time(shape, {ActionType::kForward, s, 0});
      st_[s].ci = costs.action_time(shape, {ActionType::kBackwardInput, s, 0});
      st_[s].cw = costs.action_time(shape, {ActionType::kBackwardWeight, s, 0});
      st_[s].comm_f = s + 1 < p ? costs.message_time(s, s + 1) : 0;
      st_[s].comm_b = s > 0 ? costs.message_time(s, s - 1) : 0;
    }
    std::vector<zb::ChainTimes::Stage> chain;
    for (const StageState& x : st_) chain.push_back({x.cf, x.ci, x.comm_f, x.comm_b});
    chain_ = zb::ChainTimes(std::move(chain), m);
  }

  Schedule run() {
    Schedule out;
    out.name = "zb-auto";
    out.num_ranks = p_;
    out.num_stages = p_;
    out.num_microbatches = m_;
    out.stage_to_rank = place_stages(Placement::kLoop, p_, p_);
    out.programs.resize(p_);
    std::vector<Choice> choice(p_);
    for (int32_t s = 0; s < p_; ++s) choice[s] = decide(s);
    const int64_t total = 3LL * p_ * m_;
    for (int64_t n = 0; n < total; ++n) {
      int32_t best = -1;
      for (int32_t s = 0; s < p_; ++s) {
        if (choice[s].type && (best < 0 || choice[s].start < choice[best].start)) best = s;
      }
      if (best < 0) {  // every stage waits on a knob: decide once without them
        for (int32_t s = 0; s < p_; ++s) {
          choice[s] = decide(s, /*relaxed=*/true);
          if (choice[s].type && (best < 0 || choice[s].start < choice[best].start)) best = s;
        }
      }
      TP_CHECK(best >= 0, "zb-auto: greedy pass stalled after ", n, " actions");
      commit(best, choice[best], out.programs[best]);
      for (int32_t s = std::max(0, best - 1); s <= std::min(p_ - 1, best + 1); ++s) {
        choice[s] = decide(s);
      }
    }
    return out;
  }

 private:
  struct StageState {
    double free_at = 0;
    int32_t nf = 0, ni = 0, nw = 0;  // next microbatch of F, I, W
    double mem = 0;
    double cf = 0, ci = 0, cw = 0;  // compute times
    double comm_f = 0, comm_b = 0;  // message time to stage + 1 (activation), - 1 (gradient)
  };
  struct Choice {
    std::optional<ActionType> type;  // nullopt: nothing can be decided yet
    double start = kInf;
  };

  double& end_f(int32_t s, int32_t k) { return chain_.end_f(s, k); }
  double& end_i(int32_t s, int32_t k) { return chain_.end_i(s, k); }

  // When the next F of s can start by its dependencies (kInf: its input is not placed yet).
  double ready_f(int32_t s) { return st_[s].nf >= m_ ? kInf : chain_.ready_f(s, st_[s].nf); }
  // When the next I of s can start by its dependencies (kInf: not placed downstream yet).
  double ready_i(int32_t s) { return st_[s].ni >= st_[s].nf ? kInf : chain_.ready_i(s, st_[s].ni); }
  // A lower bound on when the next I of s can start (zb_chain.h), each stage no earlier than its
  // lane is free.
  double estimate_i(int32_t s) {
    if (st_[s].ni >= st_[s].nf) return kInf;
    return chain_.estimate_i(s, st_[s].ni, [&](int32_t j) { return st_[j].free_at; });
  }

  // The next action of s. `relaxed` drops the two waiting knobs (used only if no stage could
  // decide otherwise, so the pass always finishes).
  Choice decide(int32_t s, bool relaxed = false) {
    StageState& x = st_[s];
    if (x.nf >= m_ && x.ni >= m_ && x.nw >= m_) return {};
    const double t = x.free_at;
    const double tf = ready_f(s);
    const double ti = ready_i(s);
    const bool mem_fits = x.mem + 1 <= limit_ + kMemEps;
    const bool cap_fits =
        knobs_.cap_slope == 0 || x.nf - x.ni < std::max(1, knobs_.cap_base - knobs_.cap_slope * s);
    const bool f_fits = mem_fits && cap_fits;
    const bool has_w = x.nw < x.ni;
    const double est_i = x.ni < x.nf ? estimate_i(s) : kInf;
    bool f_ok = f_fits && tf < kInf;
    if (f_ok && knobs_.f_just_in_time && !relaxed && est_i < kInf &&
        std::max(t, tf) + x.cf > est_i + kMemEps) {
      f_ok = false;  // this F would delay the next I: wait for the I instead
    }
    const bool f_now = f_ok && tf <= t;
    const bool i_now = ti <= t;
    if (i_now && f_now && knobs_.f_before_i) return {ActionType::kForward, t};
    if (i_now) return {ActionType::kBackwardInput, t};
    if (f_now) return {ActionType::kForward, t};
    // A gap, or an F that waits for memory: a pending W may run.
    if (has_w) {
      const double next = std::min(f_ok ? tf : kInf, est_i);
      const bool memory_bound = tf <= t && !mem_fits && cap_fits;
      if (memory_bound || relaxed || !knobs_.w_closes_gap || t + x.cw <= next + kMemEps) {
        return {ActionType::kBackwardWeight, t};
      }
    }
    // Wait for the earliest known F or I; the pass re-decides when a neighbour commits.
    const double wake = std::min(f_ok ? tf : kInf, ti);
    if (wake == kInf) return {};
    if (ti <= wake) return {ActionType::kBackwardInput, std::max(t, ti)};
    return {ActionType::kForward, std::max(t, tf)};
  }

  void commit(int32_t s, const Choice& c, std::vector<Action>& prog) {
    StageState& x = st_[s];
    switch (*c.type) {
      case ActionType::kForward:
        x.free_at = c.start + x.cf;
        end_f(s, x.nf) = x.free_at;
        prog.push_back({ActionType::kForward, s, x.nf++});
        x.mem += 1;
        TP_CHECK(x.mem <= limit_ + 1e-6, "zb-auto: memory ", x.mem, " over ", limit_);
        break;
      case ActionType::kBackwardInput:
        x.free_at = c.start + x.ci;
        end_i(s, x.ni) = x.free_at;
        prog.push_back({ActionType::kBackwardInput, s, x.ni++});
        x.mem -= 1 - frac_[s];
        break;
      case ActionType::kBackwardWeight:
        x.free_at = c.start + x.cw;
        prog.push_back({ActionType::kBackwardWeight, s, x.nw++});
        x.mem -= frac_[s];
        break;
      default:
        TP_CHECK(false, "zb-auto: unexpected action type");
    }
  }

  int32_t p_, m_;
  const std::vector<double>& frac_;
  double limit_;
  Knobs knobs_;
  std::vector<StageState> st_;
  zb::ChainTimes chain_;  // the placed F and I end times, and the dependency timing
};

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
  const std::vector<double> frac = zb_w_memory_fractions(costs, o);
  auto peak_of = [&](const Schedule& s) { return zb::max_peak_units(s, frac); };
  auto fits = [&](const Schedule& s) { return peak_of(s) <= limit + kMemEps; };

  std::optional<Schedule> best;
  Score best_score;
  std::unordered_set<std::string> seen;  // candidates already scored (many knobs agree)
  auto consider = [&](Schedule s) -> Status {
    TP_CHECK(fits(s), "zb-auto candidate '", s.name, "' exceeds the memory limit ", limit);
    if (!seen.insert(to_csv(s)).second) return OkStatus();
    TP_ASSIGN_OR_RETURN(Score sc, zb::score_schedule(s, costs, o.objective, peak_of(s)));
    if (!best || sc < best_score) {
      best = std::move(s);
      best_score = sc;
    }
    return OkStatus();
  };

  // The handcrafted schedules that fit, each at the first limit it fits in, before that limit's
  // greedy passes: on an exact tie they win (their rule is documented).
  std::vector<std::pair<Schedule, double>> hand;
  for (const char* name : {"zb-h1", "zb-h2"}) {
    auto s = generate_schedule(name, {.ranks = p, .microbatches = m, .chunks = 1});
    if (s.ok() && fits(*s)) hand.emplace_back(std::move(s).value(), 0.0);
  }
  for (auto& [s, peak] : hand) peak = peak_of(s);
  auto consider_hand = [&](double l) -> Status {
    for (auto& [s, peak] : hand) {
      if (peak <= l + kMemEps && !s.programs.empty()) {
        TP_RETURN_IF_ERROR(consider(std::move(s)));
        s.programs.clear();  // considered
      }
    }
    return OkStatus();
  };
  std::vector<std::pair<Schedule, double>> starts;  // the best up to each limit
  // Every integer limit up to the requested one (holding more than m is never needed), and the
  // limit itself: the candidates of a smaller integer limit are among those of a larger one.
  const double top = std::min(limit, static_cast<double>(m));
  std::vector<double> limits;
  for (int32_t k = static_cast<int32_t>(kZbAutoMinMemoryLimit); k <= top + kMemEps; ++k) {
    limits.push_back(k);
  }
  if (limits.empty() || limits.back() < top - kMemEps) limits.push_back(top);
  for (double l : limits) {
    TP_RETURN_IF_ERROR(consider_hand(l));
    const int32_t base = static_cast<int32_t>(std::floor(l + kMemEps));
    for (int bits = 0; bits < 24; ++bits) {
      const int family = bits / 8;  // 0: memory only; 1: base l, slope 1; 2: base l - 1, slope 2
      const Knobs k{.cap_base = family == 2 ? base - 1 : base,
                    .cap_slope = family,
                    .f_before_i = (bits & 1) != 0,
                    .f_just_in_time = (bits & 2) != 0,
                    .w_closes_gap = (bits & 4) != 0};
      TP_RETURN_IF_ERROR(consider(Greedy(p, m, costs, frac, l, k).run()));
    }
    starts.emplace_back(*best, l);
  }
  TP_RETURN_IF_ERROR(consider_hand(limit));  // any that fit only above the last limit tried
  starts.emplace_back(*best, limit);
  const SearchBudget budget =
      o.search_budget_ms == 0.0 ? SearchBudget{.ms = 0} : zb_search_budget(o);
  TP_ASSIGN_OR_RETURN(Schedule out,
                      zb::search_each_limit(starts, costs, frac, o.objective, budget));
  out.name = "zb-auto";
  return out;
}

}  // namespace tightpipe
