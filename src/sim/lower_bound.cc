// The lower bound on a shape's makespan and span (lower_bound.h; the argument is in
// docs/cost_model.md, "Lower bound": every inequality below is one of its numbered terms).
#include "tightpipe/lower_bound.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <utility>

#include "sim/one_lane.h"

namespace tightpipe {
namespace {

constexpr double kNegInf = -kInf;
constexpr double kMemSlack = 1e-9;  // memory counts are sums of fractions
// The span's per-rank pass costs O(p S m): above this many rank x stage x microbatch steps
// (a few tenths of a second here) the span bound is the work term alone.
constexpr int64_t kMaxSpanPass = int64_t{1} << 24;

// What the relaxation knows of one stage (docs: "the items").
struct StageTerms {
  int32_t rank = 0;
  bool has_next = false, has_prev = false;  // a downstream / upstream stage in its direction
  double fc = 0;                            // F as the chain sees it: action_time(F)
  double fl = 0;    // F as the lane sees it: (1 - overlap factor) fc where pairs may hide it
  double ic = 0;    // the I-part: min(action_time(I), action_time(B))
  double wl = 0;    // the W-part: min(B, I + W) - min(I, B)
  double act = 0;   // message time of its activation to the next stage (0: local)
  double grad = 0;  // message time of its input gradient to the previous stage (0: local)
  double send_act = 0, send_grad = 0;  // lane time of those sends in blocking mode (0: none)
  double u = 1;                        // what one F adds to its rank's memory count
  double frac = 0;                     // the share of it I keeps until W
};

class Bounder {
 public:
  Bounder(const Schedule& shape, const CostModel& costs, const LowerBoundOptions& o)
      : sh_(shape), costs_(costs), o_(o) {}

  // The bound at `memory_limit` (nullopt: none), the other options as given: the shape's checks
  // and terms, and the terms that do not depend on the limit, are computed at the first call
  // and kept for the next.
  Result<LowerBound> at(std::optional<double> memory_limit) {
    if (!checked_) {
      TP_RETURN_IF_ERROR(check());
      checked_ = true;
    }
    o_.memory_limit = memory_limit;
    TP_RETURN_IF_ERROR(check_limit());
    return run();
  }

