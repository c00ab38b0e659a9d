// deepspeed_p2p_calls (simulator.h): DeepSpeed's PipelineEngine order of blocking sends and
// receives around its computes (deepspeed/runtime/pipe/schedule.py TrainSchedule.steps, p2p.py).
#include <fmt/format.h>

#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe {

// TrainSchedule gives each rank alternating forward and backward slots; a slot's instructions are
// its communication, then its compute. A forward slot runs SendGrad(previous slot's backward)
// then RecvActivation(its forward); a backward slot RecvGrad(its backward) then
// SendActivation(previous slot's forward). Empty slots (warm-up, cool-down) still send the
// previous slot's output. Over the compute order this is: before a compute c that follows a
// compute a, the receive for c comes first when a is F and c is B (a backward slot), and a's send
// first otherwise; every instruction is one blocking dist.send / dist.recv (one call each).
Result<P2pCalls> deepspeed_p2p_calls(const Schedule& in) {
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
  P2pCalls out{in, {}};
  out.schedule.lowered = true;
  out.call.assign(in.num_ranks, {});
  for (int32_t r = 0; r < in.num_ranks; ++r) {
    const auto& prog = in.programs[r];
    auto& dst = out.schedule.programs[r];
    auto& call = out.call[r];
    dst.clear();
    int32_t next_call = 0;
    auto one = [&](const Action& c) {  // one blocking instruction
      dst.push_back(c);
      call.push_back(next_call++);
    };
    auto send_of = [&](const Action& a) {
      if (auto m = message_route(in, a, MessageEnd::kOut); m && !m->local()) one(m->send());
    };
    auto recv_of = [&](const Action& a) {
      if (auto m = message_route(in, a, MessageEnd::kIn); m && !m->local()) one(m->recv());
    };
    for (size_t k = 0; k < prog.size(); ++k) {
      if (k == 0) {
        recv_of(prog[0]);
      } else if (prog[k - 1].type == ActionType::kForward &&
                 prog[k].type == ActionType::kBackward) {
        recv_of(prog[k]);  // backward slot: RecvGrad, then SendActivation of the forward
        send_of(prog[k - 1]);
      } else {
        send_of(prog[k - 1]);  // SendGrad / SendActivation of the previous compute, then receive
        recv_of(prog[k]);
      }
      dst.push_back(prog[k]);
      call.push_back(-1);
    }
    if (!prog.empty()) send_of(prog.back());
  }
  return out;
}

}  // namespace tightpipe
