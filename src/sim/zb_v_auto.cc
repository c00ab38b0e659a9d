// zb-v-auto: a V-shape (2 chunks per rank) zero-bubble schedule built from a cost table under a
// memory limit (auto_schedule.h; rules in docs/cost_model.md, "zb-v-auto").
//
// Placement is zb-v's: rank r owns stage r (chunk 0, going down) and stage 2p-1-r (chunk 1,
// coming back). Memory per rank in whole-rank microbatch units: a chunk's F adds u (its share of
// the rank's activation bytes, zb_f_memory_units; 1/2 without sizes), its I frees (1 - f)u,
// its W fu.
//
// Phases:
//   1. VGreedy: one list-scheduling pass over the ranks. Every rank keeps the time its lane is
//      free; the rank whose next action can start earliest commits it. At a rank, in order: an I
//      that is ready (either chunk; a knob says which first); else an F that is ready and fits
//      (either chunk; a knob: chunk 1 first, chunk 0 first, or the other chunk than the last F,
//      zb-v's alternation); else a pending W, to free memory for a ready F or to fill the gap
//      until the next F or I; else the rank waits. A chunk-0 F also keeps room for the chunk-1 F
//      of its microbatch, so the oldest microbatch in flight can always go on: the
//      pass never deadlocks. Yes/no knobs as zb-auto's: F before a ready I, and W only when it
//      ends before the next F or I (estimated).
//   2. build_zb_v_auto(): the pass for every knob combination (24) and every integer memory
//      limit up to the requested one, and the limit itself (so a larger limit never loses a
//      candidate), plus zb-v where it fits; each distinct candidate is lowered and simulated,
//      the best in the objective wins (ties: the earlier, zb-v first). A pass that the limit
//      never constrained is not repeated at larger limits (it would come out the same). The pick
//      is made in one place (consider).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "sim/zb_chain.h"
#include "sim/zb_score.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kEps = zb::kMemEps;

// Which of two ready F runs first.
enum class FChunkOrder { kChunk1First, kChunk0First, kAlternate };

struct VKnobs {
  FChunkOrder f_order = FChunkOrder::kChunk1First;
  bool i_chunk0_first = false;  // two ready I: chunk 0 (the older microbatch) first
  bool f_before_i = false;      // a ready F (that fits) runs before a ready I
  bool w_closes_gap = false;    // a gap-filling W runs only if it ends before the next F or I
};

class VGreedy {
 public:
  // `units`: what each stage's F holds (zb_f_memory_units of the V placement).
  VGreedy(int32_t p, int32_t m, const CostModel& costs, const std::vector<double>& fractions,
          const std::vector<double>& units, double limit, VKnobs knobs)
      : p_(p), S_(2 * p), m_(m), frac_(fractions), limit_(limit), knobs_(knobs) {
    rank_of_ = place_stages(Placement::kV, p, S_);
    st_.resize(S_);
    rk_.resize(p);
    // Each action's time includes its message overhead, as the simulator charges it.
    Schedule shape;
    shape.num_ranks = p;
    shape.num_stages = S_;
    shape.stage_to_rank = rank_of_;
    for (int32_t s = 0; s < S_; ++s) {
      StageState& x = st_[s];
      x.unit = units[s];
      x.cf = costs.action_time(shape, {ActionType::kForward, s, 0});
      x.ci = costs.action_time(shape, {ActionType::kBackwardInput, s, 0});
      x.cw = costs.action_time(shape, {ActionType::kBackwardWeight, s, 0});
      // Stages p-1 and p share a rank and hand off locally (lower() adds no message).
      if (s + 1 < S_ && rank_of_[s + 1] != rank_of_[s]) x.comm_f = costs.message_time(s, s + 1);
      if (s > 0 && rank_of_[s - 1] != rank_of_[s]) x.comm_b = costs.message_time(s, s - 1);
    }
    std::vector<zb::ChainTimes::Stage> chain;
    for (const StageState& x : st_) chain.push_back({x.cf, x.ci, x.comm_f, x.comm_b});
    chain_ = zb::ChainTimes(std::move(chain), m);
  }

