// zb-v-auto: a V-shape (2 chunks per rank) zero-bubble schedule built from a cost table under a
// memory limit (auto_schedule.h; rules in docs/cost_model.md, "zb-v-auto").
//
// Placement is zb-v's: rank r owns stage r (chunk 0, going down) and stage 2p-1-r (chunk 1,
// coming back). Memory per rank in whole-rank microbatch units: a chunk's F adds u (its share of
// the rank's activation bytes, zb_f_memory_units; 1/2 without sizes), its I frees (1 - f)u,
// its W fu. The builder is the list scheduler zb-auto runs too (zb_list.h), with the two-chunk
// knobs (zb::all_policies(2): which ready F and which ready I first, F before a ready I, W only
// when it ends before the next F or I) and zb-v as the handcrafted candidate.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sim/zb_list.h"
#include "sim/zb_score.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

// The building blocks of "Pipeline Parallelism with Controllable Memory" (Qi et al. 2024, section
// 4; sail-sg/zero-bubble-pipeline-parallelism, zbv_greedy.py: stable_pattern_v_min / _v_half and
// the reordering after it), rebuilt here in unit time slots (F = I = W = 1, free messages): rank r
// runs microbatch k's chunk-0 F, chunk-1 F, chunk-1 I and chunk-0 I at the slots `first` below
// plus 6k, and the W fill the two free slots of each period. Peak memory (F holds 1 chunk unit
// until its W): (p + 4) / 3 (min) and (p + 2) / 2 (half) whole-rank microbatch activations.
// Then, as the authors' greedy does, two compaction rounds: each visits the actions in slot order
// and moves one into the earliest free slot after its inputs that keeps its rank's peak within
// the highest rank's peak, then re-times every action as early as its inputs and its rank allow
// (unit times, same order). Round 1 has the W placed and moves actions of the warm-up (before
// rank 0's first chunk-0 I) and the cool-down (after rank 0's last chunk-0 F); round 2 lets the
// W fill whatever slots stay free and moves cool-down actions only. The program is the final
// slots' order with the W in the free slots (chunk 1's first); zb::Timing then times it with the
// real costs. At F = I = W with free messages the spans equal those of zbv_greedy.py (commit
// 39f2c186; ZbVAuto.VMinAndVHalfMatchTheAuthorsGreedy).
class PatternSlots {
 public:
  // kinds 0..3: chunk-0 F, chunk-1 F, chunk-1 I, chunk-0 I; 4: a W (round 1 only)
  PatternSlots(int32_t p, int32_t m, bool v_min) : p_(p), m_(m), at_(p) {
    for (int32_t r = 0; r < p; ++r) {
      std::array<int64_t, 4> first{};
      if (v_min) {
        const int32_t gap = p % 3 == 0 ? 2 : 0;
        first = {r, 2 * p - 1 - r, 2 * p + gap + r, 4 * p + gap - 1 - r};
      } else {
        const int32_t gap = p % 2 == 0 ? 3 : 0;
        first = {2 * r, 3 * p - r - 2, 3 * p + gap + 2 * r - 1, 6 * p + gap - r - 2};
      }
      for (int j = 0; j < 4; ++j) {
        for (int32_t k = 0; k < m; ++k) at_[r][j].push_back(first[j] + 6LL * k);
      }
    }
  }

  // False when two actions of a rank share a slot (no p does; checked anyway).
  bool distinct() const {
    for (int32_t r = 0; r < p_; ++r) {
      std::vector<int64_t> all;
      for (int j = 0; j < 4; ++j) all.insert(all.end(), at_[r][j].begin(), at_[r][j].end());
      std::sort(all.begin(), all.end());
      if (std::adjacent_find(all.begin(), all.end()) != all.end()) return false;
    }
    return true;
  }

  void compact() {
    place_w();
    round(/*with_w=*/true);
    squeeze();
    for (auto& a : at_) a[4].clear();
    round(/*with_w=*/false);
    place_w();
    squeeze();
    for (auto& a : at_) a[4].clear();
  }

