// Link emulator: a Transport wrapper that delays each send's posting on the inner transport until
// its emulated delivery time. One background thread per emulator sleeps on a condition variable
// until the earliest due message; the caller of isend never blocks.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <queue>
#include <thread>

#include "comm/op_info.h"
#include "tightpipe/base.h"
#include "tightpipe/transport.h"

namespace tightpipe {

Status LinkOptions::validate() const {
  if (!(latency_us >= 0 && latency_us <= 60e6)) {
    return Status::invalid_argument(
        fmt::format("link latency_us={}: must be in [0, 6e7] microseconds", latency_us));
  }
  if (!(gbps >= 0 && gbps <= 1e6)) {
    return Status::invalid_argument(
        fmt::format("link gbps={}: must be in [0, 1e6] gigabits/s (0 = unlimited)", gbps));
  }
  return OkStatus();
}

std::string LinkOptions::to_string() const {
  return fmt::format("latency_us={},gbps={}", latency_us, gbps);
}

Result<LinkOptions> parse_link_options(std::string_view spec) {
  LinkOptions out;
  bool seen_latency = false, seen_gbps = false;
  const std::string_view hint =
      "hint: write e.g. latency_us=50,gbps=10 (keys latency_us and gbps, each optional)";
  for (const std::string& raw : split(spec, ',')) {
    const std::string_view item = trim(raw);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return Status::invalid_argument(
          fmt::format("link spec '{}': item '{}' has no '='; {}", spec, item, hint));
    }
    const std::string_view key = trim(item.substr(0, eq));
    const std::string_view value = trim(item.substr(eq + 1));
    Result<double> v = parse_double(value);
    if (!v.ok()) {
      return Status::invalid_argument(
          fmt::format("link spec '{}': {} = '{}' is not a number; {}", spec, key, value, hint));
    }
    if (key == "latency_us") {
      if (seen_latency) {
        return Status::invalid_argument(
            fmt::format("link spec '{}': latency_us given twice", spec));
      }
      seen_latency = true;
      out.latency_us = *v;
    } else if (key == "gbps") {
      if (seen_gbps) {
        return Status::invalid_argument(fmt::format("link spec '{}': gbps given twice", spec));
      }
      seen_gbps = true;
      out.gbps = *v;
    } else {
      return Status::invalid_argument(
          fmt::format("link spec '{}': unknown key '{}'; {}", spec, key, hint));
    }
  }
  if (!seen_latency && !seen_gbps) {
    return Status::invalid_argument(fmt::format("link spec '{}' is empty; {}", spec, hint));
  }
  Status s = out.validate();
  if (!s.ok()) return s.with_context(fmt::format("link spec '{}'", spec));
  return out;
}

namespace comm_internal {
namespace {

// One emulated send: posted on the inner transport by the emulator thread at delivery time.
struct EmuSend {
  std::mutex mu;
  std::condition_variable cv;
  std::unique_ptr<Request> inner;  // set at delivery
  bool cancelled = false;          // the outer request was dropped before delivery
};

class EmuSendRequest final : public Request {
 public:
  EmuSendRequest(std::shared_ptr<EmuSend> send, OpInfo info, Transport* inner_transport)
      : send_(std::move(send)), info_(std::move(info)), inner_transport_(inner_transport) {}
  ~EmuSendRequest() override {
    std::lock_guard lk(send_->mu);
    if (!send_->inner) send_->cancelled = true;
  }

  Status wait(double timeout_s) override {
    const double deadline = now_seconds() + std::max(0.0, timeout_s);
    {
      std::unique_lock lk(send_->mu);
      // Bounded slices so an abort seen by the inner transport ends the wait early.
      while (!send_->inner) {
        if (std::optional<Status> a = inner_transport_->aborted()) return info_.with_op(*a);
        const double left = deadline - now_seconds();
        if (left <= 0) return info_.timeout_error(timeout_s);
        send_->cv.wait_for(lk, std::chrono::duration<double>(std::min(left, 0.05)));
      }
    }
    return send_->inner->wait(std::max(0.0, deadline - now_seconds()));
  }

  Result<bool> test() override {
    {
      std::lock_guard lk(send_->mu);
      if (!send_->inner) {
        if (std::optional<Status> a = inner_transport_->aborted()) return info_.with_op(*a);
        return false;
      }
    }
    return send_->inner->test();
  }

 private:
  std::shared_ptr<EmuSend> send_;
  OpInfo info_;
  Transport* inner_transport_;  // outlives the request only while the emulator lives (REQUIRES)
};

class LinkEmulator final : public Transport {
 public:
  LinkEmulator(std::unique_ptr<Transport> inner, LinkOptions link)
      : inner_(std::move(inner)), link_(link), link_free_(inner_->size(), 0.0) {
    thread_ = std::thread([this] { deliver_loop(); });
  }

  ~LinkEmulator() override {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override {
    return fmt::format("emulated({}, {})", inner_->name(), link_.to_string());
  }

  std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) override {
    check_peer_and_tag("isend", rank(), size(), dst, tag);
    auto send = std::make_shared<EmuSend>();
    {
      std::lock_guard lk(mu_);
      const double now = now_seconds();
      const double transfer_s = link_.gbps > 0 ? data.size() * 8.0 / (link_.gbps * 1e9) : 0.0;
      link_free_[dst] = std::max(now, link_free_[dst]) + transfer_s;
      queue_.push(Pending{link_free_[dst] + link_.latency_us * 1e-6, seq_++, dst, tag, data, send});
    }
    cv_.notify_all();
    return std::make_unique<EmuSendRequest>(
        std::move(send), OpInfo{true, rank(), dst, tag, data.size(), {}}, inner_.get());
  }

  std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) override {
    return inner_->irecv(src, tag, data);
  }
  void abort(std::string_view reason) override { inner_->abort(reason); }
  std::optional<Status> aborted() const override { return inner_->aborted(); }

 private:
  struct Pending {
    double deliver_s;
    uint64_t seq;
    int dst;
    int tag;
    std::span<const std::byte> data;
    std::shared_ptr<EmuSend> send;
    bool operator>(const Pending& o) const {
      return deliver_s != o.deliver_s ? deliver_s > o.deliver_s : seq > o.seq;
    }
  };

  void deliver_loop() {
    std::unique_lock lk(mu_);
    for (;;) {
      if (queue_.empty()) {
        if (stop_) return;
        cv_.wait(lk);
        continue;
      }
      const double due = queue_.top().deliver_s;
      const double now = now_seconds();
      if (due > now && !stop_) {  // on stop, flush what is queued at once
        cv_.wait_for(lk, std::chrono::duration<double>(due - now));
        continue;
      }
      Pending p = queue_.top();
      queue_.pop();
      lk.unlock();
      {
        std::lock_guard slk(p.send->mu);
        if (!p.send->cancelled) p.send->inner = inner_->isend(p.dst, p.tag, p.data);
      }
      p.send->cv.notify_all();
      lk.lock();
    }
  }

  std::unique_ptr<Transport> inner_;
  const LinkOptions link_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<double> link_free_;  // [dst]: when the link to dst finishes its last message
  std::priority_queue<Pending, std::vector<Pending>, std::greater<Pending>> queue_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace
}  // namespace comm_internal

std::unique_ptr<Transport> make_link_emulator(std::unique_ptr<Transport> inner, LinkOptions link) {
  TP_CHECK(inner != nullptr, "make_link_emulator: null transport");
  TP_CHECK(link.validate().ok(), link.validate().to_string());
  return std::make_unique<comm_internal::LinkEmulator>(std::move(inner), link);
}

}  // namespace tightpipe
