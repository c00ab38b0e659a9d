// TP_CHECK: invariants that only a bug can break. On failure prints file:line, the condition and
// the formatted values to stderr and aborts. Never use it for input the user controls: that is a
// Status (status.h).
#pragma once

#include <fmt/format.h>

#include <string>

namespace tightpipe::internal {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

template <typename... Args>
std::string concat_for_check(const Args&... args) {
  std::string out;
  ((out += fmt::format("{}", args)), ...);
  return out;
}
}  // namespace tightpipe::internal

#define TP_CHECK(cond, ...)                                                         \
  do {                                                                              \
    if (!(cond)) [[unlikely]] {                                                     \
      ::tightpipe::internal::check_failed(__FILE__, __LINE__, #cond,                \
                                          ::tightpipe::internal::concat_for_check(  \
                                              "" __VA_OPT__(, ) __VA_ARGS__));      \
    }                                                                               \
  } while (0)

namespace tightpipe {
// True in a build with AddressSanitizer/UndefinedBehaviorSanitizer (CMake TIGHTPIPE_SANITIZE or
// TIGHTPIPE_FUZZ, or a compiler that says so). The one test of it: tests that compare measured
// times within a few percent GTEST_SKIP() when it holds, since the sanitizers slow some code
// (allocation, memcpy) many times more than the rest and so distort any timing.
#if defined(TIGHTPIPE_SANITIZED) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kBuiltWithSanitizer = true;
#else
inline constexpr bool kBuiltWithSanitizer = false;
#endif
}  // namespace tightpipe
