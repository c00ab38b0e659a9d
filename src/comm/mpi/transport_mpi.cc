// MPI backend: MPI_Isend/MPI_Irecv on a private duplicate of MPI_COMM_WORLD; waits poll
// MPI_Test with back-off (never MPI_Wait, which spins). A second duplicate carries abort messages:
// every transport keeps one receive from any source posted on it and checks it on every poll.
// Groups (make_group) are MPI_Comm_split of their parent's communicator and share the world's
// abort channel and mutex; their iallreduce_sum is MPI_Iallreduce, polled like a message.
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

// State shared by a world transport, the groups made from it and all their requests (which may
// outlive them): the abort channel and the mutex that serializes every MPI call on any of their
// communicators.
struct MpiCtrl {
  std::shared_ptr<MpiScope> scope;
  MpiOptions options;
  MPI_Comm ctrl = MPI_COMM_NULL;  // abort messages, world ranks
  int world_rank = 0;
  int world_size = 1;
  uint64_t generation = 0;  // same on every rank for one collective creation

  // Serializes MPI calls. Per world transport under MPI_THREAD_MULTIPLE; one for the process
  // under MPI_THREAD_SERIALIZED, where no two threads may be inside MPI at once.
  std::shared_ptr<std::mutex> mu_ptr;
  std::mutex& mu() { return *mu_ptr; }
  MPI_Request ctrl_req = MPI_REQUEST_NULL;
  char ctrl_buf[kCtrlBytes];
  std::optional<Status> aborted;
  bool dirty = false;  // a request was dropped pending: do not free the communicators
  std::vector<std::unique_ptr<std::string>> abort_payloads;  // alive while their sends fly
  std::vector<MPI_Request> abort_reqs;
  // Collectives dropped while pending: MPI can neither cancel nor free them, so they and the
  // buffers MPI may still write stay here for good (only after a failure).
  std::vector<std::pair<MPI_Request, std::unique_ptr<std::vector<double>>>> orphans;

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

  // Transport::abort for the world transport and every group of it.
  void abort(std::string_view reason) {
    std::unique_lock lk(mu());
    poll_control();
    if (aborted) return;
    aborted = abort_status(world_rank, reason);
    dirty = true;
    scope->set_peer_failure(true);
    // Tell every other rank; the messages are small (eager), so they leave at once.
    std::string text = std::string(reason.substr(0, kCtrlBytes - 8));
    for (int r = 0; r < world_size; ++r) {
      if (r == world_rank) continue;
      auto payload = std::make_unique<std::string>(8, '\0');
      std::memcpy(payload->data(), &generation, 8);
      *payload += text;
      MPI_Request req = MPI_REQUEST_NULL;
      MPI_Isend(payload->data(), static_cast<int>(payload->size()), MPI_CHAR, r, kCtrlTag, ctrl,
                &req);
      abort_payloads.push_back(std::move(payload));
      abort_reqs.push_back(req);
    }
    // Push them out for a moment (bounded); whatever is left completes in the background.
    const double deadline = now_seconds() + 0.05;
    int all_done = 0;
    while (!all_done && now_seconds() < deadline) {
      MPI_Testall(static_cast<int>(abort_reqs.size()), abort_reqs.data(), &all_done,
                  MPI_STATUSES_IGNORE);
      if (!all_done) {
        lk.unlock();
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        lk.lock();
      }
    }
  }

  ~MpiCtrl() {
    for (auto& o : orphans) (void)o.second.release();  // MPI may still write them: never free
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    std::lock_guard lk(mu());
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
    if (!dirty && !aborted) MPI_Comm_free(&ctrl);
  }
};

// One communicator: the world's duplicate or a group split from it.
struct MpiComm {
  std::shared_ptr<MpiCtrl> ctrl;
  MPI_Comm comm = MPI_COMM_NULL;  // data messages and collectives
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // [rank in comm]: the world rank, for messages

  std::mutex& mu() { return ctrl->mu(); }
  std::string ranks_text() const { return fmt::format("{{{}}}", fmt::join(world_ranks, ", ")); }

