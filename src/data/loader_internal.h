// Internal: what the text/shard loader (loader.cc) and the indexed-dataset loader
// (gpt_dataset.cc) share.
#pragma once

#include <memory>

#include "tightpipe/data.h"

namespace tightpipe::data_internal {

// OK when the fingerprint fields of `saved` equal those of `want` (the loader's own); otherwise
// InvalidArgument naming the first field that differs, both values and a hint.
Status check_position_fingerprint(const DataPosition& saved, const DataPosition& want);

// DataLoader::open for indexed datasets (options.blend, or options.path an indexed dataset
// prefix). REQUIRES: options.validate() is OK.
Result<std::unique_ptr<DataLoader>> open_indexed_loader(const DataOptions& options);

}  // namespace tightpipe::data_internal
