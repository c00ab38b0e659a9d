// Under `mpirun --enable-recovery -np 4` only (ctest comm_test_mpi_killed_rank): rank 1 dies
// mid-exchange without a word (the fault transport, tests/testutil/fault_transport.h, ends its
// process when it posts its 21st message); the survivors must end with an error naming rank 1
// within the time-out, not hang. Without mpirun the test skips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "fault_transport.h"
#include "tightpipe/base.h"
#include "tightpipe/transport_mpi.h"

namespace tightpipe {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<MpiScope> g_mpi;  // set when launched by mpirun

TEST(MpiKillTest, KilledRankEndsTheOthersWithAnError) {
  if (!g_mpi) GTEST_SKIP() << "runs under mpirun --enable-recovery";
  auto made = make_mpi_transport(g_mpi);
  ASSERT_TRUE(made.ok()) << made.status().to_string();
  const int rank = (*made)->rank();
  testutil::FaultOptions fault;
  fault.rank = 1;
  fault.after_sends = 20;
  fault.kind = testutil::FaultKind::kKill;
  std::unique_ptr<Transport> t = testutil::make_fault_transport(std::move(*made), rank, fault);
  const int p = t->size(), to = (rank + 1) % p, from = (rank + p - 1) % p;
  constexpr double kTimeout = 1.0;
  const double start = now_seconds();
  Status s;
  for (int iter = 0; iter < 100000 && s.ok(); ++iter) {
    std::vector<std::byte> out(1000, std::byte(iter & 0xff)), in(1000);
    auto r = t->irecv(from, 0, in);
    auto w = t->isend(to, 0, out);  // rank 1 dies here in iteration 20: no MPI_Finalize
    s = r->wait(kTimeout);
    if (s.ok()) s = w->wait(kTimeout);
  }
  if (!s.ok()) t->abort(s.to_string());
  const double took = now_seconds() - start;
  // Every survivor ends with DeadlineExceeded (its own wait) or Unavailable (a peer's abort);
  // the rank that waited on the dead one names it and the message it waited for.
  EXPECT_TRUE(s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable)
      << s.to_string();
  if (rank == 2) {
    EXPECT_THAT(s.message(), HasSubstr("recv from rank 1, tag 0, 1000 bytes"));
  }
  EXPECT_LT(took, kTimeout + 4.0);
  std::printf("rank %d survived: %s (after %.2f s)\n", rank, s.to_string().c_str(), took);
  if (!HasFailure()) std::printf("survivor ok\n");
  std::fflush(stdout);
}

}  // namespace
}  // namespace tightpipe

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (tightpipe::launched_by_mpirun()) {
    auto scope = tightpipe::MpiScope::acquire();
    if (!scope.ok()) {
      std::fprintf(stderr, "killed_rank_test: %s\n", scope.status().to_string().c_str());
      return 1;
    }
    tightpipe::g_mpi = *scope;
  }
  return RUN_ALL_TESTS();
}
