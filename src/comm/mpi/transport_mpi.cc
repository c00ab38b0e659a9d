// MPI backend: MPI_Isend/MPI_Irecv on a private duplicate of MPI_COMM_WORLD; waits poll
// MPI_Test with back-off (never MPI_Wait, which spins). A second duplicate carries abort messages:
// every transport keeps one receive from any source posted on it and checks it on every poll.
#include <mpi.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <mutex>
#include <thread>

#include "comm/op_info.h"
#include "tightpipe/base.h"
#include "tightpipe/transport_mpi.h"

namespace tightpipe {
namespace comm_internal {
namespace {

constexpr int kCtrlTag = 1;
constexpr size_t kCtrlBytes = 1024;  // 8-byte generation + reason text (truncated)

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(buf, len);
}

// Linux rounds every sleep up by the thread's timer slack (50 us by default), which would make
// the poll interval coarse. While a thread waits here its slack is 1 us; the old value returns
// afterwards.
class TimerSlackScope {
 public:
  TimerSlackScope() = default;
  // Called before the first sleep only, so that fast waits make no system call.
  void engage() {
#ifdef __linux__
    if (engaged_) return;
    engaged_ = true;
    old_ = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (old_ > 1000) prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  }
  ~TimerSlackScope() {
#ifdef __linux__
    if (old_ > 1000) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(old_), 0, 0, 0);
#endif
  }
  TimerSlackScope(const TimerSlackScope&) = delete;
  TimerSlackScope& operator=(const TimerSlackScope&) = delete;

 private:
  bool engaged_ = false;
  long old_ = 0;
};

// State shared by a transport and its requests (requests may outlive the transport).
struct MpiState {
  std::shared_ptr<MpiScope> scope;
  MpiOptions options;
  MPI_Comm comm = MPI_COMM_NULL;  // data messages
  MPI_Comm ctrl = MPI_COMM_NULL;  // abort messages
  int rank = 0;
  int size = 1;
  uint64_t generation = 0;  // same on every rank for one collective creation

  std::mutex mu;  // serializes every MPI call on these communicators
  MPI_Request ctrl_req = MPI_REQUEST_NULL;
  char ctrl_buf[kCtrlBytes];
  std::optional<Status> aborted;
  bool dirty = false;  // a request was dropped pending: do not free the communicators
  std::vector<std::unique_ptr<std::string>> abort_payloads;  // alive while their sends fly
  std::vector<MPI_Request> abort_reqs;

  void post_ctrl_recv() {
    MPI_Irecv(ctrl_buf, kCtrlBytes, MPI_CHAR, MPI_ANY_SOURCE, kCtrlTag, ctrl, &ctrl_req);
  }

  // Looks for an abort message. REQUIRES: mu held.
  void poll_control() {
    while (!aborted && ctrl_req != MPI_REQUEST_NULL) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&ctrl_req, &flag, &st) != MPI_SUCCESS || !flag) return;
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      uint64_t gen = 0;
      if (n >= 8) std::memcpy(&gen, ctrl_buf, 8);
      if (n >= 8 && gen == generation) {
        aborted = abort_status(st.MPI_SOURCE, std::string_view(ctrl_buf + 8, n - 8));
        dirty = true;
        scope->set_peer_failure(true);
        return;
      }
      post_ctrl_recv();  // a stale message from an older transport: ignore it
    }
  }

  ~MpiState() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    std::lock_guard lk(mu);
    for (auto& r : abort_reqs) {
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);
    }
    if (ctrl_req != MPI_REQUEST_NULL) {  // ctrl_buf dies with this object: finish the cancel
      MPI_Cancel(&ctrl_req);
      int flag = 0;
      const double deadline = now_seconds() + 1.0;
      while (!flag && now_seconds() < deadline) {
        MPI_Test(&ctrl_req, &flag, MPI_STATUS_IGNORE);
        if (!flag) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (!flag) MPI_Request_free(&ctrl_req);
    }
    // After a failure, messages may still be in flight; freeing the communicators would let a
    // later duplicate reuse their context id and receive them. Keep them (a few per failure).
    if (!dirty && !aborted) {
      MPI_Comm_free(&comm);
      MPI_Comm_free(&ctrl);
    }
  }
};

class MpiRequest final : public Request {
 public:
  // A request that failed at post time.
  MpiRequest(std::shared_ptr<MpiState> state, OpInfo info, Status failed)
      : state_(std::move(state)), info_(info), done_(true), status_(std::move(failed)) {}
  MpiRequest(std::shared_ptr<MpiState> state, OpInfo info, MPI_Request req)
      : state_(std::move(state)), info_(info), req_(req) {}

