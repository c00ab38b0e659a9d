// lower(): adds SEND/RECV for every cross-rank edge. The compute programs are replayed in rounds
// over the ranks; each rank places its next compute action once the action's dependencies are in
// its program. A producer's SEND goes right after it, and the sender places the matching RECV on
// the receiving rank at that same moment. Every SEND/RECV pair is thus adjacent in one global
// order that respects all dependencies, so even rendezvous (blocking) transports cannot hang.
// Stages on the same rank hand off locally: no SEND/RECV. An OVERLAP_F_B pair is placed once the
// inputs of both its sub-actions are there, so both RECVs precede it; both SENDs follow it.
#include <fmt/format.h>

#include <algorithm>

#include "tightpipe/schedule.h"

namespace tightpipe {

Result<Schedule> lower(const Schedule& schedule) {
  const Schedule& in = schedule;
  if (in.lowered || in.has_comm_actions()) {
    return Status::invalid_argument(fmt::format(
        "schedule '{}' is already lowered (it holds SEND/RECV); hint: lower a compute-only "
        "schedule",
        in.name));
  }
  TP_RETURN_IF_ERROR(validate(in));
  Schedule out = in;
  out.lowered = true;
  for (auto& prog : out.programs) {
    prog.clear();
    prog.reserve(!in.programs.empty() ? 3 * in.size() / in.programs.size() : 0);
  }
  const int32_t P = in.num_ranks;
  CompletionSet placed(out);
  std::vector<size_t> next(P, 0);
  size_t remaining = in.size();
  while (remaining > 0) {
    bool progress = false;
    for (int32_t r = 0; r < P; ++r) {
      if (next[r] >= in.programs[r].size()) continue;
      const Action& a = in.programs[r][next[r]];
      if (!placed.ready(out, a)) continue;
      out.programs[r].push_back(a);
      placed.mark(a);
      ++next[r];
      --remaining;
      progress = true;
      // A message that leaves the rank: its SEND right after the producer, and the matching
      // RECV on the receiving rank at that same moment.
      for (const Action& sub : sub_actions(a)) {
        if (auto m = message_route(in, sub, MessageEnd::kOut); m && !m->local()) {
          out.programs[m->src_rank].push_back(m->send());
          out.programs[m->dst_rank].push_back(m->recv());
          placed.mark(m->send());
          placed.mark(m->recv());
        }
      }
    }
    if (!progress) {
      // Report against the compute-only input, marking the first stuck rank.
      GridMark mark;
      std::string blocked;
      for (int32_t r = 0; r < P; ++r) {
        if (next[r] >= in.programs[r].size()) continue;
        if (mark.rank < 0) mark = {r, static_cast<int32_t>(next[r])};
        blocked +=
            fmt::format("\n  rank {} step {}: {}", r, next[r], to_string(in.programs[r][next[r]]));
      }
      return Status::failed_precondition(fmt::format(
          "cannot lower schedule '{}': no rank's next action has its inputs (deadlock){}\n{}",
          in.name, blocked, format_grid(in, mark)));
    }
  }
  return out;
}

}  // namespace tightpipe

