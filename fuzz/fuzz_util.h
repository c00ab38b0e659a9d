// Helpers shared by the fuzz targets (fuzz/CMakeLists.txt): readers that take a path get the
// input through a file in a private scratch directory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tightpipe::fuzz {

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A directory of this process's own under $TMPDIR (created once, removed at exit).
const std::string& scratch_dir();
// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path. Aborts when the
// write fails: the target could not test anything.
std::string write_scratch(const std::string& name, std::string_view bytes);
// Empties scratch_dir()/name (a directory, created when missing) and returns its path.
std::string fresh_scratch_subdir(const std::string& name);
// A broken property of a reader (not an error it returns): prints and aborts, which the fuzzer
// reports as a crash with the input.
[[noreturn]] void property_failed(std::string_view what);

}  // namespace tightpipe::fuzz
