// The one grid printer: every schedule error shows the rank x step grid with it.
#include <fmt/format.h>

#include <algorithm>

#include "tightpipe/schedule.h"

namespace tightpipe {

std::string format_grid(const Schedule& sch, GridMark mark) {
  size_t width = 1, steps = 0;
  for (const auto& prog : sch.programs) {
    steps = std::max(steps, prog.size());
    for (const auto& a : prog) width = std::max(width, to_string(a).size());
  }
  // Wide grids with a mark show a window of steps around it.
  size_t lo = 0, hi = steps;
  constexpr size_t kWindow = 12;
  if (mark.step >= 0 && steps > 2 * kWindow + 1) {
    lo = mark.step > static_cast<int32_t>(kWindow) ? mark.step - kWindow : 0;
    hi = std::min(steps, lo + 2 * kWindow + 1);
  }
  const std::string label_fmt =
      fmt::format("r{}", !sch.programs.empty() ? sch.programs.size() - 1 : 0);
  const size_t label_width = label_fmt.size() + 1;
  std::string out;
  if (lo > 0 || hi < steps) {
    out += fmt::format("(steps {}..{} of {})\n", lo, hi - 1, steps);
  }
  for (size_t r = 0; r < sch.programs.size(); ++r) {
    const auto& prog = sch.programs[r];
    std::string row = fmt::format("{:<{}} ", fmt::format("r{}:", r), label_width);
    if (lo > 0) row += "... ";
    size_t caret_col = std::string::npos;
    for (size_t i = lo; i < hi; ++i) {
      std::string cell = i < prog.size() ? to_string(prog[i]) : ".";
      const bool marked =
          static_cast<int32_t>(r) == mark.rank && static_cast<int32_t>(i) == mark.step;
      if (marked) {
        caret_col = row.size();
        cell = fmt::format("[{}]", cell);
      }
      row += fmt::format("{:<{}} ", cell, width + (marked ? 2 : 0));
    }
    if (hi < steps) row += "...";
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
    if (caret_col != std::string::npos) {
      out += std::string(caret_col, ' ') + "^ step " + std::to_string(mark.step) + "\n";
    } else if (static_cast<int32_t>(r) == mark.rank &&
               mark.step >= static_cast<int32_t>(prog.size())) {
      out += std::string(label_width + 1, ' ') + "^ (end of program)\n";
    }
  }
  return out;
}

}  // namespace tightpipe
