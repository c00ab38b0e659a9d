// Blocking helpers and the small collectives, built on any Transport's isend/irecv. Linear
// algorithms: P is a pipeline depth (a handful of ranks) and the payloads are small (a gradient
// norm, a tied embedding's gradient), so simplicity and a fixed summation order win.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/transport.h"

namespace tightpipe {
namespace {

// Reserved tags (>= kMaxUserTag): one per collective phase; consecutive calls match in order.
constexpr int kTagAllreduceScatter = kMaxUserTag + 1;
constexpr int kTagAllreduceGather = kMaxUserTag + 2;
constexpr int kTagBroadcast = kMaxUserTag + 3;
constexpr int kTagBarrierIn = kMaxUserTag + 4;
constexpr int kTagBarrierOut = kMaxUserTag + 5;

// Waits for every request, each with what is left of one shared deadline; stops at the first
// error (the remaining requests are dropped, which cancels them).
Status wait_all(std::vector<std::unique_ptr<Request>>& reqs, double deadline) {
  for (auto& r : reqs) {
    TP_RETURN_IF_ERROR(r->wait(std::max(0.0, deadline - now_seconds())));
  }
  return OkStatus();
}

std::span<const std::byte> bytes_of(std::span<const double> d) { return std::as_bytes(d); }
std::span<std::byte> bytes_of(std::span<double> d) { return std::as_writable_bytes(d); }

}  // namespace

Status send(Transport& t, int dst, int tag, std::span<const std::byte> data, double timeout_s) {
  return t.isend(dst, tag, data)->wait(timeout_s);
}

Status recv(Transport& t, int src, int tag, std::span<std::byte> data, double timeout_s) {
  return t.irecv(src, tag, data)->wait(timeout_s);
}

Status allreduce_sum(Transport& t, std::span<double> data, double timeout_s) {
  const int p = t.size();
  const int me = t.rank();
  if (p == 1) return OkStatus();
  const double deadline = now_seconds() + timeout_s;
  const size_t n = data.size();
  auto begin = [&](int c) { return n * static_cast<size_t>(c) / static_cast<size_t>(p); };
  const size_t my_begin = begin(me), my_len = begin(me + 1) - my_begin;
  auto context = [&] {
    return fmt::format("allreduce_sum of {} doubles on rank {} of {} (time-out {} s)", n, me, p,
                       timeout_s);
  };

  // 1. Reduce-scatter: rank c owns elements [begin(c), begin(c+1)) and receives them from all.
  std::vector<std::vector<double>> theirs(p);
  std::vector<std::unique_ptr<Request>> reqs;
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    theirs[q].resize(my_len);
    reqs.push_back(t.irecv(q, kTagAllreduceScatter, bytes_of(std::span<double>(theirs[q]))));
  }
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    reqs.push_back(t.isend(
        q, kTagAllreduceScatter,
        bytes_of(std::span<const double>(data.subspan(begin(q), begin(q + 1) - begin(q))))));
  }
  Status s = wait_all(reqs, deadline);
  if (!s.ok()) return s.with_context(context());
  reqs.clear();
  // Sum in rank order 0, 1, ..., P-1, whichever rank owns the chunk.
  for (size_t i = 0; i < my_len; ++i) {
    double acc = 0;
    for (int r = 0; r < p; ++r) {
      const double v = r == me ? data[my_begin + i] : theirs[r][i];
      acc = r == 0 ? v : acc + v;
    }
    data[my_begin + i] = acc;
  }

  // 2. All-gather the owners' sums: every rank copies the same bits.
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    reqs.push_back(
        t.irecv(q, kTagAllreduceGather, bytes_of(data.subspan(begin(q), begin(q + 1) - begin(q)))));
  }
  for (int q = 0; q < p; ++q) {
    if (q == me) continue;
    reqs.push_back(t.isend(q, kTagAllreduceGather,
                           bytes_of(std::span<const double>(data.subspan(my_begin, my_len)))));
  }
  s = wait_all(reqs, deadline);
  if (!s.ok()) return s.with_context(context());
  return OkStatus();
}

Status broadcast(Transport& t, int root, std::span<std::byte> data, double timeout_s) {
  TP_CHECK(root >= 0 && root < t.size(), "broadcast: root ", root, " of ", t.size());
  const double deadline = now_seconds() + timeout_s;
  std::vector<std::unique_ptr<Request>> reqs;
  if (t.rank() == root) {
    for (int q = 0; q < t.size(); ++q) {
      if (q != root) reqs.push_back(t.isend(q, kTagBroadcast, data));
    }
  } else {
    reqs.push_back(t.irecv(root, kTagBroadcast, data));
  }
  Status s = wait_all(reqs, deadline);
  if (!s.ok()) {
    return s.with_context(fmt::format("broadcast of {} bytes from rank {} (time-out {} s)",
                                      data.size(), root, timeout_s));
  }
  return OkStatus();
}

Status barrier(Transport& t, double timeout_s) {
  const double deadline = now_seconds() + timeout_s;
  std::vector<std::unique_ptr<Request>> reqs;
  if (t.rank() == 0) {
    for (int q = 1; q < t.size(); ++q) reqs.push_back(t.irecv(q, kTagBarrierIn, {}));
  } else {
    reqs.push_back(t.isend(0, kTagBarrierIn, {}));
  }
  Status s = wait_all(reqs, deadline);
  reqs.clear();
  if (s.ok()) {
    if (t.rank() == 0) {
      for (int q = 1; q < t.size(); ++q) reqs.push_back(t.isend(q, kTagBarrierOut, {}));
    } else {
      reqs.push_back(t.irecv(0, kTagBarrierOut, {}));
    }
    s = wait_all(reqs, deadline);
  }
  if (!s.ok()) {
    return s.with_context(
        fmt::format("barrier on rank {} of {} (time-out {} s)", t.rank(), t.size(), timeout_s));
  }
  return OkStatus();
}

}  // namespace tightpipe
