// GPU events: the kernel classifier, the usage metrics and the causes (gpu_trace.h).
#include <algorithm>
#include <cctype>

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

int64_t total(const Spans& s) {
  int64_t t = 0;
  for (const Span& x : s) t += x.end - x.start;
  return t;
}

// |a ∩ b| of two merged lists.
int64_t overlap(const Spans& a, const Spans& b) {
  int64_t t = 0;
  size_t j = 0;
  for (const Span& x : a) {
    while (j < b.size() && b[j].end <= x.start) ++j;
    for (size_t k = j; k < b.size() && b[k].start < x.end; ++k) {
      t += std::max<int64_t>(0, std::min(x.end, b[k].end) - std::max(x.start, b[k].start));
    }
  }
  return t;
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

// Expert-parallel all-to-all kernels that are not NCCL's: DeepEP (namespace deep_ep: dispatch,
// combine, notify_dispatch, cached_notify_combine...) and anything of NVSHMEM, which DeepEP and
// other MoE libraries move tokens with; and kernels named dispatch / combine alone.
bool is_all_to_all_kernel(std::string_view name) {
  if (contains_nocase(name, "nvshmem") || contains_nocase(name, "deep_ep") ||
      contains_nocase(name, "deepep")) {
    return true;
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
  if (is_all_to_all_kernel(name)) return GpuEventKind::kCollective;
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
    case GpuCause::kHost:
      return "host";
  }
  return "?";
}

GpuUsage gpu_usage(std::span<const GpuEvent> events) {
  GpuUsage u;
  if (events.empty()) return u;
  const std::vector<GpuEvent> v = sorted_copy(events);
  u.events = static_cast<int64_t>(v.size());
  u.start_ns = v.front().start_ns;
  u.end_ns = v.front().end_ns;
  for (const GpuEvent& e : v) u.end_ns = std::max(u.end_ns, e.end_ns);
  const Spans all = merged(v, [](const GpuEvent&) { return true; });
  const Spans compute =
      merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kCompute; });
  const Spans comm = merged(v, [](const GpuEvent& e) { return is_communication(e.kind); });
  const Spans memory = merged(v, [](const GpuEvent& e) { return is_memory(e.kind); });
  const Spans p2p = merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kP2P; });
  const Spans coll =
      merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kCollective; });
  const int64_t window = u.end_ns - u.start_ns, busy = total(all);
  u.window_s = seconds(window);
  u.busy_s = seconds(busy);
  u.idle_s = seconds(window - busy);
  u.compute_s = seconds(total(compute));
  u.communication_s = seconds(total(comm));
  u.exposed_communication_s = seconds(total(comm) - overlap(comm, compute));
  u.memory_s = seconds(total(memory));
  u.p2p_s = seconds(total(p2p));
  u.collective_s = seconds(total(coll));
  // The one bubble definition: a rank alone in its window [0, window], busy `busy`.
  RankBusy rb;
  rb.compute = static_cast<double>(busy);
  rb.end = static_cast<double>(window);
  u.bubble_ratio = step_bubble(std::vector<RankBusy>{rb}).ratio;
  return u;
}

GpuCauses gpu_causes(std::span<const GpuEvent> events, bool pipelined) {
  GpuCauses c{};
  if (events.empty()) return c;
  const std::vector<GpuEvent> v = sorted_copy(events);
  int64_t ws = v.front().start_ns, we = v.front().end_ns;
  for (const GpuEvent& e : v) we = std::max(we, e.end_ns);
  const Spans compute =
      merged(v, [](const GpuEvent& e) { return e.kind == GpuEventKind::kCompute; });
  const Spans comm = merged(v, [](const GpuEvent& e) { return is_communication(e.kind); });
  const Spans covered =
      merged(v, [](const GpuEvent& e) { return e.kind != GpuEventKind::kCompute; });
  std::vector<int64_t> p2p_ends;
  for (const GpuEvent& e : v) {
    if (e.kind == GpuEventKind::kP2P) p2p_ends.push_back(e.end_ns);
  }
  std::sort(p2p_ends.begin(), p2p_ends.end());
  auto add = [&](GpuCause cause, int64_t ns) { c[static_cast<int>(cause)] += seconds(ns); };
  auto by_coverage = [&](int64_t a, int64_t b) {
    const int64_t ex = overlap(a, b, comm), cov = overlap(a, b, covered);
    add(GpuCause::kExposedComm, ex);
    add(GpuCause::kMemory, cov - ex);
    add(GpuCause::kHost, (b - a) - cov);
  };
  // The gaps of the compute union inside the window, in order.
  int64_t t = ws;
  for (size_t k = 0; k <= compute.size(); ++k) {
    const int64_t a = t, b = k < compute.size() ? compute[k].start : we;
    if (b > a) {
      const bool first = k == 0 && !compute.empty(), last = k == compute.size() && k > 0;
      if (pipelined && first) {
        add(GpuCause::kFill, b - a);
      } else if (pipelined && last) {
        add(GpuCause::kDrain, b - a);
      } else if (pipelined && !compute.empty() &&
                 std::upper_bound(p2p_ends.begin(), p2p_ends.end(), a) !=
                     std::upper_bound(p2p_ends.begin(), p2p_ends.end(), b)) {
        add(GpuCause::kDependency, b - a);  // a P2P kernel ends in (a, b]
      } else {
        by_coverage(a, b);
      }
    }
    if (k < compute.size()) t = std::max(t, compute[k].end);
  }
  return c;
}

}  // namespace tightpipe
