#include "tightpipe/schedule.h"

namespace tightpipe {

Action MessageRoute::send() const {
  return {gradient ? ActionType::kSendGrad : ActionType::kSendAct, src_stage, microbatch};
}

Action MessageRoute::recv() const {
  return {gradient ? ActionType::kRecvGrad : ActionType::kRecvAct, dst_stage, microbatch};
}

std::optional<MessageEnds> message_ends(const Action& a, MessageEnd end) {
  const bool out = end == MessageEnd::kOut;
  bool gradient = false;
  switch (a.type) {
    case ActionType::kForward:
      break;
    case ActionType::kBackwardInput:
    case ActionType::kBackward:
      gradient = true;
      break;
    case ActionType::kBackwardWeight:
    case ActionType::kOverlapFB:  // two messages at each end: the caller asks its sub-actions
      return std::nullopt;
    case ActionType::kSendAct:
    case ActionType::kSendGrad:
      if (!out) return std::nullopt;
      gradient = a.type == ActionType::kSendGrad;
      break;
    case ActionType::kRecvAct:
    case ActionType::kRecvGrad:
      if (out) return std::nullopt;
      gradient = a.type == ActionType::kRecvGrad;
      break;
  }
  // Activations travel to the next stage, gradients to the previous one.
  const int32_t direction = gradient ? -1 : 1;
  return MessageEnds{gradient, out ? a.stage + direction : a.stage - direction};
}

std::optional<MessageRoute> message_route(const Schedule& sch, const Action& a, MessageEnd end) {
  TP_CHECK(a.stage >= 0 && a.stage < sch.num_stages &&
               static_cast<int32_t>(sch.stage_to_rank.size()) == sch.num_stages,
           "message_route: ", to_string(a), " with ", sch.num_stages, " stages and ",
           sch.stage_to_rank.size(), " placements");
  const std::optional<MessageEnds> ends = message_ends(a, end);
  if (!ends) return std::nullopt;
  const bool out = end == MessageEnd::kOut, gradient = ends->gradient;
  const int32_t other = ends->other_stage;
  // No message leaves the pipeline, nor crosses from one direction's pipeline to the other's.
  if (other < 0 || other >= sch.num_stages ||
      sch.direction_of_stage(other) != sch.direction_of_stage(a.stage)) {
    return std::nullopt;
  }
  MessageRoute m;
  m.gradient = gradient;
  m.microbatch = a.microbatch;
  m.src_stage = out ? a.stage : other;
  m.dst_stage = out ? other : a.stage;
  m.src_rank = sch.rank_of(m.src_stage);
  m.dst_rank = sch.rank_of(m.dst_stage);
  return m;
}

int32_t remote_messages(const Schedule& sch, const Action& a) {
  int32_t n = 0;
  for (const Action& sub : sub_actions(a)) {
    for (MessageEnd end : {MessageEnd::kOut, MessageEnd::kIn}) {
      const std::optional<MessageRoute> m = message_route(sch, sub, end);
      n += m && !m->local();
    }
  }
  return n;
}

namespace {
void append_dependencies(const Schedule& sch, const Action& a, std::vector<Action>& deps) {
  const int32_t s = a.stage, mb = a.microbatch;
  // The message a compute action consumes: through its RECV when lowered and it crosses ranks,
  // else straight from the compute action that produced it.
  auto input_message = [&] {
    const std::optional<MessageRoute> in = message_route(sch, a, MessageEnd::kIn);
    if (!in) return;
    if (sch.lowered && !in->local()) {
      deps.push_back(in->recv());
    } else {
      deps.push_back(
          {in->gradient ? ActionType::kBackwardInput : ActionType::kForward, in->src_stage, mb});
    }
  };
  switch (a.type) {
    case ActionType::kForward:
      input_message();
      break;
    case ActionType::kBackwardInput:
    case ActionType::kBackward:
      deps.push_back({ActionType::kForward, s, mb});
      input_message();
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
    case ActionType::kRecvGrad:
      if (auto in = message_route(sch, a, MessageEnd::kIn)) deps.push_back(in->send());
      break;
    case ActionType::kOverlapFB:
      // The one rule, asked for each sub-action: the pair starts once both could.
      for (const Action& sub : sub_actions(a)) append_dependencies(sch, sub, deps);
      break;
  }
}
}  // namespace

std::vector<Action> dependencies(const Schedule& sch, const Action& a) {
  std::vector<Action> deps;
  append_dependencies(sch, a, deps);
  return deps;
}

CompletionSet::CompletionSet(const Schedule& sch)
    : stages_(sch.num_stages),
      microbatches_(sch.num_microbatches),
      done_(static_cast<size_t>(kNumActionTypes) * sch.num_stages * sch.num_microbatches, 0) {}

size_t CompletionSet::index(ActionType t, int32_t stage, int32_t mb) const {
  TP_CHECK(stage >= 0 && stage < stages_ && mb >= 0 && mb < microbatches_, "stage=", stage,
           " mb=", mb);
  return (static_cast<size_t>(t) * stages_ + stage) * microbatches_ + mb;
}

void CompletionSet::mark(const Action& a) {
  if (a.type == ActionType::kOverlapFB) {
    for (const Action& sub : sub_actions(a)) mark(sub);
    return;
  }
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
