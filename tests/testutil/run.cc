#include "run.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tightpipe::testutil {

std::string make_temp_dir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (!mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed for " + templ);
  return templ;
}

CommandResult run_command(const std::string& command) {
  static const std::string dir = make_temp_dir("tp-run");
  static int counter = 0;
  const std::string out_path = dir + "/out" + std::to_string(counter);
  const std::string err_path = dir + "/err" + std::to_string(counter++);
  const std::string full = "(" + command + ") >" + out_path + " 2>" + err_path + " </dev/null";
  const int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  auto slurp = [](const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

std::string tightpipe_binary() { return std::string(TP_BINARY_DIR) + "/tools/tightpipe/tightpipe"; }

}  // namespace tightpipe::testutil
