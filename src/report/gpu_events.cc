// GPU events: the kernel classifier, the usage metrics and the causes (gpu_trace.h).
#include <algorithm>
#include <cctype>
#include <map>

#include "tightpipe/gpu_trace.h"
#include "tightpipe/prof.h"

namespace tightpipe {

namespace {

bool contains_nocase(std::string_view text, std::string_view what) {
  auto it = std::search(text.begin(), text.end(), what.begin(), what.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != text.end();
}

struct Span {
  int64_t start = 0, end = 0;
};
using Spans = std::vector<Span>;

// The union of the events `keep` selects, merged and sorted.
template <typename Keep>
Spans merged(std::span<const GpuEvent> sorted, Keep keep) {
  Spans out;
  for (const GpuEvent& e : sorted) {
    if (!keep(e)) continue;
    if (!out.empty() && e.start_ns <= out.back().end) {
      out.back().end = std::max(out.back().end, e.end_ns);
    } else {
      out.push_back({e.start_ns, e.end_ns});
    }
  }
  return out;
}

// |[a, b) ∩ s| of a merged list.
int64_t overlap(int64_t a, int64_t b, const Spans& s) {
  auto it =
      std::lower_bound(s.begin(), s.end(), a, [](const Span& x, int64_t t) { return x.end <= t; });
  int64_t t = 0;
  for (; it != s.end() && it->start < b; ++it) t += std::min(b, it->end) - std::max(a, it->start);
  return t;
}

std::vector<GpuEvent> sorted_copy(std::span<const GpuEvent> events) {
  std::vector<GpuEvent> v(events.begin(), events.end());
  if (!std::is_sorted(v.begin(), v.end(), [](const GpuEvent& a, const GpuEvent& b) {
        return a.start_ns < b.start_ns;
      })) {
    std::stable_sort(v.begin(), v.end(),
                     [](const GpuEvent& a, const GpuEvent& b) { return a.start_ns < b.start_ns; });
  }
  return v;
}

double seconds(int64_t ns) { return static_cast<double>(ns) * 1e-9; }

bool is_memory(GpuEventKind k) { return k == GpuEventKind::kMemcpy || k == GpuEventKind::kMemset; }

}  // namespace

std::string_view gpu_event_kind_name(GpuEventKind kind) {
  switch (kind) {
    case GpuEventKind::kCompute:
      return "compute";
    case GpuEventKind::kCollective:
      return "collective";
    case GpuEventKind::kP2P:
      return "p2p";
    case GpuEventKind::kMemcpy:
      return "memcpy";
    case GpuEventKind::kMemset:
      return "memset";
  }
  return "?";
}

bool is_communication(GpuEventKind kind) {
  return kind == GpuEventKind::kCollective || kind == GpuEventKind::kP2P;
}

namespace {

// The function a kernel name names, without "void ", namespaces, template arguments and
// parameters: "void deep_ep::internode::dispatch<8, 4>(int*, ...)" -> "dispatch".
std::string_view kernel_function(std::string_view name) {
  name = name.substr(0, std::min(name.find('<'), name.find('(')));
  if (const size_t colon = name.rfind("::"); colon != std::string_view::npos) {
    name.remove_prefix(colon + 2);
  }
  if (const size_t space = name.rfind(' '); space != std::string_view::npos) {
    name.remove_prefix(space + 1);
  }
  return name;
}

// Communication kernels that are not NCCL's: DeepEP's expert-parallel all-to-all (namespaces
// deep_ep and dpsk::ep: dispatch, combine, notify_dispatch, cached_notify...), anything of
// NVSHMEM, which DeepEP and other MoE libraries move tokens with, MSCCL's, TransformerEngine's
// userbuffers and vLLM's custom all-reduce; and kernels named dispatch / combine alone.
bool is_other_library_comm_kernel(std::string_view name) {
  for (std::string_view library : {"nvshmem", "deep_ep", "deepep", "dpsk::ep", "msccl",
                                   "userbuffers", "cross_device_reduce"}) {
    if (contains_nocase(name, library)) return true;
  }
  const std::string_view f = kernel_function(name);
  for (std::string_view w : {"dispatch", "combine"}) {
    if (f.size() >= w.size() && contains_nocase(f.substr(f.size() - w.size()), w) &&
        (f.size() == w.size() || contains_nocase(f, "notify_"))) {
      return true;
    }
  }
  return false;
}

}  // namespace

GpuEventKind classify_kernel(std::string_view name) {
  if (is_other_library_comm_kernel(name)) return GpuEventKind::kCollective;
  if (!contains_nocase(name, "nccl")) return GpuEventKind::kCompute;
  // SendRecv, Send and Recv kernels move one peer's data; every other NCCL kernel is a collective.
  if (contains_nocase(name, "sendrecv") || contains_nocase(name, "_send") ||
      contains_nocase(name, "_recv") || contains_nocase(name, "sendkernel") ||
      contains_nocase(name, "recvkernel")) {
    return GpuEventKind::kP2P;
  }
  return GpuEventKind::kCollective;
}

std::string_view gpu_cause_name(GpuCause cause) {
  switch (cause) {
    case GpuCause::kFill:
      return "fill";
    case GpuCause::kDrain:
      return "drain";
    case GpuCause::kDependency:
      return "dependency wait";
    case GpuCause::kExposedComm:
      return "exposed comm";
    case GpuCause::kMemory:
      return "memory";
    case GpuCause::kHostWait:
      return "host wait";
    case GpuCause::kOtherWait:
      return "other wait";
  }
  return "?";
}

namespace {

// One rank's GPU events as the unions every window's numbers are clipped from: built once per
// rank, then any window costs a binary search and the spans inside it. The one place busy,
// compute, communication and the causes are computed.
class RankUnions {
 public:
  explicit RankUnions(std::span<const GpuEvent> events) {
    const std::vector<GpuEvent> v = sorted_copy(events);
    if (v.empty()) return;
    extent_.start_ns = v.front().start_ns;
    extent_.end_ns = v.front().end_ns;
    for (const GpuEvent& e : v) extent_.end_ns = std::max(extent_.end_ns, e.end_ns);
    starts_.reserve(v.size());
    for (const GpuEvent& e : v) starts_.push_back(e.start_ns);
    all_ = merged(v, [](const GpuEvent&) { return true; });
    compute_ = merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kCompute; });
    comm_ = merged(v, [](const GpuEvent& e) { return is_communication(e.kind); });
    memory_ = merged(v, [](const GpuEvent& e) { return is_memory(e.kind); });
    p2p_ = merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kP2P; });
    coll_ = merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kCollective; });
    covered_ = merged(v, [](const GpuEvent& e) { return e.kind != GpuEventKind::kCompute; });
    comm_under_compute_ = intersection(comm_, compute_);
    for (const GpuEvent& e : v) {
      if (e.kind == GpuEventKind::kP2P) p2p_ends_.push_back(e.end_ns);
    }
    std::sort(p2p_ends_.begin(), p2p_ends_.end());
    // The idle gaps between the busy spans, each with its one cause: host wait when every GPU
    // event that ends the gap (starts at its end) was launched by the CPU after the gap began.
    size_t next = 0;  // the first event starting at or after the gap's end
    for (size_t k = 1; k < all_.size(); ++k) {
      const int64_t a = all_[k - 1].end, b = all_[k].start;
      while (next < v.size() && v[next].start_ns < b) ++next;
      bool late = true;
      for (size_t i = next; i < v.size() && v[i].start_ns == b; ++i) {
        late = late && v[i].launch_ns != kNoLaunch && v[i].launch_ns > a;
      }
      if (late) host_gaps_.push_back({a, b});
    }
  }

  GpuWindow extent() const { return extent_; }

  // `last_window`: the window is the last of a partition (or the whole trace): it also counts the
  // events that start at its end.
  GpuUsage usage(GpuWindow w, bool last_window) const {
    GpuUsage u;
    u.start_ns = w.start_ns;
    u.end_ns = w.end_ns;
    const int64_t a = w.start_ns, b = w.end_ns, window = b - a;
    // Events that start in [a, b), and at b in the last window (a partition of them).
    auto first = std::lower_bound(starts_.begin(), starts_.end(), a);
    auto last = last_window ? std::upper_bound(starts_.begin(), starts_.end(), b)
                            : std::lower_bound(starts_.begin(), starts_.end(), b);
    u.events = std::max<int64_t>(0, last - first);
    u.busy_ns = overlap(a, b, all_);
    const int64_t comm = overlap(a, b, comm_);
    u.window_s = seconds(window);
    u.busy_s = seconds(u.busy_ns);
    u.idle_s = seconds(window - u.busy_ns);
    u.compute_s = seconds(overlap(a, b, compute_));
    u.communication_s = seconds(comm);
    u.exposed_communication_s = seconds(comm - overlap(a, b, comm_under_compute_));
    u.memory_s = seconds(overlap(a, b, memory_));
    u.p2p_s = seconds(overlap(a, b, p2p_));
    u.collective_s = seconds(overlap(a, b, coll_));
    // The one bubble definition: a rank alone in its window [0, window], busy `busy`.
    RankBusy rb;
    rb.compute = static_cast<double>(u.busy_ns);
    rb.end = static_cast<double>(window);
    u.bubble_ratio = window > 0 ? step_bubble(std::vector<RankBusy>{rb}).ratio : 0;
    return u;
  }

  GpuCausesNs causes(GpuWindow w, bool pipelined) const {
    GpuCausesNs c{};
    if (all_.empty()) return c;
    auto add = [&](GpuCause cause, int64_t ns) { c[static_cast<int>(cause)] += ns; };
    auto by_coverage = [&](int64_t a, int64_t b) {
      const int64_t ex = overlap(a, b, comm_), cov = overlap(a, b, covered_);
      const int64_t host = overlap(a, b, host_gaps_);
      add(GpuCause::kExposedComm, ex);
      add(GpuCause::kMemory, cov - ex);
      add(GpuCause::kHostWait, host);
      add(GpuCause::kOtherWait, (b - a) - cov - host);
    };
    // The compute spans inside the window, clipped, and the gaps between them, in order.
    const int64_t ws = w.start_ns, we = w.end_ns;
    auto it = std::lower_bound(compute_.begin(), compute_.end(), ws,
                               [](const Span& x, int64_t t) { return x.end <= t; });
    Spans in;
    for (; it != compute_.end() && it->start < we; ++it) {
      in.push_back({std::max(ws, it->start), std::min(we, it->end)});
    }
    int64_t t = ws;
    for (size_t k = 0; k <= in.size(); ++k) {
      const int64_t a = t, b = k < in.size() ? in[k].start : we;
      if (b > a) {
        const bool first = k == 0 && !in.empty(), last = k == in.size() && k > 0;
        if (pipelined && first) {
          add(GpuCause::kFill, b - a);
        } else if (pipelined && last) {
          add(GpuCause::kDrain, b - a);
        } else if (pipelined && !in.empty() &&
                   std::upper_bound(p2p_ends_.begin(), p2p_ends_.end(), a) !=
                       std::upper_bound(p2p_ends_.begin(), p2p_ends_.end(), b)) {
          add(GpuCause::kDependency, b - a);  // a P2P kernel ends in (a, b]
        } else {
          by_coverage(a, b);
        }
      }
      if (k < in.size()) t = std::max(t, in[k].end);
    }
    return c;
  }

 private:
  // a ∩ b of two merged lists, merged.
  static Spans intersection(const Spans& a, const Spans& b) {
    Spans out;
    size_t j = 0;
    for (const Span& x : a) {
      while (j < b.size() && b[j].end <= x.start) ++j;
      for (size_t k = j; k < b.size() && b[k].start < x.end; ++k) {
        const int64_t s = std::max(x.start, b[k].start), e = std::min(x.end, b[k].end);
        if (e > s) out.push_back({s, e});
      }
    }
    return out;
  }

  GpuWindow extent_;
  std::vector<int64_t> starts_;  // every event's start, sorted
  Spans all_, compute_, comm_, memory_, p2p_, coll_, covered_, comm_under_compute_, host_gaps_;
  std::vector<int64_t> p2p_ends_;
};

}  // namespace

