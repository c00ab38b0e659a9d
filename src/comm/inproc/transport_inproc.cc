// In-process backend: the ranks are threads of one process. Each destination rank owns a mailbox
// keyed by (source, tag) holding either unmatched sends or posted receives, in posting order.
// Small sends are copied and complete at once; large ones wait for their receive (rendezvous),
// whose poster copies straight from the sender's buffer. Waiters sleep on one condition variable
// per rank; nothing spins. One mutex guards the world; the bulk copy runs outside it.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "comm/op_info.h"
#include "comm/world_internal.h"
#include "tightpipe/transport.h"

namespace tightpipe {
namespace comm_internal {
namespace {

struct Op {
  OpInfo info;
  const std::byte* send_data = nullptr;
  std::byte* recv_data = nullptr;
  std::vector<std::byte> eager;  // a small send's bytes, copied at post time
  bool has_eager = false;
  bool in_queue = false;  // waiting in a mailbox
  bool matched = false;   // taken out of the mailbox; the copy may still be running
  bool done = false;
  Status status;
};

struct Queue {
  std::deque<std::shared_ptr<Op>> sends;  // unmatched sends, posting order
  std::deque<std::shared_ptr<Op>> recvs;  // posted receives, posting order
};

struct World {
  World(int size, InProcOptions options)
      : size(size), options(options), cvs(size), mailboxes(size) {}

  const int size;
  const InProcOptions options;
  std::mutex mu;
  std::vector<std::condition_variable> cvs;                     // [rank]: waiters of its requests
  std::vector<std::map<std::pair<int, int>, Queue>> mailboxes;  // [dst][(src, tag)]
  std::optional<Status> aborted;

  // REQUIRES: mu held.
  void complete(Op& op, Status status) {
    op.done = true;
    op.status = std::move(status);
    cvs[op.info.rank].notify_all();
  }

  // Copies send -> recv and completes both. REQUIRES: lk holds mu; both are out of the queues.
  void match(std::unique_lock<std::mutex>& lk, const std::shared_ptr<Op>& send,
             const std::shared_ptr<Op>& recv) {
    send->matched = recv->matched = true;
    const size_t n = send->info.bytes;
    const bool same_size = n == recv->info.bytes;
    const std::byte* from = send->has_eager ? send->eager.data() : send->send_data;
    lk.unlock();
    if (same_size && n > 0) std::memcpy(recv->recv_data, from, n);
    lk.lock();
    if (!send->done) complete(*send, OkStatus());
    complete(*recv, same_size ? OkStatus() : recv->info.size_mismatch(n));
  }

  // Removes a pending op from its mailbox (the request was dropped). REQUIRES: mu held.
  void unqueue(const std::shared_ptr<Op>& op) {
    const int dst = op->info.is_send ? op->info.peer : op->info.rank;
    const int src = op->info.is_send ? op->info.rank : op->info.peer;
    auto it = mailboxes[dst].find({src, op->info.tag});
    if (it == mailboxes[dst].end()) return;
    auto& dq = op->info.is_send ? it->second.sends : it->second.recvs;
    for (auto q = dq.begin(); q != dq.end(); ++q) {
      if (*q == op) {
        dq.erase(q);
        break;
      }
    }
    if (it->second.sends.empty() && it->second.recvs.empty()) mailboxes[dst].erase(it);
    op->in_queue = false;
  }
};

class InProcRequest final : public Request {
 public:
  InProcRequest(std::shared_ptr<World> world, std::shared_ptr<Op> op)
      : world_(std::move(world)), op_(std::move(op)) {}

  ~InProcRequest() override {
    std::unique_lock lk(world_->mu);
    // A completed eager send stays queued: its copied bytes still reach the receiver.
    if (op_->in_queue && !op_->done) world_->unqueue(op_);
    // A matched op's copy touches the user's buffer: let it finish before the buffer may go.
    world_->cvs[op_->info.rank].wait(lk, [&] { return !op_->matched || op_->done; });
  }

  Status wait(double timeout_s) override {
    std::unique_lock lk(world_->mu);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, timeout_s));
    auto& cv = world_->cvs[op_->info.rank];
    for (;;) {
      if (op_->done) return op_->status;
      if (world_->aborted && !op_->matched) return op_->info.with_op(*world_->aborted);
      if (cv.wait_until(lk, deadline) == std::cv_status::timeout) {
        if (op_->done) return op_->status;
        if (world_->aborted && !op_->matched) return op_->info.with_op(*world_->aborted);
        if (!op_->matched) return op_->info.timeout_error(timeout_s);
        // Matched: the copy is running; it finishes in bounded time, wait for it.
        cv.wait(lk, [&] { return op_->done; });
        return op_->status;
      }
    }
  }