  ~MpiComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || comm == MPI_COMM_NULL) return;
    std::lock_guard lk(mu());
    // After a failure, messages may still be in flight; freeing the communicator would let a
    // later one reuse its context id and receive them. Keep it (a few per failure).
    if (!ctrl->dirty && !ctrl->aborted) MPI_Comm_free(&comm);
  }
};

class MpiRequest final : public Request {
 public:
  // A request that failed at post time.
  MpiRequest(std::shared_ptr<MpiComm> state, OpInfo info, Status failed)
      : state_(std::move(state)), info_(std::move(info)), done_(true), status_(std::move(failed)) {}
  MpiRequest(std::shared_ptr<MpiComm> state, OpInfo info, MPI_Request req)
      : state_(std::move(state)), info_(std::move(info)), req_(req) {}
  // A collective (iallreduce_sum) summing into `staging`, copied to `out` once complete: if the
  // request is dropped pending, MPI keeps writing `staging`, never `out`.
  MpiRequest(std::shared_ptr<MpiComm> state, OpInfo info, MPI_Request req,
             std::unique_ptr<std::vector<double>> staging, std::span<double> out)
      : state_(std::move(state)),
        info_(std::move(info)),
        req_(req),
        staging_(std::move(staging)),
        out_(out) {}

