#include "fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tightpipe/base.h"

namespace tightpipe::fuzz {
namespace fs = std::filesystem;

const std::string& scratch_dir() {
  // Never destroyed: the atexit handler below runs after the destructors of statics that were
  // constructed after its registration, which would include this one.
  static const std::string* dir = [] {
    const fs::path p = fs::temp_directory_path() / ("tightpipe-fuzz-" + std::to_string(getpid()));
    fs::create_directories(p);
    auto* d = new std::string(p.string());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(*dir, ec);
    });
    return d;
  }();
  return *dir;
}

std::string write_scratch(const std::string& name, std::string_view bytes) {
  const std::string path = (fs::path(scratch_dir()) / name).string();
  const Status st = write_file(path, bytes);
  if (!st.ok()) property_failed("cannot write the scratch file: " + st.to_string());
  return path;
}

std::string fresh_scratch_subdir(const std::string& name) {
  const fs::path p = fs::path(scratch_dir()) / name;
  std::error_code ec;
  fs::remove_all(p, ec);
  fs::create_directories(p);
  return p.string();
}

void property_failed(std::string_view what) {
  std::fprintf(stderr, "fuzz property failed: %.*s\n", static_cast<int>(what.size()), what.data());
  std::abort();
}

}  // namespace tightpipe::fuzz
