// The process's side of the launcher contract (transport_mpi.h): whether mpirun started it, and
// what it does on its way out after an error so that mpirun exits non-zero too. Plain POSIX: built
// with and without MPI.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>

#include "tightpipe/base.h"
#include "tightpipe/transport_mpi.h"

namespace tightpipe {
namespace {

// The number of processes the launcher started (0: not known).
int launched_world_size() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* s = std::getenv(v);
    if (s == nullptr) continue;
    auto n = parse_int(s);
    if (n.ok() && *n > 0 && *n <= 1 << 20) return static_cast<int>(*n);
  }
  return 0;
}

// Open MPI's mpirun passes --enable-recovery (or --mca orte_enable_recovery 1) to its processes
// as this variable.
bool open_mpi_recovery_enabled() {
  const char* s = std::getenv("OMPI_MCA_orte_enable_recovery");
  if (s == nullptr) return false;
  const std::string_view v = s;
  return v == "1" || v == "true" || v == "yes" || v == "on" || v == "t" || v == "y";
}

// The command name of a process (/proc/PID/comm), empty when it cannot be read.
std::string process_name(pid_t pid) {
  auto text = read_file(fmt::format("/proc/{}/comm", pid));
  if (!text.ok()) return "";
  std::string name = std::move(*text);
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r')) name.pop_back();
  return name;
}

// Open MPI's launcher on this node: mpirun itself (its aliases) or the daemon it started here.
bool is_open_mpi_launcher(std::string_view name) {
  return name == "mpirun" || name == "mpiexec" || name == "orterun" || name == "orted";
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(v) != nullptr) return true;
  }
  return false;
}

Status fail_launched_job(double linger_s) {
  if (!launched_by_mpirun()) return OkStatus();
  // The other processes of the job got this one's abort message or run into their own time-out;
  // the launcher stops them once this one exits, so give them a moment to print their line.
  if (launched_world_size() > 1 && linger_s > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(linger_s));
  }
  if (!open_mpi_recovery_enabled()) return OkStatus();  // mpirun fails the job on our exit status
  // With recovery on, mpirun exits 0 whatever its processes do (a non-zero exit status,
  // MPI_Abort, death by a signal); a SIGTERM to mpirun (or to its daemon, which mpirun then
  // loses) makes it stop the job and exit non-zero.
  const pid_t parent = getppid();
  const std::string name = process_name(parent);
  if (!is_open_mpi_launcher(name)) {
    return Status::failed_precondition(fmt::format(
        "under mpirun --enable-recovery, but the parent process {} ('{}') is not mpirun or orted, "
        "so mpirun may exit 0 although this process failed; hint: start tightpipe directly "
        "under mpirun, or check every rank's output",
        parent, printable(name)));
  }
  if (kill(parent, SIGTERM) != 0) {
    return Status::failed_precondition(fmt::format(
        "under mpirun --enable-recovery: could not signal {} (pid {}) to fail the job, so it may "
        "exit 0 although this process failed; hint: check every rank's output",
        name, parent));
  }
  return OkStatus();
}

}  // namespace tightpipe
