// Internal to the sim module: the preemptive one-lane relaxation both lower bounds use
// (lower_bound.cc's per-rank term 5, zb_opt.cc's node bound; docs/cost_model.md 4g).
#pragma once

#include <limits>
#include <vector>

namespace tightpipe {

// No bound yet (lower_bound.cc, zb_opt.cc).
inline constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace tightpipe

namespace tightpipe::zb {

struct LaneItem {
  double r, p, q;  // release, processing, tail
};

// Jackson's preemptive schedule on one lane: at every moment run the released item with the
// largest tail. It minimizes max(C + q) over every preemptive schedule; -inf for no items.
// Reorders `items`.
double jackson(std::vector<LaneItem>& items);

}  // namespace tightpipe::zb
