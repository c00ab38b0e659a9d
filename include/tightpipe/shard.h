// The shard writer: turns text files into WebDataset-style POSIX tar shards that the DataLoader
// (data.h) reads. Each sample is two entries with the same key:
//   {key}.tokens  little-endian token ids (uint16 when the vocabulary fits, else int32)
//   {key}.json    {"source", "offset", "length", "tokenizer", "vocab_size", "dtype", "num_tokens"}
// Shards are `DIR/shard-000000.tar`, `shard-000001.tar`..., written through libarchive in the
// pax-restricted (POSIX) format with fixed mtime/owner, so the same input gives byte-identical
// shards; each shard is written to `*.tmp` and renamed when complete. docs/data_format.md has the
// full format.
//
// Pure functions over files; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

namespace tightpipe {

struct ShardWriterOptions {
  std::vector<std::string>
      inputs;           // text files or directories (their regular files, recursively, sorted)
  std::string out_dir;  // created if missing
  int64_t samples_per_shard = 0;    // > 0: start a new shard after this many samples
  int64_t shard_size = 64ll << 20;  // bytes; a new shard starts before this would be exceeded
  std::string tokenizer = "byte";   // only "byte" (vocabulary 256)
  int32_t seq_length = 1024;        // T: samples are chunks of T+1 tokens; 0 = one sample per file

  Status validate() const;
};

struct ShardWriteSummary {
  std::vector<std::string> shards;  // paths, in order
  int64_t samples = 0;
  int64_t tokens = 0;
  int64_t bytes = 0;  // total size of the shards
  std::string dtype;  // "uint16" or "int32"
};

// Errors: InvalidArgument (options), NotFound (input), IOError (writing).
Result<ShardWriteSummary> write_shards(const ShardWriterOptions& options);

// "64MiB", "1.5GiB", "100MB", "4096", "512KiB", "2k" (k/K = KiB) -> bytes. InvalidArgument else.
Result<int64_t> parse_byte_size(std::string_view text);

}  // namespace tightpipe
