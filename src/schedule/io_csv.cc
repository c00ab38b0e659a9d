// CSV in PyTorch's layout: one row per rank, one action per cell, no header; an empty cell is an
// idle slot and is skipped. Loading infers the shape, the stage-to-rank map and the directions
// (DualPipe's 2 when the actions say so), then validates. PyTorch's UNSHARD, RESHARD,
// REDUCE_GRAD and WAIT_* cells are checked against the schedule and left out of it
// (schedule_torch.h).
#include <fmt/format.h>

#include <algorithm>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"
#include "tightpipe/schedule_torch.h"
#include "torch_cells.h"

namespace tightpipe {

std::string to_csv(const Schedule& sch) {
  std::string out;
  for (const auto& prog : sch.programs) {
    std::vector<std::string> cells;
    cells.reserve(prog.size());
    for (const auto& a : prog) cells.push_back(to_string(a));
    out += join(cells, ",") + "\n";
  }
  return out;
}

namespace detail {
// Fills shape and stage_to_rank of `sch` from its programs; errors name `source` and the cells.
Status infer_shape(Schedule& sch, std::string_view source,
                   const std::vector<std::vector<std::pair<int, int>>>& cell_pos) {
  int32_t S = 0, M = 0;
  for (const auto& prog : sch.programs)
    for (const auto& pa : prog)
      for (const auto& a : sub_actions(pa)) {
        S = std::max(S, a.stage + 1);
        M = std::max(M, a.microbatch + 1);
      }
  if (S == 0) {
    return Status::invalid_argument(
        fmt::format("{}: the schedule holds no actions; hint: one row per rank, one action per "
                    "cell, e.g. 0F0,0F1,0B0,0B1",
                    source));
  }
  sch.num_ranks = static_cast<int32_t>(sch.programs.size());
  sch.num_stages = S;
  sch.num_microbatches = M;
  sch.stage_to_rank.assign(S, -1);
  std::vector<std::pair<int, int>> first_seen(S, {-1, -1});
  for (int32_t r = 0; r < sch.num_ranks; ++r) {
    for (size_t i = 0; i < sch.programs[r].size(); ++i) {
      for (const Action& a : sub_actions(sch.programs[r][i])) {
        int32_t& owner = sch.stage_to_rank[a.stage];
        if (owner == -1) {
          owner = r;
          first_seen[a.stage] = cell_pos.empty()
                                    ? std::pair<int, int>{r + 1, static_cast<int>(i) + 1}
                                    : cell_pos[r][i];
        } else if (owner != r) {
          const auto here = cell_pos.empty() ? std::pair<int, int>{r + 1, static_cast<int>(i) + 1}
                                             : cell_pos[r][i];
          return Status::invalid_argument(fmt::format(
              "{}:{}:{}: '{}' puts stage {} on rank {}, but {}:{}:{} already put it on rank {}; "
              "hint: each stage lives on exactly one rank (one row)",
              source, here.first, here.second, to_string(a), a.stage, r, source,
              first_seen[a.stage].first, first_seen[a.stage].second, owner));
        }
      }
    }
  }
  for (int32_t s = 0; s < S; ++s) {
    if (sch.stage_to_rank[s] < 0) {
      return Status::invalid_argument(fmt::format(
          "{}: stage {} appears in no row although stage {} does; hint: stages are numbered "
          "0..S-1 without gaps",
          source, s, S - 1));
    }
  }
  // Two directions (DualPipe) when every action fits them: the first half of the stages runs
  // only the first half of the microbatches and the second half only the second. A schedule of
  // one direction never fits (its stage 0 runs microbatch M - 1), so the guess cannot mislead.
  sch.directions = 2;
  bool fits = S % 2 == 0 && M % 2 == 0;
  for (const auto& prog : sch.programs)
    for (const auto& pa : prog)
      for (const auto& a : sub_actions(pa)) fits = fits && sch.runs(a.stage, a.microbatch);
  if (!fits) sch.directions = 1;
  sch.lowered = sch.has_comm_actions();
  return validate(sch).with_context(source);
}

}  // namespace detail

Result<Schedule> parse_csv(std::string_view text, std::string_view source) {
  return parse_csv(text, source, nullptr);
}

Result<Schedule> parse_csv(std::string_view text, std::string_view source,
                           TorchActionCounts* counts) {
  Schedule sch;
  sch.name = std::string(source);
  std::vector<std::vector<std::pair<int, int>>> pos;
  std::vector<detail::TorchCell> torch_cells;
  auto lines = split(text, '\n');
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  for (size_t li = 0; li < lines.size(); ++li) {
    std::string_view line = lines[li];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    sch.programs.emplace_back();
    pos.emplace_back();
    const auto cells = split(line, ',');
    for (size_t ci = 0; ci < cells.size(); ++ci) {
      std::string_view cell = trim(cells[ci]);
      if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"')
        cell = cell.substr(1, cell.size() - 2);
      if (cell.empty()) continue;  // an idle slot
      auto t = parse_torch_action(cell);
      if (!t.ok()) {
        return Status::invalid_argument(
            fmt::format("{}:{}:{}: {}", source, li + 1, ci + 1, t.status().message()));
      }
      if (t->has_value()) {
        torch_cells.push_back({**t,
                               static_cast<int32_t>(li),
                               sch.programs.back().size(),
                               {static_cast<int>(li) + 1, static_cast<int>(ci) + 1}});
        continue;
      }
      auto a = parse_action(cell);
      if (!a.ok()) {
        return Status::invalid_argument(
            fmt::format("{}:{}:{}: {}", source, li + 1, ci + 1, a.status().message()));
      }
      sch.programs.back().push_back(*a);
      pos.back().push_back({static_cast<int>(li) + 1, static_cast<int>(ci) + 1});
    }
  }
  if (sch.programs.empty()) {
    return Status::invalid_argument(
        fmt::format("{}: empty schedule file; hint: one row per rank, one action per cell, e.g. "
                    "0F0,0F1,0B0,0B1",
                    source));
  }
  TP_RETURN_IF_ERROR(detail::infer_shape(sch, source, pos));
  TP_RETURN_IF_ERROR(detail::check_torch_cells(sch, torch_cells, pos, source));
  if (counts) {
    *counts = {};
    for (const auto& c : torch_cells) {
      switch (c.action.type) {
        case TorchActionType::kUnshard:
          ++counts->unshard;
          break;
        case TorchActionType::kReshard:
          ++counts->reshard;
          break;
        case TorchActionType::kReduceGrad:
          ++counts->reduce_grad;
          break;
        case TorchActionType::kWaitReduceGrad:
          ++counts->wait_reduce_grad;
          break;
        case TorchActionType::kWaitSendF:
        case TorchActionType::kWaitSendB:
          ++counts->wait_send;
          break;
      }
    }
  }
  return sch;
}

}  // namespace tightpipe
