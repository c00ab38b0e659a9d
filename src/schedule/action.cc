#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {

bool is_compute(ActionType t) {
  switch (t) {
    case ActionType::kForward:
    case ActionType::kBackwardInput:
    case ActionType::kBackwardWeight:
    case ActionType::kBackward:
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
    case ActionType::kForward: return "F";
    case ActionType::kBackwardInput: return "I";
    case ActionType::kBackwardWeight: return "W";
    case ActionType::kBackward: return "B";
    case ActionType::kSendAct: return "SEND_F";
    case ActionType::kRecvAct: return "RECV_F";
    case ActionType::kSendGrad: return "SEND_B";
    case ActionType::kRecvGrad: return "RECV_B";
  }
  return "?";
}

std::string to_string(const Action& a) {
  return fmt::format("{}{}{}", a.stage, action_type_name(a.type), a.microbatch);
}

Result<Action> parse_action(std::string_view token) {
  auto bad = [&](std::string_view why) {
    return Status::invalid_argument(fmt::format(
        "bad action '{}': {}; hint: actions look like 2F0, 1I3, 0W3, 2B1, 1SEND_F3, 2RECV_B0 "
        "(stage, type, microbatch)",
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
  static constexpr ActionType kAll[] = {
      ActionType::kForward,  ActionType::kBackwardInput, ActionType::kBackwardWeight,
      ActionType::kBackward, ActionType::kSendAct,       ActionType::kRecvAct,
      ActionType::kSendGrad, ActionType::kRecvGrad};
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
  // A stage or microbatch id: digits only, no leading zero (keeps parse the inverse of
  // to_string), below tightpipe's limit; errors name which id, its value and the limit.
  auto parse_id = [&](std::string_view s, std::string_view what, int32_t limit,
                      int32_t& out) -> Status {
    const bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!digits) return bad(fmt::format("the {} '{}' is not a plain number", what, printable(s)));
    if (s.size() > 1 && s[0] == '0') {
      return bad(fmt::format("the {} '{}' has a leading zero", what, printable(s)));
    }
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || v >= limit) {
      return bad(fmt::format("{} {} is over tightpipe's limit ({} ids 0..{})", what, printable(s),
                             what, limit - 1));
    }
    out = static_cast<int32_t>(v);
    return OkStatus();
  };
  TP_RETURN_IF_ERROR(parse_id(token.substr(0, i), "stage", kMaxStages, a.stage));
  TP_RETURN_IF_ERROR(parse_id(mb_text, "microbatch", kMaxMicrobatches, a.microbatch));
  return a;
}

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