  Schedule run() {
    Schedule out;
    out.name = "zb-v-auto";
    out.num_ranks = p_;
    out.num_stages = S_;
    out.num_microbatches = m_;
    out.stage_to_rank = rank_of_;
    out.programs.resize(p_);
    std::vector<Choice> choice(p_);
    for (int32_t r = 0; r < p_; ++r) choice[r] = decide(r);
    const int64_t total = 3LL * S_ * m_;
    for (int64_t n = 0; n < total; ++n) {
      int32_t best = -1;
      for (int32_t r = 0; r < p_; ++r) {
        if (choice[r].type && (best < 0 || choice[r].start < choice[best].start)) best = r;
      }
      if (best < 0) {  // every rank waits on a knob: decide once without them
        for (int32_t r = 0; r < p_; ++r) {
          choice[r] = decide(r, /*relaxed=*/true);
          if (choice[r].type && (best < 0 || choice[r].start < choice[best].start)) best = r;
        }
      }
      TP_CHECK(best >= 0, "zb-v-auto: greedy pass stalled after ", n, " actions");
      commit(best, choice[best], out.programs[best]);
      // Only the neighbours' dependencies changed (the stages next to rank r's two stages live
      // on ranks r - 1 .. r + 1); the estimates elsewhere are refreshed at their next commit.
      for (int32_t r = std::max(0, best - 1); r <= std::min(p_ - 1, best + 1); ++r) {
        choice[r] = decide(r);
      }
    }
    return out;
  }

  // False if no decision of the pass was changed by the memory limit: the pass at any larger
  // limit is then the same.
  bool memory_bound() const { return memory_bound_; }

 private:
  struct StageState {
    int32_t nf = 0, ni = 0, nw = 0;  // next microbatch of F, I, W
    double cf = 0, ci = 0, cw = 0;   // compute times
    double comm_f = 0, comm_b = 0;   // message time to stage + 1 (activation), - 1 (gradient)
    double unit = 0.5;               // what its F holds, in whole-rank units (zb_f_memory_units)
  };
  struct RankState {
    double free_at = 0;
    double mem = 0;
    int32_t last_f_chunk = 1;  // so that kAlternate starts with chunk 0
  };
  struct Choice {
    std::optional<ActionType> type;  // nullopt: nothing can be decided yet
    int32_t stage = -1;
    double start = kInf;
  };

  int32_t stage_of(int32_t r, int32_t chunk) const { return chunk == 0 ? r : S_ - 1 - r; }
  double& end_f(int32_t s, int32_t k) { return chain_.end_f(s, k); }
  double& end_i(int32_t s, int32_t k) { return chain_.end_i(s, k); }
  double lane_free(int32_t s) const { return rk_[rank_of_[s]].free_at; }

  // When the next F of s can start by its dependencies (kInf: its input is not placed yet).
  double ready_f(int32_t s) { return st_[s].nf >= m_ ? kInf : chain_.ready_f(s, st_[s].nf); }
  // When the next I of s can start by its dependencies (kInf: not placed downstream yet).
  double ready_i(int32_t s) { return st_[s].ni >= st_[s].nf ? kInf : chain_.ready_i(s, st_[s].ni); }
  // A lower bound on when the next I of s can start (zb_chain.h), each stage no earlier than its
  // lane is free.
  double estimate_i(int32_t s) {
    if (st_[s].ni >= st_[s].nf) return kInf;
    return chain_.estimate_i(s, st_[s].ni, [&](int32_t j) { return lane_free(j); });
  }

  // Of the chunks whose flag is set, `preferred` if it is one of them (-1: none).
  int32_t pick(const std::array<bool, 2>& ok, int32_t preferred) const {
    if (ok[preferred]) return preferred;
    if (ok[1 - preferred]) return 1 - preferred;
    return -1;
  }

