// Per rank and step: busy time by kind, idle time by cause (report.h, docs/report.md).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "tightpipe/base.h"
#include "tightpipe/prof.h"
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
    case IdleCause::kCpuWait:
      return "cpu wait";
    case IdleCause::kExposedAllReduce:
      return "exposed all-reduce";
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
    case IdleCause::kCpuWait:
      return "#c2185b";
    case IdleCause::kExposedAllReduce:
      return "#17becf";
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

bool covered(const std::vector<Interval>& v, double t) {
  for (const Interval& i : v)
    if (i.start <= t && t < i.end) return true;
  return false;
}

// When each message of the step was posted (the earliest SEND start of its key).
std::map<MsgKey, double> send_starts(const Timeline& timeline, int32_t num_ranks) {
  std::map<MsgKey, double> out;
  for (const RankTimeline& rt : timeline.ranks) {
    if (rt.rank < 0 || rt.rank >= num_ranks) continue;
    for (const TimelineEvent& e : rt.events) {
      if (e.kind != EventKind::kSend) continue;
      auto a = parse_action(e.name);
      if (!a.ok()) continue;
      const MsgKey k{a->type == ActionType::kSendGrad, a->stage, a->microbatch};
      auto it = out.find(k);
      if (it == out.end() || e.start < it->second) out[k] = e.start;
    }
  }
  return out;
}

// Classifies one rank's idle time: the gaps between its busy intervals (prof.h busy_intervals,
// the complement step_bubble counts), each instant one cause (report.h).
class GapClassifier {
 public:
  GapClassifier(const RankTimeline& rt, const std::map<MsgKey, double>& send_start,
                const BreakdownOptions& options, RankBreakdown& rb)
      : send_start_(send_start), overlap_(options.overlap_p2p), rb_(rb) {
    for (const TimelineEvent& e : rt.events) {
      const int bi = busy_index(e.kind);
      if (bi >= 0) starts_.push_back(&e);
      if (bi >= 0 && bi < 4) {
        computes_.push_back(&e);
        rb.busy[bi] += e.end - e.start;
      } else if (e.kind == EventKind::kData) {
        data_.push_back({e.start, e.end});
      } else if (e.kind == EventKind::kSend) {
        sends_.push_back({e.start, e.end});
      } else if (e.kind == EventKind::kAllReduce) {
        allreduce_.push_back({e.start, e.end});
      } else if (e.kind == EventKind::kRecv) {
        auto a = parse_action(e.name);
        if (a.ok()) recv_end_[{a->type == ActionType::kRecvGrad, a->stage, a->microbatch}] = e.end;
      }
    }
    auto by_start = [](const TimelineEvent* x, const TimelineEvent* y) {
      return x->start < y->start;
    };
    std::sort(computes_.begin(), computes_.end(), by_start);
    std::sort(starts_.begin(), starts_.end(), by_start);
    rb.first_compute = computes_.empty() ? 0 : computes_.front()->start;
    rb.last_compute = 0;
    for (const auto* c : computes_) rb.last_compute = std::max(rb.last_compute, c->end);
    for (const TimelineEvent& e : rt.events)
      if (e.kind == EventKind::kOptimizer) optimizer_start_ = std::min(optimizer_start_, e.start);
  }

  // Splits [a, b): the core wait reported by the busy event starting at b comes last (a woken
  // rank waits for a core just before it runs), the rest by the rules of report.h.
  void classify(double a, double b) {
    if (b <= a) return;
    const TimelineEvent* next = event_starting_at(b);
    const double cpu = next ? std::clamp(next->cpu_wait, 0.0, b - a) : 0.0;
    if (cpu > 0) rb_.idle[static_cast<int>(IdleCause::kCpuWait)] += cpu;
    classify_rest(a, b - cpu, b);
  }

 private:
  const TimelineEvent* event_starting_at(double t) const {
    auto it = std::lower_bound(starts_.begin(), starts_.end(), t,
                               [](const TimelineEvent* c, double x) { return c->start < x; });
    return it == starts_.end() || (*it)->start != t ? nullptr : *it;
  }

