// Per rank and step: busy time by kind, idle time by cause (report.h, docs/report.md).
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "tightpipe/report.h"

namespace tightpipe {

std::string_view busy_kind_name(BusyKind kind) {
  switch (kind) {
    case BusyKind::kF:
      return "F";
    case BusyKind::kI:
      return "I";
    case BusyKind::kW:
      return "W";
    case BusyKind::kB:
      return "B";
    case BusyKind::kOptimizer:
      return "optimizer";
  }
  return "?";
}

std::string_view idle_cause_name(IdleCause cause) {
  switch (cause) {
    case IdleCause::kFill:
      return "fill";
    case IdleCause::kDrain:
      return "drain";
    case IdleCause::kDependency:
      return "dependency wait";
    case IdleCause::kExposedComm:
      return "exposed comm";
    case IdleCause::kData:
      return "data wait";
    case IdleCause::kOther:
      return "other";
  }
  return "?";
}

std::string_view idle_cause_color(IdleCause cause) {
  switch (cause) {
    case IdleCause::kFill:
      return "#c7c7c7";
    case IdleCause::kDrain:
      return "#9d9d9d";
    case IdleCause::kDependency:
      return "#76b7b2";
    case IdleCause::kExposedComm:
      return "#e15759";
    case IdleCause::kData:
      return "#9c755f";
    case IdleCause::kOther:
      return "#d4a6c8";
  }
  return "#000000";
}

double RankBreakdown::busy_total() const {
  double s = 0;
  for (double x : busy) s += x;
  return s;
}
double RankBreakdown::idle_total() const {
  double s = 0;
  for (double x : idle) s += x;
  return s;
}

namespace {

// F, I, W, B -> 0..3 (cost_slot), the optimizer -> 4; nothing else is busy time.
int busy_index(EventKind k) { return k == EventKind::kOptimizer ? 4 : cost_slot(k); }

// (gradient?, stage, microbatch)
using MsgKey = std::tuple<bool, int32_t, int32_t>;

struct Interval {
  double a, b;
};

bool covered(const std::vector<Interval>& v, double t) {
  for (const Interval& i : v)
    if (i.a <= t && t < i.b) return true;
  return false;
}

}  // namespace

StepBreakdown breakdown_step(const Timeline& timeline, int32_t num_ranks, int32_t step,
                             const BreakdownOptions& options) {
  StepBreakdown out;
  out.step = step;
  out.ranks.resize(std::max(0, num_ranks));
  for (int32_t r = 0; r < num_ranks; ++r) {
    out.ranks[r].rank = r;
    out.ranks[r].present = false;
  }
  // Step end, the optimizer's sync point, and every posted SEND.
  double T = 0, sync = 0;
  std::map<MsgKey, double> send_start;
  for (const RankTimeline& rt : timeline.ranks) {
    if (rt.rank < 0 || rt.rank >= num_ranks || rt.events.empty()) continue;
    out.ranks[rt.rank].present = true;
    for (const TimelineEvent& e : rt.events) {
      T = std::max(T, e.end);
      if (e.kind == EventKind::kOptimizer) sync = std::max(sync, e.start);
      if (e.kind == EventKind::kSend) {
        auto a = parse_action(e.name);
        if (!a.ok()) continue;
        const MsgKey k{a->type == ActionType::kSendGrad, a->stage, a->microbatch};
        auto it = send_start.find(k);
        if (it == send_start.end() || e.start < it->second) send_start[k] = e.start;
      }
    }
  }
  out.step_time = T;

  for (const RankTimeline& rt : timeline.ranks) {
    if (rt.rank < 0 || rt.rank >= num_ranks || rt.events.empty()) continue;
    RankBreakdown& rb = out.ranks[rt.rank];
    std::vector<const TimelineEvent*> computes;
    std::vector<Interval> busy_iv, data_iv, send_iv;
    std::map<MsgKey, double> recv_end;
    for (const TimelineEvent& e : rt.events) {
      const int bi = busy_index(e.kind);
      if (bi >= 0 && bi < 4) {
        computes.push_back(&e);
        rb.busy[bi] += e.end - e.start;
        busy_iv.push_back({e.start, e.end});
      } else if (bi == 4) {
        const double s = std::max(e.start, sync);
        if (e.end > s) {
          rb.busy[4] += e.end - s;
          busy_iv.push_back({s, e.end});
        }
      } else if (e.kind == EventKind::kData) {
        data_iv.push_back({e.start, e.end});
      } else if (e.kind == EventKind::kSend) {
        send_iv.push_back({e.start, e.end});
      } else if (e.kind == EventKind::kRecv) {
        auto a = parse_action(e.name);
        if (a.ok()) recv_end[{a->type == ActionType::kRecvGrad, a->stage, a->microbatch}] = e.end;
      }
    }
    std::sort(computes.begin(), computes.end(),
              [](const TimelineEvent* x, const TimelineEvent* y) { return x->start < y->start; });
    std::sort(busy_iv.begin(), busy_iv.end(),
              [](const Interval& x, const Interval& y) { return x.a < y.a; });
    rb.first_compute = computes.empty() ? 0 : computes.front()->start;
    rb.last_compute = 0;
    for (const auto* c : computes) rb.last_compute = std::max(rb.last_compute, c->end);

    // The message the compute starting at `t` waited for: (posted, arrived); posted < 0 when the
    // peer's SEND is unknown.
    auto message_of = [&](double t, double& posted, double& arrived) {
      auto it = std::lower_bound(computes.begin(), computes.end(), t,
                                 [](const TimelineEvent* c, double x) { return c->start < x; });
      if (it == computes.end() || (*it)->start != t) return false;
      const TimelineEvent& c = **it;
      const bool grad = c.kind != EventKind::kForward;
      if (c.kind == EventKind::kBackwardWeight) return false;
      auto r = recv_end.find({grad, c.stage, c.microbatch});
      if (r == recv_end.end()) return false;
      arrived = r->second;
      auto s = send_start.find({grad, grad ? c.stage + 1 : c.stage - 1, c.microbatch});
      posted = s == send_start.end() ? -1 : s->second;
      return true;
    };

    auto classify_gap = [&](double a, double b) {
      if (b <= a) return;
      double posted = -1, arrived = -1;
      const bool msg = message_of(b, posted, arrived);
      std::vector<double> cuts = {a, b, rb.first_compute, rb.last_compute};
      if (msg) {
        cuts.push_back(arrived);
        if (posted >= 0) cuts.push_back(posted);
      }
      for (const auto& iv : data_iv) cuts.insert(cuts.end(), {iv.a, iv.b});
      if (!options.overlap_p2p)
        for (const auto& iv : send_iv) cuts.insert(cuts.end(), {iv.a, iv.b});
      std::sort(cuts.begin(), cuts.end());
      for (size_t k = 0; k + 1 < cuts.size(); ++k) {
        const double x = std::max(a, cuts[k]), y = std::min(b, cuts[k + 1]);
        if (y <= x) continue;
        const double m = 0.5 * (x + y);
        IdleCause c;
        if (covered(data_iv, m)) {
          c = IdleCause::kData;
        } else if (!options.overlap_p2p && covered(send_iv, m)) {
          c = IdleCause::kExposedComm;
        } else if (msg && posted >= 0 && posted <= m && m < arrived) {
          c = IdleCause::kExposedComm;
        } else if (computes.empty() || m >= rb.last_compute) {
          c = IdleCause::kDrain;
        } else if (m < rb.first_compute) {
          c = IdleCause::kFill;
        } else if (msg && posted >= 0 && m < posted) {
          c = IdleCause::kDependency;
        } else {
          c = IdleCause::kOther;
        }
        rb.idle[static_cast<int>(c)] += y - x;
      }
    };
    double t = 0;
    for (const Interval& iv : busy_iv) {
      if (iv.a > t) classify_gap(t, std::min(iv.a, T));
      t = std::max(t, iv.b);
    }
    if (T > t) classify_gap(t, T);
  }

  int present = 0;
  double idle = 0;
  for (const RankBreakdown& rb : out.ranks) {
    if (!rb.present) continue;
    ++present;
    idle += rb.idle_total();
    for (int c = 0; c < kNumIdleCauses; ++c) out.cause_ratio[c] += rb.idle[c];
  }
  const double denom = present * T;
  out.bubble_ratio = denom > 0 ? idle / denom : 0;
  for (double& x : out.cause_ratio) x = denom > 0 ? x / denom : 0;
  return out;
}

Spread spread_of(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto q = [&](double p) {
    const double pos = p * static_cast<double>(v.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  s.median = q(0.5);
  s.p10 = q(0.1);
  s.p90 = q(0.9);
  s.min = v.front();
  s.max = v.back();
  return s;
}

BreakdownSummary summarize_steps(const std::vector<StepBreakdown>& steps, int64_t warmup) {
  BreakdownSummary out;
  std::vector<const StepBreakdown*> used;
  for (size_t k = 0; k < steps.size(); ++k) {
    if (static_cast<int64_t>(k) < warmup && static_cast<int64_t>(steps.size()) > warmup) {
      out.warmup_steps.push_back(steps[k].step);
    } else {
      used.push_back(&steps[k]);
      out.steps.push_back(steps[k].step);
    }
  }
  if (used.empty()) return out;
  const size_t P = used.front()->ranks.size();
  std::vector<double> st, br;
  std::array<std::vector<double>, kNumIdleCauses> cr;
  for (const auto* s : used) {
    st.push_back(s->step_time);
    br.push_back(s->bubble_ratio);
    for (int c = 0; c < kNumIdleCauses; ++c) cr[c].push_back(s->cause_ratio[c]);
  }
  out.step_time = spread_of(st);
  out.bubble_ratio = spread_of(br);
  for (int c = 0; c < kNumIdleCauses; ++c) out.cause_ratio[c] = spread_of(cr[c]);
  out.rank_busy.assign(P, {});
  out.rank_idle.assign(P, {});
  out.rank_bubble_ratio.assign(P, 0);
  for (size_t r = 0; r < P; ++r) {
    for (int k = 0; k < kNumBusyKinds; ++k) {
      std::vector<double> v;
      for (const auto* s : used) v.push_back(s->ranks[r].busy[k]);
      out.rank_busy[r][k] = spread_of(v).median;
    }
    for (int c = 0; c < kNumIdleCauses; ++c) {
      std::vector<double> v;
      for (const auto* s : used) v.push_back(s->ranks[r].idle[c]);
      out.rank_idle[r][c] = spread_of(v).median;
    }
    std::vector<double> v;
    for (const auto* s : used)
      v.push_back(s->step_time > 0 ? s->ranks[r].idle_total() / s->step_time : 0);
    out.rank_bubble_ratio[r] = spread_of(v).median;
  }
  return out;
}

}  // namespace tightpipe