 private:
  Status check() {
    P_ = sh_.num_ranks;
    S_ = sh_.num_stages;
    const int32_t M = sh_.num_microbatches;
    if (P_ <= 0 || S_ <= 0 || M <= 0 || static_cast<int32_t>(sh_.stage_to_rank.size()) != S_ ||
        sh_.directions < 1 || S_ % sh_.directions != 0 || M % sh_.directions != 0) {
      return Status::invalid_argument(fmt::format(
          "lower bound: shape of '{}' is inconsistent (ranks={}, stages={}, microbatches={}, "
          "{} stage placements, {} directions)",
          sh_.name, P_, S_, M, sh_.stage_to_rank.size(), sh_.directions));
    }
    for (int32_t s = 0; s < S_; ++s) {
      if (sh_.stage_to_rank[s] < 0 || sh_.stage_to_rank[s] >= P_) {
        return Status::invalid_argument(
            fmt::format("lower bound: stage {} is placed on rank {}, outside 0..{}", s,
                        sh_.stage_to_rank[s], P_ - 1));
      }
    }
    TP_RETURN_IF_ERROR(costs_.covers(sh_));
    TP_RETURN_IF_ERROR(costs_.validate());
    TP_RETURN_IF_ERROR(check_overlap_fb_factor(o_.sim.overlap_fb_factor));
    TP_RETURN_IF_ERROR(check_data_parallel(o_.sim.data_parallel));
    Sd_ = S_ / sh_.directions;
    md_ = M / sh_.directions;
    const std::vector<double> units =
        o_.f_memory_units.empty() ? zb_f_memory_units(costs_, sh_) : o_.f_memory_units;
    const std::vector<double> fracs = o_.w_memory_fractions.empty()
                                          ? zb_w_memory_fractions(costs_, ZbAutoOptions{})
                                          : o_.w_memory_fractions;
    if (static_cast<int32_t>(units.size()) != S_ || static_cast<int32_t>(fracs.size()) != S_) {
      return Status::invalid_argument(
          fmt::format("lower bound: {} memory units and {} w-memory fractions for {} stages",
                      units.size(), fracs.size(), S_));
    }
    most_unit_ = 0;
    for (double u : units) most_unit_ = std::max(most_unit_, u);
    const Recompute rc = o_.sim.recompute;
    const bool blocking = o_.sim.comm_mode == CommMode::kBlocking;
    const double factor = o_.sim.overlap_fb_factor;
    st_.resize(S_);
    for (int32_t s = 0; s < S_; ++s) {
      StageTerms& t = st_[s];
      t.rank = sh_.stage_to_rank[s];
      // A microbatch this stage runs (DualPipe's directions run disjoint microbatch ranges).
      const int32_t mb = sh_.direction_of_stage(s) * md_;
      const Action f{ActionType::kForward, s, mb}, i{ActionType::kBackwardInput, s, mb},
          w{ActionType::kBackwardWeight, s, mb}, b{ActionType::kBackward, s, mb};
      t.fc = costs_.action_time(sh_, f, rc);
      t.fl = factor > 0 ? (1 - factor) * t.fc : t.fc;
      const double ti = costs_.action_time(sh_, i, rc), tw = costs_.action_time(sh_, w, rc),
                   tb = costs_.action_time(sh_, b, rc);
      t.ic = std::min(ti, tb);
      t.wl = std::max(0.0, std::min(tb, ti + tw) - t.ic);
      if (auto out = message_route(sh_, f, MessageEnd::kOut)) {
        t.has_next = true;
        if (!out->local()) {
          t.act = costs_.message_time(out->src_stage, out->dst_stage);
          if (blocking) t.send_act = t.act;
        }
      }
      if (auto out = message_route(sh_, i, MessageEnd::kOut)) {
        t.has_prev = true;
        if (!out->local()) {
          t.grad = costs_.message_time(out->src_stage, out->dst_stage);
          if (blocking) t.send_grad = t.grad;
        }
      }
      t.u = units[s];
      t.frac = fracs[s];
    }
    return OkStatus();
  }

  Status check_limit() const {
    if (!o_.memory_limit) return OkStatus();
    const double L = *o_.memory_limit;
    if (!std::isfinite(L) || L + kMemSlack < most_unit_) {
      return Status::invalid_argument(
          fmt::format("--memory-limit {}: below what one forward holds ({} whole-rank microbatch "
                      "activations), so no schedule fits; hint: at least {}",
                      L, most_unit_, std::max(most_unit_, kZbAutoMinMemoryLimit)));
    }
    return OkStatus();
  }

  // The chains' bounds without the memory term (the same at every limit): the makespan's
  // program end, and the longest rank span (with_span only).
  double free_program() {
    if (!free_program_) {
      heads(all_stages(), false, md_);
      tails(all_stages(), md_);
      double v = 0;
      for (int32_t r = 0; r < P_; ++r) v = std::max(v, rank_bound(r, 0.0));
      free_program_ = v;
    }
    return *free_program_;
  }
  double free_span() {
    if (!free_span_) {
      double v = 0;
      for (int32_t r = 0; r < P_; ++r) {
        const std::vector<char> mine = stages_on(r);
        tails(mine, md_);
        heads(mine, false, md_);
        v = std::max(v, rank_bound(r, kNegInf));
      }
      free_span_ = v;
    }
    return *free_span_;
  }
  std::vector<char> all_stages() const { return std::vector<char>(S_, 1); }