  // The message the compute starting at `t` waited for: (posted, arrived); posted < 0 when the
  // peer's SEND is unknown.
  bool message_of(double t, double& posted, double& arrived) const {
    const TimelineEvent* c = event_starting_at(t);
    if (!c || cost_slot(c->kind) < 0) return false;
    auto action = parse_action(c->name);
    if (!action.ok()) return false;
    const std::optional<MessageEnds> in = message_ends(*action, MessageEnd::kIn);
    if (!in) return false;  // W consumes no message
    const bool grad = in->gradient;
    auto r = recv_end_.find({grad, c->stage, c->microbatch});
    if (r == recv_end_.end()) return false;
    arrived = r->second;
    auto s = send_start_.find({grad, in->other_stage, c->microbatch});
    posted = s == send_start_.end() ? -1 : s->second;
    return true;
  }

  IdleCause cause_at(double m, bool msg, double posted, double arrived) const {
    if (covered(data_, m)) return IdleCause::kData;
    if (!overlap_ && covered(sends_, m)) return IdleCause::kExposedComm;
    if (msg && posted >= 0 && posted <= m && m < arrived) return IdleCause::kExposedComm;
    // The optimizer waits on the data-parallel reduction (prof.h exposed_allreduce).
    if (m >= rb_.last_compute && m < optimizer_start_ && covered(allreduce_, m))
      return IdleCause::kExposedAllReduce;
    if (computes_.empty() || m >= rb_.last_compute) return IdleCause::kDrain;
    if (m < rb_.first_compute) return IdleCause::kFill;
    if (msg && posted >= 0 && m < posted) return IdleCause::kDependency;
    return IdleCause::kOther;
  }

  // [a, b) of the gap that ends at `gap_end` (where the waiting compute starts).
  void classify_rest(double a, double b, double gap_end) {
    if (b <= a) return;
    double posted = -1, arrived = -1;
    const bool msg = message_of(gap_end, posted, arrived);
    std::vector<double> cuts = {a, b, rb_.first_compute, rb_.last_compute};
    if (msg) {
      cuts.push_back(arrived);
      if (posted >= 0) cuts.push_back(posted);
    }
    for (const auto& iv : data_) cuts.insert(cuts.end(), {iv.start, iv.end});
    for (const auto& iv : allreduce_) cuts.insert(cuts.end(), {iv.start, iv.end});
    if (std::isfinite(optimizer_start_)) cuts.push_back(optimizer_start_);
    if (!overlap_)
      for (const auto& iv : sends_) cuts.insert(cuts.end(), {iv.start, iv.end});
    std::sort(cuts.begin(), cuts.end());
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const double x = std::max(a, cuts[k]), y = std::min(b, cuts[k + 1]);
      if (y <= x) continue;
      rb_.idle[static_cast<int>(cause_at(0.5 * (x + y), msg, posted, arrived))] += y - x;
    }
  }

  const std::map<MsgKey, double>& send_start_;
  const bool overlap_;
  RankBreakdown& rb_;
  std::vector<const TimelineEvent*> computes_;  // F, I, W, B by start
  std::vector<const TimelineEvent*> starts_;    // every busy event (optimizer too) by start
  std::vector<Interval> data_, sends_, allreduce_;
  double optimizer_start_ = std::numeric_limits<double>::infinity();  // none: never
  std::map<MsgKey, double> recv_end_;
};

}  // namespace