  ~MpiRequest() override {
    if (done_ || req_ == MPI_REQUEST_NULL) return;
    std::unique_lock lk(state_->mu());
    int flag = 0;
    MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);
    if (flag) return;
    state_->ctrl->dirty = true;
    if (staging_) {
      // MPI may neither cancel nor free a pending collective request: keep it and its buffer.
      state_->ctrl->scope->set_peer_failure(true);
      state_->ctrl->orphans.emplace_back(req_, std::move(staging_));
      return;
    }
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
    const double max_sleep_s = state_->ctrl->options.max_poll_interval_us * 1e-6;
    // Yield (not sleep) while a transfer of this size may be in progress: a rendezvous transfer
    // moves only while both sides poll, and a sleep costs ~60 us of timer slack at the least.
    const double yield_until = start + state_->ctrl->options.yield_us * 1e-6 +
                               info_.bytes / state_->ctrl->options.yield_bytes_per_s;
    double sleep_s = 0;
    TimerSlackScope slack;  // precise sleeps while this thread waits
    for (int polls = 0;; ++polls) {
      if (std::optional<Status> s = poll()) return *s;
      const double now = now_seconds();
      if (now >= deadline) {
        state_->ctrl->scope->set_peer_failure(true);
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
    std::lock_guard lk(state_->mu());
    int flag = 0;
    MPI_Status st;
    st.MPI_ERROR = MPI_SUCCESS;
    const int rc = MPI_Test(&req_, &flag, &st);
    if (rc != MPI_SUCCESS || (flag && st.MPI_ERROR != MPI_SUCCESS)) {
      const int err = rc != MPI_SUCCESS ? rc : st.MPI_ERROR;
      state_->ctrl->scope->set_peer_failure(true);
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
      if (staging_) {
        std::copy(staging_->begin(), staging_->end(), out_.begin());
        staging_.reset();
      } else if (!info_.is_send) {
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
    state_->ctrl->poll_control();
    if (state_->ctrl->aborted) return info_.with_op(*state_->ctrl->aborted);
    return std::nullopt;
  }

  std::shared_ptr<MpiComm> state_;
  OpInfo info_;
  MPI_Request req_ = MPI_REQUEST_NULL;
  bool done_ = false;
  Status status_;
  std::unique_ptr<std::vector<double>> staging_;  // a collective's buffer (MPI's until done)
  std::span<double> out_;                         // where its result goes
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(std::shared_ptr<MpiComm> state) : state_(std::move(state)) {}

  int rank() const override { return state_->rank; }
  int size() const override { return state_->size; }
  std::string name() const override {
    return state_->size == state_->ctrl->world_size
               ? std::string("mpi")
               : fmt::format("mpi group {}", state_->ranks_text());
  }

  std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) override {
    check_peer_and_tag("isend", state_->rank, state_->size, dst, tag);
    return post(p2p_info(true, dst, tag, data.size()), dst, const_cast<std::byte*>(data.data()));
  }

  std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) override {
    check_peer_and_tag("irecv", state_->rank, state_->size, src, tag);
    return post(p2p_info(false, src, tag, data.size()), src, data.data());
  }

  void abort(std::string_view reason) override { state_->ctrl->abort(reason); }

  std::optional<Status> aborted() const override {
    std::lock_guard lk(state_->mu());
    state_->ctrl->poll_control();
    return state_->ctrl->aborted;
  }

  // MPI_Comm_split of this communicator: collective over it (transport.h).
  Result<std::unique_ptr<Transport>> make_group(std::vector<int> members) override {
    const auto me = std::find(members.begin(), members.end(), state_->rank);
    TP_CHECK(me != members.end(), "make_group: rank ", state_->rank, " not a member");
    std::vector<int> world_ranks;
    for (int m : members) {
      TP_CHECK(m >= 0 && m < state_->size, "make_group: bad member ", m, " of ", state_->size);
      TP_CHECK(std::count(members.begin(), members.end(), m) == 1, "make_group: member ", m,
               " twice");
      world_ranks.push_back(state_->world_ranks[m]);
    }
    auto group = std::make_shared<MpiComm>();
    group->ctrl = state_->ctrl;
    group->world_ranks = std::move(world_ranks);
    {
      std::lock_guard lk(state_->mu());
      // The groups of one call partition the ranks, so their first members differ: one color
      // per group, ranked by position in `members`.
      const int rc = MPI_Comm_split(state_->comm, members.front(),
                                    static_cast<int>(me - members.begin()), &group->comm);
      if (rc != MPI_SUCCESS) {
        state_->ctrl->dirty = true;
        group->comm = MPI_COMM_NULL;
        return Status::unavailable(
            fmt::format("rank {}: MPI_Comm_split for the group of world ranks {} failed: {}",
                        state_->ctrl->world_rank, group->ranks_text(), mpi_error_string(rc)));
      }
      MPI_Comm_set_errhandler(group->comm, MPI_ERRORS_RETURN);
      MPI_Comm_rank(group->comm, &group->rank);
      MPI_Comm_size(group->comm, &group->size);
    }
    if (group->size != static_cast<int>(members.size()) ||
        group->world_ranks[group->rank] != state_->ctrl->world_rank) {
      return Status::internal(fmt::format(
          "rank {}: make_group of world ranks {} gave a group of {} ranks; hint: every rank must "
          "ask for groups that partition the ranks, in the same order",
          state_->ctrl->world_rank, group->ranks_text(), group->size));
    }
    return std::unique_ptr<Transport>(std::make_unique<MpiTransport>(std::move(group)));
  }

  std::unique_ptr<Request> iallreduce_sum(std::span<double> data) override {
    OpInfo info;
    info.rank = state_->ctrl->world_rank;
    info.bytes = data.size_bytes();
    info.collective = fmt::format("iallreduce_sum of {} doubles among world ranks {}", data.size(),
                                  state_->ranks_text());
    if (data.size() > static_cast<size_t>(INT_MAX)) {
      return std::make_unique<MpiRequest>(
          state_, info,
          Status::invalid_argument(
              fmt::format("{}: more than {} values in one MPI_Iallreduce; hint: smaller buckets "
                          "(--bucket-size)",
                          info.describe(), INT_MAX)));
    }
    auto staging = std::make_unique<std::vector<double>>(data.begin(), data.end());
    std::lock_guard lk(state_->mu());
    state_->ctrl->poll_control();
    if (state_->ctrl->aborted) {
      return std::make_unique<MpiRequest>(state_, info, info.with_op(*state_->ctrl->aborted));
    }
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, staging->data(), static_cast<int>(data.size()),
                                  MPI_DOUBLE, MPI_SUM, state_->comm, &req);
    if (rc != MPI_SUCCESS) {
      return std::make_unique<MpiRequest>(
          state_, info,
          Status::unavailable(
              fmt::format("{}: MPI_Iallreduce failed: {}", info.describe(), mpi_error_string(rc))));
    }
    return std::make_unique<MpiRequest>(state_, std::move(info), req, std::move(staging), data);
  }

