#include "data/tar_samples.h"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/input_file.h"

namespace tightpipe::data_internal {

namespace fs = std::filesystem;

constexpr int64_t kMaxEntryBytes = int64_t{1} << 30;  // one sample entry; far above any sample

std::optional<std::pair<std::string, std::string>> split_key(std::string_view entry_path) {
  size_t slash = entry_path.rfind('/');
  size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  size_t dot = entry_path.find('.', base);
  if (dot == std::string_view::npos || dot == base || dot + 1 == entry_path.size()) {
    return std::nullopt;
  }
  return std::make_pair(std::string(entry_path.substr(0, dot)),
                        std::string(entry_path.substr(dot + 1)));
}

Result<std::unique_ptr<TarSampleReader>> TarSampleReader::open(const std::string& path) {
  // A FIFO or a device would block or never end inside libarchive: the one input check first.
  TP_ASSIGN_OR_RETURN(const InputFile checked, open_input_file("shard", path, input_kind::kData));
  const int64_t size = checked.size();
  if (size == 0) {
    return Status::corruption(
        "empty file (0 bytes), not a tar archive; hint: remove it or "
        "re-run 'tightpipe data shard'");
  }
  archive* a = archive_read_new();
  TP_CHECK(a != nullptr, "archive_read_new failed");
  archive_read_support_format_tar(a);
  archive_read_support_filter_gzip(a);
  if (archive_read_open_filename(a, path.c_str(), 1 << 16) != ARCHIVE_OK) {
    // The format is sniffed on open: a non-tar file fails here.
    const char* msg = archive_error_string(a);
    // We could stat the file; if we can also read it, the failure is the format's.
    Status s = std::ifstream(path, std::ios::binary).good()
                   ? Status::corruption(fmt::format(
                         "not a tar archive at byte offset 0 ({} bytes): {}; hint: shards are "
                         "written by 'tightpipe data shard' or 'tar -cf'",
                         size, msg ? msg : "?"))
                   : Status::io_error(fmt::format("cannot open: {}", msg ? msg : "?"));
    archive_read_free(a);
    return s;
  }
  return std::unique_ptr<TarSampleReader>(new TarSampleReader(path, a, static_cast<int64_t>(size)));
}

TarSampleReader::~TarSampleReader() { archive_read_free(a_); }

Status TarSampleReader::error_here(std::string_view what) const {
  const char* msg = archive_error_string(a_);
  return Status::corruption(
      fmt::format("{} at byte offset {} (after entry '{}' at byte offset {}): {}", what,
                  next_header_, last_entry_, last_offset_, msg ? msg : "unknown libarchive error"));
}

// libarchive accepts a tar whose end-of-archive marker (two zero blocks) is missing, which is what
// a file cut at an entry boundary looks like. For uncompressed tars we check the marker ourselves.
Status TarSampleReader::check_end_marker() const {
  if (archive_filter_code(a_, 0) != ARCHIVE_FILTER_NONE) return OkStatus();
  int64_t end = archive_filter_bytes(a_, 0);  // just past the marker libarchive consumed
  bool ok = end >= 1024 && end <= file_size_;
  if (ok) {
    std::ifstream in(path_, std::ios::binary);
    in.seekg(end - 1024);
    char buf[1024];
    ok = static_cast<bool>(in.read(buf, sizeof buf));
    for (size_t i = 0; ok && i < sizeof buf; ++i) ok = buf[i] == 0;
  }
  if (ok) return OkStatus();
  return Status::corruption(fmt::format(
      "truncated tar: no end-of-archive marker at byte offset {} (file is {} bytes; last entry "
      "'{}' at byte offset {}); hint: the file was cut short, re-copy or re-write it",
      end, file_size_, last_entry_, last_offset_));
}

Result<bool> TarSampleReader::read_entry() {
  while (true) {
    archive_entry* entry = nullptr;
    int r = archive_read_next_header(a_, &entry);
    if (r == ARCHIVE_EOF) {
      TP_RETURN_IF_ERROR(check_end_marker());
      return false;
    }
    // ARCHIVE_RETRY is a damaged header that libarchive would skip: for us it is corruption.
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      return error_here(archive_format(a_) == 0 ? "not a tar archive" : "bad tar header");
    }
    std::string name = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
    int64_t offset = archive_read_header_position(a_);
    last_entry_ = name;
    last_offset_ = offset;
    auto kx = split_key(name);
    if (archive_entry_filetype(entry) != AE_IFREG || !kx) {
      // Directories, links, names without an extension: not part of any sample.
      if (archive_read_data_skip(a_) != ARCHIVE_OK) return error_here("unreadable entry data");
      next_header_ = archive_filter_bytes(a_, 0);
      continue;
    }
    int64_t size = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : -1;
    // Never trust a header's size for an allocation: bound it by the file (uncompressed) and
    // grow the buffer as data really arrives.
    const bool plain = archive_filter_code(a_, 0) == ARCHIVE_FILTER_NONE;
    if (size < 0 || size > kMaxEntryBytes || (plain && offset + size > file_size_)) {
      return Status::corruption(fmt::format(
          "entry '{}' at byte offset {}: size {} does not fit (file is {} bytes, limit {})", name,
          offset, size, file_size_, kMaxEntryBytes));
    }
    SamplePart part{name, kx->second, offset, std::string()};
    int64_t got = 0;
    while (got < size) {
      part.bytes.resize(static_cast<size_t>(std::min(size, got + (int64_t{1} << 20))));
      la_ssize_t n = archive_read_data(a_, part.bytes.data() + got,
                                       static_cast<size_t>(part.bytes.size() - got));
      if (n < 0) {
        return Status::corruption(fmt::format(
            "entry '{}' at byte offset {}: data unreadable (truncated or damaged) after {} of {} "
            "bytes: {}",
            name, offset, got, size, archive_error_string(a_) ? archive_error_string(a_) : "?"));
      }
      if (n == 0) {
        return Status::corruption(
            fmt::format("entry '{}' at byte offset {}: truncated data, {} of {} bytes present",
                        name, offset, got, size));
      }
      got += n;
    }
    // One more read returns 0 and makes libarchive consume the data and its padding, so the
    // position is where the next header starts.
    char extra;
    if (archive_read_data(a_, &extra, 1) != 0) {
      return Status::corruption(fmt::format(
          "entry '{}' at byte offset {}: more data than its {}-byte size", name, offset, size));
    }
    next_header_ = archive_filter_bytes(a_, 0);
    pending_key_ = std::move(kx->first);
    pending_ = std::move(part);
    return true;
  }
}

