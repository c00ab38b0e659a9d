#include "commands.h"

// Placeholder until this subcommand lands; its owner replaces this file.
namespace tightpipe::cli {
int cmd_simulate(int, char**) { return report_error("simulate", Status::internal("not built yet")); }
}  // namespace tightpipe::cli