  Result<bool> test() override {
    std::lock_guard lk(world_->mu);
    if (op_->done) {
      if (!op_->status.ok()) return op_->status;
      return true;
    }
    if (world_->aborted && !op_->matched) return op_->info.with_op(*world_->aborted);
    return false;
  }

 private:
  std::shared_ptr<World> world_;
  std::shared_ptr<Op> op_;
};

class InProcTransport final : public Transport {
 public:
  InProcTransport(std::shared_ptr<World> world, int rank) : world_(std::move(world)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size; }
  std::string name() const override { return "threads"; }

  std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) override {
    check_peer_and_tag("isend", rank_, world_->size, dst, tag);
    auto op = std::make_shared<Op>();
    op->info = {true, rank_, dst, tag, data.size(), {}};
    op->send_data = data.data();
    std::unique_lock lk(world_->mu);
    if (world_->aborted) {
      world_->complete(*op, op->info.with_op(*world_->aborted));
    } else {
      auto& box = world_->mailboxes[dst];
      auto it = box.try_emplace({rank_, tag}).first;
      if (!it->second.recvs.empty()) {
        std::shared_ptr<Op> recv = std::move(it->second.recvs.front());
        it->second.recvs.pop_front();
        recv->in_queue = false;
        if (it->second.sends.empty() && it->second.recvs.empty()) box.erase(it);
        world_->match(lk, op, recv);
      } else {
        if (data.size() <= world_->options.eager_limit_bytes) {
          op->eager.assign(data.begin(), data.end());
          op->has_eager = true;
          world_->complete(*op, OkStatus());
        }
        op->in_queue = true;
        it->second.sends.push_back(op);
      }
    }
    return std::make_unique<InProcRequest>(world_, std::move(op));
  }

  std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) override {
    check_peer_and_tag("irecv", rank_, world_->size, src, tag);
    auto op = std::make_shared<Op>();
    op->info = {false, rank_, src, tag, data.size(), {}};
    op->recv_data = data.data();
    std::unique_lock lk(world_->mu);
    auto& box = world_->mailboxes[rank_];
    auto it = box.try_emplace({src, tag}).first;
    if (!it->second.sends.empty()) {
      // A message already here is delivered even after an abort (it was sent before).
      std::shared_ptr<Op> send = std::move(it->second.sends.front());
      it->second.sends.pop_front();
      send->in_queue = false;
      if (it->second.sends.empty() && it->second.recvs.empty()) box.erase(it);
      world_->match(lk, send, op);
    } else if (world_->aborted) {
      if (it->second.sends.empty() && it->second.recvs.empty()) box.erase(it);
      world_->complete(*op, op->info.with_op(*world_->aborted));
    } else {
      op->in_queue = true;
      it->second.recvs.push_back(op);
    }
    return std::make_unique<InProcRequest>(world_, std::move(op));
  }

  void abort(std::string_view reason) override {
    std::lock_guard lk(world_->mu);
    if (world_->aborted) return;
    world_->aborted = abort_status(rank_, reason);
    for (auto& cv : world_->cvs) cv.notify_all();
  }

  std::optional<Status> aborted() const override {
    std::lock_guard lk(world_->mu);
    return world_->aborted;
  }

 private:
  std::shared_ptr<World> world_;
  const int rank_;
};

}  // namespace
}  // namespace comm_internal

std::vector<std::unique_ptr<Transport>> make_inproc_transports(int size, InProcOptions options) {
  TP_CHECK(size >= 1, "make_inproc_transports: size ", size);
  auto world = std::make_shared<comm_internal::World>(size, options);
  std::vector<std::unique_ptr<Transport>> out;
  out.reserve(size);
  for (int r = 0; r < size; ++r) {
    out.push_back(std::make_unique<comm_internal::InProcTransport>(world, r));
  }
  return out;
}

namespace comm_internal {
// Runs body and converts an escaping exception into Internal; aborts the world on failure.
Status run_rank_body(Transport& t, const std::function<Status(Transport&)>& body) {
  Status s;
  try {
    s = body(t);
  } catch (const std::exception& e) {
    s = Status::internal(fmt::format("rank {}: exception: {}", t.rank(), e.what()));
  } catch (...) {
    s = Status::internal(fmt::format("rank {}: unknown exception", t.rank()));
  }
  if (!s.ok()) t.abort(s.to_string());
  return s;
}
}  // namespace comm_internal

std::vector<Status> run_on_threads(std::span<const std::unique_ptr<Transport>> transports,
                                   const std::function<Status(Transport&)>& body) {
  std::vector<Status> statuses(transports.size());
  std::vector<std::thread> threads;
  threads.reserve(transports.size());
  for (size_t r = 0; r < transports.size(); ++r) {
    threads.emplace_back(
        [&, r] { statuses[r] = comm_internal::run_rank_body(*transports[r], body); });
  }
  for (auto& th : threads) th.join();
  return statuses;
}

}  // namespace tightpipe