  Result<LowerBound> run() {
    LowerBound lb;
    lb.memory_limit = o_.memory_limit.value_or(0);
    lb.rank_work.assign(P_, 0.0);
    std::vector<double> compute_work(P_, 0.0);
    for (int32_t s = 0; s < S_; ++s) {
      const StageTerms& t = st_[s];
      compute_work[t.rank] += md_ * (t.fl + t.ic + t.wl);
      lb.rank_work[t.rank] += md_ * (t.fl + t.ic + t.wl + t.send_act + t.send_grad);
    }
    const double work = *std::max_element(lb.rank_work.begin(), lb.rank_work.end());
    const double cwork = *std::max_element(compute_work.begin(), compute_work.end());

    const std::vector<char> all = all_stages();
    double program = 0, program_free = 0;
    std::vector<double> rank_end(P_, 0.0);  // a bound on each rank's program end
    if (o_.fast) {
      // Term 2 alone: per rank the shortest head, the work, the shortest tail (k = 0 only).
      heads(all, false, 1);
      tails(all, 1);
      for (int32_t r = 0; r < P_; ++r) {
        double head = kInf, tail = kInf;
        for (int32_t s : sh_.stages_of(r)) {
          head = std::min({head, rf_[idx(s, 0)], ri_[idx(s, 0)], rw_[idx(s, 0)]});
          tail = std::min({tail, qf_[idx(s, 0)], qi_[idx(s, 0)], qw_[idx(s, 0)]});
        }
        rank_end[r] = lb.rank_work[r] + head;
        program = std::max(program, head + lb.rank_work[r] + tail);
      }
      program_free = program;
      lb.span = cwork;
    } else {
      // Without the limit's memory term (which term binds; the bound itself when no limit).
      program_free = free_program();
      program = program_free;
      if (o_.memory_limit) {
        heads(all, true, md_);
        tails(all, md_);
        program = 0;
        for (int32_t r = 0; r < P_; ++r) program = std::max(program, rank_bound(r, 0.0));
      }
      // Span (term 6): per rank, heads and tails relative to its own first and last compute.
      double span = 0, span_free = 0;
      const bool pass = o_.span && int64_t{P_} * S_ * md_ <= kMaxSpanPass;
      if (pass) {
        span_free = free_span();
        if (!o_.memory_limit) span = span_free;
      }
      for (int32_t r = 0; r < P_ && pass && o_.memory_limit; ++r) {
        const std::vector<char> mine = stages_on(r);
        tails(mine, md_);
        heads(mine, true, md_);
        span = std::max(span, rank_bound(r, kNegInf));
      }
      if (o_.sim.data_parallel.size > 1) {
        // Each rank's own program end (term 7): absolute heads, tails to the rank's own end.
        heads(all, o_.memory_limit.has_value(), md_);
        for (int32_t r = 0; r < P_; ++r) {
          tails(stages_on(r), md_);
          rank_end[r] = rank_bound(r, 0.0);
        }
      }
      lb.span = std::max(span, cwork);
      const double span_base = std::max(span_free, cwork);
      lb.span_term = lb.span > span_base * (1 + 1e-12) ? "memory"
                     : span_base > cwork * (1 + 1e-12) ? "chains"
                                                       : "work";
    }
    program = std::max(program, work);
    // Term 7: the data-parallel all-reduce after (or overlapping) each rank's program, then the
    // optimizer once every rank has ended.
    double sync = program;
    if (o_.sim.data_parallel.size > 1) {
      const DataParallelSim& dp = o_.sim.data_parallel;
      for (int32_t r = 0; r < P_; ++r) {
        double sum = 0, least = kInf;
        for (int32_t s : sh_.stages_of(r)) {
          const double a = ring_allreduce_time(stage_allreduce_bytes(costs_.stage(s)), dp.size,
                                               dp.link.value_or(costs_.link()), dp.bucket_bytes);
          sum += a;
          least = std::min(least, a);
        }
        const double tail = dp.overlap ? (std::isfinite(least) ? least : 0.0) : sum;
        sync = std::max(sync, std::max(rank_end[r], lb.rank_work[r]) + tail);
      }
    }
    std::vector<double> opt(P_, 0.0);
    for (int32_t s = 0; s < S_; ++s) opt[st_[s].rank] += costs_.stage(s).optimizer;
    const double most_opt = *std::max_element(opt.begin(), opt.end());
    lb.compute_end = program;
    // Synchronous: every rank's optimizer starts after the last program. Post-validated, each
    // starts at its own rank's end: the last rank to end adds at least the least optimizer time.
    lb.makespan =
        sync +
        (o_.sim.optimizer_post_validation ? *std::min_element(opt.begin(), opt.end()) : most_opt);
    const double base = std::max(program_free, work);
    lb.makespan_term = program > base * (1 + 1e-12)                  ? "memory"
                       : base > work * (1 + 1e-12) || sync > program ? "chains"
                                                                     : "work";
    if (o_.fast) lb.span_term = "work";
    return lb;
  }