  // The next action of rank r. `relaxed` drops the two waiting knobs (used only if no rank could
  // decide otherwise, so the pass always finishes).
  Choice decide(int32_t r, bool relaxed = false) {
    const RankState& x = rk_[r];
    const std::array<int32_t, 2> s = {stage_of(r, 0), stage_of(r, 1)};
    if (st_[s[0]].nw >= m_ && st_[s[1]].nw >= m_) return {};
    const double t = x.free_at;
    std::array<double, 2> tf{}, ti{};
    std::array<bool, 2> fits{}, f_ok{}, f_now{}, i_now{}, has_w{};
    for (int32_t c = 0; c < 2; ++c) {
      const StageState& y = st_[s[c]];
      tf[c] = ready_f(s[c]);
      ti[c] = ready_i(s[c]);
      // A chunk-0 F keeps room for its microbatch's chunk-1 F on this rank.
      const double need = c == 0 ? st_[s[0]].unit + st_[s[1]].unit : y.unit;
      fits[c] = x.mem + need <= limit_ + kEps;
      if (!fits[c] && tf[c] < kInf) memory_bound_ = true;
      f_ok[c] = fits[c] && tf[c] < kInf;
      f_now[c] = f_ok[c] && tf[c] <= t;
      i_now[c] = ti[c] <= t;
      has_w[c] = y.nw < y.ni;
    }
    const int32_t f_pref = knobs_.f_order == FChunkOrder::kChunk1First   ? 1
                           : knobs_.f_order == FChunkOrder::kChunk0First ? 0
                                                                         : 1 - x.last_f_chunk;
    const int32_t i_pref = knobs_.i_chunk0_first ? 0 : 1;
    const int32_t fc = pick(f_now, f_pref);
    const int32_t ic = pick(i_now, i_pref);
    if (ic >= 0 && fc >= 0 && knobs_.f_before_i) return {ActionType::kForward, s[fc], t};
    if (ic >= 0) return {ActionType::kBackwardInput, s[ic], t};
    if (fc >= 0) return {ActionType::kForward, s[fc], t};
    // A gap, or an F that waits for memory: a pending W may run (the one whose I ended first).
    if (has_w[0] || has_w[1]) {
      int32_t wc = has_w[1] ? 1 : 0;
      if (has_w[0] && has_w[1] && end_i(s[0], st_[s[0]].nw) < end_i(s[1], st_[s[1]].nw)) wc = 0;
      const bool waits_for_memory = (tf[0] <= t && !fits[0]) || (tf[1] <= t && !fits[1]);
      if (waits_for_memory || relaxed || !knobs_.w_closes_gap ||
          t + st_[s[wc]].cw <= std::min({f_ok[0] ? tf[0] : kInf, f_ok[1] ? tf[1] : kInf,
                                         estimate_i(s[0]), estimate_i(s[1])}) +
                                   kEps) {
        return {ActionType::kBackwardWeight, s[wc], t};
      }
    }
    // Wait for the earliest known F or I; the pass re-decides after every commit.
    Choice best;
    for (int32_t c : {i_pref, 1 - i_pref}) {
      if (ti[c] < best.start) best = {ActionType::kBackwardInput, s[c], std::max(t, ti[c])};
    }
    for (int32_t c : {f_pref, 1 - f_pref}) {
      if (f_ok[c] && std::max(t, tf[c]) < best.start) {
        best = {ActionType::kForward, s[c], std::max(t, tf[c])};
      }
    }
    return best;
  }

  void commit(int32_t r, const Choice& c, std::vector<Action>& prog) {
    RankState& x = rk_[r];
    StageState& y = st_[c.stage];
    switch (*c.type) {
      case ActionType::kForward:
        x.free_at = c.start + y.cf;
        end_f(c.stage, y.nf) = x.free_at;
        prog.push_back({ActionType::kForward, c.stage, y.nf++});
        x.mem += y.unit;
        x.last_f_chunk = c.stage == r ? 0 : 1;
        TP_CHECK(x.mem <= limit_ + 1e-6, "zb-v-auto: memory ", x.mem, " over ", limit_);
        break;
      case ActionType::kBackwardInput:
        x.free_at = c.start + y.ci;
        end_i(c.stage, y.ni) = x.free_at;
        prog.push_back({ActionType::kBackwardInput, c.stage, y.ni++});
        x.mem -= (1 - frac_[c.stage]) * y.unit;
        break;
      case ActionType::kBackwardWeight:
        x.free_at = c.start + y.cw;
        prog.push_back({ActionType::kBackwardWeight, c.stage, y.nw++});
        x.mem -= frac_[c.stage] * y.unit;
        break;
      default:
        TP_CHECK(false, "zb-v-auto: unexpected action type");
    }
  }

  int32_t p_, S_, m_;
  const std::vector<double>& frac_;
  double limit_;
  VKnobs knobs_;
  std::vector<int32_t> rank_of_;
  std::vector<StageState> st_;
  std::vector<RankState> rk_;
  zb::ChainTimes chain_;  // the placed F and I end times, and the dependency timing
  bool memory_bound_ = false;
};

