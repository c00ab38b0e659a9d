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
constexpr int kTagIallreduceBase = kMaxUserTag + 64;  // + [0, 2^17): Transport::iallreduce_sum
static_assert(kTagIallreduceBase + (2 << 16) <= kMaxTag);

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

namespace {

// The deterministic allreduce as a request: reduce-scatter (rank c owns elements
// [begin(c), begin(c+1)) and receives them from every rank), the owner sums in rank order, then
// all-gather of the owners' sums, so every rank copies the same bits. Phase 1 is posted by the
// constructor; wait/test sum and post phase 2 once phase 1 is complete. Its messages go under
// `tag_scatter` and `tag_gather`, distinct for requests that may be in flight together.
class P2pAllreduce final : public Request {
 public:
  P2pAllreduce(Transport& t, std::span<double> data, int tag_scatter, int tag_gather)
      : t_(t), data_(data), p_(t.size()), me_(t.rank()), tag_gather_(tag_gather) {
    if (p_ == 1) {
      done_ = true;
      return;
    }
    const size_t my_len = len(me_);
    theirs_.resize(p_);
    for (int q = 0; q < p_; ++q) {
      if (q == me_) continue;
      theirs_[q].resize(my_len);
      reqs_.push_back(t_.irecv(q, tag_scatter, bytes_of(std::span<double>(theirs_[q]))));
    }
    for (int q = 0; q < p_; ++q) {
      if (q == me_) continue;
      reqs_.push_back(t_.isend(q, tag_scatter,
                               bytes_of(std::span<const double>(data_.subspan(begin(q), len(q))))));
    }
  }

  Status wait(double timeout_s) override {
    const double deadline = now_seconds() + std::max(0.0, timeout_s);
    timeout_s_ = timeout_s;
    while (!done_) {
      if (next_ < reqs_.size()) {
        Status s = reqs_[next_]->wait(std::max(0.0, deadline - now_seconds()));
        if (s.code() == StatusCode::kDeadlineExceeded) return with_context(s);  // still pending
        if (!fail(s)) return status_;
        ++next_;
        continue;
      }
      advance();
    }
    return status_;
  }

  Result<bool> test() override {
    timeout_s_ = -1;
    while (!done_) {
      if (next_ < reqs_.size()) {
        Result<bool> r = reqs_[next_]->test();
        if (!r.ok()) {
          fail(r.status());
          return status_;
        }
        if (!*r) return false;
        ++next_;
        continue;
      }
      advance();
    }
    if (!status_.ok()) return status_;
    return true;
  }

 private:
  size_t begin(int c) const {
    return data_.size() * static_cast<size_t>(c) / static_cast<size_t>(p_);
  }
  size_t len(int c) const { return begin(c + 1) - begin(c); }

  Status with_context(const Status& s) const {
    return s.with_context(
        fmt::format("allreduce_sum of {} doubles on rank {} of {}{}", data_.size(), me_, p_,
                    timeout_s_ >= 0 ? fmt::format(" (time-out {} s)", timeout_s_) : std::string()));
  }
  // Records a non-OK status as final (the remaining requests are dropped, which cancels them);
  // true when `s` is OK.
  bool fail(const Status& s) {
    if (s.ok()) return true;
    status_ = with_context(s);
    done_ = true;
    reqs_.clear();
    return false;
  }
  // Every posted request is complete: sum (after phase 1) and post phase 2, or finish.
  void advance() {
    reqs_.clear();
    next_ = 0;
    if (gathering_) {
      done_ = true;
      status_ = OkStatus();
      return;
    }
    // Sum in rank order 0, 1, ..., P-1, whichever rank owns the chunk.
    const size_t my_begin = begin(me_), my_len = len(me_);
    for (size_t i = 0; i < my_len; ++i) {
      double acc = 0;
      for (int r = 0; r < p_; ++r) {
        const double v = r == me_ ? data_[my_begin + i] : theirs_[r][i];
        acc = r == 0 ? v : acc + v;
      }
      data_[my_begin + i] = acc;
    }
    theirs_.clear();
    gathering_ = true;
    for (int q = 0; q < p_; ++q) {
      if (q == me_) continue;
      reqs_.push_back(t_.irecv(q, tag_gather_, bytes_of(data_.subspan(begin(q), len(q)))));
    }
    for (int q = 0; q < p_; ++q) {
      if (q == me_) continue;
      reqs_.push_back(t_.isend(q, tag_gather_,
                               bytes_of(std::span<const double>(data_.subspan(my_begin, my_len)))));
    }
  }

  Transport& t_;
  std::span<double> data_;
  const int p_, me_, tag_gather_;
  std::vector<std::vector<double>> theirs_;     // [rank]: its values of my chunk (phase 1)
  std::vector<std::unique_ptr<Request>> reqs_;  // the phase's requests, waited in order
  size_t next_ = 0;                             // reqs_[0, next_) are complete
  bool gathering_ = false;                      // phase 2 posted
  bool done_ = false;
  Status status_;
  double timeout_s_ = -1;  // of the last wait, for messages (-1: test)
};

}  // namespace

Status allreduce_sum(Transport& t, std::span<double> data, double timeout_s) {
  return P2pAllreduce(t, data, kTagAllreduceScatter, kTagAllreduceGather).wait(timeout_s);
}

std::unique_ptr<Request> Transport::iallreduce_sum(std::span<double> data) {
  // Two tags per call, numbered alike on every rank (same calls, same order); 2^16 calls may be
  // in flight before a tag comes round again.
  const uint32_t call = iallreduce_calls_.fetch_add(1) % (1u << 16);
  const int tag = kTagIallreduceBase + 2 * static_cast<int>(call);
  return std::make_unique<P2pAllreduce>(*this, data, tag, tag + 1);
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
