#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "action_id.h"
#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {

bool is_compute(ActionType t) {
  switch (t) {
    case ActionType::kForward:
    case ActionType::kBackwardInput:
    case ActionType::kBackwardWeight:
    case ActionType::kBackward:
    case ActionType::kOverlapFB:
      return true;
    case ActionType::kSendAct:
    case ActionType::kRecvAct:
    case ActionType::kSendGrad:
    case ActionType::kRecvGrad:
      return false;
  }
  return false;
}

bool is_comm(ActionType t) { return !is_compute(t); }

std::string_view action_type_name(ActionType t) {
  switch (t) {
    case ActionType::kForward:
      return "F";
    case ActionType::kBackwardInput:
      return "I";
    case ActionType::kBackwardWeight:
      return "W";
    case ActionType::kBackward:
      return "B";
    case ActionType::kSendAct:
      return "SEND_F";
    case ActionType::kRecvAct:
      return "RECV_F";
    case ActionType::kSendGrad:
      return "SEND_B";
    case ActionType::kRecvGrad:
      return "RECV_B";
    case ActionType::kOverlapFB:
      return "OVERLAP_F_B";
  }
  return "?";
}

Action overlap_f_b(const Action& f, const Action& b) {
  TP_CHECK(f.type == ActionType::kForward && b.type == ActionType::kBackward,
           "an OVERLAP_F_B pair is an F and a B, got ", action_type_name(f.type), " and ",
           action_type_name(b.type));
  return {ActionType::kOverlapFB, f.stage, f.microbatch, b.stage, b.microbatch};
}

SubActions sub_actions(const Action& a) {
  SubActions out;
  if (a.type != ActionType::kOverlapFB) {
    out.at[0] = a;
    return out;
  }
  out.at[0] = {ActionType::kForward, a.stage, a.microbatch};
  out.at[1] = {ActionType::kBackward, a.b_stage, a.b_microbatch};
  out.count = 2;
  return out;
}

std::string to_string(const Action& a) {
  if (a.type == ActionType::kOverlapFB) {
    // PyTorch's form of its composite action: the sub-actions in brackets, then the type.
    return fmt::format("({}F{};{}B{})OVERLAP_F_B", a.stage, a.microbatch, a.b_stage,
                       a.b_microbatch);
  }
  return fmt::format("{}{}{}", a.stage, action_type_name(a.type), a.microbatch);
}

namespace detail {
// action_id.h.
std::string read_action_id(std::string_view s, std::string_view what, int32_t limit, int32_t& out) {
  const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c));
  });
  if (!digits) return fmt::format("the {} '{}' is not a plain number", what, printable(s));
  if (s.size() > 1 && s[0] == '0') {
    return fmt::format("the {} '{}' has a leading zero", what, printable(s));
  }
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || v >= limit) {
    return fmt::format("{} {} is over tightpipe's limit ({} ids 0..{})", what, printable(s), what,
                       limit - 1);
  }
  out = static_cast<int32_t>(v);
  return "";
}
}  // namespace detail

namespace {
Result<Action> parse_simple_action(std::string_view token);
}  // namespace

Result<Action> parse_action(std::string_view token) {
  if (token.empty() || token[0] != '(') return parse_simple_action(token);
  auto bad = [&](std::string_view why) {
    return Status::invalid_argument(fmt::format(
        "bad action '{}': {}; hint: an overlapped pair looks like (0F5;7B2)OVERLAP_F_B (a "
        "forward, ';', a full backward)",
        printable(token), why));
  };
  constexpr std::string_view kSuffix = ")OVERLAP_F_B";
  if (!token.ends_with(kSuffix)) return bad("it does not end with ')OVERLAP_F_B'");
  const std::string_view inner = token.substr(1, token.size() - 1 - kSuffix.size());
  const size_t semi = inner.find(';');
  if (semi == std::string_view::npos) return bad("there is no ';' between the two sub-actions");
  TP_ASSIGN_OR_RETURN(Action f, parse_simple_action(inner.substr(0, semi)));
  TP_ASSIGN_OR_RETURN(Action b, parse_simple_action(inner.substr(semi + 1)));
  if (f.type != ActionType::kForward || b.type != ActionType::kBackward) {
    return bad(fmt::format("the sub-actions are {} and {}, not an F and a B",
                           action_type_name(f.type), action_type_name(b.type)));
  }
  return overlap_f_b(f, b);
}

