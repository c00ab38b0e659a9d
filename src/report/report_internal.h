// Helpers shared by the report's source files (not a public header).
#pragma once

#include <string>

namespace tightpipe::report_internal {

// "3.10 ms" for seconds; "4.5 unit" for abstract units.
std::string fmt_time(double t, const std::string& unit);
// "12.3%".
std::string pct(double x);

}  // namespace tightpipe::report_internal
