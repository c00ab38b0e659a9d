// Whether this build runs under AddressSanitizer/UndefinedBehaviorSanitizer: CMake's
// TIGHTPIPE_SANITIZE or TIGHTPIPE_FUZZ define TIGHTPIPE_SANITIZED (gcc also says
// __SANITIZE_ADDRESS__). The one test of it: a test that compares measured times within a few
// percent begins with TP_SKIP_IF_SANITIZED("what it compares"), since the sanitizers slow
// allocation and copies many times more than arithmetic and so distort any timing.
// And the budgets: kSweepStride and kCaseStride, below.
#pragma once

#include <gtest/gtest.h>

namespace tightpipe::testutil {
#if defined(TIGHTPIPE_SANITIZED) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kBuiltWithSanitizer = true;
#else
inline constexpr bool kBuiltWithSanitizer = false;
#endif
// An exhaustive sweep over shapes steps its innermost range by this: every shape in the main
// build, every fifth under the sanitizers (the same code paths in a fifth of the time; the
// sanitizer lane's budget, scripts/sanitize.sh). At every third the four sweeps that use it ran
// 74 of that lane's 571 test-seconds (2026-12-07, AMD EPYC Zen 3), at every fifth 38.
inline constexpr int kSweepStride = kBuiltWithSanitizer ? 5 : 1;
// A short list of unequal cases (the paper's six settings, m up to 6 of an exponential search)
// takes every third under the sanitizers: at every fifth, the fifth is the costliest
// (ZbOpt.OptimalWithinMemoryAndNeverWorseThanTheGreedy 0.8 -> 41 s).
inline constexpr int kCaseStride = kBuiltWithSanitizer ? 3 : 1;
}  // namespace tightpipe::testutil

#define TP_SKIP_IF_SANITIZED(what)                                                          \
  do {                                                                                      \
    if (::tightpipe::testutil::kBuiltWithSanitizer)                                         \
      GTEST_SKIP() << what                                                                  \
                   << "; skipped under sanitizers, which distort timing (docs/fuzzing.md)"; \
  } while (0)
