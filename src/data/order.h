// Internal: the seeded parts of the loader's order, defined once (docs/data_format.md).
#pragma once

#include <cstdint>
#include <vector>

#include "tightpipe/base.h"

namespace tightpipe::data_internal {

// Streams derived from the user's seed: one purpose, then one epoch.
inline constexpr uint64_t kSourceOrderStream = 1;
inline constexpr uint64_t kShuffleStream = 2;

inline Rng shuffle_rng(uint64_t seed, int64_t epoch) {
  return Rng(seed).fork(kShuffleStream).fork(static_cast<uint64_t>(epoch));
}

// Order in which epoch `epoch` visits the sources: identity without shuffling, otherwise a
// Fisher-Yates permutation (i from n-1 down to 1, j = below(i+1)).
inline std::vector<int64_t> source_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  if (!shuffle || n < 2) return order;
  Rng rng = Rng(seed).fork(kSourceOrderStream).fork(static_cast<uint64_t>(epoch));
  for (size_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  return order;
}

}  // namespace tightpipe::data_internal
