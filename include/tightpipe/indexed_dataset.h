// Megatron-LM's indexed dataset: a corpus of token sequences in two files, `PREFIX.bin` (the
// tokens, one fixed-width little-endian integer each) and `PREFIX.idx` (where each sequence lies
// and which sequences make up each document). This is what Megatron's `--data-path PREFIX` reads
// and its tools/preprocess_data.py writes, so corpora tokenized there train here unchanged.
//
// .idx layout (little-endian, no padding; docs/data_format.md):
//   bytes 0..8    magic "MMIDIDX\x00\x00"
//   uint64        version, 1
//   uint8         dtype code of the .bin tokens (IndexedDtype)
//   uint64        N, the number of sequences
//   uint64        D + 1, the number of document indices (D documents)
//   int32[N]      sequence lengths in tokens
//   int64[N]      sequence byte offsets into the .bin
//   int64[D + 1]  document indices: 0, then the sequence index where each document ends, so
//                 document d is the sequences [doc[d], doc[d + 1]) (an empty document repeats one)
//
// IndexedDataset maps both files read-only (RAII: unmapped in the destructor; movable, not
// copyable) and validates every header field, count, length, pointer and document index against
// the file sizes in open(), so no access afterwards can read outside them. Its const methods are
// thread-safe. IndexedDatasetWriter writes `PREFIX.bin.tmp` and `PREFIX.idx.tmp` and renames them
// in finish(); a writer destroyed before finish() removes them. Not thread-safe.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tightpipe/output_file.h"
#include "tightpipe/status.h"

namespace tightpipe {

// Megatron's DType codes (megatron/core/datasets/indexed_dataset.py).
enum class IndexedDtype : uint8_t {
  kUint8 = 1,
  kInt8 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat64 = 6,
  kFloat32 = 7,
  kUint16 = 8,
};

// "uint16", "int32"... (numpy's names).
std::string_view indexed_dtype_name(IndexedDtype dtype);
// Bytes per token: 1, 2, 4 or 8.
int indexed_dtype_size(IndexedDtype dtype);
// The dtype Megatron's preprocess_data.py picks for a vocabulary (DType.optimal_dtype): uint16
// below 65,500 ids, else int32.
IndexedDtype indexed_dtype_for_vocab(int64_t vocab_size);
// PREFIX.idx and PREFIX.bin.
std::string indexed_idx_path(std::string_view prefix);
std::string indexed_bin_path(std::string_view prefix);

// The sequences [first, end) that make up one document.
struct DocumentSequences {
  int64_t first = 0;
  int64_t end = 0;
};

class IndexedDataset {
 public:
  // Maps PREFIX.idx and PREFIX.bin and validates them. Errors (one line naming the file, the value
  // and a hint): NotFound / InvalidArgument / IOError for a missing or unreadable file
  // (check_input_file), Corruption for a bad magic, version, dtype code (the float and int64
  // codes too: token ids are integers that fit int32), counts that do not match the .idx size,
  // a negative length, a pointer not aligned to the dtype or a sequence beyond the .bin, document
  // indices that do not start at 0, decrease, or do not end at N.
  static Result<IndexedDataset> open(const std::string& prefix);

  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;
  IndexedDataset(const IndexedDataset&) = delete;
  IndexedDataset& operator=(const IndexedDataset&) = delete;
  ~IndexedDataset();

  const std::string& prefix() const { return prefix_; }
  IndexedDtype dtype() const { return dtype_; }
  int64_t num_sequences() const { return num_sequences_; }
  int64_t num_documents() const { return num_doc_indices_ - 1; }
  int64_t num_tokens() const { return num_tokens_; }  // the sum of the sequence lengths

