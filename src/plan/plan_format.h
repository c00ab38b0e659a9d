// How the planner's outputs write money, durations and sizes (the table, the reason, the HTML page
// use the same spellings). Internal to src/plan.
#pragma once

#include <fmt/format.h>

#include <string>

namespace tightpipe::plan_format {

inline constexpr double kMiB = 1024.0 * 1024.0;
inline constexpr double kGiB = 1024.0 * kMiB;

// "$7518.38", "$24.5k", "$21.34M", "$3.20e+12".
inline std::string dollars(double x) {
  if (x >= 1e9) return fmt::format("${:.2e}", x);
  if (x >= 1e6) return fmt::format("${:.2f}M", x / 1e6);
  if (x >= 1e4) return fmt::format("${:.1f}k", x / 1e3);
  return fmt::format("${:.2f}", x);
}

// "12.0 min", "47.0 h", "3.2 d", "1.6e+05 d".
inline std::string hours(double h) {
  if (h >= 24 * 1e5) return fmt::format("{:.1e} d", h / 24);
  if (h >= 48) return fmt::format("{:.1f} d", h / 24);
  if (h >= 1) return fmt::format("{:.1f} h", h);
  return fmt::format("{:.1f} min", h * 60);
}

// "7.2%".
inline std::string percent(double ratio) { return fmt::format("{:.1f}%", 100 * ratio); }

}  // namespace tightpipe::plan_format
