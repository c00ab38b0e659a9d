// Megatron's indexed dataset (indexed_dataset.h): the mmap'd reader that validates everything in
// open(), and the writer.
#include "tightpipe/indexed_dataset.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/output_file.h"

namespace tightpipe {

static_assert(std::endian::native == std::endian::little,
              "the .bin/.idx files are little-endian and read in place");

namespace {

constexpr std::string_view kMagic("MMIDIDX\x00\x00", 9);
constexpr uint64_t kVersion = 1;
// magic, version, dtype code, sequence count, document index count.
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

// The .idx arrays start at byte 34, so they are not aligned: every read copies.
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void append(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

bool valid_code(uint8_t code) { return code >= 1 && code <= 8; }

// The dtypes that hold token ids: integers that fit int32.
bool is_token_dtype(IndexedDtype d) {
  switch (d) {
    case IndexedDtype::kUint8:
    case IndexedDtype::kInt8:
    case IndexedDtype::kInt16:
    case IndexedDtype::kInt32:
    case IndexedDtype::kUint16:
      return true;
    case IndexedDtype::kInt64:
    case IndexedDtype::kFloat64:
    case IndexedDtype::kFloat32:
      return false;
  }
  return false;
}

struct IdRange {
  int64_t lo, hi;
};
IdRange id_range(IndexedDtype d) {
  switch (d) {
    case IndexedDtype::kUint8:
      return {0, 255};
    case IndexedDtype::kInt8:
      return {-128, 127};
    case IndexedDtype::kInt16:
      return {-32768, 32767};
    case IndexedDtype::kUint16:
      return {0, 65535};
    default:
      return {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  }
}

// Converts n stored tokens at `src` to int32.
void to_int32(IndexedDtype d, const uint8_t* src, size_t n, int32_t* out) {
  if (n == 0) return;  // `out` may be null (an empty vector's data())
  switch (d) {
    case IndexedDtype::kUint8:
      for (size_t k = 0; k < n; ++k) out[k] = src[k];
      return;
    case IndexedDtype::kInt8:
      for (size_t k = 0; k < n; ++k) out[k] = static_cast<int8_t>(src[k]);
      return;
    case IndexedDtype::kInt16:
      for (size_t k = 0; k < n; ++k) out[k] = load<int16_t>(src + 2 * k);
      return;
    case IndexedDtype::kUint16:
      for (size_t k = 0; k < n; ++k) out[k] = load<uint16_t>(src + 2 * k);
      return;
    case IndexedDtype::kInt32:
      std::memcpy(out, src, n * sizeof(int32_t));
      return;
    default:
      TP_CHECK(false, "dtype ", static_cast<int>(d), " is not a token dtype");
  }
}

std::string dtype_code_list() {
  std::string s;
  for (int c = 1; c <= 8; ++c) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", c, indexed_dtype_name(static_cast<IndexedDtype>(c)));
  }
  return s;
}

}  // namespace

std::string_view indexed_dtype_name(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8:
      return "uint8";
    case IndexedDtype::kInt8:
      return "int8";
    case IndexedDtype::kInt16:
      return "int16";
    case IndexedDtype::kInt32:
      return "int32";
    case IndexedDtype::kInt64:
      return "int64";
    case IndexedDtype::kFloat64:
      return "float64";
    case IndexedDtype::kFloat32:
      return "float32";
    case IndexedDtype::kUint16:
      return "uint16";
  }
  return "?";
}

int indexed_dtype_size(IndexedDtype dtype) {
  switch (dtype) {
    case IndexedDtype::kUint8:
    case IndexedDtype::kInt8:
      return 1;
    case IndexedDtype::kInt16:
    case IndexedDtype::kUint16:
      return 2;
    case IndexedDtype::kInt32:
    case IndexedDtype::kFloat32:
      return 4;
    case IndexedDtype::kInt64:
    case IndexedDtype::kFloat64:
      return 8;
  }
  TP_CHECK(false, "unknown dtype code ", static_cast<int>(dtype));
  return 0;
}

IndexedDtype indexed_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? IndexedDtype::kUint16 : IndexedDtype::kInt32;
}

