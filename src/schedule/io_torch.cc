// PyTorch's compute_comms form: the UNSHARD / RESHARD / REDUCE_GRAD actions and PyTorch 2.15's
// WAIT_REDUCE_GRAD / WAIT_SEND_F / WAIT_SEND_B, their text, the rules a file's cells are held to,
// and the writer (include/tightpipe/schedule_torch.h).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <tuple>

#include "action_id.h"
#include "tightpipe/base.h"
#include "tightpipe/schedule.h"
#include "tightpipe/schedule_torch.h"
#include "torch_cells.h"

namespace tightpipe {

namespace {
// Longest first where one name starts another (none does today; PyTorch's regex is ordered so).
constexpr TorchActionType kAllTorchTypes[] = {
    TorchActionType::kWaitReduceGrad, TorchActionType::kWaitSendF, TorchActionType::kWaitSendB,
    TorchActionType::kUnshard,        TorchActionType::kReshard,   TorchActionType::kReduceGrad};

// Whether `a` is a backward step that counts towards its stage's gradient: a B, a W, or a
// pair's B (PyTorch counts the same: W and B, never I).
bool is_gradient_step(const Action& a) {
  return a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight;
}

// A row's SENDs in send order, and which of them no WAIT_SEND has retired yet: a map from
// (type, stage, microbatch) so that a row of many sends is not searched for each wait.
class PendingSends {
 public:
  void sent(const Action& a, std::pair<int, int> pos) {
    if (index_.emplace(key(a), sends_.size()).second) sends_.push_back({a, pos, false});
  }
  // Retires `send`; false when it is not pending.
  bool retire(const Action& send) {
    auto it = index_.find(key(send));
    if (it == index_.end()) return false;
    sends_[it->second].retired = true;
    index_.erase(it);
    return true;
  }
  size_t pending() const { return index_.size(); }
  // The pending ones, in send order.
  std::vector<std::pair<Action, std::pair<int, int>>> in_order() const {
    std::vector<std::pair<Action, std::pair<int, int>>> out;
    for (const Send& s : sends_)
      if (!s.retired) out.push_back({s.action, s.pos});
    return out;
  }

 private:
  struct Send {
    Action action;
    std::pair<int, int> pos;
    bool retired;
  };
  static std::tuple<int, int32_t, int32_t> key(const Action& a) {
    return {static_cast<int>(a.type), a.stage, a.microbatch};
  }
  std::vector<Send> sends_;
  std::map<std::tuple<int, int32_t, int32_t>, size_t> index_;
};
}  // namespace

std::string_view torch_action_type_name(TorchActionType t) {
  switch (t) {
    case TorchActionType::kUnshard:
      return "UNSHARD";
    case TorchActionType::kReshard:
      return "RESHARD";
    case TorchActionType::kReduceGrad:
      return "REDUCE_GRAD";
    case TorchActionType::kWaitReduceGrad:
      return "WAIT_REDUCE_GRAD";
    case TorchActionType::kWaitSendF:
      return "WAIT_SEND_F";
    case TorchActionType::kWaitSendB:
      return "WAIT_SEND_B";
  }
  return "?";
}

bool torch_action_has_microbatch(TorchActionType t) {
  return t == TorchActionType::kWaitSendF || t == TorchActionType::kWaitSendB;
}

std::string to_string(const TorchAction& a) {
  if (torch_action_has_microbatch(a.type)) {
    return fmt::format("{}{}{}", a.stage, torch_action_type_name(a.type), a.microbatch);
  }
  return fmt::format("{}{}", a.stage, torch_action_type_name(a.type));
}

Result<std::optional<TorchAction>> parse_torch_action(std::string_view token) {
  size_t i = 0;
  while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) ++i;
  if (i == 0) return std::optional<TorchAction>{};
  const std::string_view rest = token.substr(i);
  for (TorchActionType t : kAllTorchTypes) {
    const std::string_view name = torch_action_type_name(t);
    if (!rest.starts_with(name)) continue;
    const bool with_mb = torch_action_has_microbatch(t);
    auto bad = [&](std::string_view why) {
      return Status::invalid_argument(
          with_mb ? fmt::format("bad action '{}': {}; hint: PyTorch writes its {} actions as the "
                                "stage, the type, then the microbatch, e.g. 0{}3",
                                printable(token), why, name, name)
                  : fmt::format("bad action '{}': {}; hint: PyTorch writes its {} actions as the "
                                "stage then the type, e.g. 0{} (no microbatch)",
                                printable(token), why, name, name));
    };
    const std::string_view tail = rest.substr(name.size());
    TorchAction a{t, 0, -1};
    if (with_mb) {
      if (tail.empty()) return bad(fmt::format("{} needs a microbatch after it", name));
      if (std::string why =
              detail::read_action_id(tail, "microbatch", kMaxMicrobatches, a.microbatch);
          !why.empty()) {
        return bad(why);
      }
    } else if (!tail.empty()) {
      return bad(fmt::format("{} takes no microbatch, but '{}' follows it", name, printable(tail)));
    }
    if (std::string why = detail::read_action_id(token.substr(0, i), "stage", kMaxStages, a.stage);
        !why.empty()) {
      return bad(why);
    }
    return std::optional<TorchAction>{a};
  }
  return std::optional<TorchAction>{};
}

