// The list scheduler and the builder driver of zb-auto and zb-v-auto (zb_list.h).
#include "sim/zb_list.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "sim/zb_timing.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"

namespace tightpipe::zb {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

std::vector<Policy> all_policies(int32_t chunks) {
  std::vector<Policy> out;
  if (chunks == 1) {
    // Families: 0 memory only; 1 cap l - s (1F1B's and ZB-H1's warm-up); 2 cap l - 1 - 2s
    // (ZB-H2's); 3 cap l - 2s (one more F per stage than ZB-H2's where the memory allows it);
    // 4 the chain's warm-up count per stage (Problem::Stage::warmup).
    for (int bits = 0; bits < 40; ++bits) {
      const int family = bits / 8;
      out.push_back({.cap_slope = family == 3   ? 2
                                  : family == 4 ? 0
                                                : family,
                     .cap_base_offset = family == 2 ? 1 : 0,
                     .chain_cap = family == 4,
                     .f_before_i = (bits & 1) != 0,
                     .f_just_in_time = (bits & 2) != 0,
                     .w_closes_gap = (bits & 4) != 0});
    }
    return out;
  }
  for (FChunkOrder order :
       {FChunkOrder::kChunk1First, FChunkOrder::kAlternate, FChunkOrder::kChunk0First}) {
    for (int bits = 0; bits < 8; ++bits) {
      out.push_back({.f_before_i = (bits & 1) != 0,
                     .w_closes_gap = (bits & 2) != 0,
                     .f_order = order,
                     .i_chunk0_first = (bits & 4) != 0});
    }
  }
  return out;
}

Problem Problem::make(int32_t m, const CostModel& costs, const Schedule& placement,
                      const std::vector<double>& fractions) {
  Problem pr;
  pr.p = placement.num_ranks;
  pr.S = placement.num_stages;
  pr.m = m;
  pr.v = placement.chunks();
  TP_CHECK(pr.v == 1 || pr.v == 2, "list scheduler: ", pr.v, " chunks per rank");
  pr.shape.num_ranks = pr.p;
  pr.shape.num_stages = pr.S;
  pr.shape.num_microbatches = m;
  pr.shape.stage_to_rank = placement.stage_to_rank;
  const std::vector<double> units = zb_f_memory_units(costs, pr.shape);
  pr.stage.resize(pr.S);
  pr.stages_of_rank.assign(pr.p, {-1, -1});
  std::vector<int32_t> seen(pr.p, 0);
  for (int32_t s = 0; s < pr.S; ++s) {
    Stage& x = pr.stage[s];
    x.cf = costs.action_time(pr.shape, {ActionType::kForward, s, 0});
    x.ci = costs.action_time(pr.shape, {ActionType::kBackwardInput, s, 0});
    x.cw = costs.action_time(pr.shape, {ActionType::kBackwardWeight, s, 0});
    // A hand-off between two stages of one rank is local (lower() adds no message).
    if (s + 1 < pr.S && pr.shape.rank_of(s + 1) != pr.shape.rank_of(s)) {
      x.comm_f = costs.message_time(s, s + 1);
    }
    if (s > 0 && pr.shape.rank_of(s - 1) != pr.shape.rank_of(s)) {
      x.comm_b = costs.message_time(s, s - 1);
    }
    x.unit = units[s];
    x.frac = fractions.at(s);
    const int32_t r = pr.shape.rank_of(s);
    pr.stages_of_rank[r][seen[r]++] = s;  // chunk 0 is the rank's first stage
  }
  // Warm-up counts: microbatch 0's F reaches stage s at `first` (every F as soon as its input)
  // and the last stage at `end`; its I comes back through the stages as soon as each input
  // arrives. The F of stage s that end by then fit before its first I.
  std::vector<double> first(pr.S, 0.0);
  for (int32_t s = 1; s < pr.S; ++s) {
    first[s] = first[s - 1] + pr.stage[s - 1].cf + pr.stage[s - 1].comm_f;
  }
  double arrive = first[pr.S - 1] + pr.stage[pr.S - 1].cf;  // I of the last stage may start
  for (int32_t s = pr.S - 1; s >= 0; --s) {
    Stage& x = pr.stage[s];
    if (s < pr.S - 1) arrive += pr.stage[s + 1].ci + pr.stage[s + 1].comm_b;
    const double room = arrive - first[s];
    x.warmup = x.cf > 0 ? std::max<int32_t>(1, static_cast<int32_t>(std::floor(room / x.cf + 1e-9)))
                        : pr.m;
  }
  return pr;
}

ChainTimes Problem::chain() const {
  std::vector<ChainTimes::Stage> st;
  for (const Stage& x : stage) st.push_back({x.cf, x.ci, x.comm_f, x.comm_b});
  return ChainTimes(std::move(st), m);
}

ListScheduler::ListScheduler(const Problem& pr) : pr_(pr) {}

double ListScheduler::ready_f(int32_t s) {
  return st_[s].nf >= pr_.m ? kInf : chain_.ready_f(s, st_[s].nf);
}
double ListScheduler::ready_i(int32_t s) {
  return st_[s].ni >= st_[s].nf ? kInf : chain_.ready_i(s, st_[s].ni);
}
double ListScheduler::estimate_i(int32_t s) {
  if (st_[s].ni >= st_[s].nf) return kInf;
  return chain_.estimate_i(s, st_[s].ni,
                           [&](int32_t j) { return rk_[pr_.shape.rank_of(j)].free_at; });
}

ListScheduler::Choice ListScheduler::decide(int32_t r, bool relaxed) {
  const RankState& x = rk_[r];
  const int32_t v = pr_.v;
  const std::array<int32_t, 2>& s = pr_.stages_of_rank[r];
  bool done = true;
  for (int32_t c = 0; c < v; ++c) done = done && st_[s[c]].nw >= pr_.m;
  if (done) return {};
  const double t = x.free_at;
  std::array<double, 2> tf{kInf, kInf}, ti{kInf, kInf};
  std::array<bool, 2> fits{}, cap_ok{}, f_ok{}, f_now{}, i_now{}, has_w{};
  for (int32_t c = 0; c < v; ++c) {
    const int32_t sc = s[c];
    const StageState& y = st_[sc];
    tf[c] = ready_f(sc);
    ti[c] = ready_i(sc);
    // With two chunks, a chunk-0 F keeps room for its microbatch's chunk-1 F on this rank, so
    // the oldest microbatch in flight can always go on (the pass never deadlocks).
    const double need =
        v == 2 && c == 0 ? pr_.stage[s[0]].unit + pr_.stage[s[1]].unit : pr_.stage[sc].unit;
    fits[c] = x.mem + need <= limit_ + kMemEps;
    cap_ok[c] = true;
    if (pol_.cap_slope != 0) {
      const int32_t cap = std::max(1, cap_base_ - pol_.cap_slope * sc);
      cap_ok[c] = y.nf - y.ni < cap;
    }
    if (pol_.chain_cap) cap_ok[c] = cap_ok[c] && y.nf - y.ni < pr_.stage[sc].warmup;
    f_ok[c] = fits[c] && cap_ok[c] && tf[c] < kInf;
    if (f_ok[c] && pol_.f_just_in_time && !relaxed) {
      const double est = estimate_i(sc);
      if (est < kInf && std::max(t, tf[c]) + pr_.stage[sc].cf > est + kMemEps) {
        f_ok[c] = false;  // this F would delay the next I: wait for the I instead
      }
    }
    f_now[c] = f_ok[c] && tf[c] <= t;
    i_now[c] = ti[c] <= t;
    has_w[c] = y.nw < y.ni;
  }
  const int32_t f_pref = v == 1                                      ? 0
                         : pol_.f_order == FChunkOrder::kChunk1First ? 1
                         : pol_.f_order == FChunkOrder::kChunk0First ? 0
                                                                     : 1 - x.last_f_chunk;
  const int32_t i_pref = v == 1 || pol_.i_chunk0_first ? 0 : 1;
  auto pick = [&](const std::array<bool, 2>& ok, int32_t preferred) {
    if (ok[preferred]) return preferred;
    if (v == 2 && ok[1 - preferred]) return 1 - preferred;
    return -1;
  };
  const int32_t fc = pick(f_now, f_pref);
  const int32_t ic = pick(i_now, i_pref);
  if (ic >= 0 && fc >= 0 && pol_.f_before_i) return {ActionType::kForward, s[fc], t};
  if (ic >= 0) return {ActionType::kBackwardInput, s[ic], t};
  if (fc >= 0) return {ActionType::kForward, s[fc], t};
  // A gap, or an F that waits for memory: a pending W may run (the one whose I ended first).
  if (has_w[0] || has_w[1]) {
    int32_t wc = has_w[1] ? 1 : 0;
    if (has_w[0] && has_w[1] &&
        chain_.end_i(s[0], st_[s[0]].nw) < chain_.end_i(s[1], st_[s[1]].nw)) {
      wc = 0;
    }
    bool waits_for_memory = false;
    for (int32_t c = 0; c < v; ++c) waits_for_memory |= tf[c] <= t && !fits[c] && cap_ok[c];
    auto closes = [&] {
      double next = kInf;
      for (int32_t c = 0; c < v; ++c) {
        next = std::min({next, f_ok[c] ? tf[c] : kInf, estimate_i(s[c])});
      }
      return t + pr_.stage[s[wc]].cw <= next + kMemEps;
    };
    if (waits_for_memory || relaxed || !pol_.w_closes_gap || closes()) {
      return {ActionType::kBackwardWeight, s[wc], t};
    }
  }
  // Wait for the earliest known I (the preferred chunk first), else F; the pass re-decides when
  // a neighbour commits.
  Choice best;
  for (int32_t c : {i_pref, 1 - i_pref}) {
    if (c < v && ti[c] < best.start) best = {ActionType::kBackwardInput, s[c], std::max(t, ti[c])};
  }
  for (int32_t c : {f_pref, 1 - f_pref}) {
    if (c < v && f_ok[c] && std::max(t, tf[c]) < best.start) {
      best = {ActionType::kForward, s[c], std::max(t, tf[c])};
    }
  }
  return best;
}

void ListScheduler::commit(int32_t r, const Choice& c, std::vector<Action>& prog) {
  RankState& x = rk_[r];
  StageState& y = st_[c.stage];
  const Problem::Stage& z = pr_.stage[c.stage];
  if (x.first_start < 0) x.first_start = c.start;
  switch (*c.type) {
    case ActionType::kForward:
      x.remaining -= z.cf;
      x.free_at = c.start + z.cf;
      chain_.end_f(c.stage, y.nf) = x.free_at;
      prog.push_back({ActionType::kForward, c.stage, y.nf++});
      x.mem += z.unit;
      x.last_f_chunk = c.stage == pr_.stages_of_rank[r][0] ? 0 : 1;
      peak_ = std::max(peak_, x.mem);
      TP_CHECK(x.mem <= limit_ + 1e-6, "list scheduler: memory ", x.mem, " over ", limit_);
      break;
    case ActionType::kBackwardInput:
      x.remaining -= z.ci;
      x.free_at = c.start + z.ci;
      chain_.end_i(c.stage, y.ni) = x.free_at;
      prog.push_back({ActionType::kBackwardInput, c.stage, y.ni++});
      x.mem -= (1 - z.frac) * z.unit;
      break;
    case ActionType::kBackwardWeight:
      x.remaining -= z.cw;
      x.free_at = c.start + z.cw;
      prog.push_back({ActionType::kBackwardWeight, c.stage, y.nw++});
      x.mem -= z.frac * z.unit;
      break;
    default:
      TP_CHECK(false, "list scheduler: unexpected action type");
  }
}

bool ListScheduler::heap_less(int32_t a, int32_t b) const {
  const double x = choice_[a].start, y = choice_[b].start;
  return x < y || (x == y && a < b);
}

void ListScheduler::heap_up(size_t i) {
  while (i > 0) {
    const size_t parent = (i - 1) / 2;
    if (!heap_less(heap_[i], heap_[parent])) break;
    std::swap(heap_[i], heap_[parent]);
    heap_pos_[heap_[i]] = static_cast<int32_t>(i);
    heap_pos_[heap_[parent]] = static_cast<int32_t>(parent);
    i = parent;
  }
}

void ListScheduler::heap_down(size_t i) {
  for (;;) {
    size_t least = i;
    for (size_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c) {
      if (heap_less(heap_[c], heap_[least])) least = c;
    }
    if (least == i) break;
    std::swap(heap_[i], heap_[least]);
    heap_pos_[heap_[i]] = static_cast<int32_t>(i);
    heap_pos_[heap_[least]] = static_cast<int32_t>(least);
    i = least;
  }
}

void ListScheduler::set_choice(int32_t r, Choice c) {
  const Choice was = choice_[r];
  choice_[r] = c;
  int32_t& at = heap_pos_[r];
  if (!c.type) {
    if (at < 0) return;
    const size_t i = static_cast<size_t>(at);
    const int32_t last = heap_.back();
    heap_.pop_back();
    at = -1;
    if (i < heap_.size()) {
      heap_[i] = last;
      heap_pos_[last] = static_cast<int32_t>(i);
      heap_up(i);
      heap_down(static_cast<size_t>(heap_pos_[last]));
    }
    return;
  }
  if (at < 0) {
    at = static_cast<int32_t>(heap_.size());
    heap_.push_back(r);
    heap_up(static_cast<size_t>(at));
    return;
  }
  // The key is (start, rank): only a changed start moves the rank, up if earlier, else down.
  if (c.start < was.start) {
    heap_up(static_cast<size_t>(at));
  } else if (c.start > was.start) {
    heap_down(static_cast<size_t>(at));
  }
}

Pass ListScheduler::run(double limit, const Policy& policy, ZbObjective objective, double cutoff) {
  limit_ = limit;
  pol_ = policy;
  cap_base_ = static_cast<int32_t>(std::floor(limit + kMemEps)) - policy.cap_base_offset;
  peak_ = 0;
  st_.assign(pr_.S, StageState{});
  rk_.assign(pr_.p, RankState{});
  choice_.assign(pr_.p, Choice{});
  heap_.clear();
  heap_pos_.assign(pr_.p, -1);
  chain_ = pr_.chain();

  Pass out;
  Schedule& sch = out.schedule;
  sch = pr_.shape;
  sch.programs.assign(pr_.p, {});
  for (auto& prog : sch.programs) prog.reserve(3 * pr_.v * pr_.m);
  for (int32_t r = 0; r < pr_.p; ++r) {
    for (int32_t c = 0; c < pr_.v; ++c) {
      const Problem::Stage& z = pr_.stage[pr_.stages_of_rank[r][c]];
      rk_[r].remaining += pr_.m * (z.cf + z.ci + z.cw);
    }
  }
  for (int32_t r = 0; r < pr_.p; ++r) set_choice(r, decide(r, false));
  // Above this a pass cannot win (a margin for the sums' rounding).
  const double cut_at = cutoff + 1e-9 * std::max(1.0, std::abs(cutoff));
  double bound = 0;
  for (const RankState& x : rk_) bound = std::max(bound, x.remaining);
  const int64_t total = 3LL * pr_.S * pr_.m;
  for (int64_t n = 0; n < total; ++n) {
    if (heap_.empty()) {  // every rank waits on a knob: decide once without them
      for (int32_t r = 0; r < pr_.p; ++r) set_choice(r, decide(r, /*relaxed=*/true));
    }
    TP_CHECK(!heap_.empty(), "list scheduler: pass stalled after ", n, " actions");
    const int32_t best = heap_.front();
    const Choice c = choice_[best];
    commit(best, c, sch.programs[best]);
    {
      const RankState& x = rk_[best];
      const double lb =
          x.free_at + x.remaining - (objective == ZbObjective::kSpan ? x.first_start : 0.0);
      bound = std::max(bound, lb);
      if (bound > cut_at) {
        out.cut = true;
        return out;
      }
    }
    // The rank itself, and the rank that consumes what it made: an F feeds stage s + 1, an I
    // stage s - 1, a W nobody. The others keep their decision (their estimates of when an I
    // comes are refreshed at their next decision).
    set_choice(best, decide(best, false));
    int32_t next = -1;
    if (*c.type == ActionType::kForward && c.stage + 1 < pr_.S) next = c.stage + 1;
    if (*c.type == ActionType::kBackwardInput && c.stage > 0) next = c.stage - 1;
    if (next >= 0 && pr_.shape.rank_of(next) != best) {
      const int32_t r = pr_.shape.rank_of(next);
      set_choice(r, decide(r, false));
    }
  }
  double makespan = 0, span = 0;
  for (const RankState& x : rk_) {
    makespan = std::max(makespan, x.free_at);
    span = std::max(span, x.free_at - x.first_start);
  }
  out.score =
      objective == ZbObjective::kSpan ? Score{span, makespan, peak_} : Score{makespan, span, peak_};
  return out;
}

std::vector<double> limit_grid(int32_t p, int32_t m) {
  std::vector<double> g;
  for (int32_t k = 1; k <= 8; ++k) g.push_back(k);
  for (double x = 8; x < 2.0 * p + 1; x *= std::sqrt(2.0)) g.push_back(std::round(x));
  for (int32_t k : {p, 2 * p, m, v_min_memory_limit(p), v_half_memory_limit(p)}) g.push_back(k);
  std::sort(g.begin(), g.end());
  g.erase(std::unique(g.begin(), g.end()), g.end());
  while (!g.empty() && g.back() > m) g.pop_back();
  return g;
}

Result<Schedule> build_list_schedule(const Problem& pr, const CostModel& costs, double limit,
                                     ZbObjective objective, const SearchBudget& budget,
                                     std::vector<Schedule> hand, const std::string& name,
                                     const CandidatesAt& at_limit) {
  std::vector<double> fractions(pr.S), units(pr.S);
  for (int32_t s = 0; s < pr.S; ++s) {
    fractions[s] = pr.stage[s].frac;
    units[s] = pr.stage[s].unit;
  }
  // The handcrafted schedules that fit, each tried at the grid point of its own peak (so its
  // limits are the same for every limit asked for), before that point's passes: on an exact
  // tie it wins (its rule is documented).
  std::vector<double> hand_peak;
  std::vector<double> grid = limit_grid(pr.p, pr.m);
  for (auto it = hand.begin(); it != hand.end();) {
    const double peak = max_peak_units(*it, fractions, units);
    if (peak > limit + kMemEps) {
      it = hand.erase(it);
      continue;
    }
    hand_peak.push_back(peak);
    grid.push_back(peak);
    ++it;
  }
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  while (!grid.empty() && grid.back() > limit + kMemEps) grid.pop_back();
  TP_CHECK(!grid.empty(), "list scheduler: no memory limit to try up to ", limit);

  // R(l), the result at one grid limit l: the best of that limit's passes (every policy at l, and
  // the handcrafted schedules whose peak is l), improved by the local search within l. R(l)
  // depends on l alone, so the result for a limit L, the best R(l) over the grid up to L (ties
  // to the smaller l), is never worse at a larger L. The limits are taken from the top down:
  // no schedule within l beats lower_bound() at l, which only grows as l shrinks, so once it
  // exceeds the best R found, no smaller limit can win and the rest are skipped (the result is
  // what evaluating every limit would give).
  const std::vector<Policy> policies = all_policies(pr.v);
  // One list scheduler per hardware thread (at most one per policy); the result does not depend
  // on how many.
  const size_t num_workers =
      std::clamp<size_t>(std::thread::hardware_concurrency(), 1, policies.size());
  std::vector<ListScheduler> workers(num_workers, ListScheduler(pr));
  struct WorkerBest {
    std::optional<Pass> pass;
    size_t policy = 0;
  };
  std::optional<Schedule> best;
  Score best_score;
  LowerBoundOptions lbo;
  lbo.f_memory_units = units;
  lbo.w_memory_fractions = fractions;
  lbo.span = objective == ZbObjective::kSpan;
  LowerBoundSweep bounds(pr.shape, costs, lbo);
  for (auto l = grid.rbegin(); l != grid.rend(); ++l) {
    if (best) {
      const Result<LowerBound> lb = bounds.at(*l);
      const double bound = !lb.ok()                          ? 0.0  // no bound: keep going
                           : objective == ZbObjective::kSpan ? lb->span
                                                             : lb->compute_end;
      if (bound > best_score.primary * (1 + 1e-9) + 1e-9) break;
    }
    std::optional<Schedule> at;  // the best candidate at this limit
    Score at_score;
    for (size_t h = 0; h < hand.size(); ++h) {
      if (std::abs(hand_peak[h] - *l) > kMemEps) continue;
      TP_ASSIGN_OR_RETURN(Timing t, Timing::make(hand[h], costs));
      TP_CHECK(t.run(hand[h]), "handcrafted schedule '", hand[h].name, "' cannot finish");
      const Score sc = objective == ZbObjective::kSpan
                           ? Score{t.span(), t.makespan(), hand_peak[h]}
                           : Score{t.makespan(), t.span(), hand_peak[h]};
      if (!at || sc < at_score) {
        at = hand[h];
        at_score = sc;
      }
    }
    // The candidates made for this limit (after the handcrafted ones: those win a tie).
    if (at_limit) {
      for (Schedule& c : at_limit(*l)) {
        const double peak = max_peak_units(c, fractions, units);
        if (peak > *l + kMemEps) continue;
        TP_ASSIGN_OR_RETURN(Timing t, Timing::make(c, costs));
        if (!t.run(c)) continue;
        const Score sc = objective == ZbObjective::kSpan ? Score{t.span(), t.makespan(), peak}
                                                         : Score{t.makespan(), t.span(), peak};
        if (!at || sc < at_score) {
          at = std::move(c);
          at_score = sc;
        }
      }
    }
    // Without the search, R(l) matters only where it beats the best R above it: a pass that
    // cannot tie that best is cut too (exact: the result is the best R over the limits either
    // way). With the search, R(l) is the searched best pass, which a worse pass may still start.
    const bool with_search = budget.ms != 0 && budget.max_evaluations != 0;
    const double beat = best && !with_search ? best_score.primary : kInf;
    // The passes are independent: worker t runs policies t, t + T, ... (T workers) and keeps its
    // best (ties to the earlier policy); the workers' bests then meet in policy order. A pass is
    // cut only when it cannot be its worker's best, so the winner is the one a single worker
    // running every policy in order finds.
    std::vector<WorkerBest> best_of(workers.size());
    auto run_worker = [&](size_t t) {
      WorkerBest& b = best_of[t];
      for (size_t k = t; k < policies.size(); k += workers.size()) {
        const double cutoff =
            std::min({at ? at_score.primary : kInf, b.pass ? b.pass->score.primary : kInf, beat});
        Pass ps = workers[t].run(*l, policies[k], objective, cutoff);
        if (!ps.cut && (!b.pass || ps.score < b.pass->score)) {
          b.pass = std::move(ps);
          b.policy = k;
        }
      }
    };
    {
      std::vector<std::thread> threads;
      for (size_t t = 1; t < workers.size(); ++t) threads.emplace_back(run_worker, t);
      run_worker(0);
      for (std::thread& th : threads) th.join();
    }
    std::sort(best_of.begin(), best_of.end(),
              [](const WorkerBest& a, const WorkerBest& b) { return a.policy < b.policy; });
    for (WorkerBest& b : best_of) {
      if (b.pass && (!at || b.pass->score < at_score)) {
        at = std::move(b.pass->schedule);
        at_score = b.pass->score;
      }
    }
    if (!at && best) continue;  // every pass was cut by the best above: R(l) cannot win
    TP_CHECK(at.has_value(), "list scheduler: no schedule at memory limit ", *l);
    if (with_search) {
      TP_ASSIGN_OR_RETURN(Schedule searched,
                          improve_schedule(*at, costs, fractions, *l, objective, budget));
      TP_ASSIGN_OR_RETURN(Score sc, score_schedule(searched, costs, objective,
                                                   max_peak_units(searched, fractions, units)));
      if (sc < at_score) {
        at = std::move(searched);
        at_score = sc;
      }
    }
    if (!best || !(best_score < at_score)) {  // ties to the smaller limit
      best = std::move(at);
      best_score = at_score;
    }
  }
  Schedule out = std::move(*best);
  out.name = name;
  // The one validation of the result (the passes and the search keep the dependency rule by
  // construction; this is the schedule module's check of it).
  if (const Status v = validate(out); !v.ok()) {
    TP_CHECK(false, name, ": built an invalid schedule: ", v.message());
  }
  return out;
}

}  // namespace tightpipe::zb