std::string indexed_idx_path(std::string_view prefix) { return std::string(prefix) + ".idx"; }
std::string indexed_bin_path(std::string_view prefix) { return std::string(prefix) + ".bin"; }

// ---------------------------------------------------------------------------------------------
// Reader

// One file mapped read-only; an empty file maps to an empty span (mmap refuses length 0).
class IndexedDataset::Mapping {
 public:
  static Result<std::unique_ptr<Mapping>> open(std::string_view what, const std::string& path) {
    // The descriptor the check opened is the one mapped (no second open a FIFO could take).
    TP_ASSIGN_OR_RETURN(const InputFile f, open_input_file(what, path, input_kind::kData));
    std::unique_ptr<Mapping> m(new Mapping());
    m->size_ = static_cast<size_t>(f.size());
    if (m->size_ > 0) {
      void* addr = ::mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, f.fd(), 0);
      if (addr == MAP_FAILED) {
        const int err = errno;
        return Status::io_error(fmt::format("{} '{}': cannot map its {} bytes: {}", what,
                                            printable(path, 200), m->size_, std::strerror(err)));
      }
      m->addr_ = addr;
    }
    return m;
  }
  ~Mapping() {
    if (addr_ != nullptr) ::munmap(addr_, size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(addr_), addr_ != nullptr ? size_ : 0};
  }

 private:
  Mapping() = default;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;
IndexedDataset::~IndexedDataset() = default;