  size_t idx(int32_t s, int32_t k) const { return static_cast<size_t>(s) * md_ + k; }
  int32_t first_of(int32_t s) const { return (s / Sd_) * Sd_; }

  // Releases of the k-th F-, I- and W-part of each stage in lane order (terms 2, 3 and 4), for
  // k < count. anchor[s]: the stage's items start at or after 0 (the time origin: the step's
  // start, or the anchored rank's first compute); elsewhere only the chains bound them.
  void heads(const std::vector<char>& anchor, bool memory, int32_t count) {
    const size_t n = static_cast<size_t>(S_) * md_;
    rf_.assign(n, kNegInf);
    ri_.assign(n, kNegInf);
    rw_.assign(n, kNegInf);
    // Per stage, the memory term's scan over the I- and W-part ends (both non-decreasing in k).
    std::vector<int32_t> pi(S_, 0), pw(S_, 0);
    std::vector<double> freed(S_, 0.0), at(S_, kNegInf);
    const double L = o_.memory_limit.value_or(kInf);
    for (int32_t k = 0; k < count; ++k) {
      for (int32_t d = 0; d < sh_.directions; ++d) {
        const int32_t lo = d * Sd_, hi = lo + Sd_;
        for (int32_t s = lo; s < hi; ++s) {
          const StageTerms& t = st_[s];
          double r = anchor[s] ? 0.0 : kNegInf;
          if (k > 0) r = std::max(r, rf_[idx(s, k - 1)] + t.fc);
          if (s > lo) r = std::max(r, rf_[idx(s - 1, k)] + st_[s - 1].fc + st_[s - 1].act);
          if (memory) {
            // Before its (k+1)-th F the stage's own count must have freed (k+1)u - L.
            const double need = (k + 1) - L / t.u - kMemSlack;
            while (freed[s] < need) {
              const double ei = pi[s] < k ? ri_[idx(s, pi[s])] + t.ic : kInf;
              const double ew = pw[s] < k ? rw_[idx(s, pw[s])] + t.wl : kInf;
              if (ei == kInf && ew == kInf) break;  // unreachable when L >= u (check())
              if (ei <= ew) {
                at[s] = ei;
                freed[s] += 1 - t.frac;
                ++pi[s];
              } else {
                at[s] = ew;
                freed[s] += t.frac;
                ++pw[s];
              }
            }
            if (need > 0) r = std::max(r, at[s]);
          }
          rf_[idx(s, k)] = r;
        }
        for (int32_t s = hi - 1; s >= lo; --s) {
          const StageTerms& t = st_[s];
          double r = anchor[s] ? 0.0 : kNegInf;
          if (k > 0) r = std::max(r, ri_[idx(s, k - 1)] + t.ic);
          r = std::max(r, rf_[idx(s, k)] + t.fc);
          if (s + 1 < hi) r = std::max(r, ri_[idx(s + 1, k)] + st_[s + 1].ic + st_[s + 1].grad);
          ri_[idx(s, k)] = r;
        }
        for (int32_t s = lo; s < hi; ++s) {
          const StageTerms& t = st_[s];
          double r = anchor[s] ? 0.0 : kNegInf;
          if (k > 0) r = std::max(r, rw_[idx(s, k - 1)] + t.wl);
          r = std::max(r, ri_[idx(s, k)] + t.ic);
          rw_[idx(s, k)] = r;
        }
      }
    }
  }

