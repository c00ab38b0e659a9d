// tightpipe: pipeline-parallel training with measured and simulated bubbles.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>

#include "commands.h"
#include "tightpipe/output_file.h"
#include "tightpipe/transport_mpi.h"

namespace {
constexpr const char* kUsage =
    "tightpipe: pipeline-parallel training that squeezes out and measures bubbles\n"
    "\n"
    "usage: tightpipe <command> [flags]   (tightpipe <command> --help for its flags)\n"
    "\n"
    "commands:\n"
    "  schedule   generate, print, lower and check pipeline schedules (gpipe, 1f1b, interleaved,\n"
    "             zb-h1, zb-h2, zb-v, looped-bfs) or validate your own CSV\n"
    "  simulate   predict step time, bubble ratio and memory of a schedule from a cost model\n"
    "  train      train the GPT model with a pipeline schedule on threads or MPI ranks\n"
    "  sample     generate text from a checkpoint\n"
    "  data       write WebDataset-style tar shards from text\n"
    "  report     bubble report of a training run: measured vs predicted, HTML, trace\n"
    "  plan       choose p, v, m, micro batch size, schedule, recompute and layer split under a\n"
    "             memory budget, and price each choice in time and dollars\n"
    "  tune       from a PyTorch model's measured modules and run: the split and schedule that\n"
    "             run fastest in PyTorch's runtime, in PyTorch's and torchtitan's forms\n";

int dispatch(std::string_view cmd, int sub_argc, char** sub_argv);

// Standard output after the command: everything it printed must have reached stdout (a full disk,
// /dev/full, a closed pipe with SIGPIPE ignored fail here, not silently). OK when it did; else
// one line naming stdout and the system's reason, and the exit status becomes an error.
int check_stdout(const char* cmd, int rc) {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  int err = errno;
  bool failed = !flushed || std::ferror(stdout);
  if (!failed) {
    // A close of a copy reports what only a close does (NFS, FUSE); the real stdout stays open.
    const int fd = ::dup(STDOUT_FILENO);
    if (fd >= 0 && ::close(fd) != 0 && errno != EINTR) {
      err = errno;
      failed = true;
    }
  }
  if (!failed) return rc;
  const std::string why = err != 0 ? tightpipe::output_error_reason(err)
                                   : "a write failed; hint: send stdout to another file or pipe";
  std::fprintf(stderr, "tightpipe %s: error: cannot write to stdout: %s\n", cmd, why.c_str());
  return rc == tightpipe::cli::kExitOk ? tightpipe::cli::kExitError : rc;
}

// The command's exit status; its error line is printed.
int run(int argc, char** argv) {
  using namespace tightpipe::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  const std::string_view cmd = argv[1];
  // The last resort: an exception no command turned into an error is still one line and exit 1
  // (a bug to report, or memory the machine does not have), never an abort with a core dump.
  try {
    return dispatch(cmd, argc - 1, argv + 1);  // each subcommand sees its own name as argv[0]
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "tightpipe %s: error: out of memory; hint: a smaller model, --num-microbatches "
                 "or --micro-batch-size, or a machine with more memory\n",
                 argv[1]);
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the OS refused where no command checked first: name the path and the OS reason.
    std::fprintf(
        stderr,
        "tightpipe %s: error: '%.200s': %.200s; hint: check the path, its kind (a file or a "
        "directory) and its permissions\n",
        argv[1], e.path1().c_str(), e.code().message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "tightpipe %s: error: internal error: %.200s; hint: this is a bug, please report "
                 "it with the command line\n",
                 argv[1], e.what());
  }
  return kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  // Not a terminal: a command's whole output (a grid, a CSV, a plan) stays in one buffer until
  // check_stdout flushes it, so a failure there knows the system's reason. (Progress lines of a
  // run are flushed as they come.)
  static char stdout_buffer[1 << 20];
  if (!::isatty(STDOUT_FILENO)) std::setvbuf(stdout, stdout_buffer, _IOFBF, sizeof(stdout_buffer));
  const int rc = check_stdout(argc > 1 ? argv[1] : "", run(argc, argv));
  if (rc != tightpipe::cli::kExitOk) {
    // Under mpirun: the job fails as a whole, mpirun's exit status included (--enable-recovery
    // too), after the other ranks had a moment to print their own line.
    std::fflush(stdout);
    std::fflush(stderr);
    const tightpipe::Status s = tightpipe::fail_launched_job();
    if (!s.ok()) std::fprintf(stderr, "tightpipe: note: %s\n", s.message().c_str());
    // A rank the watchdog gave up on still runs: no static destructors under its feet.
    if (tightpipe::ranks_left_running()) {
      std::fflush(stderr);
      std::_Exit(rc);
    }
  }
  return rc;
}

namespace {

int dispatch(std::string_view cmd, int sub_argc, char** sub_argv) {
  using namespace tightpipe::cli;
  if (cmd == "schedule") return cmd_schedule(sub_argc, sub_argv);
  if (cmd == "simulate") return cmd_simulate(sub_argc, sub_argv);
  if (cmd == "train") return cmd_train(sub_argc, sub_argv);
  if (cmd == "sample") return cmd_sample(sub_argc, sub_argv);
  if (cmd == "data") return cmd_data(sub_argc, sub_argv);
  if (cmd == "report") return cmd_report(sub_argc, sub_argv);
  if (cmd == "plan") return cmd_plan(sub_argc, sub_argv);
  if (cmd == "tune") return cmd_tune(sub_argc, sub_argv);
  std::fprintf(stderr,
               "tightpipe: unknown command '%.*s'\nhint: one of schedule, simulate, train, sample, "
               "data, report, plan, tune; see 'tightpipe --help'\n",
               static_cast<int>(cmd.size()), cmd.data());
  return kExitUsage;
}

}  // namespace