  ~MpiRequest() override {
    if (done_ || req_ == MPI_REQUEST_NULL) return;
    std::unique_lock lk(state_->mu);
    int flag = 0;
    MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
    if (flag) return;
    state_->dirty = true;
    if (!info_.is_send) {
      // Dropped while pending (after an error): cancel the receive and let the cancel complete,
      // so that MPI cannot write into the buffer after this returns (bounded: 1 s).
      MPI_Cancel(&req_);
      const double deadline = now_seconds() + 1.0;
      while (!flag && now_seconds() < deadline) {
        MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
        if (!flag) {
          lk.unlock();
          std::this_thread::sleep_for(std::chrono::microseconds(50));
          lk.lock();
        }
      }
      if (flag) return;
    }
    // A send cannot be cancelled in Open MPI: detach it (MPI may still read the buffer).
    MPI_Request_free(&req_);
  }

  Status wait(double timeout_s) override {
    const double start = now_seconds();
    const double deadline = start + std::max(0.0, timeout_s);
    const double max_sleep_s = state_->options.max_poll_interval_us * 1e-6;
    // Yield (not sleep) while a transfer of this size may be in progress: a rendezvous transfer
    // moves only while both sides poll, and a sleep costs ~60 us of timer slack at the least.
    const double yield_until =
        start + state_->options.yield_us * 1e-6 + info_.bytes / state_->options.yield_bytes_per_s;
    double sleep_s = 0;
    TimerSlackScope slack;  // precise sleeps while this thread waits
    for (int polls = 0;; ++polls) {
      if (std::optional<Status> s = poll()) return *s;
      const double now = now_seconds();
      if (now >= deadline) {
        state_->scope->set_peer_failure(true);
        return info_.timeout_error(timeout_s);
      }
      if (polls < 16 || now < yield_until) {
        std::this_thread::yield();
      } else {
        slack.engage();
        sleep_s = sleep_s == 0 ? 2e-6 : std::min(max_sleep_s, sleep_s * 2);
        std::this_thread::sleep_for(
            std::chrono::duration<double>(std::min(sleep_s, deadline - now)));
      }
    }
  }

  Result<bool> test() override {
    std::optional<Status> s = poll();
    if (!s) return false;
    if (!s->ok()) return *s;
    return true;
  }

 private:
  // nullopt while pending; the final Status when done, or the abort Status (request stays
  // pending in MPI then).
  std::optional<Status> poll() {
    if (done_) return status_;
    std::lock_guard lk(state_->mu);
    int flag = 0;
    MPI_Status st;
    st.MPI_ERROR = MPI_SUCCESS;
    const int rc = MPI_Test(&req_, &flag, &st);
    if (rc != MPI_SUCCESS || (flag && st.MPI_ERROR != MPI_SUCCESS)) {
      const int err = rc != MPI_SUCCESS ? rc : st.MPI_ERROR;
      state_->scope->set_peer_failure(true);
      int err_class = 0;
      MPI_Error_class(err, &err_class);
      done_ = true;
      req_ = MPI_REQUEST_NULL;
      if (err_class == MPI_ERR_TRUNCATE) {
        status_ = Status::invalid_argument(fmt::format(
            "{}: the message is more than {} bytes but the receive buffer is {} bytes ({}); hint: "
            "both ranks must agree on the shape of what is sent under this tag",
            info_.describe(), info_.bytes, info_.bytes, mpi_error_string(err)));
      } else {
        status_ = Status::unavailable(
            fmt::format("{}: MPI error: {}", info_.describe(), mpi_error_string(err)));
      }
      return status_;
    }
    if (flag) {
      done_ = true;
      if (!info_.is_send) {
        int n = 0;
        MPI_Get_count(&st, MPI_BYTE, &n);
        if (static_cast<size_t>(n) != info_.bytes) {
          status_ = info_.size_mismatch(static_cast<size_t>(n));
          return status_;
        }
      }
      status_ = OkStatus();
      return status_;
    }
    state_->poll_control();
    if (state_->aborted) return info_.with_op(*state_->aborted);
    return std::nullopt;
  }

  std::shared_ptr<MpiState> state_;
  OpInfo info_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
  Status status_;
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(std::shared_ptr<MpiState> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) override {
    check_peer_and_tag("isend", state_->rank, state_->size, dst, tag);
    return post(OpInfo{true, state_->rank, dst, tag, data.size()},
                const_cast<std::byte*>(data.data()));
  }

