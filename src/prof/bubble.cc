// The one definition of the bubble (prof.h, docs/bubble.md).
#include <algorithm>
#include <limits>

#include "tightpipe/base.h"
#include "tightpipe/prof.h"

namespace tightpipe {

namespace {

bool is_action_kind(EventKind k) { return cost_slot(k) >= 0; }  // F, I, W, B

double optimizer_busy(const RankBusy& r, double sync) {
  if (r.optimizer_start < 0) return 0;
  return std::max(0.0, r.optimizer_end - std::max(r.optimizer_start, sync));
}

}  // namespace

void BusyUnion::add(double start, double end) {
  if (end <= start) return;
  if (open_ && start <= cur_end_) {
    cur_end_ = std::max(cur_end_, end);
    return;
  }
  if (open_) closed_ += cur_end_ - cur_start_;
  cur_start_ = start;
  cur_end_ = end;
  open_ = true;
}

double BusyUnion::total() const { return open_ ? closed_ + (cur_end_ - cur_start_) : closed_; }

RankBusy rank_busy(const std::vector<TimelineEvent>& events) {
  RankBusy r;
  r.present = !events.empty();
  BusyUnion u;
  for (const TimelineEvent& e : events) {
    r.end = std::max(r.end, e.end);
    if (is_action_kind(e.kind)) {
      u.add(e.start, e.end);
    } else if (e.kind == EventKind::kOptimizer) {
      r.optimizer_start = r.optimizer_start < 0 ? e.start : std::min(r.optimizer_start, e.start);
      r.optimizer_end = std::max(r.optimizer_end, e.end);
    }
  }
  r.compute = u.total();
  return r;
}

double StepBubble::rank_ratio(size_t r) const {
  return window > 0 && r < idle.size() ? idle[r] / window : 0;
}

StepBubble step_bubble(const std::vector<RankBusy>& ranks) {
  StepBubble b;
  for (const RankBusy& r : ranks) {
    if (!r.present) continue;
    b.window = std::max(b.window, r.end);
    if (r.optimizer_start >= 0) b.sync = std::max(b.sync, r.optimizer_start);
  }
  b.busy.assign(ranks.size(), 0);
  b.idle.assign(ranks.size(), 0);
  b.optimizer.assign(ranks.size(), 0);
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (!ranks[k].present) continue;
    ++b.ranks_present;
    b.optimizer[k] = optimizer_busy(ranks[k], b.sync);
    b.busy[k] = ranks[k].compute + b.optimizer[k];
    b.idle[k] = b.window - b.busy[k];
    b.total_busy += b.busy[k];
    b.total_idle += b.idle[k];
  }
  const double denom = b.ranks_present * b.window;
  b.ratio = denom > 0 ? b.total_idle / denom : 0;
  return b;
}

StepBubble step_bubble(const Timeline& step) {
  std::vector<RankBusy> r;
  r.reserve(step.ranks.size());
  for (const RankTimeline& rt : step.ranks) r.push_back(rank_busy(rt.events));
  return step_bubble(r);
}

std::vector<Interval> busy_intervals(const std::vector<TimelineEvent>& events, double sync) {
  std::vector<Interval> iv;
  for (const TimelineEvent& e : events) {
    if (is_action_kind(e.kind)) {
      iv.push_back({e.start, e.end});
    } else if (e.kind == EventKind::kOptimizer) {
      iv.push_back({std::max(e.start, sync), e.end});
    }
  }
  std::sort(iv.begin(), iv.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  std::vector<Interval> merged;
  for (const Interval& i : iv) {
    if (i.end <= i.start) continue;
    if (!merged.empty() && i.start <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, i.end);
    } else {
      merged.push_back(i);
    }
  }
  return merged;
}

double exposed_allreduce(const std::vector<TimelineEvent>& events) {
  double last_compute = 0, opt_start = std::numeric_limits<double>::infinity();
  std::vector<Interval> ar;
  for (const TimelineEvent& e : events) {
    if (is_action_kind(e.kind)) last_compute = std::max(last_compute, e.end);
    if (e.kind == EventKind::kOptimizer) opt_start = std::min(opt_start, e.start);
    if (e.kind == EventKind::kAllReduce) ar.push_back({e.start, e.end});
  }
  std::sort(ar.begin(), ar.end(),
            [](const Interval& a, const Interval& b) { return a.start < b.start; });
  BusyUnion u;
  for (const Interval& i : ar) u.add(std::max(i.start, last_compute), std::min(i.end, opt_start));
  return u.total();
}

RankSpan rank_span(const std::vector<TimelineEvent>& events) {
  RankSpan r;
  BusyUnion u;
  for (const TimelineEvent& e : events) {
    if (!is_action_kind(e.kind)) continue;
    r.first_start = r.present ? std::min(r.first_start, e.start) : e.start;
    r.last_end = r.present ? std::max(r.last_end, e.end) : e.end;
    r.present = true;
    u.add(e.start, e.end);
  }
  r.compute = u.total();
  return r;
}

double SpanBubble::rank_ratio(size_t r) const {
  if (max_span <= 0 || r >= present.size() || !present[r]) return 0;
  return (max_span - compute[r]) / max_span;
}

SpanBubble span_bubble(const std::vector<RankSpan>& ranks) {
  SpanBubble b;
  b.present.assign(ranks.size(), false);
  b.span.assign(ranks.size(), 0);
  b.compute.assign(ranks.size(), 0);
  for (size_t k = 0; k < ranks.size(); ++k) {
    if (!ranks[k].present) continue;
    b.present[k] = true;
    ++b.ranks_present;
    b.span[k] = ranks[k].last_end - ranks[k].first_start;
    b.compute[k] = ranks[k].compute;
    b.max_span = std::max(b.max_span, b.span[k]);
    b.total_compute += b.compute[k];
  }
  const double denom = b.ranks_present * b.max_span;
  b.ratio = denom > 0 ? std::max(0.0, 1.0 - b.total_compute / denom) : 0;
  // Summing many durations leaves rounding residue; a bubble below 1e-12 is none.
  if (b.ratio <= 1e-12) b.ratio = 0;
  return b;
}

SpanBubble span_bubble(const Timeline& step) {
  std::vector<RankSpan> r;
  r.reserve(step.ranks.size());
  for (const RankTimeline& rt : step.ranks) r.push_back(rank_span(rt.events));
  return span_bubble(r);
}

StepRange measured_step_range(size_t n, int64_t warmup) {
  if (n == 0) return {0, 0};
  const size_t w = static_cast<size_t>(std::max<int64_t>(0, warmup));
  return {n > w ? w : n - 1, n};
}

namespace {

// The medians over steps of the step ratios and of each rank's ratio (StepBubble, SpanBubble).
template <typename Step>
BubbleSummary summarize(const std::vector<Step>& steps, size_t ranks) {
  BubbleSummary s;
  if (steps.empty()) return s;
  std::vector<double> ratios;
  for (const Step& b : steps) ratios.push_back(b.ratio);
  s.ratio = median(ratios);
  for (size_t r = 0; r < ranks; ++r) {
    std::vector<double> v;
    for (const Step& b : steps) v.push_back(b.rank_ratio(r));
    s.rank_ratio.push_back(median(v));
  }
  return s;
}

}  // namespace

BubbleSummary summarize_span_bubbles(const std::vector<SpanBubble>& steps) {
  return summarize(steps, steps.empty() ? 0 : steps.front().span.size());
}

BubbleSummary summarize_bubbles(const std::vector<StepBubble>& steps) {
  return summarize(steps, steps.empty() ? 0 : steps.front().idle.size());
}

}  // namespace tightpipe
