// Test helpers: run a command line through the shell and capture its exit code and output;
// make a fresh temporary directory.
#pragma once

#include <string>

namespace tightpipe::testutil {

struct CommandResult {
  int exit_code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

// Runs `command` with /bin/sh; stdout and stderr are captured separately.
CommandResult run_command(const std::string& command);

// A new empty directory under $TMPDIR (or /tmp), unique per call.
std::string make_temp_dir(const std::string& prefix);

// Path of the built tightpipe binary.
std::string tightpipe_binary();

}  // namespace tightpipe::testutil
