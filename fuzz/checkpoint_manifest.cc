// The checkpoint's text files (`train --load DIR`): the manifest and data_position.json. Any
// bytes give a manifest or an error naming the file, never a crash or a huge allocation.
#include "fuzz_util.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view text = fuzz::as_text(data, size);
  const std::string dir = fuzz::fresh_scratch_subdir("ckpt");
  fuzz::write_scratch("ckpt/manifest.txt", text);
  if (auto m = nn::load_manifest(dir); m.ok()) {
    (void)nn::check_manifest_shape(dir, *m, nn::GptConfig{});
  }
  (void)DataPosition::from_json(text);
  return 0;
}
