// improve_schedule(): a local search after the zero-bubble greedy (auto_schedule.h; rules in
// docs/cost_model.md, "zb-auto").
//
// The neighbourhood: one action of one rank's program moves by a few positions (the actions in
// between shift by one). First the actions on the critical chain of the current schedule (from
// the direct timing, zb_timing.h: the chain of same-rank and dependency edges that ends the
// objective) are tried, latest first; then a fixed cyclic order (rank, position, shift) goes on
// where it stopped; after every kept move the search returns to the new critical chain. Each move
// goes through cheap checks first and is timed only if it passes them:
//   1. the order on the rank: the action does not jump over one it depends on, nor over one
//      that depends on it (Timing::needs: dependencies(), the schedule module's rule);
//   2. memory: the moved rank's zb_peak_memory_units stays within the limit;
//   3. the direct timing (O(N), simulate(lower(s))'s times) finishes: a move on one rank can
//      deadlock against another rank's order;
//   4. the score (zb_score.h) strictly improves, with the sum over ranks of the objective's
//      per-rank measure as a last tie-break (so the search crosses plateaus where one move cannot
//      yet shorten the longest rank); else the move is undone.
// The search stops when a whole cycle of moves has brought no improvement (a local optimum), or
// at the time or evaluation budget. Strict improvement of a lexicographic score means no move
// sequence can cycle, and the result is never worse than the input.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/zb_score.h"
#include "sim/zb_timing.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

using Clock = std::chrono::steady_clock;
using zb::kMemEps;
using zb::Score;
using zb::Timing;

// How far the action at a position moves, in the order tried. +1 swaps it with the next action
// (-1 would repeat that swap from the other side). The shifts past kShortShifts move W only: a W
// may fill a gap anywhere after its I, while a far F or I move rarely keeps the order valid.
constexpr int32_t kShifts[] = {1, -2, 2, -3, 3, -4, 4, -6, 6, -8, 8, -12, 12, -16, 16};
constexpr int32_t kNumShifts = static_cast<int32_t>(std::size(kShifts));
constexpr int32_t kShortShifts = 7;

// The first line of a status message (validate() appends the schedule's grid).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// A schedule's score plus the search's tie-break (zb_score.h, rank_sum).
struct Scored {
  Score score;
  double rank_sum = 0;

  // Lexicographic over (objective, other measure, peak, rank_sum); a component decides only when
  // it is lower by more than a relative 1e-9 (reordering moves sums by an ulp), and none before
  // it may be higher at all, so the Score of an accepted move is never above the current one.
  bool beats(const Scored& b) const {
    const double x[] = {score.primary, score.secondary, score.peak, rank_sum};
    const double y[] = {b.score.primary, b.score.secondary, b.score.peak, b.rank_sum};
    for (int k = 0; k < 4; ++k) {
      if (x[k] < y[k] - 1e-9 * std::max(1.0, std::abs(y[k]))) return true;
      if (x[k] > y[k]) return false;
    }
    return false;
  }
};

class LocalSearch {
 public:
  LocalSearch(Schedule s, Timing timing, const std::vector<double>& fractions,
              std::vector<double> units, double limit, ZbObjective objective,
              const SearchBudget& budget, SearchStats& stats)
      : s_(std::move(s)),
        timing_(std::move(timing)),
        frac_(fractions),
        units_(std::move(units)),
        limit_(limit),
        objective_(objective),
        budget_(budget),
        stats_(stats),
        start_(Clock::now()) {}

  // Scores the input, then searches; returns the best schedule found.
  Result<Schedule> run() {
    rank_peak_ = zb_peak_memory_units(s_, frac_, units_);
    if (!timing_.run(s_)) {
      return Status::invalid_argument(fmt::format(
          "schedule '{}': its programs cannot finish (a cycle across ranks); hint: validate() it",
          s_.name));
    }
    current_ = scored();
    ++stats_.evaluations;
    stats_.start_objective = current_.score.primary;
    // One slot per (rank, position, shift); moves keep every program's length.
    std::vector<int64_t> rank_first(s_.num_ranks + 1, 0);
    for (int32_t r = 0; r < s_.num_ranks; ++r) {
      rank_first[r + 1] = rank_first[r] + static_cast<int64_t>(s_.programs[r].size()) * kNumShifts;
    }
    const int64_t slots = rank_first.back();
    int64_t since_improvement = 0;
    bool stopped = false;
    // First the moves of the actions on the critical chain, again after each kept move; then the
    // cyclic sweep (a kept move there sends the search back to the critical chain).
    while (!stopped) {
      bool kept = false;
      TP_CHECK(timing_.run(s_), "search: the current schedule stopped finishing");
      const std::vector<std::pair<int32_t, int32_t>> chain = timing_.critical_chain(s_, objective_);
      for (size_t c = 0; c < chain.size() && !kept && !stopped; ++c) {
        for (int32_t k = 0; k < kNumShifts && !kept; ++k) {
          if ((stopped = out_of_budget())) break;
          const auto [r, from] = chain[c];
          kept = try_move(r, from, from + kShifts[k], k);
        }
      }
      if (kept) {
        since_improvement = 0;
        continue;
      }
      if (!stopped) stopped = !sweep(rank_first, since_improvement);
    }
    stats_.local_optimum = since_improvement >= slots;
    stats_.final_objective = current_.score.primary;
    return std::move(s_);
  }