  // The programs: the slots in order, with the W in free_w_slots() (chunk 1's first where both
  // are due).
  std::vector<std::vector<Action>> programs() const {
    std::vector<std::vector<Action>> out(p_);
    for (int32_t r = 0; r < p_; ++r) {
      const int32_t s0 = r, s1 = 2 * p_ - 1 - r;
      std::vector<std::pair<int64_t, Action>> slots;
      const std::array<Action, 4> kind = {
          Action{ActionType::kForward, s0, 0}, Action{ActionType::kForward, s1, 0},
          Action{ActionType::kBackwardInput, s1, 0}, Action{ActionType::kBackwardInput, s0, 0}};
      for (int j = 0; j < 4; ++j) {
        for (int32_t k = 0; k < m_; ++k) {
          Action a = kind[j];
          a.microbatch = k;
          slots.emplace_back(at_[r][j][k], a);
        }
      }
      for (int64_t t : free_w_slots(r)) slots.emplace_back(t, Action{ActionType::kBackwardWeight});
      std::sort(slots.begin(), slots.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      std::array<int32_t, 2> pending{0, 0}, next_w{0, 0};  // [0]: chunk 1's W, [1]: chunk 0's
      for (auto& [slot, a] : slots) {
        if (a.type == ActionType::kBackwardInput) ++pending[a.stage == s1 ? 0 : 1];
        if (a.type == ActionType::kBackwardWeight) {
          const int q = pending[0] > 0 ? 0 : 1;
          a = {ActionType::kBackwardWeight, q == 0 ? s1 : s0, next_w[q]++};
          --pending[q];
        }
        out[r].push_back(a);
      }
    }
    return out;
  }

 private:
  using Slots = std::array<std::vector<int64_t>, 5>;

  // Where rank r's 2m W run when they fill its free slots: in slot order, a free slot takes a W
  // while one is due (one per I before it); the rest follow the last action. The one rule for
  // the W: round 1 places them there, round 2's memory and the programs read them from here.
  std::vector<int64_t> free_w_slots(int32_t r) const {
    const std::vector<int64_t> busy = sorted_slots(r, 4);
    std::vector<int64_t> w;
    int32_t due = 0;
    size_t i = 0;
    for (int64_t slot = 0; w.size() < 2u * m_; ++slot) {
      if (i < busy.size() && busy[i] == slot) {
        due += is_i(r, slot) ? 1 : 0;
        ++i;
      } else if (due > 0) {
        w.push_back(slot);
        --due;
      }
    }
    return w;
  }
  void place_w() {
    for (int32_t r = 0; r < p_; ++r) at_[r][4] = free_w_slots(r);
  }
  bool is_i(int32_t r, int64_t slot) const {
    for (int j : {2, 3}) {
      if (std::binary_search(at_[r][j].begin(), at_[r][j].end(), slot)) return true;
    }
    return false;
  }
  std::vector<int64_t> sorted_slots(int32_t r, int kinds) const {
    std::vector<int64_t> all;
    for (int j = 0; j < kinds; ++j) all.insert(all.end(), at_[r][j].begin(), at_[r][j].end());
    std::sort(all.begin(), all.end());
    return all;
  }
  int64_t end_slot(int32_t r) const {
    int64_t e = 0;
    for (const auto& v : at_[r]) {
      if (!v.empty()) e = std::max(e, v.back());
    }
    return e;
  }

  // The slot after which an action may run: its inputs, the same kind's previous microbatch;
  // -1 if none.
  int64_t ready(int32_t r, int j, int32_t k) const {
    int64_t d = -1;
    const Slots& x = at_[r];
    switch (j) {
      case 0:
        if (r > 0) d = at_[r - 1][0][k];
        break;
      case 1:
        d = r + 1 < p_ ? at_[r + 1][1][k] : x[0][k];
        break;
      case 2:
        d = r > 0 ? at_[r - 1][2][k] : x[1][k];
        break;
      case 3:
        d = r + 1 < p_ ? at_[r + 1][3][k] : x[2][k];
        break;
      default: {  // the k-th W follows the k-th I of either chunk
        const std::vector<int64_t>& a = x[2];
        const std::vector<int64_t>& b = x[3];
        // k-th smallest of two sorted lists: the least slot t with #(<= t) > k
        int64_t lo = 0, hi = std::max(a.back(), b.back());
        while (lo < hi) {
          const int64_t mid = (lo + hi) / 2;
          const auto n = (std::upper_bound(a.begin(), a.end(), mid) - a.begin()) +
                         (std::upper_bound(b.begin(), b.end(), mid) - b.begin());
          if (n > k)
            hi = mid;
          else
            lo = mid + 1;
        }
        d = lo;
      }
    }
    if (j >= 1 && j <= 3) d = std::max(d, x[j - 1][k]);
    if (k > 0) d = std::max(d, x[j][k - 1]);
    return d;
  }

  // Rank r's memory after each slot up to `end`, its W at the slots `w`: F +1, W -1.
  // level[t] = memory after slot t.
  std::vector<int32_t> levels(int32_t r, const std::vector<int64_t>& w, int64_t end) const {
    std::vector<int32_t> step(end + 1, 0);
    for (int j : {0, 1}) {
      for (int64_t t : at_[r][j]) {
        if (t <= end) ++step[t];
      }
    }
    for (int64_t t : w) {
      if (t <= end) --step[t];
    }
    int32_t cur = 0;
    for (int32_t& x : step) x = cur += x;
    return step;
  }
  // Rank r's peak with its W where round 1 placed them (with_w) or in its free slots.
  int32_t peak(int32_t r, bool with_w) const {
    const std::vector<int64_t> w = with_w ? at_[r][4] : free_w_slots(r);
    const int64_t end = std::max(end_slot(r), w.empty() ? 0 : w.back());
    const std::vector<int32_t> l = levels(r, w, end);
    return l.empty() ? 0 : *std::max_element(l.begin(), l.end());
  }

  // Every action (W included) as early as its inputs and its rank's previous action allow, in
  // the same order: the slots of the unit-time timing.
  void squeeze() {
    std::vector<Slots> out = at_;
    std::vector<int64_t> lane(p_, 0);  // next free slot per rank
    in_slot_order(5, [&](int64_t, int32_t r, int j, int32_t k) {
      int64_t start = lane[r];
      auto after = [&](int32_t rr, int jj, int32_t kk) {
        start = std::max(start, out[rr][jj][kk] + 1);
      };
      if ((j == 0 && r > 0) || (j == 2 && r > 0)) after(r - 1, j, k);
      if ((j == 1 || j == 3) && r + 1 < p_) after(r + 1, j, k);
      if (j >= 1 && j <= 3) after(r, j - 1, k);
      if (k > 0) after(r, j, k - 1);
      out[r][j][k] = start;
      lane[r] = start + 1;
    });
    at_ = std::move(out);
  }

  void round(bool with_w) {
    const int kinds = with_w ? 5 : 4;
    int32_t cap = 0;
    for (int32_t r = 0; r < p_; ++r) cap = std::max(cap, peak(r, with_w));
    std::vector<std::vector<char>> taken(p_);
    for (int32_t r = 0; r < p_; ++r) taken[r].assign(end_slot(r) + 1, 0);
    if (!with_w) {
      kind_.assign(p_, {});
      for (int32_t r = 0; r < p_; ++r) {
        kind_[r].assign(end_slot(r) + 1, kFree);
        for (int j = 0; j < 4; ++j) {
          for (int64_t t : at_[r][j]) kind_[r][t] = slot_kind(j);
        }
      }
    }
    int phase = 0;  // 0 warm-up, 1 steady (kept), 2 cool-down
    in_slot_order(kinds, [&](int64_t old, int32_t r, int j, int32_t k) {
      bool movable = true;
      if (phase == 0 && j == 3 && r == 0) phase = 1;
      if (phase == 1) {
        if (j == 0 && k == m_ - 1) phase = 2;
        movable = false;
      }
      if (phase == 0 && !with_w) movable = false;
      int64_t to = old;
      if (movable) to = earliest(r, j, k, old, ready(r, j, k) + 1, cap, with_w, taken[r]);
      at_[r][j][k] = to;
      taken[r][to] = 1;
      if (!with_w && to != old) {
        kind_[r][old] = kFree;
        kind_[r][to] = slot_kind(j);
      }
    });
  }

  // Round 2's view of a rank: per slot, free, an F or an I (kinds 0..3 only, the W left to fill
  // the free slots), kept in step with at_ while the round moves actions.
  static constexpr char kFree = 0, kF = 1, kI = 2;
  static char slot_kind(int j) { return j <= 1 ? kF : kI; }
  // peak(r, false) walked over the slot kinds instead of re-sorting the rank's slots: the memory
  // level and the due W from slot `from` on, given the state before it (free_w_slots()' rule: a
  // free slot takes a W while one is due, until all 2m are placed; the levels run to the later
  // of the last action and the last W). `last`: the rank's last busy slot.
  struct Walk {
    int32_t level = 0, most = std::numeric_limits<int32_t>::min(), due = 0, placed = 0;
  };
  Walk walk(const std::vector<char>& kind, int64_t from, int64_t to, int64_t last, Walk w) const {
    for (int64_t slot = from; slot < to; ++slot) {
      const char c = slot <= last ? kind[slot] : kFree;
      if (c == kF) {
        ++w.level;
      } else if (c == kI) {
        ++w.due;
      } else if (w.due > 0 && w.placed < 2 * m_) {
        --w.level;
        --w.due;
        ++w.placed;
      }
      w.most = std::max(w.most, w.level);
      if (slot >= last && w.placed == 2 * m_) break;
    }
    return w;
  }
  std::vector<std::vector<char>> kind_;  // [rank][slot], round 2 only

  // Calls fn(slot, rank, kind, microbatch) for every action of kinds 0..kinds-1 in slot order
  // (ties: rank, kind), each once; fn may move the action it is given (to an earlier slot).
  template <typename Fn>
  void in_slot_order(int kinds, const Fn& fn) {
    using Head = std::tuple<int64_t, int32_t, int, int32_t>;  // slot, rank, kind, microbatch
    std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
    for (int32_t r = 0; r < p_; ++r) {
      for (int j = 0; j < kinds; ++j) {
        if (!at_[r][j].empty()) heads.emplace(at_[r][j][0], r, j, 0);
      }
    }
    while (!heads.empty()) {
      const auto [slot, r, j, k] = heads.top();
      heads.pop();
      if (k + 1 < static_cast<int32_t>(at_[r][j].size())) {
        heads.emplace(at_[r][j][k + 1], r, j, k + 1);
      }
      fn(slot, r, j, k);
    }
  }

  // The earliest slot in [from, old) for action (j, k) of rank r that is free of the actions
  // already placed and keeps the rank's peak within cap; else old.
  int64_t earliest(int32_t r, int j, int32_t k, int64_t old, int64_t from, int32_t cap, bool with_w,
                   const std::vector<char>& taken) {
    if (from >= old) return old;
    if (with_w) {
      // Moving an F earlier raises the memory over [to, old) by 1; a W or an I never raises it.
      if (j != 0 && j != 1) {
        for (int64_t t = from; t < old; ++t) {
          if (!taken[t]) return t;
        }
        return old;
      }
      const std::vector<int32_t> level = levels(r, at_[r][4], old);
      int64_t best = old;
      int32_t most = std::numeric_limits<int32_t>::min();
      for (int64_t t = old - 1; t >= from; --t) {
        most = std::max(most, level[t]);
        if (most + 1 > cap) break;
        if (!taken[t]) best = t;
      }
      return best;
    }
    // With the W filling the free slots, any move can change when they run: try each slot. The
    // slots before `from` are the same for every try: their walk is done once.
    std::vector<char>& kind = kind_[r];
    int64_t last = end_slot(r);
    const Walk before = walk(kind, 0, from, last, Walk{});
    kind[old] = kFree;
    if (old == last) {
      while (last > 0 && kind[last] == kFree) --last;
    }
    int64_t found = old;
    for (int64_t t = from; t < old; ++t) {
      if (taken[t]) continue;
      kind[t] = slot_kind(j);
      const bool ok =
          walk(kind, from, std::numeric_limits<int64_t>::max(), std::max(last, t), before).most <=
          cap;
      kind[t] = kFree;
      if (ok) {
        found = t;
        break;
      }
    }
    kind[old] = slot_kind(j);
    return found;
  }

  int32_t p_, m_;
  std::vector<Slots> at_;
};

std::optional<Schedule> controllable_memory_pattern(int32_t p, int32_t m, bool v_min,
                                                    bool compact) {
  PatternSlots slots(p, m, v_min);
  if (!slots.distinct()) return std::nullopt;
  if (compact) slots.compact();
  Schedule s;
  s.name = v_min ? "v-min pattern" : "v-half pattern";
  s.num_ranks = p;
  s.num_stages = 2 * p;
  s.num_microbatches = m;
  s.stage_to_rank = place_stages(Placement::kV, p, 2 * p);
  s.programs = slots.programs();
  if (!validate(s).ok()) return std::nullopt;  // (never seen; a candidate less, not an error)
  return s;
}

// The zero-bubble authors' own V greedy (sail-sg/zero-bubble-pipeline-parallelism, zbv.py,
// PipelineGraph.try_v_schedule, main 39f2c186), rebuilt here on the problem's per-stage costs,
// messages and memory (the authors' takes one F, B, W and message time for every stage). It
// places actions rank by rank in rounds, timing each as it goes (the later of the rank's lane
// and its input's arrival):
//   * warm-up: one chunk-0 F per rank; then from the last rank up, rank i adds chunk-0 F (with
//     one on every rank above it) while they end before the first chunk-1 F reaches it and its
//     memory keeps room for 2 + 2i more, then runs its first chunk-1 F; then each rank below the
//     first catches up with the one above (alternating chunks, from the last rank down);
//   * 2m rounds: every rank places one I (chunk 1's once the I from the next rank is there,
//     else chunk 0's; chunk-1 ranks from the last, then chunk-0 ranks from the first), then at
//     most one F (chunk 1's when its input is there, else chunk 0's) once the memory has room;
//     before each, pending W run while one ends before the action's input arrives, or when the
//     wait would take the rank's idle over its allowance (the most any rank has idled so far;
//     on a repeat, raised by what the previous pass let each rank idle);
//   * the W left run at the end.
// A pass is repeated with its own per-rank idle as the allowance while that lowers the most
// idle of a rank. Where a general cost table breaks one of the authors' preconditions (an input
// not placed when its turn comes, memory over the limit), the pass gives no schedule.
class AuthorsVGreedy {
 public:
  AuthorsVGreedy(const zb::Problem& pr, double limit) : pr_(pr), limit_(limit) {}