namespace tightpipe {

// megatron_p2p_calls (schedule.h): Megatron's two orders of p2p calls around its computes.
Result<P2pCalls> megatron_p2p_calls(const Schedule& compute_only) {
  const Schedule& in = compute_only;
  if (in.lowered || in.has_comm_actions()) {
    return Status::invalid_argument(fmt::format(
        "megatron p2p: schedule '{}' is lowered already; hint: pass the compute-only schedule",
        in.name));
  }
  if (in.directions != 1) {
    return Status::invalid_argument(fmt::format(
        "megatron p2p: schedule '{}' runs {} directions; Megatron-LM's schedules run one "
        "(1f1b, interleaved); hint: --engine tightpipe or torch",
        in.name, in.directions));
  }
  TP_RETURN_IF_ERROR(validate(in));
  for (int32_t r = 0; r < in.num_ranks; ++r) {
    for (const Action& a : in.programs[r]) {
      if (a.type != ActionType::kForward && a.type != ActionType::kBackward) {
        return Status::invalid_argument(fmt::format(
            "megatron p2p: schedule '{}' has {} on rank {}; Megatron-LM's schedules run F and "
            "whole B only (1f1b, interleaved); hint: --engine zb, torch or tightpipe for "
            "zero-bubble schedules",
            in.name, to_string(a), r));
      }
    }
  }
  const bool interleaved = in.num_stages > in.num_ranks;
  // The microbatch group g of an interleaved order: rank 0's chunk-0 forwards before its first
  // forward of another chunk (all m when there is none).
  int32_t group = 0;
  for (const Action& a : in.programs[0]) {
    if (a.type != ActionType::kForward) continue;
    if (a.stage != 0) break;
    ++group;
  }
  const int32_t P = in.num_ranks;
  // A message around the loop: activations from rank p - 1 to rank 0, gradients back.
  auto is_wrap = [P](const MessageRoute& m) {
    return P > 1 && !m.local() &&
           (m.gradient ? m.src_rank == 0 && m.dst_rank == P - 1
                       : m.src_rank == P - 1 && m.dst_rank == 0);
  };
  std::vector<std::vector<Action>> forwards(P), backwards(P);  // per rank, in program order
  int64_t wrap_messages = 0, wrap_posted = 0;
  for (int32_t r = 0; r < P; ++r) {
    for (const Action& a : in.programs[r]) {
      (a.type == ActionType::kForward ? forwards : backwards)[r].push_back(a);
      if (auto m = message_route(in, a, MessageEnd::kOut); interleaved && m && is_wrap(*m)) {
        ++wrap_messages;
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
    std::vector<Action> batch;
    auto flush = [&] {
      if (batch.empty()) return;
      for (const Action& c : batch) {
        dst.push_back(c);
        call.push_back(next_call);
      }
      ++next_call;
      batch.clear();
    };
    auto send_of = [&](const Action& a) {
      if (auto m = message_route(in, a, MessageEnd::kOut); m && !m->local())
        batch.push_back(m->send());
    };
    auto recv_of = [&](const Action& a) {
      auto m = message_route(in, a, MessageEnd::kIn);
      if (!m || m->local() || (interleaved && is_wrap(*m))) return;  // wraps: wrap_recv_of
      batch.push_back(m->recv());
    };
    int64_t nf = 0, nb = 0;  // the rank's forwards and backwards computed so far
    auto compute = [&](const Action& a) {
      dst.push_back(a);
      call.push_back(-1);
    };
    if (!interleaved) {
      for (size_t k = 0; k < prog.size(); ++k) {
        if (k == 0) recv_of(prog[0]);
        flush();
        compute(prog[k]);
        send_of(prog[k]);
        if (k + 1 < prog.size()) {
          if (prog[k + 1].type == prog[k].type) flush();  // two calls: the send, then the receive
          recv_of(prog[k + 1]);
        }
      }
      flush();
    } else {
      // Steps: Megatron's warm-up forwards one each; after them an F followed by a B is one;
      // every other compute is one.
      const size_t warmup = static_cast<size_t>(
          interleaved_warmup_forwards(in.num_ranks, r, in.chunks(), group, in.num_microbatches));
      std::vector<std::pair<size_t, size_t>> steps;  // [first, last)
      size_t seen_f = 0;
      for (size_t k = 0; k < prog.size();) {
        seen_f += prog[k].type == ActionType::kForward;
        const bool pair = seen_f > warmup && prog[k].type == ActionType::kForward &&
                          k + 1 < prog.size() && prog[k + 1].type == ActionType::kBackward;
        if (seen_f > warmup && prog[k].type == ActionType::kForward && !pair) {
          return Status::invalid_argument(fmt::format(
              "megatron p2p: schedule '{}' rank {} runs {} after its {} warm-up forwards without "
              "a backward right after it; Megatron's interleaved steady state runs each forward "
              "with a backward (forward_backward_pipelining_with_interleaving), so its calls do "
              "not fit this order; hint: more microbatches than pipeline ranks, or --engine "
              "megatron-overlap / torch",
              in.name, r, to_string(prog[k]), warmup));
        }
        steps.push_back({k, k + (pair ? 2 : 1)});
        k += pair ? 2 : 1;
      }
      // The leading ranks (rank 0 for activations, rank p - 1 for gradients) receive what the
      // ending rank (p - 1, resp. 0) sends around the loop aligned with the sender, not before
      // the compute that needs it: after their k-th forward (backward), the output of the ending
      // rank's (k - (p - 1))-th forward (backward), queued until used
      // (`recv_tensor_from_previous_stage`). With groups of p that is the next compute's input;
      // with larger groups it comes earlier.
      auto wrap_recv_of = [&](const Action& a) {
        if (a.type != ActionType::kForward && a.type != ActionType::kBackward) return;
        const bool fwd = a.type == ActionType::kForward;
        if (r != (fwd ? 0 : P - 1)) return;
        const auto& ending = (fwd ? forwards : backwards)[fwd ? P - 1 : 0];
        const int64_t j = (fwd ? nf : nb) - int64_t{P - 1};
        if (j < 0 || j >= static_cast<int64_t>(ending.size())) return;
        if (auto m = message_route(in, ending[j], MessageEnd::kOut); m && is_wrap(*m)) {
          batch.push_back(m->recv());
          ++wrap_posted;
        }
      };
      for (size_t i = 0; i < steps.size(); ++i) {
        if (i == 0) {
          for (size_t k = steps[0].first; k < steps[0].second; ++k) recv_of(prog[k]);
        }
        flush();
        for (size_t k = steps[i].first; k < steps[i].second; ++k) compute(prog[k]);
        for (size_t k = steps[i].first; k < steps[i].second; ++k) send_of(prog[k]);
        for (size_t k = steps[i].first; k < steps[i].second; ++k) {
          wrap_recv_of(prog[k]);
          nf += prog[k].type == ActionType::kForward;
          nb += prog[k].type == ActionType::kBackward;
        }
        if (i + 1 < steps.size()) {
          for (size_t k = steps[i + 1].first; k < steps[i + 1].second; ++k) recv_of(prog[k]);
        }
      }
      flush();
    }
  }
  if (wrap_posted != wrap_messages) {
    return Status::invalid_argument(fmt::format(
        "megatron p2p: schedule '{}' sends {} messages around the loop (rank {} to rank 0 and "
        "back) but Megatron's aligned receives post {}: the leading rank receives the ending "
        "rank's k-th output after its own (k + p - 1)-th compute of the kind, which this order "
        "does not fit; hint: use `tightpipe schedule --schedule interleaved`'s order, or "
        "--engine megatron-overlap / torch",
        in.name, wrap_messages, P - 1, wrap_posted));
  }
  return out;
}

}  // namespace tightpipe