 private:
  // The cyclic sweep from slot_ until a move is kept (true) or a whole cycle keeps none or the
  // budget ends (false).
  bool sweep(const std::vector<int64_t>& rank_first, int64_t& since_improvement) {
    const int64_t slots = rank_first.back();
    for (; since_improvement < slots; slot_ = (slot_ + 1) % slots) {
      const int64_t slot = slot_;
      const int32_t r = static_cast<int32_t>(
          std::upper_bound(rank_first.begin(), rank_first.end(), slot) - rank_first.begin() - 1);
      const int64_t local = slot - rank_first[r];
      const int32_t from = static_cast<int32_t>(local / kNumShifts);
      const int32_t shift_index = static_cast<int32_t>(local % kNumShifts);
      if (out_of_budget()) return false;
      ++since_improvement;
      if (try_move(r, from, from + kShifts[shift_index], shift_index)) {
        since_improvement = 0;
        slot_ = (slot_ + 1) % slots;
        return true;
      }
    }
    return false;
  }

  bool out_of_budget() {
    if (stats_.evaluations >= budget_.max_evaluations) {
      stats_.evaluation_limited = true;
      return true;
    }
    if (elapsed_ms() >= budget_.ms) {
      stats_.time_limited = true;
      return true;
    }
    return false;
  }

  double elapsed_ms() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }

  // The score of the programs timing_ last ran.
  Scored scored() const {
    Scored c;
    const double peak = *std::max_element(rank_peak_.begin(), rank_peak_.end());
    const double other = objective_ == ZbObjective::kSpan ? timing_.makespan() : timing_.span();
    c.score = Score{timing_.objective(objective_), other, peak};
    c.rank_sum = timing_.rank_sum(objective_);
    return c;
  }

  // The memory peak of rank r's program alone (zb_peak_memory_units' rule).
  double rank_peak(int32_t r) const {
    Schedule one;
    one.num_ranks = 1;
    one.num_stages = s_.num_stages;
    one.programs = {s_.programs[r]};
    // zb_peak_memory_units needs the chunk count for its even units only; units_ is explicit.
    return zb_peak_memory_units(one, frac_, units_)[0];
  }

  // Moves rank r's action at `from` to `to` if every check passes and the score improves.
  bool try_move(int32_t r, int32_t from, int32_t to, int32_t shift_index) {
    std::vector<Action>& prog = s_.programs[r];
    if (to < 0 || to >= static_cast<int32_t>(prog.size())) return false;
    if (shift_index >= kShortShifts && prog[from].type != ActionType::kBackwardWeight) return false;
    if (only_passes_twins(prog, from, to)) return false;
    ++stats_.moves_tried;
    if (!keeps_rank_order(prog, from, to)) return false;
    move(prog, from, to);
    bool keep = false;
    const double old_peak = rank_peak_[r];
    rank_peak_[r] = rank_peak(r);
    if (rank_peak_[r] <= limit_ + kMemEps) {
      ++stats_.evaluations;
      if (timing_.run(s_)) {  // false: the move deadlocks against another rank's order
        const Scored c = scored();
        if (c.beats(current_)) {
          current_ = c;
          ++stats_.accepted;
          keep = true;
        }
      }
    }
    if (!keep) {
      move(prog, to, from);
      rank_peak_[r] = old_peak;
    }
    return keep;
  }

  // The action at `from` lands at `to`; the ones in between shift towards `from`.
  static void move(std::vector<Action>& prog, int32_t from, int32_t to) {
    if (from < to) {
      std::rotate(prog.begin() + from, prog.begin() + from + 1, prog.begin() + to + 1);
    } else {
      std::rotate(prog.begin() + to, prog.begin() + from, prog.begin() + from + 1);
    }
  }

  // True if a W would pass only W of its own stage: that relabels microbatches of equal cost and
  // equal memory, so nothing changes.
  static bool only_passes_twins(const std::vector<Action>& prog, int32_t from, int32_t to) {
    const Action& a = prog[from];
    if (a.type != ActionType::kBackwardWeight) return false;
    for (int32_t k = std::min(from, to); k <= std::max(from, to); ++k) {
      if (prog[k].type != a.type || prog[k].stage != a.stage) return false;
    }
    return true;
  }

  // False if the action at `from` would pass one it depends on (moving earlier) or one that
  // depends on it (moving later), by dependencies()' rule (Timing::needs; B meets I).
  bool keeps_rank_order(const std::vector<Action>& prog, int32_t from, int32_t to) const {
    const Action& a = prog[from];
    if (to < from) {
      for (int32_t k = to; k < from; ++k) {
        if (timing_.needs(a, prog[k])) return false;
      }
      return true;
    }
    for (int32_t k = from + 1; k <= to; ++k) {
      if (timing_.needs(prog[k], a)) return false;
    }
    return true;
  }

  Schedule s_;
  Timing timing_;
  const std::vector<double>& frac_;
  const std::vector<double> units_;  // what each stage's F adds (zb_f_memory_units)
  std::vector<double> rank_peak_;    // per rank, of the current programs
  double limit_;
  ZbObjective objective_;
  SearchBudget budget_;
  SearchStats& stats_;
  Clock::time_point start_;
  Scored current_;
  int64_t slot_ = 0;  // where the cyclic sweep goes on
};

}  // namespace