  // Tails of the k-th-from-last F-, I- and W-part of each stage (terms 2 and 3): what must still
  // run after it ends before an anchored stage's last item does.
  void tails(const std::vector<char>& anchor, int32_t count) {
    const size_t n = static_cast<size_t>(S_) * md_;
    qf_.assign(n, kNegInf);
    qi_.assign(n, kNegInf);
    qw_.assign(n, kNegInf);
    for (int32_t k = 0; k < count; ++k) {
      for (int32_t d = 0; d < sh_.directions; ++d) {
        const int32_t lo = d * Sd_, hi = lo + Sd_;
        for (int32_t s = lo; s < hi; ++s) {
          double q = anchor[s] ? 0.0 : kNegInf;
          if (k > 0) q = std::max(q, qw_[idx(s, k - 1)] + st_[s].wl);
          qw_[idx(s, k)] = q;
        }
        for (int32_t s = lo; s < hi; ++s) {
          const StageTerms& t = st_[s];
          double q = anchor[s] ? 0.0 : kNegInf;
          if (k > 0) q = std::max(q, qi_[idx(s, k - 1)] + t.ic);
          q = std::max(q, qw_[idx(s, k)] + t.wl);
          if (s > lo) q = std::max(q, qi_[idx(s - 1, k)] + st_[s - 1].ic + t.grad);
          qi_[idx(s, k)] = q;
        }
        for (int32_t s = hi - 1; s >= lo; --s) {
          const StageTerms& t = st_[s];
          double q = anchor[s] ? 0.0 : kNegInf;
          if (k > 0) q = std::max(q, qf_[idx(s, k - 1)] + t.fl);
          q = std::max(q, qi_[idx(s, k)] + t.ic);
          if (s + 1 < hi) q = std::max(q, qf_[idx(s + 1, k)] + st_[s + 1].fl + t.act);
          qf_[idx(s, k)] = q;
        }
      }
    }
  }

  std::vector<char> stages_on(int32_t r) const {
    std::vector<char> mine(S_, 0);
    for (int32_t s = 0; s < S_; ++s) mine[s] = st_[s].rank == r;
    return mine;
  }

  // Jackson's bound on rank r's lane with the current heads and tails. A blocking SEND's tail
  // is at least send_floor: 0 where every event ends by the bounded time (the makespan, the
  // rank's program end); -inf for a span, where a SEND with no anchored successor may run after
  // the rank's last compute and is left out.
  double rank_bound(int32_t r, double send_floor) {
    std::vector<zb::LaneItem> items;
    for (int32_t s : sh_.stages_of(r)) {
      const StageTerms& t = st_[s];
      for (int32_t k = 0; k < md_; ++k) {
        const int32_t back = md_ - 1 - k;
        items.push_back({rf_[idx(s, k)], t.fl, qf_[idx(s, back)]});
        items.push_back({ri_[idx(s, k)], t.ic, qi_[idx(s, back)]});
        items.push_back({rw_[idx(s, k)], t.wl, qw_[idx(s, back)]});
        if (t.send_act > 0) {
          const double q = std::max(send_floor, st_[s + 1].fl + qf_[idx(s + 1, back)]);
          if (q > kNegInf) items.push_back({rf_[idx(s, k)] + t.fc, t.send_act, q});
        }
        if (t.send_grad > 0) {
          const double q = std::max(send_floor, st_[s - 1].ic + qi_[idx(s - 1, back)]);
          if (q > kNegInf) items.push_back({ri_[idx(s, k)] + t.ic, t.send_grad, q});
        }
      }
    }
    const double v = zb::jackson(items);
    return std::isfinite(v) ? std::max(v, 0.0) : 0.0;
  }