StepBreakdown breakdown_step(const Timeline& timeline, int32_t num_ranks, int32_t step,
                             const BreakdownOptions& options) {
  StepBreakdown out;
  out.step = step;
  out.ranks.resize(std::max(0, num_ranks));
  // The ranks in rank order (absent ones empty): the one bubble definition (prof.h).
  Timeline ordered;
  ordered.ranks.resize(out.ranks.size());
  for (int32_t r = 0; r < num_ranks; ++r) {
    out.ranks[r].rank = r;
    ordered.ranks[r].rank = r;
  }
  for (const RankTimeline& rt : timeline.ranks) {
    if (rt.rank < 0 || rt.rank >= num_ranks) continue;
    auto& ev = ordered.ranks[rt.rank].events;
    ev.insert(ev.end(), rt.events.begin(), rt.events.end());
  }
  out.bubble = step_bubble(ordered);
  out.span = span_bubble(ordered);
  out.step_time = out.bubble.window;
  out.bubble_ratio = out.bubble.ratio;
  const std::map<MsgKey, double> send_start = send_starts(ordered, num_ranks);
  for (int32_t r = 0; r < num_ranks; ++r) {
    const RankTimeline& rt = ordered.ranks[r];
    RankBreakdown& rb = out.ranks[r];
    rb.present = !rt.events.empty();
    if (!rb.present) continue;
    rb.busy[4] = out.bubble.optimizer[r];
    GapClassifier gaps(rt, send_start, options, rb);
    double t = 0;
    for (const Interval& iv : busy_intervals(rt.events, out.bubble.sync)) {
      if (iv.start > t) gaps.classify(t, std::min(iv.start, out.step_time));
      t = std::max(t, iv.end);
    }
    if (out.step_time > t) gaps.classify(t, out.step_time);
  }
  const double denom = out.bubble.ranks_present * out.step_time;
  for (const RankBreakdown& rb : out.ranks) {
    if (!rb.present) continue;
    for (int c = 0; c < kNumIdleCauses; ++c) out.cause_ratio[c] += rb.idle[c];
  }
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
  s.median = median(v);  // base.h's median: the same number summaries elsewhere report
  s.p10 = q(0.1);
  s.p90 = q(0.9);
  s.min = v.front();
  s.max = v.back();
  return s;
}

BreakdownSummary summarize_steps(const std::vector<StepBreakdown>& steps, int64_t warmup) {
  BreakdownSummary out;
  const StepRange range = measured_step_range(steps.size(), warmup);
  std::vector<const StepBreakdown*> used;
  std::vector<StepBubble> bubbles;
  std::vector<SpanBubble> spans;
  for (size_t k = 0; k < steps.size(); ++k) {
    if (k < range.first) {
      out.warmup_steps.push_back(steps[k].step);
    } else {
      used.push_back(&steps[k]);
      bubbles.push_back(steps[k].bubble);
      spans.push_back(steps[k].span);
      out.steps.push_back(steps[k].step);
    }
  }
  if (used.empty()) return out;
  const size_t P = used.front()->ranks.size();
  std::vector<double> st, br, ms, sb;
  std::array<std::vector<double>, kNumIdleCauses> cr;
  for (const auto* s : used) {
    st.push_back(s->step_time);
    br.push_back(s->bubble_ratio);
    ms.push_back(s->span.max_span);
    sb.push_back(s->span.ratio);
    for (int c = 0; c < kNumIdleCauses; ++c) cr[c].push_back(s->cause_ratio[c]);
  }
  out.step_time = spread_of(st);
  out.bubble_ratio = spread_of(br);
  const BubbleSummary bubble = summarize_bubbles(bubbles);  // the one definition (prof.h)
  out.bubble_ratio.median = bubble.ratio;
  out.rank_bubble_ratio = bubble.rank_ratio;
  out.max_span = spread_of(ms);
  out.span_bubble_ratio = spread_of(sb);
  const BubbleSummary span = summarize_span_bubbles(spans);  // prof.h, the span measure
  out.span_bubble_ratio.median = span.ratio;
  out.rank_span_bubble_ratio = span.rank_ratio;
  for (int c = 0; c < kNumIdleCauses; ++c) out.cause_ratio[c] = spread_of(cr[c]);
  out.rank_busy.assign(P, {});
  out.rank_idle.assign(P, {});
  for (size_t r = 0; r < P; ++r) {
    for (int k = 0; k < kNumBusyKinds; ++k) {
      std::vector<double> v;
      for (const auto* s : used) v.push_back(s->ranks[r].busy[k]);
      out.rank_busy[r][k] = median(v);
    }
    for (int c = 0; c < kNumIdleCauses; ++c) {
      std::vector<double> v;
      for (const auto* s : used) v.push_back(s->ranks[r].idle[c]);
      out.rank_idle[r][c] = median(v);
    }
  }
  return out;
}

}  // namespace tightpipe