Result<IndexedDataset> IndexedDataset::open(const std::string& prefix) {
  const std::string idx_path = indexed_idx_path(prefix);
  const std::string bin_path = indexed_bin_path(prefix);
  IndexedDataset ds;
  ds.prefix_ = prefix;
  TP_ASSIGN_OR_RETURN(ds.idx_map_, Mapping::open("index (.idx)", idx_path));
  TP_ASSIGN_OR_RETURN(ds.bin_map_, Mapping::open("data (.bin)", bin_path));
  ds.idx_ = ds.idx_map_->bytes();
  ds.bin_ = ds.bin_map_->bytes();
  const std::span<const uint8_t> idx = ds.idx_;
  const uint64_t idx_size = idx.size();
  const uint64_t bin_size = ds.bin_.size();
  const std::string idx_shown = printable(idx_path, 200);
  const std::string bin_shown = printable(bin_path, 200);
  auto idx_error = [&](const std::string& what) {
    return Status::corruption(fmt::format("'{}': {}", idx_shown, what));
  };

  // Header.
  const std::string_view head(reinterpret_cast<const char*>(idx.data()),
                              std::min<size_t>(idx.size(), kMagic.size()));
  if (head != kMagic.substr(0, head.size())) {
    return idx_error(fmt::format(
        "magic '{}', expected 'MMIDIDX\\x00\\x00'; hint: not a Megatron-LM indexed dataset index "
        "(written by tools/preprocess_data.py or 'tightpipe data preprocess')",
        printable(head)));
  }
  if (idx_size < static_cast<uint64_t>(kHeaderBytes)) {
    return idx_error(fmt::format(
        "{} bytes, shorter than the {}-byte header; hint: the file was cut short, write it again",
        idx_size, kHeaderBytes));
  }
  const uint64_t version = load<uint64_t>(idx.data() + 9);
  if (version != kVersion) {
    return idx_error(fmt::format(
        "version {}, expected {}; hint: the only version Megatron-LM writes is 1: the header is "
        "damaged",
        version, kVersion));
  }
  const uint8_t code = idx[17];
  if (!valid_code(code)) {
    return idx_error(fmt::format("dtype code {}, expected one of {}; hint: the header is damaged",
                                 code, dtype_code_list()));
  }
  ds.dtype_ = static_cast<IndexedDtype>(code);
  if (!is_token_dtype(ds.dtype_)) {
    return idx_error(fmt::format(
        "dtype code {} ({}): token ids must be integers that fit int32; hint: Megatron writes "
        "uint16 (code 8) below 65,500 ids and int32 (code 4) above",
        code, indexed_dtype_name(ds.dtype_)));
  }
  const int64_t width = indexed_dtype_size(ds.dtype_);

  // Counts against the .idx size: N sequences take 12 bytes each, D + 1 document indices 8.
  const uint64_t n = load<uint64_t>(idx.data() + 18);
  const uint64_t d1 = load<uint64_t>(idx.data() + 26);
  const uint64_t body = idx_size - kHeaderBytes;
  if (n > body / 12 || d1 > body / 8 || 12 * n + 8 * d1 > body) {
    return idx_error(fmt::format(
        "{} sequences and {} document indices overrun the file: they take 12 and 8 bytes each "
        "after the {}-byte header, the file has {} bytes there; hint: the file was cut short or "
        "its header is damaged",
        n, d1, kHeaderBytes, body));
  }
  if (d1 == 0) {
    return idx_error(
        "0 document indices, expected at least 1 (the leading 0); hint: the header is damaged");
  }
  if (12 * n + 8 * d1 != body) {
    const uint64_t extra = body - 12 * n - 8 * d1;
    return idx_error(fmt::format(
        "{} bytes after the document indices ({} sequences, {} document indices); hint: {}", extra,
        n, d1,
        extra == n ? "a multimodal dataset (one sequence mode byte each): tightpipe reads text "
                     "datasets only"
                   : "the counts in the header disagree with the file size: it is damaged"));
  }
  ds.num_sequences_ = static_cast<int64_t>(n);
  ds.num_doc_indices_ = static_cast<int64_t>(d1);

  // Every sequence inside the .bin.
  const uint8_t* lengths = idx.data() + kHeaderBytes;
  const uint8_t* pointers = lengths + 4 * n;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t len = load<int32_t>(lengths + 4 * i);
    const int64_t ptr = load<int64_t>(pointers + 8 * i);
    if (len < 0) {
      return idx_error(fmt::format(
          "sequence {}: length {} is negative; hint: the sequence lengths are damaged", i, len));
    }
    if (ptr < 0 || ptr % width != 0) {
      return idx_error(fmt::format(
          "sequence {}: byte pointer {} is {}; hint: the sequence pointers are damaged", i, ptr,
          ptr < 0 ? "negative"
                  : fmt::format("not a multiple of the {}-byte {}", width,
                                indexed_dtype_name(ds.dtype_))));
    }
    const uint64_t bytes = static_cast<uint64_t>(len) * static_cast<uint64_t>(width);
    if (static_cast<uint64_t>(ptr) > bin_size || bytes > bin_size - static_cast<uint64_t>(ptr)) {
      return Status::corruption(fmt::format(
          "'{}': {} bytes, but sequence {} of '{}' ({} tokens at byte {}) ends at byte {}; hint: "
          "the .bin is shorter than its .idx says: cut short, or the two files are from different "
          "datasets",
          bin_shown, bin_size, i, idx_shown, len, ptr, static_cast<uint64_t>(ptr) + bytes));
    }
    ds.num_tokens_ += len;
  }

  // Document indices: 0, non-decreasing, ending at N.
  const uint8_t* docs = pointers + 8 * n;
  int64_t prev = 0;
  for (uint64_t k = 0; k < d1; ++k) {
    const int64_t v = load<int64_t>(docs + 8 * k);
    if (k == 0 && v != 0) {
      return idx_error(fmt::format(
          "document index 0 is {}, expected 0; hint: the document indices are damaged", v));
    }
    if (v < prev || static_cast<uint64_t>(v) > n) {
      return idx_error(fmt::format(
          "document index {} is {}, expected between the previous one ({}) and the sequence "
          "count ({}); hint: document indices never decrease: they are damaged",
          k, v, prev, n));
    }
    prev = v;
  }
  if (static_cast<uint64_t>(prev) != n) {
    return idx_error(fmt::format(
        "the last document index is {}, expected the sequence count {}; hint: every sequence "
        "belongs to a document: the document indices are damaged",
        prev, n));
  }
  return ds;
}