  const Schedule& sh_;
  const CostModel& costs_;
  LowerBoundOptions o_;
  bool checked_ = false;
  double most_unit_ = 0;  // the most one F adds to a rank's count
  std::optional<double> free_program_, free_span_;
  int32_t P_ = 0, S_ = 0, Sd_ = 0, md_ = 0;
  std::vector<StageTerms> st_;
  std::vector<double> rf_, ri_, rw_, qf_, qi_, qw_;
};

}  // namespace

Result<LowerBound> lower_bound(const Schedule& shape, const CostModel& costs,
                               const LowerBoundOptions& options) {
  Bounder b(shape, costs, options);
  return b.at(options.memory_limit);
}

struct LowerBoundSweep::Impl {
  Impl(const Schedule& shape, const CostModel& costs, const LowerBoundOptions& o)
      : bounder(shape, costs, o) {}
  Bounder bounder;
};

LowerBoundSweep::LowerBoundSweep(const Schedule& shape, const CostModel& costs,
                                 const LowerBoundOptions& options)
    : impl_(std::make_unique<Impl>(shape, costs, options)) {}
LowerBoundSweep::~LowerBoundSweep() = default;
LowerBoundSweep::LowerBoundSweep(LowerBoundSweep&&) noexcept = default;
LowerBoundSweep& LowerBoundSweep::operator=(LowerBoundSweep&&) noexcept = default;

Result<LowerBound> LowerBoundSweep::at(std::optional<double> memory_limit) {
  return impl_->bounder.at(memory_limit);
}

Result<LowerBound> lower_bound_for(const Schedule& schedule, const CostModel& costs,
                                   const SimOptions& sim, bool span) {
  TP_RETURN_IF_ERROR(costs.covers(schedule));
  LowerBoundOptions o;
  o.sim = sim;
  // The engine's own messages and optimizer (engine_profile); Megatron's calls only add waits to
  // overlap mode, so its bound is overlap's.
  TP_ASSIGN_OR_RETURN(EngineProfile ep, engine_profile(sim.engine, schedule, sim));
  o.sim.engine = Engine::kTightpipe;
  o.sim.comm_mode = ep.comm_mode;
  o.sim.optimizer_post_validation = ep.optimizer_post_validation;
  o.span = span;
  o.f_memory_units = zb_f_memory_units(costs, schedule);
  o.w_memory_fractions = zb_w_memory_fractions(costs, ZbAutoOptions{});
  const std::vector<double> peak =
      zb_peak_memory_units(schedule, o.w_memory_fractions, o.f_memory_units);
  double most = 0;
  for (double x : peak) most = std::max(most, x);
  double unit = 0;
  for (double u : o.f_memory_units) unit = std::max(unit, u);
  o.memory_limit = std::max(most, unit);
  return lower_bound(schedule, costs, o);
}

Status check_lower_bound(double value, double bound, std::string_view what) {
  constexpr double kRel = 1e-9;
  if (!(bound <= value + kRel * std::max(std::abs(value), std::abs(bound)))) {
    return Status::internal(fmt::format(
        "internal error: the lower bound {:.17g} is above the {} {:.17g} that a schedule "
        "reached, so it bounds nothing; hint: please report it with the command and its cost "
        "flags (docs/cost_model.md, \"Lower bound\")",
        bound, what, value));
  }
  return OkStatus();
}

Status attach_lower_bound(SimResult& result, const LowerBound& lb, std::string_view schedule) {
  TP_RETURN_IF_ERROR(check_lower_bound(result.makespan, lb.makespan,
                                       fmt::format("makespan of schedule '{}'", schedule)));
  TP_RETURN_IF_ERROR(check_lower_bound(result.max_span, lb.span,
                                       fmt::format("max span of schedule '{}'", schedule)));
  result.has_lower_bound = true;
  result.lower_bound_makespan = lb.makespan;
  result.lower_bound_span = lb.span;
  result.lower_bound_memory = lb.memory_limit;
  return OkStatus();
}

double lower_bound_gap(double value, double bound) {
  return bound > 0 ? (value - bound) / bound : 0.0;
}

std::string format_lower_bound(double value, double bound) {
  return format_lower_bound(value, bound, fmt::format("{:.6g}", bound));
}

std::string format_lower_bound(double value, double bound, std::string_view bound_text) {
  return fmt::format("(lower bound {}: within {:.1f}%)", bound_text,
                     100.0 * std::max(0.0, lower_bound_gap(value, bound)));
}

namespace zb {

double jackson(std::vector<LaneItem>& items) {
  if (items.empty()) return kNegInf;
  std::sort(items.begin(), items.end(),
            [](const LaneItem& a, const LaneItem& b) { return a.r < b.r; });
  std::vector<double> rem(items.size());
  for (size_t k = 0; k < items.size(); ++k) rem[k] = items[k].p;
  std::priority_queue<std::pair<double, size_t>> ready;  // (tail, index)
  double t = kNegInf, best = kNegInf;
  size_t next = 0;
  while (next < items.size() || !ready.empty()) {
    if (ready.empty() && t < items[next].r) t = items[next].r;
    while (next < items.size() && items[next].r <= t) {
      ready.push({items[next].q, next});
      ++next;
    }
    const auto [q, x] = ready.top();
    ready.pop();
    const double release = next < items.size() ? items[next].r : kInf;
    if (t + rem[x] <= release) {
      t += rem[x];
      best = std::max(best, t + q);
    } else {
      rem[x] -= release - t;
      t = release;
      ready.push({q, x});
    }
  }
  return best;
}

}  // namespace zb

}  // namespace tightpipe
