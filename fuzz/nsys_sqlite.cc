// The Nsight Systems export reader (`report x.sqlite`): any bytes in the file give a trace or an
// error naming the file, never a crash.
#include "fuzz_util.h"
#include "tightpipe/gpu_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string path = fuzz::write_scratch("rank0.sqlite", fuzz::as_text(data, size));
  auto got = read_nsys_sqlite(path);
  if (!got.ok() && got.status().message().find(path) == std::string::npos) {
    fuzz::property_failed("the error does not name the file: " + got.status().to_string());
  }
  return 0;
}
