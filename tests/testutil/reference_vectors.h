// REFERENCE.md section 2's test vectors (p = 4, m = 8, whole-rank F = I = W = 1, B = 2, no
// communication), as that table prints them: one table for the test that holds them
// (src/sim/reference_test.cc) and the bench that prints every check beside its prediction
// (bench/sim/checks_bench.cc).
#pragma once

#include <cstdint>
#include <vector>

namespace tightpipe::testutil {

struct ReferenceVector {
  const char* name;  // generator
  int32_t v;         // chunks per rank
  double makespan;
  // (p * makespan - total work) / (p * makespan) in percent, one decimal. Where the table prints
  // "0 inside a stage / rank" (ZB-H2, ZB-V) this is the makespan measure of the same definition,
  // and bubble_printed is false.
  double bubble_percent;
  bool bubble_printed;
  std::vector<double> peak;  // peak activations per rank, whole-rank microbatch units
  double busy_span;          // "24 busy" from each stage's first F (ZB-H2, ZB-V); 0: not printed
};

inline const std::vector<ReferenceVector>& reference_vectors() {
  static const std::vector<ReferenceVector> kRows = {
      {"gpipe", 1, 33, 27.3, true, {8, 8, 8, 8}, 0},
      {"1f1b", 1, 33, 27.3, true, {4, 3, 2, 1}, 0},
      {"interleaved", 2, 28.5, 15.8, true, {5.5, 4.5, 3.5, 2.5}, 0},
      {"interleaved", 4, 26.25, 8.6, true, {4.75, 4.25, 3.75, 3.25}, 0},
      {"zb-h1", 1, 27, 11.1, true, {4, 4, 4, 4}, 0},
      {"zb-h2", 1, 27, 11.1, false, {7, 7, 7, 7}, 24},
      {"zb-v", 2, 25.5, 5.9, false, {4, 4, 4, 4}, 24},
  };
  return kRows;
}

}  // namespace tightpipe::testutil
