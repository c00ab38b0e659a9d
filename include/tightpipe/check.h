// TP_CHECK: invariants that only a bug can break. On failure prints file:line, the condition and
// the formatted values to stderr and aborts. Never use it for input the user controls: that is a
// Status (status.h).
#pragma once

#include <fmt/format.h>

#include <string>

namespace tightpipe::internal {
[[noreturn]] void check_failed(const char* file, int line, const char* cond,
                               const std::string& msg);

template <typename... Args>
std::string concat_for_check(const Args&... args) {
  std::string out;
  ((out += fmt::format("{}", args)), ...);
  return out;
}
}  // namespace tightpipe::internal

#define TP_CHECK(cond, ...)                                                        \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      ::tightpipe::internal::check_failed(                                         \
          __FILE__, __LINE__, #cond,                                               \
          ::tightpipe::internal::concat_for_check("" __VA_OPT__(, ) __VA_ARGS__)); \
    }                                                                              \
  } while (0)
