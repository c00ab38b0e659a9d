#include "commands.h"

// Placeholder until this subcommand lands; its owner replaces this file.
namespace tightpipe::cli {
int cmd_data(int, char**) { return report_error("data", Status::internal("not built yet")); }
}  // namespace tightpipe::cli
