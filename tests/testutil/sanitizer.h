// Whether this build runs under AddressSanitizer/UndefinedBehaviorSanitizer: CMake's
// TIGHTPIPE_SANITIZE or TIGHTPIPE_FUZZ define TIGHTPIPE_SANITIZED (gcc also says
// __SANITIZE_ADDRESS__). The one test of it: a test that compares measured times within a few
// percent begins with TP_SKIP_IF_SANITIZED("what it compares"), since the sanitizers slow
// allocation and copies many times more than arithmetic and so distort any timing.
// And one budget: kSweepStride, below.
#pragma once

#include <gtest/gtest.h>

namespace tightpipe::testutil {
#if defined(TIGHTPIPE_SANITIZED) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kBuiltWithSanitizer = true;
#else
inline constexpr bool kBuiltWithSanitizer = false;
#endif
// An exhaustive sweep over shapes steps its innermost range by this: every shape in the main
// build, every third under the sanitizers (the same code paths in a third of the time; the
// sanitizer lane's budget, scripts/sanitize.sh).
inline constexpr int kSweepStride = kBuiltWithSanitizer ? 3 : 1;
}  // namespace tightpipe::testutil

#define TP_SKIP_IF_SANITIZED(what)                                                          \
  do {                                                                                      \
    if (::tightpipe::testutil::kBuiltWithSanitizer)                                         \
      GTEST_SKIP() << what                                                                  \
                   << "; skipped under sanitizers, which distort timing (docs/fuzzing.md)"; \
  } while (0)
