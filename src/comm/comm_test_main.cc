// comm_test's main: under mpirun it initializes MPI first (the mpi instances of the suite need
// it), otherwise it is a plain gtest main and the mpi instances skip.
#include <gtest/gtest.h>

#include <cstdio>

#include "tightpipe/transport_mpi.h"

namespace tightpipe::comm_test {
std::shared_ptr<MpiScope> g_mpi;  // set when launched by mpirun
}  // namespace tightpipe::comm_test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (tightpipe::launched_by_mpirun()) {
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
  return rc;
}
