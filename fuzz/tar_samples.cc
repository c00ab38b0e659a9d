// A tar shard (`train --data-path shard.tar`): libarchive's stream grouped into WebDataset
// samples and decoded into token ids. Any bytes give samples or an error naming the entry and
// offset, never a crash.
#include "data/tar_samples.h"

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string path = fuzz::write_scratch("shard.tar", fuzz::as_text(data, size));
  auto reader = data_internal::TarSampleReader::open(path);
  if (!reader.ok()) return 0;
  for (;;) {
    auto sample = (*reader)->next();
    if (!sample.ok() || !sample->has_value()) break;
    (void)data_internal::decode_sample(**sample, 256);
  }
  return 0;
}
