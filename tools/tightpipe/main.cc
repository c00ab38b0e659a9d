// tightpipe: pipeline-parallel training with measured and simulated bubbles.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "commands.h"

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
    "  report     bubble report of a training run: measured vs predicted, HTML, trace\n";
}  // namespace

int main(int argc, char** argv) {
  using namespace tightpipe::cli;
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  std::string_view cmd = argv[1];
  // Each subcommand sees its own name as argv[0].
  int sub_argc = argc - 1;
  char** sub_argv = argv + 1;
  if (cmd == "schedule") return cmd_schedule(sub_argc, sub_argv);
  if (cmd == "simulate") return cmd_simulate(sub_argc, sub_argv);
  if (cmd == "train") return cmd_train(sub_argc, sub_argv);
  if (cmd == "sample") return cmd_sample(sub_argc, sub_argv);
  if (cmd == "data") return cmd_data(sub_argc, sub_argv);
  if (cmd == "report") return cmd_report(sub_argc, sub_argv);
  std::fprintf(stderr,
               "tightpipe: unknown command '%s'\nhint: one of schedule, simulate, train, sample, "
               "data, report; see 'tightpipe --help'\n",
               argv[1]);
  return kExitUsage;
}