namespace detail {

Status check_torch_cells(const Schedule& sch, const std::vector<TorchCell>& cells,
                         const std::vector<std::vector<std::pair<int, int>>>& action_pos,
                         std::string_view source) {
  if (cells.empty()) return OkStatus();
  auto at = [&](const std::pair<int, int>& p) {
    return fmt::format("{}:{}:{}", source, p.first, p.second);
  };
  const int32_t S = sch.num_stages;
  std::vector<int64_t> gradient_steps(S, 0);  // B and W per stage, over the whole schedule
  for (const auto& prog : sch.programs)
    for (const Action& pa : prog)
      for (const Action& a : sub_actions(pa))
        if (is_gradient_step(a)) ++gradient_steps[a.stage];
  std::vector<char> sharded_stage(S, 0);  // the stage has an UNSHARD or RESHARD somewhere
  bool waits = false;                     // PyTorch 2.15's form: the file holds a WAIT_*
  for (const TorchCell& c : cells) {
    const TorchAction& t = c.action;
    if (t.stage >= S) {
      return Status::invalid_argument(fmt::format(
          "{}: '{}' names stage {}, but the schedule has stages 0..{}; hint: {} goes on the "
          "row of the rank that holds the stage",
          at(c.pos), to_string(t), t.stage, S - 1, torch_action_type_name(t.type)));
    }
    if (sch.rank_of(t.stage) != c.rank) {
      return Status::invalid_argument(fmt::format(
          "{}: '{}' is on the row of rank {}, but stage {} lives on rank {} (row {}); hint: {} "
          "goes on the row of the rank that holds the stage",
          at(c.pos), to_string(t), c.rank, t.stage, sch.rank_of(t.stage), sch.rank_of(t.stage) + 1,
          torch_action_type_name(t.type)));
    }
    if (t.type == TorchActionType::kUnshard || t.type == TorchActionType::kReshard) {
      sharded_stage[t.stage] = 1;
    }
    if (t.type == TorchActionType::kWaitReduceGrad || torch_action_has_microbatch(t.type)) {
      waits = true;
    }
  }

  // Walk each row in file order: its program actions with the cells between them.
  std::vector<std::optional<std::pair<int, int>>> reduce_at(S);
  size_t next_cell = 0;  // cells are in file order: by row, then column
  for (int32_t r = 0; r < sch.num_ranks; ++r) {
    std::vector<std::optional<std::pair<int, int>>> unshard_at(S);  // open UNSHARD, if any
    std::vector<char> used(S, 0);                                   // computed since it
    std::vector<int64_t> done(S, 0);                                // gradient steps so far
    // The row's REDUCE_GRAD whose WAIT_REDUCE_GRAD has not come yet (PyTorch 2.15 allows one).
    std::optional<TorchCell> pending_reduce;
    // The row's SENDs not yet retired by a WAIT_SEND, in send order, with where each stands.
    PendingSends pending_sends;
    const auto& prog = sch.programs[r];
    for (size_t k = 0; k <= prog.size(); ++k) {
      for (; next_cell < cells.size() && cells[next_cell].rank == r && cells[next_cell].before == k;
           ++next_cell) {
        const TorchCell& c = cells[next_cell];
        const int32_t s = c.action.stage;
        switch (c.action.type) {
          case TorchActionType::kUnshard:
            if (unshard_at[s]) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' unshards stage {} again, still unsharded since {}; hint: a "
                  "RESHARD of the stage goes between two UNSHARDs (PyTorch refuses unsharding "
                  "a stage twice)",
                  at(c.pos), to_string(c.action), s, at(*unshard_at[s])));
            }
            unshard_at[s] = c.pos;
            used[s] = 0;
            break;
          case TorchActionType::kReshard:
            if (!unshard_at[s]) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' reshards stage {}, which no UNSHARD before it on this row left "
                  "unsharded; hint: {}UNSHARD, then the stage's computes, then {}RESHARD",
                  at(c.pos), to_string(c.action), s, s, s));
            }
            if (!used[s]) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' reshards stage {} with no compute on it since its UNSHARD at {}; "
                  "hint: PyTorch's runtime refuses to reshard a stage whose unshard nothing "
                  "waited for: drop the pair or move the RESHARD after a compute",
                  at(c.pos), to_string(c.action), s, at(*unshard_at[s])));
            }
            unshard_at[s].reset();
            break;
          case TorchActionType::kReduceGrad:
            if (reduce_at[s]) {
              return Status::invalid_argument(fmt::format(
                  "{}: a second '{}' (the first is at {}): stage {} would scale its gradients "
                  "twice; hint: PyTorch reduces a stage's gradients once per step, at its one "
                  "REDUCE_GRAD",
                  at(c.pos), to_string(c.action), at(*reduce_at[s]), s));
            }
            if (done[s] < gradient_steps[s]) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' comes after {} of stage {}'s {} backward steps (B or W); hint: "
                  "PyTorch reduces the gradients there, so it goes after the stage's last W or "
                  "B",
                  at(c.pos), to_string(c.action), done[s], s, gradient_steps[s]));
            }
            if (waits && pending_reduce) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' starts while stage {}'s reduction ({}) is still pending; hint: "
                  "PyTorch 2.15 allows one pending reduction per rank: put {}WAIT_REDUCE_GRAD "
                  "before it",
                  at(c.pos), to_string(c.action), pending_reduce->action.stage,
                  at(pending_reduce->pos), pending_reduce->action.stage));
            }
            reduce_at[s] = c.pos;
            pending_reduce = c;
            break;
          case TorchActionType::kWaitReduceGrad:
            if (!pending_reduce || pending_reduce->action.stage != s) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' has no pending reduction of stage {} to wait for{}; hint: it "
                  "follows its own {}REDUCE_GRAD, before the row's next REDUCE_GRAD",
                  at(c.pos), to_string(c.action), s,
                  pending_reduce
                      ? fmt::format(" (stage {}'s, from {}, is pending)",
                                    pending_reduce->action.stage, at(pending_reduce->pos))
                      : std::string(),
                  s));
            }
            pending_reduce.reset();
            break;
          case TorchActionType::kWaitSendF:
          case TorchActionType::kWaitSendB: {
            const Action send{c.action.type == TorchActionType::kWaitSendF ? ActionType::kSendAct
                                                                           : ActionType::kSendGrad,
                              s, c.action.microbatch};
            if (!pending_sends.retire(send)) {
              return Status::invalid_argument(fmt::format(
                  "{}: '{}' waits for '{}', which no earlier cell of this row sends (or an "
                  "earlier wait already retired); hint: each SEND gets exactly one WAIT_SEND "
                  "after it on its own row",
                  at(c.pos), to_string(c.action), to_string(send)));
            }
            break;
          }
        }
      }
      if (k == prog.size()) break;
      if (prog[k].type == ActionType::kSendAct || prog[k].type == ActionType::kSendGrad) {
        pending_sends.sent(prog[k], action_pos[r][k]);
      }
      for (const Action& a : sub_actions(prog[k])) {
        if (!is_compute(a.type)) continue;
        if (sharded_stage[a.stage] && !unshard_at[a.stage]) {
          return Status::invalid_argument(fmt::format(
              "{}: '{}' computes on stage {} while it is sharded (the file unshards it "
              "elsewhere, not here); hint: under FSDP PyTorch's runtime needs {}UNSHARD before "
              "each compute on the stage and {}RESHARD after",
              at(action_pos[r][k]), to_string(prog[k]), a.stage, a.stage, a.stage));
        }
        used[a.stage] = 1;
        if (is_gradient_step(a)) ++done[a.stage];
      }
    }
    for (int32_t s = 0; s < S; ++s) {
      if (unshard_at[s]) {
        return Status::invalid_argument(fmt::format(
            "{}: stage {} is still unsharded at the end of row {} (rank {}); hint: end it with "
            "{}RESHARD after the stage's last compute (PyTorch would refuse the next step's "
            "UNSHARD)",
            at(*unshard_at[s]), s, r + 1, r, s));
      }
    }
    if (waits && pending_reduce) {
      return Status::invalid_argument(fmt::format(
          "{}: '{}' has no {}WAIT_REDUCE_GRAD after it on row {} (rank {}); hint: PyTorch 2.15 "
          "refuses a reduction left pending at the end of a row",
          at(pending_reduce->pos), to_string(pending_reduce->action), pending_reduce->action.stage,
          r + 1, r));
    }
    if (waits && pending_sends.pending() > 0) {
      const auto [send, pos] = pending_sends.in_order().front();
      return Status::invalid_argument(fmt::format(
          "{}: '{}' has no WAIT_SEND after it on row {} (rank {}){}; hint: PyTorch 2.15 retires "
          "a send only at its own {}WAIT_SEND_{}{} and refuses a file that leaves one pending",
          at(pos), to_string(send), r + 1, r,
          pending_sends.pending() > 1 ? fmt::format(", nor do {} more", pending_sends.pending() - 1)
                                      : std::string(),
          send.stage, send.type == ActionType::kSendAct ? 'F' : 'B', send.microbatch));
    }
  }
  // Gradient scaling: PyTorch divides a stage's gradients by m at its REDUCE_GRAD, so a file in
  // its compute_comms form needs exactly one per stage (a second is refused above).
  const auto with =
      std::find_if(reduce_at.begin(), reduce_at.end(), [](const auto& p) { return p.has_value(); });
  for (int32_t s = 0; s < S; ++s) {
    if (reduce_at[s]) continue;
    if (with != reduce_at.end()) {
      return Status::invalid_argument(fmt::format(
          "{}: stage {} has no REDUCE_GRAD, although stage {} has one at {}; hint: PyTorch "
          "reduces a stage's gradients only at its REDUCE_GRAD, so every stage needs one "
          "after its last W or B (`tightpipe schedule --format torch` writes them)",
          source, s, with - reduce_at.begin(), at(**with)));
    }
    return Status::invalid_argument(fmt::format(
        "{}: stage {} has no REDUCE_GRAD, although the file holds PyTorch's compute_comms "
        "actions ('{}' at {}): PyTorch's runtime would leave its gradients m times too large; "
        "hint: every stage needs one REDUCE_GRAD after its last W or B (`tightpipe schedule "
        "--format torch` writes them)",
        source, s, to_string(cells.front().action), at(cells.front().pos)));
  }
  return OkStatus();
}

}  // namespace detail

