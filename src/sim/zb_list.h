// Internal to the sim module: the one list scheduler behind zb-auto (zb-1p, zb-2p: one chunk per
// rank, loop placement) and zb-v-auto (two chunks per rank, V placement), and the driver both
// builders share (docs/cost_model.md, "zb-auto").
//
//   * Problem: per stage the times (CostModel::action_time, message overheads included), the
//     message times to the neighbours, the memory one F holds and the share W frees; built once.
//   * Policy: the knobs of one greedy pass (the same struct for 1 and 2 chunks).
//   * ListScheduler: one pass. Every rank keeps its next decision (an action and its start); an
//     ordered set of (start, rank) gives the earliest in O(log p); a commit re-decides only the
//     ranks whose dependencies it changed (the rank and its two neighbours). The pass returns
//     the schedule with its makespan, span and memory peak taken from the times it placed (the
//     simulator's times: the start of each action is the later of its lane and its inputs).
//   * build_list_schedule(): per point of a fixed grid of memory limits (limit_grid), from the
//     top down: every policy's pass (on one worker per hardware thread), the handcrafted
//     schedules whose peak is that point, the pick (Score, ties to the earlier) and the local
//     search within it; the best over the points wins, and the points whose lower bound exceeds
//     it are skipped (docs/cost_model.md 4c).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sim/zb_chain.h"
#include "sim/zb_score.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"

namespace tightpipe::zb {

// Which of two ready F runs first (two chunks only).
enum class FChunkOrder { kChunk1First, kChunk0First, kAlternate };

struct Policy {
  // Most F in flight (F done, I not yet) on stage s: cap_base - cap_slope * s, at least 1;
  // slope 0: only the memory limit bounds them (one chunk only). cap_base is set per limit.
  int32_t cap_slope = 0;
  int32_t cap_base_offset = 0;  // cap_base = floor(limit) - offset
  // One chunk only: at most Problem::Stage::warmup F in flight on a stage (the F that end before
  // its first I can arrive), the authors' "just in time" warm-up count from the costs.
  bool chain_cap = false;
  bool f_before_i = false;      // a ready F (that fits) runs before a ready I
  bool f_just_in_time = false;  // an F runs only if it ends before the (estimated) next I
  bool w_closes_gap = false;    // a gap-filling W runs only if it ends before the next F or I
  FChunkOrder f_order = FChunkOrder::kChunk1First;  // two chunks
  bool i_chunk0_first = false;  // two ready I: chunk 0 (the older microbatch) first
};

// The knob combinations tried for `chunks` chunks per rank (40 for one, 24 for two), in a fixed
// order.
std::vector<Policy> all_policies(int32_t chunks);

struct Problem {
  int32_t p = 0, S = 0, m = 0, v = 1;
  Schedule shape;  // placement only (no programs)
  struct Stage {
    double cf = 0, ci = 0, cw = 0;  // action times
    double comm_f = 0, comm_b = 0;  // message time to s + 1 and s - 1 (0: same rank)
    double unit = 1;                // what its F holds (zb_f_memory_units)
    double frac = 0.5;              // the share of unit its W frees
    // The F that fit on this stage's lane from its first F's earliest start to the earliest
    // arrival of microbatch 0's I (every F and I as soon as its input; at least 1).
    int32_t warmup = 1;
  };
  std::vector<Stage> stage;
  std::vector<std::array<int32_t, 2>> stages_of_rank;  // chunk c of rank r (v entries used)

  // `placement`: num_ranks, num_stages and stage_to_rank (one or two stages per rank).
  static Problem make(int32_t m, const CostModel& costs, const Schedule& placement,
                      const std::vector<double>& fractions);
  // The dependency timing of the problem's stages with nothing placed (the list scheduler's and
  // the authors' greedies' start).
  ChainTimes chain() const;
};

struct Pass {
  Schedule schedule;
  Score score;
  bool cut = false;  // stopped early: worse than the cutoff (schedule and score unset)
};

class ListScheduler {
 public:
  explicit ListScheduler(const Problem& pr);
  // One pass at `limit`. It stops early (Pass::cut) once a lower bound on its objective (per rank:
  // when its lane is free plus its remaining work, less its first start for span) exceeds
  // `cutoff`: it could not beat a candidate of that score.
  Pass run(double limit, const Policy& policy, ZbObjective objective,
           double cutoff = std::numeric_limits<double>::infinity());

 private:
  struct Choice {
    std::optional<ActionType> type;  // nullopt: nothing can be decided yet
    int32_t stage = -1;
    double start = std::numeric_limits<double>::infinity();
  };
  struct StageState {
    int32_t nf = 0, ni = 0, nw = 0;
  };
  struct RankState {
    double free_at = 0, first_start = -1, mem = 0;
    double remaining = 0;      // compute time of the actions not placed yet
    int32_t last_f_chunk = 1;  // so that kAlternate starts with chunk 0
  };

  Choice decide(int32_t r, bool relaxed);
  void commit(int32_t r, const Choice& c, std::vector<Action>& prog);
  void set_choice(int32_t r, Choice c);
  double ready_f(int32_t s);
  double ready_i(int32_t s);
  double estimate_i(int32_t s);

  const Problem& pr_;
  double limit_ = 0;
  Policy pol_;
  int32_t cap_base_ = 0;
  std::vector<StageState> st_;
  std::vector<RankState> rk_;
  std::vector<Choice> choice_;
  // An indexed binary min-heap of the decided ranks by (start, rank): the next commit in
  // O(1), a changed decision in O(log p).
  std::vector<int32_t> heap_;      // ranks
  std::vector<int32_t> heap_pos_;  // per rank: its index in heap_, -1 if not decided
  bool heap_less(int32_t a, int32_t b) const;
  void heap_up(size_t i);
  void heap_down(size_t i);
  ChainTimes chain_;
  double peak_ = 0;
};

// The memory limits the builders try for p ranks and m microbatches, ascending: every integer up
// to 8, then about 2^(1/2) apart, and p, 2p, m and the V-Min and V-Half limits; none above m. It
// does not depend on the limit asked for, so the passes of a limit are among those of any larger
// one (a larger limit is never worse).
std::vector<double> limit_grid(int32_t p, int32_t m);

// Candidates a builder makes for one grid limit (compute-only schedules of the problem's shape;
// one over the limit, or one that cannot finish, is skipped).
using CandidatesAt = std::function<std::vector<Schedule>(double limit)>;

// The builder both zb-auto and zb-v-auto run (see the file comment): `hand` are the handcrafted
// candidates (zb-h1, zb-h2; zb-v) in tie-break order, `at_limit` (if set) makes more at each
// limit tried, after them in that order; the result is named `name`.
Result<Schedule> build_list_schedule(const Problem& pr, const CostModel& costs, double limit,
                                     ZbObjective objective, const SearchBudget& budget,
                                     std::vector<Schedule> hand, const std::string& name,
                                     const CandidatesAt& at_limit = {});

}  // namespace tightpipe::zb