  // The best pass (least most-idle rank) for fill_f, fill_b, its repeats included.
  std::optional<Schedule> best(bool fill_f, bool fill_b) {
    std::optional<Outcome> cur = pass(fill_f, fill_b, {});
    if (!cur) return std::nullopt;
    for (int repeat = 0; repeat < kMaxRepeats; ++repeat) {
      std::optional<Outcome> next = pass(fill_f, fill_b, cur->idle);
      if (!next || !(next->most_idle < cur->most_idle)) break;
      cur = std::move(next);
    }
    return std::move(cur->schedule);
  }

 private:
  static constexpr int kMaxRepeats = 16;
  struct Outcome {
    Schedule schedule;
    std::vector<double> idle;  // per rank, after its first chunk-0 F
    double most_idle = 0;
  };
  // q: what a rank places. 0: chunk-0 F, 1: chunk-1 F, 2: chunk-1 I, 3: chunk-0 I.
  int32_t stage_of(int32_t r, int q) const { return q == 0 || q == 3 ? r : 2 * pr_.p - 1 - r; }

  // When rank r's next q's input from another rank arrives (its end plus the message); nullopt
  // when that input is on r itself (the V's turns) or there is none. Unplaced: kUnplaced.
  std::optional<double> arrival(int32_t r, int q) {
    const int32_t s = stage_of(r, q);
    const int32_t S = pr_.S;
    const bool f = q <= 1;
    const int32_t from = f ? s - 1 : s + 1;
    if (from < 0 || from >= S || pr_.shape.rank_of(from) == r) return std::nullopt;
    const double e = f ? chain_.end_f(from, nf_[s]) : chain_.end_i(from, ni_[s]);
    if (e == zb::ChainTimes::kUnplaced) return e;
    return e + (f ? pr_.stage[from].comm_f : pr_.stage[from].comm_b);
  }

