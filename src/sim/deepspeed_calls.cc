// deepspeed_p2p_calls (simulator.h): DeepSpeed's PipelineEngine order of blocking sends and
// receives around its computes (deepspeed/runtime/pipe/schedule.py TrainSchedule.steps, p2p.py).
#include <fmt/format.h>

#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe {

namespace {

// TrainSchedule._step_to_micro_batch: the microbatch of slot `t` on stage `s` of `S`, and whether
// the slot is a forward one (even stages run forwards in even slots, odd stages in odd ones).
struct Slot {
  int32_t mb;
  bool forward;
};
Slot step_to_micro_batch(int32_t t, int32_t s, int32_t S) {
  const bool even_t = t % 2 == 0, even_s = s % 2 == 0;
  if (even_t && even_s) return {t / 2 - s / 2, true};
  if (!even_t && !even_s) return {(t - 1) / 2 - s / 2, true};
  if (even_t) return {t / 2 - S + (s + 1) / 2, false};
  return {(t - 1) / 2 - S + 1 + s / 2, false};
}

}  // namespace

// TrainSchedule.steps: 2 (m + S - 1) slots per stage, alternately forward and backward; a slot's
// instructions are its communication, then its compute. A forward slot runs SendGrad(the previous
// slot's microbatch) then RecvActivation(its own); a backward slot RecvGrad(its own) then
// SendActivation(the previous slot's). A slot whose microbatch is out of range computes nothing
// but still sends the previous slot's output. Every instruction is one blocking dist.send /
// dist.recv: one call each. The computes this yields must be the schedule's order (1F1B).
Result<P2pCalls> deepspeed_p2p_calls(const Schedule& compute_only) {
  const Schedule& in = compute_only;
  if (in.lowered || in.has_comm_actions()) {
    return Status::invalid_argument(fmt::format(
        "deepspeed p2p: schedule '{}' is lowered already; hint: pass the compute-only schedule",
        in.name));
  }
  if (in.directions != 1 || in.num_stages != in.num_ranks) {
    return Status::invalid_argument(fmt::format(
        "--engine deepspeed: DeepSpeed's PipelineEngine does not run schedule '{}' ({} stages on "
        "{} ranks, {} direction(s)); its TrainSchedule is 1F1B with one stage per rank; hint: "
        "--schedule 1f1b, or --engine megatron for interleaved",
        in.name, in.num_stages, in.num_ranks, in.directions));
  }
  TP_RETURN_IF_ERROR(validate(in));
  for (int32_t r = 0; r < in.num_ranks; ++r) {
    for (const Action& a : in.programs[r]) {
      if (a.type != ActionType::kForward && a.type != ActionType::kBackward) {
        return Status::invalid_argument(fmt::format(
            "--engine deepspeed: DeepSpeed's PipelineEngine does not run schedule '{}' ({} on "
            "rank {}: its TrainSchedule runs F and whole B only); hint: --engine zb, torch or "
            "tightpipe for zero-bubble schedules",
            in.name, to_string(a), r));
      }
    }
  }
  const int32_t S = in.num_stages, m = in.num_microbatches;
  P2pCalls out{in, {}};
  out.schedule.lowered = true;
  out.call.assign(in.num_ranks, {});
  for (int32_t r = 0; r < in.num_ranks; ++r) {
    auto& dst = out.schedule.programs[r];
    auto& call = out.call[r];
    dst.clear();
    std::vector<Action> computes;
    const int32_t s = in.programs[r].empty() ? r : in.programs[r].front().stage;
    int32_t next_call = 0;
    auto message = [&](ActionType type, int32_t mb, MessageEnd end) {
      const Action c{type, s, mb};
      const auto msg = message_route(in, c, end);
      if (!msg || msg->local()) return;
      dst.push_back(end == MessageEnd::kOut ? msg->send() : msg->recv());
      call.push_back(next_call++);
    };
    auto valid = [&](int32_t mb) { return mb >= 0 && mb < m; };
    int32_t prev = -1;
    for (int32_t t = 0; t < 2 * (m + S - 1); ++t) {
      const Slot slot = step_to_micro_batch(t, s, S);
      if (slot.forward) {
        if (valid(prev)) message(ActionType::kBackward, prev, MessageEnd::kOut);      // SendGrad
        if (valid(slot.mb)) message(ActionType::kForward, slot.mb, MessageEnd::kIn);  // RecvAct
      } else {
        if (valid(slot.mb)) message(ActionType::kBackward, slot.mb, MessageEnd::kIn);  // RecvGrad
        if (valid(prev)) message(ActionType::kForward, prev, MessageEnd::kOut);        // SendAct
      }
      if (valid(slot.mb)) {
        const Action c{slot.forward ? ActionType::kForward : ActionType::kBackward, s, slot.mb};
        dst.push_back(c);
        call.push_back(-1);
        computes.push_back(c);
      }
      prev = slot.mb;
    }
    if (computes != in.programs[r]) {
      size_t k = 0;
      while (k < computes.size() && k < in.programs[r].size() && computes[k] == in.programs[r][k])
        ++k;
      return Status::invalid_argument(fmt::format(
          "--engine deepspeed: schedule '{}' rank {} runs {} at step {} where DeepSpeed's "
          "TrainSchedule runs {}; its order is 1F1B; hint: --schedule 1f1b",
          in.name, r, k < in.programs[r].size() ? to_string(in.programs[r][k]) : "nothing", k,
          k < computes.size() ? to_string(computes[k]) : "nothing"));
    }
  }
  return out;
}

}  // namespace tightpipe