GpuCauses gpu_cause_seconds(const GpuCausesNs& ns) {
  GpuCauses c{};
  for (int k = 0; k < kNumGpuCauses; ++k) c[k] = seconds(ns[k]);
  return c;
}

std::vector<GpuStepWindow> gpu_step_windows(std::span<const GpuEvent> events) {
  std::map<int32_t, int64_t> first;  // step -> its first GPU event's start
  int64_t trace_start = INT64_MAX, trace_end = INT64_MIN;
  for (const GpuEvent& e : events) {
    trace_start = std::min(trace_start, e.start_ns);
    trace_end = std::max(trace_end, e.end_ns);
    if (e.step == kNoStep) continue;
    auto [it, fresh] = first.emplace(e.step, e.start_ns);
    if (!fresh) it->second = std::min(it->second, e.start_ns);
  }
  std::vector<GpuStepWindow> out;
  for (const auto& [step, start] : first) out.push_back({step, {start, 0}});
  std::sort(out.begin(), out.end(), [](const GpuStepWindow& a, const GpuStepWindow& b) {
    return a.window.start_ns != b.window.start_ns ? a.window.start_ns < b.window.start_ns
                                                  : a.step < b.step;
  });
  for (size_t k = 0; k < out.size(); ++k) {
    if (k == 0) out[k].window.start_ns = trace_start;
    out[k].window.end_ns = k + 1 < out.size() ? out[k + 1].window.start_ns : trace_end;
  }
  return out;
}