// Every knob combination, in a fixed order.
std::vector<VKnobs> all_knobs() {
  std::vector<VKnobs> out;
  for (FChunkOrder order :
       {FChunkOrder::kChunk1First, FChunkOrder::kAlternate, FChunkOrder::kChunk0First}) {
    for (int bits = 0; bits < 8; ++bits) {
      out.push_back({.f_order = order,
                     .i_chunk0_first = (bits & 4) != 0,
                     .f_before_i = (bits & 1) != 0,
                     .w_closes_gap = (bits & 2) != 0});
    }
  }
  return out;
}

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
  const std::vector<double> frac = zb_w_memory_fractions(costs, o);
  Schedule placement;  // the V: what zb_f_memory_units needs
  placement.num_ranks = p;
  placement.num_stages = 2 * p;
  placement.stage_to_rank = place_stages(Placement::kV, p, 2 * p);
  const std::vector<double> units = zb_f_memory_units(costs, placement);
  auto peak_of = [&](const Schedule& s) {
    const std::vector<double> peaks = zb_peak_memory_units(s, frac, units);
    return *std::max_element(peaks.begin(), peaks.end());
  };
  auto fits = [&](const Schedule& s) { return peak_of(s) <= limit + kEps; };

  // The pick, in one place: every distinct candidate is scored, the first best wins.
  std::optional<Schedule> best;
  zb::Score best_score;
  std::unordered_set<std::string> seen;  // candidates already scored (many knobs agree)
  auto consider = [&](Schedule s) -> Status {
    TP_CHECK(fits(s), "zb-v-auto candidate '", s.name, "' exceeds the memory limit ", limit);
    if (!seen.insert(to_csv(s)).second) return OkStatus();
    TP_ASSIGN_OR_RETURN(zb::Score sc, zb::score_schedule(s, costs, o.objective, peak_of(s)));
    if (!best || sc < best_score) {
      best = std::move(s);
      best_score = sc;
    }
    return OkStatus();
  };

  // The handcrafted schedule, at the first limit it fits in, before that limit's greedy passes:
  // on an exact tie it wins (its rule is documented).
  auto zb_v = generate_schedule("zb-v", {.ranks = p, .microbatches = m, .chunks = 2});
  const bool hand = zb_v.ok() && fits(*zb_v);
  const double hand_peak = hand ? peak_of(*zb_v) : 0;
  bool hand_done = !hand;
  auto consider_hand = [&](double l) -> Status {
    if (hand_done || hand_peak > l + kEps) return OkStatus();
    hand_done = true;
    return consider(std::move(zb_v).value());
  };
  std::vector<std::pair<Schedule, double>> starts;  // the best up to each limit
  // Every integer limit up to the requested one (holding more than m is never needed), and the
  // limit itself: the candidates of a smaller integer limit are among those of a larger one.
  const double top = std::min(limit, static_cast<double>(m));
  std::vector<double> limits;
  for (int32_t k = static_cast<int32_t>(kZbAutoMinMemoryLimit); k <= top + kEps; ++k) {
    limits.push_back(k);
  }
  if (limits.empty() || limits.back() < top - kEps) limits.push_back(top);
  const std::vector<VKnobs> knobs = all_knobs();
  std::vector<bool> settled(knobs.size(), false);  // the pass no longer depends on the limit
  for (double l : limits) {
    TP_RETURN_IF_ERROR(consider_hand(l));
    for (size_t k = 0; k < knobs.size(); ++k) {
      if (settled[k]) continue;
      VGreedy pass(p, m, costs, frac, units, l, knobs[k]);
      TP_RETURN_IF_ERROR(consider(pass.run()));
      settled[k] = !pass.memory_bound();
    }
    starts.emplace_back(*best, l);
  }
  TP_RETURN_IF_ERROR(consider_hand(limit));  // if it fits only above the last limit tried
  starts.emplace_back(*best, limit);
  const SearchBudget budget =
      o.search_budget_ms == 0.0 ? SearchBudget{.ms = 0} : zb_search_budget(o);
  TP_ASSIGN_OR_RETURN(Schedule out,
                      zb::search_each_limit(starts, costs, frac, o.objective, budget));
  out.name = "zb-v-auto";
  return out;
}

}  // namespace tightpipe
