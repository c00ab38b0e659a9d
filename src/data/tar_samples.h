// Internal: streams a tar shard through libarchive and groups its entries into WebDataset samples
// (consecutive entries with the same key; key = path up to the first dot of the basename, the rest
// is the extension), then decodes a sample into token ids. Used by the loader's workers.
//
// A TarSampleReader owns one libarchive handle (RAII, non-copyable); one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

struct archive;

namespace tightpipe::data_internal {

struct SamplePart {
  std::string name;       // entry path inside the tar
  std::string extension;  // after the first dot of the basename: "tokens", "json", "txt"
  int64_t offset = 0;     // byte offset of the entry's header in the (uncompressed) tar
  std::string bytes;
};

struct RawSample {
  std::string key;
  std::vector<SamplePart> parts;  // in archive order
};

// Splits an entry path into (key, extension) per WebDataset; nullopt when the basename has no dot
// or nothing before it (such entries are ignored, as WebDataset does).
std::optional<std::pair<std::string, std::string>> split_key(std::string_view entry_path);

class TarSampleReader {
 public:
  // Corruption for an empty (0-byte) file; IOError / NotFound when it cannot be opened.
  static Result<std::unique_ptr<TarSampleReader>> open(const std::string& path);
  ~TarSampleReader();
  TarSampleReader(const TarSampleReader&) = delete;
  TarSampleReader& operator=(const TarSampleReader&) = delete;

  // The next sample, nullopt at a clean end of archive. Corruption (naming the entry and byte
  // offset, without the file name: the caller adds it) for a truncated, damaged or non-tar file,
  // or for an archive without any sample.
  Result<std::optional<RawSample>> next();
  int64_t samples_read() const { return samples_read_; }

 private:
  TarSampleReader(std::string path, archive* a, int64_t file_size)
      : path_(std::move(path)), a_(a), file_size_(file_size) {}
  // Reads the next header+data into pending_; false at end of archive.
  Result<bool> read_entry();
  Status error_here(std::string_view what) const;
  Status check_end_marker() const;

  std::string path_;
  archive* a_;
  int64_t file_size_;
  std::optional<SamplePart> pending_;  // first entry of the next sample
  std::string pending_key_;
  std::string last_entry_ = "(none)";
  int64_t last_offset_ = 0;
  int64_t next_header_ = 0;  // where the next header should start
  int64_t samples_read_ = 0;
  bool done_ = false;
};

// Token ids of one sample: `.tokens` (little-endian, dtype from the sample's `.json` "dtype":
// uint16 (default) or int32/uint32), else `.txt` through the byte tokenizer. Corruption naming the
// entry and its offset for a bad size, bad dtype, unparsable json, an id >= vocab_size, or a sample
// with neither `.tokens` nor `.txt`.
Result<std::vector<int32_t>> decode_sample(const RawSample& sample, int32_t vocab_size);

}  // namespace tightpipe::data_internal
