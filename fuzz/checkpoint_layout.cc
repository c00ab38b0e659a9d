// A checkpoint's small layout files (`train --load DIR`): the tracker (a --save root's latest
// step) and parallel.json (the data-parallel size it was saved with). Any bytes in either give a
// resolved checkpoint or an error naming the file, never a crash, a hang or a huge allocation.
#include <filesystem>

#include "exec/train_internal.h"
#include "fuzz_util.h"
#include "tightpipe/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view text = fuzz::as_text(data, size);
  // A --save root holding only the tracker, and beside it an iteration with the layout file.
  const std::string root = fuzz::fresh_scratch_subdir("root");
  fuzz::write_scratch(std::string("root/") + nn::kTrackerFile, text);
  std::filesystem::create_directories(std::filesystem::path(root) / "iter_0000001");
  fuzz::write_scratch(std::string("root/iter_0000001/") + train_internal::kParallelFile, text);
  (void)nn::resolve_checkpoint(root);
  if (auto dp = train_internal::saved_data_parallel_size(root + "/iter_0000001"); dp.ok()) {
    if (*dp < 1) __builtin_trap();  // the reader promises a size of at least 1
  }
  return 0;
}
