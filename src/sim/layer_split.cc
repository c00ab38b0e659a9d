// choose_layer_split (simulator.h): the layer split with the smallest simulated makespan.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "tightpipe/check.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

using Blocks = std::vector<int32_t>;  // [S] blocks per stage

struct ScoredSplit {
  Blocks blocks;
  double makespan = 0;
  double bubble_ratio = 0;
};

int64_t sum_of_squares(const Blocks& b) {
  int64_t s = 0;
  for (int32_t x : b) s += int64_t(x) * x;
  return s;
}

// Strictly better: a smaller makespan (beyond 1e-9 relative), then more even, then lexicographic.
bool better(const ScoredSplit& a, const ScoredSplit& b) {
  const double tol = 1e-9 * std::max(std::abs(a.makespan), std::abs(b.makespan));
  if (a.makespan < b.makespan - tol) return true;
  if (a.makespan > b.makespan + tol) return false;
  const int64_t qa = sum_of_squares(a.blocks), qb = sum_of_squares(b.blocks);
  if (qa != qb) return qa < qb;
  return a.blocks < b.blocks;
}

// The fewest blocks stage `s` of `S` may hold: a middle stage needs one, the ends hold E or L.
int32_t min_blocks(int32_t s, int32_t S) { return s == 0 || s == S - 1 ? 0 : 1; }

// C(L+1, S-1), the number of valid splits, or `cap` + 1 once it exceeds cap.
int64_t count_splits(int32_t L, int32_t S, int64_t cap) {
  if (S == 1) return 1;
  const int64_t n = int64_t(L) + 1, k = std::min<int64_t>(S - 1, n - (S - 1));
  if (k < 0) return 0;
  // C(n, k) step by step: C(n-k+j, j) = C(n-k+j-1, j-1) (n-k+j) / j is exact at every step.
  __int128 c = 1;
  for (int64_t j = 1; j <= k; ++j) {
    c = c * (n - k + j) / j;
    if (c > cap) return cap + 1;
  }
  return static_cast<int64_t>(c);
}

std::vector<StageLayers> to_layers(const Blocks& b) {
  const int32_t S = static_cast<int32_t>(b.size());
  std::vector<StageLayers> out(S);
  for (int32_t s = 0; s < S; ++s) out[s] = {s == 0, b[s], s == S - 1};
  return out;
}

class SplitSearch {
 public:
  SplitSearch(const LayerCosts& costs, const Schedule& lowered, const SimOptions& sim)
      : costs_(costs), lowered_(lowered), sim_(sim) {
    sim_.record_timeline = false;
  }

  // Simulates `b` once (memoized) and keeps the best seen.
  Result<ScoredSplit> score(const Blocks& b) {
    auto it = seen_.find(b);
    if (it != seen_.end()) return it->second;
    const CostModel m = cost_model_for_layout(costs_, to_layers(b), "candidate");
    TP_ASSIGN_OR_RETURN(SimResult r, simulate(lowered_, m, sim_));
    ScoredSplit sc{b, r.makespan, r.bubble_ratio};
    seen_.emplace(b, sc);
    if (!best_ || better(sc, *best_)) best_ = sc;
    return sc;
  }

  // Every split, lexicographically: blocks[s..] from `left` blocks.
  Status enumerate(Blocks& b, int32_t s, int32_t left) {
    const int32_t S = static_cast<int32_t>(b.size());
    if (s == S - 1) {
      b[s] = left;
      return score(b).status();
    }
    int32_t reserve = 0;  // what the later middle stages need
    for (int32_t t = s + 1; t < S; ++t) reserve += min_blocks(t, S);
    for (int32_t n = min_blocks(s, S); n <= left - reserve; ++n) {
      b[s] = n;
      TP_RETURN_IF_ERROR(enumerate(b, s + 1, left - n));
    }
    return OkStatus();
  }

  // Steepest descent over single-block moves across one boundary, from `start`. Each step is
  // strictly better; the step cap only guards against the tolerance of better() going round.
  Status descend(const ScoredSplit& start) {
    ScoredSplit cur = start;
    const int32_t S = static_cast<int32_t>(cur.blocks.size());
    for (int step = 0; step < 100000; ++step) {
      ScoredSplit next = cur;
      for (int32_t s = 0; s + 1 < S; ++s) {
        for (int dir : {+1, -1}) {  // +1: a block from stage s to s+1; -1: back
          Blocks b = cur.blocks;
          const int32_t from = dir > 0 ? s : s + 1, to = dir > 0 ? s + 1 : s;
          if (b[from] <= min_blocks(from, S)) continue;
          --b[from];
          ++b[to];
          TP_ASSIGN_OR_RETURN(ScoredSplit sc, score(b));
          if (better(sc, next)) next = sc;
        }
      }
      if (next.blocks == cur.blocks) return OkStatus();
      cur = next;
    }
    return OkStatus();
  }