GpuUsage gpu_usage(std::span<const GpuEvent> events) {
  if (events.empty()) return {};
  const RankUnions u(events);
  return u.usage(u.extent(), true);
}

GpuCauses gpu_causes(std::span<const GpuEvent> events, bool pipelined) {
  if (events.empty()) return {};
  const RankUnions u(events);
  return gpu_cause_seconds(u.causes(u.extent(), pipelined));
}

GpuRankReport gpu_rank_report(const GpuTraceRank& trace, bool pipelined) {
  GpuRankReport rr;
  rr.rank = trace.rank;
  rr.path = trace.path;
  if (trace.events.empty()) return rr;
  const RankUnions unions(trace.events);
  rr.usage = unions.usage(unions.extent(), true);
  const std::vector<GpuStepWindow> windows = gpu_step_windows(trace.events);
  for (const GpuStepWindow& w : windows) {
    GpuStepReport s;
    s.step = w.step;
    s.usage = unions.usage(w.window, &w == &windows.back());
    s.causes_ns = unions.causes(w.window, pipelined);
    s.causes = gpu_cause_seconds(s.causes_ns);
    for (int c = 0; c < kNumGpuCauses; ++c) rr.causes_ns[c] += s.causes_ns[c];
    rr.steps.push_back(s);  // trivially copyable: std::move adds nothing
  }
  if (rr.steps.empty()) rr.causes_ns = unions.causes(unions.extent(), pipelined);
  rr.causes = gpu_cause_seconds(rr.causes_ns);
  std::sort(rr.steps.begin(), rr.steps.end(),
            [](const GpuStepReport& a, const GpuStepReport& b) { return a.step < b.step; });
  return rr;
}

}  // namespace tightpipe
