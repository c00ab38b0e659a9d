// Internal: the seeded parts of the loader's order, defined once (docs/data_format.md).
#pragma once

#include <cstdint>
#include <vector>

#include "tightpipe/base.h"

namespace tightpipe::data_internal {

// Streams derived from the user's seed: one purpose, then one epoch.
inline constexpr uint64_t kSourceOrderStream = 1;
inline constexpr uint64_t kShuffleStream = 2;
// Indexed datasets: per member and epoch, the documents' order and the samples' order.
inline constexpr uint64_t kDocumentOrderStream = 3;
inline constexpr uint64_t kSampleOrderStream = 4;

inline Rng shuffle_rng(uint64_t seed, int64_t epoch) {
  return Rng(seed).fork(kShuffleStream).fork(static_cast<uint64_t>(epoch));
}

// 0..n-1, then (when `rng` is given) a Fisher-Yates permutation: i from n-1 down to 1,
// swap(order[i], order[rng->below(i+1)]).
inline std::vector<int64_t> permutation(size_t n, Rng* rng) {
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  if (rng == nullptr || n < 2) return order;
  for (size_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng->below(i + 1)]);
  return order;
}

// Order in which epoch `epoch` visits the sources: identity without shuffling, otherwise a
// seeded permutation.
inline std::vector<int64_t> source_order(size_t n, uint64_t seed, int64_t epoch, bool shuffle) {
  Rng rng = Rng(seed).fork(kSourceOrderStream).fork(static_cast<uint64_t>(epoch));
  return permutation(n, shuffle ? &rng : nullptr);
}

// The seeded order of `n` items of an indexed dataset member in one of its epochs; `stream` is
// kDocumentOrderStream or kSampleOrderStream. Identity without shuffling.
inline std::vector<int64_t> member_order(size_t n, uint64_t seed, uint64_t stream, int64_t member,
                                         int64_t epoch, bool shuffle) {
  Rng rng =
      Rng(seed).fork(stream).fork(static_cast<uint64_t>(member)).fork(static_cast<uint64_t>(epoch));
  return permutation(n, shuffle ? &rng : nullptr);
}

}  // namespace tightpipe::data_internal
