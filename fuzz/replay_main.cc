// The fuzz targets' main() in builds without libFuzzer: runs each file named on the command line
// (a directory: each file in it, sorted) through LLVMFuzzerTestOneInput once. A reader that
// crashes, aborts or throws ends the program abnormally, which fails ctest fuzz_corpus.<name>.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "fuzz_util.h"
#include "tightpipe/base.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      std::vector<fs::path> dir;
      for (const auto& e : fs::directory_iterator(argv[i]))
        if (e.is_regular_file()) dir.push_back(e.path());
      std::sort(dir.begin(), dir.end());
      inputs.insert(inputs.end(), dir.begin(), dir.end());
    } else {
      inputs.emplace_back(argv[i]);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...: runs each input once\n", argv[0]);
    return 2;
  }
  for (const fs::path& p : inputs) {
    auto bytes = tightpipe::read_file(p.string());
    if (!bytes.ok()) {
      std::fprintf(stderr, "%s\n", bytes.status().to_string().c_str());
      return 1;
    }
    std::printf("%s (%zu bytes)\n", p.c_str(), bytes->size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size());
  }
  std::printf("%zu inputs ran\n", inputs.size());
  return 0;
}
