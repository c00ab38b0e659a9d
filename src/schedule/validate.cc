// validate(): the rules of a well-formed schedule, ending with a dry run that proves every rank
// can finish. Every failure carries the grid with the offending cell marked.
#include <fmt/format.h>

#include <map>
#include <optional>
#include <unordered_map>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {
namespace {

Status fail(const Schedule& sch, GridMark mark, const std::string& what) {
  return Status::invalid_argument(
      fmt::format("invalid schedule '{}': {}\n{}", sch.name, what, format_grid(sch, mark)));
}

struct Place {
  int32_t rank = -1;
  int32_t step = -1;
};

// Where each (type, stage, mb) first appears; duplicates are errors.
class Placements {
 public:
  Placements(int32_t stages, int32_t mbs)
      : stages_(stages), mbs_(mbs), at_(static_cast<size_t>(kNumActionTypes) * stages * mbs) {}
  Place& at(ActionType t, int32_t s, int32_t mb) {
    return at_[(static_cast<size_t>(t) * stages_ + s) * mbs_ + mb];
  }

 private:
  int32_t stages_, mbs_;
  std::vector<Place> at_;
};

}  // namespace

Status validate(const Schedule& sch) {
  const int32_t P = sch.num_ranks, S = sch.num_stages, M = sch.num_microbatches;
  if (P < 1 || S < 1 || M < 1) {
    return Status::invalid_argument(fmt::format(
        "invalid schedule '{}': shape ranks={} stages={} microbatches={} must all be >= 1",
        sch.name, P, S, M));
  }
  TP_RETURN_IF_ERROR(check_schedule_shape(sch.name, P, S, M).with_context("invalid schedule"));
  if (static_cast<int32_t>(sch.programs.size()) != P) {
    return Status::invalid_argument(fmt::format("invalid schedule '{}': {} programs for {} ranks",
                                                sch.name, sch.programs.size(), P));
  }
  if (static_cast<int32_t>(sch.stage_to_rank.size()) != S) {
    return Status::invalid_argument(
        fmt::format("invalid schedule '{}': stage-to-rank map has {} entries for {} stages",
                    sch.name, sch.stage_to_rank.size(), S));
  }
  for (int32_t s = 0; s < S; ++s) {
    if (sch.stage_to_rank[s] < 0 || sch.stage_to_rank[s] >= P) {
      return Status::invalid_argument(
          fmt::format("invalid schedule '{}': stage {} is mapped to rank {}, outside 0..{}",
                      sch.name, s, sch.stage_to_rank[s], P - 1));
    }
  }
  // A lowered schedule may hold no SEND/RECV (one rank, or only local hand-offs).
  if (!sch.lowered && sch.has_comm_actions()) {
    return Status::invalid_argument(fmt::format(
        "invalid schedule '{}': its programs hold SEND/RECV actions but it is not marked lowered",
        sch.name));
  }

  if (sch.directions < 1 || S % sch.directions != 0 || M % sch.directions != 0) {
    return Status::invalid_argument(fmt::format(
        "invalid schedule '{}': {} directions must divide both the {} stages and the {} "
        "microbatches; hint: DualPipe has 2 directions, every other schedule 1",
        sch.name, sch.directions, S, M));
  }

  // Per-action checks: range, owner rank, no duplicates, local order; a pair's sub-actions each.
  Placements seen(S, M);
  for (int32_t r = 0; r < P; ++r) {
    const auto& prog = sch.programs[r];
    for (int32_t i = 0; i < static_cast<int32_t>(prog.size()); ++i) {
      const GridMark here{r, i};
      if (prog[i].type == ActionType::kOverlapFB) {
        const Action& pair = prog[i];
        for (const Action& sub : sub_actions(pair)) {
          if (sub.stage < 0 || sub.stage >= S) {
            return fail(
                sch, here,
                fmt::format("{} names stage {}, outside 0..{}", to_string(pair), sub.stage, S - 1));
          }
        }
        if (sch.stage_to_rank[pair.stage] != sch.stage_to_rank[pair.b_stage]) {
          return fail(sch, here,
                      fmt::format("{} pairs stage {} (rank {}) with stage {} (rank {}): the two "
                                  "sub-actions of a pair run on one rank",
                                  to_string(pair), pair.stage, sch.stage_to_rank[pair.stage],
                                  pair.b_stage, sch.stage_to_rank[pair.b_stage]));
        }
        const Action f = sub_actions(pair).at[0];
        for (const Action& d : dependencies(sch, sub_actions(pair).at[1])) {
          if (d == f) {
            return fail(sch, here,
                        fmt::format("{} can never start: its backward needs its own forward "
                                    "{}; hint: pair a forward with the backward of another "
                                    "microbatch",
                                    to_string(pair), to_string(f)));
          }
        }
      }
      for (const Action& a : sub_actions(prog[i])) {
        if (a.stage < 0 || a.stage >= S || a.microbatch < 0 || a.microbatch >= M) {
          return fail(sch, here,
                      fmt::format("{} is outside the shape (stages 0..{}, microbatches 0..{})",
                                  to_string(a), S - 1, M - 1));
        }
        if (!sch.runs(a.stage, a.microbatch)) {
          return fail(
              sch, here,
              fmt::format("{}: stage {} belongs to direction {}, which does not run "
                          "microbatch {} (direction {} runs microbatches {}..{})",
                          to_string(a), a.stage, sch.direction_of_stage(a.stage), a.microbatch,
                          sch.direction_of_stage(a.stage),
                          sch.direction_of_stage(a.stage) * (M / sch.directions),
                          (sch.direction_of_stage(a.stage) + 1) * (M / sch.directions) - 1));
        }
        if (sch.stage_to_rank[a.stage] != r) {
          return fail(sch, here,
                      fmt::format("{} runs on rank {} but stage {} lives on rank {}", to_string(a),
                                  r, a.stage, sch.stage_to_rank[a.stage]));
        }
        Place& p = seen.at(a.type, a.stage, a.microbatch);
        if (p.rank >= 0) {
          return fail(sch, here,
                      fmt::format("{} appears twice (first at rank {} step {})", to_string(a),
                                  p.rank, p.step));
        }
        p = {r, i};
        auto before = [&](ActionType t, const char* rule) -> Status {
          if (seen.at(t, a.stage, a.microbatch).rank < 0) {
            return fail(sch, here,
                        fmt::format("{} comes before {}{}{}: {}", to_string(a), a.stage,
                                    action_type_name(t), a.microbatch, rule));
          }
          return OkStatus();
        };
        switch (a.type) {
          case ActionType::kForward:
          case ActionType::kRecvAct:
          case ActionType::kRecvGrad:
            break;
          case ActionType::kOverlapFB:
            TP_CHECK(false, "sub_actions() returned a pair");
            break;
          case ActionType::kBackwardInput:
          case ActionType::kBackward:
            TP_RETURN_IF_ERROR(before(ActionType::kForward, "a backward needs its forward first"));
            break;
          case ActionType::kBackwardWeight:
            if (seen.at(ActionType::kBackward, a.stage, a.microbatch).rank >= 0) {
              return fail(sch, here,
                          fmt::format("{} after the fused {}B{} (B already includes W)",
                                      to_string(a), a.stage, a.microbatch));
            }
            TP_RETURN_IF_ERROR(before(ActionType::kBackwardInput, "W needs its I first"));
            break;
          case ActionType::kSendAct:
            TP_RETURN_IF_ERROR(before(ActionType::kForward, "a send needs its producer first"));
            break;
          case ActionType::kSendGrad: {
            const bool produced =
                seen.at(ActionType::kBackwardInput, a.stage, a.microbatch).rank >= 0 ||
                seen.at(ActionType::kBackward, a.stage, a.microbatch).rank >= 0;
            if (!produced) {
              return fail(
                  sch, here,
                  fmt::format("{} comes before the backward that produces it", to_string(a)));
            }
            break;
          }
        }
      }
    }
  }

  // Completeness: one F; one B or one I and one W; matching SEND/RECV on cross-rank edges.
  for (int32_t s = 0; s < S; ++s) {
    for (int32_t mb = 0; mb < M; ++mb) {
      if (!sch.runs(s, mb)) continue;
      const GridMark stage_row{sch.stage_to_rank[s], -1};
      auto has = [&](ActionType t) { return seen.at(t, s, mb).rank >= 0; };
      if (!has(ActionType::kForward)) {
        return fail(
            sch, stage_row,
            fmt::format("{}F{} is missing (every stage runs one forward per microbatch)", s, mb));
      }
      const bool b = has(ActionType::kBackward), i = has(ActionType::kBackwardInput),
                 w = has(ActionType::kBackwardWeight);
      if (b && (i || w)) {
        return fail(
            sch,
            {seen.at(ActionType::kBackward, s, mb).rank,
             seen.at(ActionType::kBackward, s, mb).step},
            fmt::format("stage {} microbatch {} has both a fused B and a split I/W", s, mb));
      }
      if (!b && !(i && w)) {
        return fail(sch, stage_row,
                    fmt::format("{}{}{} is missing (a backward is one B, or one I and one W)", s,
                                i ? "W" : (w ? "I" : "B"), mb));
      }
      if (!sch.lowered) continue;
      // The activation and the gradient stage s sends: a SEND and a RECV exactly when the message
      // crosses ranks, none when it stays on the rank or there is no stage to receive it.
      auto expect = [&](const Action& x, bool needed, const char* what) -> Status {
        const Place p = seen.at(x.type, x.stage, x.microbatch);
        if (needed && p.rank < 0) {
          return fail(sch, {sch.stage_to_rank[x.stage], -1},
                      fmt::format("{} is missing: {}", to_string(x), what));
        }
        if (!needed && p.rank >= 0) {
          return fail(sch, {p.rank, p.step}, fmt::format("{} has no peer: {}", to_string(x), what));
        }
        return OkStatus();
      };
      for (const bool gradient : {false, true}) {
        const Action producer{gradient ? ActionType::kBackwardInput : ActionType::kForward, s, mb};
        const std::optional<MessageRoute> m = message_route(sch, producer, MessageEnd::kOut);
        const bool crosses = m && !m->local();
        const Action send{gradient ? ActionType::kSendGrad : ActionType::kSendAct, s, mb};
        TP_RETURN_IF_ERROR(expect(send, crosses,
                                  gradient
                                      ? "a SEND_B exactly where stage s-1 lives on another rank"
                                      : "a SEND_F exactly where stage s+1 lives on another rank"));
        if (m) {
          TP_RETURN_IF_ERROR(expect(m->recv(), crosses,
                                    gradient ? "a RECV_B matches each SEND_B of the stage after"
                                             : "a RECV_F matches each SEND_F of the stage before"));
        }
      }
    }
  }
  // Stray RECVs at the ends of each direction's pipeline, where no stage sends.
  const int32_t L = sch.stages_per_direction();
  for (int32_t mb = 0; mb < M; ++mb) {
    const int32_t first = sch.direction_of_microbatch(mb) * L;
    for (const Action& r : {Action{ActionType::kRecvAct, first, mb},
                            Action{ActionType::kRecvGrad, first + L - 1, mb}}) {
      const Place p = seen.at(r.type, r.stage, r.microbatch);
      if (p.rank < 0 || message_route(sch, r, MessageEnd::kIn)) continue;
      return fail(sch, {p.rank, p.step},
                  r.type == ActionType::kRecvAct
                      ? "the first stage has no upstream to receive from"
                      : "the last stage has no downstream to receive from");
    }
  }

  // Dry run: run every rank as far as its dependencies allow; all must finish. A rank that
  // blocks waits on its first missing dependency and runs again once that completes (each action
  // is checked a bounded number of times: linear, where sweeping all ranks until nothing moves
  // took P sweeps per backward wave, minutes at p = 1024).
  CompletionSet done(sch);
  std::vector<size_t> pc(P, 0);
  size_t remaining = sch.size();
  auto key = [&](ActionType t, int32_t stage, int32_t mb) {
    return (static_cast<uint64_t>(t) * static_cast<uint64_t>(S) + static_cast<uint64_t>(stage)) *
               static_cast<uint64_t>(M) +
           static_cast<uint64_t>(mb);
  };
  std::unordered_map<uint64_t, std::vector<int32_t>> waiting;  // requirement -> ranks blocked on it
  std::vector<int32_t> runnable(P);
  for (int32_t r = 0; r < P; ++r) runnable[r] = P - 1 - r;
  auto wake = [&](ActionType t, int32_t stage, int32_t mb) {
    auto it = waiting.find(key(t, stage, mb));
    if (it == waiting.end()) return;
    runnable.insert(runnable.end(), it->second.begin(), it->second.end());
    waiting.erase(it);
  };
  while (!runnable.empty()) {
    const int32_t r = runnable.back();
    runnable.pop_back();
    const auto& prog = sch.programs[r];
    while (pc[r] < prog.size()) {
      const Action& a = prog[pc[r]];
      std::optional<Action> missing;
      for (const Action& d : dependencies(sch, a)) {
        if (!done.has(d)) {
          missing = d;
          break;
        }
      }
      if (missing) {
        waiting[key(missing->type, missing->stage, missing->microbatch)].push_back(r);
        break;
      }
      done.mark(a);
      ++pc[r];
      --remaining;
      for (const Action& sub : sub_actions(a)) {
        wake(sub.type, sub.stage, sub.microbatch);
        if (sub.type == ActionType::kBackward) {  // a fused B satisfies I and W requirements
          wake(ActionType::kBackwardInput, sub.stage, sub.microbatch);
          wake(ActionType::kBackwardWeight, sub.stage, sub.microbatch);
        }
      }
    }
  }
  if (remaining > 0) {
    std::string blocked;
    GridMark first;
    for (int32_t r = 0; r < P; ++r) {
      if (pc[r] >= sch.programs[r].size()) continue;
      const Action& a = sch.programs[r][pc[r]];
      std::vector<std::string> waits;
      for (const Action& d : dependencies(sch, a))
        if (!done.has(d)) waits.push_back(to_string(d));
      blocked += fmt::format("\n  rank {} step {}: {} waits for {}{}", r, pc[r], to_string(a),
                             join(waits, ", "),
                             a.type == ActionType::kOverlapFB
                                 ? " (a pair starts only once both sub-actions' inputs are there)"
                                 : "");
      if (first.rank < 0) first = {r, static_cast<int32_t>(pc[r])};
    }
    return fail(sch, first, fmt::format("deadlock: no rank can make progress{}", blocked));
  }
  return OkStatus();
}

Schedule compute_only(const Schedule& sch) {
  Schedule out = sch;
  out.lowered = false;
  for (auto& prog : out.programs) {
    std::erase_if(prog, [](const Action& a) { return is_comm(a.type); });
  }
  return out;
}

}  // namespace tightpipe
