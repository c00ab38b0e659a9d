// MPI backend of Transport (transport.h): one process per rank, started by `mpirun -np P`.
// MpiScope owns MPI_Init/MPI_Finalize for the process (gloo mpi/context.h); every MPI transport
// holds it. Each transport works on its own duplicate of MPI_COMM_WORLD plus a second duplicate
// for abort messages, so transports created one after another (e.g. one per test) never see each
// other's messages.
//
// Waiting never calls MPI_Wait: Open MPI's blocking waits spin at 100% CPU, which steals the core
// of the rank being waited for when ranks share cores. Requests poll MPI_Test with a back-off from
// yields (for about the expected transfer time) to sleeps growing up to `max_poll_interval_us`;
// each poll also looks for abort messages.
//
// This header does not include mpi.h; it is usable whether or not MPI was built in
// (functions return FailedPrecondition when TIGHTPIPE_HAVE_MPI is not defined).
//
// Groups (Transport::make_group) are MPI_Comm_split of the parent's communicator; they share the
// world transport's abort channel (an abort anywhere stops every rank of the world) and lock, and
// their iallreduce_sum is MPI_Iallreduce, polled like a message. Errors name world ranks.
//
// Thread safety: as Transport. MPI calls are serialized by one mutex per world transport (shared
// by its groups) when MPI provides MPI_THREAD_MULTIPLE (requested), and by one mutex for the whole
// process when it provides only MPI_THREAD_SERIALIZED (the overlapped gradient reduction calls
// MPI from a helper thread), so either level is correct.
#pragma once

#include <atomic>
#include <memory>

#include "tightpipe/status.h"
#include "tightpipe/transport.h"

namespace tightpipe {

class MpiScope {
 public:
  // Initializes MPI on the first call and returns the process-wide scope; later calls return the
  // same one. MPI_Finalize runs at process exit (static destruction), unless MPI was already
  // initialized by someone else or a peer may have failed (see set_peer_failure).
  // FailedPrecondition when MPI is not built in or cannot init.
  static Result<std::shared_ptr<MpiScope>> acquire();

  ~MpiScope();
  MpiScope(const MpiScope&) = delete;
  MpiScope& operator=(const MpiScope&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // True when MPI provides MPI_THREAD_MULTIPLE (else MPI_THREAD_SERIALIZED).
  bool thread_multiple() const { return thread_multiple_; }

  // For the MPI transports: a wait timed out, an abort was seen or MPI reported an error, so a
  // peer may be dead. MPI_Finalize waits for every process (it can hang on a dead one), so at exit
  // it is skipped while this is set; mpirun then reports that this process ended without
  // finalizing, which is true of a failed job. A later successful collective (creating a new
  // transport) clears it.
  void set_peer_failure(bool failed) { peer_failure_.store(failed); }
  bool peer_failure() const { return peer_failure_.load(); }

 private:
  MpiScope() = default;
  int world_rank_ = 0;
  int world_size_ = 1;
  bool owns_init_ = false;
  bool thread_multiple_ = false;
  std::atomic<bool> peer_failure_{false};
};

// True when the environment says this process was started by mpirun/mpiexec (Open MPI, PMIx or
// MPICH variables); tests use it to decide whether the MPI backend can be exercised.
bool launched_by_mpirun();

// Seconds fail_launched_job() waits before the launcher may stop the job: time for the other
// ranks, which got this one's abort message, to print their own error line.
inline constexpr double kLauncherLingerS = 1.0;

// For main, after it printed this process's error and before it exits non-zero: makes the job
// fail as a whole, so that the launcher's exit status is non-zero too. Under mpirun (more than
// one process) it first waits linger_s: mpirun stops the whole job once a process exits non-zero.
// Open MPI's mpirun exits non-zero by itself then, except with --enable-recovery, where it exits 0
// whatever its processes do (a non-zero exit, MPI_Abort, death by a signal): there this sends
// SIGTERM to the parent process (mpirun, or the orted it started on this node), which makes
// mpirun stop the job and exit 1. No-op outside mpirun. FailedPrecondition (for a note) when it
// cannot make sure of a non-zero exit: recovery on and the parent is not mpirun or orted.
// Plain POSIX; works whether or not MPI was built in.
Status fail_launched_job(double linger_s = kLauncherLingerS);

// Collective over MPI_COMM_WORLD: every process must call it, in the same order (it duplicates
// the world communicator twice).
Result<std::unique_ptr<Transport>> make_mpi_transport(std::shared_ptr<MpiScope> scope,
                                                      MpiOptions options = {});

}  // namespace tightpipe