  std::optional<Outcome> pass(bool fill_f, bool fill_b, const std::vector<double>& approved) {
    const int32_t p = pr_.p, m = pr_.m;
    chain_ = pr_.chain();
    nf_.assign(pr_.S, 0);
    ni_.assign(pr_.S, 0);
    nw_.assign(pr_.S, 0);
    cur_.assign(p, 0.0);
    mem_.assign(p, 0.0);
    idle_.assign(p, 0.0);
    pending_.assign(p, {});
    failed_ = false;
    Schedule out = pr_.shape;
    out.programs.assign(p, {});
    progs_ = &out.programs;
    const double most_approved =
        approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
    auto allowance = [&](int32_t r) {  // get_max_stage_bubble(r) - idle[r]
      double most = *std::max_element(idle_.begin(), idle_.end());
      if (!approved.empty()) most = std::max(most, most_approved - approved[r]);
      return most - idle_[r];
    };
    auto count = [&](int32_t r, int q) {
      const int32_t s = stage_of(r, q);
      return q <= 1 ? nf_[s] : ni_[s];
    };

    for (int32_t r = 0; r < p && !failed_; ++r) put(r, 0);
    for (int32_t i = p - 1; i >= 0 && !failed_; --i) {
      if (i == p - 1) {
        put(i, 1);
        continue;
      }
      const std::optional<double> back = arrival(i, 1);  // chunk-1 F of microbatch 0
      if (!back || *back == zb::ChainTimes::kUnplaced) return std::nullopt;
      const double keep = pr_.stage[i].unit * (2 + 2 * i);
      while (!failed_ && mem_[i] + keep <= limit_ + zb::kMemEps &&
             cur_[i] + pr_.stage[i].cf <= *back && count(i, 0) < m) {
        for (int32_t j = 0; j <= i && !failed_; ++j) put(j, 0);
      }
      put(i, 1);
    }
    int chunk = 0;
    for (int32_t i = 1; i < p && !failed_; ++i) {
      auto behind = [&] {
        const int32_t a = count(i, 0) + count(i, 1), b = count(i - 1, 0) + count(i - 1, 1);
        return a < b || (count(i, 1) <= count(i - 1, 1) && count(i - 1, 1) < m);
      };
      while (!failed_ && behind()) {
        bool placed = false;
        for (int32_t j = p - 1; j >= i && !failed_; --j) {
          if (count(j, chunk) < m) {
            put(j, chunk);
            placed = true;
          }
        }
        chunk = 1 - chunk;
        if (!placed && !behind()) break;
        if (!placed && count(i, 0) >= m && count(i, 1) >= m) return std::nullopt;
      }
    }
    if (failed_) return std::nullopt;

    // Before rank r's next action (kind q): W while one ends before its input arrives, and one
    // more if the wait would take r over its allowance (`fill`: that rule is on for this kind).
    auto fill_before = [&](int32_t r, int q, bool fill) {
      const std::optional<double> at = arrival(r, q);
      if (!at || *at == zb::ChainTimes::kUnplaced) return;
      while (!pending_[r].empty() && *at >= cur_[r] + pr_.stage[pending_[r].front()].cw) put_w(r);
      if (!pending_[r].empty() && *at - cur_[r] > allowance(r) && fill) put_w(r);
    };
    for (int32_t round = 0; round < 2 * m && !failed_; ++round) {
      std::vector<int32_t> i0, i1;  // ranks placing a chunk-1 I (i0) or a chunk-0 I (i1)
      for (int32_t i = 0; i < p; ++i) {
        if (count(i, 3) >= count(i, 2)) {
          i0.push_back(i);
        } else if (i == p - 1) {
          i1.push_back(i);
        } else {
          const int32_t next = stage_of(i, 3) + 1;  // chunk-0 stage of rank i + 1
          if (chain_.end_i(next, count(i, 3)) != zb::ChainTimes::kUnplaced || count(i, 2) >= m) {
            i1.push_back(i);
          } else {
            i0.push_back(i);
          }
        }
      }
      std::vector<std::pair<int32_t, int>> order;
      for (auto it = i1.rbegin(); it != i1.rend(); ++it) order.emplace_back(*it, 3);
      for (int32_t i : i0) order.emplace_back(i, 2);
      for (const auto& [i, q] : order) {
        if (failed_) break;
        fill_before(i, q, q == 3 || fill_b);
        put(i, q);
      }
      for (int32_t i = 0; i < p && !failed_; ++i) {
        if (count(i, 1) >= m) continue;
        int q = -1;
        // NOLINTNEXTLINE(bugprone-branch-clone): the tests are ordered; the first and last agree.
        if (count(i, 1) >= count(i, 0)) {
          q = 0;
        } else if (i == p - 1 ||
                   chain_.end_f(stage_of(i, 1) - 1, count(i, 1)) != zb::ChainTimes::kUnplaced) {
          q = 1;
        } else if (count(i, 0) < m &&
                   (i == 0 || chain_.end_f(i - 1, count(i, 0)) != zb::ChainTimes::kUnplaced)) {
          q = 0;
        }
        if (q < 0) continue;
        const double unit = pr_.stage[stage_of(i, q)].unit;
        while (mem_[i] + unit > limit_ + zb::kMemEps) {
          if (pending_[i].empty()) return std::nullopt;
          put_w(i);
        }
        fill_before(i, q, fill_f);
        put(i, q);
      }
    }
    for (int32_t r = 0; r < p && !failed_; ++r) {
      while (!pending_[r].empty()) put_w(r);
    }
    if (failed_) return std::nullopt;
    Outcome o;
    o.schedule = std::move(out);
    o.idle = idle_;
    o.most_idle = *std::max_element(idle_.begin(), idle_.end());
    return o;
  }

