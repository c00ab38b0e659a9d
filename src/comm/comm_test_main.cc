// comm_test's main: under mpirun it initializes MPI first (the mpi instances of the suite need
// it), otherwise it is a plain gtest main and the mpi instances skip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#ifdef TIGHTPIPE_HAVE_MPI
#include <mpi.h>
#endif

#include "tightpipe/transport_mpi.h"

namespace tightpipe::comm_test {
std::shared_ptr<MpiScope> g_mpi;  // set when launched by mpirun
}  // namespace tightpipe::comm_test

namespace {
bool g_serialized_init = false;  // main called MPI_Init_thread (TP_TEST_MPI_SERIALIZED)
}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (tightpipe::launched_by_mpirun()) {
#ifdef TIGHTPIPE_HAVE_MPI
    // TP_TEST_MPI_SERIALIZED=1: MPI initialized at MPI_THREAD_SERIALIZED, as some MPI builds
    // provide; MpiScope then serializes every MPI call of the process (transport_mpi.h).
    if (std::getenv("TP_TEST_MPI_SERIALIZED") != nullptr) {
      int provided = 0;
      MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
      g_serialized_init = true;
    }
#endif
    auto scope = tightpipe::MpiScope::acquire();
    if (!scope.ok()) {
      std::fprintf(stderr, "comm_test: %s\n", scope.status().to_string().c_str());
      return 1;
    }
    tightpipe::comm_test::g_mpi = *scope;
  }
  const int rc = RUN_ALL_TESTS();
  using tightpipe::comm_test::g_mpi;
  if (g_mpi) {
    // Tests provoke failures on purpose, after which MpiScope would skip MPI_Finalize. One more
    // collective (on every process, whatever it saw) shows every process is alive and clears
    // that (see MpiScope::set_peer_failure).
    auto t = tightpipe::make_mpi_transport(g_mpi);
    if (!t.ok()) std::fprintf(stderr, "comm_test: %s\n", t.status().to_string().c_str());
  }
#ifdef TIGHTPIPE_HAVE_MPI
  if (g_serialized_init && g_mpi) {             // MPI was ours to start, so it is ours to finalize
    const bool failed = g_mpi->peer_failure();  // as MpiScope: not while a peer may be gone
    g_mpi.reset();
    if (!failed) MPI_Finalize();
  }
#endif
  return rc;
}
