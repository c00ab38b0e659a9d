// Runs the tightpipe binary of this build and captures its output and exit code.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

namespace tightpipe::testing_nn {

struct RunResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

// Runs a shell command line, stdout and stderr together.
inline RunResult run_shell(const std::string& cmd) {
  RunResult r;
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) r.output += buf;
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline const std::string kTightpipe = std::string(TP_BINARY_DIR) + "/tools/tightpipe/tightpipe";

inline RunResult run_tightpipe(const std::string& args) {
  return run_shell(kTightpipe + " " + args);
}

// One line on stderr, "tightpipe <command>: error: ...", naming `needle`, with a hint; exit `code`.
inline void expect_one_line_error(const RunResult& r, int code, const std::string& needle) {
  EXPECT_EQ(r.code, code) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << "'" << needle << "' not in: " << r.output;
  EXPECT_NE(r.output.find("hint:"), std::string::npos) << r.output;
}

inline std::string fresh_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() /
           ("tp_nn_cli_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline const std::string kText = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
inline const std::string kTiny =
    "--pp 1 --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 32 "
    "--micro-batch-size 4 --eval-iters 2 --data-path " +
    kText;

}  // namespace tightpipe::testing_nn