  // Rank r places its next q at the later of its lane and its inputs; a missing input, a count
  // over m or memory over the limit fails the pass.
  void put(int32_t r, int q) {
    if (failed_) return;
    const int32_t s = stage_of(r, q);
    const bool f = q <= 1;
    const int32_t k = f ? nf_[s] : ni_[s];
    if (k >= pr_.m || (!f && ni_[s] >= nf_[s])) {
      failed_ = true;
      return;
    }
    const double ready = f ? chain_.ready_f(s, k) : chain_.ready_i(s, k);
    if (ready == zb::ChainTimes::kUnplaced) {
      failed_ = true;
      return;
    }
    const zb::Problem::Stage& z = pr_.stage[s];
    const double start = std::max(cur_[r], ready);
    if (nf_[stage_of(r, 0)] > 0) idle_[r] += start - cur_[r];
    cur_[r] = start + (f ? z.cf : z.ci);
    if (f) {
      chain_.end_f(s, k) = cur_[r];
      mem_[r] += z.unit;
      if (mem_[r] > limit_ + zb::kMemEps) failed_ = true;
      ++nf_[s];
    } else {
      chain_.end_i(s, k) = cur_[r];
      mem_[r] -= (1 - z.frac) * z.unit;
      pending_[r].push_back(s);
      ++ni_[s];
    }
    (*progs_)[r].push_back({f ? ActionType::kForward : ActionType::kBackwardInput, s, k});
  }
  void put_w(int32_t r) {
    const int32_t s = pending_[r].front();
    pending_[r].pop_front();
    const zb::Problem::Stage& z = pr_.stage[s];
    cur_[r] += z.cw;
    mem_[r] -= z.frac * z.unit;
    (*progs_)[r].push_back({ActionType::kBackwardWeight, s, nw_[s]++});
  }

