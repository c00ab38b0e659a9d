#include "commands.h"

// Placeholder until this subcommand lands; its owner replaces this file.
namespace tightpipe::cli {
int cmd_train(int, char**) { return report_error("train", Status::internal("not built yet")); }
int cmd_sample(int, char**) { return report_error("sample", Status::internal("not built yet")); }
}  // namespace tightpipe::cli
