// Internal to the sim module: the dependency timing the cost-aware greedies (zb_auto.cc,
// zb_v_auto.cc) share, one definition for both. A chain of S stages (stage s feeds s + 1 with
// F's activation; I flows back from s + 1 to s; the last stage turns its own F into I): the
// end times of the F and I placed so far, and when a stage's next F or I may start.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

namespace tightpipe::zb {

class ChainTimes {
 public:
  static constexpr double kUnplaced = std::numeric_limits<double>::infinity();

  // Per stage: compute times of F and I, message time to s + 1 (activation) and to s - 1
  // (gradient); 0 where the neighbour is on the same rank.
  struct Stage {
    double cf = 0, ci = 0, comm_f = 0, comm_b = 0;
  };

  ChainTimes() = default;
  ChainTimes(std::vector<Stage> stages, int32_t m)
      : st_(std::move(stages)),
        m_(m),
        end_f_(st_.size() * static_cast<size_t>(m), kUnplaced),
        end_i_(st_.size() * static_cast<size_t>(m), kUnplaced) {
    // tail_[j]: the least time from the end of an F on stage j - 1 to the end of the I of the
    // same microbatch on stage j (F on j .. S-1, then I on S-1 .. j, each as soon as its input).
    const int32_t S = num_stages();
    tail_.assign(S + 1, 0);
    double f_chain = 0, i_chain = 0;
    for (int32_t j = S - 1; j >= 1; --j) {
      f_chain += st_[j - 1].comm_f + st_[j].cf;
      i_chain += st_[j].ci + (j + 1 < S ? st_[j + 1].comm_b : 0);
      tail_[j] = f_chain + i_chain;
    }
  }

  // How many stages downstream estimate_i() follows the lanes; beyond, it takes the chain's
  // least time (tail_), so a call is O(kEstimateDepth), not O(S).
  static constexpr int32_t kEstimateDepth = 16;

  int32_t num_stages() const { return static_cast<int32_t>(st_.size()); }
  double& end_f(int32_t s, int32_t k) { return end_f_[static_cast<size_t>(s) * m_ + k]; }
  double& end_i(int32_t s, int32_t k) { return end_i_[static_cast<size_t>(s) * m_ + k]; }

  // When F of microbatch k on s can start by its dependencies (kUnplaced: its input is not
  // placed yet).
  double ready_f(int32_t s, int32_t k) {
    if (s == 0) return 0;
    const double e = end_f(s - 1, k);
    return e == kUnplaced ? kUnplaced : e + st_[s - 1].comm_f;
  }
  // When I of microbatch k on s can start (its F is placed; kUnplaced: not placed downstream).
  double ready_i(int32_t s, int32_t k) {
    if (s == num_stages() - 1) return end_f(s, k);
    const double e = end_i(s + 1, k);
    return e == kUnplaced ? kUnplaced : std::max(end_f(s, k), e + st_[s + 1].comm_b);
  }
  // A lower bound on when I of microbatch k on s can start: the known time, or the chain of the
  // microbatch's remaining F and I downstream, each of the next kEstimateDepth stages no earlier
  // than lane_free(stage), the stages beyond as soon as their inputs (tail_).
  template <typename LaneFree>
  double estimate_i(int32_t s, int32_t k, const LaneFree& lane_free) {
    const double known = ready_i(s, k);
    if (known < kUnplaced) return known;
    const int32_t S = num_stages();
    const int32_t last = std::min(S - 1, s + kEstimateDepth);  // followed stage by stage
    // fe[j - s]: the (estimated) end of F on stage j, for j in s..last.
    std::array<double, kEstimateDepth + 1> fe;
    fe[0] = end_f(s, k);
    for (int32_t j = s + 1; j <= last; ++j) {
      const double e = end_f(j, k);
      fe[j - s] =
          e < kUnplaced ? e : std::max(lane_free(j), fe[j - 1 - s] + st_[j - 1].comm_f) + st_[j].cf;
    }
    double ie = 0;  // end of I of stage j + 1
    if (last < S - 1) {
      const double e = end_i(last + 1, k);
      ie = e < kUnplaced ? e : fe[last - s] + tail_[last + 1];
    }
    for (int32_t j = last; j > s; --j) {
      const double e = end_i(j, k);
      if (e < kUnplaced) {
        ie = e;
        continue;
      }
      double start = std::max(lane_free(j), fe[j - s]);
      if (j + 1 < S) start = std::max(start, ie + st_[j + 1].comm_b);
      ie = start + st_[j].ci;
    }
    return std::max(fe[0], ie + st_[s + 1].comm_b);
  }

 private:
  std::vector<Stage> st_;
  int32_t m_ = 0;
  std::vector<double> end_f_, end_i_;  // [S * m]
  std::vector<double> tail_;           // [S + 1], see the constructor
};

}  // namespace tightpipe::zb