 private:
  // Messages name world ranks; MPI takes the communicator's.
  OpInfo p2p_info(bool is_send, int peer, int tag, size_t bytes) const {
    OpInfo info;
    info.is_send = is_send;
    info.rank = state_->world_ranks[state_->rank];
    info.peer = state_->world_ranks[peer];
    info.tag = tag;
    info.bytes = bytes;
    return info;
  }

  std::unique_ptr<Request> post(OpInfo info, int peer, std::byte* buf) {
    if (info.bytes > static_cast<size_t>(INT_MAX)) {
      return std::make_unique<MpiRequest>(
          state_, info,
          Status::invalid_argument(fmt::format("{}: more than {} bytes in one MPI message; hint: "
                                               "split the message",
                                               info.describe(), INT_MAX)));
    }
    std::lock_guard lk(state_->mu());
    state_->ctrl->poll_control();
    if (state_->ctrl->aborted) {
      return std::make_unique<MpiRequest>(state_, info, info.with_op(*state_->ctrl->aborted));
    }
    MPI_Request req = MPI_REQUEST_NULL;
    const int count = static_cast<int>(info.bytes);
    const int rc = info.is_send
                       ? MPI_Isend(buf, count, MPI_BYTE, peer, info.tag, state_->comm, &req)
                       : MPI_Irecv(buf, count, MPI_BYTE, peer, info.tag, state_->comm, &req);
    if (rc != MPI_SUCCESS) {
      return std::make_unique<MpiRequest>(
          state_, info,
          Status::unavailable(fmt::format("{}: {} failed: {}", info.describe(),
                                          info.is_send ? "MPI_Isend" : "MPI_Irecv",
                                          mpi_error_string(rc))));
    }
    return std::make_unique<MpiRequest>(state_, std::move(info), req);
  }

  std::shared_ptr<MpiComm> state_;
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
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED) {
    return Status::failed_precondition(
        fmt::format("MPI was initialized with thread level {} but tightpipe needs "
                    "MPI_THREAD_SERIALIZED ({}); hint: MPI_Init_thread with MPI_THREAD_MULTIPLE",
                    level, MPI_THREAD_SERIALIZED));
  }
  s->thread_multiple_ = level >= MPI_THREAD_MULTIPLE;
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
  auto ctrl = std::make_shared<comm_internal::MpiCtrl>();
  ctrl->scope = std::move(scope);
  ctrl->options = options;
  ctrl->generation = ++comm_internal::g_generation;
  if (ctrl->scope->thread_multiple()) {
    ctrl->mu_ptr = std::make_shared<std::mutex>();
  } else {
    // MPI_THREAD_SERIALIZED: the overlapped gradient reduction calls MPI from a helper thread,
    // and transports of one process may be used at once: one lock for every MPI call.
    static const auto process_mu = std::make_shared<std::mutex>();
    ctrl->mu_ptr = process_mu;
  }
  auto world = std::make_shared<comm_internal::MpiComm>();
  world->ctrl = ctrl;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &world->comm);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &ctrl->ctrl);
  if (rc != MPI_SUCCESS) {
    ctrl->dirty = true;
    return Status::unavailable(
        fmt::format("MPI_Comm_dup failed: {}", comm_internal::mpi_error_string(rc)));
  }
  ctrl->scope->set_peer_failure(false);  // every process just took part in the duplication
  MPI_Comm_rank(world->comm, &world->rank);
  MPI_Comm_size(world->comm, &world->size);
  ctrl->world_rank = world->rank;
  ctrl->world_size = world->size;
  for (int r = 0; r < world->size; ++r) world->world_ranks.push_back(r);
  void* tag_ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &flag);
  if (flag && *static_cast<int*>(tag_ub) < kMaxTag - 1) {
    return Status::failed_precondition(
        fmt::format("this MPI allows tags up to {} but tightpipe needs {}",
                    *static_cast<int*>(tag_ub), kMaxTag - 1));
  }
  ctrl->post_ctrl_recv();
  return std::unique_ptr<Transport>(
      std::make_unique<comm_internal::MpiTransport>(std::move(world)));
}

}  // namespace tightpipe