  std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) override {
    check_peer_and_tag("irecv", state_->rank, state_->size, src, tag);
    return post(OpInfo{false, state_->rank, src, tag, data.size()}, data.data());
  }

  void abort(std::string_view reason) override {
    std::unique_lock lk(state_->mu);
    state_->poll_control();
    if (state_->aborted) return;
    state_->aborted = abort_status(state_->rank, reason);
    state_->dirty = true;
    state_->scope->set_peer_failure(true);
    // Tell every other rank; the messages are small (eager), so they leave at once.
    std::string text = std::string(reason.substr(0, kCtrlBytes - 8));
    for (int r = 0; r < state_->size; ++r) {
      if (r == state_->rank) continue;
      auto payload = std::make_unique<std::string>(8, '\0');
      std::memcpy(payload->data(), &state_->generation, 8);
      *payload += text;
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Isend(payload->data(), static_cast<int>(payload->size()), MPI_CHAR, r, kCtrlTag,
                state_->ctrl, &req);
      state_->abort_payloads.push_back(std::move(payload));
      state_->abort_reqs.push_back(req);
    }
    // Push them out for a moment (bounded); whatever is left completes in the background.
    const double deadline = now_seconds() + 0.05;
    int all_done = 0;
    while (!all_done && now_seconds() < deadline) {
      MPI_Testall(static_cast<int>(state_->abort_reqs.size()), state_->abort_reqs.data(), &all_done,
                  MPI_STATUSES_IGNORE);
      if (!all_done) {
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        lk.lock();
      }
    }
  }

  std::optional<Status> aborted() const override {
    std::lock_guard lk(state_->mu);
    state_->poll_control();
    return state_->aborted;
  }

 private:
  std::unique_ptr<Request> post(const OpInfo& info, std::byte* buf) {
    if (info.bytes > static_cast<size_t>(INT_MAX)) {
      return std::make_unique<MpiRequest>(
          state_, info,
          Status::invalid_argument(fmt::format("{}: more than {} bytes in one MPI message; hint: "
                                               "split the message",
                                               info.describe(), INT_MAX)));
    }
    std::lock_guard lk(state_->mu);
    state_->poll_control();
    if (state_->aborted) {
      return std::make_unique<MpiRequest>(state_, info, info.with_op(*state_->aborted));
    }
    MPI_Request req = MPI_REQUEST_NULL;
    const int count = static_cast<int>(info.bytes);
    const int rc = info.is_send
                       ? MPI_Isend(buf, count, MPI_BYTE, info.peer, info.tag, state_->comm, &req)
                       : MPI_Irecv(buf, count, MPI_BYTE, info.peer, info.tag, state_->comm, &req);
    if (rc != MPI_SUCCESS) {
      return std::make_unique<MpiRequest>(
          state_, info,
          Status::unavailable(fmt::format("{}: {} failed: {}", info.describe(),
                                          info.is_send ? "MPI_Isend" : "MPI_Irecv",
                                          mpi_error_string(rc))));
    }
    return std::make_unique<MpiRequest>(state_, info, req);
  }

  std::shared_ptr<MpiState> state_;
};

uint64_t g_generation = 0;  // counts collective transport creations in this process

}  // namespace
}  // namespace comm_internal

// ---- MpiScope --------------------------------------------------------------------------------

Result<std::shared_ptr<MpiScope>> MpiScope::acquire() {
  static std::mutex mu;
  static std::shared_ptr<MpiScope> scope;
  std::lock_guard lk(mu);
  if (scope) return scope;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::failed_precondition("MPI was already finalized in this process");
  }
  std::shared_ptr<MpiScope> s(new MpiScope());
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      return Status::failed_precondition(
          fmt::format("MPI_Init_thread failed: {}", comm_internal::mpi_error_string(rc)));
    }
    s->owns_init_ = true;
    if (provided < MPI_THREAD_SERIALIZED) {
      return Status::failed_precondition(
          fmt::format("MPI provides thread level {} but tightpipe needs MPI_THREAD_SERIALIZED ({})",
                      provided, MPI_THREAD_SERIALIZED));
    }
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &s->world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &s->world_size_);
  scope = s;
  return scope;
}

MpiScope::~MpiScope() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_init_ && !finalized && !peer_failure()) MPI_Finalize();
}

Result<std::unique_ptr<Transport>> make_mpi_transport(std::shared_ptr<MpiScope> scope,
                                                      MpiOptions options) {
  TP_CHECK(scope != nullptr, "make_mpi_transport: null scope");
  TP_RETURN_IF_ERROR(options.validate());
  auto state = std::make_shared<comm_internal::MpiState>();
  state->scope = std::move(scope);
  state->options = options;
  state->generation = ++comm_internal::g_generation;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &state->comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &state->ctrl);
  if (rc != MPI_SUCCESS) {
    state->dirty = true;
    return Status::unavailable(
        fmt::format("MPI_Comm_dup failed: {}", comm_internal::mpi_error_string(rc)));
  }
  state->scope->set_peer_failure(false);  // every process just took part in the duplication
  MPI_Comm_rank(state->comm, &state->rank);
  MPI_Comm_size(state->comm, &state->size);
  void* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (flag && *static_cast<int*>(tag_ub) < kMaxTag - 1) {
    return Status::failed_precondition(
        fmt::format("this MPI allows tags up to {} but tightpipe needs {}",
                    *static_cast<int*>(tag_ub), kMaxTag - 1));
  }
  state->post_ctrl_recv();
  return std::unique_ptr<Transport>(
      std::make_unique<comm_internal::MpiTransport>(std::move(state)));
}

}  // namespace tightpipe
