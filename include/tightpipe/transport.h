// Transport: point-to-point messages between the P ranks of a pipeline, plus the few small
// collectives the executor needs (deterministic allreduce, broadcast, barrier), all built on p2p,
// and process groups (make_group) with a non-blocking allreduce that a backend may take from its
// own library (MPI_Comm_split, MPI_Iallreduce) for the data-parallel gradient reduction.
//
// One Transport object per rank. Backends: in-process threads (`make_inproc_transports`, the
// default) and MPI processes (transport_mpi.h). `make_link_emulator` wraps any transport to add
// latency and bandwidth; `WorldOptions::wrap` adds a caller's own decorator (tracing, or the
// tests' fault injection). `run_world` is the one entry point the CLI and the executor use: it
// starts the ranks this process hosts (P threads, or this MPI process) and runs a function on each.
//
// Buffer contract (gloo unbound_buffer.h): the bytes passed to isend/irecv must stay alive and
// untouched (sender: unmodified; receiver: unread) until the Request's wait() returned OK or the
// Request was destroyed. Messages between one (sender, receiver) pair with the same tag match in
// posting order; different tags never match each other. A receive whose buffer size differs from
// the message size fails with InvalidArgument (the sender's request still completes).
//
// Sends may complete before the receive is posted (small messages, "eager") or only once the
// receiver has posted the matching receive (large messages, "rendezvous"), as in MPI: a program
// must not rely on a large blocking send finishing before its peer posts the receive.
//
// Errors (Status): every wait takes a time-out and returns DeadlineExceeded naming this rank, the
// peer, the tag and the byte count. `abort(reason)` tells every other rank to stop: their pending
// and future waits return Unavailable naming the aborting rank and its reason.
//
// Ownership: the caller owns Transports and Requests; a Transport must outlive its Requests.
// Dropping a pending Request cancels it: a receive is withdrawn and its buffer is free again; a
// send may still be delivered, and on MPI its buffer may still be read (keep it alive, or drop
// pending sends only on the way out after an error).
//
// Thread safety: isend, irecv, abort and aborted may be called from several threads at once; one
// Request is used by one thread at a time; a collective must not run concurrently with another
// collective on the same Transport (posting an iallreduce_sum counts; its pending Requests do
// not, so a helper thread may post and wait them while other threads use other groups).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

namespace tightpipe {

// Tags are in [0, kMaxTag). Users take [0, kMaxUserTag); the collectives below use the rest.
inline constexpr int kMaxUserTag = 1 << 28;
inline constexpr int kMaxTag = 1 << 29;

// A posted send or receive.
class Request {
 public:
  virtual ~Request() = default;
  Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  // Blocks (without spinning) until the operation completes, fails, or `timeout_s` seconds pass.
  // OK: done, the buffer may be reused. DeadlineExceeded: still pending; wait may be called again.
  // Unavailable: a rank aborted (or the peer is gone). InvalidArgument: size mismatch.
  virtual Status wait(double timeout_s) = 0;
  // Non-blocking: true when complete, false when pending, an error Status as wait() would give.
  virtual Result<bool> test() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "threads", "mpi", "emulated(threads, latency_us=50,gbps=10)"...
  virtual std::string name() const = 0;

  // REQUIRES: 0 <= dst < size(), dst != rank(), 0 <= tag < kMaxTag (user code: < kMaxUserTag).
  // Errors (e.g. the world was aborted) surface in the returned Request's wait()/test().
  virtual std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) = 0;
  // REQUIRES: 0 <= src < size(), src != rank(), tag as for isend.
  virtual std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) = 0;

  // Tells every rank (this one included) to stop: pending and later waits return Unavailable
  // "rank R aborted: <reason>". Idempotent; the first abort seen by a rank wins. Never blocks long.
  virtual void abort(std::string_view reason) = 0;
  // The abort this rank has seen (its own or a peer's), if any.
  virtual std::optional<Status> aborted() const = 0;

  // A sub-communicator with its own collectives: rank i of the group is this transport's rank
  // members[i]. Default: make_group_view(*this, members) (below). MPI: a new communicator from
  // MPI_Comm_split of this one (color = members[0], key = position), whose iallreduce_sum is
  // MPI_Iallreduce. COLLECTIVE: every rank of this transport calls make_group the same number of
  // times in the same order, each call with groups that partition the ranks (e.g. every rank
  // asks for its pipeline, then every rank for its data-parallel group), since MPI_Comm_split
  // blocks until every rank of the parent joins. A decorator that wraps some ranks only must
  // forward make_group to its inner transport (and wrap the group), so that every rank takes the
  // same path; a decorator on every rank (the link emulator) may keep the default, which sends
  // the group's traffic through the decorator. abort()/aborted() of the group are the world's.
  // The group does not own this transport, which must outlive it and its requests.
  // REQUIRES: members distinct, in [0, size()), rank() among them.
  virtual Result<std::unique_ptr<Transport>> make_group(std::vector<int> members);

  // Starts an in-place sum of `data` over every rank; the Request's wait/test completes it (the
  // time-out and abort rules of isend/irecv apply). Default: the algorithm of allreduce_sum
  // (below), its messages posted now: every rank gets bit-identical sums in rank order. MPI:
  // MPI_Iallreduce(MPI_IN_PLACE, MPI_SUM) on the transport's communicator, which sums in the
  // library's own order (exact and order-free for 2 ranks; for more, within rounding). Several
  // may be in flight at once and be waited in any order. Dropping a pending one leaves `data`
  // unspecified but no longer written.
  // REQUIRES: every rank posts its iallreduce_sums in the same order with the same data.size();
  // `data` stays alive and untouched until wait() returned OK (or the Request is dropped).
  virtual std::unique_ptr<Request> iallreduce_sum(std::span<double> data);

 private:
  std::atomic<uint32_t> iallreduce_calls_{0};  // numbers the default iallreduce_sum's tags
};