namespace {
// One action that is not a pair: "2F0", "1SEND_F3".
Result<Action> parse_simple_action(std::string_view token) {
  auto bad = [&](std::string_view why) {
    return Status::invalid_argument(fmt::format(
        "bad action '{}': {}; hint: actions look like 2F0, 1I3, 0W3, 2B1, 1SEND_F3, 2RECV_B0 "
        "(stage, type, microbatch) or (0F5;7B2)OVERLAP_F_B",
        printable(token), why));
  };
  size_t i = 0;
  while (i < token.size() && std::isdigit(static_cast<unsigned char>(token[i]))) ++i;
  if (i == 0) return bad("it does not start with a stage number");
  size_t j = i;
  while (j < token.size() && !std::isdigit(static_cast<unsigned char>(token[j]))) ++j;
  if (j == token.size()) return bad("it does not end with a microbatch number");
  std::string_view type_text = token.substr(i, j - i);
  std::string_view mb_text = token.substr(j);
  static constexpr ActionType kAll[] = {ActionType::kForward,        ActionType::kBackwardInput,
                                        ActionType::kBackwardWeight, ActionType::kBackward,
                                        ActionType::kSendAct,        ActionType::kRecvAct,
                                        ActionType::kSendGrad,       ActionType::kRecvGrad};
  Action a;
  bool found = false;
  for (ActionType t : kAll) {
    if (action_type_name(t) == type_text) {
      a.type = t;
      found = true;
    }
  }
  if (!found) {
    return bad(
        fmt::format("unknown type '{}' (expected F, I, W, B, SEND_F, RECV_F, SEND_B, RECV_B)",
                    printable(type_text)));
  }
  auto parse_id = [&](std::string_view s, std::string_view what, int32_t limit,
                      int32_t& out) -> Status {
    std::string why = detail::read_action_id(s, what, limit, out);
    return why.empty() ? OkStatus() : bad(why);
  };
  TP_RETURN_IF_ERROR(parse_id(token.substr(0, i), "stage", kMaxStages, a.stage));
  TP_RETURN_IF_ERROR(parse_id(mb_text, "microbatch", kMaxMicrobatches, a.microbatch));
  return a;
}
}  // namespace

std::vector<int32_t> place_stages(Placement placement, int32_t ranks, int32_t stages) {
  TP_CHECK(ranks > 0 && stages % ranks == 0, "stages=", stages, " ranks=", ranks);
  std::vector<int32_t> out(stages);
  switch (placement) {
    case Placement::kLoop:
      for (int32_t s = 0; s < stages; ++s) out[s] = s % ranks;
      break;
    case Placement::kV:
      TP_CHECK(stages == 2 * ranks, "V placement needs 2 stages per rank, got ", stages);
      for (int32_t r = 0; r < ranks; ++r) {
        out[r] = r;
        out[2 * ranks - 1 - r] = r;
      }
      break;
  }
  return out;
}

bool Schedule::has_comm_actions() const {
  for (const auto& prog : programs)
    for (const auto& a : prog)
      if (is_comm(a.type)) return true;
  return false;
}

size_t Schedule::size() const {
  size_t n = 0;
  for (const auto& prog : programs) n += prog.size();
  return n;
}

std::vector<int32_t> Schedule::stages_of(int32_t rank) const {
  std::vector<int32_t> out;
  for (int32_t s = 0; s < num_stages; ++s)
    if (stage_to_rank[s] == rank) out.push_back(s);
  return out;
}

}  // namespace tightpipe