int64_t IndexedDataset::sequence_length(int64_t i) const {
  TP_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
  return load<int32_t>(idx_.data() + kHeaderBytes + 4 * i);
}

int64_t IndexedDataset::sequence_pointer(int64_t i) const {
  TP_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
  return load<int64_t>(idx_.data() + kHeaderBytes + 4 * num_sequences_ + 8 * i);
}

int64_t IndexedDataset::document_index(int64_t k) const {
  TP_CHECK(k >= 0 && k < num_doc_indices_, "document index ", k, " of ", num_doc_indices_);
  return load<int64_t>(idx_.data() + kHeaderBytes + 12 * num_sequences_ + 8 * k);
}

DocumentSequences IndexedDataset::document(int64_t d) const {
  TP_CHECK(d >= 0 && d < num_documents(), "document ", d, " of ", num_documents());
  return {document_index(d), document_index(d + 1)};
}

std::vector<int32_t> IndexedDataset::sequence(int64_t i) const {
  std::vector<int32_t> out(static_cast<size_t>(sequence_length(i)));
  read_tokens(i, 0, out);
  return out;
}

void IndexedDataset::read_tokens(int64_t i, int64_t offset, std::span<int32_t> out) const {
  const int64_t len = sequence_length(i);
  TP_CHECK(offset >= 0 && offset <= len && static_cast<int64_t>(out.size()) <= len - offset,
           "tokens [", offset, ", ", offset + static_cast<int64_t>(out.size()), ") of sequence ", i,
           " of length ", len);
  const int64_t width = indexed_dtype_size(dtype_);
  to_int32(dtype_, bin_.data() + sequence_pointer(i) + offset * width, out.size(), out.data());
}

void IndexedDataset::check_view(size_t size, IndexedDtype want, int64_t i) const {
  TP_CHECK(want == dtype_ && static_cast<int>(size) == indexed_dtype_size(dtype_),
           "sequence_view of ", indexed_dtype_name(want), " on a ", indexed_dtype_name(dtype_),
           " dataset");
  TP_CHECK(i >= 0 && i < num_sequences_, "sequence ", i, " of ", num_sequences_);
}

// ---------------------------------------------------------------------------------------------
// Writer

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, IndexedDtype dtype)
    : prefix_(std::move(prefix)), dtype_(dtype) {}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;  // bin_ removes an unfinished .tmp

Result<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::create(
    const std::string& prefix, IndexedDtype dtype) {
  if (!valid_code(static_cast<uint8_t>(dtype)) || !is_token_dtype(dtype)) {
    return Status::invalid_argument(fmt::format(
        "indexed dataset '{}': dtype code {} cannot hold token ids; hint: uint16 (8) or int32 (4)",
        printable(prefix, 200), static_cast<int>(dtype)));
  }
  std::unique_ptr<IndexedDatasetWriter> w(new IndexedDatasetWriter(prefix, dtype));
  TP_RETURN_IF_ERROR(w->bin_.open(indexed_bin_path(prefix)));
  return w;
}

Status IndexedDatasetWriter::write_bin(const void* data, size_t bytes) {
  return bin_.write(std::string_view(static_cast<const char*>(data), bytes));
}

