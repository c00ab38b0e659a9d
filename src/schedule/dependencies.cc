#include "tightpipe/schedule.h"

namespace tightpipe {

std::vector<Action> dependencies(const Schedule& sch, const Action& a) {
  const int32_t s = a.stage, mb = a.microbatch;
  const bool lowered = sch.lowered;
  const int32_t last = sch.num_stages - 1;
  std::vector<Action> deps;
  // Input of stage s comes from stage s-1: locally, or through a RECV when lowered.
  auto upstream_act = [&] {
    if (s == 0) return;
    if (lowered && sch.rank_of(s - 1) != sch.rank_of(s)) {
      deps.push_back({ActionType::kRecvAct, s, mb});
    } else {
      deps.push_back({ActionType::kForward, s - 1, mb});
    }
  };
  auto downstream_grad = [&] {
    if (s == last) return;
    if (lowered && sch.rank_of(s + 1) != sch.rank_of(s)) {
      deps.push_back({ActionType::kRecvGrad, s, mb});
    } else {
      deps.push_back({ActionType::kBackwardInput, s + 1, mb});
    }
  };
  switch (a.type) {
    case ActionType::kForward:
      upstream_act();
      break;
    case ActionType::kBackwardInput:
    case ActionType::kBackward:
      deps.push_back({ActionType::kForward, s, mb});
      downstream_grad();
      break;
    case ActionType::kBackwardWeight:
      deps.push_back({ActionType::kBackwardInput, s, mb});
      break;
    case ActionType::kSendAct:
      deps.push_back({ActionType::kForward, s, mb});
      break;
    case ActionType::kSendGrad:
      deps.push_back({ActionType::kBackwardInput, s, mb});
      break;
    case ActionType::kRecvAct:
      if (s > 0) deps.push_back({ActionType::kSendAct, s - 1, mb});
      break;
    case ActionType::kRecvGrad:
      if (s < last) deps.push_back({ActionType::kSendGrad, s + 1, mb});
      break;
  }
  return deps;
}

CompletionSet::CompletionSet(const Schedule& sch)
    : stages_(sch.num_stages),
      microbatches_(sch.num_microbatches),
      done_(static_cast<size_t>(8) * sch.num_stages * sch.num_microbatches, 0) {}

size_t CompletionSet::index(ActionType t, int32_t stage, int32_t mb) const {
  TP_CHECK(stage >= 0 && stage < stages_ && mb >= 0 && mb < microbatches_, "stage=", stage,
           " mb=", mb);
  return (static_cast<size_t>(t) * stages_ + stage) * microbatches_ + mb;
}

void CompletionSet::mark(const Action& a) {
  done_[index(a.type, a.stage, a.microbatch)] = 1;
  if (a.type == ActionType::kBackward) {
    done_[index(ActionType::kBackwardInput, a.stage, a.microbatch)] = 1;
    done_[index(ActionType::kBackwardWeight, a.stage, a.microbatch)] = 1;
  }
}

bool CompletionSet::has(const Action& r) const {
  if (r.stage < 0 || r.stage >= stages_ || r.microbatch < 0 || r.microbatch >= microbatches_) {
    return false;
  }
  return done_[index(r.type, r.stage, r.microbatch)] != 0;
}

bool CompletionSet::ready(const Schedule& sch, const Action& a) const {
  for (const Action& d : dependencies(sch, a))
    if (!has(d)) return false;
  return true;
}

}  // namespace tightpipe
