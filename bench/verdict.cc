// The benches' one verdict rule (verdict.h).
#include "verdict.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "tightpipe/base.h"
#include "tightpipe/check.h"

namespace tightpipe::bench {

std::optional<double> spread(std::span<const double> identical_runs) {
  for (double x : identical_runs) TP_CHECK(x > 0, "a run's figure ", x);
  if (identical_runs.size() < 2) return std::nullopt;
  const auto [lo, hi] = std::minmax_element(identical_runs.begin(), identical_runs.end());
  return *hi / *lo - 1;
}

Verdict judge(double error, double tolerance, std::optional<double> noise) {
  TP_CHECK(tolerance >= 0, "tolerance ", tolerance);
  if (!noise || *noise > tolerance) return Verdict::kCouldNotJudge;
  return std::fabs(error) <= tolerance ? Verdict::kPass : Verdict::kFail;
}

std::string could_not_judge_reason(std::optional<double> noise, double tolerance,
                                   std::string_view hint) {
  if (noise && *noise <= tolerance) return "";
  const std::string what =
      noise ? fmt::format("identical runs spread {:.1f}%, above the tolerance {:.1f}%",
                          100 * *noise, 100 * tolerance)
            : fmt::format("one run: the noise is unknown (tolerance {:.1f}%)", 100 * tolerance);
  return hint.empty() ? what : fmt::format("{}; hint: {}", what, hint);
}

Verdict combine(Verdict a, Verdict b) {
  if (a == Verdict::kFail || b == Verdict::kFail) return Verdict::kFail;
  if (a == Verdict::kCouldNotJudge || b == Verdict::kCouldNotJudge) return Verdict::kCouldNotJudge;
  return Verdict::kPass;
}

std::string machine_line() {
  std::string name = "?", family = "?", model = "?";
  int online = 0;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key(trim(std::string_view(line).substr(0, colon)));
    const std::string value(trim(std::string_view(line).substr(colon + 1)));
    if (key == "processor") ++online;
    if (online > 1) continue;  // the first processor's fields
    if (key == "model name") name = value;
    if (key == "cpu family") family = value;
    if (key == "model") model = value;
  }
  std::string load = "?";
  std::ifstream loadavg("/proc/loadavg");
  std::string a, b, c;
  if (loadavg >> a >> b >> c) load = a + " " + b + " " + c;
  return fmt::format("CPU {} (family {}, model {}), {} online; load average {}", name, family,
                     model, online, load);
}

std::string_view verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kFail:
      return "FAIL";
    case Verdict::kCouldNotJudge:
      return "COULD NOT JUDGE";
  }
  return "?";
}

int exit_code(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPass:
      return kExitPass;
    case Verdict::kFail:
      return kExitFail;
    case Verdict::kCouldNotJudge:
      return kExitCouldNotJudge;
  }
  return kExitFail;
}

}  // namespace tightpipe::bench