Status IndexedDatasetWriter::add_document(std::span<const int32_t> tokens,
                                          std::span<const int64_t> sequence_lengths) {
  TP_CHECK(!finished_ && bin_.is_open(), "add_document after finish");
  const int64_t doc = num_documents();
  int64_t sum = 0;
  for (int64_t len : sequence_lengths) {
    if (len < 0 || len > std::numeric_limits<int32_t>::max()) {
      return Status::invalid_argument(fmt::format(
          "'{}': document {}: sequence length {} outside [0, 2^31); hint: split the document",
          printable(prefix_, 200), doc, len));
    }
    sum += len;
  }
  if (sum != static_cast<int64_t>(tokens.size())) {
    return Status::invalid_argument(
        fmt::format("'{}': document {}: sequence lengths add up to {}, the document has {} tokens",
                    printable(prefix_, 200), doc, sum, tokens.size()));
  }
  const IdRange range = id_range(dtype_);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t v = tokens[k];
    if (v < range.lo || v > range.hi) {
      return Status::invalid_argument(fmt::format(
          "'{}': document {}, token {}: id {} does not fit {} [{}, {}]; hint: a vocabulary of "
          "65,500 ids or more needs int32",
          printable(prefix_, 200), doc, k, v, indexed_dtype_name(dtype_), range.lo, range.hi));
    }
  }
  // Converted and written a slice at a time: a huge document costs no second copy.
  constexpr size_t kSliceTokens = size_t{1} << 16;
  const size_t width = static_cast<size_t>(indexed_dtype_size(dtype_));
  for (size_t first = 0; first < tokens.size(); first += kSliceTokens) {
    const size_t count = std::min(kSliceTokens, tokens.size() - first);
    TP_RETURN_IF_ERROR(write_tokens(tokens.subspan(first, count), width));
  }
  for (int64_t len : sequence_lengths) sequence_lengths_.push_back(static_cast<int32_t>(len));
  document_indices_.push_back(num_sequences());
  num_tokens_ += sum;
  return OkStatus();
}

Status IndexedDatasetWriter::write_tokens(std::span<const int32_t> tokens, size_t width) {
  buffer_.resize(tokens.size() * width);
  for (size_t k = 0; k < tokens.size(); ++k) {
    const int32_t v = tokens[k];
    uint8_t* dst = buffer_.data() + k * width;
    switch (width) {
      case 1:
        *dst = static_cast<uint8_t>(v);
        break;
      case 2: {
        const uint16_t u = static_cast<uint16_t>(v);
        std::memcpy(dst, &u, 2);
        break;
      }
      default:
        std::memcpy(dst, &v, 4);
    }
  }
  return write_bin(buffer_.data(), buffer_.size());
}

Status IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  const int64_t len = static_cast<int64_t>(tokens.size());
  return add_document(
      tokens, tokens.empty() ? std::span<const int64_t>() : std::span<const int64_t>(&len, 1));
}

Status IndexedDatasetWriter::finish() {
  TP_CHECK(!finished_ && bin_.is_open(), "finish called twice");
  TP_RETURN_IF_ERROR(bin_.status());
  const uint64_t n = sequence_lengths_.size();
  const uint64_t d1 = document_indices_.size();
  std::string idx;
  idx.reserve(static_cast<size_t>(kHeaderBytes + 12 * n + 8 * d1));
  idx.append(kMagic);
  append<uint64_t>(idx, kVersion);
  append<uint8_t>(idx, static_cast<uint8_t>(dtype_));
  append<uint64_t>(idx, n);
  append<uint64_t>(idx, d1);
  if (n > 0) idx.append(reinterpret_cast<const char*>(sequence_lengths_.data()), 4 * n);
  const int64_t width = indexed_dtype_size(dtype_);
  int64_t pointer = 0;
  for (int32_t len : sequence_lengths_) {
    append<int64_t>(idx, pointer);
    pointer += len * width;
  }
  idx.append(reinterpret_cast<const char*>(document_indices_.data()), 8 * d1);
  // Both files whole before either is renamed: the .idx through its .tmp, then the pair.
  OutputFile idx_file;
  TP_RETURN_IF_ERROR(idx_file.open(indexed_idx_path(prefix_)));
  TP_RETURN_IF_ERROR(idx_file.write(idx));
  TP_RETURN_IF_ERROR(bin_.commit());
  TP_RETURN_IF_ERROR(idx_file.commit());
  finished_ = true;
  return OkStatus();
}

}  // namespace tightpipe