  const ScoredSplit& best() const { return *best_; }
  int64_t simulated() const { return static_cast<int64_t>(seen_.size()); }

 private:
  const LayerCosts& costs_;
  const Schedule& lowered_;
  SimOptions sim_;
  std::map<Blocks, ScoredSplit> seen_;
  std::optional<ScoredSplit> best_;
};

// The split that minimizes the largest stage time F + B (a DP over stages and blocks used; the
// smallest count wins ties at each stage).
Blocks min_max_split(const LayerCosts& c, int32_t L, int32_t S) {
  // prefix[k]: F + B of blocks 0..k-1 (each its own with block_each).
  std::vector<double> prefix(L + 1, 0.0);
  for (int32_t k = 0; k < L && !c.block_each.empty(); ++k) {
    const StageCost& b = c.block_each.at(k);
    prefix[k + 1] = prefix[k] + b.f + b.b;
  }
  // Stage s holding the n blocks that end at block k (exclusive).
  auto time = [&](int32_t s, int32_t k, int32_t n) {
    double t = c.block_each.empty() ? n * (c.block.f + c.block.b) : prefix[k] - prefix[k - n];
    if (s == 0) t += c.embedding.f + c.embedding.b;
    if (s == S - 1) t += c.head.f + c.head.b;
    return t;
  };
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][k]: the smallest largest stage time of stages 0..s holding k blocks; pick[s][k] the
  // count of stage s there.
  std::vector<std::vector<double>> best(S, std::vector<double>(L + 1, kInf));
  std::vector<Blocks> pick(S, Blocks(L + 1, 0));
  for (int32_t k = 0; k <= L; ++k) best[0][k] = time(0, k, k);
  for (int32_t s = 1; s < S; ++s) {
    for (int32_t k = 0; k <= L; ++k) {
      for (int32_t n = min_blocks(s, S); n <= k; ++n) {
        const double v = std::max(best[s - 1][k - n], time(s, k, n));
        if (v < best[s][k]) {
          best[s][k] = v;
          pick[s][k] = n;
        }
      }
    }
  }
  Blocks b(S, 0);
  int32_t k = L;
  for (int32_t s = S - 1; s > 0; --s) {
    b[s] = pick[s][k];
    k -= b[s];
  }
  b[0] = k;
  return b;
}

}  // namespace

std::vector<StageLayers> balanced_layer_split(const LayerCosts& costs, int32_t num_layers,
                                              int32_t stages) {
  TP_CHECK(stages >= 1 && num_layers >= stages - 2, "stages=", stages, " layers=", num_layers);
  return to_layers(min_max_split(costs, num_layers, stages));
}

Result<LayerSplit> choose_layer_split(const LayerCosts& costs, const Schedule& schedule,
                                      int32_t num_layers, const LayerSplitOptions& options) {
  const int32_t S = schedule.num_stages, L = num_layers;
  if (S < 1) {
    return Status::invalid_argument(fmt::format(
        "layer split: schedule '{}' has {} stages; hint: a schedule with at least one stage",
        schedule.name, S));
  }
  if (L < 0 || L < S - 2) {
    return Status::invalid_argument(fmt::format(
        "layer split: {} transformer layer(s) cannot fill the {} middle stage(s) of {} stages; "
        "hint: use at least {} layers or fewer stages",
        L, std::max(0, S - 2), S, std::max(0, S - 2)));
  }
  if (options.max_exhaustive < 1) {
    return Status::invalid_argument(fmt::format(
        "layer split: max_exhaustive {} must be >= 1; hint: 4096", options.max_exhaustive));
  }
  Schedule lowered_storage;
  if (!schedule.lowered) {
    TP_ASSIGN_OR_RETURN(lowered_storage, lower(schedule));
  }
  const Schedule& lowered = schedule.lowered ? schedule : lowered_storage;

  SplitSearch search(costs, lowered, options.sim);
  LayerSplit out;
  if (count_splits(L, S, options.max_exhaustive) <= options.max_exhaustive) {
    Blocks b(S, 0);
    TP_RETURN_IF_ERROR(search.enumerate(b, 0, L));
    out.exhaustive = true;
  } else {
    Blocks even;
    bool even_valid = true;
    for (const StageLayers& l : even_layer_split(L, S)) {
      even_valid = even_valid && l.blocks >= min_blocks(int32_t(even.size()), S);
      even.push_back(l.blocks);
    }
    TP_ASSIGN_OR_RETURN(ScoredSplit start, search.score(min_max_split(costs, L, S)));
    if (even_valid) {
      TP_ASSIGN_OR_RETURN(ScoredSplit a, search.score(even));
      if (better(a, start)) start = a;
    }
    TP_RETURN_IF_ERROR(search.descend(start));
  }
  const ScoredSplit& best = search.best();
  out.stages = to_layers(best.blocks);
  out.makespan = best.makespan;
  out.bubble_ratio = best.bubble_ratio;
  out.simulated = search.simulated();
  return out;
}

}  // namespace tightpipe
