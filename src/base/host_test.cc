// usable_cores (host.h): the cores of the affinity mask, not the machine's, and the cores of a
// host's MPI ranks when a launcher bound each to its own.
#include "tightpipe/host.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <cmath>
#include <thread>
#include <vector>

namespace tightpipe {
namespace {

// The CPUs of the calling thread's mask, in order.
std::vector<int> cpus_of_this_thread() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.push_back(c);
  return out;
}

// usable_cores() on a thread bound to the first `n` CPUs of this process's mask (a thread's mask
// is its own: the test's other threads keep theirs).
UsableCores usable_cores_bound_to(const std::vector<int>& cpus, size_t n) {
  UsableCores got;
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (size_t i = 0; i < n; ++i) CPU_SET(cpus[i], &set);
    ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
    got = usable_cores();
  });
  t.join();
  return got;
}

TEST(UsableCoresTest, CountsTheAffinityMaskNotTheMachine) {
  const std::vector<int> cpus = cpus_of_this_thread();
  ASSERT_FALSE(cpus.empty());
  const UsableCores one = usable_cores_bound_to(cpus, 1);
  EXPECT_EQ(one.affinity, 1);
  EXPECT_GE(one.online, static_cast<int32_t>(cpus.size()));
  EXPECT_EQ(one.count(), 1);
  if (cpus.size() < 2) GTEST_SKIP() << "one CPU: no mask of two to try";
  const UsableCores two = usable_cores_bound_to(cpus, 2);
  EXPECT_EQ(two.affinity, 2);
  EXPECT_EQ(two.count(), two.quota > 0 ? std::min(2, two.quota) : 2);
}

TEST(UsableCoresTest, BoundRanksOfAHostAddTheirCoresUnboundOnesShare) {
  // mpirun -np 2 --bind-to core on 2 CPUs: each rank sees one, the host has two.
  EXPECT_EQ((UsableCores{.affinity = 1, .online = 2}).of_host(2), 2);
  // More bound ranks than CPUs: no more cores than the machine has.
  EXPECT_EQ((UsableCores{.affinity = 1, .online = 2}).of_host(4), 2);
  // Unbound (every rank sees every CPU): they share them.
  EXPECT_EQ((UsableCores{.affinity = 2, .online = 2}).of_host(4), 2);
  EXPECT_EQ((UsableCores{.affinity = 8, .online = 8}).of_host(1), 8);
  // A cgroup quota of 3 CPUs is shared by every process under it.
  EXPECT_EQ((UsableCores{.affinity = 4, .online = 16, .quota = 3}).of_host(4), 3);
  EXPECT_EQ((UsableCores{.affinity = 4, .online = 16, .quota = 3}).count(), 3);
  EXPECT_EQ((UsableCores{.affinity = 1, .online = 1}).of_host(0), 1);
}

TEST(AddressSpaceTest, UnlimitedWithoutALimit) {
  // ctest runs without ulimit -v; under one the value is what is left, never negative.
  const double left = address_space_left();
  EXPECT_GE(left, 0);
}

}  // namespace
}  // namespace tightpipe