  // REQUIRES: 0 <= i < num_sequences().
  int64_t sequence_length(int64_t i) const;
  // Byte offset of sequence i in the .bin. REQUIRES: 0 <= i < num_sequences().
  int64_t sequence_pointer(int64_t i) const;
  // The tokens of sequence i as int32. REQUIRES: 0 <= i < num_sequences().
  std::vector<int32_t> sequence(int64_t i) const;
  // Tokens [offset, offset + out.size()) of sequence i into `out` (the loader's copy, no
  // allocation). REQUIRES: the range lies inside the sequence.
  void read_tokens(int64_t i, int64_t offset, std::span<int32_t> out) const;
  // The .bin tokens of sequence i in their stored type, e.g. sequence_view<uint16_t>(i).
  // REQUIRES: T matches dtype() (uint8_t, int8_t, int16_t, int32_t or uint16_t).
  template <typename T>
  std::span<const T> sequence_view(int64_t i) const {
    check_view(sizeof(T), dtype_of<T>(), i);
    return {reinterpret_cast<const T*>(bin_.data() + sequence_pointer(i)),
            static_cast<size_t>(sequence_length(i))};
  }
  // Document index entry k (0 <= k <= num_documents()): 0 for k = 0, else where document k - 1
  // ends. REQUIRES: k in range.
  int64_t document_index(int64_t k) const;
  // REQUIRES: 0 <= d < num_documents().
  DocumentSequences document(int64_t d) const;

 private:
  class Mapping;
  IndexedDataset() = default;
  template <typename T>
  static constexpr IndexedDtype dtype_of() {
    static_assert(std::is_same_v<T, uint8_t> || std::is_same_v<T, int8_t> ||
                      std::is_same_v<T, int16_t> || std::is_same_v<T, int32_t> ||
                      std::is_same_v<T, uint16_t>,
                  "sequence_view<T>: T is one of uint8_t, int8_t, int16_t, int32_t, uint16_t");
    if constexpr (std::is_same_v<T, uint8_t>) return IndexedDtype::kUint8;
    if constexpr (std::is_same_v<T, int8_t>) return IndexedDtype::kInt8;
    if constexpr (std::is_same_v<T, int16_t>) return IndexedDtype::kInt16;
    if constexpr (std::is_same_v<T, int32_t>) return IndexedDtype::kInt32;
    return IndexedDtype::kUint16;
  }
  void check_view(size_t size, IndexedDtype want, int64_t i) const;

  std::string prefix_;
  std::unique_ptr<Mapping> idx_map_, bin_map_;
  std::span<const uint8_t> idx_, bin_;
  IndexedDtype dtype_ = IndexedDtype::kUint16;
  int64_t num_sequences_ = 0;
  int64_t num_doc_indices_ = 1;
  int64_t num_tokens_ = 0;
};

class IndexedDatasetWriter {
 public:
  // Creates PREFIX.bin.tmp (IOError naming it when the directory is missing or not writable).
  // `dtype` must be an integer code that holds int32 ids: uint8, int8, int16, int32 or uint16
  // (InvalidArgument otherwise).
  static Result<std::unique_ptr<IndexedDatasetWriter>> create(const std::string& prefix,
                                                              IndexedDtype dtype);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // Appends one document made of sequences of the given lengths (summing to tokens.size();
  // none for an empty document). InvalidArgument when a token does not fit the dtype (naming the
  // token, its value and the document) or the lengths do not add up; IOError when a write fails.
  Status add_document(std::span<const int32_t> tokens, std::span<const int64_t> sequence_lengths);
  // One document of one sequence (no sequence when `tokens` is empty).
  Status add_document(std::span<const int32_t> tokens);
  // Writes PREFIX.idx.tmp, then renames both .tmp files to PREFIX.bin and PREFIX.idx.
  // REQUIRES: called once; no add_document afterwards.
  Status finish();

  int64_t num_documents() const { return static_cast<int64_t>(document_indices_.size()) - 1; }
  int64_t num_sequences() const { return static_cast<int64_t>(sequence_lengths_.size()); }
  int64_t num_tokens() const { return num_tokens_; }
  IndexedDtype dtype() const { return dtype_; }

 private:
  IndexedDatasetWriter(std::string prefix, IndexedDtype dtype);
  Status write_bin(const void* data, size_t bytes);
  Status write_tokens(std::span<const int32_t> tokens, size_t width);  // at `width` bytes each

  std::string prefix_;
  IndexedDtype dtype_;
  OutputFile bin_;  // PREFIX.bin through its .tmp (renamed by finish, removed otherwise)
  std::vector<int32_t> sequence_lengths_;
  std::vector<int64_t> document_indices_{0};
  std::vector<uint8_t> buffer_;  // the slice of a document being written
  int64_t num_tokens_ = 0;
  bool finished_ = false;
};

}  // namespace tightpipe
