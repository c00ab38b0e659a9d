#include "commands.h"

namespace tightpipe::cli {
int cmd_schedule(int, char**) { return report_error("schedule", Status::internal("not built yet")); }
}  // namespace tightpipe::cli
