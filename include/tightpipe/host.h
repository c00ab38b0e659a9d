// What this process may use of its machine: its cores and the address space it has left. The
// one definition every command uses (train's oversubscription note and memory check, plan's
// this-cpu preset, report's reader threads).
#pragma once

#include <cstdint>

namespace tightpipe {

// The cores this process may run on: its affinity mask (sched_getaffinity: taskset, mpirun
// --bind-to core), at most the cgroup's CPU quota (cpu.max, rounded up).
struct UsableCores {
  int32_t affinity = 1;   // CPUs in this process's affinity mask (>= 1)
  int32_t online = 1;     // online CPUs of the machine (>= affinity)
  int32_t quota = 0;      // the cgroup's cpu.max in CPUs, rounded up; 0: no quota
  int32_t count() const;  // min(affinity, quota), >= 1
  // The cores `local_ranks` processes of one host (this one among them, each like it) use
  // together: processes a launcher bound to part of the machine (affinity < online) have cores of
  // their own, so theirs add up, to at most `online`; unbound ones share the same cores. At most
  // the quota (the cgroup's, which they share).
  int32_t of_host(int32_t local_ranks) const;
};
// The calling thread's view (sched_getaffinity(0) is the calling thread's mask, which a new
// thread inherits).
UsableCores usable_cores();

// The address-space limit (RLIMIT_AS, `ulimit -v`) less what this process maps (VmSize), in
// bytes; +inf without a limit. What is reserved but not resident (thread stacks, malloc arenas,
// OpenBLAS's buffers) counts against it, not against MemAvailable or a cgroup.
double address_space_left();

}  // namespace tightpipe
