// The direct timing of a compute-only schedule (zb_timing.h).
#include "sim/zb_timing.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>

#include "tightpipe/base.h"

namespace tightpipe::zb {

Result<Timing> Timing::make(const Schedule& s, const CostModel& costs) {
  if (s.lowered || s.has_comm_actions()) {
    return Status::invalid_argument(
        fmt::format("schedule '{}': the direct timing takes a compute-only schedule; hint: pass "
                    "compute_only(schedule)",
                    s.name));
  }
  Timing t;
  t.stages_ = s.num_stages;
  t.microbatches_ = s.num_microbatches;
  t.ranks_ = s.num_ranks;
  const size_t keys = size_t{4} * s.num_stages * s.num_microbatches;
  t.node_.assign(keys, Node{});
  std::vector<char> present(keys, 0);
  for (const auto& prog : s.programs) {
    for (const Action& a : prog) {
      if (a.type == ActionType::kOverlapFB || !is_compute(a.type)) {
        return Status::invalid_argument(fmt::format(
            "schedule '{}': action {} is not F, I, W or B; hint: the direct timing (and the "
            "search) take F, I, W and B only",
            s.name, to_string(a)));
      }
      present[t.key(a)] = 1;
    }
  }
  for (const auto& prog : s.programs) {
    for (const Action& a : prog) {
      Node& n = t.node_[t.key(a)];
      n.duration = costs.action_time(s, a);
      int32_t j = 0;
      for (Action d : dependencies(s, a)) {
        if (d.type == ActionType::kBackwardInput && !present[t.key(d)]) {
          d.type = ActionType::kBackward;  // a B satisfies an I requirement
        }
        if (!present[t.key(d)] || j >= 2) {
          return Status::invalid_argument(fmt::format(
              "schedule '{}': {} needs {}, which no program runs; hint: validate() the schedule",
              s.name, to_string(a), to_string(d)));
        }
        n.dep[j] = static_cast<int32_t>(t.key(d));
        n.delay[j] =
            s.rank_of(d.stage) == s.rank_of(a.stage) ? 0.0 : costs.message_time(d.stage, a.stage);
        ++j;
      }
    }
  }
  t.start_.assign(keys, kUnknown);
  t.end_.assign(keys, kUnknown);
  t.waiter_.assign(2 * keys, -1);
  return t;
}

bool Timing::run(const Schedule& s) {
  for (const auto& prog : s.programs) {
    for (const Action& a : prog) {
      const size_t k = key(a);
      start_[k] = end_[k] = kUnknown;
      waiter_[2 * k] = waiter_[2 * k + 1] = -1;
    }
  }
  pos_.assign(ranks_, 0);
  lane_.assign(ranks_, 0.0);
  stack_.clear();
  for (int32_t r = ranks_ - 1; r >= 0; --r) stack_.push_back(r);
  while (!stack_.empty()) {
    const int32_t r = stack_.back();
    stack_.pop_back();
    const std::vector<Action>& prog = s.programs[r];
    while (pos_[r] < static_cast<int32_t>(prog.size())) {
      const size_t k = key(prog[pos_[r]]);
      const Node& n = node_[k];
      double st = lane_[r];
      int32_t blocked_on = -1;
      for (int32_t j = 0; j < 2 && n.dep[j] >= 0; ++j) {
        const double e = end_[n.dep[j]];
        if (e == kUnknown) {
          blocked_on = n.dep[j];
          break;
        }
        st = std::max(st, e + n.delay[j]);
      }
      if (blocked_on >= 0) {
        int32_t* w = &waiter_[2 * static_cast<size_t>(blocked_on)];
        TP_CHECK(w[0] < 0 || w[1] < 0, "Timing: more than two ranks wait on one action");
        (w[0] < 0 ? w[0] : w[1]) = r;
        break;
      }
      start_[k] = st;
      end_[k] = lane_[r] = st + n.duration;
      ++pos_[r];
      for (int32_t slot = 0; slot < 2; ++slot) {
        int32_t& w = waiter_[2 * k + slot];
        if (w >= 0) {
          stack_.push_back(w);
          w = -1;
        }
      }
    }
  }
  makespan_ = span_ = end_sum_ = span_sum_ = 0;
  for (int32_t r = 0; r < ranks_; ++r) {
    const std::vector<Action>& prog = s.programs[r];
    if (pos_[r] != static_cast<int32_t>(prog.size())) return false;
    if (prog.empty()) continue;
    const double first = start_[key(prog.front())];
    makespan_ = std::max(makespan_, lane_[r]);
    span_ = std::max(span_, lane_[r] - first);
    end_sum_ += lane_[r];
    span_sum_ += lane_[r] - first;
  }
  return true;
}

std::vector<std::pair<int32_t, int32_t>> Timing::critical_chain(const Schedule& s,
                                                                ZbObjective objective) const {
  std::vector<std::pair<int32_t, int32_t>> chain;
  std::vector<std::pair<int32_t, int32_t>> where(node_.size(), {-1, -1});
  for (int32_t r = 0; r < s.num_ranks; ++r) {
    for (size_t k = 0; k < s.programs[r].size(); ++k) {
      where[key(s.programs[r][k])] = {r, static_cast<int32_t>(k)};
    }
  }
  int32_t r = 0, k = -1;
  double best = -1;
  for (int32_t q = 0; q < s.num_ranks; ++q) {
    const std::vector<Action>& prog = s.programs[q];
    if (prog.empty()) continue;
    const double v =
        objective == ZbObjective::kSpan ? end(prog.back()) - start(prog.front()) : end(prog.back());
    if (v > best) std::tie(best, r, k) = std::tuple(v, q, static_cast<int32_t>(prog.size()) - 1);
  }
  constexpr double kTol = 1e-9;
  while (k >= 0) {
    chain.push_back({r, k});
    const std::vector<Action>& prog = s.programs[r];
    const double st = start(prog[k]);
    if (k > 0 && end(prog[k - 1]) >= st - kTol) {
      --k;
      continue;
    }
    const Node& n = node_[key(prog[k])];
    std::pair<int32_t, int32_t> next{-1, -1};
    double latest = -1;
    for (int32_t j = 0; j < 2 && n.dep[j] >= 0; ++j) {
      const double arrive = end_[n.dep[j]] + n.delay[j];
      if (arrive > latest) {
        latest = arrive;
        next = where[n.dep[j]];
      }
    }
    std::tie(r, k) = next;
  }
  return chain;
}

}  // namespace tightpipe::zb