// ---- Blocking helpers and collectives (free functions over any Transport) -------------------
// Every rank must call the same collectives in the same order. Each takes a total time-out.

Status send(Transport& t, int dst, int tag, std::span<const std::byte> data, double timeout_s);
Status recv(Transport& t, int src, int tag, std::span<std::byte> data, double timeout_s);

// In-place sum over ranks; every rank gets bit-identical results, equal to
// ((x_0 + x_1) + x_2) + ... in rank order (each element is summed once, by one owner rank).
// REQUIRES: the same data.size() on every rank.
Status allreduce_sum(Transport& t, std::span<double> data, double timeout_s);
// Copies `root`'s bytes to every rank. REQUIRES: the same data.size() on every rank.
Status broadcast(Transport& t, int root, std::span<std::byte> data, double timeout_s);
// Returns once every rank has entered the barrier (or an error).
Status barrier(Transport& t, double timeout_s);

// ---- Process groups (data parallel x pipeline parallel) -----------------------------------

// The rank layout of DP x PP as Megatron-LM orders it by default (parallel_state.py, order
// "tp-cp-ep-dp-pp" with tp = cp = ep = 1): data-parallel rank varies fastest, so the ranks of one
// pipeline are strided by DP: global rank = pp_rank * dp + dp_rank. With dp = 2, pp = 2:
// pipeline 0 = {0, 2}, pipeline 1 = {1, 3}; stage 0's DP group = {0, 1}, stage 1's = {2, 3}.
struct ParallelLayout {
  int dp = 1, pp = 1;  // REQUIRES: both >= 1
  int world() const { return dp * pp; }
  int pp_rank(int global) const { return global / dp; }
  int dp_rank(int global) const { return global % dp; }
  int global(int pp_rank, int dp_rank) const { return pp_rank * dp + dp_rank; }
  // The global ranks of replica `dp_rank`'s pipeline, in stage-rank order (size pp).
  std::vector<int> pipeline_group(int dp_rank) const;
  // The global ranks holding pipeline rank `pp_rank` in every replica, in dp order (size dp).
  std::vector<int> data_parallel_group(int pp_rank) const;
};

// The default Transport::make_group: a sub-communicator over `parent`: rank i of the view is parent
// rank members[i]; sends, receives and the collectives of this header then run among the members
// only, with the view's ranks. abort() and aborted() are the parent's (a failure anywhere stops the
// whole world). The view does not own the parent, which must outlive it. Messages keep their tags,
// so two views of one parent must not both carry messages between the same pair of parent ranks
// with the same tag at once: the pipeline and data-parallel groups of a ParallelLayout share no
// pair of ranks (two ranks in one pipeline differ in pp_rank, in one DP group they share it), so
// they never clash. REQUIRES: members distinct, in [0, parent.size()), parent.rank() among them.
std::unique_ptr<Transport> make_group_view(Transport& parent, std::vector<int> members);

// ---- In-process backend ---------------------------------------------------------------------

struct InProcOptions {
  // Sends of at most this many bytes are copied and complete at once if no receive is posted yet;
  // larger ones wait for the receive (like MPI's vader eager limit, 4 KiB), so that a program
  // that runs on threads does not deadlock on MPI.
  size_t eager_limit_bytes = 4096;
};

// P connected transports (index = rank) sharing one hidden mailbox world. REQUIRES: size >= 1.
std::vector<std::unique_ptr<Transport>> make_inproc_transports(int size,
                                                               InProcOptions options = {});

// Runs body(*transports[r]) on one thread per rank and returns each rank's Status (index = rank).
// A rank whose body fails calls abort() with its error so that the others stop promptly.
std::vector<Status> run_on_threads(std::span<const std::unique_ptr<Transport>> transports,
                                   const std::function<Status(Transport&)>& body);

// ---- MPI backend tuning (the backend itself: transport_mpi.h) -------------------------------