Status check_torch_directions(const Schedule& schedule, std::string_view hint) {
  if (schedule.directions == 1) return OkStatus();
  return Status::invalid_argument(fmt::format(
      "schedule '{}' runs {} directions (each rank holds a stage of every pipeline), which "
      "PyTorch's pipelining has no form for; hint: {}",
      schedule.name, schedule.directions, hint));
}

Result<std::string> to_torch_csv(const Schedule& schedule) {
  const Schedule& in = schedule;
  TP_RETURN_IF_ERROR(check_torch_directions(
      in,
      "export dualpipev (DualPipe's one-direction V, PyTorch's ScheduleDualPipeV), or write this "
      "one with --format csv"));
  Schedule low;
  if (in.lowered || in.has_comm_actions()) {
    TP_RETURN_IF_ERROR(validate(in));
    low = in;
  } else {
    TP_ASSIGN_OR_RETURN(low, lower(in));
  }
  const int32_t S = low.num_stages;
  std::vector<int64_t> gradient_steps(S, 0);
  for (const auto& prog : low.programs)
    for (const Action& pa : prog)
      for (const Action& a : sub_actions(pa))
        if (is_gradient_step(a)) ++gradient_steps[a.stage];

  std::string out;
  std::vector<int32_t> reduce_grads(S, 0);
  for (int32_t r = 0; r < low.num_ranks; ++r) {
    const auto& prog = low.programs[r];
    std::vector<std::string> cells;
    cells.reserve(prog.size() + 8);
    // Where each of the rank's stages is computed next: the window of the next distinct stages
    // is read off these, stage by stage, instead of scanning the program ahead each time.
    const std::vector<int32_t> local = low.stages_of(r);
    // (program index, place in the pair: 0 for the F, 1 for the B), per local stage
    std::vector<std::vector<std::pair<size_t, int32_t>>> uses(local.size());
    auto local_index = [&](int32_t stage) {
      return static_cast<size_t>(std::lower_bound(local.begin(), local.end(), stage) -
                                 local.begin());
    };
    for (size_t k = 0; k < prog.size(); ++k) {
      if (!is_compute(prog[k].type)) continue;
      int32_t place = 0;
      for (const Action& a : sub_actions(prog[k])) {
        auto& u = uses[local_index(a.stage)];
        if (u.empty() || u.back().first != k) u.push_back({k, place});
        ++place;
      }
    }
    std::vector<size_t> cursor(local.size(), 0);
    std::set<int32_t> active;  // unsharded stages
    std::vector<int64_t> done(S, 0);
    PendingSends pending_sends;  // SENDs written and not yet waited for
    auto emit = [&](const Action& a) {
      cells.push_back(to_string(a));
      if (a.type == ActionType::kSendAct || a.type == ActionType::kSendGrad) {
        pending_sends.sent(a, {});
      }
    };
    auto wait_for = [&](const Action& send, TorchActionType wait) {
      // Not pending: sent locally (same rank), or never sent.
      if (pending_sends.retire(send)) {
        cells.push_back(to_string(TorchAction{wait, send.stage, send.microbatch}));
      }
    };
    for (size_t k = 0; k < prog.size(); ++k) {
      const Action& pa = prog[k];
      if (is_compute(pa.type)) {
        // The next kTorchUnshardWindow distinct stages computed from action k on, in the order
        // they come (a pair's two stages count together, as PyTorch's lowering counts them).
        struct Upcoming {
          std::pair<size_t, int32_t> use;  // the stage's next use at or after k
          int32_t stage;
        };
        std::vector<Upcoming> upcoming;
        for (size_t li = 0; li < local.size(); ++li) {
          while (cursor[li] < uses[li].size() && uses[li][cursor[li]].first < k) ++cursor[li];
          if (cursor[li] < uses[li].size()) upcoming.push_back({uses[li][cursor[li]], local[li]});
        }
        std::sort(upcoming.begin(), upcoming.end(),
                  [](const Upcoming& a, const Upcoming& b) { return a.use < b.use; });
        std::vector<int32_t> window;
        for (size_t i = 0; i < upcoming.size(); ++i) {
          if (static_cast<int32_t>(window.size()) >= kTorchUnshardWindow &&
              upcoming[i].use.first != upcoming[i - 1].use.first) {
            break;
          }
          window.push_back(upcoming[i].stage);
        }
        for (auto it = active.begin(); it != active.end();) {
          if (std::find(window.begin(), window.end(), *it) == window.end()) {
            cells.push_back(to_string(TorchAction{TorchActionType::kReshard, *it}));
            it = active.erase(it);
          } else {
            ++it;
          }
        }
        for (int32_t s : window) {
          if (active.insert(s).second) {
            cells.push_back(to_string(TorchAction{TorchActionType::kUnshard, s}));
          }
        }
      }
      emit(pa);
      if (!is_compute(pa.type)) continue;
      // The row's own backward of (s, mb) retires the row's SEND_F of (s, mb): the gradient came
      // back, so the peer has consumed the activation (PyTorch 2.15's _add_wait_send).
      for (const Action& a : sub_actions(pa)) {
        if (a.type != ActionType::kBackward && a.type != ActionType::kBackwardInput) continue;
        wait_for(Action{ActionType::kSendAct, a.stage, a.microbatch}, TorchActionType::kWaitSendF);
      }
      std::vector<int32_t> reduce;
      for (const Action& a : sub_actions(pa)) {
        if (is_gradient_step(a) && ++done[a.stage] == gradient_steps[a.stage]) {
          reduce.push_back(a.stage);
        }
      }
      if (reduce.empty()) continue;
      // After the action's own SENDs, which lower() put right after it.
      for (size_t j = k + 1; j < prog.size() && is_comm(prog[j].type); ++j) {
        bool own = false;
        for (const Action& a : sub_actions(pa)) {
          auto m = message_route(low, a, MessageEnd::kOut);
          own = own || (m && !m->local() && m->send() == prog[j]);
        }
        if (!own) break;
        emit(prog[j]);
        k = j;
      }
      for (int32_t s : reduce) {
        cells.push_back(to_string(TorchAction{TorchActionType::kReduceGrad, s}));
        cells.push_back(to_string(TorchAction{TorchActionType::kWaitReduceGrad, s}));
        ++reduce_grads[s];
      }
    }
    for (int32_t s : active) cells.push_back(to_string(TorchAction{TorchActionType::kReshard, s}));
    // Every send not retired by a backward, at the row's end in send order.
    for (const auto& [send, pos] : pending_sends.in_order()) {
      cells.push_back(
          to_string(TorchAction{send.type == ActionType::kSendAct ? TorchActionType::kWaitSendF
                                                                  : TorchActionType::kWaitSendB,
                                send.stage, send.microbatch}));
    }
    out += join(cells, ",") + "\n";
  }
  // Gradient scaling: PyTorch divides a stage's gradients by m at its REDUCE_GRAD, so exactly one
  // per stage, or the step trains on gradients m times too large (or m times too small).
  for (int32_t s = 0; s < S; ++s) {
    TP_CHECK(reduce_grads[s] == 1, "stage", s, "got", reduce_grads[s], "REDUCE_GRADs in", low.name);
  }
  return out;
}

}  // namespace tightpipe