  const zb::Problem& pr_;
  double limit_;
  zb::ChainTimes chain_;
  std::vector<int32_t> nf_, ni_, nw_;         // per stage: F, I, W placed
  std::vector<double> cur_, mem_, idle_;      // per rank: lane free at, memory count, idle
  std::vector<std::deque<int32_t>> pending_;  // per rank: the stages of its I whose W waits
  std::vector<std::vector<Action>>* progs_ = nullptr;
  bool failed_ = false;
};

}  // namespace

Result<Schedule> build_zb_v_auto(int32_t p, int32_t m, const CostModel& costs,
                                 const ZbAutoOptions& o) {
  if (p < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: zb-v-auto needs at least 1 pipeline rank; hint: pass --pp 1 or more", p));
  }
  if (m < 1) {
    return Status::invalid_argument(fmt::format(
        "--microbatches {}: zb-v-auto needs at least 1 microbatch; hint: pass --microbatches >= 1",
        m));
  }
  TP_RETURN_IF_ERROR(o.validate());
  if (costs.num_stages() != 2 * p) {
    return Status::invalid_argument(fmt::format(
        "{}: has {} stage(s) but zb-v-auto runs 2 chunks per rank in a V, 2p = {} stages (p={}); "
        "hint: give a cost table with {} stages (stage s on rank s, and on rank 2p-1-s from p "
        "on), or --cost for uniform whole-rank costs",
        costs.source(), costs.num_stages(), 2 * p, p, 2 * p));
  }
  const double limit = o.memory_limit.value_or(p);
  Schedule placement;  // the V
  placement.num_ranks = p;
  placement.num_stages = 2 * p;
  placement.stage_to_rank = place_stages(Placement::kV, p, 2 * p);
  const zb::Problem pr = zb::Problem::make(m, costs, placement, zb_w_memory_fractions(costs, o));
  std::vector<Schedule> hand;
  auto zb_v = generate_schedule("zb-v", {.ranks = p, .microbatches = m, .chunks = 2});
  if (zb_v.ok()) hand.push_back(std::move(zb_v).value());
  for (bool v_min : {true, false}) {
    for (bool compact : {true, false}) {
      if (auto s = controllable_memory_pattern(p, m, v_min, compact)) hand.push_back(std::move(*s));
    }
  }
  const SearchBudget budget =
      o.search_budget_ms == 0.0 ? SearchBudget{.ms = 0} : zb_search_budget(o);
  // The authors' V greedy at each limit, with and without its two optional W fills.
  auto authors = [&pr](double l) {
    std::vector<Schedule> out;
    AuthorsVGreedy g(pr, l);
    for (bool fill_b : {true, false}) {
      for (bool fill_f : {true, false}) {
        if (auto s = g.best(fill_f, fill_b)) {
          out.push_back(std::move(*s));
        }
      }
    }
    return out;
  };
  return zb::build_list_schedule(pr, costs, limit, o.objective, budget, std::move(hand),
                                 "zb-v-auto", authors);
}

}  // namespace tightpipe