struct MpiOptions {
  // A waiter first polls MPI_Test with sched_yield (no sleep) for yield_us + bytes /
  // yield_bytes_per_s: about the time the transfer itself takes, during which MPI needs both sides
  // to poll. Then it sleeps between polls, doubling up to max_poll_interval_us: the worst extra
  // delay of a message that arrives while its receiver sleeps (plus ~60 us of timer slack).
  double max_poll_interval_us = 100;
  double yield_us = 20;
  double yield_bytes_per_s = 4e9;
  Status validate() const;
};

// ---- Link emulator ---------------------------------------------------------------------------

struct LinkOptions {
  double latency_us = 0;  // one-way latency added to every message, microseconds (>= 0)
  double gbps = 0;        // link bandwidth in gigabits per second (10^9 bit/s); 0 = unlimited
  Status validate() const;
  std::string to_string() const;  // "latency_us=50,gbps=10"
};

// Parses "latency_us=50,gbps=10" (either key may be omitted; keys in any order).
Result<LinkOptions> parse_link_options(std::string_view spec);

// Wraps `inner` so that a message posted at time t becomes visible to its receiver at
// max(t, previous message on that link finished) + bytes / bandwidth + latency; messages on one
// link (this rank -> dst) stay FIFO. isend never blocks the caller: a background thread per
// emulator posts the real send at delivery time. Receives and abort pass straight through.
std::unique_ptr<Transport> make_link_emulator(std::unique_ptr<Transport> inner, LinkOptions link);

// ---- One entry point for the CLI and the executor --------------------------------------------

enum class TransportKind { kThreads, kMpi };
// "threads" | "mpi"; anything else is InvalidArgument listing the choices.
Result<TransportKind> parse_transport_kind(std::string_view name);
std::string_view transport_kind_name(TransportKind kind);
// True when this binary was built with the MPI backend (TIGHTPIPE_HAVE_MPI).
bool mpi_transport_available();

// A decorator for one rank's transport: takes the transport and the rank, returns the wrapper
// (which owns the inner transport). The link emulator is one; tests inject faults with another.
using TransportWrapper =
    std::function<std::unique_ptr<Transport>(std::unique_ptr<Transport> inner, int rank)>;

struct WorldOptions {
  TransportKind kind = TransportKind::kThreads;  // --transport
  int world_size = 1;               // P: threads to start, or the MPI world size mpirun must give
  std::optional<LinkOptions> link;  // --emulate-link; wraps every rank's transport
  InProcOptions inproc;             // threads backend tuning
  MpiOptions mpi;                   // mpi backend tuning
  // Wraps each hosted rank's transport (outside the link emulator) before its body runs, e.g.
  // to trace or to inject faults; empty: none. Called on the thread that calls run_world.
  TransportWrapper wrap;
  // > 0: the run-level watchdog. A hosted rank that reports no progress (report_progress) for
  // this many seconds is stuck, whatever it is stuck in (a computation, an allocation that
  // retries, a wait that ignores its time-out): run_world aborts the world with a message naming
  // the rank, its step and what it was doing, and gives up on it (its RankStatus: stuck).
  double stall_timeout_s = 0;
  Status validate() const;
};

struct RankStatus {
  int rank = 0;
  Status status;
  // The watchdog gave up on this rank: its thread is still running, detached; it keeps the
  // body (run_world's copy) and its transport alive. The caller should end the process soon.
  bool stuck = false;
};

// Where the calling rank is, for the watchdog (WorldOptions::stall_timeout_s): `step` (-1: not
// in a step) and `what` ("action 1F4", "optimizer step"). Cheap (a lock and a copy); a no-op on a
// thread that run_world did not start as a rank.
void report_progress(int64_t step, std::string_view what);
// True once run_world gave up on a rank of this process (RankStatus::stuck). Its thread still
// runs, so the process should end without running static destructors, which free what that
// thread may still use (OpenBLAS unmaps its buffers): main flushes and calls std::_Exit.
bool ranks_left_running();

// Runs body(transport) on every rank this process hosts and returns their Status in rank order:
// threads: P threads in this process, P entries; mpi: this process's rank, one entry (MPI is
// initialized on first use and finalized at exit; start the program with `mpirun -np P`).
// A rank whose body fails aborts the world, so the other ranks stop promptly with Unavailable.
// Errors before any rank runs (bad options, MPI world size != world_size, MPI not built) are
// returned as the Result's Status, identically on every process. With a watchdog
// (stall_timeout_s) each rank's body runs on its own thread, on a copy of `body`, so that a
// stuck one can be left behind: the stuck rank's status is DeadlineExceeded naming it, the others
// end with the abort it sent (Unavailable naming it) or their own errors.
Result<std::vector<RankStatus>> run_world(const WorldOptions& options,
                                          const std::function<Status(Transport&)>& body);

}  // namespace tightpipe
