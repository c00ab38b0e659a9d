// Internal to the sim module: the times of a compute-only schedule's actions as simulate(lower(s))
// gives them in overlap mode, computed directly in O(N) (N actions) without lowering, validating
// or simulating. The cost-aware builders score hand-made candidates with it and the local search
// (zb_search.cc) scores every move with it; simulate() stays the reference (zb_auto_test checks
// that both agree on every built schedule).
//
// The rule is the simulator's (simulator.h): each rank runs its program in order on one compute
// lane; an action starts when the lane is free and each dependency (dependencies(), schedule.h)
// has ended, plus message_time when the dependency ran on another rank; it holds the lane for
// CostModel::action_time (message overheads included). Messages have no contention, so the times
// are the longest paths of the DAG of program-order and dependency edges; they do not depend on
// the order in which ranks are advanced. Not covered (make() refuses): lowered schedules and
// OVERLAP_F_B pairs. The optimizer phase after the programs adds the same time to every order of
// the same actions and is left out (makespan here is the end of the last compute action).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/status.h"

namespace tightpipe::zb {

class Timing {
 public:
  static constexpr double kUnknown = std::numeric_limits<double>::infinity();

  // The fixed part for the actions of `s` (durations and dependency edges); run() then times any
  // reordering of the same actions within each rank's program. InvalidArgument for a lowered
  // schedule, an OVERLAP_F_B pair, or an action whose dependency is not in the schedule.
  static Result<Timing> make(const Schedule& s, const CostModel& costs);

  // Times the programs of `s` (the same actions per rank as at make()). False if they cannot
  // finish (a cycle across ranks: the simulator's deadlock).
  bool run(const Schedule& s);

  // After a successful run():
  double makespan() const { return makespan_; }
  double span() const { return span_; }  // max over ranks of last end - first start
  // The objective's measure (makespan or span) and the sum over ranks of its per-rank measure
  // (each rank's end, or its span): the search's tie-break.
  double objective(ZbObjective o) const { return o == ZbObjective::kSpan ? span_ : makespan_; }
  double rank_sum(ZbObjective o) const { return o == ZbObjective::kSpan ? span_sum_ : end_sum_; }
  double start(const Action& a) const { return start_[key(a)]; }
  // True if `a` needs `d` (dependencies(); a B stands for the I it includes). Any time after
  // make(), run() or not.
  bool needs(const Action& a, const Action& d) const {
    const Node& n = node_[key(a)];
    const auto k = static_cast<int32_t>(key(d));
    return n.dep[0] == k || n.dep[1] == k;
  }
  double end(const Action& a) const { return end_[key(a)]; }

  // The (rank, position) of the actions on the critical chain, latest first: from the action
  // that ends last (makespan) or the last action of the longest rank (span), back to the
  // previous action on its rank when it started as that one ended, else to the dependency whose
  // arrival started it. REQUIRES: run() returned true for `s`.
  std::vector<std::pair<int32_t, int32_t>> critical_chain(const Schedule& s,
                                                          ZbObjective objective) const;

 private:
  struct Node {
    double duration = 0;
    int32_t dep[2] = {-1, -1};  // keys of the dependencies
    double delay[2] = {0, 0};   // message time on each dependency edge (0 on the same rank)
  };
  size_t key(const Action& a) const {
    return (static_cast<size_t>(a.type) * stages_ + a.stage) * microbatches_ + a.microbatch;
  }

  int32_t stages_ = 0, microbatches_ = 0, ranks_ = 0;
  std::vector<Node> node_;  // by key (F, I, W, B types only)
  std::vector<double> start_, end_;
  std::vector<int32_t> waiter_;  // by key: up to two ranks blocked on it (2 * key, 2 * key + 1)
  std::vector<int32_t> pos_;     // per rank: next program position
  std::vector<double> lane_;     // per rank: when its compute lane is free
  std::vector<int32_t> stack_;
  double makespan_ = 0, span_ = 0, end_sum_ = 0, span_sum_ = 0;
};

}  // namespace tightpipe::zb