Result<std::optional<RawSample>> TarSampleReader::next() {
  if (done_) return std::optional<RawSample>();
  if (!pending_) {
    TP_ASSIGN_OR_RETURN(bool more, read_entry());
    if (!more) {
      done_ = true;
      if (samples_read_ == 0) {
        return Status::corruption(fmt::format(
            "tar archive holds no samples ({} bytes; entries need a 'key.ext' name)", file_size_));
      }
      return std::optional<RawSample>();
    }
  }
  RawSample sample;
  sample.key = pending_key_;
  sample.parts.push_back(std::move(*pending_));
  pending_.reset();
  while (true) {
    TP_ASSIGN_OR_RETURN(bool more, read_entry());
    if (!more) {
      done_ = true;
      break;
    }
    if (pending_key_ != sample.key) break;
    for (const SamplePart& p : sample.parts) {
      if (p.extension == pending_->extension) {
        return Status::corruption(fmt::format(
            "entry '{}' at byte offset {}: duplicate '.{}' in sample '{}' (first at byte offset "
            "{})",
            pending_->name, pending_->offset, p.extension, sample.key, p.offset));
      }
    }
    sample.parts.push_back(std::move(*pending_));
    pending_.reset();
  }
  ++samples_read_;
  return std::optional<RawSample>(std::move(sample));
}

namespace {
Status part_error(const SamplePart& p, std::string_view what) {
  return Status::corruption(
      fmt::format("entry '{}' at byte offset {}: {}", p.name, p.offset, what));
}
}  // namespace

Result<std::vector<int32_t>> decode_sample(const RawSample& sample, int32_t vocab_size) {
  const SamplePart* tokens = nullptr;
  const SamplePart* txt = nullptr;
  const SamplePart* meta = nullptr;
  std::vector<std::string> seen;
  for (const SamplePart& p : sample.parts) {
    seen.push_back(p.extension);
    if (p.extension == "tokens") tokens = &p;
    if (p.extension == "txt") txt = &p;
    if (p.extension == "json") meta = &p;
  }
  std::vector<int32_t> ids;
  if (tokens) {
    std::string dtype = "uint16";
    if (meta) {
      nlohmann::json j = nlohmann::json::parse(meta->bytes, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) return part_error(*meta, "not a JSON object");
      if (j.contains("dtype")) {
        if (!j["dtype"].is_string()) return part_error(*meta, "\"dtype\" is not a string");
        dtype = j["dtype"].get<std::string>();
      }
    }
    size_t width = dtype == "uint16" ? 2 : (dtype == "int32" || dtype == "uint32") ? 4 : 0;
    if (width == 0) {
      return part_error(*meta,
                        fmt::format("unknown dtype '{}'; hint: uint16, int32 or uint32", dtype));
    }
    const std::string& b = tokens->bytes;
    if (b.size() % width != 0) {
      return part_error(*tokens, fmt::format("{} bytes is not a multiple of {} (dtype {})",
                                             b.size(), width, dtype));
    }
    ids.resize(b.size() / width);
    const auto* u = reinterpret_cast<const unsigned char*>(b.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      uint32_t v = 0;
      for (size_t k = 0; k < width; ++k) v |= uint32_t{u[i * width + k]} << (8 * k);
      if (v >= static_cast<uint32_t>(vocab_size)) {
        return part_error(*tokens, fmt::format("token {} at index {} is outside the vocabulary "
                                               "(size {})",
                                               v, i, vocab_size));
      }
      ids[i] = static_cast<int32_t>(v);
    }
  } else if (txt) {
    if (vocab_size < kByteVocabSize) {
      return part_error(
          *txt, fmt::format("the byte tokenizer needs vocab_size >= 256, got {}", vocab_size));
    }
    ids = byte_tokenize(txt->bytes);
  } else {
    return part_error(sample.parts.front(),
                      fmt::format("sample '{}' has no .tokens or .txt entry (has: {})", sample.key,
                                  join(seen, ", ")));
  }
  return ids;  // may be empty (an empty .txt): the loader drops it
}

}  // namespace tightpipe::data_internal
