// usable_cores and address_space_left (host.h).
#include "tightpipe/host.h"

#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tightpipe {

int32_t UsableCores::count() const {
  const int32_t n = quota > 0 ? std::min(affinity, quota) : affinity;
  return std::max(1, n);
}

int32_t UsableCores::of_host(int32_t local_ranks) const {
  const int64_t ranks = std::max(1, local_ranks);
  const int64_t mine = std::max(1, affinity);
  const int64_t together =
      mine < online ? std::min<int64_t>(mine * ranks, std::max<int64_t>(online, mine)) : mine;
  const int64_t n = quota > 0 ? std::min<int64_t>(together, quota) : together;
  return static_cast<int32_t>(std::max<int64_t>(1, n));
}

UsableCores usable_cores() {
  UsableCores c;
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    c.affinity = std::max(1, CPU_COUNT(&set));
  } else {
    c.affinity = static_cast<int32_t>(std::max(1L, online));
  }
  c.online = static_cast<int32_t>(std::max<long>(c.affinity, online));
  // cgroup v2: "max 100000" (no quota) or "QUOTA PERIOD", both in microseconds.
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (in >> quota >> period && quota != "max" && period > 0) {
    char* end = nullptr;
    const double q = std::strtod(quota.c_str(), &end);
    if (end != quota.c_str() && q > 0) {
      c.quota = static_cast<int32_t>(std::min(1e6, std::ceil(q / period)));
    }
  }
  return c;
}

double address_space_left() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return HUGE_VAL;
  double mapped = 0;
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmSize:", 0) != 0) continue;
    mapped = std::strtod(line.c_str() + 7, nullptr) * 1024.0;
    break;
  }
  return std::max(0.0, static_cast<double>(rl.rlim_cur) - mapped);
}

}  // namespace tightpipe
