// zb-opt: the optimal single-chunk I/W schedule of a tiny pipeline by branch and bound
// (lower_bound.h; docs/cost_model.md, "Exact optimum").
//
// The search space is every schedule whose stages run their F, I and W in microbatch order
// (FIFO). That loses nothing: microbatches are interchangeable, so relabelling each stage's k-th
// F, I and W as microbatch k keeps every dependency (the order-statistic lemma of the lower
// bound) and every memory count (which reads types, not microbatch ids), at the same times. A
// state is then the counts (F, I, W done) per stage plus the times that matter for the rest:
// each rank's lane, the ends of the messages not yet consumed and, for the span, each rank's
// first start. Children append one action to one rank's program and time it as the simulator
// would (overlap mode: start = max(lane, producer end + message time)). A state is cut when its
// bound cannot beat the incumbent, or when a state with the same counts and times no later was
// already expanded (its completions are at least as good).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

#include "sim/one_lane.h"
#include "sim/zb_score.h"
#include "tightpipe/lower_bound.h"

namespace tightpipe {
namespace {

constexpr double kEps = 1e-9;
// States remembered for the dominance cut (beyond it the search goes on without remembering).
constexpr size_t kMaxRemembered = 4'000'000;
// The most states one search expands: far above what the size limits need (docs), so it only
// guards against a bug turning into a hang.
constexpr int64_t kMaxNodes = 200'000'000;

struct Node {
  int8_t nf[kZbOptMaxRanks] = {}, ni[kZbOptMaxRanks] = {}, nw[kZbOptMaxRanks] = {};
  double lane[kZbOptMaxRanks] = {};
  double first[kZbOptMaxRanks] = {};
  double end_f[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {};
  double end_i[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {};
};

class Search {
 public:
  Search(int32_t p, int32_t m, const CostModel& costs, double limit,
         const std::vector<double>& fracs, ZbObjective objective)
      : p_(p), m_(m), limit_(limit), frac_(fracs), obj_(objective) {
    shell_.num_ranks = p;
    shell_.num_stages = p;
    shell_.num_microbatches = m;
    shell_.stage_to_rank = place_stages(Placement::kLoop, p, p);
    shell_.programs.resize(p);
    for (int32_t s = 0; s < p; ++s) {
      f_[s] = costs.action_time(shell_, {ActionType::kForward, s, 0});
      i_[s] = costs.action_time(shell_, {ActionType::kBackwardInput, s, 0});
      w_[s] = costs.action_time(shell_, {ActionType::kBackwardWeight, s, 0});
      act_[s] = s + 1 < p ? costs.message_time(s, s + 1) : 0;
      grad_[s] = s > 0 ? costs.message_time(s, s - 1) : 0;
    }
    // Static tails to the makespan (k-th from last; the lower bound's recursion for one chunk),
    // and to the rank's own end (the span).
    for (int32_t k = 0; k < m; ++k) {
      for (int32_t s = 0; s < p; ++s) {
        qw_[s][k] = k > 0 ? qw_[s][k - 1] + w_[s] : 0;
        own_w_[s][k] = qw_[s][k];
      }
      for (int32_t s = 0; s < p; ++s) {
        double q = std::max(k > 0 ? qi_[s][k - 1] + i_[s] : 0, qw_[s][k] + w_[s]);
        if (s > 0) q = std::max(q, qi_[s - 1][k] + i_[s - 1] + grad_[s]);
        qi_[s][k] = q;
        own_i_[s][k] = std::max(k > 0 ? own_i_[s][k - 1] + i_[s] : 0, own_w_[s][k] + w_[s]);
      }
      for (int32_t s = p - 1; s >= 0; --s) {
        double q = std::max(k > 0 ? qf_[s][k - 1] + f_[s] : 0, qi_[s][k] + i_[s]);
        if (s + 1 < p) q = std::max(q, qf_[s + 1][k] + f_[s + 1] + act_[s]);
        qf_[s][k] = q;
        own_f_[s][k] = std::max(k > 0 ? own_f_[s][k - 1] + f_[s] : 0, own_i_[s][k] + i_[s]);
      }
    }
  }

  // Searches for a schedule strictly better than `incumbent`; true if one was found (programs_).
  Status run(double incumbent, double floor, ZbOptStats& stats) {
    best_ = incumbent;
    floor_ = floor;
    Node root;
    std::vector<std::vector<Action>> prog(p_);
    path_ = &prog;
    stats_ = &stats;
    dfs(root, 3 * p_ * m_);
    if (stats.nodes > kMaxNodes) {
      return Status::internal(fmt::format(
          "zb-opt: the search expanded over {} states at --pp {} --microbatches {} without "
          "finishing",
          kMaxNodes, p_, m_));
    }
    return OkStatus();
  }

  bool found() const { return found_; }
  const std::vector<std::vector<Action>>& programs() const { return best_programs_; }

 private:
  double value(const Node& n) const {
    double v = 0;
    for (int32_t r = 0; r < p_; ++r)
      v = std::max(v, obj_ == ZbObjective::kMakespan ? n.lane[r] : n.lane[r] - n.first[r]);
    return v;
  }

  // Earliest starts of every action not yet placed, from the state (the lower bound's heads,
  // seeded with the placed actions' ends), then per rank Jackson's rule over them.
  double bound(const Node& n) const {
    double rf[kZbOptMaxRanks][kZbOptMaxMicrobatches], ri[kZbOptMaxRanks][kZbOptMaxMicrobatches];
    for (int32_t s = 0; s < p_; ++s) {
      for (int32_t k = n.nf[s]; k < m_; ++k) {
        double r = k > n.nf[s] ? rf[s][k - 1] + f_[s] : n.lane[s];
        if (s > 0)
          r = std::max(
              r, (k < n.nf[s - 1] ? n.end_f[s - 1][k] : rf[s - 1][k] + f_[s - 1]) + act_[s - 1]);
        rf[s][k] = r;
      }
    }
    for (int32_t s = p_ - 1; s >= 0; --s) {
      for (int32_t k = n.ni[s]; k < m_; ++k) {
        double r = k > n.ni[s] ? ri[s][k - 1] + i_[s] : n.lane[s];
        if (k >= n.nf[s]) r = std::max(r, rf[s][k] + f_[s]);
        if (s + 1 < p_)
          r = std::max(
              r, (k < n.ni[s + 1] ? n.end_i[s + 1][k] : ri[s + 1][k] + i_[s + 1]) + grad_[s + 1]);
        ri[s][k] = r;
      }
    }
    double lb = value(n);
    std::vector<zb::LaneItem> items;
    for (int32_t s = 0; s < p_; ++s) {
      items.clear();
      const bool span = obj_ == ZbObjective::kSpan;
      const auto& qf = span ? own_f_ : qf_;
      const auto& qi = span ? own_i_ : qi_;
      const auto& qw = span ? own_w_ : qw_;
      for (int32_t k = n.nf[s]; k < m_; ++k) items.push_back({rf[s][k], f_[s], qf[s][m_ - 1 - k]});
      for (int32_t k = n.ni[s]; k < m_; ++k) items.push_back({ri[s][k], i_[s], qi[s][m_ - 1 - k]});
      for (int32_t k = n.nw[s]; k < m_; ++k) {
        const double r = std::max(n.lane[s], k < n.ni[s] ? n.lane[s] : ri[s][k] + i_[s]);
        items.push_back({r, w_[s], qw[s][m_ - 1 - k]});
      }
      if (items.empty()) continue;
      const double end = zb::jackson(items);  // the relaxation of lower_bound() (term 5)
      if (!span) {
        lb = std::max(lb, end);
      } else if (n.nf[s] > 0) {
        lb = std::max(lb, end - n.first[s]);  // from the rank's first start, known
      } else {
        lb = std::max(lb, m_ * (f_[s] + i_[s] + w_[s]));  // not started: its work
      }
    }
    return std::max(lb, floor_);
  }

  uint64_t key(const Node& n) const {
    uint64_t k = 0;
    for (int32_t s = 0; s < p_; ++s) k = (((k << 4 | n.nf[s]) << 4 | n.ni[s]) << 4) | n.nw[s];
    return k;
  }

  void signature(const Node& n, std::vector<double>& sig) const {
    sig.clear();
    for (int32_t s = 0; s < p_; ++s) {
      sig.push_back(n.lane[s]);
      if (obj_ == ZbObjective::kSpan && n.nf[s] > 0) sig.push_back(-n.first[s]);
      if (s + 1 < p_)
        for (int32_t k = n.nf[s + 1]; k < n.nf[s]; ++k) sig.push_back(n.end_f[s][k]);
      if (s > 0)
        for (int32_t k = n.ni[s - 1]; k < n.ni[s]; ++k) sig.push_back(n.end_i[s][k]);
    }
  }

  // True if a state with the same counts and no later times was expanded; else remembers n.
  bool dominated(const Node& n) {
    signature(n, sig_);
    auto& seen = memo_[key(n)];
    for (const std::vector<double>& o : seen) {
      bool le = true;
      for (size_t k = 0; k < o.size() && le; ++k) le = o[k] <= sig_[k] + kEps;
      if (le) return true;
    }
    if (remembered_ < kMaxRemembered) {
      // Forget the remembered states the new one dominates.
      std::erase_if(seen, [&](const std::vector<double>& o) {
        for (size_t k = 0; k < o.size(); ++k)
          if (sig_[k] > o[k] + kEps) return false;
        return true;
      });
      seen.push_back(sig_);
      ++remembered_;
    }
    return false;
  }

  void dfs(const Node& n, int32_t left) {
    if (++stats_->nodes > kMaxNodes) return;
    if (left == 0) {
      const double v = value(n);
      if (v < best_ * (1 - 1e-12)) {
        best_ = v;
        best_programs_ = *path_;
        found_ = true;
      }
      return;
    }
    // The children, earliest start first (good schedules early make the cut bite).
    struct Child {
      double start;
      int32_t s;
      ActionType type;
    };
    Child kids[3 * kZbOptMaxRanks];
    int nk = 0;
    for (int32_t s = 0; s < p_; ++s) {
      const double held = n.nf[s] - (1 - frac_[s]) * n.ni[s] - frac_[s] * n.nw[s];
      if (n.nf[s] < m_ && (s == 0 || n.nf[s - 1] > n.nf[s]) && held + 1 <= limit_ + zb::kMemEps) {
        double t = n.lane[s];
        if (s > 0) t = std::max(t, n.end_f[s - 1][n.nf[s]] + act_[s - 1]);
        kids[nk++] = {t, s, ActionType::kForward};
      }
      if (n.ni[s] < n.nf[s] && (s == p_ - 1 || n.ni[s + 1] > n.ni[s])) {
        double t = n.lane[s];
        if (s + 1 < p_) t = std::max(t, n.end_i[s + 1][n.ni[s]] + grad_[s + 1]);
        kids[nk++] = {t, s, ActionType::kBackwardInput};
      }
      if (n.nw[s] < n.ni[s]) kids[nk++] = {n.lane[s], s, ActionType::kBackwardWeight};
    }
    // GCC 12 false positive (-O2): std::sort's insertion-sort branch for more than 16 elements
    // is analysed against the 12-element array although it cannot run (nk <= 12).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
    std::sort(kids, kids + nk, [](const Child& a, const Child& b) {
      return a.start != b.start ? a.start < b.start : a.s < b.s;
    });
#pragma GCC diagnostic pop
    for (int c = 0; c < nk; ++c) {
      const Child& k = kids[c];
      Node x = n;
      const int32_t s = k.s;
      int32_t mb = 0;
      double d = 0;
      switch (k.type) {
        case ActionType::kForward:
          mb = x.nf[s]++;
          d = f_[s];
          if (mb == 0) x.first[s] = k.start;
          x.end_f[s][mb] = k.start + d;
          break;
        case ActionType::kBackwardInput:
          mb = x.ni[s]++;
          d = i_[s];
          x.end_i[s][mb] = k.start + d;
          break;
        default:
          mb = x.nw[s]++;
          d = w_[s];
          break;
      }
      x.lane[s] = k.start + d;
      if (bound(x) >= best_ * (1 - 1e-12)) {
        ++stats_->pruned;
        continue;
      }
      if (dominated(x)) {
        ++stats_->dominated;
        continue;
      }
      (*path_)[s].push_back({k.type, s, mb});
      dfs(x, left - 1);
      (*path_)[s].pop_back();
      if (stats_->nodes > kMaxNodes) return;
    }
  }

  const int32_t p_, m_;
  const double limit_;
  const std::vector<double> frac_;
  const ZbObjective obj_;
  Schedule shell_;
  double f_[kZbOptMaxRanks] = {}, i_[kZbOptMaxRanks] = {}, w_[kZbOptMaxRanks] = {};
  double act_[kZbOptMaxRanks] = {}, grad_[kZbOptMaxRanks] = {};
  double qf_[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {},
         qi_[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {},
         qw_[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {};
  double own_f_[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {},
         own_i_[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {},
         own_w_[kZbOptMaxRanks][kZbOptMaxMicrobatches] = {};
  double best_ = kInf, floor_ = 0;
  bool found_ = false;
  std::vector<std::vector<Action>>* path_ = nullptr;
  std::vector<std::vector<Action>> best_programs_;
  ZbOptStats* stats_ = nullptr;
  std::unordered_map<uint64_t, std::vector<std::vector<double>>> memo_;
  size_t remembered_ = 0;
  std::vector<double> sig_;
};

}  // namespace

bool is_zb_opt_name(std::string_view name) { return zb::lower_case(name) == "zb-opt"; }

Result<Schedule> build_zb_opt(int32_t p, int32_t m, const CostModel& costs,
                              const ZbAutoOptions& options, ZbOptStats* stats) {
  if (p > kZbOptMaxRanks || m > kZbOptMaxMicrobatches) {
    return Status::invalid_argument(fmt::format(
        "--schedule zb-opt --pp {} --microbatches {}: the exact search takes at most --pp {} "
        "and --microbatches {}; hint: zb-auto for larger pipelines",
        p, m, kZbOptMaxRanks, kZbOptMaxMicrobatches));
  }
  ZbAutoOptions o = options;
  if (!o.memory_limit) o.memory_limit = p;
  // The start, and the error checks (shape, costs, options): zb-auto at the same limit.
  TP_ASSIGN_OR_RETURN(Schedule start, build_zb_auto(p, m, costs, o));
  TP_ASSIGN_OR_RETURN(double incumbent, simulated_objective(start, costs, o.objective));
  const std::vector<double> fracs = zb_w_memory_fractions(costs, o);
  LowerBoundOptions lo;
  lo.memory_limit = *o.memory_limit;
  lo.w_memory_fractions = fracs;
  lo.f_memory_units.assign(p, 1.0);
  TP_ASSIGN_OR_RETURN(LowerBound lb, lower_bound(start, costs, lo));
  const double floor = o.objective == ZbObjective::kMakespan ? lb.makespan : lb.span;
  ZbOptStats local;
  ZbOptStats& st = stats ? *stats : local;
  st = {};
  st.incumbent = incumbent;
  st.lower_bound = floor;
  Schedule best = start;
  double value = incumbent;
  if (incumbent > floor * (1 + 1e-12)) {
    Search search(p, m, costs, *o.memory_limit, fracs, o.objective);
    TP_RETURN_IF_ERROR(search.run(incumbent, floor, st));
    if (search.found()) {
      Schedule s = start;
      s.programs = search.programs();
      TP_RETURN_IF_ERROR(validate(s));
      TP_ASSIGN_OR_RETURN(double v, simulated_objective(s, costs, o.objective));
      if (v < incumbent) {
        best = std::move(s);
        value = v;
      }
    }
  }
  st.optimum = value;
  best.name = "zb-opt";
  return best;
}

}  // namespace tightpipe
