// Internal: what the text/shard loader (loader.cc) and the indexed-dataset loader
// (gpt_dataset.cc) share.
#pragma once

#include <algorithm>
#include <memory>
#include <span>

#include "tightpipe/data.h"

namespace tightpipe::data_internal {

// The fingerprint fields of a loader's position: what its order depends on (the options' seed,
// shuffle buffer, replica, replicas and split; the worker count that splits the sources, 1 where
// the order does not depend on workers; the number of sources).
inline DataPosition position_fingerprint(const DataOptions& o, int32_t num_workers,
                                         int64_t num_sources) {
  DataPosition p;
  p.seed = o.seed;
  p.num_workers = num_workers;
  p.shuffle_buffer = o.shuffle_buffer;
  p.replica = o.replica;
  p.num_replicas = o.num_replicas;
  p.split = o.split;
  p.num_sources = num_sources;
  return p;
}

// An empty (B,T) batch of the options' shape, to be filled row by row with put_row.
inline Batch empty_batch(const DataOptions& o) {
  Batch batch;
  batch.batch_size = o.micro_batch_size;
  batch.seq_length = o.seq_length;
  batch.tokens.resize(static_cast<size_t>(o.micro_batch_size) * o.seq_length);
  batch.targets.resize(batch.tokens.size());
  return batch;
}

// Row b of `batch` from T + 1 consecutive stream tokens: tokens = row[0..T), targets =
// row[1..T] (the next token of each). REQUIRES: row.size() == T + 1, b < B.
inline void put_row(Batch& batch, int64_t b, std::span<const int32_t> row) {
  const int64_t T = batch.seq_length;
  std::copy_n(row.begin(), T, batch.tokens.begin() + b * T);
  std::copy_n(row.begin() + 1, T, batch.targets.begin() + b * T);
}

// OK when the fingerprint fields of `pos` (the saved position) equal those of `want` (the
// loader's own); otherwise InvalidArgument naming the first field that differs, both values and
// a hint.
Status check_position_fingerprint(const DataPosition& pos, const DataPosition& want);

// DataLoader::open for indexed datasets (options.blend, or options.path an indexed dataset
// prefix). REQUIRES: options.validate() is OK.
Result<std::unique_ptr<DataLoader>> open_indexed_loader(const DataOptions& options);

}  // namespace tightpipe::data_internal
