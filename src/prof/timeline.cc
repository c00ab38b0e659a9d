// Timeline names and statistics (prof.h, timeline.h).
#include "tightpipe/timeline.h"

#include <algorithm>
#include <limits>

#include "tightpipe/prof.h"

namespace tightpipe {

std::string lane_name(Lane lane) {
  switch (lane) {
    case Lane::kCompute:
      return "compute";
    case Lane::kComm:
      return "comm";
    case Lane::kData:
      return "data";
    case Lane::kAllReduce:
      return "allreduce";
  }
  return "lane";
}

std::string event_kind_name(EventKind kind) {
  switch (kind) {
    case EventKind::kForward:
      return "F";
    case EventKind::kBackwardInput:
      return "I";
    case EventKind::kBackwardWeight:
      return "W";
    case EventKind::kBackward:
      return "B";
    case EventKind::kSend:
      return "SEND";
    case EventKind::kRecv:
      return "RECV";
    case EventKind::kData:
      return "data";
    case EventKind::kOptimizer:
      return "optimizer";
    case EventKind::kAllReduce:
      return "allreduce";
    case EventKind::kOther:
      return "other";
  }
  return "other";
}

int cost_slot(EventKind kind) {
  switch (kind) {
    case EventKind::kForward:
      return 0;
    case EventKind::kBackwardInput:
      return 1;
    case EventKind::kBackwardWeight:
      return 2;
    case EventKind::kBackward:
      return 3;
    case EventKind::kSend:
    case EventKind::kRecv:
    case EventKind::kData:
    case EventKind::kOptimizer:
    case EventKind::kAllReduce:
    case EventKind::kOther:
      return -1;
  }
  return -1;
}

bool is_compute_kind(EventKind kind) {
  switch (kind) {
    case EventKind::kForward:
    case EventKind::kBackwardInput:
    case EventKind::kBackwardWeight:
    case EventKind::kBackward:
    case EventKind::kOptimizer:
      return true;
    case EventKind::kSend:
    case EventKind::kRecv:
    case EventKind::kData:
    case EventKind::kAllReduce:
    case EventKind::kOther:
      return false;
  }
  return false;
}

TimelineStats timeline_stats(const Timeline& timeline) {
  TimelineStats out;
  const StepBubble bubble = step_bubble(timeline);
  out.makespan = bubble.window;
  out.total_busy = bubble.total_busy;
  out.bubble_ratio = bubble.ratio;
  out.ranks.reserve(timeline.ranks.size());
  for (size_t k = 0; k < timeline.ranks.size(); ++k) {
    const RankTimeline& rt = timeline.ranks[k];
    RankTimelineStats st;
    st.rank = rt.rank;
    st.busy = bubble.busy[k];
    st.idle = bubble.idle[k];
    double first = std::numeric_limits<double>::infinity();
    double last = -std::numeric_limits<double>::infinity();
    for (const TimelineEvent& e : rt.events) {
      if (is_compute_kind(e.kind)) {
        ++st.compute_events;
        first = std::min(first, e.start);
        last = std::max(last, e.end);
      } else if (e.kind == EventKind::kSend || e.kind == EventKind::kRecv) {
        st.comm += e.end - e.start;
        if (e.kind == EventKind::kSend) {
          ++st.messages_sent;
          st.bytes_sent += e.bytes;
        }
      }
    }
    if (st.compute_events > 0) {
      st.first_start = first;
      st.last_end = last;
      st.internal_idle = last - first - st.busy;
    }
    out.ranks.push_back(st);
  }
  return out;
}

}  // namespace tightpipe