Result<Schedule> improve_schedule(const Schedule& compute_only, const CostModel& costs,
                                  const std::vector<double>& w_fractions, double memory_limit,
                                  ZbObjective objective, const SearchBudget& budget,
                                  SearchStats* stats) {
  SearchStats local_stats;
  SearchStats& st = stats != nullptr ? *stats : local_stats;
  st = SearchStats{};
  if (!std::isfinite(budget.ms) || budget.ms < 0 || budget.max_evaluations < 0) {
    return Status::invalid_argument(fmt::format(
        "search budget {} ms, {} evaluations: must be finite and not negative; hint: 0 ms keeps "
        "the input as it is",
        budget.ms, budget.max_evaluations));
  }
  if (compute_only.lowered || compute_only.has_comm_actions()) {
    return Status::invalid_argument(fmt::format(
        "schedule '{}': the search takes a compute-only schedule (F, I, W), not a lowered one; "
        "hint: pass compute_only(schedule)",
        compute_only.name));
  }
  if (static_cast<int32_t>(w_fractions.size()) != compute_only.num_stages) {
    return Status::invalid_argument(
        fmt::format("w-memory fractions: {} given for {} stage(s); hint: one per stage "
                    "(zb_w_memory_fractions)",
                    w_fractions.size(), compute_only.num_stages));
  }
  if (const Status v = validate(compute_only); !v.ok()) {
    return Status::invalid_argument(
        fmt::format("{}; hint: the search starts from a valid schedule", first_line(v.message())));
  }
  if (const Status c = costs.covers(compute_only); !c.ok()) return c;
  const double peak =
      zb::max_peak_units(compute_only, w_fractions, zb_f_memory_units(costs, compute_only));
  if (!(peak <= memory_limit + kMemEps)) {
    return Status::invalid_argument(fmt::format(
        "--memory-limit {}: schedule '{}' already holds {} microbatch activations on a rank; "
        "hint: start the search from a schedule within the limit, or raise the limit",
        memory_limit, compute_only.name, peak));
  }
  const Clock::time_point start = Clock::now();
  Result<Schedule> out = compute_only;
  if (budget.ms == 0 || budget.max_evaluations == 0) {
    st.time_limited = budget.ms == 0;
    st.evaluation_limited = budget.max_evaluations == 0;
  } else {
    TP_ASSIGN_OR_RETURN(zb::Timing timing, zb::Timing::make(compute_only, costs));
    out = LocalSearch(compute_only, std::move(timing), w_fractions,
                      zb_f_memory_units(costs, compute_only), memory_limit, objective, budget, st)
              .run();
  }
  st.elapsed_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return out;
}

}  // namespace tightpipe
