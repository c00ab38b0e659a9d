// Internal to the schedule module: how the CSV reader (io_csv.cc) hands PyTorch's UNSHARD,
// RESHARD and REDUCE_GRAD cells to their checker (io_torch.cc).
#pragma once

#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "tightpipe/schedule.h"
#include "tightpipe/schedule_torch.h"

namespace tightpipe::detail {

// One UNSHARD / RESHARD / REDUCE_GRAD cell of a CSV: on row `rank`, before that row's program
// action number `before` (counting the actions parse_csv kept), at line:column `pos`.
struct TorchCell {
  TorchAction action;
  int32_t rank = 0;
  size_t before = 0;
  std::pair<int, int> pos;
};

// The rules of schedule_torch.h (parse_csv with counts) for `cells`, in file order, against the
// parsed and valid `sch`; `action_pos[r][i]` is the line:column of program action i of rank r.
// Errors name `source`, the cell's line:column, the cell and a hint.
Status check_torch_cells(const Schedule& sch, const std::vector<TorchCell>& cells,
                         const std::vector<std::vector<std::pair<int, int>>>& action_pos,
                         std::string_view source);

}  // namespace tightpipe::detail
